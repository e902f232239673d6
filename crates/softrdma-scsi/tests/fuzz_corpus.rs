//! Replays the committed corpus of the `scsi_target` fuzz target
//! (`fuzz/corpus/scsi_target/*`) through the body cargo-fuzz runs
//! (`softrdma_scsi::fuzzing::target`), so plain `cargo test` on stable keeps every corpus
//! input passing. The seeds (`fuzzing::seeds`) run too; `FUZZ_SEED_CORPUS=1` (re)writes them
//! into the corpus as `seed-<name>`.

use std::path::PathBuf;

use softrdma_scsi::fuzzing::{pr_state, pr_state_seeds, seeds, target};

#[test]
fn replay_scsi_target_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/scsi_target");
    let seeds = seeds();
    assert!(seeds.len() >= 6, "{}", seeds.len());
    for (name, input) in &seeds {
        target(input);
        if std::env::var_os("FUZZ_SEED_CORPUS").is_some() {
            std::fs::create_dir_all(&dir).expect("corpus dir");
            std::fs::write(dir.join(format!("seed-{name}")), input).expect("write seed");
        }
    }
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "no corpus for fuzz target scsi_target in {}: {e}",
            dir.display()
        )
    });
    let mut files = 0;
    for e in entries {
        let path = e.expect("corpus entry").path();
        target(&std::fs::read(&path).expect("corpus file"));
        files += 1;
    }
    assert!(files >= seeds.len(), "{files}");
}

/// Random inputs: never a panic.
#[test]
fn random_inputs() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    };
    for round in 0..400 {
        let len = 1 + round % 300;
        let mut v: Vec<u8> = (0..len).map(|_| rnd()).collect();
        // Steer the CDB lengths and opcodes towards the ones we implement.
        let ops = [
            0x00u8, 0x03, 0x08, 0x0a, 0x12, 0x15, 0x1a, 0x1b, 0x25, 0x28, 0x2a, 0x2e, 0x2f, 0x35,
            0x55, 0x5a, 0x88, 0x8a, 0x8e, 0x8f, 0x91, 0x9e, 0xa0, 0xa8, 0xaa, 0x16, 0x17, 0x41,
            0x42, 0x56, 0x57, 0x5e, 0x5f, 0x89, 0x93,
        ];
        let mut i = 1;
        while i + 4 < v.len() {
            let cl = usize::from(v[i + 3] % 17);
            v[i + 3] = cl as u8;
            v[i + 4] = ops[usize::from(v[i + 4]) % ops.len()];
            i += 4 + cl;
        }
        target(&v);
    }
}

/// The `pr_state` target's corpus (`fuzz/corpus/pr_state/*`) and seeds, as above.
#[test]
fn replay_pr_state_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/pr_state");
    let seeds = pr_state_seeds();
    for (name, input) in &seeds {
        pr_state(input);
        if std::env::var_os("FUZZ_SEED_CORPUS").is_some() {
            std::fs::create_dir_all(&dir).expect("corpus dir");
            std::fs::write(dir.join(format!("seed-{name}")), input).expect("write seed");
        }
    }
    let mut files = 0;
    for e in std::fs::read_dir(&dir).expect("corpus of pr_state") {
        pr_state(&std::fs::read(e.expect("entry").path()).expect("corpus file"));
        files += 1;
    }
    assert!(files >= seeds.len(), "{files}");
    // Mutations of the seeds: never a panic.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for (_, s) in &seeds {
        for _ in 0..200 {
            let mut v = s.clone();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if !v.is_empty() {
                let i = (x as usize) % v.len();
                v[i] = (x >> 32) as u8;
            }
            pr_state(&v);
        }
    }
}
