#![no_main]
//! Fuzz target `scsi_target`: CDBs, data directions, expected lengths and task management
//! functions into a `softrdma_scsi::Target` with a writable and a read-only LUN and two
//! nexuses. The body and the input format live in `softrdma_scsi::fuzzing`, shared with the
//! corpus replay test that runs on stable (`crates/softrdma-scsi/tests/fuzz_corpus.rs`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softrdma_scsi::fuzzing::target(data);
});
