//! Building outgoing RoCEv2 datagrams: the UDP source port rule, packet emission and the
//! ICRC seal (IPv4 ID 0 + DF, DESIGN.md §3).

use std::net::{IpAddr, SocketAddr};

use softrdma_wire::icrc::{self, Flow, ROCE_V2_PORT};
use softrdma_wire::roce::RoceRepr;

/// One datagram for the driver to send from its UDP socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send it (the peer's IP, port 4791).
    pub dst: SocketAddr,
    /// The UDP source port the ICRC was computed with: the driver must send from it (or
    /// re-seal the ICRC).
    pub src_port: u16,
    /// Our IP address the ICRC was computed with.
    pub src_ip: IpAddr,
    /// The UDP payload (BTH ... ICRC).
    pub payload: Vec<u8>,
    /// GSO hint: the segment size when `payload` holds several equal datagrams back to back
    /// (always `None` for now: one datagram per `Transmit`).
    pub segment_size: Option<usize>,
}

/// `hash_32(v, 14)` of the kernel (`GOLDEN_RATIO_32` multiply, top bits).
const fn hash_32_14(v: u32) -> u32 {
    v.wrapping_mul(0x61C8_8647) >> (32 - 14)
}

/// The UDP source port of a datagram QP (UD, GSI): rxe's `rxe_qp_init_misc` uses
/// `0xC000 + hash_32(qpn, 14)`; for QP1 that is 55410, for QP 0xe0 58333 and QP 0x11 57236
/// (matches `g_pingpong.pcap` and `c_udaddy.pcap`).
pub const fn datagram_src_port(qpn: u32) -> u16 {
    (0xC000 | (hash_32_14(qpn) & 0x3fff)) as u16
}

/// `rdma_calc_flow_label`: the flow label ib_core gives an RC QP whose AV has none.
pub const fn calc_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = (lqpn as u64) * (rqpn as u64);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0x000f_ffff) as u32
}

/// `rdma_flow_label_to_udp_sport`: `0xC000 | ((fl & 0x3FFF) ^ (fl >> 14))`.
pub const fn flow_label_src_port(fl: u32) -> u16 {
    let fl = fl & 0x000f_ffff;
    (0xC000 | ((fl & 0x3fff) ^ (fl >> 14))) as u16
}

/// The UDP source port of an RC QP (`rdma_get_udp_sport`): from the AV's flow label, or
/// from `rdma_calc_flow_label(lqpn, rqpn)` when it is 0. Both ends of an ibv_rc_pingpong
/// pair with QPN 0xdf use 49730, as `g_pingpong.pcap` shows.
pub const fn rc_src_port(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label == 0 {
        calc_flow_label(lqpn, rqpn)
    } else {
        flow_label
    };
    flow_label_src_port(fl)
}

/// Emits `repr` into a fresh buffer and seals its ICRC for `src_ip:src_port -> dst:4791`.
pub fn build(repr: &RoceRepr<'_>, src_ip: IpAddr, src_port: u16, dst_ip: IpAddr) -> Transmit {
    let mut payload = vec![0u8; repr.buffer_len()];
    repr.emit(&mut payload);
    let flow = Flow {
        src: src_ip,
        dst: dst_ip,
        src_port,
        dst_port: ROCE_V2_PORT,
    };
    // Fails only for mixed IPv4/IPv6 flows or a >64 KiB datagram; then the ICRC stays 0 and
    // the peer drops the packet (counted there), which is the right outcome.
    let _ = icrc::seal_udp(&flow, &mut payload);
    Transmit {
        dst: SocketAddr::new(dst_ip, ROCE_V2_PORT),
        src_port,
        src_ip,
        payload,
        segment_size: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_ports_match_the_captures() {
        assert_eq!(datagram_src_port(1), 55410);
        assert_eq!(datagram_src_port(0xe0), 58333);
        assert_eq!(datagram_src_port(0x11), 57236);
        assert_eq!(rc_src_port(0, 0xdf, 0xdf), 49730);
        assert_eq!(flow_label_src_port(0x98adf), 51961);
    }
}
