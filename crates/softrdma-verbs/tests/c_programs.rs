//! C programs compiled against Debian 12's `<infiniband/verbs.h>` and linked against Debian's
//! `libibverbs.so`, as any application is, then run over this library (first on the library
//! path as `libibverbs.so.1`): the inline functions of the header reach our code only through
//! the structure layouts and function-pointer slots it defines, so these check the ABI end to
//! end. Each program prints `ok` or names the first check that failed.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn lib() -> PathBuf {
    // `cargo test` builds the cdylib next to this test, in target/<profile>/deps/.
    let exe = std::env::current_exe().unwrap();
    let l = exe.parent().unwrap().join("libsoftrdma_verbs.so");
    assert!(l.exists(), "{} missing", l.display());
    l
}

/// Compiles `tests/c/NAME.c` and runs it over our library (60 s at most); returns its output.
fn run_c(name: &str) -> String {
    run_c_env(name, &[])
}

/// Compiles `tests/c/NAME.c` against Debian's header and library into a directory of its
/// own (`tag` tells runs of one test binary apart), beside a `libibverbs.so.1` that is ours;
/// returns the directory and the program.
fn compile_c(name: &str, tag: &str) -> (PathBuf, PathBuf) {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        panic!("<infiniband/verbs.h> missing: install Debian's libibverbs-dev (.ci/run does)");
    }
    let src = format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR"));
    let tmp = std::env::temp_dir().join(format!("softrdma-c-{name}-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let link = tmp.join("libibverbs.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(lib(), &link).unwrap();
    let exe = tmp.join(name);
    let cc = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "cc {src}: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    (tmp, exe)
}

/// [`run_c`] with environment variables.
fn run_c_env(name: &str, env: &[(&str, &str)]) -> String {
    let (tmp, exe) = compile_c(name, &env.len().to_string());
    let mut child = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &tmp)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name} did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(status.success(), "{name} failed ({status}): {text}");
    text
}

/// `ibv_query_device_ex`, `ibv_create_cq_ex` with `ibv_start_poll`/`ibv_next_poll`/
/// `ibv_wc_read_*`, `ibv_create_qp_ex` with every `ibv_wr_*` builder and setter softrdma has
/// (RC: WRITE, WRITE with imm, SEND with imm, inline SEND, READ, both atomics, SGE lists; UD:
/// `wr_set_ud_addr`), the errors `wr_complete` reports, what is `EOPNOTSUPP`, and `ibv_rereg_mr`
/// (bad input, a new range and PD).
#[test]
fn extended_verbs_from_c_over_the_debian_header() {
    let out = run_c("ex_verbs");
    assert!(out.lines().any(|l| l == "ok"), "{out}");
}

/// Bad input through the exported entry points and the inline verbs: NULL where the API
/// allows one (accepted) and where it does not (`EINVAL`), a QP modified out of order
/// (`EINVAL`, state unchanged), a WR with an lkey of another PD and an SGE past its MR (local
/// protection errors as completions), `ibv_resize_cq` out of range (`EINVAL`) and in range (the
/// CQ then holds more), a CQ overrun (`IBV_EVENT_CQ_ERR` on the pollable `async_fd`).
#[test]
fn bad_input_from_c_gets_an_errno_or_a_completion_error() {
    let out = run_c("bad_input");
    assert!(out.lines().any(|l| l == "ok"), "{out}");
}

/// `ibv_wr_complete` all or nothing (rxe's and mlx5's `wr_complete` roll the send queue back
/// on an error): a batch one WR longer than the send queue (`ENOSPC`, rxe's) and a batch whose second
/// WR is a misaligned atomic (`EINVAL`) post none of their WRs — no completion, no byte at the
/// peer — and a batch of exactly `max_send_wr` afterwards posts all.
#[test]
fn wr_complete_posts_a_batch_all_or_nothing() {
    let out = run_c("wr_batch");
    assert!(out.lines().any(|l| l == "ok"), "{out}");
}

/// One node per process with one loop over all of its sockets: two contexts of one process
/// are run by one `softrdma-node` thread (no loop thread per device), RC traffic between them
/// flows, and a context closed and opened again gets its address back and joins the same loop.
#[test]
fn the_contexts_of_a_process_are_one_node_on_one_loop() {
    let out = run_c("one_node");
    assert!(out.lines().any(|l| l == "ok"), "{out}");
}

/// `SOFTRDMA_PROGRESS=inline` (the application's polls turn the devices): the contexts are
/// ports of the process's node from `ibv_open_device` too — one `softrdma-node` thread, no
/// thread per device — and their busy polls turned them (`one_node.c` checks the node's
/// threads; the polls' turns are the driver's `node_loop` test's).
#[test]
fn inline_contexts_join_the_process_node_at_open() {
    let out = run_c_env("one_node", &[("SOFTRDMA_PROGRESS", "inline")]);
    assert!(out.lines().any(|l| l == "ok"), "{out}");
}

/// `SOFTRDMA_PROGRESS=thread`: the loop thread alone turns the devices, on the same node.
#[test]
fn thread_progress_contexts_are_one_node_too() {
    let out = run_c_env("one_node", &[("SOFTRDMA_PROGRESS", "thread")]);
    assert!(out.lines().any(|l| l == "ok"), "{out}");
}

/// Whether this process may create network namespaces (root).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    })
}

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A network namespace of this test's own, removed when dropped.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Addresses added to and removed from an interface while a context of its device is open
/// follow into its GID table and out (root: a namespace of the test's own with a veth pair;
/// skipped with a message otherwise): `addr_change.c` opens `softrdma_va`, the test adds
/// `10.23.0.9` to `va`, the program sees its GID appear (in the first free index after the
/// interface's own), the test removes it, the program sees it leave.
#[test]
fn interface_address_changes_follow_into_the_gid_table() {
    if !is_root() {
        eprintln!("skipped: creating a network namespace needs root");
        return;
    }
    let (tmp, exe) = compile_c("addr_change", "ns");
    let ns = Netns(format!("softrdma-wip-22-addrs-{}", std::process::id()));
    let n = ns.0.as_str();
    ip(&["netns", "add", n]);
    ip(&[
        "-n", n, "link", "add", "va", "type", "veth", "peer", "name", "vb",
    ]);
    ip(&["-n", n, "link", "set", "va", "up"]);
    ip(&["-n", n, "link", "set", "vb", "up"]);
    ip(&["-n", n, "addr", "add", "10.23.0.1/24", "dev", "va"]);
    let mut child = Command::new("ip")
        .args(["netns", "exec", n, "env"])
        .arg(format!("LD_LIBRARY_PATH={}", tmp.display()))
        .arg(&exe)
        .args(["softrdma_va", "10.23.0.9"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut seen = Vec::new();
    let mut expect = |prefix: &str| -> String {
        while let Ok(l) = rx.recv_timeout(Duration::from_secs(20)) {
            seen.push(l.clone());
            if l.starts_with(prefix) {
                return l;
            }
        }
        let _ = Command::new("kill").arg(child.id().to_string()).status();
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        panic!("no {prefix:?} line; got {seen:?}; stderr {err}");
    };
    expect("ready");
    ip(&["-n", n, "addr", "add", "10.23.0.9/24", "dev", "va"]);
    // GID 0 the link-local default, 1 the interface's 10.23.0.1 (and whatever IPv6 address
    // it had at open), then the new one.
    let added = expect("added ");
    let idx: u32 = added["added ".len()..].parse().unwrap();
    assert!(idx >= 2, "{added}");
    ip(&["-n", n, "addr", "del", "10.23.0.9/24", "dev", "va"]);
    expect("ok");
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&tmp);
}
