//! Every pointer C hands us goes through here: the objects we gave out and a program's
//! structures and arrays go through `softrdma_ffi::ptr`, shared with softrdma-rdmacm (the
//! registry of live objects, this library's own: a static of the rlib linked into this
//! cdylib; NULL- and length-checked copies in and out). Here is what is libibverbs' own: a
//! context is published at the address of the `ibv_context` inside its `verbs_context`
//! ([`get_ctx`]), inline data is read at a work request's `u64` address, and application
//! memory registered as an MR is a pointer-and-length window ([`AppWindow`]).

#![allow(unsafe_code)]

use core::ffi::c_void;

use softrdma_mem::ExternalMemory;

pub use softrdma_ffi::ptr::{
    get, publish, read_array, read_c, read_in, retire, write_elem, write_out, write_prefix, Obj,
};

use crate::abi::{ibv_context, verbs_context};
use crate::entry::Errno;

/// Offset of the `ibv_context` in its `verbs_context`.
const CTX_OFFSET: usize = core::mem::offset_of!(verbs_context, context);

/// Publishes a context: returns the address of its `ibv_context`.
pub fn publish_ctx<R: 'static>(v: verbs_context, rs: R) -> *mut ibv_context {
    softrdma_ffi::ptr::publish_at::<verbs_context, R, ibv_context>(v, rs, CTX_OFFSET)
}

/// The Rust state of the live context at `ctx`.
pub fn get_ctx<'a, R: 'static>(ctx: *const ibv_context) -> Result<&'a R, Errno> {
    softrdma_ffi::ptr::get_at::<verbs_context, R, ibv_context>(ctx, CTX_OFFSET)
}

/// Takes a context back from C.
pub fn retire_ctx<R: 'static>(ctx: *mut ibv_context) -> Result<Box<Obj<verbs_context, R>>, Errno> {
    softrdma_ffi::ptr::retire_at::<verbs_context, R, ibv_context>(ctx, CTX_OFFSET)
}

/// Copies `len` bytes at application address `addr` (IBV_SEND_INLINE data, which needs no
/// MR: the application promises the bytes are readable until `ibv_post_send` returns).
///
/// # Safety
/// `[addr, addr + len)` is readable.
pub unsafe fn read_bytes(addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
    // SAFETY: the caller's contract is `read_bytes`' own (a NULL address is `EINVAL` there).
    unsafe { softrdma_ffi::ptr::read_bytes(addr as usize as *const u8, len) }
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
