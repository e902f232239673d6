//! What a newcomer meets first: the prerequisites the README states, docs that stand alone in a
//! clone, and a `--help` that advertises only what exists.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn msrv_check_passes() {
    // The README's "Rust ≥ X" equals the workspace rust-version, and no locked dependency
    // declares a higher one (scripts/check-msrv.sh, also run by .ci/run).
    let out = Command::new("bash")
        .arg(repo().join("scripts/check-msrv.sh"))
        .env("CARGO", env!("CARGO"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(readme.contains("cargo install --path crates/softrdma"));
}
