//! The panic boundary and return conventions of every function C can call:
//! `softrdma_ffi::entry`, shared with softrdma-verbs. librdmacm's calls mostly use `neg`
//! (0 or -1 with `errno`), the rsockets calls `neg_as`. A panic is reported as
//! `softrdma librdmacm: internal error …` and the call fails with `EIO`.

pub use softrdma_ffi::entry::*;

/// `softrdma_ffi::entry_in!` for this library (its name in panic reports).
macro_rules! entry {
    ($($t:tt)*) => {
        softrdma_ffi::entry_in! { "librdmacm"; $($t)* }
    };
}
pub(crate) use entry;
