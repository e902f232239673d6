//! The `rdma_*` calls of rdma-core 44's librdmacm, and its rsockets `r*` calls (which fail
//! with `ENOSYS` until they are implemented).
//!
//! The CM's work is done in softrdma's libibverbs (the `private` module); this module keeps
//! the C objects: an `rdma_cm_id` is `Obj<rdma_cm_id, IdRs>` (the CM's id number inside), an
//! `rdma_event_channel` is `Obj<rdma_event_channel, ChanRs>`, an event is
//! `Obj<rdma_cm_event, EvRs>` (its private data inside) until `rdma_ack_cm_event`.
//!
//! **Synchronous ids** (a NULL channel, `rdma_create_ep`): as librdmacm does, such an id gets
//! a channel of its own and each call that ends in an event waits for it there
//! (`ucma_complete`): its status becomes the call's errno, the event stays in `id->event`
//! until the next call or `rdma_destroy_id`.

#![allow(unsafe_code)]
// Every export's contract is rdma-core's documentation of that call.
#![allow(clippy::missing_safety_doc)]

use core::ffi::{c_char, c_int, c_void};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::abi::*;
use crate::cm_abi::{CmConnIn, CmEventOut, CmIdInfo, CmOps, CmQpOut, CmSrqOut, SockaddrStorage};
use crate::entry::{entry, Errno};
use crate::private;
use crate::ptr;

// The `.symver` directives binding `sv__NAME` to `NAME@@RDMACM_1.x` (build.rs).
#[cfg(not(test))]
include!(concat!(env!("OUT_DIR"), "/symver.rs"));

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Turns a table entry's return (0 or an errno value) into a `Result`.
fn ok(r: c_int) -> Result<(), Errno> {
    if r == 0 {
        Ok(())
    } else {
        Err(Errno(r))
    }
}

fn ops() -> Result<&'static CmOps, Errno> {
    private::ops()
}

/// What librdmacm answers for `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`: the device's
/// outstanding RDMA READ limit (softrdma's devices report 16 per QP).
const MAX_RD_ATOMIC: u8 = 16;

// ----- event channels -----

/// A channel's Rust side.
pub struct ChanRs {
    h: u32,
}

entry! {
    export null fn rdma_create_event_channel() -> *mut rdma_event_channel {
        let o = ops()?;
        let (mut fd, mut h) = (-1, 0);
        // SAFETY: the table's entry, with our own output slots.
        ok(unsafe { (o.chan_create)(&mut fd, &mut h) })?;
        Ok(ptr::publish(rdma_event_channel { fd }, ChanRs { h }))
    }
}

entry! {
    export value fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) -> () {
        let Ok(c) = ptr::get::<_, ChanRs>(channel) else { return };
        let Ok(o) = ops() else { return };
        // SAFETY: the table's entry.
        if unsafe { (o.chan_destroy)(c.h) } == 0 {
            let _ = ptr::retire::<_, ChanRs>(channel);
        }
    }
}

// ----- ids -----

/// An id's Rust side.
pub struct IdRs {
    /// The CM's id number.
    h: u32,
    /// A synchronous id (its channel is its own, destroyed with it).
    sync: bool,
    /// What `rdma_create_qp` made beside the QP (the QP number, and CQs, channels or PD it
    /// created), destroyed with the QP.
    made: Mutex<Option<MadeQp>>,
    /// CONNECT_REQUEST's resources, answered by `rdma_accept(id, NULL)`.
    req_responder_resources: AtomicU8,
    req_initiator_depth: AtomicU8,
    /// A passive endpoint's (`rdma_create_ep` with `RAI_PASSIVE`) PD and QP attributes, for
    /// the ids `rdma_get_request` hands out.
    ep: Mutex<Option<PassiveEp>>,
    /// Set once `rdma_destroy_id` started (events for it are no longer handed out).
    dying: AtomicBool,
    /// Events handed out and not yet acknowledged.
    unacked: AtomicU32,
    /// The groups joined (librdmacm's `id_priv->mc_list`).
    mcs: Mutex<Vec<Mc>>,
    /// What `rdma_create_srq` made (the SRQ, and the receive CQ it made), destroyed by
    /// `rdma_destroy_srq`.
    srq_made: Mutex<Option<MadeSrq>>,
}

/// `CmSrqOut` holds raw pointers of libibverbs' objects; they are only handed back to it.
#[derive(Clone, Copy)]
struct MadeSrq(CmSrqOut);

/// One multicast join (`struct cma_multicast`): what the program named, its context for
/// MULTICAST_JOIN's `param.ud.private_data`, and the MGID the join's event gave.
struct Mc {
    addr: SockaddrStorage,
    context: usize,
    send_only: bool,
    mgid: Option<[u8; 16]>,
}

/// `CmQpOut` holds raw pointers of libibverbs' objects; they are only handed back to it.
#[derive(Clone, Copy)]
struct MadeQp(CmQpOut);

#[derive(Clone, Copy)]
struct PassiveEp {
    pd: usize,
    attr: Option<ibv_qp_init_attr>,
}

/// The ids by CM number (events name them so).
fn ids() -> MutexGuard<'static, HashMap<u32, usize>> {
    static IDS: OnceLock<Mutex<HashMap<u32, usize>>> = OnceLock::new();
    lock(IDS.get_or_init(Default::default))
}

fn id_rs<'a>(id: *const rdma_cm_id) -> Result<&'a IdRs, Errno> {
    ptr::get::<rdma_cm_id, IdRs>(id)
}

/// The id's Rust side and the verbs library's CM table, what most commands start with.
fn id_ops<'a>(id: *const rdma_cm_id) -> Result<(&'a IdRs, &'static CmOps), Errno> {
    Ok((id_rs(id)?, ops()?))
}

fn new_id(
    h: u32,
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    qp_type: c_int,
    sync: bool,
) -> *mut rdma_cm_id {
    let c = rdma_cm_id {
        verbs: core::ptr::null_mut(),
        channel,
        context,
        qp: core::ptr::null_mut(),
        route: rdma_route {
            addr: rdma_addr {
                src_storage: SockaddrStorage([0; 128]),
                dst_storage: SockaddrStorage([0; 128]),
                ibaddr: rdma_ib_addr::default(),
            },
            path_rec: core::ptr::null_mut(),
            num_paths: 0,
        },
        ps,
        port_num: 0,
        event: core::ptr::null_mut(),
        send_cq_channel: core::ptr::null_mut(),
        send_cq: core::ptr::null_mut(),
        recv_cq_channel: core::ptr::null_mut(),
        recv_cq: core::ptr::null_mut(),
        srq: core::ptr::null_mut(),
        pd: core::ptr::null_mut(),
        qp_type,
    };
    let p = ptr::publish(
        c,
        IdRs {
            h,
            sync,
            made: Mutex::new(None),
            req_responder_resources: AtomicU8::new(0),
            req_initiator_depth: AtomicU8::new(0),
            ep: Mutex::new(None),
            dying: AtomicBool::new(false),
            unacked: AtomicU32::new(0),
            mcs: Mutex::new(Vec::new()),
            srq_made: Mutex::new(None),
        },
    );
    ids().insert(h, p as usize);
    p
}

