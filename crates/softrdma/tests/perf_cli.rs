//! `softrdma perf`: every argument is checked before any work (no device opened, no buffer
//! allocated), refusals are one line naming the valid range; and a short run prints the
//! figures in the documented format (devices on 127.0.45.x, away from other tests).

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::BIN;

/// Runs `softrdma perf ARGS`; returns (exit code, stdout, stderr) and how long it took.
fn perf(args: &[&str]) -> (i32, String, String, Duration) {
    let t = Instant::now();
    let out = common::output(Command::new(BIN).arg("perf").args(args));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        t.elapsed(),
    )
}

/// `args` are refused at once, before anything is printed on stdout, with `want` on the first
/// line of stderr.
fn refused(args: &[&str], want: &str) {
    let (code, out, err, took) = perf(args);
    assert_ne!(code, 0, "{args:?} accepted: {out}");
    assert!(out.is_empty(), "{args:?} started work: {out}");
    let first = err.lines().next().unwrap_or("");
    assert!(first.contains(want), "{args:?}: {err}");
    assert!(
        !err.contains("{") && !err.contains("Some("),
        "{args:?}: Debug output: {err}"
    );
    // Refused before any allocation or device: well under a second even in a debug build.
    assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
}

#[test]
fn size_beyond_max_msg_is_refused_before_allocating() {
    refused(
        &["write", "bw", "-s", "10737418240", "-n", "1"],
        "10737418240 is not in 1..=8388608",
    );
    refused(&["write", "bw", "-s", "0"], "0 is not in 1..=8388608");
    refused(
        &["send", "lat", "-s", "8M"],
        "8M is not a number in 1..=8388608",
    );
}

#[test]
fn tx_depth_zero_is_refused() {
    refused(&["write", "bw", "-t", "0"], "0 is not in 1..=16384");
    refused(&["write", "bw", "-t", "16385"], "16385 is not in 1..=16384");
}

#[test]
fn runs_zero_is_refused() {
    refused(&["write", "bw", "-r", "0"], "0 is not in 1..=1000");
}

#[test]
fn duration_must_be_positive_and_bounded() {
    for d in ["0", "-1", "nan", "inf", "3601"] {
        refused(
            &["write", "bw", "-D", d],
            &format!("{d} is not a number of seconds in (0, 3600]"),
        );
    }
    refused(
        &["write", "bw", "-D", "1", "-n", "10"],
        "cannot be used with",
    );
}

#[test]
fn iterations_are_checked() {
    refused(&["write", "bw", "-n", "0"], "0 is not in 1..=1000000000");
    // lat: the first 1% (at least 10) round trips are warm-up, so at least 11.
    for n in ["1", "10"] {
        refused(
            &["send", "lat", "-n", n],
            "lat needs at least 11 round trips (the first 1%, at least 10, are warm-up",
        );
    }
}

#[test]
fn mtu_must_be_an_ib_mtu() {
    refused(
        &["write", "bw", "-m", "1500"],
        "1500 is not one of 256, 512, 1024, 2048, 4096",
    );
}

#[test]
fn addresses_must_be_two_of_one_family() {
    refused(
        &[
            "write",
            "bw",
            "--server",
            "127.0.0.1",
            "--client",
            "127.0.0.1",
        ],
        "--server and --client are both 127.0.0.1",
    );
    refused(
        &["write", "bw", "--server", "::1"],
        "must both be IPv4 or both IPv6",
    );
}

#[test]
fn short_runs_print_figures_and_what_the_ratio_means() {
    let at = ["--server", "127.0.45.2", "--client", "127.0.45.1"];
    let lat: Vec<&str> = ["send", "lat", "-n", "40", "--pin", "off"]
        .into_iter()
        .chain(at)
        .collect();
    let (code, out, err, _) = perf(&lat);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].contains("40 iterations (first 10: warm-up)"),
        "{out}"
    );
    let run = lines[1];
    for want in [
        "run 1: softrdma RTT median",
        " | TCP median",
        " | TCP busy-poll median",
        "x TCP busy-poll: lower is better",
    ] {
        assert!(run.contains(want), "{want:?} missing: {run}");
    }
    let bw: Vec<&str> = [
        "write", "bw", "-n", "4", "-s", "65536", "-r", "2", "--pin", "off",
    ]
    .into_iter()
    .chain(at)
    .collect();
    let (code, out, err, _) = perf(&bw);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[1].contains("x TCP: higher is better"), "{out}");
    assert!(lines[3].starts_with("ratio over 2 runs: min "), "{out}");
}

/// `--spin-us`: our devices spin, then sleep; a bw run moves every byte and says the mode,
/// and a lat run is compared with TCP's blocking ping-pong only (TCP's busy one is the
/// busy-polled runs' baseline).
#[test]
fn spin_then_block_runs_and_compares_like_with_like() {
    let at = ["--server", "127.0.45.6", "--client", "127.0.45.5"];
    let bw: Vec<&str> = [
        "write",
        "bw",
        "-n",
        "8",
        "-s",
        "65536",
        "--spin-us",
        "50",
        "--pin",
        "off",
    ]
    .into_iter()
    .chain(at)
    .collect();
    let (code, out, err, _) = perf(&bw);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains("spin 50 us, then events"), "{out}");
    assert!(lines[1].contains("x TCP: higher is better"), "{out}");
    let lat: Vec<&str> = ["send", "lat", "-n", "40", "--spin-us", "50", "--pin", "off"]
        .into_iter()
        .chain(at)
        .collect();
    let (code, out, err, _) = perf(&lat);
    assert_eq!(code, 0, "{err}");
    let run = out.lines().nth(1).unwrap_or("");
    assert!(run.contains(" | TCP median"), "{out}");
    assert!(!run.contains("busy-poll"), "{out}");
    refused(
        &["write", "bw", "--spin-us", "50", "-e"],
        "cannot be used with",
    );
    refused(
        &["write", "bw", "--spin-us", "0"],
        "0 is not in 1..=1000000",
    );
}

