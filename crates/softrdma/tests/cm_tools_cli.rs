//! `softrdma udaddy` and `softrdma ucmatose` against themselves, as two processes on
//! loopback (each test on its own 127.0.x.y addresses): v44's output lines and exit status,
//! UD over SIDR, `-P ib -f gid`, `-t` and `-a`, SIDR status 1 without a UD listener.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::process::Command;
use std::time::Duration;

use common::{finish_run as finish, Proc, BIN};

fn spawn(args: &[&str]) -> Proc {
    Proc::spawn(Command::new(BIN).args(args))
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

const UDA_SERVER: &[&str] = &[
    "udaddy: starting server",
    "receiving data transfers",
    "sending replies",
    "data transfers complete",
    "test complete",
    "return status 0",
];
const UDA_CLIENT: &[&str] = &[
    "udaddy: starting client",
    "udaddy: connecting",
    "initiating data transfers",
    "receiving data transfers",
    "data transfers complete",
    "test complete",
    "return status 0",
];
const UCM_SERVER: &[&str] = &[
    "cmatose: starting server",
    "initiating data transfers",
    "completing sends",
    "receiving data transfers",
    "data transfers complete",
    "cmatose: disconnecting",
    "disconnected",
    "test complete",
    "return status 0",
];
const UCM_CLIENT: &[&str] = &[
    "cmatose: starting client",
    "cmatose: connecting",
    "receiving data transfers",
    "sending replies",
    "data transfers complete",
    "test complete",
    "return status 0",
];

/// A server and a client of one tool; both must print v44's lines and exit 0.
fn pair(tool: &str, server: &[&str], client: &[&str], want: (&[&str], &[&str])) {
    let s = spawn(&[&[tool][..], server].concat());
    std::thread::sleep(Duration::from_millis(400));
    let c = finish(
        spawn(&[&[tool][..], client].concat()),
        Duration::from_secs(30),
    );
    let s = finish(s, Duration::from_secs(30));
    assert_eq!(
        (c.code, lines(&c.out)),
        (0, want.1.to_vec()),
        "client: {}",
        c.err
    );
    assert_eq!(
        (s.code, lines(&s.out)),
        (0, want.0.to_vec()),
        "server: {}",
        s.err
    );
}

#[test]
fn udaddy_both_sides() {
    pair(
        "udaddy",
        &["-b", "127.0.91.1", "-c", "2", "-C", "5", "-t", "0x20"],
        &[
            "-s",
            "127.0.91.1",
            "-b",
            "127.0.91.2",
            "-c",
            "2",
            "-C",
            "5",
            "-t",
            "0x20",
        ],
        (UDA_SERVER, UDA_CLIENT),
    );
}

#[test]
fn ucmatose_ps_ib_with_gids() {
    pair(
        "ucmatose",
        &[
            "-b",
            "::ffff:127.0.92.1",
            "-P",
            "ib",
            "-f",
            "gid",
            "-c",
            "2",
            "-C",
            "3",
        ],
        &[
            "-s",
            "::ffff:127.0.92.1",
            "-b",
            "::ffff:127.0.92.2",
            "-P",
            "ib",
            "-f",
            "gid",
            "-c",
            "2",
            "-C",
            "3",
        ],
        (UCM_SERVER, UCM_CLIENT),
    );
}

#[test]
fn ucmatose_tos_and_ack_timeout() {
    pair(
        "ucmatose",
        &["-b", "127.0.93.1", "-a", "16", "-C", "3"],
        &[
            "-s",
            "127.0.93.1",
            "-b",
            "127.0.93.2",
            "-t",
            "0x48",
            "-a",
            "14",
            "-C",
            "3",
        ],
        (UCM_SERVER, UCM_CLIENT),
    );
}

/// No UD listener where the SIDR REQ goes (an RC server holds the device): SIDR REP status 1,
/// udaddy's UNREACHABLE line, exit 1; an unknown `-P` is a warning, as in v44.
#[test]
fn udaddy_without_a_ud_listener_is_unreachable_1() {
    let mut s = spawn(&["ucmatose", "-b", "127.0.94.1"]);
    std::thread::sleep(Duration::from_millis(400));
    let c = finish(
        spawn(&[
            "udaddy",
            "-s",
            "127.0.94.1",
            "-b",
            "127.0.94.2",
            "-P",
            "udp6",
        ]),
        Duration::from_secs(20),
    );
    assert_eq!(
        lines(&c.out),
        vec![
            "udaddy: starting client",
            "udaddy: connecting",
            "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1",
            "test complete",
            "return status 1",
        ]
    );
    assert_eq!(c.code, 1);
    // stderr: only the note that it waits for the server (stdout is udaddy's own lines).
    assert!(
        c.err
            .lines()
            .all(|l| l.starts_with("udaddy: waiting for 127.0.94.1:7174")),
        "{}",
        c.err
    );
    let c = finish(
        spawn(&[
            "udaddy",
            "-s",
            "127.0.94.1",
            "-b",
            "127.0.94.2",
            "-P",
            "tcp",
        ]),
        Duration::from_secs(20),
    );
    s.kill();
    assert!(
        c.err.contains("Warning: unknown port space format"),
        "{}",
        c.err
    );
    assert_eq!(c.code, 1, "the default UDP space: status 1 again");
}
