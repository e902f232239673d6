//! `softrdma run` with softrdma's `librdmacm.so.1` (crate `softrdma-rdmacm`) beside its
//! `libibverbs.so.1`: Debian 12's own, unmodified RDMA CM programs (packages `rdmacm-utils`,
//! `perftest`) as two processes on this host.
//!
//! Every test names its server's address: a 127.0.23.x of its own (an RDMA CM bind to a
//! loopback address opens the loopback device at exactly that address), or for perftest's
//! `-R` server, which binds the wildcard, `SOFTRDMA_LOOPBACK_ADDR`. Clients take the loopback
//! device wherever it opens (127.0.0.1, or the first free 127.0.0.x).
//!
//! The libraries are `target/<profile>/libsoftrdma_{verbs,rdmacm}.so`, built by `cargo test
//! --workspace` (or `cargo build -p softrdma-verbs -p softrdma-rdmacm`). A test whose Debian
//! binary is not installed says so and passes; a missing library fails.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{finish, Proc, BIN};

fn libs_built() {
    common::libs_built(&["libsoftrdma_verbs.so", "libsoftrdma_rdmacm.so"]);
}

/// The Debian binary, or None (with a message) when it is not installed.
fn debian(tool: &str) -> Option<String> {
    common::debian(tool, "rdmacm-utils perftest")
}

/// `softrdma run -- args…`, or with `args[0] == BIN` softrdma's own tool (`softrdma rping`).
fn spawn(args: &[&str], env: &[(&str, &str)]) -> Proc {
    libs_built();
    let mut cmd = Command::new(BIN);
    match args.split_first() {
        Some((&first, rest)) if first == BIN => cmd.args(rest),
        _ => cmd.arg("run").arg("--").args(args),
    };
    Proc::spawn(cmd.envs(env.iter().copied()))
}

/// What a failed pair left, for the failure message: both programs' exit codes and output,
/// and the time since the server was started.
fn both(client: &Ran, server: &Ran, since: Instant) -> String {
    format!(
        "after {:.1} s\nclient ({:?}):\n{}{}\nserver ({:?}):\n{}{}",
        since.elapsed().as_secs_f64(),
        client.0,
        client.1,
        client.2,
        server.0,
        server.1,
        server.2
    )
}

/// A finished program: exit code (None: killed), stdout, stderr.
type Ran = (Option<i32>, String, String);

/// Whether a UDP socket is bound at `ip`:4791 (the device of a server's bound address), from
/// /proc/net/udp.
fn device_bound(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    let needle = format!("{:02X}{:02X}{:02X}{:02X}:12B7", o[3], o[2], o[1], o[0]);
    std::fs::read_to_string("/proc/net/udp").is_ok_and(|s| {
        s.lines()
            .any(|l| l.split_whitespace().nth(1) == Some(needle.as_str()))
    })
}

/// Starts the server, waits until its device is bound at `ip` (it listens right after), and
/// runs the client; both must exit 0 (a `forever` server must still be running when the
/// client is done, and is then stopped). Returns (server stdout, client stdout).
fn pair(
    ip: Ipv4Addr,
    server: &[&str],
    client: &[&str],
    env: &[(&str, &str)],
    forever: bool,
) -> (String, String) {
    let start = Instant::now();
    let mut s = wait_bound(spawn(server, env), ip);
    // The listen follows the bind in the same call sequence (a wildcard listener's devices
    // open after its listen).
    std::thread::sleep(Duration::from_millis(500));
    let c = finish(spawn(client, &[]), LIMIT);
    if forever {
        let ran = !s.exited();
        s.kill();
        let s = finish(s, LIMIT);
        assert!(ran, "the server exited: {}", both(&c, &s, start));
        assert_eq!(c.0, Some(0), "{}", both(&c, &s, start));
        return (s.1, c.1);
    }
    // A client that failed leaves a server that may wait for it for ever: a short grace.
    let s = finish(s, if c.0 == Some(0) { LIMIT } else { GRACE });
    assert_eq!(c.0, Some(0), "{}", both(&c, &s, start));
    assert_eq!(s.0, Some(0), "{}", both(&c, &s, start));
    (s.1, c.1)
}

