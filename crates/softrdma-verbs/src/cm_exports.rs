//! The C side of the RDMA CM table ([`crate::cm_abi::CmOps`]) that softrdma's librdmacm
//! calls: pointer checks and copies here, the CM itself in [`crate::rdmacm`].
//!
//! Every entry is written with `entry!` (panic boundary) and returns 0 or an errno value.

#![allow(unsafe_code)]
// Each entry's contract is the table's (crate::cm_abi), librdmacm its only caller.
#![allow(clippy::missing_safety_doc)]

use core::ffi::{c_int, c_void};

use softrdma_core::rdma_cm::multicast::JoinFlags;
use softrdma_core::rdma_cm::{ConnParam, Ece, RdmaOption};
use softrdma_core::verbs::QpState;

use crate::abi::ibv_gid;
use crate::abi::{
    ibv_comp_channel, ibv_context, ibv_cq, ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_init_attr,
    ibv_qp_init_attr_ex, ibv_srq_init_attr,
};
use crate::cm_abi::{CmConnIn, CmEventOut, CmIdInfo, CmOps, CmQpOut, CmSrqOut, CM_OPS_VERSION};
use crate::entry::{entry, Errno};
use crate::exports;
use crate::ptr;
use crate::rdmacm::{self, proc_};

/// The table.
pub fn ops() -> *const CmOps {
    static OPS: CmOps = CmOps {
        version: CM_OPS_VERSION,
        size: core::mem::size_of::<CmOps>() as u32,
        chan_create,
        chan_destroy,
        get_event,
        id_create,
        id_destroy,
        id_migrate,
        id_info,
        bind,
        resolve_addr,
        resolve_route,
        listen,
        create_qp,
        destroy_qp,
        connect,
        accept,
        reject,
        disconnect,
        establish,
        init_qp_attr,
        set_option,
        set_local_ece,
        get_remote_ece,
        contexts,
        join_mc,
        leave_mc,
        attach_mc,
        notify,
        create_srq,
        destroy_srq,
        create_qp_ex,
    };
    &OPS
}

/// `RDMA_OPTION_IB` / `RDMA_OPTION_IB_PATH`.
const RDMA_OPTION_IB: c_int = 1;
const RDMA_OPTION_IB_PATH: c_int = 1;
/// `struct ibv_path_data`: flags, reserved, a 64-byte `ibv_path_record`.
const PATH_DATA_LEN: usize = 72;
/// `IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY | IBV_PATH_FLAG_BIDIRECTIONAL`: the record
/// `ucma_set_ib_path` takes.
const PATH_GMP_PRIMARY_BIDIR: u32 = 0x1 | 0x2 | 0x8 | 0x20;
/// Where `ibv_path_record`'s `tclass` sits in an `ibv_path_data`.
const PATH_TCLASS_AT: usize = 8 + 48;

/// `ucma_set_ib_path`'s choice among the records (`optlen` a multiple of the record size,
/// one GMP primary bidirectional record): its traffic class, or `None` (`EINVAL`).
fn ib_path_tclass(b: &[u8]) -> Option<u8> {
    if b.is_empty() || b.len() % PATH_DATA_LEN != 0 {
        return None;
    }
    b.chunks_exact(PATH_DATA_LEN)
        .find(|r| u32::from_ne_bytes([r[0], r[1], r[2], r[3]]) == PATH_GMP_PRIMARY_BIDIR)
        .map(|r| r[PATH_TCLASS_AT])
}

/// Reads the socket address at `p` (its family says how many bytes).
///
/// # Safety
/// `p` is NULL or points to a `struct sockaddr` of its family's size.
unsafe fn read_sockaddr(p: *const c_void) -> Result<std::net::SocketAddr, Errno> {
    // SAFETY: the caller's sockaddr (NULL is EINVAL): its family comes first.
    let fam: u16 = unsafe { ptr::read_in(p as *const u16)? };
    let len = match i32::from(fam) {
        libc::AF_INET => 16,
        libc::AF_INET6 => 28,
        _ => return Err(Errno(libc::EAFNOSUPPORT)),
    };
    // SAFETY: a sockaddr of that family is `len` bytes long.
    let b = unsafe { ptr::read_array(p as *const u8, len)? };
    rdmacm::socket_addr(&b)
}

