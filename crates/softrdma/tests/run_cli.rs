//! `softrdma run`: Debian 12's own, unmodified `ibv_devices`, `ibv_devinfo` and
//! `ibv_rc_pingpong` (package `ibverbs-utils`) over softrdma's `libibverbs.so.1`. Every test
//! names the loopback interface's device (`-d softrdma_lo`): a program's default device may be
//! the host's real interface, whose address no test may send to.
//!
//! The library is `target/<profile>/libsoftrdma_verbs.so`, built by `cargo test --workspace`
//! (or `cargo build -p softrdma-verbs`); `softrdma run` links it in as `libibverbs.so.1`. A
//! test whose Debian binary is not installed says so and passes; a missing library fails.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{finish, listening, text, Proc, BIN};

fn lib_built() {
    common::libs_built(&["libsoftrdma_verbs.so"]);
}

/// The Debian binary, or None (with a message) when ibverbs-utils is not installed.
fn debian(tool: &str) -> Option<String> {
    common::debian(tool, "ibverbs-utils")
}

fn run(args: &[&str]) -> Output {
    lib_built();
    Command::new(BIN).arg("run").args(args).output().unwrap()
}

#[test]
fn run_puts_the_library_first_on_the_library_path_and_says_so_with_v() {
    let out = Command::new(BIN)
        .args([
            "run",
            "-v",
            "--",
            "sh",
            "-c",
            "printf %s \"$LD_LIBRARY_PATH\"",
        ])
        .env("LD_LIBRARY_PATH", "/opt/previous")
        .output()
        .unwrap();
    lib_built();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let path = text(&out.stdout);
    let (first, rest) = path.split_once(':').unwrap();
    assert_eq!(
        rest, "/opt/previous",
        "the caller's path is kept after ours"
    );
    let lib = Path::new(first).join("libibverbs.so.1");
    assert!(lib.exists(), "{} does not exist", lib.display());
    let soname = Command::new("readelf").args(["-d"]).arg(&lib).output();
    if let Ok(o) = soname {
        assert!(
            text(&o.stdout).contains("[libibverbs.so.1]"),
            "{}",
            text(&o.stdout)
        );
    }
    let err = text(&out.stderr);
    assert!(err.contains(&format!("LD_LIBRARY_PATH={path}")), "{err}");
}

