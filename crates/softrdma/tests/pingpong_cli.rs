//! `softrdma pingpong rc|ud`: server and client both ours, as two processes on loopback
//! (each test on its own pair of 127.0.x.y device addresses and its own TCP port, so tests run
//! in parallel), with `-c` validation, and a pcap tap whose every ICRC verifies.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use softrdma_wire::link::LinkType;
use softrdma_wire::{frame, pcap};

use common::{finish_run as finish, listening, Proc, Run, BIN};

fn spawn(args: &[String]) -> Proc {
    Proc::spawn(Command::new(BIN).arg("pingpong").args(args))
}

/// Runs a server on 127.0.`net`.1 and a client on 127.0.`net`.2; returns (server, client).
fn pair(kind: &str, net: u8, server_extra: &[&str], client_extra: &[&str]) -> (Run, Run) {
    // The side channel's TCP port: free, and not one a connect() elsewhere can take.
    let port = common::tool_port();
    let s_ip = format!("127.0.{net}.1");
    let c_ip = format!("127.0.{net}.2");
    let args_for = |ip: &str| -> Vec<String> {
        vec![
            kind.into(),
            "-d".into(),
            ip.into(),
            "-p".into(),
            port.to_string(),
            "--timeout".into(),
            "20".into(),
        ]
    };
    let mut sa = args_for(&s_ip);
    sa.extend(server_extra.iter().map(|s| s.to_string()));
    let mut server = spawn(&sa);
    let t = Instant::now();
    while !listening(port) {
        // A server that ended (its device address held by another process, say) or is stuck
        // is reported with what it printed.
        if server.exited() || t.elapsed() > Duration::from_secs(60) {
            let r = common::finish(server, Duration::ZERO);
            panic!("the server never listened on {port}: {r:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut ca = args_for(&c_ip);
    ca.extend(client_extra.iter().map(|s| s.to_string()));
    ca.push(s_ip.clone());
    let client = spawn(&ca);
    let c = finish(client, Duration::from_secs(60));
    let s = finish(server, Duration::from_secs(60));
    (s, c)
}

fn assert_ok(kind: &str, size: u32, iters: u32, net: u8, s: &Run, c: &Run) {
    for (who, r, me, peer) in [("server", s, 1, 2), ("client", c, 2, 1)] {
        assert_eq!(
            r.code, 0,
            "{kind} {size} {who}: stdout:\n{}\nstderr:\n{}",
            r.out, r.err
        );
        let sep = if kind == "rc" { "," } else { ":" };
        let local = r.out.lines().next().unwrap_or("");
        assert!(
            local.starts_with("  local address:  LID 0x0000, QPN 0x")
                && local.ends_with(&format!("{sep} GID ::ffff:127.0.{net}.{me}")),
            "{local}"
        );
        let remote = r.out.lines().nth(1).unwrap_or("");
        assert!(
            remote.starts_with("  remote address: LID 0x0000, QPN 0x")
                && remote.ends_with(&format!(", GID ::ffff:127.0.{net}.{peer}")),
            "{remote}"
        );
        let bytes = u64::from(size) * u64::from(iters) * 2;
        assert!(
            r.out.contains(&format!("{bytes} bytes in ")),
            "{who}: {}",
            r.out
        );
        assert!(r.out.contains(&format!("{iters} iters in ")), "{}", r.out);
        assert!(!r.out.contains("invalid data"), "{}", r.out);
    }
}

#[test]
fn rc_sizes_busy_poll_with_chk() {
    // 65536 > the 1024 path MTU: 64 packets per message.
    for size in [8u32, 4096, 65536] {
        let n = 30;
        let args = [
            "-g",
            "1",
            "-c",
            "-s",
            &size.to_string(),
            "-n",
            &n.to_string(),
        ];
        let (s, c) = pair("rc", 41, &args, &args);
        assert_ok("rc", size, n, 41, &s, &c);
    }
}

#[test]
fn rc_events_and_mtu_4096() {
    let args = [
        "-g", "1", "-c", "-e", "-s", "10000", "-n", "30", "-m", "4096",
    ];
    let (s, c) = pair("rc", 42, &args, &args);
    assert_ok("rc", 10000, 30, 42, &s, &c);
    // Mixed: busy-polling server, sleeping client.
    let sa = ["-g", "1", "-c", "-s", "4096", "-n", "30"];
    let ca = ["-g", "1", "-c", "-e", "-s", "4096", "-n", "30"];
    let (s, c) = pair("rc", 42, &sa, &ca);
    assert_ok("rc", 4096, 30, 42, &s, &c);
}

#[test]
fn ud_sizes_with_chk() {
    // Up to the port MTU (1024) minus the 40-byte GRH area.
    for size in [8u32, 512, 984] {
        let args = ["-g", "1", "-c", "-s", &size.to_string(), "-n", "30"];
        let (s, c) = pair("ud", 43, &args, &args);
        assert_ok("ud", size, 30, 43, &s, &c);
    }
}

#[test]
fn ud_size_above_port_mtu_is_refused() {
    let out = Command::new(BIN)
        .args([
            "pingpong",
            "ud",
            "-d",
            "127.0.44.1",
            "-s",
            "2048",
            "-p",
            "19140",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Requested size larger than port MTU (1024)"),
        "{err}"
    );
}

#[test]
fn gid_index_0_is_refused_and_bad_device_named() {
    let out = Command::new(BIN)
        .args([
            "pingpong",
            "rc",
            "-d",
            "127.0.44.2",
            "-g",
            "0",
            "-p",
            "19141",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("use -g 1"), "{err}");
    let out = Command::new(BIN)
        .args(["pingpong", "rc", "-d", "rxe0", "-p", "19142"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("IB device rxe0 not found"));
}

#[test]
fn chk_catches_a_client_that_does_not_fill_the_pattern() {
    // The client without -c sends the plain 0x7b fill: the server's -c sees page 0 wrong, as
    // ibv_rc_pingpong's server would, and (our addition) exits 1.
    let (s, c) = pair(
        "rc",
        45,
        &["-g", "1", "-c", "-s", "8192", "-n", "5"],
        &["-g", "1", "-s", "8192", "-n", "5"],
    );
    assert_eq!(c.code, 0, "{}", c.err);
    assert_eq!(s.code, 1, "{}", s.out);
    assert!(s.out.contains("invalid data in page 0"), "{}", s.out);
    assert!(s.out.contains("invalid data in page 1"), "{}", s.out);
}

#[test]
fn pcap_of_a_pingpong_decodes_and_every_icrc_verifies() {
    let dir = std::env::temp_dir().join(format!("softrdma-pp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ps = dir.join("server.pcap");
    let pc = dir.join("client.pcap");
    let (s, c) = pair(
        "rc",
        46,
        &[
            "-g",
            "1",
            "-s",
            "5000",
            "-n",
            "10",
            "--pcap",
            ps.to_str().unwrap(),
        ],
        &[
            "-g",
            "1",
            "-s",
            "5000",
            "-n",
            "10",
            "--pcap",
            pc.to_str().unwrap(),
        ],
    );
    assert_ok("rc", 5000, 10, 46, &s, &c);
    for p in [&ps, &pc] {
        let bytes = std::fs::read(p).unwrap();
        let (recs, err) = pcap::read_all(&bytes).unwrap();
        assert!(err.is_none());
        // 10 messages each way of 5 packets, plus ACKs.
        assert!(recs.len() >= 100, "{} frames", recs.len());
        for r in &recs {
            let (_, info) = frame::dissect_frame(LinkType::ETHERNET, r.data);
            assert!(info.malformed.is_empty(), "{:?}", info.malformed);
            assert_eq!(info.icrc_ok, Some(true), "{}", info.info);
        }
        // `softrdma decode` reads it too.
        let out = Command::new(BIN).arg("decode").arg(p).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("SEND First"),
            "{}",
            &text[..text.len().min(2000)]
        );
    }
    let (s, c) = pair(
        "ud",
        46,
        &[
            "-g",
            "1",
            "-s",
            "984",
            "-n",
            "10",
            "--pcap",
            ps.to_str().unwrap(),
        ],
        &["-g", "1", "-s", "984", "-n", "10"],
    );
    assert_ok("ud", 984, 10, 46, &s, &c);
    let bytes = std::fs::read(&ps).unwrap();
    let (recs, _) = pcap::read_all(&bytes).unwrap();
    assert_eq!(recs.len(), 20);
    for r in &recs {
        let (_, info) = frame::dissect_frame(LinkType::ETHERNET, r.data);
        assert_eq!(info.icrc_ok, Some(true), "{}", info.info);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `pingpong ARGS` is refused at once, before a device is opened or anything printed on stdout,
/// with `want` on the first line of stderr.
fn refused(args: &[&str], want: &str) {
    let t = Instant::now();
    let out = Command::new(BIN)
        .arg("pingpong")
        .args(args)
        .output()
        .unwrap();
    let (o, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_ne!(out.status.code(), Some(0), "{args:?} accepted: {o}");
    assert!(o.is_empty(), "{args:?} started work: {o}");
    let first = err.lines().next().unwrap_or("");
    assert!(first.contains(want), "{args:?}: {err}");
    assert!(
        !err.contains('{') && !err.contains("Some("),
        "{args:?}: Debug output: {err}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{args:?} was slow to refuse"
    );
}

#[test]
fn every_argument_is_range_checked_before_any_work() {
    // Server mode on a free address: anything accepted would open a device and listen.
    let d = ["-d", "127.0.46.1", "-p", "19150"];
    let cases: &[(&[&str], &str)] = &[
        (&["rc", "-p", "0"], "0 is not in 1..=65535"),
        (&["rc", "-p", "65536"], "65536 is not in 1..=65535"),
        (&["rc", "-i", "2"], "2 is not in 1..=1"),
        (&["rc", "-i", "0"], "0 is not in 1..=1"),
        (&["rc", "-s", "0"], "0 is not in 1..=8388608"),
        (
            &["rc", "-s", "10737418240"],
            "10737418240 is not in 1..=8388608",
        ),
        (
            &["rc", "-m", "1500"],
            "1500 is not one of 256, 512, 1024, 2048, 4096",
        ),
        (&["rc", "-r", "0"], "0 is not in 1..=16384"),
        (&["rc", "-r", "16385"], "16385 is not in 1..=16384"),
        (&["rc", "-n", "0"], "0 is not in 1..=4294967295"),
        (
            &["rc", "-n", "many"],
            "many is not a number in 1..=4294967295",
        ),
        (&["rc", "-l", "16"], "16 is not in 0..=15"),
        (&["rc", "-g", "1024"], "1024 is not a GID index in 0..=1023"),
        (
            &["rc", "--timeout", "99999999999"],
            "99999999999 is not in 0..=31536000",
        ),
        (
            &["ud", "-s", "1025"],
            "Requested size larger than port MTU (1024): -s must be 1..=1024",
        ),
        (
            &["ud", "-m", "1024"],
            "-m/--mtu is an ibv_rc_pingpong option",
        ),
    ];
    for (args, want) in cases {
        let all: Vec<&str> = args.iter().copied().chain(d).collect();
        refused(&all, want);
    }
}