/// Copies what the CM says of the id into the program's `rdma_cm_id`.
fn refresh(id: *mut rdma_cm_id) -> Result<(), Errno> {
    let (r, o) = id_ops(id)?;
    let mut info = CmIdInfo {
        verbs: core::ptr::null_mut(),
        src: SockaddrStorage([0; 128]),
        dst: SockaddrStorage([0; 128]),
        sgid: [0; 16],
        dgid: [0; 16],
        pkey: 0,
        port_num: 0,
        qp_type: 0,
    };
    // SAFETY: the table's entry, with our own output struct.
    ok(unsafe { (o.id_info)(r.h, &mut info) })?;
    ptr::update_c::<_, IdRs>(id, |p| {
        // SAFETY: `p` is a live id of ours (checked by update_c); only our fields are
        // written, through the raw pointer.
        unsafe {
            if !info.verbs.is_null() {
                (*p).verbs = info.verbs;
                (*p).port_num = info.port_num;
            }
            (*p).route.addr.src_storage = info.src;
            (*p).route.addr.dst_storage = info.dst;
            (*p).route.addr.ibaddr = rdma_ib_addr {
                sgid: ibv_gid { raw: info.sgid },
                dgid: ibv_gid { raw: info.dgid },
                pkey: info.pkey,
            };
        }
    })
}

fn port_space_qp_type(ps: c_int) -> Result<c_int, Errno> {
    match ps {
        RDMA_PS_TCP | RDMA_PS_IB => Ok(IBV_QPT_RC),
        RDMA_PS_UDP | RDMA_PS_IPOIB => Ok(IBV_QPT_UD),
        _ => Err(Errno(libc::EINVAL)),
    }
}

fn create_id(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    qp_type: c_int,
) -> Result<*mut rdma_cm_id, Errno> {
    let o = ops()?;
    let (channel, sync) = if channel.is_null() {
        // SAFETY: our own export.
        let c = unsafe { rdma_create_event_channel() };
        if c.is_null() {
            return Err(Errno(
                std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::ENOMEM),
            ));
        }
        (c, true)
    } else {
        (channel, false)
    };
    let ch = ptr::get::<_, ChanRs>(channel)?;
    let mut h = 0;
    // SAFETY: the table's entry, with our own output slot.
    if let Err(e) = ok(unsafe { (o.id_create)(ch.h, ps, qp_type, &mut h) }) {
        if sync {
            // SAFETY: our own export, on the channel made above.
            unsafe { rdma_destroy_event_channel(channel) };
        }
        return Err(e);
    }
    Ok(new_id(h, channel, context, ps, qp_type, sync))
}

entry! {
    export neg fn rdma_create_id(channel: *mut rdma_event_channel, id: *mut *mut rdma_cm_id, context: *mut c_void, ps: c_int) -> c_int {
        if id.is_null() {
            return Err(Errno::EINVAL);
        }
        let p = create_id(channel, context, ps, port_space_qp_type(ps)?)?;
        // SAFETY: the program's output slot, non-NULL.
        unsafe { ptr::write_out(id, p)? };
        Ok(0)
    }
}

/// Acknowledges a synchronous id's last event.
fn drop_sync_event(id: *mut rdma_cm_id) {
    let Ok(c) = ptr::copy_c::<_, IdRs>(id) else {
        return;
    };
    if !c.event.is_null() {
        // SAFETY: our own export, on an event of ours.
        unsafe { rdma_ack_cm_event(c.event) };
        let _ = ptr::update_c::<_, IdRs>(id, |p| {
            // SAFETY: a live id of ours; our field.
            unsafe { (*p).event = core::ptr::null_mut() }
        });
    }
}

entry! {
    export neg fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
        let (r, o) = id_ops(id)?;
        drop_sync_event(id);
        r.dying.store(true, Ordering::Release);
        // librdmacm waits for the program to acknowledge the id's events first.
        let start = std::time::Instant::now();
        while r.unacked.load(Ordering::Acquire) != 0 && start.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // SAFETY: the table's entry.
        let _ = unsafe { (o.id_destroy)(r.h) };
        ids().remove(&r.h);
        let c = ptr::copy_c::<_, IdRs>(id)?;
        let sync = r.sync;
        drop(ptr::retire::<_, IdRs>(id)?);
        if sync {
            // SAFETY: our own export, on the id's own channel.
            unsafe { rdma_destroy_event_channel(c.channel) };
        }
        Ok(0)
    }
}

entry! {
    export neg fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
        let (r, o) = id_ops(id)?;
        let ch = ptr::get::<_, ChanRs>(channel)?;
        // SAFETY: the table's entry.
        ok(unsafe { (o.id_migrate)(r.h, ch.h) })?;
        ptr::update_c::<_, IdRs>(id, |p| {
            // SAFETY: a live id of ours; our field.
            unsafe { (*p).channel = channel }
        })?;
        Ok(0)
    }
}

/// `ucma_complete`: a synchronous id waits for the event its call ends in.
fn complete(id: *mut rdma_cm_id) -> Result<(), Errno> {
    let r = id_rs(id)?;
    if !r.sync {
        return Ok(());
    }
    drop_sync_event(id);
    let c = ptr::copy_c::<_, IdRs>(id)?;
    let ev = take_event(c.channel)?;
    ptr::update_c::<_, IdRs>(id, |p| {
        // SAFETY: a live id of ours; our field.
        unsafe { (*p).event = ev }
    })?;
    let e = ptr::copy_c::<_, EvRs>(ev)?;
    if e.status != 0 {
        if e.event == 8 {
            // REJECTED
            return Err(Errno(libc::ECONNREFUSED));
        }
        return Err(Errno(e.status.abs()));
    }
    Ok(())
}

/// Reads a socket address's bytes (its family says how many).
///
/// # Safety
/// `p` is NULL or a `struct sockaddr` of its family's size.
unsafe fn sockaddr_bytes(p: *const c_void) -> Result<SockaddrStorage, Errno> {
    // SAFETY: the program's sockaddr (NULL is EINVAL): its family first.
    let fam: u16 = unsafe { ptr::read_in(p as *const u16)? };
    let len = match i32::from(fam) {
        libc::AF_INET => 16,
        libc::AF_INET6 => 28,
        libc::AF_IB => return Err(Errno(libc::EAFNOSUPPORT)),
        _ => return Err(Errno(libc::EAFNOSUPPORT)),
    };
    let mut s = SockaddrStorage([0; 128]);
    // SAFETY: a sockaddr of that family is `len` bytes long.
    let b = unsafe { ptr::read_bytes(p as *const u8, len)? };
    s.0[..len].copy_from_slice(&b);
    Ok(s)
}

entry! {
    export neg fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut c_void) -> c_int {
        let (r, o) = id_ops(id)?;
        // SAFETY: the program's sockaddr.
        let a = unsafe { sockaddr_bytes(addr)? };
        // SAFETY: the table's entry, with our copy.
        ok(unsafe { (o.bind)(r.h, a.0.as_ptr().cast()) })?;
        refresh(id)?;
        Ok(0)
    }
}

entry! {
    export neg fn rdma_resolve_addr(id: *mut rdma_cm_id, src_addr: *mut c_void, dst_addr: *mut c_void, timeout_ms: c_int) -> c_int {
        let (r, o) = id_ops(id)?;
        let src = if src_addr.is_null() {
            None
        } else {
            // SAFETY: the program's sockaddr, non-NULL.
            Some(unsafe { sockaddr_bytes(src_addr)? })
        };
        // SAFETY: as above (NULL is EINVAL).
        let dst = unsafe { sockaddr_bytes(dst_addr)? };
        let sp = src.as_ref().map(|s| s.0.as_ptr().cast()).unwrap_or(core::ptr::null());
        // SAFETY: the table's entry, with our copies.
        ok(unsafe { (o.resolve_addr)(r.h, sp, dst.0.as_ptr().cast(), timeout_ms) })?;
        refresh(id)?;
        complete(id)?;
        refresh(id)?;
        Ok(0)
    }
}

entry! {
    export neg fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
        let (r, o) = id_ops(id)?;
        // SAFETY: the table's entry.
        ok(unsafe { (o.resolve_route)(r.h, timeout_ms) })?;
        complete(id)?;
        refresh(id)?;
        Ok(0)
    }
}

