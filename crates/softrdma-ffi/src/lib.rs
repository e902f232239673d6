//! The C-ABI machinery of softrdma's drop-in libraries, `libibverbs.so.1` (crate
//! `softrdma-verbs`) and `librdmacm.so.1` (crate `softrdma-rdmacm`), written once:
//!
//! - `entry` (FFI): the panic boundary and rdma-core's return conventions ([`entry::Errno`],
//!   the converters, and the [`entry_in!`] macro each library wraps as its `entry!`);
//! - `ptr` (FFI): the live-object registry ([`ptr::publish`], [`ptr::get`], [`ptr::retire`])
//!   and the NULL- and length-checked copies of a program's structures and buffers;
//! - [`audit`]: the check, run by each crate's tests, that `unsafe` stays in its audited
//!   modules with a `// SAFETY:` comment on every block;
//! - [`build`]: what both build scripts do (soname, version script, `.symver` directives
//!   from `src/symbols.txt`, lld), used as a build-dependency.
//! - [`verbs_abi`]: the plain `<infiniband/verbs.h>` structures both libraries lay out.
//!
//! This is an rlib linked into each cdylib, so each library has its own statics: its own
//! registry, which is right, a library's objects are its own.
//!
//! `unsafe` is denied in the crate and allowed only in `entry` and `ptr`, each block with a
//! `// SAFETY:` comment (`tests/unsafe_audit.rs`); `unsafe_op_in_unsafe_fn` is denied.

#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod audit;
pub mod build;
pub mod entry;
pub mod ptr;
pub mod verbs_abi;
