//! The private interface between this library and softrdma's `librdmacm.so.1` (crate
//! `softrdma-rdmacm`): the process's RDMA CM lives here, beside the devices it shares a
//! socket with, and librdmacm reaches it through one table of entry points.
//!
//! librdmacm asks for the table with `dlvsym("softrdma_rdmacm_ops", "SOFTRDMA_PRIVATE_1")`
//! (as rdma-core's librdmacm calls private libibverbs symbols): a program whose
//! `libibverbs.so.1` is not ours gets no table, and every `rdma_*` call fails with `ENODEV`
//! instead of a second copy of the stack competing for `<ip>:4791`.
//!
//! This file is compiled into both libraries (the rdmacm crate includes it by path), so the
//! two always agree on it; `CmOps::version` and `CmOps::size` guard against a
//! `librdmacm.so.1` and a `libibverbs.so.1` from different builds. It holds plain `#[repr(C)]`
//! data and function-pointer types only.
//!
//! Conventions: ids and channels are numbers (never 0); every entry returns 0 or a positive
//! errno value; addresses are `struct sockaddr_storage`; the `ibv_*` objects are pointers
//! of this library, passed as `*mut c_void` (the rdmacm crate does not know their layout).

#![allow(non_camel_case_types)]

use core::ffi::{c_int, c_void};

/// The table's version: bumped whenever anything in this file changes meaning.
pub const CM_OPS_VERSION: u32 = 2;

/// The private version node of [`CmOps`]'s accessor.
pub const PRIVATE_NODE: &str = "SOFTRDMA_PRIVATE_1";

/// The accessor's name.
pub const OPS_SYMBOL: &str = "softrdma_rdmacm_ops";

/// `struct rdma_conn_param` as the CM takes it (`rdma_connect`, `rdma_accept`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CmConnIn {
    pub private_data: *const u8,
    pub private_data_len: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    /// 1: `qp_num` is the id's own QP (created by `create_qp`), which the CM moves; 0: a QP
    /// the user moves itself (`rdma_init_qp_attr`, `rdma_establish`).
    pub has_qp: u8,
    pub _pad: u8,
    pub qp_num: u32,
}

/// `struct sockaddr_storage`'s bytes (size and alignment are the C struct's).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockaddrStorage(pub [u8; 128]);

/// What librdmacm shows in a `struct rdma_cm_id` (refreshed after each call and event).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CmIdInfo {
    /// The id's device context (`ibv_context *`), NULL before an address is bound.
    pub verbs: *mut c_void,
    pub src: SockaddrStorage,
    pub dst: SockaddrStorage,
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub pkey: u16,
    pub port_num: u8,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
}

/// The largest private data an event carries (a REQ's 92 bytes, a REJ's 148 fit).
pub const EVENT_PRIVATE_DATA_MAX: usize = 256;

/// One event (`struct rdma_cm_event`, flattened).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CmEventOut {
    /// The id the event is about; for CONNECT_REQUEST the new id.
    pub id: u32,
    /// CONNECT_REQUEST: the listener (0 otherwise).
    pub listen_id: u32,
    /// `enum rdma_cm_event_type`.
    pub event: c_int,
    pub status: c_int,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    /// 1: the `ud_*` fields hold `param.ud` (a UD id's event).
    pub ud: u8,
    pub ah_is_global: u8,
    pub qp_num: u32,
    pub private_data_len: u32,
    pub private_data: [u8; EVENT_PRIVATE_DATA_MAX],
    pub ud_qp_num: u32,
    pub ud_qkey: u32,
    pub ah_dgid: [u8; 16],
    pub ah_flow_label: u32,
    pub ah_sgid_index: u8,
    pub ah_hop_limit: u8,
    pub ah_traffic_class: u8,
    pub ah_sl: u8,
    pub ah_port_num: u8,
    pub ah_static_rate: u8,
    pub ah_dlid: u16,
}

