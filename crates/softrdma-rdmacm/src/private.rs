//! Where the RDMA CM is: softrdma's `libibverbs.so.1`, asked for its table
//! ([`crate::cm_abi::CmOps`]) by the private version `SOFTRDMA_PRIVATE_1`, once.
//!
//! `dlopen("libibverbs.so.1")` finds the library the program already loaded (its
//! `DT_NEEDED`), or loads it from the library path `softrdma run` set. If that library is not
//! softrdma's (rdma-core's has no such version node), there is no table and every call fails
//! with `ENODEV`: the process never gets a second copy of the stack.

#![allow(unsafe_code)]

use std::sync::OnceLock;

use crate::cm_abi::{CmOps, CM_OPS_VERSION, OPS_SYMBOL, PRIVATE_NODE};
use crate::entry::Errno;

/// The accessor's C type.
type Accessor = unsafe extern "C" fn() -> *const CmOps;

/// The table, or `ENODEV` when the process's libibverbs is not softrdma's (or of another
/// build).
pub fn ops() -> Result<&'static CmOps, Errno> {
    static OPS: OnceLock<Option<&'static CmOps>> = OnceLock::new();
    OPS.get_or_init(|| {
        let name = c"libibverbs.so.1";
        let sym = std::ffi::CString::new(OPS_SYMBOL).ok()?;
        let ver = std::ffi::CString::new(PRIVATE_NODE).ok()?;
        // SAFETY: dlopen with a NUL-terminated name; the handle is kept for the process's
        // lifetime (never dlclose'd), so the table it yields stays valid.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            return None;
        }
        // SAFETY: a live handle and NUL-terminated names.
        let f = unsafe { libc::dlvsym(h, sym.as_ptr(), ver.as_ptr()) };
        if f.is_null() {
            return None;
        }
        // SAFETY: softrdma-verbs defines this versioned symbol as an `Accessor` (its
        // exports.rs: `softrdma_rdmacm_ops`); a data pointer from dlvsym is the function's
        // address on this platform.
        let f: Accessor = unsafe { core::mem::transmute::<*mut libc::c_void, Accessor>(f) };
        // SAFETY: calling that accessor (no arguments, behind its own panic boundary).
        let t = unsafe { f() };
        if t.is_null() {
            return None;
        }
        // SAFETY: the table is a `static` of libibverbs.so.1, which stays loaded; its version
        // and size are checked before any other field is used.
        let t: &'static CmOps = unsafe { &*t };
        (t.version == CM_OPS_VERSION && t.size as usize == core::mem::size_of::<CmOps>())
            .then_some(t)
    })
    .ok_or(Errno::ENODEV)
}
