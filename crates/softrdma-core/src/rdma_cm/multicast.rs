//! Multicast on an RDMA CM id, as Linux 6.1 does it on a RoCEv2 port (`cma.c`:
//! `rdma_join_multicast`, `cma_iboe_join_multicast`, `cma_iboe_set_mgid`, `cma_make_mc_event`,
//! `rdma_leave_multicast`).
//!
//! - A join is allowed on a UD id (UDP or IPoIB port space) that is bound to a device:
//!   ADDR_BOUND or ADDR_RESOLVED (`-EINVAL` otherwise), for a non-zero address.
//! - The IPv4 group address maps to the MGID `::ffff:a.b.c.d` (for RoCEv2 GIDs
//!   `cma_iboe_set_mgid` writes zeros where a RoCEv1 MGID has `ff0e`), so the MGID *is* the
//!   group's RoCEv2 GID and a UD send to it leaves for the IP group address. An IPv6 group on
//!   a RoCEv2 port is `-ENOTSUPP` (524) in 6.1 ([`JoinError::NotSupported`]).
//! - There is no SA on RoCE: the join completes at once with MULTICAST_JOIN, whose
//!   `param.ud` is `ib_init_ah_from_mcmember`'s: the AH to the MGID from the id's source GID,
//!   hop limit 64 (`IPV6_DEFAULT_HOPLIMIT` for an IPv4 group on RoCEv2), traffic class and
//!   flow label 0, SL 0; the remote QPN 0xFFFFFF and the Q_Key [`super::RDMA_UDP_QKEY`]
//!   for the UDP port space (0 for IPoIB); the id's own Q_Key is set to the default if it
//!   was not.
//! - A full member also joins the IP group on the device's interface (`cma_igmp_send`);
//!   a send-only full member does not. That join is the driver's (a socket's
//!   `IP_ADD_MEMBERSHIP`): [`RdmaCm::join_multicast`] says whether it is needed, and a
//!   failure there is the caller's to report (the join then fails with its errno).
//! - The UD QP's attachment (`ibv_attach_mcast` with the MGID) is librdmacm's, when it hands
//!   the MULTICAST_JOIN event over; leaving detaches it first.

use std::net::IpAddr;

use softrdma_wire::Gid;

use super::{
    CmaState, PortSpace, RdmaCm, RdmaCmError, RdmaCmEvent, RdmaCmId, UdParam, RDMA_UDP_QKEY,
};
use crate::device::{GidType, PORT_NUM};
use crate::transport::mcast::MULTICAST_QPN;
use crate::transport::Stack;
use crate::verbs::AddressVector;

/// The hop limit of an IPv4 group's AH on RoCEv2 (`IPV6_DEFAULT_HOPLIMIT`).
pub const MC_HOP_LIMIT: u8 = 64;

/// `rdma_join_multicast_ex`'s join state (`RDMA_MC_JOIN_FLAG_*`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum JoinFlags {
    /// `RDMA_MC_JOIN_FLAG_FULLMEMBER` (what `rdma_join_multicast` does).
    FullMember,
    /// `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`: may send to the group, does not hear it.
    SendOnlyFullMember,
}

/// Why a join or leave was refused.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum JoinError {
    /// The RDMA CM refused (unknown id, wrong state or QP type: `-EINVAL`, ...).
    Rdma(RdmaCmError),
    /// An IPv6 group on a RoCEv2 port (`-ENOTSUPP`).
    NotSupported,
    /// `rdma_leave_multicast` of a group the id did not join (`-EADDRNOTAVAIL`).
    NotJoined,
}

impl From<RdmaCmError> for JoinError {
    fn from(e: RdmaCmError) -> JoinError {
        JoinError::Rdma(e)
    }
}

/// One group an id joined.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Membership {
    /// The group's address as the program named it.
    pub addr: IpAddr,
    /// Its MGID.
    pub mgid: Gid,
    pub flags: JoinFlags,
}

impl Membership {
    /// Whether the device's interface must hear the group (IGMP join / leave).
    pub fn joins_interface(&self) -> bool {
        self.flags == JoinFlags::FullMember
    }
}

