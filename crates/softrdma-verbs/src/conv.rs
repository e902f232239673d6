//! Conversions between the C structures and the core's types, and from the core's errors to
//! rdma-core's errno values. No pointers here.

use core::ffi::c_char;

use softrdma_core::device::Mtu;
use softrdma_core::device::{AtomicCap, DeviceAttr, PortAttr};
use softrdma_core::transport::mcast::{MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH};
use softrdma_core::verbs::{
    AccessFlags, AddressVector, QpAttr, QpAttrMask, QpCap, QpState, QpType, SendOp, VerbsError,
    WcOpcode, WorkCompletion,
};
use softrdma_driver::Error as DevError;
use softrdma_wire::Gid;

use crate::abi::*;
use crate::entry::Errno;

/// The errno rdma-core's providers (rxe) return for a refused verb.
pub fn verbs_errno(e: &VerbsError) -> Errno {
    match e {
        VerbsError::Busy { .. } => Errno::EBUSY,
        VerbsError::Limit { .. } | VerbsError::QueueFull { .. } => Errno::ENOMEM,
        VerbsError::Mr(softrdma_core::verbs::MrError::TooManyMrs) => Errno::ENOMEM,
        VerbsError::WrongQpType { .. } => Errno::EINVAL,
        _ => Errno::EINVAL,
    }
}

/// [`verbs_errno`] for a driver error (a socket error is its OS errno).
pub fn dev_errno(e: &DevError) -> Errno {
    match e {
        DevError::Verbs(v) => verbs_errno(v),
        DevError::Query(_) => Errno::EINVAL,
        DevError::Io(io) => Errno(io.raw_os_error().unwrap_or(libc::EIO)),
    }
}

/// Copies `s` into a fixed C string field, NUL-terminated (truncated if need be).
pub fn put_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as c_char;
    }
    for d in dst.iter_mut().skip(n) {
        *d = 0;
    }
}

