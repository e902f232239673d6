//! Link-time identity of the library: soname `libibverbs.so.1`, and rdma-core 44's symbol
//! versions from `src/symbols.txt` (a version script plus one `.symver` directive per export).
//! The work, shared with softrdma-rdmacm, is `softrdma_ffi::build` (lld, the version script,
//! `--undefined-version`, which `tests/symbols.rs` makes up for).

fn main() {
    softrdma_ffi::build::symbol_versions("libibverbs.so.1");
}