entry! {
    export neg fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
        let (r, o) = id_ops(id)?;
        // SAFETY: the table's entry.
        ok(unsafe { (o.listen)(r.h, backlog) })?;
        refresh(id)?;
        Ok(0)
    }
}

fn create_qp(id: *mut rdma_cm_id, pd: *mut c_void, attr: *mut c_void) -> Result<(), Errno> {
    let (r, o) = id_ops(id)?;
    let c = ptr::copy_c::<_, IdRs>(id)?;
    if !c.qp.is_null() {
        return Err(Errno::EINVAL);
    }
    if attr.is_null() {
        return Err(Errno::EINVAL);
    }
    let pd = if pd.is_null() { c.pd } else { pd };
    // rdma_create_qp_ex: the id's CQs (rdma_create_srq's receive CQ) and SRQ where the
    // attributes name none.
    // SAFETY: the program's `ibv_qp_init_attr` (non-NULL), read and written as librdmacm does.
    let mut a = unsafe { ptr::read_in(attr as *const ibv_qp_init_attr)? };
    if a.send_cq.is_null() && !c.send_cq.is_null() {
        a.send_cq = c.send_cq;
    }
    if a.recv_cq.is_null() && !c.recv_cq.is_null() {
        a.recv_cq = c.recv_cq;
    }
    if a.srq.is_null() && !c.srq.is_null() {
        a.srq = c.srq;
    }
    // SAFETY: as above.
    unsafe { ptr::write_out(attr as *mut ibv_qp_init_attr, a)? };
    let mut made = CmQpOut::NONE;
    // SAFETY: the table's entry; `attr` is the program's `ibv_qp_init_attr`, which
    // libibverbs reads and writes (NULL was refused above).
    ok(unsafe { (o.create_qp)(r.h, pd, attr, &mut made) })?;
    // SAFETY: the program's struct, which libibverbs just read: its QP type.
    let qp_type = unsafe { ptr::read_in(attr as *const ibv_qp_init_attr)? }.qp_type;
    adopt_qp(id, made, pd, qp_type)
}

/// Records what `create_qp`/`create_qp_ex` made and shows it in the program's id.
fn adopt_qp(
    id: *mut rdma_cm_id,
    made: CmQpOut,
    pd: *mut c_void,
    qp_type: c_int,
) -> Result<(), Errno> {
    let r = id_rs(id)?;
    *lock(&r.made) = Some(MadeQp(made));
    let pd_now = if pd.is_null() { made.pd } else { pd };
    ptr::update_c::<_, IdRs>(id, |p| {
        // SAFETY: a live id of ours; our fields.
        unsafe {
            (*p).qp = made.qp;
            (*p).pd = pd_now;
            (*p).qp_type = qp_type;
            if !made.send_cq.is_null() {
                (*p).send_cq = made.send_cq;
                (*p).send_cq_channel = made.send_cq_channel;
            }
            if !made.recv_cq.is_null() {
                (*p).recv_cq = made.recv_cq;
                (*p).recv_cq_channel = made.recv_cq_channel;
            }
        }
    })
}

entry! {
    export neg fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut c_void, qp_init_attr: *mut c_void) -> c_int {
        create_qp(id, pd, qp_init_attr)?;
        Ok(0)
    }
}

entry! {
    /// Attributes whose mask names only the PD are `rdma_create_qp`'s; others go to
    /// `ibv_create_qp_ex` of softrdma's libibverbs (send ops flags give the QP an
    /// `ibv_qp_ex`; create flags other than none, XRC, RSS, TSO are its `EOPNOTSUPP`), with
    /// the id's PD, CQs and SRQ where the attributes name none, as librdmacm fills them.
    export neg fn rdma_create_qp_ex(id: *mut rdma_cm_id, qp_init_attr: *mut ibv_qp_init_attr_ex) -> c_int {
        // SAFETY: the program's struct (NULL is EINVAL).
        let mut a = unsafe { ptr::read_in(qp_init_attr as *const ibv_qp_init_attr_ex)? };
        if a.comp_mask & !IBV_QP_INIT_ATTR_PD == 0 {
            let pd = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 { a.pd } else { core::ptr::null_mut() };
            let mut b = a.legacy();
            create_qp(id, pd, (&mut b as *mut ibv_qp_init_attr).cast())?;
            // The capabilities granted, as libibverbs writes them back.
            a.cap = b.cap;
            // SAFETY: the same program struct, writable.
            unsafe { ptr::write_out(qp_init_attr, a)? };
            return Ok(0);
        }
        let (r, o) = id_ops(id)?;
        let c = ptr::copy_c::<_, IdRs>(id)?;
        if !c.qp.is_null() {
            return Err(Errno::EINVAL);
        }
        if (a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null()) && !c.pd.is_null() {
            a.pd = c.pd;
            a.comp_mask |= IBV_QP_INIT_ATTR_PD;
        }
        if a.send_cq.is_null() {
            a.send_cq = c.send_cq;
        }
        if a.recv_cq.is_null() {
            a.recv_cq = c.recv_cq;
        }
        if a.srq.is_null() {
            a.srq = c.srq;
        }
        // SAFETY: the same program struct, writable.
        unsafe { ptr::write_out(qp_init_attr, a)? };
        let mut made = CmQpOut::NONE;
        // SAFETY: the table's entry; the program's extended attributes, read and written
        // by libibverbs.
        ok(unsafe { (o.create_qp_ex)(r.h, qp_init_attr.cast(), &mut made) })?;
        // SAFETY: the program's struct, as libibverbs left it: the PD it used.
        let after = unsafe { ptr::read_in(qp_init_attr as *const ibv_qp_init_attr_ex)? };
        adopt_qp(id, made, after.pd, after.qp_type)?;
        Ok(0)
    }
}

entry! {
    export value fn rdma_destroy_qp(id: *mut rdma_cm_id) -> () {
        let Ok(r) = id_rs(id) else { return };
        let Ok(o) = ops() else { return };
        let Ok(c) = ptr::copy_c::<_, IdRs>(id) else { return };
        let made = lock(&r.made).take();
        let mp = made.as_ref().map(|m| &m.0 as *const CmQpOut).unwrap_or(core::ptr::null());
        // SAFETY: the table's entry, with the id's QP and our record.
        let _ = unsafe { (o.destroy_qp)(r.h, c.qp, mp) };
        let _ = ptr::update_c::<_, IdRs>(id, |p| {
            // SAFETY: a live id of ours; our fields.
            unsafe {
                (*p).qp = core::ptr::null_mut();
                if let Some(m) = made {
                    if !m.0.send_cq.is_null() {
                        (*p).send_cq = core::ptr::null_mut();
                        (*p).send_cq_channel = core::ptr::null_mut();
                    }
                    if !m.0.recv_cq.is_null() {
                        (*p).recv_cq = core::ptr::null_mut();
                        (*p).recv_cq_channel = core::ptr::null_mut();
                    }
                }
            }
        });
    }
}