impl Default for CmEventOut {
    fn default() -> Self {
        CmEventOut {
            id: 0,
            listen_id: 0,
            event: 0,
            status: 0,
            responder_resources: 0,
            initiator_depth: 0,
            flow_control: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            srq: 0,
            ud: 0,
            ah_is_global: 0,
            qp_num: 0,
            private_data_len: 0,
            private_data: [0; EVENT_PRIVATE_DATA_MAX],
            ud_qp_num: 0,
            ud_qkey: 0,
            ah_dgid: [0; 16],
            ah_flow_label: 0,
            ah_sgid_index: 0,
            ah_hop_limit: 0,
            ah_traffic_class: 0,
            ah_sl: 0,
            ah_port_num: 0,
            ah_static_rate: 0,
            ah_dlid: 0,
        }
    }
}

/// What `create_qp` made (`ibv_*` pointers of this library; NULL where the caller gave its
/// own).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CmQpOut {
    pub qp: *mut c_void,
    /// The QP's number.
    pub qp_num: u32,
    pub pd: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq: *mut c_void,
    pub send_cq_channel: *mut c_void,
    pub recv_cq_channel: *mut c_void,
}

impl CmQpOut {
    /// Nothing made yet: every pointer NULL.
    pub const NONE: CmQpOut = CmQpOut {
        qp: core::ptr::null_mut(),
        qp_num: 0,
        pd: core::ptr::null_mut(),
        send_cq: core::ptr::null_mut(),
        recv_cq: core::ptr::null_mut(),
        send_cq_channel: core::ptr::null_mut(),
        recv_cq_channel: core::ptr::null_mut(),
    };
}

/// What `create_srq` made (`ibv_*` pointers of this library; NULL where it made nothing).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CmSrqOut {
    pub srq: *mut c_void,
    /// The device's PD, when the caller gave none.
    pub pd: *mut c_void,
    pub recv_cq: *mut c_void,
    pub recv_cq_channel: *mut c_void,
}

impl CmSrqOut {
    /// Nothing made yet: every pointer NULL.
    pub const NONE: CmSrqOut = CmSrqOut {
        srq: core::ptr::null_mut(),
        pd: core::ptr::null_mut(),
        recv_cq: core::ptr::null_mut(),
        recv_cq_channel: core::ptr::null_mut(),
    };
}