fn int(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// `ibv_query_device`'s answer (the firmware version formatted as rdma-core formats the
/// kernel's 64-bit value: `major.minor.sub_minor`).
pub fn device_attr(a: &DeviceAttr) -> ibv_device_attr {
    let mut fw = [0 as c_char; 64];
    put_str(
        &mut fw,
        &format!(
            "{}.{}.{}",
            (a.fw_ver >> 32) & 0xffff,
            (a.fw_ver >> 16) & 0xffff,
            a.fw_ver & 0xffff
        ),
    );
    ibv_device_attr {
        fw_ver: fw,
        node_guid: a.node_guid.0.to_be(),
        sys_image_guid: a.sys_image_guid.0.to_be(),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: int(a.max_qp),
        max_qp_wr: int(a.max_qp_wr),
        device_cap_flags: a.device_cap_flags as u32,
        max_sge: int(a.max_sge),
        max_sge_rd: int(a.max_sge_rd),
        max_cq: int(a.max_cq),
        max_cqe: int(a.max_cqe),
        max_mr: int(a.max_mr),
        max_pd: int(a.max_pd),
        max_qp_rd_atom: int(a.max_qp_rd_atom),
        max_ee_rd_atom: 0,
        max_res_rd_atom: int(a.max_res_rd_atom),
        max_qp_init_rd_atom: int(a.max_qp_init_rd_atom),
        max_ee_init_rd_atom: 0,
        atomic_cap: match a.atomic_cap {
            AtomicCap::None => 0,
            AtomicCap::Hca => 1,
            AtomicCap::Glob => 2,
        },
        max_ee: 0,
        max_rdd: 0,
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        // rxe's multicast limits, which the device's group table keeps (`ibv_attach_mcast`).
        max_mcast_grp: MAX_MCAST_GRP as i32,
        max_mcast_qp_attach: MAX_MCAST_QP_ATTACH as i32,
        max_total_mcast_qp_attach: (MAX_MCAST_GRP * MAX_MCAST_QP_ATTACH) as i32,
        max_ah: int(a.max_ah),
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: int(a.max_srq),
        max_srq_wr: int(a.max_srq_wr),
        max_srq_sge: int(a.max_srq_sge),
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
    }
}

/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;

/// `ibv_query_port`'s answer.
pub fn port_attr(p: &PortAttr) -> ibv_port_attr {
    ibv_port_attr {
        state: i32::from(p.state.to_kernel()),
        max_mtu: i32::from(p.max_mtu.to_enum()),
        active_mtu: i32::from(p.active_mtu.to_enum()),
        gid_tbl_len: int(p.gid_tbl_len),
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: p.bad_pkey_cntr,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: p.max_vl_num,
        sm_sl: p.sm_sl,
        subnet_timeout: p.subnet_timeout,
        init_type_reply: 0,
        active_width: p.active_width,
        active_speed: p.active_speed,
        phys_state: p.phys_state.to_kernel(),
        link_layer: if p.link_layer_ethernet {
            LINK_LAYER_ETHERNET
        } else {
            1
        },
        flags: 0,
        port_cap_flags2: 0,
    }
}

/// `IBV_WC_GRH`, `IBV_WC_WITH_IMM`, `IBV_WC_WITH_INV`.
const WC_GRH: u32 = 1;
const WC_WITH_IMM: u32 = 2;
const WC_WITH_INV: u32 = 8;

/// A work completion as `ibv_poll_cq` returns it (immediate data in network byte order).
pub fn wc(w: &WorkCompletion) -> ibv_wc {
    let mut flags = 0;
    let mut imm = 0;
    if w.grh {
        flags |= WC_GRH;
    }
    if let Some(i) = w.imm_data {
        flags |= WC_WITH_IMM;
        imm = i.to_be();
    }
    if let Some(r) = w.invalidated_rkey {
        flags |= WC_WITH_INV;
        imm = r;
    }
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status.to_verbs() as i32,
        opcode: w.opcode.to_verbs() as i32,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: imm,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: flags,
        pkey_index: w.pkey_index,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    }
}

/// Keeps the WC opcode import meaningful for readers: the values are the ABI's.
pub const WC_RECV: u32 = WcOpcode::Recv.to_verbs();

/// `enum ibv_qp_type` → the core's (RC, UC, UD; XRC and raw packet QPs are `EOPNOTSUPP`, as
/// on rxe).
pub fn qp_type(t: i32) -> Result<QpType, Errno> {
    match t {
        2 => Ok(QpType::Rc),
        3 => Ok(QpType::Uc),
        4 => Ok(QpType::Ud),
        // IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV.
        8..=10 => Err(Errno::EOPNOTSUPP),
        _ => Err(Errno::EINVAL),
    }
}

/// An address handle's attributes → the core's address vector. RoCE addresses are GIDs:
/// without a GRH there is no destination (`EINVAL`, as rxe's `rxe_av_chk_attr`).
pub fn ah_attr(a: &ibv_ah_attr) -> Result<AddressVector, Errno> {
    if a.is_global == 0 || a.port_num != 1 {
        return Err(Errno::EINVAL);
    }
    Ok(AddressVector {
        dgid: Gid(a.grh.dgid.raw),
        sgid_index: u16::from(a.grh.sgid_index),
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        flow_label: a.grh.flow_label,
        sl: a.sl,
        port_num: a.port_num,
    })
}

/// The core's QP type as `enum ibv_qp_type`.
pub fn qp_type_c(t: QpType) -> i32 {
    match t {
        QpType::Rc => 2,
        QpType::Uc => 3,
        QpType::Ud | QpType::Gsi => 4,
    }
}