/// The connection parameters for the CM: `RDMA_MAX_*` become the device's limit, NULL
/// librdmacm's defaults (retry counts 7).
///
/// # Safety
/// `p` is NULL or a program's `rdma_conn_param`.
unsafe fn conn_in(r: &IdRs, p: *const rdma_conn_param, passive: bool) -> Result<CmConnIn, Errno> {
    let made = lock(&r.made).map(|m| m.0.qp_num);
    let mut c = CmConnIn {
        private_data: core::ptr::null(),
        private_data_len: 0,
        responder_resources: MAX_RD_ATOMIC,
        initiator_depth: MAX_RD_ATOMIC,
        flow_control: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        has_qp: u8::from(made.is_some()),
        _pad: 0,
        qp_num: made.unwrap_or(0),
    };
    if passive {
        c.responder_resources = r.req_responder_resources.load(Ordering::Relaxed);
        c.initiator_depth = r.req_initiator_depth.load(Ordering::Relaxed);
    }
    if !p.is_null() {
        // SAFETY: the program's struct, non-NULL.
        let q = unsafe { ptr::read_in(p)? };
        c.private_data = q.private_data.cast();
        c.private_data_len = u32::from(q.private_data_len);
        c.responder_resources = match q.responder_resources {
            0xff => MAX_RD_ATOMIC,
            v => v,
        };
        c.initiator_depth = match q.initiator_depth {
            0xff => MAX_RD_ATOMIC,
            v => v,
        };
        c.flow_control = q.flow_control;
        c.retry_count = q.retry_count;
        c.rnr_retry_count = q.rnr_retry_count;
        c.srq = q.srq;
        if made.is_none() {
            c.qp_num = q.qp_num;
        }
    }
    Ok(c)
}

entry! {
    export neg fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
        let (r, o) = id_ops(id)?;
        // SAFETY: the program's parameters (NULL: defaults).
        let c = unsafe { conn_in(r, conn_param, false)? };
        // SAFETY: the table's entry; the private data pointer is the program's, valid for
        // the call.
        ok(unsafe { (o.connect)(r.h, &c) })?;
        complete(id)?;
        Ok(0)
    }
}

entry! {
    export neg fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
        let (r, o) = id_ops(id)?;
        // SAFETY: the program's parameters (NULL: the request's).
        let c = unsafe { conn_in(r, conn_param, true)? };
        // SAFETY: the table's entry; the private data pointer is the program's.
        ok(unsafe { (o.accept)(r.h, &c) })?;
        complete(id)?;
        Ok(0)
    }
}

fn reject(id: *mut rdma_cm_id, data: *const c_void, len: u8, ece: bool) -> Result<c_int, Errno> {
    let (r, o) = id_ops(id)?;
    // SAFETY: the table's entry; `data` is the program's, `len` bytes.
    ok(unsafe { (o.reject)(r.h, data.cast(), u32::from(len), c_int::from(ece)) })?;
    Ok(0)
}

entry! {
    export neg fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int {
        reject(id, private_data, private_data_len, false)
    }
}

entry! {
    export neg fn rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int {
        reject(id, private_data, private_data_len, true)
    }
}

entry! {
    export neg fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
        let (r, o) = id_ops(id)?;
        // SAFETY: the table's entry.
        ok(unsafe { (o.disconnect)(r.h) })?;
        Ok(0)
    }
}

entry! {
    export neg fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
        let (r, o) = id_ops(id)?;
        // SAFETY: the table's entry.
        ok(unsafe { (o.establish)(r.h) })?;
        Ok(0)
    }
}

entry! {
    export neg fn rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut c_void, qp_attr_mask: *mut c_int) -> c_int {
        let (r, o) = id_ops(id)?;
        // SAFETY: the table's entry; the program's `ibv_qp_attr` and mask slot.
        ok(unsafe { (o.init_qp_attr)(r.h, qp_attr, qp_attr_mask) })?;
        Ok(0)
    }
}

entry! {
    /// `rdma_notify`: `IBV_EVENT_COMM_EST` establishes a passive connection whose QP saw
    /// data before the RTU (`-EISCONN` once established), `IBV_EVENT_PATH_MIG` is a no-op on
    /// an established connection (RoCE has no alternate path), anything else `EINVAL`.
    export neg fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
        let (r, o) = id_ops(id)?;
        // SAFETY: the table's entry.
        ok(unsafe { (o.notify)(r.h, event) })?;
        Ok(0)
    }
}

entry! {
    export neg fn rdma_set_option(id: *mut rdma_cm_id, level: c_int, optname: c_int, optval: *mut c_void, optlen: usize) -> c_int {
        let (r, o) = id_ops(id)?;
        // SAFETY: the table's entry; the program's value, `optlen` bytes.
        ok(unsafe { (o.set_option)(r.h, level, optname, optval, optlen) })?;
        Ok(0)
    }
}

entry! {
    export neg fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
        let (r, o) = id_ops(id)?;
        // SAFETY: the program's struct (NULL is EINVAL).
        let e = unsafe { ptr::read_in(ece)? };
        // SAFETY: the table's entry.
        ok(unsafe { (o.set_local_ece)(r.h, e.vendor_id, e.options) })?;
        Ok(0)
    }
}

entry! {
    export neg fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
        let (r, o) = id_ops(id)?;
        let (mut v, mut opt) = (0, 0);
        // SAFETY: the table's entry, our output slots.
        ok(unsafe { (o.get_remote_ece)(r.h, &mut v, &mut opt) })?;
        // SAFETY: the program's struct (NULL is EINVAL).
        unsafe { ptr::write_out(ece, ibv_ece { vendor_id: v, options: opt, comp_mask: 0 })? };
        Ok(0)
    }
}

entry! {
    export value fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
        // sin_port and sin6_port sit at the same offset: network order, as returned.
        ptr::copy_c::<_, IdRs>(id)
            .map(|c| u16::from_ne_bytes([c.route.addr.src_storage.0[2], c.route.addr.src_storage.0[3]]))
            .unwrap_or(0)
    }
}

entry! {
    export value fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
        ptr::copy_c::<_, IdRs>(id)
            .map(|c| u16::from_ne_bytes([c.route.addr.dst_storage.0[2], c.route.addr.dst_storage.0[3]]))
            .unwrap_or(0)
    }
}

// ----- events -----

/// An event's Rust side: the private data its `param` points at, and its id.
pub struct EvRs {
    _data: Box<[u8]>,
    id: usize,
}

