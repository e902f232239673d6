//! Runs the built `softrdma decode` on fixture captures.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn capture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/captures")
        .join(name)
}

/// Runs `softrdma ARGS` with `input` on its standard input.
fn run_stdin(args: &[&str], input: &[u8]) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = c.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = common::wait_output(c);
    feeder.join().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Every fixture capture.
fn fixtures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(capture(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    v.sort();
    assert!(v.len() >= 10, "{v:?}");
    v
}

/// `decode --json FILE`, one parsed value per line.
fn json_lines(f: &std::path::Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["decode", "--json"];
    args.extend_from_slice(extra);
    args.push(f.to_str().unwrap());
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: line {}: {e}\n{l}", f.display(), i + 1))
        })
        .collect()
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

#[test]
fn json_every_line_of_every_fixture_parses() {
    for f in fixtures() {
        let lines = json_lines(&f, &[]);
        // One object per frame, in order.
        let (_, text, _) = run(&["decode", f.to_str().unwrap()]);
        assert_eq!(
            lines.len(),
            text.lines().filter(|l| l.starts_with("Frame ")).count(),
            "{}",
            f.display()
        );
        for (i, v) in lines.iter().enumerate() {
            assert!(v.is_object(), "{}: {v}", f.display());
            assert_eq!(v["frame"]["number"], i as u64 + 1, "{}", f.display());
        }
    }
}

#[test]
fn json_u64_round_trips_exactly() {
    // h_req_single.pcap's REQ: Local CA GUID 0x505400fffe77000a = 5788252520563802122, far
    // above 2^53, which a JSON number would lose (jq prints 5788252520563802000).
    let v = &json_lines(&capture("h_req_single.pcap"), &["-c", "1"])[0];
    let req = &v["infiniband"]["cm_req"];
    let guid = req["local_ca_guid"].as_str().unwrap();
    assert_eq!(guid, "0x505400fffe77000a");
    let n = u64::from_str_radix(guid.trim_start_matches("0x"), 16).unwrap();
    assert_eq!(n, 5_788_252_520_563_802_122);
    assert!(n > 1 << 53);
    // The parser's own f64 view would have rounded it: this is what the string form avoids.
    assert_ne!(n as f64 as u64, n);
    assert_eq!(req["service_id"], "0x000000000106_1d2f".replace('_', ""));
    assert_eq!(v["infiniband"]["mad"]["tid"], "0x00000002f04d670d");
    // Narrow fields stay numbers.
    assert_eq!(v["infiniband"]["bth"]["dest_qp"], 1);
    assert_eq!(v["infiniband"]["deth"]["q_key"], 0x8001_0000u64);
    // Every 64-bit field in every fixture is such a string: atomics, RETH VAs, SRP tags...
    let mut seen = std::collections::BTreeSet::new();
    for f in fixtures() {
        for line in json_lines(&f, &["--only-roce"]) {
            collect_hex64(&line, &mut seen);
        }
    }
    for key in [
        "local_ca_guid",
        "service_id",
        "tid",
        "va",
        "compare",
        "swap_add",
        "tag",
        "lun",
    ] {
        assert!(seen.contains(key), "no {key} in {seen:?}");
    }
}

/// Keys whose values are `"0x"` + 16 hex digits.
fn collect_hex64(v: &serde_json::Value, seen: &mut std::collections::BTreeSet<String>) {
    if let Some(m) = v.as_object() {
        for (k, x) in m {
            match x.as_str() {
                Some(s) if s.len() == 18 && s.starts_with("0x") => {
                    assert!(s[2..].bytes().all(|b| b.is_ascii_hexdigit()), "{k}: {s}");
                    seen.insert(k.clone());
                }
                _ => collect_hex64(x, seen),
            }
        }
    } else if let Some(a) = v.as_array() {
        for x in a {
            collect_hex64(x, seen);
        }
    }
}

#[test]
fn json_addresses_in_text_form() {
    let v = &json_lines(&capture("h_req_single.pcap"), &["-c", "1"])[0];
    assert_eq!(v["eth"]["src"]["addr"], "52:54:00:77:00:0a");
    assert_eq!(v["eth"]["dst"]["addr"], "7a:7a:ca:71:38:a4");
    assert_eq!(v["ip"]["src"], "10.77.0.10");
    assert_eq!(v["ip"]["dst"], "10.77.0.1");
    let req = &v["infiniband"]["cm_req"];
    assert_eq!(req["primary_local_gid"], "::ffff:10.77.0.10");
    assert_eq!(req["primary_remote_gid"], "::ffff:10.77.0.1");
    assert_eq!(req["ip_cm"]["src_ip"], "10.77.0.10");
    assert_eq!(v["infiniband"]["icrc_status"], true);
    // IPv6, and Linux cooked captures' MACs.
    let v = &json_lines(&capture("ipv6_rping.pcap"), &["--only-roce", "-c", "1"])[0];
    let src = v["ipv6"]["src"]
        .as_str()
        .or(v["ip"]["src"].as_str())
        .unwrap();
    assert!(src.parse::<std::net::Ipv6Addr>().is_ok(), "{v}");
    let v = &json_lines(&capture("i_mra_atomic.sll.pcap"), &["-c", "1"])[0];
    assert_eq!(v["sll"]["src"], "52:54:00:77:00:0b");
    // h_host_rx.pcap's IP headers were rebuilt after the fact: its ICRCs do not verify.
    let v = &json_lines(&capture("h_host_rx.pcap"), &["--only-roce", "-c", "1"])[0];
    assert_eq!(v["infiniband"]["icrc_status"], false);
}

