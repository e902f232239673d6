//! Helpers of the tests that run programs as processes: Debian's unmodified ones over
//! softrdma's drop-in libraries with `softrdma run` (`run_cli.rs`: libibverbs;
//! `run_rdmacm_cli.rs`: librdmacm), and `softrdma`'s own tools; written once.

// Each test file uses a subset.
#![allow(dead_code)]

use std::io::Read;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// The `softrdma` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_softrdma");

/// Fails unless the libraries `libs` (`libsoftrdma_verbs.so`…) are built beside the binary
/// (`target/<profile>/`, or `deps/` when only `cargo test` built them).
pub fn libs_built(libs: &[&str]) {
    let dir = Path::new(BIN).parent().unwrap();
    for lib in libs {
        assert!(
            dir.join(lib).exists() || dir.join("deps").join(lib).exists(),
            "{}/{lib} is missing: build it with `cargo build -p softrdma-verbs -p \
             softrdma-rdmacm` (`cargo test --workspace` does)",
            dir.display()
        );
    }
}

/// The Debian binary `/usr/bin/TOOL`, or None (with a message naming the `packages` to
/// install) when it is not installed: the test then passes without running.
pub fn debian(tool: &str, packages: &str) -> Option<String> {
    let p = format!("/usr/bin/{tool}");
    if Path::new(&p).exists() {
        Some(p)
    } else {
        eprintln!("SKIPPED: {p} is not installed (apt-get install {packages})");
        None
    }
}

/// Output bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Waits for `c` at most `limit` (then kills it): its exit code (None if killed), stdout and
/// stderr (`timed out` appended when killed).
pub fn finish(mut c: Child, limit: Duration) -> (Option<i32>, String, String) {
    let start = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            let (mut o, mut e) = (String::new(), String::new());
            c.stdout.take().unwrap().read_to_string(&mut o).unwrap();
            c.stderr.take().unwrap().read_to_string(&mut e).unwrap();
            return (st.code(), o, e);
        }
        if start.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            let (mut o, mut e) = (String::new(), String::new());
            let _ = c.stdout.take().unwrap().read_to_string(&mut o);
            let _ = c.stderr.take().unwrap().read_to_string(&mut e);
            return (None, o, format!("{e}\ntimed out"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A TCP port for a Debian tool's side channel (`-p`), free on every address right now.
///
/// Not one the kernel hands out: a port from `bind(…:0)`, closed again at once, is in the
/// ephemeral range (32768–60999), where any process's next `connect()` (another test's
/// client) may take it as its local port before the tool's server binds it, and the server
/// then ends with `Couldn't listen to port` (which the run_cli tests once reported only as
/// "the server never listened"). These come from below that range, from a start that
/// differs by process (a second test binary, another checkout's run) and then one by one,
/// each checked free on 0.0.0.0 and [::] (where the tools listen).
pub fn tool_port() -> u16 {
    const LO: u16 = 20_000;
    const SPAN: u16 = 12_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = (std::process::id() % u32::from(SPAN)) as u16;
    for _ in 0..SPAN {
        let k = NEXT.fetch_add(7, Ordering::Relaxed);
        let port = LO + base.wrapping_add(k) % SPAN;
        // A host without IPv6 cannot bind [::] at all: that is not a port in use.
        let free = |a: &str| match std::net::TcpListener::bind(format!("{a}:{port}")) {
            Ok(_) => true,
            Err(e) => e.kind() != std::io::ErrorKind::AddrInUse,
        };
        if free("0.0.0.0") && free("[::]") {
            return port;
        }
    }
    panic!("no free TCP port in {LO}..{}", LO + SPAN);
}

/// A finished process: exit code (-1 when a signal ended it), stdout, stderr.
pub struct Run {
    pub code: i32,
    pub out: String,
    pub err: String,
}

/// [`finish`] as a [`Run`]; a process still running at `limit` (killed) fails the test, with
/// what it printed.
pub fn finish_run(c: Child, limit: Duration) -> Run {
    let (code, out, err) = finish(c, limit);
    assert!(
        code.is_some() || !err.ends_with("\ntimed out"),
        "did not finish within {limit:?}: {out}{err}"
    );
    Run {
        code: code.unwrap_or(-1),
        out,
        err,
    }
}

/// Whether something listens on TCP `port` (any address), from /proc/net/tcp{,6}.
pub fn listening(port: u16) -> bool {
    let needle = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|s| {
            s.lines().any(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                c.len() > 3 && c[1].ends_with(&needle) && c[3] == "0A"
            })
        })
    })
}