/// `struct ibv_qp_cap` → the core's.
pub fn cap(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// The core's caps → `struct ibv_qp_cap`.
pub fn cap_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

fn state(v: i32) -> Result<QpState, Errno> {
    u8::try_from(v)
        .ok()
        .and_then(QpState::from_verbs)
        .ok_or(Errno::EINVAL)
}

/// `IBV_QP_ALT_PATH`, `IBV_QP_PATH_MIG_STATE`, `IBV_QP_RATE_LIMIT` (bit 25): APM and rate
/// limits are not supported (rxe refuses them too).
const UNSUPPORTED_MASK: u32 = (1 << 14) | (1 << 18) | (1 << 25);

/// `ibv_modify_qp`'s attributes → the core's, only the masked ones read.
pub fn qp_attr(a: &ibv_qp_attr, mask: u32) -> Result<(QpAttr, QpAttrMask), Errno> {
    if mask & UNSUPPORTED_MASK != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    let m = QpAttrMask(mask);
    let mut q = QpAttr::default();
    if m.contains(QpAttrMask::STATE) {
        q.qp_state = state(a.qp_state)?;
    }
    if m.contains(QpAttrMask::CUR_STATE) {
        q.cur_qp_state = state(a.cur_qp_state)?;
    }
    if m.contains(QpAttrMask::PATH_MTU) {
        q.path_mtu = u8::try_from(a.path_mtu)
            .ok()
            .and_then(Mtu::from_enum)
            .ok_or(Errno::EINVAL)?;
    }
    if m.contains(QpAttrMask::AV) {
        // RoCE addresses are GIDs: a path without a GRH names no one (rxe: EINVAL).
        q.ah_attr = ah_attr(&a.ah_attr)?;
    }
    q.qkey = a.qkey;
    q.rq_psn = a.rq_psn;
    q.sq_psn = a.sq_psn;
    q.dest_qp_num = a.dest_qp_num;
    q.qp_access_flags = AccessFlags(a.qp_access_flags);
    q.cap = cap(&a.cap);
    q.pkey_index = a.pkey_index;
    q.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    q.max_rd_atomic = a.max_rd_atomic;
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    q.min_rnr_timer = a.min_rnr_timer;
    q.port_num = a.port_num;
    q.timeout = a.timeout;
    q.retry_cnt = a.retry_cnt;
    q.rnr_retry = a.rnr_retry;
    Ok((q, m))
}

/// The core's QP attributes → `struct ibv_qp_attr`.
pub fn qp_attr_c(q: &QpAttr) -> ibv_qp_attr {
    ibv_qp_attr {
        qp_state: i32::from(q.qp_state.to_verbs()),
        cur_qp_state: i32::from(q.cur_qp_state.to_verbs()),
        path_mtu: i32::from(q.path_mtu.to_enum()),
        path_mig_state: 0,
        qkey: q.qkey,
        rq_psn: q.rq_psn,
        sq_psn: q.sq_psn,
        dest_qp_num: q.dest_qp_num,
        qp_access_flags: q.qp_access_flags.0,
        cap: cap_c(&q.cap),
        ah_attr: ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid {
                    raw: q.ah_attr.dgid.0,
                },
                flow_label: q.ah_attr.flow_label,
                sgid_index: q.ah_attr.sgid_index as u8,
                hop_limit: q.ah_attr.hop_limit,
                traffic_class: q.ah_attr.traffic_class,
            },
            dlid: 0,
            sl: q.ah_attr.sl,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: q.ah_attr.port_num,
        },
        alt_ah_attr: ibv_ah_attr::default(),
        pkey_index: q.pkey_index,
        alt_pkey_index: 0,
        en_sqd_async_notify: u8::from(q.en_sqd_async_notify),
        sq_draining: u8::from(q.sq_draining),
        max_rd_atomic: q.max_rd_atomic,
        max_dest_rd_atomic: q.max_dest_rd_atomic,
        min_rnr_timer: q.min_rnr_timer,
        port_num: q.port_num,
        timeout: q.timeout,
        retry_cnt: q.retry_cnt,
        rnr_retry: q.rnr_retry,
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
    }
}

