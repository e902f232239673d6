//! ECN for RoCEv2 (issue 21): what a RoCEv2 NIC with DCQCN does, in its three roles.
//!
//! - **Marking ECT.** With congestion control on, an RC QP's packets leave with ECT(0) in
//!   the IP header's ECN field ([`with_ect`]), telling the switches on the path that this
//!   flow understands congestion marks. Off, the TOS byte is the address vector's traffic
//!   class untouched (what rxe sends: it never sets ECT).
//! - **Notification point** (the receiver): a request packet that arrives marked CE draws a
//!   CNP — BTH opcode 0x81 to the QP that sent it, BECN set, PSN 0, 16 reserved bytes
//!   (IBTA Annex A17.9.2; what mlx5 sends and Wireshark's `packet-infiniband.c` decodes as
//!   "CNP") — at most one per [`CNP_INTERVAL`] per QP ([`NotificationPoint`]). A CE mark is
//!   only ever set on a packet that was ECT, so a peer that never sets ECT (the kernel's rxe,
//!   which also drops opcode 0x81) never gets a CNP.
//! - **Reaction point** (the sender): a CNP for a QP whose packets we marked ECT goes to its
//!   controller's DCQCN reaction (`cc::Cc::on_cnp`); any other CNP (congestion control off,
//!   a QP that is not RC) is dropped and counted (`drop_cnp`).
//!
//! DCQCN: Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015.

use std::net::IpAddr;

use softrdma_wire::roce::{BthRepr, Opcode, Psn, RoceRepr};

use super::emit::{self, Transmit};
use crate::time::{Duration, Instant};

/// The ECN field's codepoints (RFC 3168), the low two bits of the TOS / traffic class.
pub const ECN_MASK: u8 = 0b11;
pub const NOT_ECT: u8 = 0b00;
pub const ECT1: u8 = 0b01;
pub const ECT0: u8 = 0b10;
pub const CE: u8 = 0b11;

/// The least time between two CNPs for one QP (DCQCN's N, 50 µs in the paper).
pub const CNP_INTERVAL: Duration = Duration::from_micros(50);

/// BTH byte 4's BECN bit (FECN is bit 7): a CNP carries BECN.
pub const BTH_BECN: u8 = 0x40;

/// The reserved bytes after a CNP's BTH.
pub const CNP_RESERVED: [u8; 16] = [0; 16];

/// `tos` with ECT(0) in its ECN field (the DSCP bits kept).
pub const fn with_ect(tos: u8) -> u8 {
    (tos & !ECN_MASK) | ECT0
}

/// `tos` with its ECN field cleared (what a CNP, a control packet, carries).
pub const fn without_ecn(tos: u8) -> u8 {
    tos & !ECN_MASK
}

/// Whether an ECN field says CE.
pub const fn is_ce(ecn: u8) -> bool {
    ecn & ECN_MASK == CE
}

/// A responder QP's notification-point state: when it last sent a CNP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotificationPoint {
    last_cnp: Option<Instant>,
}

impl NotificationPoint {
    /// A CE-marked request arrived at `now`: whether to answer it with a CNP (one per
    /// [`CNP_INTERVAL`]).
    pub fn on_ce(&mut self, now: Instant) -> bool {
        if self
            .last_cnp
            .is_some_and(|t| now.saturating_duration_since(t) < CNP_INTERVAL)
        {
            return false;
        }
        self.last_cnp = Some(now);
        true
    }
}

/// The CNP to `dest_qp` at `peer_ip`, from our `local_ip`/`src_port`, with `tos`'s DSCP and
/// no ECN codepoint.
pub fn cnp(
    pkey: u16,
    dest_qp: u32,
    local_ip: IpAddr,
    src_port: u16,
    peer_ip: IpAddr,
    tos: u8,
) -> Transmit {
    let mut repr = RoceRepr::new(BthRepr {
        opcode: Opcode::CNP,
        pkey,
        dest_qp,
        psn: Psn::new(0),
        resv8a: BTH_BECN,
        ..BthRepr::default()
    });
    repr.payload = &CNP_RESERVED;
    emit::build_tos(&repr, local_ip, src_port, peer_ip, without_ecn(tos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_wire::icrc::{Flow, Verdict, ROCE_V2_PORT};
    use softrdma_wire::roce::RocePacket;

    #[test]
    fn ect_keeps_the_dscp() {
        assert_eq!(with_ect(0), 0x02);
        assert_eq!(with_ect(0xb8), 0xba);
        assert_eq!(with_ect(0xbb), 0xba);
        assert_eq!(without_ecn(0xbb), 0xb8);
        assert!(is_ce(0x03) && is_ce(0xbb) && !is_ce(0x02) && !is_ce(0x01));
    }

    #[test]
    fn one_cnp_per_interval() {
        let t0 = Instant::from_micros(1_000);
        let mut np = NotificationPoint::default();
        assert!(np.on_ce(t0));
        assert!(!np.on_ce(t0 + Duration::from_micros(10)));
        assert!(!np.on_ce(t0 + Duration::from_micros(49)));
        assert!(np.on_ce(t0 + Duration::from_micros(50)));
        assert!(!np.on_ce(t0 + Duration::from_micros(60)));
    }

    #[test]
    fn a_cnp_is_bth_0x81_becn_psn_0_and_16_reserved_bytes_with_a_valid_icrc() {
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t = cnp(0xffff, 0x11, a, 49152, b, 0xbb);
        assert_eq!(t.tos, 0xb8, "no ECN codepoint on a CNP");
        // BTH 12 + 16 reserved + ICRC 4.
        assert_eq!(t.payload.len(), 32);
        let p = RocePacket::new_checked(&t.payload[..]).expect("parses");
        assert_eq!(p.opcode(), Opcode::CNP);
        assert_eq!(p.bth().dest_qp(), 0x11);
        assert_eq!(p.bth().psn(), Psn::new(0));
        assert_eq!(t.payload[4] & BTH_BECN, BTH_BECN);
        assert_eq!(&t.payload[12..28], &[0u8; 16]);
        let flow = Flow {
            src: a,
            dst: b,
            src_port: 49152,
            dst_port: ROCE_V2_PORT,
        };
        assert!(matches!(
            softrdma_wire::icrc::verify_udp(&flow, &t.payload),
            Ok(Verdict::Verified { .. })
        ));
    }
}
