#![no_main]
//! Fuzz target `nbd`: the body lives in `softrdma_wire::fuzzing`, shared with the corpus
//! replay test that runs on stable.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma_wire::fuzzing::run("nbd", data);
});