/// `IBV_SEND_FENCE`, `IBV_SEND_SIGNALED`, `IBV_SEND_SOLICITED`, `IBV_SEND_INLINE`.
pub const SEND_FENCE: u32 = 1;
pub const SEND_SIGNALED: u32 = 2;
pub const SEND_SOLICITED: u32 = 4;
pub const SEND_INLINE: u32 = 8;

/// A send WR's opcode and its operands (`EINVAL` for opcodes softrdma has not: LOCAL_INV,
/// BIND_MW, TSO, DRIVER1, ATOMIC_WRITE — rxe refuses an opcode it does not know likewise).
pub fn send_op(w: &ibv_send_wr) -> Result<SendOp, Errno> {
    let imm = u32::from_be(w.imm_data);
    Ok(match w.opcode {
        0 => SendOp::RdmaWrite {
            remote_addr: w.remote_addr(),
            rkey: w.rdma_rkey(),
        },
        1 => SendOp::RdmaWriteWithImm {
            remote_addr: w.remote_addr(),
            rkey: w.rdma_rkey(),
            imm,
        },
        2 => SendOp::Send,
        3 => SendOp::SendWithImm { imm },
        4 => SendOp::RdmaRead {
            remote_addr: w.remote_addr(),
            rkey: w.rdma_rkey(),
        },
        5 => SendOp::AtomicCmpSwp {
            remote_addr: w.remote_addr(),
            rkey: w.atomic_rkey(),
            compare: w.compare_add(),
            swap: w.swap(),
        },
        6 => SendOp::AtomicFetchAdd {
            remote_addr: w.remote_addr(),
            rkey: w.atomic_rkey(),
            add: w.compare_add(),
        },
        9 => SendOp::SendWithInv {
            invalidate_rkey: w.imm_data,
        },
        _ => return Err(Errno::EINVAL),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modify_attributes_need_a_grh_and_known_states() {
        let mut a = ibv_qp_attr {
            qp_state: 9,
            ..Default::default()
        };
        assert_eq!(qp_attr(&a, 1).err(), Some(Errno::EINVAL));
        a.qp_state = 1;
        assert_eq!(
            qp_attr(&a, 1).map(|q| q.0.qp_state).ok(),
            Some(QpState::Init)
        );
        assert_eq!(qp_attr(&a, 1 | (1 << 7)).err(), Some(Errno::EINVAL));
        assert_eq!(qp_attr(&a, 1 << 14).err(), Some(Errno::EOPNOTSUPP));
    }

    #[test]
    fn immediate_data_stays_in_network_order() {
        let mut w = WorkCompletion::new(
            7,
            3,
            WcOpcode::Recv,
            softrdma_core::verbs::WcStatus::Success,
        );
        w.imm_data = Some(0x0102_0304);
        let c = wc(&w);
        assert_eq!(c.imm_data.to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!(c.wc_flags, WC_WITH_IMM);
        assert_eq!(c.opcode as u32, WC_RECV);
    }
}

/// What a received UD message's 40-byte GRH area says about its path: `(the sender's GID, our
/// GID it was sent to, flow label, traffic class)`. On RoCEv2 over IPv4 the area holds the
/// IPv4 header in its last 20 bytes (recognised, as rdma-core does, by its version, length and
/// a valid checksum), else it is an IPv6 header.
pub fn path_from_grh(g: &[u8; 40]) -> Option<(Gid, Gid, u32, u8)> {
    let ip4 = &g[20..];
    if ip4[0] == 0x45 {
        let mut sum: u32 = ip4
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        if sum == 0xffff {
            let v4 = |b: &[u8]| {
                Gid::from_ip(std::net::IpAddr::V4(std::net::Ipv4Addr::new(
                    b[0], b[1], b[2], b[3],
                )))
            };
            return Some((v4(&ip4[12..16]), v4(&ip4[16..20]), 0, ip4[1]));
        }
    }
    if g[0] >> 4 == 6 {
        let word = u32::from_be_bytes([g[0], g[1], g[2], g[3]]);
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&g[8..24]);
        dst.copy_from_slice(&g[24..40]);
        return Some((
            Gid(src),
            Gid(dst),
            word & 0xf_ffff,
            ((word >> 20) & 0xff) as u8,
        ));
    }
    None
}

/// `ibv_copy_ah_attr_from_kern`: the kernel's address vector → verbs'.
pub fn ah_attr_from_kern(k: &ib_uverbs_ah_attr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: k.grh.dgid },
            flow_label: k.grh.flow_label,
            sgid_index: k.grh.sgid_index,
            hop_limit: k.grh.hop_limit,
            traffic_class: k.grh.traffic_class,
        },
        dlid: k.dlid,
        sl: k.sl,
        src_path_bits: k.src_path_bits,
        static_rate: k.static_rate,
        is_global: k.is_global,
        port_num: k.port_num,
    }
}