/// Waits for the next event on `channel` and makes the program's `rdma_cm_event` of it (a
/// CONNECT_REQUEST's new id made here).
fn take_event(channel: *mut rdma_event_channel) -> Result<*mut rdma_cm_event, Errno> {
    let ch = ptr::get::<_, ChanRs>(channel)?;
    let o = ops()?;
    loop {
        let mut out = CmEventOut::default();
        // SAFETY: the table's entry, our output struct.
        ok(unsafe { (o.get_event)(ch.h, &mut out) })?;
        let known = ids().get(&out.id).copied();
        let listen = if out.listen_id != 0 {
            ids().get(&out.listen_id).copied()
        } else {
            None
        };
        let id = match (known, listen) {
            (Some(i), _) => i as *mut rdma_cm_id,
            (None, Some(l)) => {
                let l = l as *mut rdma_cm_id;
                let lc = ptr::copy_c::<_, IdRs>(l)?;
                let lr = id_rs(l)?;
                let p = if lr.sync {
                    // A synchronous listener's requests get channels of their own.
                    // SAFETY: our own export.
                    let c = unsafe { rdma_create_event_channel() };
                    let Ok(cr) = ptr::get::<_, ChanRs>(c) else {
                        continue;
                    };
                    // SAFETY: the table's entry.
                    let _ = unsafe { (o.id_migrate)(out.id, cr.h) };
                    new_id(out.id, c, lc.context, lc.ps, lc.qp_type, true)
                } else {
                    new_id(out.id, channel, lc.context, lc.ps, lc.qp_type, false)
                };
                let r = id_rs(p)?;
                r.req_responder_resources
                    .store(out.responder_resources, Ordering::Relaxed);
                r.req_initiator_depth
                    .store(out.initiator_depth, Ordering::Relaxed);
                p
            }
            (None, None) => continue,
        };
        let r = id_rs(id)?;
        if r.dying.load(Ordering::Acquire) {
            continue;
        }
        let _ = refresh(id);
        let n = (out.private_data_len as usize).min(out.private_data.len());
        let data: Box<[u8]> = out.private_data[..n].into();
        let dp = if n == 0 {
            core::ptr::null()
        } else {
            data.as_ptr().cast::<c_void>()
        };
        let c = ptr::copy_c::<_, IdRs>(id)?;
        let mut dp = dp;
        if out.event == EVENT_MULTICAST_JOIN {
            // ucma_process_join: the event's context is the join's; the id's QP hears the
            // group (not for a send-only member); a failed attach makes it MULTICAST_ERROR.
            let mut mcs = lock(&r.mcs);
            let Some(m) = mcs
                .iter_mut()
                .find(|m| m.mgid.is_none() && mgid_matches(&m.addr, &out.ah_dgid))
            else {
                continue;
            };
            m.mgid = Some(out.ah_dgid);
            dp = m.context as *const c_void;
            if !c.qp.is_null() && !m.send_only {
                // SAFETY: the table's entry; the QP is the id's, of our libibverbs.
                let e = unsafe { (o.attach_mc)(c.qp.cast(), out.ah_dgid.as_ptr(), 1) };
                if e != 0 {
                    crate::entry::set_errno(Errno(e));
                    out.event = EVENT_MULTICAST_ERROR;
                    out.status = -1;
                }
            }
        }
        let param = if out.ud != 0 || c.qp_type == IBV_QPT_UD {
            rdma_cm_event_param {
                ud: rdma_ud_param {
                    private_data: dp,
                    private_data_len: n as u8,
                    ah_attr: ibv_ah_attr {
                        grh: ibv_global_route {
                            dgid: ibv_gid { raw: out.ah_dgid },
                            flow_label: out.ah_flow_label,
                            sgid_index: out.ah_sgid_index,
                            hop_limit: out.ah_hop_limit,
                            traffic_class: out.ah_traffic_class,
                        },
                        dlid: out.ah_dlid,
                        sl: out.ah_sl,
                        src_path_bits: 0,
                        static_rate: out.ah_static_rate,
                        is_global: out.ah_is_global,
                        port_num: out.ah_port_num,
                    },
                    qp_num: out.ud_qp_num,
                    qkey: out.ud_qkey,
                },
            }
        } else {
            rdma_cm_event_param {
                conn: rdma_conn_param {
                    private_data: dp,
                    private_data_len: n as u8,
                    responder_resources: out.responder_resources,
                    initiator_depth: out.initiator_depth,
                    flow_control: out.flow_control,
                    retry_count: out.retry_count,
                    rnr_retry_count: out.rnr_retry_count,
                    srq: out.srq,
                    qp_num: out.qp_num,
                },
            }
        };
        let listen_id = listen.unwrap_or(0) as *mut rdma_cm_id;
        r.unacked.fetch_add(1, Ordering::AcqRel);
        return Ok(ptr::publish(
            rdma_cm_event {
                id,
                listen_id,
                event: out.event,
                status: out.status,
                param,
            },
            EvRs {
                _data: data,
                id: id as usize,
            },
        ));
    }
}

entry! {
    export neg fn rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> c_int {
        if event.is_null() {
            return Err(Errno::EINVAL);
        }
        let e = take_event(channel)?;
        // SAFETY: the program's output slot, non-NULL.
        unsafe { ptr::write_out(event, e)? };
        Ok(0)
    }
}

entry! {
    export neg fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
        let e = ptr::retire::<_, EvRs>(event)?;
        if let Ok(r) = id_rs(e.rs.id as *const rdma_cm_id) {
            r.unacked.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(0)
    }
}

entry! {
    export value fn rdma_event_str(event: c_int) -> *const c_char {
        const NAMES: [&core::ffi::CStr; 16] = [
            c"RDMA_CM_EVENT_ADDR_RESOLVED",
            c"RDMA_CM_EVENT_ADDR_ERROR",
            c"RDMA_CM_EVENT_ROUTE_RESOLVED",
            c"RDMA_CM_EVENT_ROUTE_ERROR",
            c"RDMA_CM_EVENT_CONNECT_REQUEST",
            c"RDMA_CM_EVENT_CONNECT_RESPONSE",
            c"RDMA_CM_EVENT_CONNECT_ERROR",
            c"RDMA_CM_EVENT_UNREACHABLE",
            c"RDMA_CM_EVENT_REJECTED",
            c"RDMA_CM_EVENT_ESTABLISHED",
            c"RDMA_CM_EVENT_DISCONNECTED",
            c"RDMA_CM_EVENT_DEVICE_REMOVAL",
            c"RDMA_CM_EVENT_MULTICAST_JOIN",
            c"RDMA_CM_EVENT_MULTICAST_ERROR",
            c"RDMA_CM_EVENT_ADDR_CHANGE",
            c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        ];
        usize::try_from(event)
            .ok()
            .and_then(|i| NAMES.get(i))
            .map(|s| s.as_ptr())
            .unwrap_or(c"UNKNOWN EVENT".as_ptr())
    }
}

// ----- devices -----

/// The arrays `rdma_get_devices` handed out, until `rdma_free_devices`.
fn device_lists() -> MutexGuard<'static, Vec<Box<[usize]>>> {
    static L: OnceLock<Mutex<Vec<Box<[usize]>>>> = OnceLock::new();
    lock(L.get_or_init(Default::default))
}

entry! {
    export null fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut c_void {
        let o = ops()?;
        let mut n = 0;
        let mut buf = vec![0usize; 64];
        // SAFETY: the table's entry, our array of 64 slots.
        ok(unsafe { (o.contexts)(buf.as_mut_ptr().cast(), 63, &mut n) })?;
        let n = usize::try_from(n).unwrap_or(0).min(63);
        buf.truncate(n + 1);
        buf[n] = 0;
        if !num_devices.is_null() {
            // SAFETY: the program's output slot, non-NULL.
            unsafe { ptr::write_out(num_devices, n as c_int)? };
        }
        let list: Box<[usize]> = buf.into_boxed_slice();
        let p = list.as_ptr() as *mut *mut c_void;
        device_lists().push(list);
        Ok(p)
    }
}

entry! {
    export value fn rdma_free_devices(list: *mut *mut c_void) -> () {
        device_lists().retain(|l| !std::ptr::eq(l.as_ptr().cast::<*mut c_void>(), list));
    }
}

// ----- addresses -----

/// An `rdma_addrinfo`'s Rust side: the addresses and names it points at.
pub struct AiRs {
    _src: Option<Box<SockaddrStorage>>,
    _dst: Option<Box<SockaddrStorage>>,
    _names: Vec<std::ffi::CString>,
}

/// Why `rdma_getaddrinfo` failed: an errno (-1 and `errno`), or getaddrinfo's own code
/// (`EAI_*`, returned as is, as rdma-core returns what `getaddrinfo` said).
enum AiError {
    Errno(Errno),
    Gai(c_int),
}

impl From<Errno> for AiError {
    fn from(e: Errno) -> AiError {
        AiError::Errno(e)
    }
}

