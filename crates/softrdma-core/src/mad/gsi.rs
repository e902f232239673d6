//! [`GsiPort`]: a [`MadAgent`] on a [`Stack`]'s QP1, through the ordinary verbs — the way
//! the kernel's mad.c drives its GSI QP (`ib_mad_port_open`: a PD, a CQ, QP1 taken to RTS
//! with Q_Key 0x80010000, a ring of 256-byte receive buffers behind a 40-byte GRH area).
//!
//! Every MAD the agent hands out becomes one UD SEND WR (so a retransmission takes the next
//! BTH PSN, as the captures show); every receive completion gives the agent the MAD after the
//! GRH area and the sender's GID (from the GRH area) and QP (`wc.src_qp`), and the receive
//! buffer is reposted (`ib_mad_post_receive_mads`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use softrdma_wire::mad::MAD_LEN;
use softrdma_wire::Gid;

use super::{MadAddr, MadAgent};
use crate::time::Instant;
use crate::transport::ud::GRH_LEN;
use crate::transport::Stack;
use crate::verbs::{
    steps_to_rts, AccessFlags, AddressVector, CqId, MrKeys, PdId, QpAttr, QpCap, QpInitAttr,
    QpType, RecvWr, SendOp, SendWr, Sge, UdDest, VerbsError, WcOpcode, WcStatus, GSI_QKEY, GSI_QPN,
};

/// ib_mad's default queue sizes (`mad_sendq_size` 128, `mad_recvq_size` 512).
pub const SEND_QUEUE_SIZE: u32 = 128;
pub const RECV_QUEUE_SIZE: u32 = 512;

/// Bytes of one receive slot: the GRH area and one MAD.
const RECV_SLOT: usize = GRH_LEN + MAD_LEN;
/// Where the MR starts (an arbitrary IOVA).
const IOVA: u64 = 0x4000_0000;
/// wr_ids of receives carry this bit (sends do not).
const RECV_TAG: u64 = 1 << 63;

/// The source GID index for a MAD to `dgid` (the kernel answers from the GID of the route
/// to the peer): a RoCEv2 entry of the same network — for IPv4, the first IPv4-mapped
/// entry; for IPv6, one on the destination's /64, else the first non-link-local one (the
/// link-local one only for a link-local peer). On a device with a MAC, index 0 is the
/// link-local GID, which an IPv4 peer cannot be answered from.
fn sgid_for(stack: &Stack, dgid: &Gid) -> u16 {
    let Ok(port) = stack.device.port(crate::device::PORT_NUM) else {
        return 0;
    };
    let v2 = || {
        port.gids
            .entries()
            .iter()
            .filter(|e| e.gid_type == crate::device::GidType::RoceV2)
    };
    let link_local = |g: &Gid| g.0[0] == 0xfe && g.0[1] & 0xc0 == 0x80;
    let pick = if dgid.to_ipv4().is_some() {
        v2().find(|e| e.gid.to_ipv4().is_some())
    } else {
        v2().find(|e| e.gid.to_ipv4().is_none() && e.gid.0[..8] == dgid.0[..8])
            .or_else(|| {
                v2().find(|e| e.gid.to_ipv4().is_none() && !link_local(&e.gid) && !link_local(dgid))
            })
            .or_else(|| v2().find(|e| e.gid.to_ipv4().is_none()))
    };
    pick.map(|e| e.index).unwrap_or(0)
}

/// QP1 of one stack, with its buffers.
#[derive(Clone, Debug)]
pub struct GsiPort {
    pub pd: PdId,
    pub cq: CqId,
    pub mr: MrKeys,
    recv_slots: u32,
    send_slots: u32,
    next_send: u32,
    /// Send WRs that failed to post or completed in error.
    pub send_errors: u64,
    /// Receive completions in error (the QP left RTS).
    pub recv_errors: u64,
}

impl GsiPort {
    /// Creates QP1 on `stack`, takes it to RTS (SQ PSN 0, like the kernel's QP1) and posts
    /// `recv_depth` receive buffers (the kernel posts [`RECV_QUEUE_SIZE`]).
    pub fn open(stack: &mut Stack, recv_depth: u32) -> Result<GsiPort, VerbsError> {
        let recv_slots = recv_depth.max(1);
        let send_slots = SEND_QUEUE_SIZE;
        let pd = stack.verbs.alloc_pd()?;
        let cq = stack.verbs.create_cq(recv_slots + send_slots)?;
        let len = (recv_slots as usize) * RECV_SLOT + (send_slots as usize) * MAD_LEN;
        let mr = stack
            .verbs
            .reg_mr(pd, len, IOVA, AccessFlags::LOCAL_WRITE)?;
        let (qpn, _) = stack.verbs.create_qp(QpInitAttr {
            qp_type: QpType::Gsi,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: send_slots,
                max_recv_wr: recv_slots,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })?;
        debug_assert_eq!(qpn, GSI_QPN);
        let attr = QpAttr {
            qkey: GSI_QKEY,
            sq_psn: 0,
            ..QpAttr::default()
        };
        for (a, mask) in steps_to_rts(QpType::Gsi, &attr) {
            stack.modify_qp(qpn, &a, mask)?;
        }
        let port = GsiPort {
            pd,
            cq,
            mr,
            recv_slots,
            send_slots,
            next_send: 0,
            send_errors: 0,
            recv_errors: 0,
        };
        for slot in 0..recv_slots {
            port.post_recv(stack, slot)?;
        }
        Ok(port)
    }