/// `ibv_copy_qp_attr_from_kern`: the kernel's QP attributes → verbs'.
pub fn qp_attr_from_kern(k: &ib_uverbs_qp_attr) -> ibv_qp_attr {
    ibv_qp_attr {
        qp_state: k.qp_state as i32,
        cur_qp_state: k.cur_qp_state as i32,
        path_mtu: k.path_mtu as i32,
        path_mig_state: k.path_mig_state as i32,
        qkey: k.qkey,
        rq_psn: k.rq_psn,
        sq_psn: k.sq_psn,
        dest_qp_num: k.dest_qp_num,
        qp_access_flags: k.qp_access_flags,
        cap: ibv_qp_cap {
            max_send_wr: k.max_send_wr,
            max_recv_wr: k.max_recv_wr,
            max_send_sge: k.max_send_sge,
            max_recv_sge: k.max_recv_sge,
            max_inline_data: k.max_inline_data,
        },
        ah_attr: ah_attr_from_kern(&k.ah_attr),
        alt_ah_attr: ah_attr_from_kern(&k.alt_ah_attr),
        pkey_index: k.pkey_index,
        alt_pkey_index: k.alt_pkey_index,
        en_sqd_async_notify: k.en_sqd_async_notify,
        sq_draining: k.sq_draining,
        max_rd_atomic: k.max_rd_atomic,
        max_dest_rd_atomic: k.max_dest_rd_atomic,
        min_rnr_timer: k.min_rnr_timer,
        port_num: k.port_num,
        timeout: k.timeout,
        retry_cnt: k.retry_cnt,
        rnr_retry: k.rnr_retry,
        alt_port_num: k.alt_port_num,
        alt_timeout: k.alt_timeout,
        rate_limit: 0,
    }
}

/// `ibv_copy_path_rec_from_kern`: the kernel's path record → `<infiniband/sa.h>`'s.
pub fn path_rec_from_kern(k: &ib_user_path_rec) -> ibv_sa_path_rec {
    ibv_sa_path_rec {
        dgid: ibv_gid { raw: k.dgid },
        sgid: ibv_gid { raw: k.sgid },
        dlid: k.dlid,
        slid: k.slid,
        raw_traffic: k.raw_traffic as i32,
        flow_label: k.flow_label,
        hop_limit: k.hop_limit,
        traffic_class: k.traffic_class,
        reversible: k.reversible as i32,
        numb_path: k.numb_path,
        pkey: k.pkey,
        sl: k.sl,
        mtu_selector: k.mtu_selector,
        mtu: k.mtu as u8,
        rate_selector: k.rate_selector,
        rate: k.rate,
        packet_life_time_selector: k.packet_life_time_selector,
        packet_life_time: k.packet_life_time,
        preference: k.preference,
    }
}

