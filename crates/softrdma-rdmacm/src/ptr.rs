//! Every pointer C hands us goes through here (as in softrdma-verbs' `ptr.rs`): the objects
//! we gave out are checked against a registry of live objects before they are touched, and
//! program structures are copied in and out with a NULL check.
//!
//! Each object C sees is a `Box<Obj<C, R>>`: the public `#[repr(C)]` struct first (so its
//! address is the object's), our Rust state after it. The Rust state is only shared; the C
//! part is read and written through raw pointers, never references, because the program
//! writes fields of its own (`id->context`).

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

/// The Rust state of the live object of type `R` at `p` (`EINVAL` otherwise).
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

/// Reads the C part of a live object.
pub fn read_c<C: Copy + 'static, R: 'static>(p: *const C) -> Result<C, Errno> {
    get::<C, R>(p)?;
    // SAFETY: `p` is live (checked above); copied out without a lasting reference.
    Ok(unsafe { p.read() })
}

/// Changes the C part of a live object (the program may read it meanwhile only against the
/// API's threading rules for that object).
pub fn update_c<C: 'static, R: 'static>(p: *mut C, f: impl FnOnce(*mut C)) -> Result<(), Errno> {
    get::<C, R>(p)?;
    f(p);
    Ok(())
}

/// Copies `*p` out (a program's struct); `EINVAL` for NULL.
///
/// # Safety
/// `p` is NULL or points to a readable `T`.
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

/// Copies `n` bytes of a program's buffer.
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
