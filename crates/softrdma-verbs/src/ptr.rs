//! Every pointer C hands us goes through here: the objects we gave out (checked against a
//! registry of live objects before they are touched), application arrays read or written
//! with a count, and application memory registered as an MR (a pointer-and-length window).
//!
//! **Objects.** Each object C sees is a `Box<Obj<C, R>>`: the public `#[repr(C)]` struct first
//! (so its address is the object's), our Rust state after it. [`publish`] leaks the box and
//! records `(address, type)`; [`get`] returns the Rust state only if that pair is live, so a
//! NULL, stale or foreign pointer is `EINVAL` instead of a wild read; [`retire`] removes the
//! record and takes the box back. A context is published at the address of the
//! `ibv_context` inside its `verbs_context` ([`get_ctx`]).
//!
//! The Rust state is only ever shared (`&R`): what changes lives in atomics or mutexes. The
//! C part is read and written through raw place expressions, never through references, so
//! C writing its own fields (`cq_context`, `qp_context`) aliases nothing of ours.

#![allow(unsafe_code)]

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

use core::ffi::c_void;

use softrdma_mem::ExternalMemory;

use crate::abi::{ibv_context, verbs_context};
use crate::entry::Errno;

/// A published object: the C struct, then ours.
#[repr(C)]
pub struct Obj<C, R> {
    /// What C sees.
    pub c: C,
    /// Ours.
    pub rs: R,
}

fn registry() -> MutexGuard<'static, HashMap<usize, TypeId>> {
    static LIVE: OnceLock<Mutex<HashMap<usize, TypeId>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Leaks `Obj { c, rs }` to C and records it as live; returns the address of `c`.
pub fn publish<C: 'static, R: 'static>(c: C, rs: R) -> *mut C {
    let p = Box::into_raw(Box::new(Obj { c, rs }));
    registry().insert(p as usize, TypeId::of::<Obj<C, R>>());
    p.cast()
}

/// The Rust state of the live object of type `R` at `p` (`EINVAL` for NULL or anything not
/// published as an `Obj<C, R>`: the C shape is part of the type, so an object published as `ibv_qp_ex` is not found as an `ibv_qp`, whose Rust state would sit at another offset).
pub fn get<'a, C: 'static, R: 'static>(p: *const C) -> Result<&'a R, Errno> {
    if p.is_null() || registry().get(&(p as usize)) != Some(&TypeId::of::<Obj<C, R>>()) {
        return Err(Errno::EINVAL);
    }
    let o = p.cast::<Obj<C, R>>();
    // SAFETY: `p` was returned by `publish::<C, R>` (the registry says so, with R's type) and
    // not yet retired, so it points to a live `Obj<C, R>` whose `rs` we only share.
    Ok(unsafe { &(*o).rs })
}

/// Takes the object at `p` back from C (`EINVAL` if it is not a live `R`).
pub fn retire<C: 'static, R: 'static>(p: *mut C) -> Result<Box<Obj<C, R>>, Errno> {
    let mut reg = registry();
    if p.is_null() || reg.get(&(p as usize)) != Some(&TypeId::of::<Obj<C, R>>()) {
        return Err(Errno::EINVAL);
    }
    reg.remove(&(p as usize));
    drop(reg);
    // SAFETY: `p` came from `Box::into_raw` in `publish::<C, R>` and was live until the
    // removal above; nobody can retire it twice (the registry entry is gone).
    Ok(unsafe { Box::from_raw(p.cast::<Obj<C, R>>()) })
}

/// Reads a field of a live published C struct: `read(p, |c| c.field)`.
pub fn read_c<C: 'static, R: 'static, T>(p: *const C, f: impl FnOnce(&C) -> T) -> Result<T, Errno> {
    get::<C, R>(p)?;
    // SAFETY: `p` is live (checked above). The shared reference exists only for `f`, which
    // copies a field out; C may write its own fields concurrently only in violation of the
    // verbs API's threading rules for that object.
    Ok(f(unsafe { &*p }))
}

/// Offset of the `ibv_context` in its `verbs_context`.
const CTX_OFFSET: usize = core::mem::offset_of!(verbs_context, context);

/// Publishes a context: returns the address of its `ibv_context`.
pub fn publish_ctx<R: 'static>(v: verbs_context, rs: R) -> *mut ibv_context {
    let p = Box::into_raw(Box::new(Obj { c: v, rs }));
    let ctx = (p as usize + CTX_OFFSET) as *mut ibv_context;
    registry().insert(ctx as usize, TypeId::of::<R>());
    ctx
}

/// The Rust state of the live context at `ctx`.
pub fn get_ctx<'a, R: 'static>(ctx: *const ibv_context) -> Result<&'a R, Errno> {
    if ctx.is_null() || registry().get(&(ctx as usize)) != Some(&TypeId::of::<R>()) {
        return Err(Errno::EINVAL);
    }
    let o = (ctx as usize - CTX_OFFSET) as *const Obj<verbs_context, R>;
    // SAFETY: the registry holds `ctx` only while the `Obj<verbs_context, R>` it was computed
    // from in `publish_ctx` is alive; the subtraction undoes that addition.
    Ok(unsafe { &(*o).rs })
}