/// The port of `service`: a number, or a name looked up as rdma-core's `rdma_getaddrinfo`
/// does it (`getaddrinfo(3)` with the port space's socket type: the system's services
/// database, `/etc/services`); an unknown name is getaddrinfo's `EAI_SERVICE`.
fn service_port(service: &str, udp: bool) -> Result<u16, AiError> {
    if let Ok(p) = service.parse::<u16>() {
        return Ok(p);
    }
    let c = std::ffi::CString::new(service).map_err(|_| AiError::Gai(libc::EAI_SERVICE))?;
    // SAFETY: `addrinfo` is plain data; all zeros is its "no hints" value.
    let mut hints: libc::addrinfo = unsafe { core::mem::zeroed() };
    hints.ai_flags = libc::AI_PASSIVE;
    hints.ai_family = libc::AF_INET;
    hints.ai_socktype = if udp {
        libc::SOCK_DGRAM
    } else {
        libc::SOCK_STREAM
    };
    let mut res: *mut libc::addrinfo = core::ptr::null_mut();
    // SAFETY: a NUL-terminated service name, our hints, our result slot.
    let r = unsafe { libc::getaddrinfo(core::ptr::null(), c.as_ptr(), &hints, &mut res) };
    if r != 0 {
        return Err(AiError::Gai(r));
    }
    // SAFETY: getaddrinfo succeeded: `res` is a list whose first entry has an AF_INET
    // address (the family asked for), which we read and then free once.
    let port = unsafe {
        let a = (*res).ai_addr;
        let port = if a.is_null() || i32::from((*a).sa_family) != libc::AF_INET {
            None
        } else {
            Some(u16::from_be((*(a as *const libc::sockaddr_in)).sin_port))
        };
        libc::freeaddrinfo(res);
        port
    };
    port.ok_or(AiError::Gai(libc::EAI_SERVICE))
}

fn resolve(
    node: Option<&str>,
    service: Option<&str>,
    family: c_int,
    numeric: bool,
    udp: bool,
) -> Result<std::net::SocketAddr, AiError> {
    use std::net::ToSocketAddrs;
    let port: u16 = match service {
        None => 0,
        Some(s) => service_port(s, udp)?,
    };
    let node = node.ok_or(Errno::EINVAL)?;
    if let Ok(ip) = node.parse::<std::net::IpAddr>() {
        return Ok(std::net::SocketAddr::new(ip, port));
    }
    if numeric {
        return Err(Errno(libc::EINVAL).into());
    }
    (node, port)
        .to_socket_addrs()
        .map_err(|_| Errno(libc::ENODEV))?
        .find(|a| match family {
            libc::AF_INET => a.is_ipv4(),
            libc::AF_INET6 => a.is_ipv6(),
            _ => true,
        })
        .ok_or(Errno(libc::ENODEV).into())
}

fn storage_of(a: std::net::SocketAddr) -> (SockaddrStorage, u32) {
    let mut b = [0u8; 128];
    match a {
        std::net::SocketAddr::V4(v4) => {
            b[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&v4.port().to_be_bytes());
            b[4..8].copy_from_slice(&v4.ip().octets());
            (SockaddrStorage(b), 16)
        }
        std::net::SocketAddr::V6(v6) => {
            b[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&v6.port().to_be_bytes());
            b[8..24].copy_from_slice(&v6.ip().octets());
            (SockaddrStorage(b), 28)
        }
    }
}

entry! {
    /// Services by number or by name (the system's services database, for the port space's
    /// socket type: an unknown name returns `EAI_SERVICE`, as rdma-core returns
    /// getaddrinfo's code); host names through the system resolver. No route is resolved
    /// (`ai_route` stays NULL: RoCE needs none), and a client's source stays unset unless
    /// the hints give one (the CM picks it at `rdma_resolve_addr`).
    export neg fn rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: *const rdma_addrinfo, res: *mut *mut rdma_addrinfo) -> c_int {
        if res.is_null() || (node.is_null() && service.is_null()) {
            return Err(Errno::EINVAL);
        }
        // SAFETY: the program's strings (NULL allowed).
        let (node, service) = unsafe { (ptr::c_str(node), ptr::c_str(service)) };
        let h = if hints.is_null() {
            None
        } else {
            // SAFETY: the program's hints, non-NULL.
            Some(unsafe { ptr::read_in(hints)? })
        };
        let flags = h.map(|h| h.ai_flags).unwrap_or(0);
        let family = h.map(|h| h.ai_family).unwrap_or(0);
        let ps = h.map(|h| h.ai_port_space).filter(|&p| p != 0).unwrap_or(RDMA_PS_TCP);
        let qp_type = h.map(|h| h.ai_qp_type).filter(|&t| t != 0).unwrap_or(port_space_qp_type(ps)?);
        let passive = flags & RAI_PASSIVE != 0;
        let udp = ps == RDMA_PS_UDP || qp_type == IBV_QPT_UD;
        let gai = |e: AiError| match e {
            AiError::Errno(e) => Err(e),
            AiError::Gai(c) => Ok(c),
        };
        let addr = match (node.as_deref(), passive) {
            (None, true) => {
                let port = match service.as_deref() {
                    None => 0,
                    Some(s) => match service_port(s, udp) {
                        Ok(p) => p,
                        Err(e) => return gai(e),
                    },
                };
                let ip: std::net::IpAddr = if family == libc::AF_INET6 {
                    std::net::Ipv6Addr::UNSPECIFIED.into()
                } else {
                    std::net::Ipv4Addr::UNSPECIFIED.into()
                };
                std::net::SocketAddr::new(ip, port)
            }
            (n, _) => match resolve(n, service.as_deref(), family, flags & RAI_NUMERICHOST != 0, udp) {
                Ok(a) => a,
                Err(e) => return gai(e),
            },
        };
        let (s, len) = storage_of(addr);
        let mut ai = rdma_addrinfo {
            ai_flags: flags,
            ai_family: if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 },
            ai_qp_type: qp_type,
            ai_port_space: ps,
            ai_src_len: 0,
            ai_dst_len: 0,
            ai_src_addr: core::ptr::null_mut(),
            ai_dst_addr: core::ptr::null_mut(),
            ai_src_canonname: core::ptr::null_mut(),
            ai_dst_canonname: core::ptr::null_mut(),
            ai_route_len: 0,
            ai_route: core::ptr::null_mut(),
            ai_connect_len: 0,
            ai_connect: core::ptr::null_mut(),
            ai_next: core::ptr::null_mut(),
        };
        let mut a = Box::new(s);
        let (mut src, mut dst) = (None, None);
        if passive {
            ai.ai_src_addr = (&mut *a as *mut SockaddrStorage).cast();
            ai.ai_src_len = len;
            src = Some(a);
        } else {
            ai.ai_dst_addr = (&mut *a as *mut SockaddrStorage).cast();
            ai.ai_dst_len = len;
            dst = Some(a);
            // The hints' source, if any (`rdma_client -b`-style binds).
            if let Some(hs) = h.filter(|h| !h.ai_src_addr.is_null() && h.ai_src_len > 0) {
                // SAFETY: the hints' source address.
                let mut b = Box::new(unsafe { sockaddr_bytes(hs.ai_src_addr)? });
                ai.ai_src_addr = (&mut *b as *mut SockaddrStorage).cast();
                ai.ai_src_len = hs.ai_src_len;
                src = Some(b);
            }
        }
        let p = ptr::publish(ai, AiRs { _src: src, _dst: dst, _names: Vec::new() });
        // SAFETY: the program's output slot, non-NULL.
        unsafe { ptr::write_out(res, p)? };
        Ok(0)
    }
}

entry! {
    export value fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) -> () {
        let mut p = res;
        while let Ok(o) = ptr::retire::<_, AiRs>(p) {
            p = o.c.ai_next;
        }
    }
}

// ----- endpoints (the synchronous API of rdma_verbs.h's users) -----