/// The entry points (see the module docs for the conventions).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CmOps {
    pub version: u32,
    /// `size_of::<CmOps>()`.
    pub size: u32,
    /// A channel: its pollable descriptor and its number.
    pub chan_create: unsafe extern "C" fn(fd: *mut c_int, chan: *mut u32) -> c_int,
    pub chan_destroy: unsafe extern "C" fn(chan: u32) -> c_int,
    /// Waits (as the descriptor's `O_NONBLOCK` says) for the channel's next event.
    pub get_event: unsafe extern "C" fn(chan: u32, out: *mut CmEventOut) -> c_int,
    /// `ps`: `enum rdma_port_space`; `qp_type`: `enum ibv_qp_type`.
    pub id_create:
        unsafe extern "C" fn(chan: u32, ps: c_int, qp_type: c_int, id: *mut u32) -> c_int,
    pub id_destroy: unsafe extern "C" fn(id: u32) -> c_int,
    pub id_migrate: unsafe extern "C" fn(id: u32, chan: u32) -> c_int,
    pub id_info: unsafe extern "C" fn(id: u32, out: *mut CmIdInfo) -> c_int,
    pub bind: unsafe extern "C" fn(id: u32, addr: *const c_void) -> c_int,
    /// `src` may be NULL.
    pub resolve_addr: unsafe extern "C" fn(
        id: u32,
        src: *const c_void,
        dst: *const c_void,
        timeout_ms: c_int,
    ) -> c_int,
    pub resolve_route: unsafe extern "C" fn(id: u32, timeout_ms: c_int) -> c_int,
    pub listen: unsafe extern "C" fn(id: u32, backlog: c_int) -> c_int,
    /// `rdma_create_qp`: `pd` may be NULL (the device's PD), `attr` is an
    /// `ibv_qp_init_attr *` whose NULL CQs are created here.
    pub create_qp: unsafe extern "C" fn(
        id: u32,
        pd: *mut c_void,
        attr: *mut c_void,
        out: *mut CmQpOut,
    ) -> c_int,
    /// `rdma_destroy_qp`: destroys `qp` and the CQs and channels `create_qp` made for it.
    pub destroy_qp: unsafe extern "C" fn(id: u32, qp: *mut c_void, made: *const CmQpOut) -> c_int,
    pub connect: unsafe extern "C" fn(id: u32, param: *const CmConnIn) -> c_int,
    pub accept: unsafe extern "C" fn(id: u32, param: *const CmConnIn) -> c_int,
    /// `ece`: 1 for `rdma_reject_ece` (REJ 35).
    pub reject: unsafe extern "C" fn(id: u32, data: *const u8, len: u32, ece: c_int) -> c_int,
    pub disconnect: unsafe extern "C" fn(id: u32) -> c_int,
    pub establish: unsafe extern "C" fn(id: u32) -> c_int,
    /// `attr`: an `ibv_qp_attr *` (its `qp_state` names the target state).
    pub init_qp_attr: unsafe extern "C" fn(id: u32, attr: *mut c_void, mask: *mut c_int) -> c_int,
    pub set_option: unsafe extern "C" fn(
        id: u32,
        level: c_int,
        name: c_int,
        val: *const c_void,
        len: usize,
    ) -> c_int,
    pub set_local_ece: unsafe extern "C" fn(id: u32, vendor_id: u32, options: u32) -> c_int,
    pub get_remote_ece:
        unsafe extern "C" fn(id: u32, vendor_id: *mut u32, options: *mut u32) -> c_int,
    /// Every device's context (opened once per process): fills up to `max`, returns the
    /// count through `n`.
    pub contexts: unsafe extern "C" fn(out: *mut *mut c_void, max: c_int, n: *mut c_int) -> c_int,
    /// `rdma_join_multicast_ex`: `flags` is `RDMA_MC_JOIN_FLAG_*` (0 full member, 1
    /// send-only full member); MULTICAST_JOIN follows, its `ah_dgid` the group's MGID.
    pub join_mc: unsafe extern "C" fn(id: u32, addr: *const c_void, flags: c_int) -> c_int,
    /// `rdma_leave_multicast` (after the caller detached the id's QP).
    pub leave_mc: unsafe extern "C" fn(id: u32, addr: *const c_void) -> c_int,
    /// `ibv_attach_mcast` (`attach` 1) / `ibv_detach_mcast` (0) of `qp` (`ibv_qp *`) to the
    /// 16-byte MGID at `mgid`, as librdmacm's `ucma_process_join` / `rdma_leave_multicast`.
    pub attach_mc: unsafe extern "C" fn(qp: *mut c_void, mgid: *const u8, attach: c_int) -> c_int,
    /// `rdma_notify`: `event` is an `enum ibv_event_type`.
    pub notify: unsafe extern "C" fn(id: u32, event: c_int) -> c_int,
    /// `rdma_create_srq_ex` of a basic SRQ: `pd` may be NULL (the device's PD), `attr` is an
    /// `ibv_srq_init_attr *` (its granted `attr` written back); with `make_cq` 1 a receive CQ
    /// of `attr.max_wr` entries and its channel are made too (`ucma_create_cqs`).
    pub create_srq: unsafe extern "C" fn(
        id: u32,
        pd: *mut c_void,
        attr: *mut c_void,
        make_cq: c_int,
        out: *mut CmSrqOut,
    ) -> c_int,
    /// `rdma_destroy_srq`: destroys `made.srq` and the CQ and channel `create_srq` made.
    pub destroy_srq: unsafe extern "C" fn(made: *const CmSrqOut) -> c_int,
    /// `rdma_create_qp_ex`: `attr` is an `ibv_qp_init_attr_ex *`; its PD (the device's when
    /// its mask has none) and missing CQs are filled in and the QP made by
    /// `ibv_create_qp_ex` (send ops flags, create flags as that call takes them).
    pub create_qp_ex: unsafe extern "C" fn(id: u32, attr: *mut c_void, out: *mut CmQpOut) -> c_int,
}