/// Takes a context back from C.
pub fn retire_ctx<R: 'static>(ctx: *mut ibv_context) -> Result<Box<Obj<verbs_context, R>>, Errno> {
    let mut reg = registry();
    if ctx.is_null() || reg.get(&(ctx as usize)) != Some(&TypeId::of::<R>()) {
        return Err(Errno::EINVAL);
    }
    reg.remove(&(ctx as usize));
    drop(reg);
    let o = (ctx as usize - CTX_OFFSET) as *mut Obj<verbs_context, R>;
    // SAFETY: as in `get_ctx`; the box came from `Box::into_raw` in `publish_ctx` and its
    // registry entry is gone, so this is the only owner.
    Ok(unsafe { Box::from_raw(o) })
}

/// Copies `*p` out (an application's attribute struct); `EINVAL` for NULL.
///
/// # Safety
/// `p` is NULL or points to a readable `T` (the verbs API's contract for this argument).
pub unsafe fn read_in<T: Copy>(p: *const T) -> Result<T, Errno> {
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: non-NULL, and readable as a `T` by the caller's contract; unaligned-tolerant.
    Ok(unsafe { p.read_unaligned() })
}

/// Writes `v` to `*p` (an output argument); `EINVAL` for NULL.
///
/// # Safety
/// `p` is NULL or points to writable memory for a `T`.
pub unsafe fn write_out<T>(p: *mut T, v: T) -> Result<(), Errno> {
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: non-NULL and writable by the caller's contract.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Writes the first `len` bytes of `v` to `p` (a struct whose caller-declared size may be
/// smaller than ours: `query_port`'s `port_attr_len`).
///
/// # Safety
/// `p` is NULL or writable for `len` bytes.
pub unsafe fn write_prefix<T>(p: *mut T, v: &T, len: usize) -> Result<(), Errno> {
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    let n = len.min(core::mem::size_of::<T>());
    // SAFETY: `v` is readable for size_of::<T>() ≥ n bytes, `p` writable for len ≥ n bytes by
    // the caller's contract; the two cannot overlap (`v` is ours).
    unsafe { core::ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), p.cast::<u8>(), n) };
    Ok(())
}

/// Copies `n` elements of an application array out (`num_sge` SGEs of a work request).
///
/// # Safety
/// `p` is readable for `n` elements (the caller checked `n` against a bound first).
pub unsafe fn read_array<T: Copy>(p: *const T, n: usize) -> Result<Vec<T>, Errno> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: readable for `n` elements by the caller's contract, read element by element
    // without assuming alignment.
    Ok((0..n)
        .map(|i| unsafe { p.add(i).read_unaligned() })
        .collect())
}

/// Writes `v` into element `i` of an application array of at least `i + 1` elements.
///
/// # Safety
/// `p` is writable for `i + 1` elements.
pub unsafe fn write_elem<T>(p: *mut T, i: usize, v: T) {
    // SAFETY: by the caller's contract.
    unsafe { p.add(i).write_unaligned(v) }
}

/// Copies `len` bytes at application address `addr` (IBV_SEND_INLINE data, which needs no
/// MR: the application promises the bytes are readable until `ibv_post_send` returns).
///
/// # Safety
/// `[addr, addr + len)` is readable.
pub unsafe fn read_bytes(addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if addr == 0 {
        return Err(Errno::EINVAL);
    }
    let mut v = vec![0u8; len];
    // SAFETY: readable by the caller's contract; `v` is ours and `len` long.
    unsafe { core::ptr::copy_nonoverlapping(addr as usize as *const u8, v.as_mut_ptr(), len) };
    Ok(v)
}

/// An application's registered buffer: `ibv_reg_mr(pd, addr, length, …)`. The core reaches it
/// only as `softrdma_mem::Memory::external(window)`, i.e. through [`ExternalMemory`], whose
/// slices the transport bounds-checks against the MR (`Mr::range`) before every copy.
///
/// Between registration and `ibv_dereg_mr` the application guarantees the range stays mapped
/// (what pinning guarantees a NIC); the device lock serialises the device's own accesses. As
/// with a NIC's DMA, bytes the application changes while a transfer touches them are a race
/// of the application's making (verbs: a posted buffer belongs to the device until its
/// completion).
pub struct AppWindow {
    addr: usize,
    len: usize,
}

impl AppWindow {
    /// A window on `[addr, addr + len)`; `EINVAL` for a NULL address with a non-zero length
    /// or a range that wraps.
    pub fn new(addr: *mut c_void, len: usize) -> Result<AppWindow, Errno> {
        let a = addr as usize;
        if (a == 0 && len != 0) || a.checked_add(len).is_none() || len > isize::MAX as usize {
            return Err(Errno::EINVAL);
        }
        Ok(AppWindow { addr: a, len })
    }

    fn base(&self) -> *mut u8 {
        if self.len == 0 {
            core::ptr::NonNull::<u8>::dangling().as_ptr()
        } else {
            self.addr as *mut u8
        }
    }
}

impl ExternalMemory for AppWindow {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `[addr, addr + len)` stays mapped and readable while the MR exists (the
        // registration contract above); a zero-length window uses a dangling, aligned base.
        unsafe { core::slice::from_raw_parts(self.base(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and writable: `ibv_reg_mr` is given writable memory whenever
        // the MR grants the device write access (LOCAL_WRITE, which every device write needs;
        // the core checks the MR's access flags before any write).
        unsafe { core::slice::from_raw_parts_mut(self.base(), self.len) }
    }
}