/// The connection parameters at `p`.
///
/// # Safety
/// `p` points to a `CmConnIn` whose private data pointer covers its length.
unsafe fn read_conn(p: *const CmConnIn) -> Result<(CmConnIn, ConnParam), Errno> {
    // SAFETY: librdmacm's struct (NULL is EINVAL).
    let c = unsafe { ptr::read_in(p)? };
    let data = if c.private_data_len == 0 || c.private_data.is_null() {
        Vec::new()
    } else {
        // SAFETY: the program's private data, `private_data_len` bytes (rdma_conn_param).
        unsafe { ptr::read_array(c.private_data, c.private_data_len as usize)? }
    };
    Ok((
        c,
        ConnParam {
            private_data: data,
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
            flow_control: c.flow_control != 0,
            retry_count: c.retry_count,
            rnr_retry_count: c.rnr_retry_count,
        },
    ))
}

entry! {
    op errno fn chan_create(fd: *mut c_int, chan: *mut u32) -> c_int {
        use std::os::fd::AsRawFd;
        let (h, c) = proc_().chan_create()?;
        // SAFETY: librdmacm's output slots (NULL is EINVAL).
        unsafe {
            ptr::write_out(fd, c.fd.as_raw_fd())?;
            ptr::write_out(chan, h)
        }
    }
}

entry! {
    op errno fn chan_destroy(chan: u32) -> c_int {
        proc_().chan_destroy(chan)
    }
}

entry! {
    op errno fn get_event(chan: u32, out: *mut CmEventOut) -> c_int {
        if out.is_null() {
            return Err(Errno::EINVAL);
        }
        let e = proc_().get_event(chan)?;
        // SAFETY: librdmacm's output struct, checked non-NULL above.
        unsafe { ptr::write_out(out, e) }
    }
}

entry! {
    op errno fn id_create(chan: u32, ps: c_int, qp_type: c_int, id: *mut u32) -> c_int {
        let ps = u16::try_from(ps).map_err(|_| Errno(libc::EPROTONOSUPPORT))?;
        if id.is_null() {
            return Err(Errno::EINVAL);
        }
        let h = proc_().id_create(chan, ps, qp_type)?;
        // SAFETY: librdmacm's output slot, checked non-NULL above.
        unsafe { ptr::write_out(id, h) }
    }
}

entry! {
    op errno fn id_destroy(id: u32) -> c_int {
        proc_().id_destroy(id)
    }
}

entry! {
    op errno fn id_migrate(id: u32, chan: u32) -> c_int {
        proc_().id_migrate(id, chan)
    }
}

entry! {
    op errno fn id_info(id: u32, out: *mut CmIdInfo) -> c_int {
        let i = proc_().info(id)?;
        // SAFETY: librdmacm's output struct (NULL is EINVAL).
        unsafe { ptr::write_out(out, i) }
    }
}

entry! {
    op errno fn bind(id: u32, addr: *const c_void) -> c_int {
        // SAFETY: the program's sockaddr (rdma_bind_addr).
        let a = unsafe { read_sockaddr(addr)? };
        proc_().bind(id, a)
    }
}

entry! {
    op errno fn resolve_addr(id: u32, src: *const c_void, dst: *const c_void, timeout_ms: c_int) -> c_int {
        let _ = timeout_ms;
        let s = if src.is_null() {
            None
        } else {
            // SAFETY: the program's sockaddr (rdma_resolve_addr), non-NULL.
            Some(unsafe { read_sockaddr(src)? })
        };
        // SAFETY: as above (NULL is EINVAL).
        let d = unsafe { read_sockaddr(dst)? };
        proc_().resolve_addr(id, s, d)
    }
}

entry! {
    op errno fn resolve_route(id: u32, timeout_ms: c_int) -> c_int {
        let _ = timeout_ms;
        proc_().resolve_route(id)
    }
}

entry! {
    op errno fn listen(id: u32, backlog: c_int) -> c_int {
        proc_().listen(id, backlog)
    }
}

entry! {
    op errno fn create_qp(id: u32, pd: *mut c_void, attr: *mut c_void, out: *mut CmQpOut) -> c_int {
        // SAFETY: the program's `ibv_qp_init_attr` (create_qp_on checks NULL).
        unsafe { create_qp_on(id, pd, attr as *mut ibv_qp_init_attr, core::ptr::null_mut(), out) }
    }
}

