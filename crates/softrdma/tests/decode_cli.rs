//! Runs the built `softrdma decode` on fixture captures.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::PathBuf;
use std::process::Command;

fn capture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/captures")
        .join(name)
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn decode_text() {
    let f = capture("h_req_single.pcap");
    let (code, out, err) = run(&["decode", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "Frame 1: 322 bytes on wire (2576 bits), 322 bytes captured (2576 bits)"
    );
    for want in [
        "    Arrival Time: Nov 30, 2026 13:26:18.574630000 UTC",
        "Ethernet II, Src: 52:54:00:77:00:0a, Dst: 7a:7a:ca:71:38:a4",
        "Internet Protocol Version 4, Src: 10.77.0.10, Dst: 10.77.0.1",
        "    Identification: 0xfcb6 (64694)",
        "User Datagram Protocol, Src Port: 55410, Dst Port: 4791",
        "InfiniBand",
    ] {
        assert!(lines.contains(&want), "missing {want:?} in\n{out}");
    }
}

#[test]
fn decode_json_sll_and_pcapng() {
    let f = capture("i_mra_atomic.sll.pcap");
    let (code, out, _) = run(&[
        "decode",
        "--json",
        "-c",
        "5",
        "--only-roce",
        f.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5);
    for l in &lines {
        assert!(l.starts_with("{\"frame\":{"), "{l}");
        assert!(l.contains("\"sll\":{\"pkttype\":"), "{l}");
        assert!(l.contains("\"infiniband\":{"), "{l}");
    }
    let f = capture("d_reject.pcapng");
    let (code, out, _) = run(&["decode", f.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(out.matches("\nFrame ").count() + 1, 6);
}

#[test]
fn errors_say_what_to_do() {
    let (code, _, err) = run(&["decode", "/nonexistent/x.pcap"]);
    assert_eq!(code, 1);
    assert!(err.contains("no such file"), "{err}");
    let (code, _, err) = run(&["decode", env!("CARGO_MANIFEST_DIR")]);
    assert_eq!(code, 1, "{err}");
    let toml = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let (code, _, err) = run(&["decode", toml.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("not a pcap or pcapng capture file"), "{err}");
    // A truncated file: the frames before the cut, then an error and a non-zero exit.
    let full = std::fs::read(capture("d_reject.pcapng")).unwrap();
    let dir = std::env::temp_dir().join(format!("softrdma-decode-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cut = dir.join("cut.pcapng");
    std::fs::write(&cut, &full[..1000]).unwrap();
    let (code, out, err) = run(&["decode", cut.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(out.starts_with("Frame 1:"));
    assert!(err.contains("cut short"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