#[test]
fn run_fails_clearly_without_a_library() {
    let out = run(&["--lib-dir", "/nonexistent", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("has no libibverbs.so.1"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn debian_ibv_devices_lists_the_loopback_device() {
    let Some(tool) = debian("ibv_devices") else {
        return;
    };
    let out = run(&["--", &tool]);
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}{}", text(&out.stderr));
    // rxe's node GUID for the loopback's all-zero MAC.
    assert!(
        s.lines().any(
            |l| l.split_whitespace().collect::<Vec<_>>() == ["softrdma_lo", "020000fffe000000"]
        ),
        "{s}"
    );
}

#[test]
fn debian_ibv_devinfo_v_describes_the_loopback_device() {
    let Some(tool) = debian("ibv_devinfo") else {
        return;
    };
    let out = run(&["--", &tool, "-v", "-d", "softrdma_lo"]);
    let s = text(&out.stdout);
    assert!(out.status.success(), "{s}{}", text(&out.stderr));
    for want in [
        "hca_id:\tsoftrdma_lo",
        "node_guid:\t\t\t0200:00ff:fe00:0000",
        "phys_port_cnt:\t\t\t1",
        "state:\t\t\tPORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        // The loopback's MTU (65536) caps at IB's largest.
        "active_mtu:\t\t4096 (5)",
        "fe80::200:ff:fe00:0, RoCE v2",
        "::ffff:127.0.0.",
        "max_qp:\t\t\t\t65536",
    ] {
        assert!(s.contains(want), "missing {want:?} in:\n{s}");
    }
    // The loopback's IPv6 address is served too (GID 2), unless another process on this
    // host holds [::1]:4791 (a parallel test's device): then it is left out.
    if !s.contains("GID[  2]:\t\t::1, RoCE v2") {
        assert!(
            std::net::UdpSocket::bind("[::1]:4791").is_err(),
            "::1 is free but not in the GID table:\n{s}"
        );
    }
}

/// A network namespace of this test's own (root; skipped with a message otherwise) with a
/// veth pair, each end holding two IPv4 addresses and an IPv6 one; removed when dropped.
struct Netns(String);

impl Netns {
    fn create() -> Option<Netns> {
        if !nix_is_root() {
            eprintln!("skipped: creating a network namespace needs root");
            return None;
        }
        let ns = Netns(format!("softrdma-gids-{}", std::process::id()));
        let n = ns.0.as_str();
        let steps: &[&[&str]] = &[
            &["netns", "add", n],
            &["-n", n, "link", "set", "lo", "up"],
            // Fixed MACs: the link-local default GIDs (index 0) are then known.
            &[
                "-n",
                n,
                "link",
                "add",
                "va",
                "address",
                "02:22:00:00:00:01",
                "type",
                "veth",
                "peer",
                "name",
                "vb",
                "address",
                "02:22:00:00:00:02",
            ],
            &["-n", n, "link", "set", "va", "up"],
            &["-n", n, "link", "set", "vb", "up"],
            &["-n", n, "addr", "add", "10.22.0.1/24", "dev", "va"],
            &["-n", n, "addr", "add", "10.22.1.1/24", "dev", "va"],
            &["-n", n, "addr", "add", "fd22::1/64", "dev", "va", "nodad"],
            &["-n", n, "addr", "add", "10.22.0.2/24", "dev", "vb"],
            &["-n", n, "addr", "add", "10.22.1.2/24", "dev", "vb"],
            &["-n", n, "addr", "add", "fd22::2/64", "dev", "vb", "nodad"],
        ];
        for a in steps {
            let o = Command::new("ip").args(*a).output().unwrap();
            assert!(o.status.success(), "ip {a:?}: {}", text(&o.stderr));
        }
        // The kernel's link-local addresses (the default GIDs) can be bound once their
        // duplicate address detection is over (about a second after the link came up).
        let start = Instant::now();
        loop {
            let o = Command::new("ip")
                .args(["-n", n, "-6", "addr", "show", "scope", "link"])
                .output()
                .unwrap();
            let t = text(&o.stdout);
            if t.matches("inet6 fe80::").count() >= 2 && !t.contains("tentative") {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "DAD: {t}");
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(ns)
    }

    /// `softrdma run -- ARGS` inside the namespace.
    fn spawn(&self, args: &[&str]) -> Proc {
        // `ip netns exec` execs the program: the Proc is the program itself.
        Proc::spawn(
            Command::new("ip")
                .args(["netns", "exec", &self.0, BIN, "run", "--"])
                .args(args),
        )
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn nix_is_root() -> bool {
    // The effective uid, from /proc (no libc in this test).
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    })
}

/// Every address of an interface is in its device's GID table and served, as on rxe: in a
/// namespace of the test's own, `ibv_devinfo -v` lists the veth end's link-local default GID,
/// both IPv4 addresses and the IPv6 one; `ibv_rc_pingpong -g IDX` between the two ends (two
/// processes) works from each of GIDs 0 (link-local), 1, 2 and 3 — the QP sends from the address its
/// sgid_index names and receives at it — and both sides print the GID they used.
#[test]
fn debian_tools_see_and_use_every_address_of_an_interface() {
    let (Some(devinfo), Some(pingpong)) = (debian("ibv_devinfo"), debian("ibv_rc_pingpong")) else {
        return;
    };
    lib_built();
    let Some(ns) = Netns::create() else {
        return;
    };
    let (code, out, err) = finish(
        ns.spawn(&[&devinfo, "-v", "-d", "softrdma_va"]),
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    for want in [
        "GID[  1]:\t\t::ffff:10.22.0.1, RoCE v2",
        "GID[  2]:\t\t::ffff:10.22.1.1, RoCE v2",
        "GID[  3]:\t\tfd22::1, RoCE v2",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    // Index 0: the link-local default GID of the MAC (listed once, not again as an address).
    assert!(
        out.contains("GID[  0]:\t\tfe80::22:ff:fe00:1, RoCE v2"),
        "{out}"
    );
    assert!(!out.contains("GID[  4]"), "{out}");
    for (g, server_gid, client_gid) in [
        // Served in the veth end's scope (the GID carries none).
        ("0", "fe80::22:ff:fe00:1", "fe80::22:ff:fe00:2"),
        ("1", "::ffff:10.22.0.1", "::ffff:10.22.0.2"),
        ("2", "::ffff:10.22.1.1", "::ffff:10.22.1.2"),
        ("3", "fd22::1", "fd22::2"),
    ] {
        let port = common::tool_port().to_string();
        let args = |dev: &'static str| {
            vec![
                pingpong.clone(),
                "-d".into(),
                dev.to_string(),
                "-g".into(),
                g.to_string(),
                "-c".into(),
                "-n".into(),
                "50".into(),
                "-p".into(),
                port.clone(),
            ]
        };
        let sargs = args("softrdma_va");
        let server = ns.spawn(&sargs.iter().map(String::as_str).collect::<Vec<_>>());
        // The server's side channel listens in the namespace: its /proc/PID/net/tcp says so.
        let needle = format!(":{:04X}", port.parse::<u16>().unwrap());
        let start = Instant::now();
        while !std::fs::read_to_string(format!("/proc/{}/net/tcp", server.id())).is_ok_and(|t| {
            t.lines().any(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                c.len() > 3 && c[1].ends_with(&needle) && c[3] == "0A"
            })
        }) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the server never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut cargs = args("softrdma_vb");
        cargs.push("10.22.0.1".into());
        let client = finish(
            ns.spawn(&cargs.iter().map(String::as_str).collect::<Vec<_>>()),
            Duration::from_secs(60),
        );
        let server = finish(server, Duration::from_secs(30));
        for (who, (code, out, err), mine, theirs) in [
            ("server", server, server_gid, client_gid),
            ("client", client, client_gid, server_gid),
        ] {
            assert_eq!(code, Some(0), "-g {g} {who}: {out}{err}");
            assert!(out.contains("50 iters in"), "-g {g} {who}: {out}{err}");
            let line = |what: &str| {
                out.lines()
                    .find(|l| l.contains(what))
                    .unwrap_or("")
                    .to_string()
            };
            assert!(
                line("local address").ends_with(&format!("GID {mine}")),
                "-g {g} {who}: {out}"
            );
            assert!(
                line("remote address").ends_with(&format!("GID {theirs}")),
                "-g {g} {who}: {out}"
            );
        }
    }
}

/// Each thread of process `pid` as `name state wchan`, from /proc (for a stuck process).
fn thread_states(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return "(gone)".into();
    };
    let read = |p: std::path::PathBuf, f: &str| {
        std::fs::read_to_string(p.join(f))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    tasks
        .flatten()
        .map(|t| {
            let stat = read(t.path(), "stat");
            let state = stat
                .rsplit(") ")
                .next()
                .and_then(|r| r.split(' ').next())
                .unwrap_or("?")
                .to_string();
            format!(
                "{} {} {}",
                read(t.path(), "comm"),
                state,
                read(t.path(), "wchan")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Starts `args` as the server, waits until it listens on TCP `port` (the tools' side
/// channel, the value after `-p` in `args`), then runs `args` with `127.0.0.1` appended as
/// the client, both with `env`; the two outcomes (exit code, stdout, stderr), server first.
/// A server that could not listen on its port (taken meanwhile by another process: it says
/// `Couldn't listen to port` and ends) is started again on another one, twice at most.
fn server_then_client(
    args: &[&str],
    port: &str,
    env: &[(&str, &str)],
) -> [(Option<i32>, String, String); 2] {
    let spawn =
        |args: &[String]| Proc::spawn(Command::new(BIN).args(args).envs(env.iter().copied()));
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let at = args.iter().position(|a| a == "-p").unwrap() + 1;
    assert_eq!(args[at], port);
    let mut attempts = 0;
    let server = loop {
        attempts += 1;
        let port: u16 = args[at].parse().unwrap();
        let mut server = spawn(&args);
        let start = Instant::now();
        // A server that ended, or one stuck before it listens, is reported with what it
        // printed and (when stuck) where each of its threads waits, so that a failure in CI
        // says why rather than only that. The limit is far above the second or so a server
        // takes to listen on a loaded 2-core machine.
        let listened = loop {
            if listening(port) {
                break true;
            }
            if server.exited() {
                break false;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let threads = thread_states(server.id());
                let (_, out, err) = finish(server, Duration::ZERO);
                panic!("the server never listened on {port} in 60 s; its threads: {threads}; it printed: {out}{err}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if listened {
            break server;
        }
        let (code, out, err) = finish(server, Duration::from_secs(1));
        if !err.contains("Couldn't listen to port") || attempts == 3 {
            panic!("the server ended before it listened on {port} (exit {code:?}): {out}{err}");
        }
        eprintln!("port {port} was taken before the server listened: another one");
        args[at] = common::tool_port().to_string();
    };
    let mut client_args = args.clone();
    client_args.push("127.0.0.1".into());
    let client = finish(spawn(&client_args), Duration::from_secs(60));
    let server = finish(server, Duration::from_secs(30));
    [server, client]
}

/// Server and client of `tool` (ibv_rc_pingpong, ibv_ud_pingpong), two processes on this host
/// over softrdma (the second device takes a free 127.0.0.x: the first holds the loopback's
/// address), `-c` validating the data.
fn pingpong(tool: &str, extra: &[&str]) {
    pingpong_env(tool, extra, &[]);
}

/// [`pingpong`] with environment variables for both processes.
fn pingpong_env(tool: &str, extra: &[&str], env: &[(&str, &str)]) {
    let Some(tool) = debian(tool) else {
        return;
    };
    lib_built();
    let port = common::tool_port().to_string();
    let mut common = vec![
        "run",
        "--",
        &tool,
        "-d",
        "softrdma_lo",
        "-g",
        "1",
        "-c",
        "-n",
        "100",
        "-p",
        &port,
    ];
    common.extend_from_slice(extra);
    let [(sc, so, se), (cc, co, ce)] = server_then_client(&common, &port, env);
    for (who, code, out, err) in [("server", sc, &so, &se), ("client", cc, &co, &ce)] {
        assert_eq!(code, Some(0), "{who}: {out}{err}");
        assert!(out.contains("100 iters in"), "{who}: {out}{err}");
        assert!(!err.contains("Invalid data"), "{who}: {err}");
        assert!(out.contains("GID ::ffff:127.0.0."), "{who}: {out}");
    }
    // The two ends used two addresses, each seeing the other's.
    let local = |o: &str| {
        o.lines()
            .find(|l| l.contains("local address"))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap()
            .to_string()
    };
    assert_ne!(local(&so), local(&co));
}

#[test]
fn debian_ibv_rc_pingpong_two_processes_busy_polling() {
    pingpong("ibv_rc_pingpong", &[]);
}

#[test]
fn debian_ibv_rc_pingpong_two_processes_with_completion_channels() {
    pingpong("ibv_rc_pingpong", &["-e"]);
}

/// `-N`: the QP made by `ibv_create_qp_ex` with send ops, every message posted through
/// `ibv_qp_ex`'s `ibv_wr_start`/`ibv_wr_send`/`ibv_wr_set_sge`/`ibv_wr_complete`.
#[test]
fn debian_ibv_rc_pingpong_new_send_api() {
    pingpong("ibv_rc_pingpong", &["-N"]);
}

#[test]
fn debian_ibv_rc_pingpong_new_send_api_with_completion_channels() {
    pingpong("ibv_rc_pingpong", &["-N", "-e", "-s", "100"]);
}

/// `SOFTRDMA_PROGRESS=inline`: an alias of the default (the application's CQ polls turn the
/// device, the node's loop thread when nobody polls); kept so that scripts that set it work.
#[test]
fn debian_ibv_rc_pingpong_inline_progress() {
    pingpong_env(
        "ibv_rc_pingpong",
        &["-N"],
        &[("SOFTRDMA_PROGRESS", "inline")],
    );
}

#[test]
fn debian_ibv_ud_pingpong_inline_progress_with_completion_channels() {
    pingpong_env(
        "ibv_ud_pingpong",
        &["-e", "-s", "1024"],
        &[("SOFTRDMA_PROGRESS", "inline")],
    );
}

#[test]
fn debian_perftest_ib_write_bw_inline_progress() {
    perftest_env("ib_write_bw", &[("SOFTRDMA_PROGRESS", "inline")]);
}

/// `SOFTRDMA_PROGRESS=thread`: the node's loop thread alone turns the devices (the
/// comparison the measurements make).
#[test]
fn debian_perftest_ib_send_lat_thread_progress() {
    perftest_env("ib_send_lat", &[("SOFTRDMA_PROGRESS", "thread")]);
}

#[test]
fn debian_ibv_rc_pingpong_thread_progress_with_completion_channels() {
    pingpong_env(
        "ibv_rc_pingpong",
        &["-e"],
        &[("SOFTRDMA_PROGRESS", "thread")],
    );
}

#[test]
fn debian_ibv_ud_pingpong_two_processes() {
    pingpong("ibv_ud_pingpong", &[]);
}

#[test]
fn debian_ibv_ud_pingpong_two_processes_with_completion_channels() {
    pingpong("ibv_ud_pingpong", &["-e", "-s", "1024"]);
}

/// perftest's `tool` (Debian's package `perftest`, unmodified), server and client on this host,
/// 100 iterations on the loopback device with GID index 1; both report their results line.
fn perftest(tool: &str) {
    perftest_env(tool, &[]);
}

/// [`perftest`] with environment variables for both processes.
fn perftest_env(tool: &str, env: &[(&str, &str)]) {
    let Some(tool) = debian(tool) else {
        return;
    };
    lib_built();
    let port = common::tool_port().to_string();
    let common = vec![
        "run",
        "--",
        &tool,
        "-d",
        "softrdma_lo",
        "-x",
        "1",
        "-n",
        "100",
        "-p",
        &port,
    ];
    let [(sc, so, se), (cc, co, ce)] = server_then_client(&common, &port, env);
    for (who, code, out, err) in [("server", sc, &so, &se), ("client", cc, &co, &ce)] {
        assert_eq!(code, Some(0), "{who}: {out}{err}");
        assert!(out.contains("Link type       : Ethernet"), "{who}: {out}");
        assert!(out.contains("255:255:127:00:00:"), "{who}: {out}");
    }
    // perftest 4.5 turns its `ibv_wr_*` path on only for mlx5 and EFA devices (by vendor
    // part id, `verify_params_with_device_context`); on any other device, rxe's included, its
    // default is `ibv_post_send`, as here. Say so, so that a change is noticed.
    assert!(
        co.contains("ibv_wr* API     : OFF"),
        "perftest's post path changed: {co}"
    );
    // The client (bandwidth tests: both) prints a results row starting with the size and 100.
    let row = co
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[0].parse::<u64>().is_ok() && f[1] == "100");
    assert!(row.is_some(), "no results row: {co}");
}

#[test]
fn debian_perftest_ib_send_bw() {
    perftest("ib_send_bw");
}

#[test]
fn debian_perftest_ib_write_bw() {
    perftest("ib_write_bw");
}

#[test]
fn debian_perftest_ib_read_bw() {
    perftest("ib_read_bw");
}

#[test]
fn debian_perftest_ib_send_lat() {
    perftest("ib_send_lat");
}

#[test]
fn debian_ibv_srq_pingpong_two_processes() {
    pingpong("ibv_srq_pingpong", &[]);
}

#[test]
fn debian_ibv_srq_pingpong_two_processes_with_completion_channels() {
    pingpong("ibv_srq_pingpong", &["-e"]);
}

#[test]
fn debian_perftest_ib_atomic_bw() {
    perftest("ib_atomic_bw");
}

#[test]
fn debian_perftest_ib_read_lat() {
    perftest("ib_read_lat");
}

#[test]
fn debian_perftest_ib_write_lat() {
    perftest("ib_write_lat");
}