/// `ibv_copy_path_rec_to_kern`: the reverse of [`path_rec_from_kern`].
pub fn path_rec_to_kern(u: &ibv_sa_path_rec) -> ib_user_path_rec {
    ib_user_path_rec {
        dgid: u.dgid.raw,
        sgid: u.sgid.raw,
        dlid: u.dlid,
        slid: u.slid,
        raw_traffic: u.raw_traffic as u32,
        flow_label: u.flow_label,
        reversible: u.reversible as u32,
        mtu: u32::from(u.mtu),
        pkey: u.pkey,
        hop_limit: u.hop_limit,
        traffic_class: u.traffic_class,
        numb_path: u.numb_path,
        sl: u.sl,
        mtu_selector: u.mtu_selector,
        rate_selector: u.rate_selector,
        rate: u.rate,
        packet_life_time_selector: u.packet_life_time_selector,
        packet_life_time: u.packet_life_time,
        preference: u.preference,
    }
}

#[cfg(test)]
mod kern_tests {
    use super::*;

    #[test]
    fn grh_areas_name_the_sender_for_ipv4_and_ipv6() {
        let s4 = "127.0.0.2".parse().unwrap();
        let d4 = "127.0.0.1".parse().unwrap();
        let g = softrdma_core::transport::ud::grh_area(s4, d4, 100, None);
        let (src, dst, fl, _) = path_from_grh(&g).unwrap();
        assert_eq!((src, dst, fl), (Gid::from_ip(s4), Gid::from_ip(d4), 0));
        let s6: std::net::IpAddr = "fd00::2".parse().unwrap();
        let d6: std::net::IpAddr = "fd00::1".parse().unwrap();
        let g = softrdma_core::transport::ud::grh_area(s6, d6, 100, None);
        let (src, dst, _, _) = path_from_grh(&g).unwrap();
        assert_eq!((src, dst), (Gid::from_ip(s6), Gid::from_ip(d6)));
        let mut bad = softrdma_core::transport::ud::grh_area(s4, d4, 100, None);
        bad[30] ^= 1; // the IPv4 checksum no longer holds, and it is no IPv6 header either
        assert!(path_from_grh(&bad).is_none());
    }

    #[test]
    fn kernel_structures_convert_field_by_field() {
        let mut k = ib_uverbs_qp_attr {
            qp_state: 3,
            path_mtu: 5,
            qkey: 0x1111_2222,
            dest_qp_num: 0x12,
            max_inline_data: 64,
            port_num: 1,
            rnr_retry: 7,
            alt_timeout: 9,
            ..Default::default()
        };
        k.ah_attr.grh.dgid[15] = 9;
        k.ah_attr.is_global = 1;
        k.ah_attr.grh.hop_limit = 64;
        let u = qp_attr_from_kern(&k);
        assert_eq!(
            (u.qp_state, u.path_mtu, u.qkey, u.dest_qp_num),
            (3, 5, 0x1111_2222, 0x12)
        );
        assert_eq!(
            (
                u.cap.max_inline_data,
                u.port_num,
                u.rnr_retry,
                u.alt_timeout
            ),
            (64, 1, 7, 9)
        );
        assert_eq!(
            (
                u.ah_attr.grh.dgid.raw[15],
                u.ah_attr.is_global,
                u.ah_attr.grh.hop_limit
            ),
            (9, 1, 64)
        );
        let p = ib_user_path_rec {
            dlid: 0x1234,
            mtu: 4,
            pkey: 0xffff,
            reversible: 1,
            rate: 6,
            packet_life_time: 18,
            ..Default::default()
        };
        let up = path_rec_from_kern(&p);
        assert_eq!(
            (
                up.dlid,
                up.mtu,
                up.pkey,
                up.reversible,
                up.rate,
                up.packet_life_time
            ),
            (0x1234, 4, 0xffff, 1, 6, 18)
        );
        let back = path_rec_to_kern(&up);
        assert_eq!(
            (
                back.dlid,
                back.mtu,
                back.pkey,
                back.reversible,
                back.rate,
                back.packet_life_time
            ),
            (0x1234, 4, 0xffff, 1, 6, 18)
        );
    }
}