/// `perf live`: two processes hold N connections at once (the server is this binary
/// re-executed), then tear them all down; the report has the setup by block, the RSS per
/// connection of each side and the teardown, and nothing is left behind.
#[test]
fn live_connections_held_by_two_processes() {
    refused(&["live", "-c", "0"], "0 is not in 1..=1000000");
    let (code, out, err, _) = perf(&[
        "live",
        "-c",
        "300",
        "--block",
        "100",
        "-w",
        "64",
        "--server",
        "127.0.45.60",
        "--client",
        "127.0.45.61",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    for want in [
        "server 127.0.45.60",
        "client 127.0.45.61",
        "all 300 ESTABLISHED on both sides",
        "  block   3:",
        "first 100: ",
        "last/first",
        "RSS with 300 connections: client",
        "teardown of 300:",
        "client ids left: 0; server failures: 0",
    ] {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }
}

/// `perf cm`: each run's rates and ratio, cmtime's step table, one connection alone and
/// the ratio line; `-v` adds what each side counted in the run, which for a clean run on
/// loopback is one REQ, REP, RTU, DREQ and DREP per connection, none retried (a lost MAD
/// shows as a retry: QP1's CQ once overflowed under a burst of sends and lost receives).
#[test]
fn connection_rate_runs_print_steps_ratios_and_counters() {
    let (code, out, err, _) = perf(&[
        "cm",
        "-c",
        "200",
        "-r",
        "2",
        "-v",
        "--server",
        "127.0.45.71",
        "--client",
        "127.0.45.70",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    for want in [
        "softrdma perf cm: 200 connections in flight, 2 runs, 127.0.45.71 <- 127.0.45.70",
        "run 1: softrdma ",
        "run 2: softrdma ",
        "x TCP: higher is better",
        "connect      :",
        "disconnect   :",
        "one connection alone: softrdma connect (REQ → ESTABLISHED) median ",
        // What each side's waits for input did over the single connections.
        "  client waits for input: ",
        "  server waits for input: ",
        " spun and found it, ",
        " slept at once (backed off)",
        "ratio over 2 runs: min ",
        // CPU time per 1,000 connections, ours and TCP's, per run and over the runs.
        "  CPU per 1000 connections (user + system, all threads): softrdma ",
        "CPU per 1000 connections over 2 runs, medians: softrdma ",
        // The client's counters are read after its run; the server's are still moving
        // (its last DREPs are counted when their sends complete, as cm.c does).
        "  client: cm cm_tx_msgs/req +200, cm cm_tx_msgs/rtu +200, cm cm_tx_msgs/dreq +200, cm cm_rx_msgs/rep +200, cm cm_rx_msgs/drep +200, mad tx +600,",
        "  server: cm cm_tx_msgs/rep +200, ",
    ] {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }
    assert!(
        !out.contains("retries"),
        "a run retried on loopback:\n{out}"
    );
    // The server's DREPs leave with the rest of a turn's MADs, a few trains per run, not
    // one sendmmsg each when the DISCONNECTED that answered them destroys its QP.
    for line in out.lines().filter(|l| l.starts_with("  server: ")) {
        let sends: u64 = line
            .split(", ")
            .find_map(|c| c.strip_prefix("driver tx_sends +"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no driver tx_sends in {line:?}"));
        assert!(sends < 200, "{sends} sends for 200 connections: {line}");
    }
}

/// `perf cm --trace`: where one connection's microseconds go, hop by hop, from both
/// devices' recorded datagrams; every hop is a time that passed (no negative or missing
/// figure), and the hops between the REQ and the RTU add up to their whole.
#[test]
fn the_trace_splits_one_connection_into_its_hops() {
    let (code, out, err, _) = perf(&[
        "cm",
        "-c",
        "20",
        "-r",
        "1",
        "--trace",
        "--server",
        "127.0.45.81",
        "--client",
        "127.0.45.80",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("where one connection's microseconds go (pcap timestamps, medians):"),
        "{out}"
    );
    let hop = |name: &str| -> f64 {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name:?} missing:\n{out}"));
        let v: f64 = line
            .trim_end_matches(" us")
            .rsplit(' ')
            .next()
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("no figure in {line:?}"));
        assert!(v >= 0.0, "{line}");
        v
    };
    let parts = [
        hop("REQ: client sends → server receives"),
        hop("server: REQ → CONNECT_REQUEST → accept → REP sent"),
        hop("REP: server sends → client receives"),
        hop("client: REP → RTU sent"),
    ];
    let whole = hop("REQ sent → RTU sent");
    assert!(parts.iter().all(|p| *p <= whole), "{out}");
    hop("client: connect() → REQ sent, REP → ESTABLISHED taken");
}
