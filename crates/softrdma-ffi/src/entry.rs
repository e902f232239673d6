//! The panic boundary and return conventions of every function C can call, in both
//! libraries.
//!
//! Every export and every function pointer put in an ops table is written with a library's
//! `entry!` (a wrapper over [`entry_in!`](crate::entry_in) naming the library): it adds
//! `extern "C"`, the export name `sv__NAME` that the `.symver` directives from
//! [`build`](crate::build) bind to `NAME@@VERSION`, and `catch_unwind` around the body, so
//! nothing unwinds into C. The body returns a Rust value; a converter named in the macro turns
//! it into rdma-core's convention for that call:
//!
//! - [`errno`]: `Result<(), Errno>` → 0 or the errno value (`ibv_modify_qp`, `ibv_post_send`,
//!   `ibv_destroy_*`);
//! - [`neg`]: `Result<c_int, Errno>` → the value, or -1 with `errno` set (`ibv_get_cq_event`,
//!   `rdma_connect`, `rdma_get_cm_event`);
//! - [`neg_as`]: [`neg`] for any [`MinusOne`] type (librdmacm's rsockets calls);
//! - [`null`]: `Result<*mut T, Errno>` → the pointer, or NULL with `errno` set
//!   (`ibv_open_device`, `ibv_create_qp`, `rdma_create_event_channel`);
//! - [`value`]: a plain value, its [`OnPanic`] default if the body panicked.
//!
//! A panic is a bug of ours: it is reported on stderr with the library's name and the call
//! fails with `EIO`.

#![allow(unsafe_code)]

use core::ffi::c_int;
use std::panic::UnwindSafe;

/// An errno value (positive).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Errno(pub c_int);

impl Errno {
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    pub const ENODEV: Errno = Errno(libc::ENODEV);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
}

/// Sets the calling thread's `errno`.
pub fn set_errno(e: Errno) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid and
    // exclusively this thread's for the thread's lifetime.
    unsafe { *libc::__errno_location() = e.0 };
}

fn report_panic(lib: &str, p: &(dyn std::any::Any + Send)) {
    let msg = p
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    eprintln!("softrdma {lib}: internal error (panic: {msg}); the call fails with EIO");
}

/// Runs `f` behind the panic boundary; `lib` names the library in the report. `Err(())` is
/// "it panicked" (already reported); the converters turn it into `EIO` or the type's default.
#[allow(clippy::result_unit_err)]
pub fn guard<R>(lib: &str, f: impl FnOnce() -> R + UnwindSafe) -> Result<R, ()> {
    std::panic::catch_unwind(f).map_err(|p| report_panic(lib, &*p))
}

/// 0 or the errno value.
pub fn errno(r: Result<Result<(), Errno>, ()>) -> c_int {
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => e.0,
        Err(()) => libc::EIO,
    }
}

/// The value, or -1 with `errno` set.
pub fn neg(r: Result<Result<c_int, Errno>, ()>) -> c_int {
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(e);
            -1
        }
        Err(()) => {
            set_errno(Errno::EIO);
            -1
        }
    }
}

/// The pointer, or NULL with `errno` set.
pub fn null<T>(r: Result<Result<*mut T, Errno>, ()>) -> *mut T {
    match r {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            set_errno(e);
            core::ptr::null_mut()
        }
        Err(()) => {
            set_errno(Errno::EIO);
            core::ptr::null_mut()
        }
    }
}

/// A return type whose failure value is -1 (`int`, `ssize_t`, `off_t`, `size_t`'s all-ones).
pub trait MinusOne {
    /// -1 in this type.
    fn minus_one() -> Self;
}

impl MinusOne for c_int {
    fn minus_one() -> c_int {
        -1
    }
}
impl MinusOne for isize {
    fn minus_one() -> isize {
        -1
    }
}
impl MinusOne for i64 {
    fn minus_one() -> i64 {
        -1
    }
}
impl MinusOne for usize {
    fn minus_one() -> usize {
        usize::MAX
    }
}

