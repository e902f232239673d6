//! Every pointer C hands us goes through `softrdma_ffi::ptr`, shared with softrdma-verbs: the
//! registry of the live objects we gave out (this library's own: a static of the rlib linked
//! into this cdylib), and NULL-checked copies of a program's structures in and out.

pub use softrdma_ffi::ptr::{
    c_str, copy_c, get, publish, read_bytes, read_in, retire, update_c, write_out,
};
