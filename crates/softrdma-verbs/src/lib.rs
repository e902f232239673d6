//! `libibverbs.so.1` over softrdma: rdma-core 44's verbs ABI (Debian 12), so that programs
//! linked against Debian's libibverbs run over softrdma unchanged when this library comes
//! first on the library path (`softrdma run -- PROGRAM ARGS…`).
//!
//! Layout:
//! - [`abi`]: the `#[repr(C)]` structures of `<infiniband/verbs.h>` and their checked layout;
//! - [`devices`]: one device per network interface with an address (names, GUIDs, addresses);
//! - [`conv`]: C structures ↔ the core's types, core errors → rdma-core's errno values;
//! - `entry`, the panic boundary and return conventions of every C-callable function
//!   (`softrdma_ffi::entry`, shared with softrdma-rdmacm, named for this library);
//! - `ptr` (FFI), every pointer C hands us: the live-object registry and checked copies
//!   (`softrdma_ffi::ptr`), contexts published inside their `verbs_context`, the application
//!   memory window an MR sits on;
//! - `exports` (FFI), the verbs themselves;
//! - [`rdmacm`]: the process's RDMA CM, which softrdma's `librdmacm.so.1` (crate
//!   `softrdma-rdmacm`) drives through one private table ([`cm_abi`], exported as
//!   `softrdma_rdmacm_ops@SOFTRDMA_PRIVATE_1`), and `cm_exports` (FFI), that table.
//!
//! `unsafe` is denied in the crate and allowed only in the three FFI modules, each block with
//! a `// SAFETY:` comment; `unsafe_op_in_unsafe_fn` is denied (softrdma-ffi's `entry` and
//! `ptr` follow the same rules). The rest of the workspace keeps `forbid(unsafe_code)`.
//!
//! Symbol versions: `build.rs` binds every `sv__NAME` implementation to `NAME@@VERSION` from
//! `src/symbols.txt` (rdma-core 44's `libibverbs.map`). Unit-test builds leave them out (a test
//! executable has no version nodes). The directives sit in `exports`, the module of the
//! implementations: `.symver` only binds a symbol defined in the same object file, and rustc
//! keeps a module's functions and its `global_asm!` in one codegen unit.

#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod abi;
pub mod cm_abi;
mod cm_exports;
pub mod conv;
pub mod devices;
mod entry;
pub mod exports;
pub mod mcast;
mod ptr;
pub mod rdmacm;