entry! {
    op errno fn create_qp_ex(id: u32, attr: *mut c_void, out: *mut CmQpOut) -> c_int {
        let ax = attr as *mut ibv_qp_init_attr_ex;
        // SAFETY: the program's `ibv_qp_init_attr_ex` (NULL is EINVAL).
        let a = unsafe { ptr::read_in(ax as *const ibv_qp_init_attr_ex)? };
        let pd = if a.comp_mask & QP_INIT_ATTR_PD != 0 { a.pd } else { core::ptr::null_mut() };
        let mut legacy = a.legacy();
        // SAFETY: our copy of the legacy part, and the program's extended struct.
        unsafe { create_qp_on(id, pd.cast(), &mut legacy, ax, out) }
    }
}

/// `IBV_QP_INIT_ATTR_PD`.
const QP_INIT_ATTR_PD: u32 = 1 << 0;

/// `rdma_create_qp(_ex)`'s work: the PD (the device's when NULL), the CQs `attr` lacks
/// (`ucma_create_cqs`), the QP — by `ibv_create_qp`, or with `ax` non-NULL by
/// `ibv_create_qp_ex` on the program's extended attributes (their PD and CQs filled in) —
/// and its move to INIT by the CM.
///
/// The verbs context of the device id `id` is bound to, and the PD librdmacm keeps for it
/// (0: none yet).
fn id_context(id: u32) -> Result<(*mut ibv_context, usize), Errno> {
    let p = proc_();
    let port = p.port_of(id)?;
    let (ctx, ctx_pd) = p.ctx_of_port(port).ok_or(Errno::EINVAL)?;
    Ok((ctx as *mut ibv_context, ctx_pd))
}

/// The PD a QP or SRQ of `rdma_create_qp`/`rdma_create_srq` goes on: the program's `pd`,
/// else the context's, allocated (and kept for the context) the first time; `true` when
/// allocated now.
fn pd_or_context_pd(
    ctx: *mut ibv_context,
    ctx_pd: usize,
    pd: *mut c_void,
) -> Result<(*mut ibv_pd, bool), Errno> {
    if !pd.is_null() {
        return Ok((pd as *mut ibv_pd, false));
    }
    if ctx_pd != 0 {
        return Ok((ctx_pd as *mut ibv_pd, false));
    }
    // SAFETY: our own export on a live context.
    let n = unsafe { exports::ibv_alloc_pd(ctx) };
    if n.is_null() {
        return Err(Errno::ENOMEM);
    }
    proc_().set_pd(ctx as usize, n as usize);
    Ok((n, true))
}

/// A CQ of at least `depth` entries with a completion channel of its own (what
/// `ucma_create_cqs` makes for the CQs the program did not give).
fn cq_with_channel(
    ctx: *mut ibv_context,
    depth: u32,
) -> Result<(*mut ibv_cq, *mut ibv_comp_channel), Errno> {
    // SAFETY: our own exports on a live context.
    let ch = unsafe { exports::ibv_create_comp_channel(ctx) };
    if ch.is_null() {
        return Err(Errno::ENOMEM);
    }
    let depth = c_int::try_from(depth.max(1)).unwrap_or(c_int::MAX);
    // SAFETY: as above.
    let c = unsafe { exports::ibv_create_cq(ctx, depth, core::ptr::null_mut(), ch, 0) };
    if c.is_null() {
        // SAFETY: the channel just made, unused.
        unsafe { exports::ibv_destroy_comp_channel(ch) };
        return Err(Errno::ENOMEM);
    }
    Ok((c, ch))
}

