//! `librdmacm.so.1` over softrdma: rdma-core 44's RDMA CM ABI (Debian 12), so that programs
//! linked against Debian's librdmacm (`rping`, `ucmatose`, `udaddy`, `cmtime`, perftest's
//! `-R`, `rdma_server`/`rdma_client`…) run over softrdma unchanged when this library and
//! softrdma's `libibverbs.so.1` come first on the library path (`softrdma run -- PROGRAM`).
//!
//! # No second copy of the stack
//!
//! The process's devices live in softrdma's `libibverbs.so.1` (crate `softrdma-verbs`), and
//! so does its RDMA CM (`softrdma_verbs::rdmacm`): the CM is a MAD client of the verbs device
//! of each address, sharing its `<ip>:4791` socket, and the `ibv_context` an id shows as
//! `id->verbs` is that device, so the PD, CQs and QP a program makes on it are the ones the
//! CM moves. This crate depends on no softrdma crate; it reaches the CM through one private
//! table that libibverbs exports as `softrdma_rdmacm_ops@SOFTRDMA_PRIVATE_1` (the `private` module),
//! as rdma-core's librdmacm calls private libibverbs symbols. The table's types
//! ([`cm_abi`]) are one file compiled into both libraries.
//!
//! This library keeps what is librdmacm's own: the C objects programs see (`rdma_cm_id`,
//! `rdma_event_channel`, `rdma_cm_event`, `rdma_addrinfo`), filled from the CM's answers;
//! the event channel's `fd` is the CM's (an eventfd counting queued events, pollable, and
//! honouring `O_NONBLOCK`).
//!
//! Layout:
//! - [`abi`]: the `#[repr(C)]` structures of `<rdma/rdma_cma.h>` and their checked layout;
//! - `entry`: the panic boundary and return conventions of every export, and `ptr`: every
//!   pointer C hands us (registry of live objects, copies in and out), both
//!   `softrdma_ffi`'s (shared with softrdma-verbs; this library's registry is its own);
//! - `private` (FFI): finding the CM's table in libibverbs;
//! - `exports` (FFI): the `rdma_*` calls and the `r*` rsockets calls (`ENOSYS` for now).
//!
//! `unsafe` is denied in the crate and allowed only in those FFI modules, each block with a
//! `// SAFETY:` comment.
//!
//! Symbol versions: `build.rs` binds every `sv__NAME` to `NAME@@RDMACM_1.x` from
//! `src/symbols.txt` (rdma-core 44's `librdmacm.map`), as softrdma-verbs does.

#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod abi;
/// The private table between this library and softrdma's libibverbs (the file lives in
/// softrdma-verbs, which exports the table; both crates compile the same file).
#[path = "../../softrdma-verbs/src/cm_abi.rs"]
pub mod cm_abi;
mod entry;
pub mod exports;
mod private;
mod ptr;