/// [`neg`] for any [`MinusOne`] type (the rsockets calls).
pub fn neg_as<T: MinusOne>(r: Result<Result<T, Errno>, ()>) -> T {
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(e);
            T::minus_one()
        }
        Err(()) => {
            set_errno(Errno::EIO);
            T::minus_one()
        }
    }
}

/// What a call returning a plain value returns when its body panicked.
pub trait OnPanic {
    /// The value.
    fn on_panic() -> Self;
}

impl OnPanic for () {
    fn on_panic() {}
}
impl OnPanic for c_int {
    fn on_panic() -> c_int {
        -1
    }
}
impl OnPanic for isize {
    fn on_panic() -> isize {
        -(libc::EIO as isize)
    }
}
impl OnPanic for bool {
    fn on_panic() -> bool {
        false
    }
}
impl OnPanic for u8 {
    fn on_panic() -> u8 {
        0
    }
}
impl OnPanic for u16 {
    fn on_panic() -> u16 {
        0
    }
}
impl OnPanic for u32 {
    fn on_panic() -> u32 {
        0
    }
}
impl OnPanic for u64 {
    fn on_panic() -> u64 {
        0
    }
}
impl<T> OnPanic for *const T {
    fn on_panic() -> *const T {
        core::ptr::null()
    }
}
impl<T> OnPanic for *mut T {
    fn on_panic() -> *mut T {
        core::ptr::null_mut()
    }
}

/// The value, or its [`OnPanic`] default.
pub fn value<T: OnPanic>(r: Result<T, ()>) -> T {
    r.unwrap_or_else(|()| T::on_panic())
}

/// Declares a function C calls, for the library named `$lib` (each library wraps this as its
/// own `entry!`, which supplies the name). `export` makes it the implementation `sv__NAME` of
/// the versioned export NAME (`src/symbols.txt`); `export_as` gives it a literal export name;
/// `op` is a function pointer for an ops table. The converter (`errno`, `neg`, `neg_as`,
/// `null`, `value`) turns the body's value into the C return. Unit tests of the library call
/// the Rust functions directly (no export name, no `.symver`): the `cfg(test)` below is the
/// calling crate's, where the macro expands.
#[macro_export]
macro_rules! entry_in {
    ($lib:literal; $(#[$m:meta])* export $conv:ident fn $name:ident ( $($a:ident : $t:ty),* $(,)? ) -> $ret:ty $body:block) => {
        $(#[$m])*
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            $crate::entry::$conv($crate::entry::guard($lib, ::std::panic::AssertUnwindSafe(move || $body)))
        }
        // The exported name is a separate thin function: `.symver ..., remove` takes
        // `sv__NAME` out of the symbol table, so the library's own calls (`rdma_destroy_ep`
        // calls `rdma_destroy_id`, the RDMA CM's `cm_exports` call verbs) go to `$name`
        // itself, never the renamed symbol.
        const _: () = {
            #[cfg_attr(not(test), export_name = concat!("sv__", stringify!($name)))]
            #[allow(dead_code)]
            unsafe extern "C" fn export($($a: $t),*) -> $ret {
                // SAFETY: the same contract as `$name`, whose arguments these are.
                unsafe { $name($($a),*) }
            }
        };
    };
    ($lib:literal; $(#[$m:meta])* export_as $sym:literal $conv:ident fn $name:ident ( $($a:ident : $t:ty),* $(,)? ) -> $ret:ty $body:block) => {
        $(#[$m])*
        #[cfg_attr(not(test), export_name = $sym)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            $crate::entry::$conv($crate::entry::guard($lib, ::std::panic::AssertUnwindSafe(move || $body)))
        }
    };
    ($lib:literal; $(#[$m:meta])* op $conv:ident fn $name:ident ( $($a:ident : $t:ty),* $(,)? ) -> $ret:ty $body:block) => {
        $(#[$m])*
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            $crate::entry::$conv($crate::entry::guard($lib, ::std::panic::AssertUnwindSafe(move || $body)))
        }
    };
}
