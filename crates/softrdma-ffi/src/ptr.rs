//! Every pointer C hands either library goes through here: the objects we gave out (checked
//! against a registry of live objects before they are touched), and a program's structures,
//! arrays and buffers, copied in and out with a NULL check and a caller-given length.
//!
//! **Objects.** Each object C sees is a `Box<Obj<C, R>>`: the public `#[repr(C)]` struct first
//! (so its address is the object's), our Rust state after it. [`publish`] leaks the box and
//! records `(address, type)`; [`get`] returns the Rust state only if that pair is live, so a
//! NULL, stale or foreign pointer is `EINVAL` instead of a wild read; [`retire`] removes the
//! record and takes the box back. The type recorded is the whole `Obj<C, R>`: the C shape is
//! part of it, so an object published as `ibv_qp_ex` is not found as an `ibv_qp`, whose Rust
//! state would sit at another offset. An object C knows by a field inside its struct (an
//! `ibv_context` inside its `verbs_context`) is published with [`publish_at`], and the offset
//! is part of the record too.
//!
//! The registry is a static of this rlib, so each library linking it has its own.
//!
//! The Rust state is only ever shared (`&R`): what changes lives in atomics or mutexes. The
//! C part is read and written through raw place expressions, never lasting references, so
//! C writing its own fields (`cq_context`, `id->context`) aliases nothing of ours.

#![allow(unsafe_code)]

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::entry::Errno;

/// A published object: the C struct, then ours.
#[repr(C)]
pub struct Obj<C, R> {
    /// What C sees.
    pub c: C,
    /// Ours.
    pub rs: R,
}

/// What the registry knows of a live address: the object's type and where in it C points.
type Record = (TypeId, usize);

fn registry() -> MutexGuard<'static, HashMap<usize, Record>> {
    static LIVE: OnceLock<Mutex<HashMap<usize, Record>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn record<C: 'static, R: 'static>(offset: usize) -> Record {
    (TypeId::of::<Obj<C, R>>(), offset)
}

/// Leaks `Obj { c, rs }` to C and records it as live; returns the address of `c`.
pub fn publish<C: 'static, R: 'static>(c: C, rs: R) -> *mut C {
    publish_at::<C, R, C>(c, rs, 0)
}

/// The Rust state of the live object of type `Obj<C, R>` at `p` (`EINVAL` for NULL or
/// anything not published as one).
pub fn get<'a, C: 'static, R: 'static>(p: *const C) -> Result<&'a R, Errno> {
    get_at::<C, R, C>(p, 0)
}

/// Takes the object at `p` back from C (`EINVAL` if it is not a live `Obj<C, R>`).
pub fn retire<C: 'static, R: 'static>(p: *mut C) -> Result<Box<Obj<C, R>>, Errno> {
    retire_at::<C, R, C>(p, 0)
}

/// Like [`publish`], but C is given the address of the `F` at byte `offset` inside `c`
/// (`core::mem::offset_of!`): a verbs context is known by the `ibv_context` inside its
/// `verbs_context`.
///
/// # Panics
/// If `F` does not fit at `offset` inside `C`: a bug of the caller's constant, not input.
pub fn publish_at<C: 'static, R: 'static, F>(c: C, rs: R, offset: usize) -> *mut F {
    assert!(
        offset
            .checked_add(core::mem::size_of::<F>())
            .is_some_and(|end| end <= core::mem::size_of::<C>()),
        "publish_at: the field does not fit in the object"
    );
    let p = Box::into_raw(Box::new(Obj { c, rs }));
    let f = (p as usize + offset) as *mut F;
    registry().insert(f as usize, record::<C, R>(offset));
    f
}