    fn recv_addr(&self, slot: u32) -> u64 {
        IOVA + u64::from(slot) * RECV_SLOT as u64
    }

    fn send_addr(&self, slot: u32) -> u64 {
        IOVA + u64::from(self.recv_slots) * RECV_SLOT as u64 + u64::from(slot) * MAD_LEN as u64
    }

    fn post_recv(&self, stack: &mut Stack, slot: u32) -> Result<(), VerbsError> {
        let sge = Sge {
            addr: self.recv_addr(slot),
            length: RECV_SLOT as u32,
            lkey: self.mr.lkey,
        };
        stack.post_recv(GSI_QPN, RecvWr::new(RECV_TAG | u64::from(slot), vec![sge]))
    }

    /// Posts every MAD the agent has to send; returns how many went out.
    pub fn flush(&mut self, stack: &mut Stack, agent: &mut MadAgent) -> usize {
        let mut n = 0;
        while let Some(o) = agent.poll_transmit() {
            let slot = self.next_send;
            self.next_send = (self.next_send + 1) % self.send_slots;
            let addr = self.send_addr(slot);
            let bytes = o.mad.to_bytes();
            if stack.verbs.local_write(self.mr.lkey, addr, &bytes).is_err() {
                self.send_errors += 1;
                continue;
            }
            let dest = UdDest {
                av: AddressVector {
                    dgid: o.dest.gid,
                    sgid_index: sgid_for(stack, &o.dest.gid),
                    traffic_class: o.dest.traffic_class,
                    ..AddressVector::default()
                },
                remote_qpn: o.dest.qpn,
                remote_qkey: o.dest.qkey,
            };
            let mut wr = SendWr::new(u64::from(slot), SendOp::Send);
            // Unsignaled: nothing waits for a MAD send's completion (a UD send is built at
            // post), and the CQ's entries are then the posted receives' alone. Signaled, a
            // burst of sends between two polls (a server accepting a thousand connections in
            // a row) overflowed the CQ and the receive completions behind it were lost with
            // their MADs and buffers: the peers retransmitted for seconds. A send that fails
            // still completes, in error.
            wr.signaled = false;
            let wr = wr
                .with_sge(Sge {
                    addr,
                    length: MAD_LEN as u32,
                    lkey: self.mr.lkey,
                })
                .with_ud(dest);
            match stack.post_send(GSI_QPN, wr) {
                Ok(()) => n += 1,
                Err(_) => self.send_errors += 1,
            }
        }
        n
    }

    /// Takes the completions of QP1: receives go to the agent (and their buffers are
    /// reposted); send errors are counted. Returns the MADs given to the agent.
    pub fn poll(&mut self, now: Instant, stack: &mut Stack, agent: &mut MadAgent) -> usize {
        let mut n = 0;
        while let Ok(Some(wc)) = stack.poll_cq(self.cq) {
            if wc.wr_id & RECV_TAG == 0 || wc.opcode != WcOpcode::Recv {
                if wc.status != WcStatus::Success {
                    self.send_errors += 1;
                }
                continue;
            }
            let slot = (wc.wr_id & !RECV_TAG) as u32;
            if wc.status != WcStatus::Success {
                // A flushed receive: the QP is in error; nothing to repost into.
                self.recv_errors += 1;
                continue;
            }
            let len = (wc.byte_len as usize).min(RECV_SLOT);
            let mut buf = vec![0u8; len];
            if stack
                .verbs
                .local_read(self.mr.lkey, self.recv_addr(slot), &mut buf)
                .is_ok()
            {
                let from = MadAddr {
                    gid: grh_source(&buf),
                    qpn: wc.src_qp,
                    qkey: GSI_QKEY,
                    pkey_index: wc.pkey_index,
                    traffic_class: 0,
                };
                agent.handle_receive(now, from, buf.get(GRH_LEN..).unwrap_or(&[]));
                n += 1;
            }
            if self.post_recv(stack, slot).is_err() {
                self.recv_errors += 1;
            }
        }
        n
    }
}

/// The source GID in a receive buffer's GRH area (rxe's layout: IPv4 header at byte 20, or
/// an IPv6 header at 0; see [`crate::transport::ud::grh_area`]).
pub fn grh_source(buf: &[u8]) -> Gid {
    if buf.get(20).is_some_and(|b| b >> 4 == 4) && buf.get(..20).is_some_and(|z| z == [0; 20]) {
        if let Some(s) = buf.get(32..36) {
            return Gid::from(IpAddr::V4(Ipv4Addr::new(s[0], s[1], s[2], s[3])));
        }
    }
    if buf.first().is_some_and(|b| b >> 4 == 6) {
        if let Some(s) = buf.get(8..24).and_then(|s| <[u8; 16]>::try_from(s).ok()) {
            return Gid::from(IpAddr::V6(Ipv6Addr::from(s)));
        }
    }
    Gid::ZERO
}
