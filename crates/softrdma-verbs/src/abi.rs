//! The C structures of rdma-core 44's `<infiniband/verbs.h>` (Debian 12's `libibverbs-dev`) that
//! this library reads or writes, laid out exactly as the header lays them out on x86-64 and
//! arm64 (LP64, little-endian). [`LAYOUT`] lists every size and offset the library relies on;
//! the unit test `layout_matches_the_debian_header` compiles `tests/abi/layout.c` against the
//! system header and compares.
//!
//! C unions are stored as their largest member's bytes with accessors (no Rust `union`, so no
//! `unsafe` is needed to read them); that is why the crate requires a little-endian target.

#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_uint, c_void};

#[cfg(not(all(target_endian = "little", target_pointer_width = "64")))]
compile_error!("softrdma-verbs mirrors the LP64 little-endian layout of rdma-core's verbs.h");

/// `pthread_mutex_t` on x86-64/arm64 glibc (40 bytes; we only reserve it).
pub type PthreadMutex = [u64; 5];
/// `pthread_cond_t` (48 bytes; reserved).
pub type PthreadCond = [u64; 6];

/// The plain `<infiniband/verbs.h>` structures both libraries lay out (one definition).
pub use softrdma_ffi::verbs_abi::{ibv_ah_attr, ibv_gid, ibv_global_route, ibv_qp_cap};

/// `struct _ibv_device_ops`: two unused function pointers.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_device_ops_compat {
    /// `_dummy1`, `_dummy2`.
    pub dummy: [usize; 2],
}

/// `IBV_SYSFS_NAME_MAX`.
pub const SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const SYSFS_PATH_MAX: usize = 256;

/// `struct ibv_device`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device {
    /// `_ops`.
    pub ops: ibv_device_ops_compat,
    /// `enum ibv_node_type node_type`.
    pub node_type: c_int,
    /// `enum ibv_transport_type transport_type`.
    pub transport_type: c_int,
    /// `name[64]`.
    pub name: [c_char; SYSFS_NAME_MAX],
    /// `dev_name[64]`.
    pub dev_name: [c_char; SYSFS_NAME_MAX],
    /// `dev_path[256]`.
    pub dev_path: [c_char; SYSFS_PATH_MAX],
    /// `ibdev_path[256]`.
    pub ibdev_path: [c_char; SYSFS_PATH_MAX],
}

/// A function-pointer slot we never fill (its C type does not matter: NULL).
pub type Slot = Option<unsafe extern "C" fn()>;

/// `poll_cq` of `struct ibv_context_ops`.
pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
/// `req_notify_cq`.
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
/// `post_send`.
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
/// `post_recv`.
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `post_srq_recv`.
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `verbs_context.query_port`.
pub type QueryPortFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;

/// `struct ibv_context_ops`: 36 pointers; the inline verbs of `verbs.h` call `poll_cq`,
/// `req_notify_cq`, `post_srq_recv`, `post_send` and `post_recv` through it.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_context_ops {
    /// `_compat_query_device` … `bind_mw`, `dealloc_mw`, `_compat_create_cq` (11 slots).
    pub before_poll_cq: [Slot; 11],
    /// `poll_cq`.
    pub poll_cq: Option<PollCqFn>,
    /// `req_notify_cq`.
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    /// `_compat_cq_event` … `_compat_destroy_srq` (7 slots).
    pub before_post_srq_recv: [Slot; 7],
    /// `post_srq_recv`.
    pub post_srq_recv: Option<PostSrqRecvFn>,
    /// `_compat_create_qp` … `_compat_destroy_qp` (4 slots).
    pub before_post_send: [Slot; 4],
    /// `post_send`.
    pub post_send: Option<PostSendFn>,
    /// `post_recv`.
    pub post_recv: Option<PostRecvFn>,
    /// `_compat_create_ah` … `_compat_async_event` (5 slots).
    pub after_post_recv: [Slot; 5],
}

