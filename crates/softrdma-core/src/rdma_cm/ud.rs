//! UD ids over SIDR (`cma_resolve_ib_udp`, `cma_sidr_rep_handler`, `cma_send_sidr_rep`,
//! `cma_ib_new_udp_id`) and the reply address of a received datagram
//! (`ibv_init_ah_from_wc`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use softrdma_wire::cm::{SidrRepRepr, SidrReqRepr, SidrStatus};
use softrdma_wire::rdma_cm::{service_id, IpCmHeader, PortSpace};
use softrdma_wire::Gid;

use super::{
    roce_udp_flow_label, CmaState, ConnParam, Ece, RdmaCm, RdmaCmError, RdmaCmEvent, RdmaCmId,
    RdmaId, UdParam, CMA_CM_RESPONSE_TIMEOUT, CMA_MAX_CM_RETRIES, EINVAL,
};
use crate::cm::{CmId, SidrRepParams, SidrReqParams};
use crate::device::{GidType, PORT_NUM};
use crate::mad::MadAddr;
use crate::time::{Duration, Instant};
use crate::transport::Stack;
use crate::verbs::{AddressVector, QpAttr, QpAttrMask, QpState, WorkCompletion};

/// `RDMA_UDP_QKEY`: the Q_Key of UDP- and IB-space UD ids unless the consumer names one.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// A SIDR REQ's wait per try, `1 << (CMA_CM_RESPONSE_TIMEOUT - 8)` ms (4.096 s; 15 retries).
pub const SIDR_TIMEOUT_MS: u64 = 1 << (CMA_CM_RESPONSE_TIMEOUT - 8);

/// `cma_set_qkey(id, 0)`'s default for a space: UDP and IB [`RDMA_UDP_QKEY`]; IPoIB's would
/// come from the SA's broadcast group (none on RoCE), TCP has none.
pub(super) fn default_qkey(ps: PortSpace) -> Option<u32> {
    matches!(ps, PortSpace::UDP | PortSpace::IB).then_some(RDMA_UDP_QKEY)
}

/// `cma_init_ud_qp`: INIT (P_Key index 0, port 1, Q_Key), RTR, RTS with SQ PSN 0.
pub(super) fn init_ud_qp(stack: &mut Stack, qpn: u32, qkey: u32) -> Result<(), RdmaCmError> {
    let init = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: PORT_NUM,
        qkey,
        ..QpAttr::default()
    };
    stack.modify_qp(
        qpn,
        &init,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
    )?;
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ..QpAttr::default()
    };
    stack.modify_qp(qpn, &rtr, QpAttrMask::STATE)?;
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 0,
        ..QpAttr::default()
    };
    stack.modify_qp(qpn, &rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN)?;
    Ok(())
}

/// `ibv_init_ah_from_wc` on RoCEv2: the address vector that answers a received UD
/// datagram, from the 40-byte GRH area at the start of its receive buffer (rxe's layout: an
/// IPv4 header at byte 20 behind 20 zero bytes, or an IPv6 header). The destination is the
/// datagram's source, the source GID index the one holding its destination, hop limit and
/// traffic class the IP header's. `None` without a GRH, for a multicast destination, or
/// when no RoCEv2 GID of the port holds the destination.
pub fn init_ah_from_wc(stack: &Stack, wc: &WorkCompletion, grh: &[u8]) -> Option<AddressVector> {
    if !wc.grh || grh.len() < 40 {
        return None;
    }
    let v4 = grh[20] >> 4 == 4 && grh[..20].iter().all(|&b| b == 0);
    let (src, dst, hop_limit, traffic_class, flow_label) = if v4 {
        let s = Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35]);
        let d = Ipv4Addr::new(grh[36], grh[37], grh[38], grh[39]);
        if d.is_multicast() {
            return None;
        }
        (IpAddr::V4(s), IpAddr::V4(d), grh[28], grh[21], 0)
    } else if grh[0] >> 4 == 6 {
        if grh[24] == 0xff || grh[6] != 17 {
            return None;
        }
        let vtf = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
        let mut s = [0u8; 16];
        s.copy_from_slice(&grh[8..24]);
        let mut d = [0u8; 16];
        d.copy_from_slice(&grh[24..40]);
        (
            IpAddr::V6(Ipv6Addr::from(s)),
            IpAddr::V6(Ipv6Addr::from(d)),
            grh[7],
            ((vtf >> 20) & 0xff) as u8,
            vtf & 0xf_ffff,
        )
    } else {
        return None;
    };
    let sgid_index = stack
        .device
        .find_gid(PORT_NUM, &Gid::from(dst), GidType::RoceV2)
        .ok()?;
    Some(AddressVector {
        dgid: Gid::from(src),
        sgid_index,
        hop_limit,
        traffic_class,
        flow_label,
        sl: 0,
        port_num: PORT_NUM,
    })
}

