//! UD (and GSI) transport: SEND and SEND with immediate, one packet each, no GRH on the
//! wire (RoCEv2), but a 40-byte GRH area at the start of every receive buffer, filled as
//! rxe's `build_rdma_network_hdr` does: for IPv4, 20 zero bytes then the IPv4 header; for
//! IPv6, the IPv6 header. A UDP socket does not see the IP header, so it is rebuilt from
//! what is known (addresses, lengths, the IPv4 ID the ICRC check recovered, DF, TTL 64).

use std::net::IpAddr;

use softrdma_wire::icrc::Ipv4Ident;
use softrdma_wire::roce::{BthRepr, DethRepr, ImmDtRepr, Opcode, Psn, RocePacket, RoceRepr};

use super::emit::{self, Transmit};
use super::memory;
use super::{Ctx, QpInfo};
use crate::verbs::{QpType, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion};

/// Bytes of GRH area at the start of a UD receive buffer.
pub const GRH_LEN: usize = 40;

/// Builds the UD packet of a send WR; `Err` carries the completion status on failure.
pub fn build_send(
    info: &QpInfo,
    wr: &SendWr,
    data: &[u8],
    psn: Psn,
    port_mtu: u32,
) -> Result<Transmit, WcStatus> {
    let ud = wr.ud.ok_or(WcStatus::LocQpOpErr)?;
    if data.len() as u64 > u64::from(port_mtu) {
        return Err(WcStatus::LocLenErr);
    }
    let imm = match wr.op {
        SendOp::SendWithImm { imm } => Some(imm),
        _ => None,
    };
    let mut repr = RoceRepr::new(BthRepr {
        opcode: if imm.is_some() {
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
        } else {
            Opcode::UD_SEND_ONLY
        },
        solicited_event: wr.solicited,
        pkey: info.pkey,
        dest_qp: ud.remote_qpn,
        // The kernel's MADs on QP1 carry AckReq, user UD sends do not (captures).
        ack_req: info.qp_type == QpType::Gsi,
        psn,
        ..BthRepr::default()
    });
    // IBTA 10.2.5: a Q_Key with the high bit set means "use the QP's own".
    let q_key = if ud.remote_qkey & 0x8000_0000 != 0 && info.qp_type != QpType::Gsi {
        info.qkey
    } else {
        ud.remote_qkey
    };
    repr.deth = Some(DethRepr {
        q_key,
        reserved: 0,
        src_qp: info.qpn,
    });
    repr.immdt = imm.map(|imm_data| ImmDtRepr { imm_data });
    repr.set_payload(data);
    Ok(emit::build_tos(
        &repr,
        info.local_ip,
        info.src_port,
        ud.av.dgid.to_ip(),
        ud.av.traffic_class,
    ))
}

/// The GRH area rxe puts in front of received UD data.
pub fn grh_area(
    src: IpAddr,
    dst: IpAddr,
    udp_payload_len: usize,
    ident: Option<Ipv4Ident>,
) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    let udp_len = 8 + udp_payload_len;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let id = ident.unwrap_or(Ipv4Ident::LINUX_UNCONNECTED_DF);
            let total = (20 + udp_len).min(0xffff) as u16;
            let mut h = [0u8; 20];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[4..6].copy_from_slice(&id.id.to_be_bytes());
            h[6] = if id.dont_fragment { 0x40 } else { 0 };
            h[8] = 64;
            h[9] = 17;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let mut sum: u32 = 0;
            for c in h.chunks(2) {
                sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            g[20..].copy_from_slice(&h);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            g[0] = 0x60;
            g[4..6].copy_from_slice(&(udp_len.min(0xffff) as u16).to_be_bytes());
            g[6] = 17;
            g[7] = 64;
            g[8..24].copy_from_slice(&s.octets());
            g[24..40].copy_from_slice(&d.octets());
        }
        _ => {}
    }
    g
}

/// A UD packet that passed the header and Q_Key checks.
pub fn on_receive(
    ctx: &mut Ctx<'_>,
    info: &QpInfo,
    pkt: &RocePacket<&[u8]>,
    src: IpAddr,
    dst: IpAddr,
    ident: Option<Ipv4Ident>,
    udp_len: usize,
) {
    let Some(wr) = ctx.verbs.take_recv_wr(info.qpn) else {
        ctx.counters.drop_no_recv_wqe += 1;
        return;
    };
    let payload = pkt.payload();
    let grh = grh_area(src, dst, udp_len, ident);
    let mut wc = WorkCompletion::new(wr.wr_id, info.qpn, WcOpcode::Recv, WcStatus::Success);
    let r = memory::scatter_at(ctx.verbs, info.pd, &wr.sg_list, 0, &grh).and_then(|()| {
        memory::scatter_at(ctx.verbs, info.pd, &wr.sg_list, GRH_LEN as u64, payload)
    });
    match r {
        Ok(()) => {
            wc.byte_len = (GRH_LEN + payload.len()) as u32;
            wc.src_qp = pkt.deth().map(|d| d.src_qp()).unwrap_or(0);
            wc.imm_data = pkt.immdt().map(|i| i.imm_data());
            wc.grh = true;
        }
        Err(crate::verbs::ScatterError::TooLong { .. }) => wc.status = WcStatus::LocLenErr,
        Err(_) => wc.status = WcStatus::LocProtErr,
    }
    ctx.verbs.complete(info.recv_cq, wc);
}