/// `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    /// `device`.
    pub device: *mut ibv_device,
    /// `ops`.
    pub ops: ibv_context_ops,
    /// `cmd_fd` (no kernel: -1).
    pub cmd_fd: c_int,
    /// `async_fd`.
    pub async_fd: c_int,
    /// `num_comp_vectors`.
    pub num_comp_vectors: c_int,
    /// `mutex`.
    pub mutex: PthreadMutex,
    /// `abi_compat`: `__VERBS_ABI_IS_EXTENDED` marks a [`verbs_context`].
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`: `(void *)UINTPTR_MAX`.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// `verbs_context.create_cq_ex`.
pub type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
/// `verbs_context.query_device_ex`.
pub type QueryDeviceExFn =
    unsafe extern "C" fn(*mut ibv_context, *const c_void, *mut ibv_device_attr_ex, usize) -> c_int;
/// `verbs_context.create_qp_ex`.
pub type CreateQpExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;

/// `struct verbs_context`: the extended ops "grow up" in front of the `ibv_context`, whose
/// address is what applications hold; `sz` says how many of them exist. The inline wrappers
/// of `verbs.h` (`ibv_create_cq_ex`, `ibv_query_device_ex`, `ibv_create_qp_ex`, …) call
/// through these slots; a NULL slot makes them return `EOPNOTSUPP` or fall back to the
/// legacy verb.
#[repr(C)]
pub struct verbs_context {
    /// `query_port` (what `ibv_query_port`, a macro over `___ibv_query_port`, calls).
    pub query_port: Option<QueryPortFn>,
    /// `advise_mr` … `query_rt_values` (24 slots).
    pub before_create_cq_ex: [Slot; 24],
    /// `create_cq_ex`.
    pub create_cq_ex: Option<CreateCqExFn>,
    /// `priv` (rdma-core's private `verbs_ex_private`; nothing of ours).
    pub priv_: *mut c_void,
    /// `query_device_ex`.
    pub query_device_ex: Option<QueryDeviceExFn>,
    /// `ibv_destroy_flow` … `open_qp` (5 slots).
    pub before_create_qp_ex: [Slot; 5],
    /// `create_qp_ex`.
    pub create_qp_ex: Option<CreateQpExFn>,
    /// `get_srq_num` … `close_xrcd` (4 slots).
    pub after_create_qp_ex: [Slot; 4],
    /// `_ABI_placeholder3`.
    pub abi_placeholder3: u64,
    /// `sz`: the size of this structure (every op present).
    pub sz: usize,
    /// `context`: must be last.
    pub context: ibv_context,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct ibv_gid_entry` (`ibv_query_gid_ex`, `ibv_query_gid_table`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type`: `IBV_GID_TYPE_IB` 0, `_ROCE_V1` 1, `_ROCE_V2` 2.
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_async_event`: `element` is the union `{cq, qp, srq, wq, port_num}`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_async_event {
    pub element: usize,
    pub event_type: c_int,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: PthreadMutex,
    pub cond: PthreadCond,
    pub events_completed: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_ah`.
#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: PthreadMutex,
    pub cond: PthreadCond,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: PthreadMutex,
    pub cond: PthreadCond,
    pub events_completed: u32,
}

/// `struct ibv_device_attr_ex` (`ibv_query_device_ex`): the legacy attributes, then the
/// extended capabilities, kept as their C members' bytes where softrdma has none to report.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    /// `struct ibv_odp_caps` (no on-demand paging: zero).
    pub odp_caps: [u64; 3],
    /// Zero: completions carry no timestamp (as on rxe).
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `struct ibv_tso_caps`.
    pub tso_caps: [u32; 2],
    /// `struct ibv_rss_caps`.
    pub rss_caps: [u64; 4],
    pub max_wq_type_rq: u32,
    /// `struct ibv_packet_pacing_caps`.
    pub packet_pacing_caps: [u32; 3],
    pub raw_packet_caps: u32,
    /// `struct ibv_tm_caps`.
    pub tm_caps: [u32; 5],
    /// `struct ibv_cq_moderation_caps`.
    pub cq_mod_caps: [u16; 2],
    pub max_dm_size: u64,
    /// `struct ibv_pci_atomic_caps`.
    pub pci_atomic_caps: [u16; 3],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_cq_init_attr_ex` (`ibv_create_cq_ex`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    /// `enum ibv_create_cq_wc_flags`.
    pub wc_flags: u64,
    /// `enum ibv_cq_init_attr_mask`.
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_poll_cq_attr` (`start_poll`'s argument).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// `start_poll`.
pub type StartPollFn = unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int;
/// `next_poll`.
pub type NextPollFn = unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int;
/// `end_poll`.
pub type EndPollFn = unsafe extern "C" fn(*mut ibv_cq_ex);
/// `read_opcode` (`enum ibv_wc_opcode`), `read_vendor_err`, `read_byte_len`, `read_imm_data`
/// (`__be32`), `read_qp_num`, `read_src_qp`, `read_wc_flags`, `read_slid` (all 32-bit).
pub type ReadU32Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u32;
/// `read_sl`, `read_dlid_path_bits`.
pub type ReadU8Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u8;

/// `struct ibv_cq_ex`: an `ibv_cq` (every CQ of ours is published in this shape, so
/// `ibv_cq_ex_to_cq` and the legacy verbs work on any of them), then the polled
/// completion's status and `wr_id`, then the poll functions.
#[repr(C)]
pub struct ibv_cq_ex {
    pub cq: ibv_cq,
    pub comp_mask: u32,
    /// `enum ibv_wc_status` of the current completion.
    pub status: c_int,
    pub wr_id: u64,
    pub start_poll: Option<StartPollFn>,
    pub next_poll: Option<NextPollFn>,
    pub end_poll: Option<EndPollFn>,
    pub read_opcode: Option<ReadU32Fn>,
    pub read_vendor_err: Option<ReadU32Fn>,
    pub read_byte_len: Option<ReadU32Fn>,
    pub read_imm_data: Option<ReadU32Fn>,
    pub read_qp_num: Option<ReadU32Fn>,
    pub read_src_qp: Option<ReadU32Fn>,
    pub read_wc_flags: Option<ReadU32Fn>,
    pub read_slid: Option<ReadU32Fn>,
    pub read_sl: Option<ReadU8Fn>,
    pub read_dlid_path_bits: Option<ReadU8Fn>,
    /// `read_completion_ts`, `read_cvlan`, `read_flow_tag`, `read_tm_info`,
    /// `read_completion_wallclock_ns`: fields softrdma's completions do not have (creating a
    /// CQ that asks for them fails with `EOPNOTSUPP`).
    pub read_completion_ts: Slot,
    pub read_cvlan: Slot,
    pub read_flow_tag: Slot,
    pub read_tm_info: Slot,
    pub read_completion_wallclock_ns: Slot,
}

/// `struct ibv_rx_hash_conf` (RSS; raw packet QPs only, which softrdma does not have).
pub type RxHashConf = [u64; 3];

/// `struct ibv_qp_init_attr_ex` (`ibv_create_qp_ex`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    /// `enum ibv_qp_init_attr_mask`.
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: RxHashConf,
    pub source_qpn: u32,
    /// `enum ibv_qp_create_send_ops_flags`.
    pub send_ops_flags: u64,
}

/// `struct ibv_data_buf` (`wr_set_inline_data_list`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `wr_atomic_cmp_swp`.
pub type WrCmpSwpFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64);
/// `wr_atomic_fetch_add`.
pub type WrFetchAddFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64);
/// `wr_rdma_read`, `wr_rdma_write`.
pub type WrRdmaFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64);
/// `wr_rdma_write_imm`.
pub type WrRdmaImmFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32);
/// `wr_send`.
pub type WrSendFn = unsafe extern "C" fn(*mut ibv_qp_ex);
/// `wr_send_imm` (`__be32`), `wr_send_inv` (an rkey).
pub type WrSendU32Fn = unsafe extern "C" fn(*mut ibv_qp_ex, u32);
/// `wr_set_ud_addr`.
pub type WrSetUdAddrFn = unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32);
/// `wr_set_inline_data`.
pub type WrSetInlineFn = unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize);
/// `wr_set_inline_data_list`.
pub type WrSetInlineListFn = unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf);
/// `wr_set_sge`.
pub type WrSetSgeFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32);
/// `wr_set_sge_list`.
pub type WrSetSgeListFn = unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge);
/// `wr_complete`.
pub type WrCompleteFn = unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int;

/// `struct ibv_qp_ex`: an `ibv_qp` (every QP of ours is published in this shape), then the
/// work-request builder that `ibv_wr_*` call: `wr_id` and `wr_flags` are read when a
/// builder (`wr_send`, `wr_rdma_write`, …) starts a WR, the setters complete the last one.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    /// `enum ibv_send_flags`.
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<WrCmpSwpFn>,
    pub wr_atomic_fetch_add: Option<WrFetchAddFn>,
    /// `wr_bind_mw`, `wr_local_inv`: no memory windows (`IBV_QP_EX_WITH_BIND_MW` and
    /// `…_LOCAL_INV` fail at create).
    pub wr_bind_mw: Slot,
    pub wr_local_inv: Slot,
    pub wr_rdma_read: Option<WrRdmaFn>,
    pub wr_rdma_write: Option<WrRdmaFn>,
    pub wr_rdma_write_imm: Option<WrRdmaImmFn>,
    pub wr_send: Option<WrSendFn>,
    pub wr_send_imm: Option<WrSendU32Fn>,
    pub wr_send_inv: Option<WrSendU32Fn>,
    /// `wr_send_tso`: raw packet QPs only.
    pub wr_send_tso: Slot,
    pub wr_set_ud_addr: Option<WrSetUdAddrFn>,
    /// `wr_set_xrc_srqn`: no XRC.
    pub wr_set_xrc_srqn: Slot,
    pub wr_set_inline_data: Option<WrSetInlineFn>,
    pub wr_set_inline_data_list: Option<WrSetInlineListFn>,
    pub wr_set_sge: Option<WrSetSgeFn>,
    pub wr_set_sge_list: Option<WrSetSgeListFn>,
    pub wr_start: Option<WrSendFn>,
    pub wr_complete: Option<WrCompleteFn>,
    pub wr_abort: Option<WrSendFn>,
    /// `wr_atomic_write`: not in the transport (`IBV_QP_EX_WITH_ATOMIC_WRITE` fails at create).
    pub wr_atomic_write: Slot,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr`. `wr` is the union `{rdma, atomic, ud}` as four 64-bit words; `rest`
/// the trailing `{bind_mw, tso}` union.
#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    /// `imm_data` (big-endian) / `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: [u64; 4],
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    pub rest: [u64; 6],
}

impl ibv_send_wr {
    /// `wr.rdma.remote_addr` / `wr.atomic.remote_addr`.
    pub fn remote_addr(&self) -> u64 {
        self.wr[0]
    }
    /// `wr.rdma.rkey`.
    pub fn rdma_rkey(&self) -> u32 {
        self.wr[1] as u32
    }
    /// `wr.atomic.compare_add`.
    pub fn compare_add(&self) -> u64 {
        self.wr[1]
    }
    /// `wr.atomic.swap`.
    pub fn swap(&self) -> u64 {
        self.wr[2]
    }
    /// `wr.atomic.rkey`.
    pub fn atomic_rkey(&self) -> u32 {
        self.wr[3] as u32
    }
    /// `wr.ud.ah` (an address).
    pub fn ud_ah(&self) -> usize {
        self.wr[0] as usize
    }
    /// `wr.ud.remote_qpn`.
    pub fn ud_remote_qpn(&self) -> u32 {
        self.wr[1] as u32
    }
    /// `wr.ud.remote_qkey`.
    pub fn ud_remote_qkey(&self) -> u32 {
        (self.wr[1] >> 32) as u32
    }
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (big-endian) / `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

softrdma_ffi::qp_init_attr_legacy!(ibv_qp_init_attr_ex => ibv_qp_init_attr);

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ib_uverbs_global_route` (`<rdma/ib_user_verbs.h>`, the kernel's uverbs ABI).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_global_route {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_ah_attr {
    pub grh: ib_uverbs_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_uverbs_qp_attr {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub alt_ah_attr: ib_uverbs_ah_attr,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 5],
}

/// `struct ib_user_path_rec` (`<rdma/ib_user_sa.h>`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ib_user_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: u32,
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

softrdma_ffi::layout_table! {
    ibv_gid { raw }
    ibv_device { ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path }
    ibv_context_ops { poll_cq, req_notify_cq, post_srq_recv, post_send, post_recv }
    ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
    verbs_context { query_port, create_cq_ex, priv_, query_device_ex, create_qp_ex,
        abi_placeholder3, sz, context }
    ibv_device_attr_ex { orig_attr, comp_mask, odp_caps, completion_timestamp_mask,
        hca_core_clock, device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq,
        packet_pacing_caps, raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps,
        xrc_odp_caps, phys_port_cnt_ex }
    ibv_cq_init_attr_ex { cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags,
        parent_domain }
    ibv_poll_cq_attr { comp_mask }
    ibv_cq_ex { cq, comp_mask, status, wr_id, start_poll, next_poll, end_poll, read_opcode,
        read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp, read_wc_flags,
        read_slid, read_sl, read_dlid_path_bits, read_completion_ts, read_cvlan, read_flow_tag,
        read_tm_info, read_completion_wallclock_ns }
    ibv_qp_init_attr_ex { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all,
        comp_mask, pd, xrcd, create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn,
        send_ops_flags }
    ibv_data_buf { addr, length }
    ibv_qp_ex { qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add,
        wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send,
        wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn,
        wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start,
        wr_complete, wr_abort, wr_atomic_write }
    ibv_device_attr { fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
        vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd, max_cq,
        max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
        max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
        max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
        max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt }
    ibv_port_attr { state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz,
        bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl,
        subnet_timeout, init_type_reply, active_width, active_speed, phys_state, link_layer,
        flags, port_cap_flags2 }
    ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex }
    ibv_pd { context, handle }
    ib_uverbs_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
    ib_uverbs_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
    ib_uverbs_qp_attr { qp_attr_mask, qp_state, cur_qp_state, path_mtu, path_mig_state, qkey,
        rq_psn, sq_psn, dest_qp_num, qp_access_flags, ah_attr, alt_ah_attr, max_send_wr,
        max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, pkey_index, alt_pkey_index,
        en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
        port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout }
    ib_user_path_rec { dgid, sgid, dlid, slid, raw_traffic, flow_label, reversible, mtu, pkey,
        hop_limit, traffic_class, numb_path, sl, mtu_selector, rate_selector, rate,
        packet_life_time_selector, packet_life_time, preference }
    ibv_sa_path_rec { dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class,
        reversible, numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate,
        packet_life_time_selector, packet_life_time, preference }
    ibv_ah { context, pd, handle }
    ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed }
    ibv_srq_attr { max_wr, max_sge, srq_limit }
    ibv_async_event { element, event_type }
    ibv_srq_init_attr { srq_context, attr }
    ibv_mr { context, pd, addr, length, handle, lkey, rkey }
    ibv_comp_channel { context, fd, refcnt }
    ibv_cq { context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed }
    ibv_qp { context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
        mutex, cond, events_completed }
    ibv_sge { addr, length, lkey }
    ibv_send_wr { wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr, remote_srqn,
        rest }
    ibv_recv_wr { wr_id, next, sg_list, num_sge }
    ibv_wc { wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags,
        pkey_index, slid, sl, dlid_path_bits }
    ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
    ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
    ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
    ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
    ibv_qp_attr { qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn,
        dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
        en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
        port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit }
}

#[cfg(test)]
mod tests {
    use super::LAYOUT;

    /// Compiles `tests/abi/layout.c` against the system's `<infiniband/verbs.h>` and compares
    /// every line it prints with [`LAYOUT`], both ways.
    #[test]
    fn layout_matches_the_debian_header() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/abi/layout.c");
        softrdma_ffi::audit::check_layout(
            &src,
            "infiniband/verbs.h",
            "libibverbs-dev (.ci/run does)",
            LAYOUT,
            101,
        )
        .unwrap();
    }
}
