//! Replays every committed fuzz corpus file (`fuzz/corpus/<target>/*`) through the same body
//! the cargo-fuzz target runs, so plain `cargo test` on stable keeps the corpus passing.

use softrdma_wire::fuzzing::{run, TARGETS};
use std::path::PathBuf;

#[test]
fn replay_corpus() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut files = 0;
    for target in TARGETS {
        let dir = root.join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            panic!("no corpus for fuzz target {target} in {}", dir.display());
        };
        for e in entries {
            let path = e.expect("corpus entry").path();
            let data = std::fs::read(&path).expect("corpus file");
            run(target, &data);
            files += 1;
        }
    }
    assert!(files > 50, "{files}");
}