/// The Rust state of the live object published with [`publish_at`] (same `C`, `R`, offset).
pub fn get_at<'a, C: 'static, R: 'static, F>(p: *const F, offset: usize) -> Result<&'a R, Errno> {
    if p.is_null() || registry().get(&(p as usize)) != Some(&record::<C, R>(offset)) {
        return Err(Errno::EINVAL);
    }
    let o = (p as usize - offset) as *const Obj<C, R>;
    // SAFETY: the registry holds `p` with this type and offset only while the `Obj<C, R>` it
    // was computed from in `publish_at` is alive; the subtraction undoes that addition. The
    // Rust state is only ever shared.
    Ok(unsafe { &(*o).rs })
}

/// Takes an object published with [`publish_at`] back from C.
pub fn retire_at<C: 'static, R: 'static, F>(
    p: *mut F,
    offset: usize,
) -> Result<Box<Obj<C, R>>, Errno> {
    let mut reg = registry();
    if p.is_null() || reg.get(&(p as usize)) != Some(&record::<C, R>(offset)) {
        return Err(Errno::EINVAL);
    }
    reg.remove(&(p as usize));
    drop(reg);
    let o = (p as usize - offset) as *mut Obj<C, R>;
    // SAFETY: as in `get_at`; the box came from `Box::into_raw` in `publish_at` and its
    // registry entry is gone, so this is the only owner (nobody can retire it twice).
    Ok(unsafe { Box::from_raw(o) })
}

/// Reads a field of a live published C struct: `read_c(p, |c| c.field)`.
// Safe although it dereferences `p`: the registry check admits only our own live objects.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn read_c<C: 'static, R: 'static, T>(p: *const C, f: impl FnOnce(&C) -> T) -> Result<T, Errno> {
    get::<C, R>(p)?;
    // SAFETY: `p` is live (checked above). The shared reference exists only for `f`, which
    // copies a field out; C may write its own fields concurrently only in violation of the
    // API's threading rules for that object.
    Ok(f(unsafe { &*p }))
}

/// Copies the whole C part of a live object out.
// Safe although it dereferences `p`: the registry check admits only our own live objects.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn copy_c<C: Copy + 'static, R: 'static>(p: *const C) -> Result<C, Errno> {
    get::<C, R>(p)?;
    // SAFETY: `p` is live (checked above); copied out without a lasting reference.
    Ok(unsafe { p.read() })
}

/// Changes the C part of a live object through its pointer (the program may read it
/// meanwhile only against the API's threading rules for that object).
pub fn update_c<C: 'static, R: 'static>(p: *mut C, f: impl FnOnce(*mut C)) -> Result<(), Errno> {
    get::<C, R>(p)?;
    f(p);
    Ok(())
}

/// Copies `*p` out (a program's attribute struct); `EINVAL` for NULL.
///
/// # Safety
/// `p` is NULL or points to a readable `T` (the API's contract for this argument).
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
    // SAFETY: non-NULL and writable by the caller's contract; unaligned-tolerant.
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

/// Copies `n` elements of a program's array out (`num_sge` SGEs of a work request).
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

/// Writes `v` into element `i` of a program's array of at least `i + 1` elements.
///
/// # Safety
/// `p` is writable for `i + 1` elements.
pub unsafe fn write_elem<T>(p: *mut T, i: usize, v: T) {
    // SAFETY: by the caller's contract.
    unsafe { p.add(i).write_unaligned(v) }
}

/// Copies `n` bytes of a program's buffer (`EINVAL` for NULL with `n > 0`).
///
/// # Safety
/// `p` is readable for `n` bytes.
pub unsafe fn read_bytes(p: *const u8, n: usize) -> Result<Vec<u8>, Errno> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: readable for `n` bytes by the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts(p, n) }.to_vec())
}

/// A NUL-terminated C string (`None` for NULL or not UTF-8).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub unsafe fn c_str(p: *const core::ffi::c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: NUL-terminated by the caller's contract.
    unsafe { core::ffi::CStr::from_ptr(p) }
        .to_str()
        .ok()
        .map(str::to_string)
}
