//! The C side of the RDMA CM table ([`crate::cm_abi::CmOps`]) that softrdma's librdmacm
//! calls: pointer checks and copies here, the CM itself in [`crate::rdmacm`].
//!
//! Every entry is written with `entry!` (panic boundary) and returns 0 or an errno value.

#![allow(unsafe_code)]
// Each entry's contract is the table's (crate::cm_abi), librdmacm its only caller.
#![allow(clippy::missing_safety_doc)]

use core::ffi::{c_int, c_void};

use softrdma_core::rdma_cm::{ConnParam, Ece, RdmaOption};
use softrdma_core::verbs::QpState;

use crate::abi::{
    ibv_comp_channel, ibv_context, ibv_cq, ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_init_attr,
};
use crate::cm_abi::{CmConnIn, CmEventOut, CmIdInfo, CmOps, CmQpOut, CM_OPS_VERSION};
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
    };
    &OPS
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
        let p = proc_();
        let port = p.port_of(id)?;
        let (ctx, ctx_pd) = p.ctx_of_port(port).ok_or(Errno::EINVAL)?;
        let ctx = ctx as *mut ibv_context;
        let attr = attr as *mut ibv_qp_init_attr;
        // SAFETY: the program's `ibv_qp_init_attr` (NULL is EINVAL).
        let mut a = unsafe { ptr::read_in(attr as *const ibv_qp_init_attr)? };
        let mut made = CmQpOut {
            qp: core::ptr::null_mut(),
            qp_num: 0,
            pd: core::ptr::null_mut(),
            send_cq: core::ptr::null_mut(),
            recv_cq: core::ptr::null_mut(),
            send_cq_channel: core::ptr::null_mut(),
            recv_cq_channel: core::ptr::null_mut(),
        };
        let pd = if pd.is_null() {
            if ctx_pd != 0 {
                ctx_pd as *mut ibv_pd
            } else {
                // SAFETY: our own export on a live context.
                let n = unsafe { exports::ibv_alloc_pd(ctx) };
                if n.is_null() {
                    return Err(Errno::ENOMEM);
                }
                p.set_pd(ctx as usize, n as usize);
                made.pd = n.cast();
                n
            }
        } else {
            pd as *mut ibv_pd
        };
        // ucma_create_cqs: CQs (each with its completion channel) for the ones not given.
        let cq = |depth: u32| -> Result<(*mut ibv_cq, *mut ibv_comp_channel), Errno> {
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
        };
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
            // SAFETY: our own export, with the program's attributes.
            let qp = unsafe { exports::ibv_create_qp(pd, attr) };
            if qp.is_null() {
                return Err(Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL)));
            }
            let qpn = exports::qp_num(qp)?;
            if let Err(e) = p.init_qp(id, qpn) {
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
        if level != 0 {
            // RDMA_OPTION_IB_PATH: no SA paths on RoCE.
            return Err(Errno::EINVAL);
        }
        // SAFETY: the program's option value, `len` bytes (rdma_set_option).
        let b = unsafe { ptr::read_array(val as *const u8, len)? };
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