entry! {
    export neg fn rdma_create_ep(id: *mut *mut rdma_cm_id, res: *mut rdma_addrinfo, pd: *mut c_void, qp_init_attr: *mut c_void) -> c_int {
        if id.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: the program's addrinfo (NULL is EINVAL).
        let ai = unsafe { ptr::read_in(res as *const rdma_addrinfo)? };
        let cm = create_id(core::ptr::null_mut(), core::ptr::null_mut(), ai.ai_port_space, ai.ai_qp_type)?;
        let r = (|| -> Result<(), Errno> {
            if !pd.is_null() {
                ptr::update_c::<_, IdRs>(cm, |p| {
                    // SAFETY: a live id of ours; our field.
                    unsafe { (*p).pd = pd }
                })?;
            }
            if ai.ai_flags & RAI_PASSIVE != 0 {
                // SAFETY: our own export, with the addrinfo's source.
                if unsafe { rdma_bind_addr(cm, ai.ai_src_addr) } != 0 {
                    return Err(Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL)));
                }
                let attr = if qp_init_attr.is_null() {
                    None
                } else {
                    // SAFETY: the program's `ibv_qp_init_attr`.
                    let mut a = unsafe { ptr::read_in(qp_init_attr as *const ibv_qp_init_attr)? };
                    a.qp_type = ai.ai_qp_type;
                    Some(a)
                };
                *lock(&id_rs(cm)?.ep) = Some(PassiveEp { pd: pd as usize, attr });
                return Ok(());
            }
            // SAFETY: our own exports, with the addrinfo's addresses.
            if unsafe { rdma_resolve_addr(cm, ai.ai_src_addr, ai.ai_dst_addr, 2000) } != 0
                // SAFETY: as above.
                || unsafe { rdma_resolve_route(cm, 2000) } != 0
            {
                return Err(Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL)));
            }
            if !qp_init_attr.is_null() {
                let a = qp_init_attr as *mut ibv_qp_init_attr;
                // SAFETY: the program's `ibv_qp_init_attr`: its QP type is the addrinfo's.
                unsafe {
                    let mut v = ptr::read_in(a as *const ibv_qp_init_attr)?;
                    v.qp_type = ai.ai_qp_type;
                    ptr::write_out(a, v)?
                };
                create_qp(cm, pd, qp_init_attr)?;
            }
            Ok(())
        })();
        if let Err(e) = r {
            // SAFETY: our own export, on the id made above.
            unsafe { rdma_destroy_id(cm) };
            return Err(e);
        }
        // SAFETY: the program's output slot, non-NULL.
        unsafe { ptr::write_out(id, cm)? };
        Ok(0)
    }
}

entry! {
    export value fn rdma_destroy_ep(id: *mut rdma_cm_id) -> () {
        // SAFETY: our own exports.
        unsafe {
            rdma_destroy_qp(id);
            rdma_destroy_id(id);
        }
    }
}

entry! {
    export neg fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
        let lr = id_rs(listen)?;
        if !lr.sync || id.is_null() {
            return Err(Errno::EINVAL);
        }
        let lc = ptr::copy_c::<_, IdRs>(listen)?;
        let ev = take_event(lc.channel)?;
        let e = ptr::copy_c::<_, EvRs>(ev)?;
        if e.status != 0 || e.event != 4 {
            let st = e.status;
            // SAFETY: our own export, on the event just taken.
            unsafe { rdma_ack_cm_event(ev) };
            return Err(Errno(if st != 0 { st.abs() } else { libc::EINVAL }));
        }
        let new = e.id;
        let ep = *lock(&lr.ep);
        if let Some(ep) = ep {
            if ep.pd != 0 {
                ptr::update_c::<_, IdRs>(new, |p| {
                    // SAFETY: a live id of ours; our field.
                    unsafe { (*p).pd = ep.pd as *mut c_void }
                })?;
            }
            if let Some(mut a) = ep.attr {
                if let Err(err) = create_qp(new, ep.pd as *mut c_void, (&mut a as *mut ibv_qp_init_attr).cast()) {
                    // SAFETY: our own exports, on what was just taken.
                    unsafe {
                        rdma_ack_cm_event(ev);
                        rdma_reject(new, core::ptr::null(), 0);
                        rdma_destroy_id(new);
                    }
                    return Err(err);
                }
            }
        }
        ptr::update_c::<_, IdRs>(new, |p| {
            // SAFETY: a live id of ours; our field (the request stays there until acked by
            // the next call on the id, as librdmacm keeps it).
            unsafe { (*p).event = ev }
        })?;
        // SAFETY: the program's output slot, non-NULL.
        unsafe { ptr::write_out(id, new)? };
        Ok(0)
    }
}

/// `rdma_create_srq_ex` of a basic SRQ (`attr.attr` is written back with what was granted).
fn create_srq(
    id: *mut rdma_cm_id,
    pd: *mut c_void,
    attr: &mut ibv_srq_init_attr,
) -> Result<(), Errno> {
    let (r, o) = id_ops(id)?;
    let c = ptr::copy_c::<_, IdRs>(id)?;
    if !c.srq.is_null() {
        return Err(Errno::EINVAL);
    }
    let pd = if pd.is_null() { c.pd } else { pd };
    let make_cq = c_int::from(c.recv_cq.is_null());
    let mut made = CmSrqOut::NONE;
    // SAFETY: the table's entry, with our copy of the attributes.
    ok(unsafe {
        (o.create_srq)(
            r.h,
            pd,
            (attr as *mut ibv_srq_init_attr).cast(),
            make_cq,
            &mut made,
        )
    })?;
    *lock(&r.srq_made) = Some(MadeSrq(made));
    ptr::update_c::<_, IdRs>(id, |p| {
        // SAFETY: a live id of ours; our fields.
        unsafe {
            (*p).srq = made.srq;
            if (*p).pd.is_null() {
                (*p).pd = made.pd;
            }
            if !made.recv_cq.is_null() {
                (*p).recv_cq = made.recv_cq;
                (*p).recv_cq_channel = made.recv_cq_channel;
            }
        }
    })
}

entry! {
    /// `rdma_create_srq`: a basic SRQ on `pd` (NULL: the id's, else the device's), `id->srq`
    /// set, a receive CQ made if the id has none; `rdma_create_qp` then uses both.
    export neg fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut c_void, attr: *mut c_void) -> c_int {
        let attr = attr as *mut ibv_srq_init_attr;
        // SAFETY: the program's attributes (NULL is EINVAL).
        let mut a = unsafe { ptr::read_in(attr as *const ibv_srq_init_attr)? };
        create_srq(id, pd, &mut a)?;
        // SAFETY: the same program struct: the granted attributes.
        unsafe { ptr::write_out(attr, a)? };
        Ok(0)
    }
}

entry! {
    /// `rdma_create_srq_ex`: `IBV_SRQ_INIT_ATTR_TYPE` is required (`EINVAL`), a basic SRQ
    /// only (XRC and tag-matching SRQs: `EOPNOTSUPP`, softrdma's libibverbs has neither).
    export neg fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut c_void) -> c_int {
        let attr = attr as *mut ibv_srq_init_attr_ex;
        // SAFETY: the program's attributes (NULL is EINVAL).
        let mut a = unsafe { ptr::read_in(attr as *const ibv_srq_init_attr_ex)? };
        if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
            return Err(Errno::EINVAL);
        }
        if a.srq_type != IBV_SRQT_BASIC {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        let pd = if a.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0 { a.pd } else { core::ptr::null_mut() };
        let mut b = ibv_srq_init_attr { srq_context: a.srq_context, attr: a.attr };
        create_srq(id, pd, &mut b)?;
        a.attr = b.attr;
        if a.pd.is_null() || a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 {
            // As librdmacm: the PD used is written back.
            a.pd = ptr::copy_c::<_, IdRs>(id)?.pd;
            a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
        }
        // SAFETY: the same program struct.
        unsafe { ptr::write_out(attr, a)? };
        Ok(0)
    }
}

