#![no_main]
//! Fuzz target `cm`: the body lives in `softrdma_wire::fuzzing`, shared with the corpus
//! replay test that runs on stable.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma_wire::fuzzing::run("cm", data);
});
