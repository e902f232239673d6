#![no_main]
//! Fuzz target `pr_state`: the persistent reservation state file a file LU keeps beside its
//! backing file while APTPL is set (`softrdma_scsi::pr::PrState::from_aptpl_text`). The body
//! lives in `softrdma_scsi::fuzzing::pr_state`, shared with the corpus replay test
//! (`crates/softrdma-scsi/tests/fuzz_corpus.rs`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma_scsi::fuzzing::pr_state(data);
});