impl RdmaCm {
    /// `cma_resolve_ib_udp`: the SIDR REQ with the IP header (none for AF_IB) and the
    /// consumer's data.
    pub(super) fn connect_ud(
        &mut self,
        now: Instant,
        id: &RdmaCmId,
        qpn: Option<u32>,
        data: &[u8],
    ) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let (Some(port), Some(local), Some(remote)) = (i.port, i.local, i.remote) else {
            return Err(RdmaCmError::InvalidState);
        };
        if data.len() + i.data_offset() > softrdma_wire::cm::SIDR_REQ_PRIVATE_DATA_LEN {
            return Err(RdmaCmError::TooLong);
        }
        let ps = i.ps;
        let mut pd = if i.ib {
            Vec::new()
        } else {
            IpCmHeader::new(local.ip(), local.port(), remote.ip()).to_bytes()
        };
        pd.extend_from_slice(data);
        let tc = i.route.map(|r| r.traffic_class).unwrap_or(0);
        let p = SidrReqParams {
            port,
            peer: MadAddr::gsi(Gid::from(remote.ip())).with_traffic_class(tc),
            service_id: service_id(ps, remote.port()),
            partition_key: 0xffff,
            private_data: pd,
            timeout: Duration::from_millis(SIDR_TIMEOUT_MS),
            max_cm_retries: CMA_MAX_CM_RETRIES,
        };
        let cm = self.cm.create_id();
        if let Err(e) = self.cm.sidr_req(now, &cm, &p) {
            self.cm.destroy(now, cm);
            return Err(e.into());
        }
        self.by_cm.insert(cm.local_comm_id(), id.0);
        let i = self.id_mut(id)?;
        i.cm = Some(cm);
        i.qpn = qpn;
        if i.qkey == 0 {
            i.qkey = default_qkey(ps).unwrap_or(0);
        }
        i.state = CmaState::Connect;
        Ok(())
    }

    /// `cma_set_qkey(id, qkey)`: an id's Q_Key is set once; a different one is `-EINVAL`.
    pub(super) fn set_qkey(&mut self, id: u32, qkey: u32) -> Result<u32, RdmaCmError> {
        let i = self.ids.get_mut(&id).ok_or(RdmaCmError::NoSuchId)?;
        if i.qkey != 0 {
            if qkey != 0 && qkey != i.qkey {
                return Err(RdmaCmError::Invalid);
            }
            return Ok(i.qkey);
        }
        i.qkey = if qkey != 0 {
            qkey
        } else {
            default_qkey(i.ps).ok_or(RdmaCmError::Invalid)?
        };
        Ok(i.qkey)
    }

    /// `rdma_accept` of a UD id (`cma_send_sidr_rep`): SIDR REP status 0 with `qpn` and the
    /// Q_Key — `qkey`, or 0 for the id's own ([`super::RDMA_UDP_QKEY`] unless set).
    pub fn accept_ud(
        &mut self,
        now: Instant,
        id: &RdmaCmId,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        if i.state != CmaState::Connect || i.cm.is_none() {
            return Err(RdmaCmError::InvalidState);
        }
        if private_data.len() > softrdma_wire::cm::SIDR_REP_PRIVATE_DATA_LEN {
            return Err(RdmaCmError::TooLong);
        }
        let qkey = self.set_qkey(id.0, qkey)?;
        let p = SidrRepParams {
            status: SidrStatus::SUCCESS,
            qp_num: qpn,
            qkey,
            info: Vec::new(),
            private_data: private_data.to_vec(),
        };
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let cm = i.cm.as_ref().ok_or(RdmaCmError::InvalidState)?;
        self.cm.sidr_rep(now, cm, &p)?;
        self.id_mut(id)?.qpn = Some(qpn);
        Ok(())
    }

    /// `rdma_reject` of a UD id: SIDR REP status 2 (rejected) with the private data.
    pub(super) fn reject_ud(
        &mut self,
        now: Instant,
        id: RdmaCmId,
        private_data: &[u8],
    ) -> Result<(), (RdmaCmId, RdmaCmError)> {
        if private_data.len() > softrdma_wire::cm::SIDR_REP_PRIVATE_DATA_LEN {
            return Err((id, RdmaCmError::TooLong));
        }
        let Some(cm) = self.ids.get(&id.0).and_then(|i| i.cm.as_ref()) else {
            return Err((id, RdmaCmError::InvalidState));
        };
        let p = SidrRepParams {
            status: SidrStatus::REJECT,
            private_data: private_data.to_vec(),
            ..SidrRepParams::default()
        };
        if let Err(e) = self.cm.sidr_rep(now, cm, &p) {
            return Err((id, e.into()));
        }
        self.destroy(now, id);
        Ok(())
    }

    /// `cma_ib_req_handler` for a SIDR REQ on one of our listeners.
    pub(super) fn on_sidr_req(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        cm: CmId,
        req: &SidrReqRepr,
        peer: &MadAddr,
    ) {
        let Some(port) = self.cm.port_of(cm.as_ref()) else {
            self.cm.destroy(now, cm);
            return;
        };
        // A SIDR REQ has no path: our GID is the port's of the sender's family.
        let ours = self
            .ports
            .get(port.index())
            .and_then(|p| {
                p.addrs
                    .iter()
                    .find(|a| a.is_ipv4() == peer.gid.to_ip().is_ipv4())
            })
            .map(|a| Gid::from(*a))
            .unwrap_or(Gid::ZERO);
        let sid = req.service_id;
        let found = self.incoming(sid, &req.private_data, (ours, peer.gid), port, true);
        let Some((l, inc, cm)) = self.admit_request(now, stack, sid, found, cm) else {
            return;
        };
        let data = inc.data.to_vec();
        let r = self.new_passive(l, cm, &inc, Ece::default());
        self.events.push_back(RdmaCmEvent::ConnectRequest {
            new_id: RdmaCmId(r),
            listen_id: RdmaId(l),
            private_data: data,
            param: ConnParam::default(),
            ece: Ece::default(),
        });
    }

    /// `cma_sidr_rep_handler`: ESTABLISHED with the peer's AH (from the route), QPN and
    /// Q_Key; UNREACHABLE with the SIDR status; ADDR_ERROR `-EINVAL` for a Q_Key other than
    /// the id's.
    pub(super) fn on_sidr_rep(&mut self, stack: Option<&mut Stack>, r: u32, rep: &SidrRepRepr) {
        let Some(i) = self.ids.get(&r) else { return };
        if i.state != CmaState::Connect {
            return;
        }
        let (local, remote, route) = (i.local, i.remote, i.route);
        if rep.status != SidrStatus::SUCCESS {
            self.events.push_back(RdmaCmEvent::Unreachable {
                id: RdmaId(r),
                status: i32::from(rep.status.0),
                private_data: rep.private_data.to_vec(),
            });
            return;
        }
        if self.set_qkey(r, rep.qkey).is_err() {
            self.events.push_back(RdmaCmEvent::AddrError {
                id: RdmaId(r),
                status: EINVAL,
            });
            return;
        }
        let (Some(local), Some(remote)) = (local, remote) else {
            return;
        };
        let sgid_index = stack
            .and_then(|s| {
                s.device
                    .find_gid(PORT_NUM, &Gid::from(local.ip()), GidType::RoceV2)
                    .ok()
            })
            .unwrap_or(0);
        let ah = AddressVector {
            dgid: Gid::from(remote.ip()),
            sgid_index,
            hop_limit: route.map(|r| r.hop_limit).unwrap_or(super::ROCE_HOP_LIMIT),
            traffic_class: route.map(|r| r.traffic_class).unwrap_or(0),
            flow_label: roce_udp_flow_label(local.port(), remote.port()),
            sl: 0,
            port_num: PORT_NUM,
        };
        self.events.push_back(RdmaCmEvent::Established {
            id: RdmaId(r),
            private_data: rep.private_data.to_vec(),
            param: ConnParam::default(),
            ece: Ece::default(),
            ud: Some(UdParam {
                ah,
                qp_num: rep.qpn,
                qkey: rep.qkey,
            }),
        });
    }
}