/// # Safety
/// `attr` is NULL or a writable `ibv_qp_init_attr`; `ax` NULL or a writable
/// `ibv_qp_init_attr_ex`; `out` NULL or writable.
unsafe fn create_qp_on(
    id: u32,
    pd: *mut c_void,
    attr: *mut ibv_qp_init_attr,
    ax: *mut ibv_qp_init_attr_ex,
    out: *mut CmQpOut,
) -> Result<(), Errno> {
    {
        let (ctx, ctx_pd) = id_context(id)?;
        // SAFETY: the program's `ibv_qp_init_attr` (NULL is EINVAL).
        let mut a = unsafe { ptr::read_in(attr as *const ibv_qp_init_attr)? };
        let given = a;
        let given_ex = if ax.is_null() {
            None
        } else {
            // SAFETY: the program's extended struct, non-NULL.
            Some(unsafe { ptr::read_in(ax as *const ibv_qp_init_attr_ex)? })
        };
        let mut made = CmQpOut::NONE;
        let (pd, pd_made) = pd_or_context_pd(ctx, ctx_pd, pd)?;
        if pd_made {
            made.pd = pd.cast();
        }
        // ucma_create_cqs: CQs (each with its completion channel) for the ones not given.
        let cq = |depth: u32| cq_with_channel(ctx, depth);
        if a.send_cq.is_null() {
            let (c, ch) = cq(a.cap.max_send_wr)?;
            a.send_cq = c;
            made.send_cq = c.cast();
            made.send_cq_channel = ch.cast();
        }
        if a.recv_cq.is_null() {
            let (c, ch) = cq(a.cap.max_recv_wr)?;
            a.recv_cq = c;
            made.recv_cq = c.cast();
            made.recv_cq_channel = ch.cast();
        }
        let r = (|| {
            // SAFETY: the program's struct again, writable: the CQs filled in.
            unsafe { ptr::write_out(attr, a)? };
            let qp = if ax.is_null() {
                // SAFETY: our own export, with the program's attributes.
                unsafe { exports::ibv_create_qp(pd, attr) }
            } else {
                // SAFETY: the program's extended struct (non-NULL), writable.
                let mut x = unsafe { ptr::read_in(ax as *const ibv_qp_init_attr_ex)? };
                x.pd = pd;
                x.comp_mask |= QP_INIT_ATTR_PD;
                x.send_cq = a.send_cq;
                x.recv_cq = a.recv_cq;
                x.srq = a.srq;
                // SAFETY: as above.
                unsafe { ptr::write_out(ax, x)? };
                // SAFETY: our own op (`ibv_create_qp_ex`) on a live context.
                unsafe { exports::op_create_qp_ex(ctx, ax) }
            };
            if qp.is_null() {
                return Err(Errno(
                    std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EINVAL),
                ));
            }
            let qpn = exports::qp_num(qp)?;
            if let Err(e) = proc_().init_qp(id, qpn) {
                // SAFETY: the QP just made.
                unsafe { exports::ibv_destroy_qp(qp) };
                return Err(e);
            }
            Ok((qp, qpn))
        })();
        match r {
            Ok((qp, qpn)) => {
                made.qp = qp.cast();
                made.qp_num = qpn;
                // SAFETY: librdmacm's output struct (NULL is EINVAL).
                unsafe { ptr::write_out(out, made) }
            }
            Err(e) => {
                // The program's structs as it gave them: no pointers to the CQs going now.
                // SAFETY: the program's structs (read above), writable.
                unsafe {
                    let _ = ptr::write_out(attr, given);
                    if let Some(x) = given_ex {
                        let _ = ptr::write_out(ax, x);
                    }
                }
                // SAFETY: what this call made, nothing else uses it yet.
                unsafe { destroy_made(&made) };
                Err(e)
            }
        }
    }
}

/// Destroys the CQs and channels `create_qp` made.
///
/// # Safety
/// `m`'s pointers are NULL or objects of ours nothing else uses.
unsafe fn destroy_made(m: &CmQpOut) {
    // SAFETY: per the contract; each destroy checks its object is live.
    unsafe {
        for (cq, ch) in [
            (m.send_cq, m.send_cq_channel),
            (m.recv_cq, m.recv_cq_channel),
        ] {
            if !cq.is_null() {
                exports::ibv_destroy_cq(cq.cast());
            }
            if !ch.is_null() {
                exports::ibv_destroy_comp_channel(ch.cast());
            }
        }
    }
}

entry! {
    op errno fn destroy_qp(id: u32, qp: *mut c_void, made: *const CmQpOut) -> c_int {
        let _ = id;
        if !qp.is_null() {
            // SAFETY: our own export; it checks the QP is live.
            let r = unsafe { exports::ibv_destroy_qp(qp as *mut ibv_qp) };
            if r != 0 {
                return Err(Errno(r));
            }
        }
        if !made.is_null() {
            // SAFETY: librdmacm's record of what create_qp made for this id.
            let m = unsafe { ptr::read_in(made)? };
            // SAFETY: those objects are this id's alone (the QP using them is gone).
            unsafe { destroy_made(&m) };
        }
        Ok(())
    }
}

