//! `softrdma rping` (and the RDMA CM tools ucmatose and cmtime where they share its rules) as
//! a newcomer runs them: server and client as two processes on loopback. Each test has its
//! own port and its own 127.0.13x.y addresses, so tests run in parallel; the tests that need
//! 127.0.0.1 or ::1 (the routed source of a loopback server) take a lock, and are skipped
//! with a note when another process on the machine holds those addresses.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_softrdma");

/// The tests that open devices on 127.0.0.1 / ::1 (one at a time).
static LOOPBACK: Mutex<()> = Mutex::new(());

/// A running tool whose output is collected as it comes.
struct Proc {
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

fn collect(r: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut line = String::new();
        while r.read_line(&mut line).unwrap_or(0) > 0 {
            into.lock().unwrap().push_str(&line);
            line.clear();
        }
    })
}

fn spawn(tool: &str, args: &[&str]) -> Proc {
    let mut child = Command::new(BIN)
        .arg(tool)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = Arc::new(Mutex::new(String::new()));
    let err = Arc::new(Mutex::new(String::new()));
    let readers = vec![
        collect(child.stdout.take().unwrap(), out.clone()),
        collect(child.stderr.take().unwrap(), err.clone()),
    ];
    Proc {
        child,
        out,
        err,
        readers,
    }
}

struct Done {
    status: ExitStatus,
    out: String,
    err: String,
}

