#![no_main]
//! Fuzz target `cm_ops`: the IB CM's operation sequences — user operations on two CMs
//! interleaved with lost, duplicated, replayed and hostile MADs on QP1, time passing — with
//! the no-leak invariants checked. The body and the input format live in
//! `softrdma_core::fuzzing::cm_ops`, shared with the corpus replay test that runs on stable
//! (`crates/softrdma-core/tests/fuzz_corpus.rs`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma_core::fuzzing::cm_ops::cm_ops(data);
});