/// Waits until the server's device is bound at `ip` (fails at once when it exited).
fn wait_bound(mut s: Proc, ip: Ipv4Addr) -> Proc {
    while !device_bound(ip) {
        if s.exited() || s.elapsed() > Duration::from_secs(20) {
            let (c, o, e) = finish(s, Duration::ZERO);
            panic!("the server never bound {ip}:4791 ({c:?}): {o}{e}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    s
}

const LIMIT: Duration = Duration::from_secs(60);

/// How long a server may take to end after its client failed.
const GRACE: Duration = Duration::from_secs(5);

#[test]
fn debian_rping_two_processes_validating_ten_pings() {
    let Some(rping) = debian("rping") else { return };
    let a = "127.0.23.11";
    let (so, co) = pair(
        a.parse().unwrap(),
        &[&rping, "-s", "-v", "-a", a, "-p", "7811", "-C", "10"],
        &[&rping, "-c", "-v", "-V", "-a", a, "-p", "7811", "-C", "10"],
        &[],
        false,
    );
    for i in 0..10 {
        let line = format!("ping data: rdma-ping-{i}: ");
        assert!(co.contains(&line), "client: {co}");
        assert!(so.contains(&format!("server {line}")), "server: {so}");
    }
}

#[test]
fn debian_ucmatose_two_processes_two_connections() {
    let Some(t) = debian("ucmatose") else { return };
    let a = "127.0.23.12";
    let (so, co) = pair(
        a.parse().unwrap(),
        &[&t, "-b", a, "-p", "7812", "-c", "2", "-C", "10"],
        &[&t, "-s", a, "-p", "7812", "-c", "2", "-C", "10"],
        &[],
        false,
    );
    for o in [&so, &co] {
        assert!(o.contains("data transfers complete"), "{o}");
        assert!(o.contains("return status 0"), "{o}");
    }
}

#[test]
fn debian_udaddy_two_processes_sidr_and_ud_sends() {
    let Some(t) = debian("udaddy") else { return };
    // udaddy has no port option: 7174 on an address of its own.
    let a = "127.0.23.13";
    let (so, co) = pair(
        a.parse().unwrap(),
        &[&t, "-b", a, "-C", "10"],
        &[&t, "-s", a, "-C", "10"],
        &[],
        false,
    );
    for o in [&so, &co] {
        assert!(o.contains("data transfers complete"), "{o}");
        assert!(o.contains("return status 0"), "{o}");
    }
}

#[test]
fn debian_cmtime_two_processes_fifty_connections() {
    let Some(t) = debian("cmtime") else { return };
    let a = "127.0.23.14";
    let (_, co) = pair(
        a.parse().unwrap(),
        &[&t, "-b", a, "-p", "7814", "-c", "50"],
        &[&t, "-s", a, "-p", "7814", "-c", "50"],
        &[],
        // cmtime's server serves until it is stopped.
        true,
    );
    for step in [
        "create id",
        "resolve addr",
        "resolve route",
        "connect",
        "disconnect",
    ] {
        assert!(co.contains(step), "{co}");
    }
}

#[test]
fn debian_rdma_server_and_rdma_client_synchronous_endpoints() {
    let (Some(s), Some(c)) = (debian("rdma_server"), debian("rdma_client")) else {
        return;
    };
    let a = "127.0.23.15";
    let (so, co) = pair(
        a.parse().unwrap(),
        &[&s, "-s", a, "-p", "7815"],
        &[&c, "-s", a, "-p", "7815"],
        &[],
        false,
    );
    assert!(so.contains("rdma_server: end 0"), "{so}");
    assert!(co.contains("rdma_client: end 0"), "{co}");
}

/// Mixed: Debian's rping over our libraries against `softrdma rping` (softrdma's own RDMA CM
/// tool), each as server and as client.
#[test]
fn debian_rping_against_softrdma_rping_both_directions() {
    let Some(rping) = debian("rping") else { return };
    let a = "127.0.23.21";
    let (so, co) = pair(
        a.parse().unwrap(),
        &[BIN, "rping", "-s", "-v", "-a", a, "-p", "7821", "-C", "10"],
        &[&rping, "-c", "-v", "-V", "-a", a, "-p", "7821", "-C", "10"],
        &[],
        false,
    );
    assert!(co.contains("ping data: rdma-ping-9: "), "{co}");
    assert!(so.contains("server ping data: rdma-ping-9: "), "{so}");
    let a = "127.0.23.22";
    let (so, co) = pair(
        a.parse().unwrap(),
        &[&rping, "-s", "-v", "-a", a, "-p", "7822", "-C", "10"],
        &[
            BIN, "rping", "-c", "-v", "-V", "-a", a, "-p", "7822", "-C", "10",
        ],
        &[],
        false,
    );
    assert!(co.contains("ping data: rdma-ping-9: "), "{co}");
    assert!(so.contains("server ping data: rdma-ping-9: "), "{so}");
}

/// perftest's `tool -R` (connection through the RDMA CM), 500 iterations; the server binds
/// the wildcard, so `SOFTRDMA_LOOPBACK_ADDR` names its loopback address.
///
/// perftest connects twice (parameter exchange, then the test's QP) and its server listens
/// anew in between, after a handshake that lets the client go on at once: a client whose
/// second REQ wins that race is rejected with reason 8 (invalid service ID), as the kernel's
/// CM rejects it (captured: REQ, REP, RTU, REQ 4 ms later, REJ). softrdma resolves
/// addresses and routes in microseconds, so the race is often lost here, and the more so
/// under load, when the scheduler decides it (18 attempts of 38 at load 15 on 2 cores; with
/// the delay below, none of 20).
/// perftest's client retries such a connect, but not Debian 12's (4.5+0.17): its retry
/// reuses the ids it has just destroyed, fails at once (`Failed to destroy RDMA CM ID
/// number 0`), and leaves its server waiting for ever (fixed upstream in perftest 26.04,
/// commit 3d9d8d0). That race is the tools' own, outside the code under test, so the client
/// gives the server time: `SOFTRDMA_CONNECT_DELAY_MS` (our librdmacm's test aid, as in the
/// lab's `librdmacm_send_bw_guest_server`) holds each REQ back; and a run that loses all the
/// same (the client's REJ 8, nothing else: a server not scheduled for that long) is repeated
/// on another port, its server killed at once, up to `ATTEMPTS` times. Any other failure
/// fails at once with both programs' output.
fn perftest_r(tool: &str, a: &str, port: u16) {
    const ATTEMPTS: u16 = 10;
    const CONNECT_DELAY_MS: &str = "200";
    let Some(t) = debian(tool) else { return };
    let start = Instant::now();
    for attempt in 0..ATTEMPTS {
        let port = (port + 100 * attempt).to_string();
        let s = spawn(
            &[&t, "-R", "-d", "softrdma_lo", "-n", "500", "-p", &port],
            &[("SOFTRDMA_LOOPBACK_ADDR", a)],
        );
        let s = wait_bound(s, a.parse().unwrap());
        std::thread::sleep(Duration::from_millis(500));
        let c = finish(
            spawn(
                &[&t, "-R", "-d", "softrdma_lo", "-n", "500", "-p", &port, a],
                &[("SOFTRDMA_CONNECT_DELAY_MS", CONNECT_DELAY_MS)],
            ),
            LIMIT,
        );
        let lost = c.0 != Some(0) && c.2.contains("RDMA_CM_EVENT_REJECTED; error: 8.");
        if lost && attempt + 1 < ATTEMPTS {
            drop(s);
            eprintln!("{tool}: lost perftest's re-listen race (REJ 8), again");
            continue;
        }
        let s = finish(s, if c.0 == Some(0) { LIMIT } else { GRACE });
        let attempts = attempt + 1;
        assert_eq!(c.0, Some(0), "attempt {attempts}: {}", both(&c, &s, start));
        assert_eq!(s.0, Some(0), "attempt {attempts}: {}", both(&c, &s, start));
        for o in [&s.1, &c.1] {
            assert!(o.contains("rdma_cm QPs\t : ON"), "{o}");
            assert!(o.contains(" 500 "), "{o}");
        }
        return;
    }
}

#[test]
fn debian_ib_send_bw_rdma_cm() {
    perftest_r("ib_send_bw", "127.0.23.16", 7816);
}

#[test]
fn debian_ib_write_bw_rdma_cm() {
    perftest_r("ib_write_bw", "127.0.23.17", 7817);
}

#[test]
fn debian_ib_read_bw_rdma_cm() {
    perftest_r("ib_read_bw", "127.0.23.18", 7818);
}

#[test]
fn debian_ib_send_lat_rdma_cm() {
    perftest_r("ib_send_lat", "127.0.23.19", 7819);
}

/// A C program of ours over the libraries: the event channel's `fd` polls, honours
/// `O_NONBLOCK` (EAGAIN with nothing queued), and wakes for ADDR_RESOLVED; the id then shows
/// its device and addresses; `rdma_create_qp_ex` makes a QP (and its CQs) with a PD-only mask
/// and refuses a create flag rxe lacks (as `ibv_create_qp_ex` does); rsockets calls fail with ENOSYS; `rdma_event_str` names
/// events.
#[test]
fn event_channel_fd_polls_and_honours_o_nonblock() {
    if !Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        eprintln!("SKIPPED: <rdma/rdma_cma.h> missing (apt-get install librdmacm-dev)");
        return;
    }
    let tmp = std::env::temp_dir().join(format!("softrdma-rdmacm-chan-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let src = tmp.join("chan.c");
    std::fs::write(
        &src,
        r#"#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
int main(void) {
    struct rdma_event_channel *ch = rdma_create_event_channel();
    if (!ch) { perror("channel"); return 1; }
    fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
    struct rdma_cm_event *ev;
    int r = rdma_get_cm_event(ch, &ev);
    printf("empty %d %s\n", r, r ? strerror(errno) : "-");
    struct pollfd p = { .fd = ch->fd, .events = POLLIN };
    printf("poll0 %d\n", poll(&p, 1, 0));
    struct rdma_cm_id *id;
    if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) { perror("create_id"); return 1; }
    struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(7820) };
    inet_pton(AF_INET, "127.0.23.20", &dst.sin_addr);
    if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000)) { perror("resolve"); return 1; }
    printf("poll1 %d\n", poll(&p, 1, 5000));
    if (rdma_get_cm_event(ch, &ev)) { perror("get"); return 1; }
    printf("event %s %d same %d\n", rdma_event_str(ev->event), ev->status, ev->id == id);
    rdma_ack_cm_event(ev);
    char s[64], d[64];
    inet_ntop(AF_INET, &((struct sockaddr_in *)rdma_get_local_addr(id))->sin_addr, s, sizeof s);
    inet_ntop(AF_INET, &((struct sockaddr_in *)rdma_get_peer_addr(id))->sin_addr, d, sizeof d);
    printf("verbs %d port %d src %.8s dst %s dport %d\n", id->verbs != NULL, id->port_num, s, d,
           ntohs(rdma_get_dst_port(id)));
    struct ibv_qp_init_attr_ex ax;
    memset(&ax, 0, sizeof ax);
    ax.qp_type = IBV_QPT_RC;
    ax.cap.max_send_wr = ax.cap.max_recv_wr = 4;
    ax.cap.max_send_sge = ax.cap.max_recv_sge = 1;
    ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    ax.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
    ax.pd = ibv_alloc_pd(id->verbs);
    r = rdma_create_qp_ex(id, &ax);
    printf("qp_ex flags %d %s\n", r, r ? strerror(errno) : "-");
    ax.comp_mask = IBV_QP_INIT_ATTR_PD;
    ax.create_flags = 0;
    r = rdma_create_qp_ex(id, &ax);
    printf("qp_ex %d qp %d cqs %d pd %d\n", r, id->qp != NULL && id->qp->qp_num > 0,
           id->send_cq != NULL && id->recv_cq_channel != NULL, id->pd == ax.pd);
    rdma_destroy_qp(id);
    printf("destroyed qp %d\n", id->qp == NULL);
    r = rsocket(AF_INET, SOCK_STREAM, 0);
    printf("rsocket %d %s\n", r, strerror(errno));
    printf("destroy %d\n", rdma_destroy_id(id));
    rdma_destroy_event_channel(ch);
    return 0;
}
"#,
    )
    .unwrap();
    let exe = tmp.join("chan");
    let st = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .status()
        .unwrap();
    assert!(st.success(), "cc failed");
    let c = spawn(&[exe.to_str().unwrap()], &[]);
    let (code, out, err) = finish(c, LIMIT);
    let _ = std::fs::remove_dir_all(&tmp);
    assert_eq!(code, Some(0), "{out}{err}");
    let want = [
        "empty -1 Resource temporarily unavailable",
        "poll0 0",
        "poll1 1",
        "event RDMA_CM_EVENT_ADDR_RESOLVED 0 same 1",
        "verbs 1 port 1 src 127.0.0. dst 127.0.23.20 dport 7820",
        "qp_ex flags -1 Operation not supported",
        "qp_ex 0 qp 1 cqs 1 pd 1",
        "destroyed qp 1",
        "rsocket -1 Function not implemented",
        "destroy 0",
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), want, "{err}");
}

/// The harness itself: a program spawned by a test that then fails is killed and reaped when
/// the test unwinds (a `Child` alone is not), so a failed test leaves nothing running that
/// holds its addresses or ports for the next run.
#[test]
fn a_failed_test_leaves_no_program_running() {
    let p = Proc::spawn(Command::new("sleep").arg("600"));
    let pid = p.id();
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _server = p;
        panic!("a failed assertion (expected by this test)");
    }));
    assert!(failed.is_err());
    // Reaped too: a zombie would still have its /proc entry.
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} still there after the test failed"
    );
}

/// The harness: waiting for a program's line (`common::line_after`, as the SRP tests wait
/// for srpt's `add_target:`) ends at its limit with what the program printed, when the
/// program is stuck before that line, instead of hanging the test.
#[test]
fn a_program_stuck_before_its_line_fails_the_wait_in_time() {
    let mut c = Command::new("sh")
        .args(["-c", "echo starting; exec sleep 600"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let got = common::line_after(
        c.stdout.take().unwrap(),
        "ready",
        Duration::from_millis(500),
    );
    let _ = c.kill();
    let _ = c.wait();
    let want = common::NoLine {
        ended: false,
        seen: vec!["starting".to_string()],
    };
    assert_eq!(got, Err(want));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}