entry! {
    op errno fn connect(id: u32, param: *const CmConnIn) -> c_int {
        // SAFETY: librdmacm's struct with the program's private data.
        let (c, p) = unsafe { read_conn(param)? };
        let qp = if c.has_qp != 0 { Ok(c.qp_num) } else { Err(c.qp_num) };
        if let Some(d) = rdmacm::connect_delay() {
            std::thread::sleep(d);
        }
        proc_().connect(id, qp, &p)
    }
}

entry! {
    op errno fn accept(id: u32, param: *const CmConnIn) -> c_int {
        // SAFETY: librdmacm's struct with the program's private data.
        let (c, p) = unsafe { read_conn(param)? };
        proc_().accept(id, c.qp_num, &p)
    }
}

entry! {
    op errno fn reject(id: u32, data: *const u8, len: u32, ece: c_int) -> c_int {
        let d = if data.is_null() || len == 0 {
            Vec::new()
        } else {
            // SAFETY: the program's private data, `len` bytes (rdma_reject).
            unsafe { ptr::read_array(data, len as usize)? }
        };
        proc_().reject(id, &d, ece != 0)
    }
}

entry! {
    op errno fn disconnect(id: u32) -> c_int {
        proc_().disconnect(id)
    }
}

entry! {
    op errno fn establish(id: u32) -> c_int {
        proc_().establish(id)
    }
}

entry! {
    op errno fn init_qp_attr(id: u32, attr: *mut c_void, mask: *mut c_int) -> c_int {
        let attr = attr as *mut ibv_qp_attr;
        // SAFETY: the program's `ibv_qp_attr` (NULL is EINVAL); its state names the target.
        let want = unsafe { ptr::read_in(attr as *const ibv_qp_attr)? }.qp_state;
        let target = match want {
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            _ => return Err(Errno::EINVAL),
        };
        let (a, m) = proc_().init_qp_attr(id, target)?;
        // SAFETY: as above, and the program's mask slot (NULL is EINVAL).
        unsafe {
            ptr::write_out(attr, crate::conv::qp_attr_c(&a))?;
            ptr::write_out(mask, m.0 as c_int)
        }
    }
}

entry! {
    op errno fn set_option(id: u32, level: c_int, name: c_int, val: *const c_void, len: usize) -> c_int {
        // SAFETY: the program's option value, `len` bytes (rdma_set_option).
        let b = unsafe { ptr::read_array(val as *const u8, len)? };
        match (level, name) {
            (0, _) => {}
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => {
                let tclass = ib_path_tclass(&b).ok_or(Errno::EINVAL)?;
                return proc_().set_ib_path(id, tclass);
            }
            _ => return Err(Errno(libc::ENOSYS)),
        }
        let int = || -> Result<bool, Errno> {
            let v: [u8; 4] = b.get(..4).and_then(|s| s.try_into().ok()).ok_or(Errno::EINVAL)?;
            Ok(i32::from_ne_bytes(v) != 0)
        };
        let byte = || b.first().copied().ok_or(Errno::EINVAL);
        let opt = match name {
            0 => RdmaOption::Tos(byte()?),
            1 => RdmaOption::ReuseAddr(int()?),
            2 => RdmaOption::AfOnly(int()?),
            3 => RdmaOption::AckTimeout(byte()?),
            _ => return Err(Errno(libc::ENOSYS)),
        };
        proc_().set_option(id, opt)
    }
}

entry! {
    op errno fn set_local_ece(id: u32, vendor_id: u32, options: u32) -> c_int {
        proc_().set_local_ece(id, Ece { vendor_id, attr_mod: options })
    }
}

entry! {
    op errno fn get_remote_ece(id: u32, vendor_id: *mut u32, options: *mut u32) -> c_int {
        let e = proc_().remote_ece(id)?;
        // SAFETY: the program's `ibv_ece` fields (NULL is EINVAL).
        unsafe {
            ptr::write_out(vendor_id, e.vendor_id)?;
            ptr::write_out(options, e.attr_mod)
        }
    }
}

entry! {
    op errno fn contexts(out: *mut *mut c_void, max: c_int, n: *mut c_int) -> c_int {
        let all = proc_().all_contexts();
        let k = all.len().min(usize::try_from(max).unwrap_or(0));
        for (i, c) in all.iter().take(k).enumerate() {
            // SAFETY: librdmacm's array of `max` slots (NULL only with max 0, then unused).
            unsafe { ptr::write_elem(out, i, *c as *mut c_void) };
        }
        // SAFETY: librdmacm's count slot (NULL is EINVAL).
        unsafe { ptr::write_out(n, all.len() as c_int) }
    }
}

