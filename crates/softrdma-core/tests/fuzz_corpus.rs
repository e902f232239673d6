//! Replays the committed corpus of the `stack` fuzz target (`fuzz/corpus/stack/*`) through the
//! body cargo-fuzz runs (`softrdma_core::fuzzing::stack`), so plain `cargo test` on stable keeps
//! every corpus input passing. The seeds (`fuzzing::seeds`) run too; `FUZZ_SEED_CORPUS=1`
//! (re)writes them into the corpus as `seed-<name>`.

use std::path::PathBuf;

use softrdma_core::fuzzing::{run, seeds, stack};

#[test]
fn replay_stack_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/stack");
    let seeds = seeds();
    assert!(seeds.len() >= 10, "{}", seeds.len());
    for (name, input) in &seeds {
        // Every seed is a valid conversation: accepted whole, nothing dropped.
        let c = run(input).expect("counters");
        assert_eq!(c.total_drops(), 0, "seed {name}: {c:?}");
        assert!(c.rcvd_pkts >= 1, "seed {name}: {c:?}");
        if std::env::var_os("FUZZ_SEED_CORPUS").is_some() {
            std::fs::create_dir_all(&dir).expect("corpus dir");
            std::fs::write(dir.join(format!("seed-{name}")), input).expect("write seed");
        }
    }
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("no corpus for fuzz target stack in {}: {e}", dir.display()));
    let mut files = 0;
    for e in entries {
        let path = e.expect("corpus entry").path();
        stack(&std::fs::read(&path).expect("corpus file"));
        files += 1;
    }
    assert!(files >= seeds.len(), "{files}");
}

/// The `cm_ops` target: its seeds (each a valid program that leaves nothing behind), then
/// every committed corpus input.
#[test]
fn replay_cm_ops_corpus() {
    use softrdma_core::fuzzing::cm_ops;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/cm_ops");
    let seeds = cm_ops::seeds();
    for (name, input) in &seeds {
        cm_ops::cm_ops(input);
        if std::env::var_os("FUZZ_SEED_CORPUS").is_some() {
            std::fs::create_dir_all(&dir).expect("corpus dir");
            std::fs::write(dir.join(format!("seed-{name}")), input).expect("write seed");
        }
    }
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("no corpus for fuzz target cm_ops in {}: {e}", dir.display()));
    let mut files = 0;
    for e in entries {
        let path = e.expect("corpus entry").path();
        cm_ops::cm_ops(&std::fs::read(&path).expect("corpus file"));
        files += 1;
    }
    assert!(files >= seeds.len(), "{files}");
}
