//! Multicast over the RDMA CM on this host: Debian 12's unmodified `mckey` (rdmacm-utils)
//! as receiver and sender over softrdma's `librdmacm.so.1` and `libibverbs.so.1` (through
//! `softrdma run`), and `softrdma mckey` against it both ways.
//!
//! The receiver starts first (its devices join the group on the loopback interface:
//! Linux carries IPv4 multicast between sockets bound to 127/8 addresses even though `lo`
//! has no MULTICAST flag, measured on this host), waits for its joined line, then the
//! sender runs; both must exit 0, and the receiver only does so after C messages on every
//! id (`data transfers complete` follows its `poll_cqs`). Every test uses a group and
//! addresses of its own (239.23.2.x, 127.0.23.5x).
//!
//! The libraries are `target/<profile>/libsoftrdma_{verbs,rdmacm}.so`, built by `cargo test
//! --workspace` (or `cargo build -p softrdma-verbs -p softrdma-rdmacm`). A test whose Debian
//! binary is not installed says so and passes; a missing library fails.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{finish, Proc, BIN};

fn debian_mckey() -> Option<String> {
    common::libs_built(&["libsoftrdma_verbs.so", "libsoftrdma_rdmacm.so"]);
    common::debian("mckey", "rdmacm-utils")
}

/// `softrdma run -- mckey args…` (Debian's), or `softrdma mckey args…` (ours).
fn spawn(debian: Option<&str>, args: &[&str]) -> Proc {
    let mut cmd = Command::new(BIN);
    match debian {
        Some(m) => cmd.arg("run").arg("--").arg(m),
        None => cmd.arg("mckey"),
    };
    Proc::spawn(cmd.args(args))
}

/// Waits until the receiver's device joined `group` (its group socket, bound to
/// `<group>:4791`, is in /proc/net/udp; mckey's own "joined" line is no signal: its stdout is
/// a pipe, fully buffered). The sender pauses 3 s after its own join before it sends.
fn wait_joined(mut c: Proc, group: Ipv4Addr) -> Proc {
    let o = group.octets();
    let needle = format!("{:02X}{:02X}{:02X}{:02X}:12B7", o[3], o[2], o[1], o[0]);
    let start = Instant::now();
    while !std::fs::read_to_string("/proc/net/udp").is_ok_and(|s| {
        s.lines()
            .any(|l| l.split_whitespace().nth(1) == Some(needle.as_str()))
    }) {
        if start.elapsed() > Duration::from_secs(20) || c.exited() {
            let (code, out, err) = finish(c, Duration::ZERO);
            panic!("the receiver never joined {group} ({code:?}): {out}{err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c
}

const LIMIT: Duration = Duration::from_secs(60);

/// Receiver (`-c ids`), then sender; both must succeed.
fn run_pair(
    rx: Option<&str>,
    tx: Option<&str>,
    group: &str,
    a: (&str, &str),
    ids: usize,
    tx_extra: &[&str],
) {
    let c = ids.to_string();
    let r = spawn(rx, &["-m", group, "-b", a.0, "-C", "8", "-c", &c]);
    let r = wait_joined(r, group.parse().unwrap());
    let mut targs = vec!["-m", group, "-b", a.1, "-s", "-C", "8"];
    targs.extend_from_slice(tx_extra);
    let s = spawn(tx, &targs);
    let (sc, so, se) = finish(s, LIMIT);
    let (rc, ro, re) = finish(r, LIMIT);
    assert_eq!(sc, Some(0), "sender: {so}{se}\nreceiver: {ro}{re}");
    assert_eq!(rc, Some(0), "receiver: {ro}{re}\nsender: {so}{se}");
    let joined = format!("mckey: joined dgid: ::ffff:{group} mlid 0x0 sl 0");
    assert_eq!(ro.matches(&joined).count(), ids, "receiver: {ro}");
    assert!(so.contains(&joined), "sender: {so}");
    assert!(
        ro.contains("receiving data transfers\ndata transfers complete"),
        "receiver: {ro}"
    );
    assert!(
        so.contains("initiating data transfers\ndata transfers complete"),
        "sender: {so}"
    );
    assert!(ro.ends_with("return status 0\n") && so.ends_with("return status 0\n"));
}

#[test]
fn debian_mckey_sender_and_receiver_over_softrdma() {
    let Some(m) = debian_mckey() else { return };
    run_pair(
        Some(&m),
        Some(&m),
        "239.23.2.1",
        ("127.0.23.51", "127.0.23.52"),
        2,
        &[],
    );
}

#[test]
fn debian_mckey_send_only_member_reaches_the_group() {
    let Some(m) = debian_mckey() else { return };
    run_pair(
        Some(&m),
        Some(&m),
        "239.23.2.2",
        ("127.0.23.53", "127.0.23.54"),
        1,
        &["-o"],
    );
}

#[test]
fn softrdma_mckey_receives_from_debian_mckey() {
    let Some(m) = debian_mckey() else { return };
    run_pair(
        None,
        Some(&m),
        "239.23.2.3",
        ("127.0.23.55", "127.0.23.56"),
        1,
        &[],
    );
}

#[test]
fn debian_mckey_receives_from_softrdma_mckey() {
    let Some(m) = debian_mckey() else { return };
    run_pair(
        Some(&m),
        None,
        "239.23.2.4",
        ("127.0.23.57", "127.0.23.58"),
        2,
        &[],
    );
}

/// Without a sender the receiver gets nothing: `softrdma mckey` gives up with its message
/// (the test above cannot pass on packets that never arrive).
#[test]
fn softrdma_mckey_without_a_sender_times_out_on_nothing() {
    // A sender to another group must not be heard.
    let Some(m) = debian_mckey() else { return };
    let r = spawn(
        None,
        &[
            "-m",
            "239.23.2.5",
            "-b",
            "127.0.23.59",
            "-C",
            "2",
            "--timeout",
            "3",
        ],
    );
    let r = wait_joined(r, "239.23.2.5".parse().unwrap());
    let s = spawn(
        Some(&m),
        &["-m", "239.23.2.6", "-b", "127.0.23.60", "-s", "-C", "2"],
    );
    let (sc, so, se) = finish(s, LIMIT);
    assert_eq!(sc, Some(0), "sender: {so}{se}");
    let (rc, ro, re) = finish(r, LIMIT);
    assert_ne!(rc, Some(0), "receiver: {ro}{re}");
    assert!(
        ro.contains("mckey: timed out: 0 of 2 messages received"),
        "receiver: {ro}{re}"
    );
}
