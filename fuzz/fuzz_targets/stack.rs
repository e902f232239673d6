#![no_main]
//! Fuzz target `stack`: datagrams into `softrdma_core::Stack::handle_datagram` (an RC QP in RTS
//! with requests outstanding, a UD QP, invalidatable MRs; ICRCs sealed before feeding). The
//! body and the input format live in `softrdma_core::fuzzing`, shared with the corpus replay
//! test that runs on stable (`crates/softrdma-core/tests/fuzz_corpus.rs`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma_core::fuzzing::stack(data);
});
