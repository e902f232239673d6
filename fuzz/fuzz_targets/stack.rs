#![no_main]
//! Fuzz target `stack`: datagrams into `softrdma_core::Node::handle_datagram`, a node whose one
//! port is a stack with an RC QP in RTS with requests outstanding, a UD QP, invalidatable MRs
//! (and QP1, the MAD layer and the CMs behind it); ICRCs sealed before feeding. The
//! body and the input format live in `softrdma_core::fuzzing`, shared with the corpus replay
//! test that runs on stable (`crates/softrdma-core/tests/fuzz_corpus.rs`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma_core::fuzzing::stack(data);
});