impl Done {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

impl Proc {
    fn out(&self) -> String {
        self.out.lock().unwrap().clone()
    }
    fn err(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Waits until stdout or stderr shows `needle` (false after `limit`, or if the process
    /// ended first without it).
    fn wait_for(&mut self, needle: &str, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if self.out().contains(needle) || self.err().contains(needle) {
                return true;
            }
            if self.child.try_wait().unwrap().is_some() {
                std::thread::sleep(Duration::from_millis(50));
                return self.out().contains(needle) || self.err().contains(needle);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// Whether the process is still running after `d`.
    fn alive_after(&mut self, d: Duration) -> bool {
        std::thread::sleep(d);
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits for the exit (killing the process and failing after `limit`).
    fn finish(mut self, limit: Duration) -> Done {
        let end = Instant::now() + limit;
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "did not exit within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                    self.out(),
                    self.err()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        Done {
            status,
            out: self.out(),
            err: self.err(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs a tool to its end.
fn run(tool: &str, args: &[&str], limit: Duration) -> Done {
    spawn(tool, args).finish(limit)
}

/// Starts an rping server and waits until it listens (its device is open: a client's REQ
/// finds it). `None` when the address is held by another process (the test is skipped).
fn server(args: &[&str]) -> Option<Proc> {
    let mut all = vec!["-s"];
    all.extend_from_slice(args);
    let mut p = spawn("rping", &all);
    // The device opens in well under a second; a held address fails at once.
    if !p.alive_after(Duration::from_millis(400)) {
        let d = p.finish(Duration::from_secs(1));
        assert!(
            d.err.contains("another process already holds"),
            "rping server {args:?} failed: {}",
            d.err
        );
        eprintln!("skipped: {}", d.err.trim());
        return None;
    }
    Some(p)
}

fn count(s: &str, prefix: &str) -> usize {
    s.lines().filter(|l| l.starts_with(prefix)).count()
}

const LIMIT: Duration = Duration::from_secs(20);

#[test]
fn rping_pair_on_one_host_takes_the_next_free_loopback_source() {
    let _g = LOOPBACK.lock().unwrap_or_else(|p| p.into_inner());
    let Some(s) = server(&["-a", "127.0.0.1", "-p", "17401", "-v"]) else {
        return;
    };
    // A name for -a, and no -I: the routed source, 127.0.0.1, is the server's.
    let c = run(
        "rping",
        &["-c", "-a", "localhost", "-p", "17401", "-C", "10", "-v"],
        LIMIT,
    );
    assert_eq!(c.code(), Some(0), "{}{}", c.out, c.err);
    assert_eq!(count(&c.out, "ping data: rdma-ping-"), 10, "{}", c.out);
    assert!(
        c.out
            .contains("ping data: rdma-ping-9: JKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz"),
        "{}",
        c.out
    );
    assert!(
        c.err.contains("127.0.0.1:4791") && c.err.contains("using 127.0.0."),
        "{}",
        c.err
    );
    let s = s.finish(Duration::from_secs(5));
    assert_eq!(s.code(), Some(0), "{}", s.err);
    assert_eq!(
        count(&s.out, "server ping data: rdma-ping-"),
        10,
        "{}",
        s.out
    );
    assert!(s.err.contains("server DISCONNECT EVENT..."), "{}", s.err);
}

#[test]
fn ucmatose_and_cmtime_clients_take_the_next_free_loopback_source() {
    let _g = LOOPBACK.lock().unwrap_or_else(|p| p.into_inner());
    let mut s = spawn("ucmatose", &["-b", "127.0.0.1", "-p", "17402", "-C", "3"]);
    if !s.alive_after(Duration::from_millis(400)) {
        eprintln!("skipped: {}", s.finish(LIMIT).out);
        return;
    }
    let c = run(
        "ucmatose",
        &["-s", "127.0.0.1", "-p", "17402", "-C", "3"],
        LIMIT,
    );
    assert_eq!(c.code(), Some(0), "{}{}", c.out, c.err);
    assert!(c.out.contains("return status 0"), "{}", c.out);
    assert!(c.err.contains("using 127.0.0."), "{}", c.err);
    let s = s.finish(Duration::from_secs(10));
    assert_eq!(s.code(), Some(0), "{}", s.out);

    let s = spawn("cmtime", &["-b", "127.0.0.1", "-p", "17403", "-c", "3"]);
    std::thread::sleep(Duration::from_millis(400));
    let c = run(
        "cmtime",
        &["-s", "127.0.0.1", "-p", "17403", "-c", "3"],
        LIMIT,
    );
    assert_eq!(c.code(), Some(0), "{}{}", c.out, c.err);
    assert!(c.out.contains("connect      :"), "{}", c.out);
    assert!(c.err.contains("using 127.0.0."), "{}", c.err);
    // The cmtime server runs until stopped; SIGTERM ends it (by that signal).
    s.signal("-TERM");
    let s = s.finish(Duration::from_secs(5));
    assert_eq!(s.status.signal(), Some(15), "{}{}", s.out, s.err);
}

#[test]
fn ipv6_loopback_client_is_refused_with_a_hint() {
    let _g = LOOPBACK.lock().unwrap_or_else(|p| p.into_inner());
    let mut s = spawn("rping", &["-s", "-a", "::1", "-p", "17404"]);
    if !s.alive_after(Duration::from_millis(400)) {
        eprintln!("skipped (no ::1 device): {}", s.finish(LIMIT).err);
        return;
    }
    let t = Instant::now();
    let c = run(
        "rping",
        &["-c", "-a", "::1", "-p", "17404", "-C", "1"],
        LIMIT,
    );
    assert_eq!(c.code(), Some(1), "{}", c.err);
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(
        c.err.contains("another process already holds [::1]:4791") && c.err.contains("-I ADDR"),
        "{}",
        c.err
    );
    assert_eq!(c.err.lines().count(), 1, "{}", c.err);
}

#[test]
fn wildcard_server_opens_every_local_address_and_names_them() {
    let _g = LOOPBACK.lock().unwrap_or_else(|p| p.into_inner());
    // No -a: 0.0.0.0, as rping's default.
    let Some(mut s) = server(&["-p", "17405", "-v"]) else {
        return;
    };
    assert!(
        s.wait_for("listening on 0.0.0.0:17405", Duration::from_secs(2)),
        "{}",
        s.err()
    );
    if s.err()
        .contains("skipping 127.0.0.1 (lo): another process already holds")
    {
        // Another program on this host holds 127.0.0.1:4791 (not a failure of ours).
        eprintln!("skipped: {}", s.err().trim());
        // The wildcard server serves until stopped: SIGINT hangs it up (exit 130).
        s.signal("-INT");
        let _ = s.finish(Duration::from_secs(5));
        return;
    }
    assert!(s.err().contains("softrdma-127.0.0.1"), "{}", s.err());
    let c = run(
        "rping",
        &[
            "-c",
            "-a",
            "127.0.0.1",
            "-I",
            "127.0.135.2",
            "-p",
            "17405",
            "-C",
            "2",
            "-v",
        ],
        LIMIT,
    );
    assert_eq!(c.code(), Some(0), "{}{}", c.out, c.err);
    assert_eq!(count(&c.out, "ping data: "), 2, "{}", c.out);
    let s = s.finish(Duration::from_secs(5));
    assert_eq!(s.code(), Some(0), "{}", s.err);
}

#[test]
fn every_held_address_names_ip_4791_and_the_way_out() {
    let Some(_s) = server(&["-a", "127.0.131.1", "-p", "17406"]) else {
        return;
    };
    let cases: [(&str, Vec<&str>, &str); 5] = [
        (
            "rping",
            vec!["-s", "-a", "127.0.131.1", "-p", "17407"],
            "-a ADDR",
        ),
        (
            "rping",
            vec!["-c", "-a", "127.0.131.9", "-I", "127.0.131.1"],
            "-I ADDR",
        ),
        ("ucmatose", vec!["-b", "127.0.131.1"], "-b ADDR"),
        ("cmtime", vec!["-b", "127.0.131.1"], "-b ADDR"),
        (
            "pingpong",
            vec!["rc", "-d", "127.0.131.1", "-p", "17408"],
            "-d ADDR",
        ),
    ];
    for (tool, args, hint) in cases {
        let d = run(tool, &args, LIMIT);
        let text = format!("{}{}", d.out, d.err);
        assert_ne!(d.code(), Some(0), "{tool} {args:?}: {text}");
        assert!(
            text.contains("another process already holds 127.0.131.1:4791") && text.contains(hint),
            "{tool} {args:?}: {text}"
        );
    }
    let d = run(
        "perf",
        &[
            "send",
            "bw",
            "--client",
            "127.0.131.1",
            "--server",
            "127.0.131.3",
            "-n",
            "20",
        ],
        LIMIT,
    );
    assert!(
        d.err
            .contains("another process already holds 127.0.131.1:4791")
            && d.err.contains("--client ADDR"),
        "{}{}",
        d.out,
        d.err
    );
}

#[test]
fn interrupted_client_disconnects_and_the_server_exits() {
    let Some(s) = server(&["-a", "127.0.132.1", "-p", "17409"]) else {
        return;
    };
    let mut c = spawn(
        "rping",
        &[
            "-c",
            "-a",
            "127.0.132.1",
            "-I",
            "127.0.132.2",
            "-p",
            "17409",
            "-v",
        ],
    );
    assert!(c.wait_for("ping data: rdma-ping-3", LIMIT), "{}", c.err());
    c.signal("-INT");
    let c = c.finish(Duration::from_secs(5));
    assert_eq!(c.status.signal(), Some(2), "{}", c.err);
    // The client's DREQ: the server sees DISCONNECTED, answers and exits 0.
    let s = s.finish(Duration::from_secs(5));
    assert_eq!(s.code(), Some(0), "{}", s.err);
    assert!(s.err.contains("server DISCONNECT EVENT..."), "{}", s.err);
}

#[test]
fn terminated_server_disconnects_and_the_client_exits() {
    let Some(s) = server(&["-a", "127.0.132.3", "-p", "17410"]) else {
        return;
    };
    let mut c = spawn(
        "rping",
        &[
            "-c",
            "-a",
            "127.0.132.3",
            "-I",
            "127.0.132.4",
            "-p",
            "17410",
            "-v",
        ],
    );
    assert!(c.wait_for("ping data: rdma-ping-3", LIMIT), "{}", c.err());
    s.signal("-TERM");
    let s = s.finish(Duration::from_secs(5));
    assert_eq!(s.status.signal(), Some(15), "{}", s.err);
    let c = c.finish(Duration::from_secs(5));
    assert_eq!(c.code(), Some(0), "{}", c.err);
    assert!(c.err.contains("client DISCONNECT EVENT..."), "{}", c.err);
}

#[test]
fn client_larger_than_the_server_fails_the_read_as_rping_does() {
    let Some(s) = server(&["-a", "127.0.132.5", "-p", "17411", "-v"]) else {
        return;
    };
    let c = run(
        "rping",
        &[
            "-c",
            "-a",
            "127.0.132.5",
            "-I",
            "127.0.132.6",
            "-p",
            "17411",
            "-C",
            "3",
            "-S",
            "100",
        ],
        LIMIT,
    );
    // The server READs the 100 bytes the client advertised into its 64: local protection
    // error (status 4); it disconnects, the client sees DISCONNECTED and ends.
    assert!(c.err.contains("client DISCONNECT EVENT..."), "{}", c.err);
    assert_eq!(count(&c.out, "ping data"), 0, "{}", c.out);
    let s = s.finish(Duration::from_secs(5));
    assert_eq!(s.code(), Some(1), "{}", s.err);
    assert!(
        s.err.lines().any(|l| l == "cq completion failed status 4"),
        "{}",
        s.err
    );
    assert!(!s.out.contains("server ping data"), "{}", s.out);
}

#[test]
fn persistent_server_serves_one_client_after_another() {
    let Some(mut s) = server(&["-P", "-a", "127.0.133.1", "-p", "17412", "-v"]) else {
        return;
    };
    for src in ["127.0.133.2", "127.0.133.3", "127.0.133.4"] {
        let c = run(
            "rping",
            &[
                "-c",
                "-a",
                "127.0.133.1",
                "-I",
                src,
                "-p",
                "17412",
                "-C",
                "2",
                "-V",
            ],
            LIMIT,
        );
        assert_eq!(c.code(), Some(0), "{src}: {}", c.err);
    }
    assert!(s.alive_after(Duration::from_millis(100)), "{}", s.err());
    assert_eq!(count(&s.out(), "server ping data: "), 6, "{}", s.out());
    s.signal("-TERM");
    let s = s.finish(Duration::from_secs(5));
    assert_eq!(s.status.signal(), Some(15), "{}", s.err);
}

#[test]
fn self_created_qps_on_either_side() {
    for (i, (sq, cq)) in [(true, true), (false, true), (true, false)]
        .into_iter()
        .enumerate()
    {
        let a = format!("127.0.134.{}", 1 + 2 * i);
        let b = format!("127.0.134.{}", 2 + 2 * i);
        let port = (17413 + i).to_string();
        let mut sargs = vec!["-a", &a, "-p", &port, "-v"];
        if sq {
            sargs.push("-q");
        }
        let Some(s) = server(&sargs) else { return };
        let mut cargs = vec!["-c", "-a", &a, "-I", &b, "-p", &port, "-C", "3", "-V", "-v"];
        if cq {
            cargs.push("-q");
        }
        let c = run("rping", &cargs, LIMIT);
        assert_eq!(c.code(), Some(0), "-q server {sq} client {cq}: {}", c.err);
        assert_eq!(count(&c.out, "ping data: "), 3, "{}", c.out);
        let s = s.finish(Duration::from_secs(5));
        assert_eq!(s.code(), Some(0), "{}", s.err);
    }
}

#[test]
fn cm_retries_are_printed_with_v() {
    // Nobody at 127.0.135.1: the REQ goes unanswered; -v shows each retransmission.
    let mut c = spawn(
        "rping",
        &[
            "-c",
            "-a",
            "127.0.135.1",
            "-I",
            "127.0.135.3",
            "-p",
            "17416",
            "-v",
        ],
    );
    assert!(
        c.wait_for("REQ retry 1/15, next in ", LIMIT),
        "{}{}",
        c.out(),
        c.err()
    );
    c.signal("-INT");
    let c = c.finish(Duration::from_secs(5));
    assert_eq!(c.status.signal(), Some(2), "{}", c.err);
}

#[test]
fn arguments_are_checked_before_any_work() {
    let cases: [(&[&str], &str); 9] = [
        (
            &["-s", "-S", "10"],
            "Invalid size 10 (valid range is 26 to 65535)",
        ),
        (
            &["-s", "-S", "65536"],
            "Invalid size 65536 (valid range is 26 to 65535)",
        ),
        (
            &["-c", "-a", "127.0.0.1", "-C", "-1"],
            "Invalid count -1 (valid range is 0 to 2147483647)",
        ),
        (
            &["-s", "-p", "70000"],
            "Invalid port 70000 (valid range is 1 to 65535)",
        ),
        (&["-c"], "the client needs -a ADDR"),
        (&["-s", "-c"], "give one of -s (server) and -c (client)"),
        (
            &["-c", "-a", "127.0.0.1", "-P"],
            "-P (persistent server) is a server flag",
        ),
        (
            &["-c", "-a", "::1", "-I", "127.0.0.2"],
            "-a ::1 is an IPv6 address but -I 127.0.0.2 is IPv4",
        ),
        (
            &["-c", "-a", "no-such-host.invalid"],
            "invalid hostname or IP address",
        ),
    ];
    for (args, want) in cases {
        let t = Instant::now();
        let d = run("rping", args, LIMIT);
        assert_eq!(d.code(), Some(22), "{args:?}: {}", d.err);
        assert!(d.err.contains(want), "{args:?}: {}", d.err);
        assert_eq!(d.err.lines().count(), 1, "{args:?}: {}", d.err);
        assert!(
            !d.err.contains("Some(") && !d.err.contains("{"),
            "{}",
            d.err
        );
        // The family mismatch must not hang (nor anything else here).
        assert!(t.elapsed() < Duration::from_secs(5), "{args:?}");
    }
    for (tool, args, want) in [
        (
            "ucmatose",
            &["-p", "70000"][..],
            "70000 is not in 1..=65535",
        ),
        ("ucmatose", &["-a", "40"][..], "40 is not in 0..=31"),
        ("cmtime", &["-p", "0"][..], "0 is not in 1..=65535"),
    ] {
        let d = run(tool, args, LIMIT);
        assert_ne!(d.code(), Some(0), "{tool} {args:?}");
        assert!(
            d.err.lines().next().unwrap_or("").contains(want),
            "{tool} {args:?}: {}",
            d.err
        );
    }
    for (tool, args) in [
        ("ucmatose", &["-s", "::1", "-b", "127.0.0.2"][..]),
        ("cmtime", &["-s", "::1", "-b", "127.0.0.2"][..]),
    ] {
        let t = Instant::now();
        let d = run(tool, args, LIMIT);
        let text = format!("{}{}", d.out, d.err);
        assert_ne!(d.code(), Some(0), "{tool}: {text}");
        assert!(
            text.contains("-s ::1 is an IPv6 address but -b 127.0.0.2 is IPv4"),
            "{tool}: {text}"
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{tool}");
    }
}

#[test]
fn interrupted_ucmatose_client_ends_the_server_at_once() {
    let mut s = spawn(
        "ucmatose",
        &["-b", "127.0.136.1", "-p", "17417", "-C", "10"],
    );
    if !s.alive_after(Duration::from_millis(400)) {
        eprintln!("skipped: {}", s.finish(LIMIT).out);
        return;
    }
    // The client waits for 20 messages, the server sends 10 and waits for 10 replies:
    // both wait until the client is interrupted.
    let mut c = spawn(
        "ucmatose",
        &[
            "-s",
            "127.0.136.1",
            "-b",
            "127.0.136.2",
            "-p",
            "17417",
            "-C",
            "20",
        ],
    );
    assert!(c.wait_for("receiving data transfers", LIMIT), "{}", c.out());
    std::thread::sleep(Duration::from_millis(300));
    c.signal("-INT");
    let c = c.finish(Duration::from_secs(5));
    assert_eq!(c.status.signal(), Some(2), "{}{}", c.out, c.err);
    // The DREQ flushes the server's receives: it fails at once instead of waiting.
    let s = s.finish(Duration::from_secs(5));
    assert_eq!(s.code(), Some(1), "{}", s.out);
    assert!(s.out.contains("return status 1"), "{}", s.out);
}

/// `rping -t TOS`: the client's connection carries the type of service, in the REQ's
/// traffic class and in the IP TOS byte of its packets (read back from its own pcap).
#[test]
fn client_tos_is_on_the_wire() {
    let pcap = std::env::temp_dir().join(format!("rping-tos-{}.pcap", std::process::id()));
    let p = pcap.to_string_lossy().into_owned();
    let Some(s) = server(&["-a", "127.0.137.1", "-p", "17431"]) else {
        return;
    };
    let c = run(
        "rping",
        &[
            "-c",
            "-a",
            "127.0.137.1",
            "-I",
            "127.0.137.2",
            "-p",
            "17431",
            "-C",
            "2",
            "-t",
            "72",
            "--pcap",
            &p,
        ],
        LIMIT,
    );
    assert_eq!(c.code(), Some(0), "{}", c.err);
    let _ = s.finish(Duration::from_secs(5));
    let d = run("decode", &["--json", &p], LIMIT);
    let _ = std::fs::remove_file(&pcap);
    let mut sent = 0;
    let mut req_tclass = None;
    for line in d.out.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json");
        if v["ip"]["src"] != "127.0.137.2" {
            continue;
        }
        sent += 1;
        // TOS 72 = 0x48: DSCP 18, ECN 0.
        assert_eq!(v["ip"]["dsfield"]["dscp"], 18, "{line}");
        if v["frame"]["info"]
            .as_str()
            .is_some_and(|i| i.contains("ConnectRequest"))
        {
            req_tclass = Some(v.to_string().contains("\"primary_traffic_class\":72"));
        }
    }
    assert!(sent > 5, "{}", d.err);
    assert_eq!(
        req_tclass,
        Some(true),
        "the REQ's primary path traffic class is 72"
    );
}
