//! The panic boundary and return conventions of every function C can call:
//! `softrdma_ffi::entry`, shared with softrdma-rdmacm (the converters `errno`, `neg`, `null`,
//! `value`; see there). A panic is reported as `softrdma libibverbs: internal error …` and the
//! call fails with `EIO`.

pub use softrdma_ffi::entry::*;

/// `softrdma_ffi::entry_in!` for this library (its name in panic reports).
macro_rules! entry {
    ($($t:tt)*) => {
        softrdma_ffi::entry_in! { "libibverbs"; $($t)* }
    };
}
pub(crate) use entry;
