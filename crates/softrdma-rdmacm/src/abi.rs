//! The structures of rdma-core 44's `<rdma/rdma_cma.h>` that programs read and write directly,
//! `#[repr(C)]`, with the few of `<infiniband/verbs.h>` they embed (`ibv_ah_attr` in
//! `rdma_ud_param`). The `ibv_*` objects an id points at (context, PD, CQs, QP) are opaque
//! here: they belong to softrdma's `libibverbs.so.1`.
//!
//! The unit test `layout_matches_the_debian_header` compiles `tests/abi/layout.c` against the
//! system's headers (Debian's `librdmacm-dev`) and compares every size and offset with
//! [`LAYOUT`].

#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_void};

pub use crate::cm_abi::SockaddrStorage as sockaddr_storage;

#[cfg(not(all(target_pointer_width = "64", target_endian = "little")))]
compile_error!("softrdma-rdmacm mirrors the LP64 little-endian layout of rdma-core's rdma_cma.h");

/// The plain `<infiniband/verbs.h>` structures both libraries lay out (one definition).
pub use softrdma_ffi::verbs_abi::{ibv_ah_attr, ibv_gid, ibv_global_route, ibv_qp_cap};

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    /// Network order.
    pub pkey: u16,
}

/// `struct rdma_addr` (its unions as their `sockaddr_storage` members).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_addr {
    pub src_storage: sockaddr_storage,
    pub dst_storage: sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut c_void,
    pub num_paths: c_int,
}

/// `struct rdma_event_channel`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_cm_id {
    pub verbs: *mut c_void,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut c_void,
    pub route: rdma_route,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq_channel: *mut c_void,
    pub recv_cq: *mut c_void,
    pub srq: *mut c_void,
    pub pd: *mut c_void,
    pub qp_type: c_int,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct ibv_qp_init_attr` (`rdma_create_qp`, `rdma_create_ep`: copied and its QP type
/// set here, the rest read by libibverbs).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq: *mut c_void,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex` (`rdma_create_qp_ex`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq: *mut c_void,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut c_void,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

softrdma_ffi::qp_init_attr_legacy!(ibv_qp_init_attr_ex => ibv_qp_init_attr);

/// `IBV_QP_INIT_ATTR_PD`.
pub const IBV_QP_INIT_ATTR_PD: u32 = 1;

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr` (`rdma_create_srq`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex` (`rdma_create_srq_ex`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    /// `enum ibv_srq_type`: `IBV_SRQT_BASIC` 0, `_XRC` 1, `_TM` 2.
    pub srq_type: c_int,
    pub pd: *mut c_void,
    pub xrcd: *mut c_void,
    pub cq: *mut c_void,
    pub tm_cap: ibv_tm_cap,
}

/// `IBV_SRQ_INIT_ATTR_TYPE`, `IBV_SRQ_INIT_ATTR_PD`.
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
/// `IBV_SRQT_BASIC`.
pub const IBV_SRQT_BASIC: c_int = 0;

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// `rdma_cm_event.param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: c_int,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: u32,
    pub ai_dst_len: u32,
    pub ai_src_addr: *mut c_void,
    pub ai_dst_addr: *mut c_void,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// `struct ibv_ece`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut c_void,
}

/// `RDMA_PS_TCP`, `RDMA_PS_UDP`, `RDMA_PS_IB`, `RDMA_PS_IPOIB`.
pub const RDMA_PS_TCP: c_int = 0x0106;
pub const RDMA_PS_UDP: c_int = 0x0111;
pub const RDMA_PS_IB: c_int = 0x013f;
pub const RDMA_PS_IPOIB: c_int = 0x0002;
/// `IBV_QPT_RC`, `IBV_QPT_UD`.
pub const IBV_QPT_RC: c_int = 2;
pub const IBV_QPT_UD: c_int = 4;
/// `RAI_PASSIVE`, `RAI_NUMERICHOST`, `RAI_NOROUTE`, `RAI_FAMILY`.
pub const RAI_PASSIVE: c_int = 1;
pub const RAI_NUMERICHOST: c_int = 2;
pub const RAI_FAMILY: c_int = 8;

softrdma_ffi::layout_table! {
    ibv_gid { }
    rdma_ib_addr { sgid, dgid, pkey }
    rdma_addr { src_storage, dst_storage, ibaddr }
    rdma_route { addr, path_rec, num_paths }
    rdma_event_channel { fd }
    rdma_cm_id { verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel,
        send_cq, recv_cq_channel, recv_cq, srq, pd, qp_type }
    rdma_conn_param { private_data, private_data_len, responder_resources, initiator_depth,
        flow_control, retry_count, rnr_retry_count, srq, qp_num }
    ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
    ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
    ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
    ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
    ibv_rx_hash_conf { rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask }
    ibv_qp_init_attr_ex { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask,
        pd, xrcd, create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn,
        send_ops_flags }
    rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey }
    rdma_cm_event { id, listen_id, event, status, param }
    rdma_addrinfo { ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len,
        ai_src_addr, ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route,
        ai_connect_len, ai_connect, ai_next }
    ibv_ece { vendor_id, options, comp_mask }
    rdma_cm_join_mc_attr_ex { comp_mask, join_flags, addr }
    ibv_srq_attr { max_wr, max_sge, srq_limit }
    ibv_srq_init_attr { srq_context, attr }
    ibv_tm_cap { max_num_tags, max_ops }
    ibv_srq_init_attr_ex { srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap }
    sockaddr_storage { }
}

#[cfg(test)]
mod tests {
    use super::LAYOUT;

    /// Compiles `tests/abi/layout.c` against the system's `<rdma/rdma_cma.h>` and compares
    /// every line it prints with [`LAYOUT`], both ways.
    #[test]
    fn layout_matches_the_debian_header() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/abi/layout.c");
        softrdma_ffi::audit::check_layout(&src, "rdma/rdma_cma.h", "librdmacm-dev", LAYOUT, 100)
            .unwrap();
    }
}