entry! {
    /// `rdma_destroy_srq`: the id's SRQ, and the receive CQ `rdma_create_srq` made.
    export value fn rdma_destroy_srq(id: *mut rdma_cm_id) -> () {
        let Ok(r) = id_rs(id) else { return };
        let Ok(o) = ops() else { return };
        let Some(m) = lock(&r.srq_made).take() else { return };
        // SAFETY: the table's entry, with our record.
        let _ = unsafe { (o.destroy_srq)(&m.0) };
        let _ = ptr::update_c::<_, IdRs>(id, |p| {
            // SAFETY: a live id of ours; our fields.
            unsafe {
                (*p).srq = core::ptr::null_mut();
                if !m.0.recv_cq.is_null() && (*p).recv_cq == m.0.recv_cq {
                    (*p).recv_cq = core::ptr::null_mut();
                    (*p).recv_cq_channel = core::ptr::null_mut();
                }
            }
        });
    }
}

// ----- multicast -----

/// `enum rdma_cm_event_type`'s MULTICAST_JOIN and MULTICAST_ERROR.
const EVENT_MULTICAST_JOIN: c_int = 12;
const EVENT_MULTICAST_ERROR: c_int = 13;

/// `RDMA_CM_JOIN_MC_ATTR_ADDRESS`, `RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS`.
const JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
const JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;
/// `RDMA_MC_JOIN_FLAG_FULLMEMBER`, `_SENDONLY_FULLMEMBER`, `_RESERVED`.
const MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
const MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
const MC_JOIN_FLAG_RESERVED: u32 = 2;

/// Whether the MGID of a MULTICAST_JOIN is the one of the group at `addr` (RoCEv2:
/// `::ffff:a.b.c.d` for an IPv4 group, `cma_iboe_set_mgid`).
fn mgid_matches(addr: &SockaddrStorage, mgid: &[u8; 16]) -> bool {
    let fam = u16::from_ne_bytes([addr.0[0], addr.0[1]]);
    match i32::from(fam) {
        libc::AF_INET => {
            mgid[..10] == [0; 10] && mgid[10..12] == [0xff, 0xff] && mgid[12..] == addr.0[4..8]
        }
        libc::AF_INET6 => mgid[..] == addr.0[8..24],
        _ => false,
    }
}

/// `rdma_join_multicast_ex` after the argument checks.
fn join(
    id: *mut rdma_cm_id,
    addr: *mut c_void,
    flags: u32,
    context: *mut c_void,
) -> Result<c_int, Errno> {
    let (r, o) = id_ops(id)?;
    // SAFETY: the program's sockaddr.
    let a = unsafe { sockaddr_bytes(addr)? };
    // Recorded first: the join's event may be on the channel before the call returns.
    lock(&r.mcs).push(Mc {
        addr: a,
        context: context as usize,
        send_only: flags == MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
        mgid: None,
    });
    // SAFETY: the table's entry, with our copy.
    let res = ok(unsafe { (o.join_mc)(r.h, a.0.as_ptr().cast(), flags as c_int) });
    if res.is_err() {
        let mut mcs = lock(&r.mcs);
        if let Some(i) = mcs.iter().rposition(|m| m.addr == a && m.mgid.is_none()) {
            mcs.remove(i);
        }
    }
    res?;
    Ok(0)
}

entry! {
    export neg fn rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut c_void, context: *mut c_void) -> c_int {
        join(id, addr, MC_JOIN_FLAG_FULLMEMBER, context)
    }
}

entry! {
    export neg fn rdma_join_multicast_ex(id: *mut rdma_cm_id, mc_join_attr: *mut rdma_cm_join_mc_attr_ex, context: *mut c_void) -> c_int {
        // SAFETY: the program's attributes (NULL is EINVAL).
        let m = unsafe { ptr::read_in(mc_join_attr as *const rdma_cm_join_mc_attr_ex)? };
        if m.comp_mask & JOIN_MC_ATTR_ADDRESS == 0
            || m.comp_mask & JOIN_MC_ATTR_JOIN_FLAGS == 0
            || m.join_flags >= MC_JOIN_FLAG_RESERVED
            || m.addr.is_null()
        {
            return Err(Errno::EINVAL);
        }
        join(id, m.addr, m.join_flags, context)
    }
}

entry! {
    export neg fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut c_void) -> c_int {
        let (r, o) = id_ops(id)?;
        // SAFETY: the program's sockaddr.
        let a = unsafe { sockaddr_bytes(addr)? };
        let m = {
            let mut mcs = lock(&r.mcs);
            let i = mcs.iter().position(|m| m.addr == a).ok_or(Errno(libc::EADDRNOTAVAIL))?;
            mcs.remove(i)
        };
        let c = ptr::copy_c::<_, IdRs>(id)?;
        if let (false, Some(g), false) = (c.qp.is_null(), m.mgid, m.send_only) {
            // SAFETY: the table's entry; the id's QP. A detach that finds nothing attached
            // (the join's event not taken yet) is no error here, as in librdmacm.
            let _ = unsafe { (o.attach_mc)(c.qp.cast(), g.as_ptr(), 0) };
        }
        // SAFETY: the table's entry, with our copy.
        ok(unsafe { (o.leave_mc)(r.h, a.0.as_ptr().cast()) })?;
        Ok(0)
    }
}

// ----- rsockets: exported so that programs linking them load; -1 with ENOSYS -----

macro_rules! rsocket_enosys {
    ($($name:ident ( $($a:ident : $t:ty),* ) -> $ret:ty;)*) => {
        $(
            entry! {
                export neg_as fn $name($($a: $t),*) -> $ret {
                    $( let _ = $a; )*
                    Err::<$ret, Errno>(Errno(libc::ENOSYS))
                }
            }
        )*
    };
}

rsocket_enosys! {
    rsocket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
    rbind(socket: c_int, addr: *const c_void, addrlen: u32) -> c_int;
    rlisten(socket: c_int, backlog: c_int) -> c_int;
    raccept(socket: c_int, addr: *mut c_void, addrlen: *mut u32) -> c_int;
    rconnect(socket: c_int, addr: *const c_void, addrlen: u32) -> c_int;
    rshutdown(socket: c_int, how: c_int) -> c_int;
    rclose(socket: c_int) -> c_int;
    rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize;
    rrecvfrom(socket: c_int, buf: *mut c_void, len: usize, flags: c_int, src_addr: *mut c_void, addrlen: *mut u32) -> isize;
    rrecvmsg(socket: c_int, msg: *mut c_void, flags: c_int) -> isize;
    rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize;
    rsendto(socket: c_int, buf: *const c_void, len: usize, flags: c_int, dest_addr: *const c_void, addrlen: u32) -> isize;
    rsendmsg(socket: c_int, msg: *const c_void, flags: c_int) -> isize;
    rread(socket: c_int, buf: *mut c_void, count: usize) -> isize;
    rreadv(socket: c_int, iov: *const c_void, iovcnt: c_int) -> isize;
    rwrite(socket: c_int, buf: *const c_void, count: usize) -> isize;
    rwritev(socket: c_int, iov: *const c_void, iovcnt: c_int) -> isize;
    rpoll(fds: *mut c_void, nfds: u64, timeout: c_int) -> c_int;
    rselect(nfds: c_int, readfds: *mut c_void, writefds: *mut c_void, exceptfds: *mut c_void, timeout: *mut c_void) -> c_int;
    rgetpeername(socket: c_int, addr: *mut c_void, addrlen: *mut u32) -> c_int;
    rgetsockname(socket: c_int, addr: *mut c_void, addrlen: *mut u32) -> c_int;
    rsetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *const c_void, optlen: u32) -> c_int;
    rgetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *mut c_void, optlen: *mut u32) -> c_int;
    // Variadic in C (`int rfcntl(int, int, ...)`): on x86-64 the callee may ignore the rest.
    rfcntl(socket: c_int, cmd: c_int) -> c_int;
    riomap(socket: c_int, buf: *mut c_void, len: usize, prot: c_int, flags: c_int, offset: i64) -> i64;
    riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int;
    riowrite(socket: c_int, buf: *const c_void, count: usize, offset: i64, flags: c_int) -> usize;
}