entry! {
    op errno fn join_mc(id: u32, addr: *const c_void, flags: c_int) -> c_int {
        // SAFETY: the program's sockaddr (rdma_join_multicast).
        let a = unsafe { read_sockaddr(addr)? };
        let flags = match flags {
            0 => JoinFlags::FullMember,
            1 => JoinFlags::SendOnlyFullMember,
            // enum rdma_cm_mc_join_flags ends there (RDMA_MC_JOIN_FLAG_RESERVED).
            _ => return Err(Errno::EINVAL),
        };
        proc_().join_mc(id, a.ip(), flags)
    }
}

entry! {
    op errno fn leave_mc(id: u32, addr: *const c_void) -> c_int {
        // SAFETY: the program's sockaddr (rdma_leave_multicast).
        let a = unsafe { read_sockaddr(addr)? };
        proc_().leave_mc(id, a.ip())
    }
}

entry! {
    op errno fn attach_mc(qp: *mut c_void, mgid: *const u8, attach: c_int) -> c_int {
        // SAFETY: the caller's 16-byte MGID (NULL is EINVAL).
        let g = unsafe { ptr::read_in(mgid as *const ibv_gid)? };
        let r = if attach != 0 {
            // SAFETY: our own export; it checks the QP pointer against the registry.
            unsafe { exports::ibv_attach_mcast(qp.cast(), &g, 0) }
        } else {
            // SAFETY: as above.
            unsafe { exports::ibv_detach_mcast(qp.cast(), &g, 0) }
        };
        match r {
            0 => Ok(()),
            e => Err(Errno(e)),
        }
    }
}

entry! {
    op errno fn notify(id: u32, event: c_int) -> c_int {
        proc_().notify(id, event)
    }
}

entry! {
    op errno fn create_srq(id: u32, pd: *mut c_void, attr: *mut c_void, make_cq: c_int, out: *mut CmSrqOut) -> c_int {
        let (ctx, ctx_pd) = id_context(id)?;
        let attr = attr as *mut ibv_srq_init_attr;
        // SAFETY: the program's `ibv_srq_init_attr` (NULL is EINVAL).
        let a = unsafe { ptr::read_in(attr as *const ibv_srq_init_attr)? };
        let mut made = CmSrqOut::NONE;
        let (pd, _) = pd_or_context_pd(ctx, ctx_pd, pd)?;
        made.pd = pd.cast();
        if make_cq != 0 {
            let (c, ch) = cq_with_channel(ctx, a.attr.max_wr)?;
            made.recv_cq = c.cast();
            made.recv_cq_channel = ch.cast();
        }
        // SAFETY: our own export, with the program's attributes (written back there).
        let srq = unsafe { exports::ibv_create_srq(pd, attr) };
        if srq.is_null() {
            let e = Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
            // SAFETY: what this call made, nothing else uses it.
            unsafe { destroy_srq_cq(&made) };
            return Err(e);
        }
        made.srq = srq.cast();
        // SAFETY: librdmacm's output struct (NULL is EINVAL).
        unsafe { ptr::write_out(out, made) }
    }
}

/// Destroys the receive CQ and channel `create_srq` made.
///
/// # Safety
/// `m`'s CQ and channel are NULL or objects of ours nothing else uses.
unsafe fn destroy_srq_cq(m: &CmSrqOut) {
    if !m.recv_cq.is_null() {
        // SAFETY: per the contract.
        unsafe { exports::ibv_destroy_cq(m.recv_cq.cast()) };
    }
    if !m.recv_cq_channel.is_null() {
        // SAFETY: per the contract.
        unsafe { exports::ibv_destroy_comp_channel(m.recv_cq_channel.cast()) };
    }
}

entry! {
    op errno fn destroy_srq(made: *const CmSrqOut) -> c_int {
        // SAFETY: librdmacm's record (NULL is EINVAL).
        let m = unsafe { ptr::read_in(made)? };
        if !m.srq.is_null() {
            // SAFETY: our own export; the SRQ pointer is checked against the registry there.
            let e = unsafe { exports::ibv_destroy_srq(m.srq.cast()) };
            if e != 0 {
                return Err(Errno(e));
            }
        }
        // SAFETY: the CQ and channel create_srq made for this SRQ, which is gone.
        unsafe { destroy_srq_cq(&m) };
        Ok(())
    }
}
