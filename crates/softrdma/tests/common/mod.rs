//! Helpers of the tests that run programs as processes: Debian's unmodified ones over
//! softrdma's drop-in libraries with `softrdma run` (`run_cli.rs`: libibverbs;
//! `run_rdmacm_cli.rs`: librdmacm), and `softrdma`'s own tools; written once.

// Each test file uses a subset.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::io::{BufRead, Read};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::mpsc;
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

/// A spawned program of a test: killed (SIGKILL) and reaped when dropped, so that a failed
/// assertion or a panic leaves no process behind holding its ports and addresses (Rust's
/// `Child` is not killed on drop). Its stdout and stderr are read on threads from the start:
/// a program that prints more than a pipe holds never blocks on it while the test waits.
pub struct Proc {
    child: Child,
    out: Option<mpsc::Receiver<String>>,
    err: Option<mpsc::Receiver<String>>,
    started: Instant,
}

impl Proc {
    /// Spawns `cmd` with its stdout and stderr piped to the test.
    pub fn spawn(cmd: &mut Command) -> Proc {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let out = drain(child.stdout.take().unwrap());
        let err = drain(child.stderr.take().unwrap());
        Proc {
            child,
            out: Some(out),
            err: Some(err),
            started: Instant::now(),
        }
    }

    /// Whether it has exited (reaped then).
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// How long since it was spawned.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Kills (SIGKILL) and reaps it, if it is still running.
    pub fn kill(&mut self) {
        if self.child.try_wait().is_ok_and(|st| st.is_none()) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// What it printed so far on (stdout, stderr); called once it has exited. A grandchild
    /// that inherited a pipe could keep it open forever: its text is given up after a few
    /// seconds, marked as such, rather than waited for.
    fn output(&mut self) -> (String, String) {
        let take = |r: Option<mpsc::Receiver<String>>| {
            r.map_or_else(String::new, |r| {
                r.recv_timeout(Duration::from_secs(5))
                    .unwrap_or_else(|_| "(output still open after its exit: not read)".into())
            })
        };
        (take(self.out.take()), take(self.err.take()))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads `pipe` to its end on a thread; the text arrives on the channel.
fn drain(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = pipe.read_to_end(&mut b);
        let _ = tx.send(text(&b));
    });
    rx
}

/// Waits for `p` at most `limit` (then kills it): its exit code (None if killed), stdout and
/// stderr (`timed out` appended when killed).
pub fn finish(mut p: Proc, limit: Duration) -> (Option<i32>, String, String) {
    let start = Instant::now();
    loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            let (o, e) = p.output();
            return (st.code(), o, e);
        }
        if start.elapsed() > limit {
            p.kill();
            let (o, e) = p.output();
            return (None, o, format!("{e}\ntimed out"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// No line with the marker came ([`line_after`]): the program's output ended (it exited), or
/// the limit passed; with the lines it printed.
#[derive(Debug, PartialEq, Eq)]
pub struct NoLine {
    pub ended: bool,
    pub seen: Vec<String>,
}

impl std::fmt::Display for NoLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = if self.ended {
            "its output ended first"
        } else {
            "the limit passed"
        };
        write!(f, "{how}; it printed {:?}", self.seen)
    }
}

/// Reads `pipe` (a program's stdout) line by line on a thread until a line holds `marker`:
/// the rest of that line after it. The lines after it are read too and dropped (a closed
/// pipe would kill the program at its next print). [`NoLine`] when none came within `limit`
/// or the output ended first: a program stuck before it says so fails its test, saying what
/// it printed, instead of hanging it.
pub fn line_after(
    pipe: impl Read + Send + 'static,
    marker: &str,
    limit: Duration,
) -> Result<String, NoLine> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(pipe).split(b'\n') {
            let Ok(l) = l else { break };
            let _ = tx.send(text(&l));
        }
    });
    let end = Instant::now() + limit;
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(l) => match l.find(marker) {
                Some(i) => return Ok(l[i + marker.len()..].to_string()),
                None => seen.push(l),
            },
            Err(e) => {
                let ended = e == mpsc::RecvTimeoutError::Disconnected;
                return Err(NoLine { ended, seen });
            }
        }
    }
}

/// The target string of the `add_target: …` line that a starting `softrdma srpt` prints on
/// `stdout` (read on, and dropped, after it), within a minute: a target stuck before it fails
/// the test, with what it printed.
pub fn add_target_line(stdout: impl Read + Send + 'static) -> String {
    line_after(stdout, "add_target: ", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("srpt printed no add_target line (within a minute): {e}"))
}

/// `cmd.output()` (stdin empty), within [`OUTPUT_LIMIT`]: see [`wait_output`].
pub fn output(cmd: &mut Command) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    wait_output(child)
}

/// How long a program the test waits for may run: far above what any takes on a loaded
/// 2-core machine, so reaching it means a hang.
pub const OUTPUT_LIMIT: Duration = Duration::from_secs(60);

/// `child.wait_with_output()` (stdout and stderr piped), within [`OUTPUT_LIMIT`]: a program
/// still running then is killed and fails the test with what it printed, instead of hanging
/// it.
pub fn wait_output(child: Child) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(OUTPUT_LIMIT) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            // The waiting thread owns the child: kill it by its id (not yet reaped, so the
            // id is still its own).
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let o = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
            panic!(
                "pid {pid} still running after {OUTPUT_LIMIT:?}, killed; it printed: {}{}",
                text(&o.stdout),
                text(&o.stderr)
            );
        }
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
pub fn finish_run(c: Proc, limit: Duration) -> Run {
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