#[test]
fn stdin_is_read_with_a_dash() {
    for name in ["h_req_single.pcap", "d_reject.pcapng"] {
        let f = capture(name);
        let bytes = std::fs::read(&f).unwrap();
        let (code, from_file, _) = run(&["decode", f.to_str().unwrap()]);
        assert_eq!(code, 0);
        let (code, from_stdin, err) = run_stdin(&["decode", "-"], &bytes);
        assert_eq!(code, 0, "{err}");
        assert_eq!(from_stdin, from_file);
        let (code, json, err) = run_stdin(&["decode", "--json", "-c", "2", "-"], &bytes);
        assert_eq!(code, 0, "{err}");
        assert!(json.lines().count() <= 2 && json.starts_with("{\"frame\":"));
    }
    let (code, _, err) = run_stdin(&["decode", "-"], b"");
    assert_eq!(code, 1);
    assert!(err.contains("standard input: empty"), "{err}");
}

#[test]
fn stdin_streams_packets_as_they_come() {
    // Like `tcpdump -U -w - | softrdma decode -`: the first frame is shown while the pipe is
    // still open, before the rest of the file arrives.
    let bytes = std::fs::read(capture("b_rping.pcap")).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args(["decode", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = c.stdin.take().unwrap();
    // The file header and the first record (24 + 16 + its captured length), then nothing.
    let caplen = u32::from_le_bytes(bytes[32..36].try_into().unwrap()) as usize;
    stdin.write_all(&bytes[..40 + caplen]).unwrap();
    stdin.flush().unwrap();
    let mut stdout = c.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        let start = Instant::now();
        while !String::from_utf8_lossy(&got).contains("\n\n") {
            let n = stdout.read(&mut b).unwrap();
            if n == 0 || start.elapsed() > Duration::from_secs(20) {
                break;
            }
            got.extend_from_slice(&b[..n]);
        }
        (String::from_utf8(got).unwrap(), stdout)
    });
    let (first, mut stdout) = reader.join().unwrap();
    assert!(first.starts_with("Frame 1:"), "{first}");
    assert!(!first.contains("Frame 2:"), "{first}");
    stdin.write_all(&bytes[40 + caplen..]).unwrap();
    drop(stdin);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert!(c.wait().unwrap().success());
    assert!(rest.contains("Frame 2:"), "{rest}");
}

#[test]
fn refusals_are_one_line_saying_what_to_do() {
    let dir = std::env::temp_dir().join(format!("softrdma-refusals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let short = dir.join("short.pcap");
    std::fs::write(&short, b"\xd4\xc3").unwrap();
    let text = dir.join("decode.txt");
    std::fs::write(&text, b"Frame 1: 322 bytes on wire\n").unwrap();
    let good = capture("h_req_single.pcap");
    let good = good.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["decode", "/nonexistent/x.pcap"],
            "no such file; give the path",
        ),
        (
            vec!["decode", env!("CARGO_MANIFEST_DIR")],
            "is a directory; give the path",
        ),
        (
            vec!["decode", empty.to_str().unwrap()],
            "empty, not a capture; write captures with",
        ),
        (
            vec!["decode", short.to_str().unwrap()],
            "not a pcap or pcapng capture file (only 2 bytes)",
        ),
        (
            vec!["decode", text.to_str().unwrap()],
            "not a pcap or pcapng capture file (first 4 bytes",
        ),
        (
            vec!["decode", "-c", "0", good],
            "-c 0: the count must be at least 1; leave -c out",
        ),
        (
            vec!["decode", "-c", "abc", good],
            "-c abc: not a number of frames; give a whole number",
        ),
        (
            vec!["decode", "-c", "-3", good],
            "-c -3: not a number of frames",
        ),
        (
            vec!["decode", "--json", "-c", "0", good],
            "-c 0: the count must be at least 1",
        ),
    ];
    for (args, want) in cases {
        let (code, out, err) = run(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(err.starts_with("softrdma decode: "), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        for debug in [
            "Some(", "None", "Error {", "Os {", "kind:", "os error", "\\\"",
        ] {
            assert!(!err.contains(debug), "{args:?}: Debug format in {err}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_describes_json_lines_and_stdin() {
    let (code, help, _) = run(&["decode", "--help"]);
    assert_eq!(code, 0);
    for want in [
        "JSON Lines",
        "\"0x%016x\"",
        "icrc_status",
        "`-` to read it from standard input",
    ] {
        assert!(help.contains(want), "{want:?} missing in\n{help}");
    }
}

#[test]
fn damaged_frames_are_described_not_debug_printed() {
    // Every 23rd byte past the link header of every frame flipped: layers fail to parse
    // and show as "[Malformed: <what>]", in words, in the text and JSON views alike.
    let dir = std::env::temp_dir().join(format!("softrdma-damaged-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["f_srp.pcap", "i_mra_atomic.sll.pcap"] {
        let mut d = std::fs::read(capture(name)).unwrap();
        let mut off = 24;
        while off + 16 <= d.len() {
            let cap = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
            for i in (off + 16 + 16..off + 16 + cap).step_by(23) {
                d[i] ^= 0x5a;
            }
            off += 16 + cap;
        }
        let f = dir.join(name);
        std::fs::write(&f, &d).unwrap();
        let (code, text, err) = run(&["decode", f.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        assert!(text.contains("[Malformed: "), "{name}: nothing malformed");
        let (code, json, err) = run(&["decode", "--json", f.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        for l in json.lines() {
            serde_json::from_str::<serde_json::Value>(l).unwrap();
        }
        for out in [&text, &json] {
            for debug in ["Some(", "{ what:", "{ field:", "Gid(", "Guid(", "Opcode(0x"] {
                assert!(!out.contains(debug), "{name}: Debug format {debug:?}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