/// The MGID of an IP group on a RoCEv2 port (`cma_iboe_set_mgid`); `None` for a group that
/// has none there (IPv6, the wildcard).
pub fn mgid_of(addr: IpAddr) -> Option<Gid> {
    match addr {
        IpAddr::V4(v4) if !v4.is_unspecified() => Some(Gid::from(addr)),
        _ => None,
    }
}

impl RdmaCm {
    /// `rdma_join_multicast_ex`: records the membership of `id` in group `addr` and queues
    /// MULTICAST_JOIN (see the module docs). The caller joins the device's interface to the
    /// group when [`Membership::joins_interface`] says so, and undoes this
    /// ([`RdmaCm::leave_multicast`]) if that fails.
    pub fn join_multicast(
        &mut self,
        stack: Option<&Stack>,
        id: &RdmaCmId,
        addr: IpAddr,
        flags: JoinFlags,
    ) -> Result<Membership, JoinError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        if !matches!(i.state, CmaState::AddrBound | CmaState::AddrResolved) || i.port.is_none() {
            return Err(RdmaCmError::InvalidState.into());
        }
        if !i.qp_type.is_datagram() || addr.is_unspecified() {
            return Err(RdmaCmError::Invalid.into());
        }
        if addr.is_ipv6() {
            return Err(JoinError::NotSupported);
        }
        let mgid = mgid_of(addr).ok_or(RdmaCmError::Invalid)?;
        if self
            .joins
            .iter()
            .any(|(owner, m)| *owner == id.0 && m.addr == addr)
        {
            return Err(RdmaCmError::AddrInUse.into());
        }
        let ps = i.ps;
        let local = i.local;
        if i.qkey == 0 {
            // cma_set_default_qkey.
            self.set_qkey(id.0, 0)?;
        }
        let sgid_index = match (stack, local) {
            (Some(s), Some(l)) => s
                .device
                .find_gid(PORT_NUM, &Gid::from(l.ip()), GidType::RoceV2)
                .unwrap_or(0),
            _ => 0,
        };
        let m = Membership { addr, mgid, flags };
        self.joins.push((id.0, m));
        let e = RdmaCmEvent::MulticastJoin {
            id: id.name(),
            ud: UdParam {
                ah: AddressVector {
                    dgid: mgid,
                    sgid_index,
                    hop_limit: MC_HOP_LIMIT,
                    traffic_class: 0,
                    flow_label: 0,
                    sl: 0,
                    port_num: PORT_NUM,
                },
                qp_num: MULTICAST_QPN,
                qkey: if ps == PortSpace::UDP {
                    RDMA_UDP_QKEY
                } else {
                    0
                },
            },
        };
        self.events.push_back(e);
        Ok(m)
    }

    /// `rdma_leave_multicast`: forgets the membership (the caller leaves the interface's
    /// group when it joined it, and detaches the id's QP).
    pub fn leave_multicast(
        &mut self,
        id: &RdmaCmId,
        addr: IpAddr,
    ) -> Result<Membership, JoinError> {
        if !self.ids.contains_key(&id.0) {
            return Err(RdmaCmError::NoSuchId.into());
        }
        let at = self
            .joins
            .iter()
            .position(|(owner, m)| *owner == id.0 && m.addr == addr)
            .ok_or(JoinError::NotJoined)?;
        Ok(self.joins.remove(at).1)
    }

    /// Every group `id` is in (what destroying it leaves: `cma_leave_mc_groups`).
    pub fn memberships(&self, id: &RdmaCmId) -> Vec<Membership> {
        self.joins
            .iter()
            .filter(|(owner, _)| *owner == id.0)
            .map(|(_, m)| *m)
            .collect()
    }

    /// Whether another id of this CM still wants the device of `id` to hear `addr` (the
    /// interface leaves a group with its last full member).
    pub fn group_in_use(&self, addr: IpAddr) -> bool {
        self.joins
            .iter()
            .any(|(_, m)| m.addr == addr && m.joins_interface())
    }
}
