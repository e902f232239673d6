//! What a newcomer meets first: the prerequisites the README states, docs that stand alone in a
//! clone, and a `--help` that advertises only what exists.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
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
    assert!(readme.contains("Rust ≥"));
}

/// Issue 24, item 14: the README installs with `--locked`, the versions of Cargo.lock that
/// the Rust-version promise is checked against (a plain `cargo install` resolves anew and
/// may need a newer Rust).
#[test]
fn item14_readme_installs_with_locked() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(
        readme.contains("cargo install --locked --path crates/softrdma"),
        "the README's install line lacks --locked"
    );
    assert!(!readme.contains("cargo install --path crates/softrdma"));
}

/// Issue 24, item 10: the README's first Rust snippet ("Connections from Rust") is the code
/// of `examples/conn_first.rs`, which `crates/softrdma-driver/tests/conn.rs` runs: a server
/// thread and a client, so it does not stall when pasted as written.
#[test]
fn item10_readme_conn_snippet_is_the_example_that_runs() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let section = readme
        .split("## Connections from Rust")
        .nth(1)
        .expect("the README's Connections from Rust section");
    let snippet = section
        .split("```rust\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("a rust snippet in that section");
    let example =
        std::fs::read_to_string(repo().join("crates/softrdma-driver/examples/conn_first.rs"))
            .expect("crates/softrdma-driver/examples/conn_first.rs");
    let tests =
        std::fs::read_to_string(repo().join("crates/softrdma-driver/tests/conn.rs")).unwrap();
    assert!(
        tests.contains("\"../examples/conn_first.rs\"") && tests.contains("conn_first::run("),
        "tests/conn.rs does not run examples/conn_first.rs"
    );
    let code: Vec<&str> = example.lines().map(str::trim).collect();
    for line in snippet.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        assert!(
            code.contains(&line),
            "README line not in examples/conn_first.rs: {line}"
        );
    }
    // Both sides: a thread for the server, so connect finds someone accepting.
    assert!(snippet.contains("thread::spawn") && snippet.contains("listener.accept()"));
}

/// Every text file of the repository (not `target/`, `.git/`, nor binary files).
fn repo_files() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let name = e.file_name();
            if name == "target" || name == ".git" {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                walk(&p, out);
            } else if let Ok(s) = std::fs::read_to_string(&p) {
                out.push((p, s));
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo(), &mut out);
    out
}

#[test]
fn docs_stand_alone() {
    // Pieces joined at run time so this file does not match itself.
    let needles = [
        ["DESIGN", ".md"].concat(),
        ["DESIGN", " §"].concat(),
        ["anchors", ".md"].concat(),
        ["shared", "/"].concat(),
    ];
    let root = repo();
    let me = root.join(file!());
    let mut bad = Vec::new();
    let mut missing = Vec::new();
    for (p, s) in repo_files() {
        for (i, line) in s.lines().enumerate() {
            if needles.iter().any(|n| line.contains(n.as_str())) {
                bad.push(format!("{}:{}: {line}", p.display(), i + 1));
            }
            // Every `docs/NAME.md` a file names exists, from the repository root or from
            // the crate the file is in (`crates/softrdma-core/docs/memory.md`).
            let crate_dir = p
                .ancestors()
                .skip(1)
                .find(|d| d.join("Cargo.toml").is_file())
                .unwrap_or(&root)
                .to_path_buf();
            for tok in line.split(|c: char| !(c.is_ascii_alphanumeric() || "/-_.".contains(c))) {
                let tok = tok.trim_end_matches('.');
                if tok.contains("docs/")
                    && tok.ends_with(".md")
                    && p != me
                    && !root.join(tok).is_file()
                    && !crate_dir.join(tok).is_file()
                {
                    missing.push(format!("{}:{}: {tok}", p.display(), i + 1));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "references outside the repo:\n{}",
        bad.join("\n")
    );
    assert!(missing.is_empty(), "missing docs:\n{}", missing.join("\n"));
}

#[test]
fn help_advertises_only_what_exists() {
    let out = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for cmd in ["demo", "decode", "pingpong", "rping", "perf", "srpt", "srp"] {
        assert!(
            help.contains(&format!("  {cmd} ")),
            "{cmd} missing in {help}"
        );
        let sub = Command::new(env!("CARGO_BIN_EXE_softrdma"))
            .args([cmd, "--help"])
            .output()
            .unwrap();
        assert!(sub.status.success(), "{cmd} --help");
    }
}
