//! The README's walkthrough, run as a new user would run it, in a clean temporary
//! directory: `softrdma demo`; `srpt` in the background with `srp login`, `write`, `read`,
//! `bench` and `discover` against it, then stopped as the README says; an rping server and
//! client; `ucmatose`, `udaddy` and `cmtime` pairs; a `pingpong` pair; `decode` of a
//! fixture; `perf write bw -n 200`; `perf cm -c 200 -r 1`. Short runtimes keep it to tens of
//! seconds.
//!
//! The README's addresses are 127.0.0.1 and 127.0.0.2; here they are the first pair
//! 127.0.X.1 / 127.0.X.2 whose RoCEv2 port is free (a softrdma left running on 127.0.0.1
//! must not fail the test). At the end no process started here is left, and every address
//! and port the commands used is free again.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The clean directory the commands run in; removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "softrdma-walkthrough-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A command in the background (`softrdma … &`): its output collected as it comes; killed
/// and waited for if the test fails before it ends.
struct Bg {
    name: String,
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
}

fn collect(mut r: impl Read + Send + 'static, into: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
}

impl Bg {
    fn out(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    fn err(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Waits until stdout has `needle`.
    fn wait_out(&mut self, needle: &str, limit: Duration) {
        let end = Instant::now() + limit;
        while !self.out().contains(needle) {
            if let Some(s) = self.child.try_wait().unwrap() {
                panic!(
                    "{} exited ({s}) before printing {needle:?}: {}{}",
                    self.name,
                    self.out(),
                    self.err()
                );
            }
            assert!(
                Instant::now() < end,
                "{}: no {needle:?} in {limit:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `sig` (as `kill` does; `None`: none, the process ends by itself) and waits up
    /// to `limit` for the exit; its status code.
    fn finish(&mut self, sig: Option<&str>, limit: Duration) -> Option<i32> {
        if let Some(sig) = sig {
            let st = Command::new("kill")
                .args([sig, &self.child.id().to_string()])
                .status()
                .unwrap();
            assert!(st.success());
        }
        let end = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                // Let the readers take the last bytes.
                std::thread::sleep(Duration::from_millis(50));
                return s.code();
            }
            assert!(
                Instant::now() < end,
                "{} did not end within {limit:?}: {}{}",
                self.name,
                self.out(),
                self.err()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

struct Walk {
    dir: TempDir,
}

impl Walk {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_softrdma"));
        c.args(args).current_dir(&self.dir.0);
        c
    }

    /// `softrdma ARGS &`.
    fn bg(&self, args: &[&str]) -> Bg {
        let mut child = self
            .cmd(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = Arc::new(Mutex::new(String::new()));
        let err = Arc::new(Mutex::new(String::new()));
        collect(child.stdout.take().unwrap(), out.clone());
        collect(child.stderr.take().unwrap(), err.clone());
        Bg {
            name: args.join(" "),
            child,
            out,
            err,
        }
    }

    /// `softrdma ARGS` in the foreground: must end with status 0 within `limit`.
    fn ok(&self, args: &[&str], limit: Duration) -> String {
        let mut b = self.bg(args);
        let code = b.finish(None, limit);
        assert_eq!(
            code,
            Some(0),
            "softrdma {}:\n{}{}",
            args.join(" "),
            b.out(),
            b.err()
        );
        b.out()
    }
}

/// Whether a UDP socket is bound on `ip:port` (from /proc/net/udp: nothing is bound to
/// find out, so a starting server cannot lose its address to the probe).
fn udp_bound(ip: Ipv4Addr, port: u16) -> bool {
    let want = format!("{:08X}:{port:04X}", u32::from_le_bytes(ip.octets()));
    std::fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
}

/// Waits until a server's device holds `ip:4791` (it listens right after).
fn wait_bound(ip: Ipv4Addr, bg: &mut Bg) {
    let end = Instant::now() + Duration::from_secs(10);
    while !udp_bound(ip, 4791) {
        if let Some(s) = bg.child.try_wait().unwrap() {
            panic!("{} exited ({s}): {}{}", bg.name, bg.out(), bg.err());
        }
        assert!(Instant::now() < end, "{} did not open its device", bg.name);
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
}

/// The first 127.0.X.1 / 127.0.X.2 with both RoCEv2 ports free.
fn free_pair() -> (Ipv4Addr, Ipv4Addr) {
    for x in 150..=250u8 {
        let a = Ipv4Addr::new(127, 0, x, 1);
        let b = Ipv4Addr::new(127, 0, x, 2);
        if UdpSocket::bind((a, 4791)).is_ok() && UdpSocket::bind((b, 4791)).is_ok() {
            return (a, b);
        }
    }
    panic!("no free pair of loopback addresses in 127.0.150.0 to 127.0.250.0");
}

/// A TCP port free on every address, and a free RDMA CM port number, for the side channel
/// and the servers.
fn free_tcp_port() -> u16 {
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The processes whose parent is this one and whose command is softrdma.
fn our_softrdma_children() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let comm = &stat[stat.find('(').unwrap_or(0) + 1..close];
        let ppid = stat[close + 1..].split_whitespace().nth(1).unwrap_or("");
        if ppid == me && comm.starts_with("softrdma") {
            out.push(stat);
        }
    }
    out
}

fn write_file(p: &Path, data: &[u8]) {
    std::fs::write(p, data).unwrap();
}

#[test]
fn readme_walkthrough_in_a_clean_directory_leaves_nothing_behind() {
    let t0 = Instant::now();
    let w = Walk {
        dir: TempDir::new(),
    };
    let (a, b) = free_pair();
    let (sa, sb) = (a.to_string(), b.to_string());
    let long = Duration::from_secs(60);

    // softrdma demo
    let out = w.ok(
        &[
            "demo",
            "--runtime",
            "1",
            "--size",
            "16m",
            "--target",
            &sa,
            "--initiator",
            &sb,
        ],
        long,
    );
    assert!(out.contains("softrdma demo: OK in "), "{out}");

    // softrdma srpt -a ADDR --lun mem:64M --demo &  ...  kill $SRPT
    let mut srpt = w.bg(&["srpt", "-a", &sa, "--lun", "mem:64M", "--demo"]);
    srpt.wait_out("add_target: ", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(50));
    let line = srpt
        .out()
        .lines()
        .find_map(|l| l.strip_prefix("add_target: ").map(str::to_string))
        .unwrap();
    let out = w.ok(&["srp", "login", &line], long);
    assert!(
        out.contains("LUN 0: LIO-ORG") && out.contains("logged out"),
        "{out}"
    );
    let data: Vec<u8> = (0..16384u32).map(|i| (i * 13 + 5) as u8).collect();
    write_file(&w.dir.0.join("data.bin"), &data);
    w.ok(
        &["srp", "write", &line, "--offset", "64k", "-i", "data.bin"],
        long,
    );
    w.ok(
        &[
            "srp", "read", &line, "--offset", "64k", "--length", "16k", "-o", "back.bin",
        ],
        long,
    );
    assert_eq!(std::fs::read(w.dir.0.join("back.bin")).unwrap(), data);
    let out = w.ok(
        &[
            "srp",
            "bench",
            &line,
            "--rw",
            "randread",
            "--bs",
            "4k",
            "--iodepth",
            "32",
            "--runtime",
            "1",
        ],
        long,
    );
    assert!(out.contains("  read: IOPS="), "{out}");
    let out = w.ok(&["srp", "discover", &sa], long);
    assert!(out.lines().any(|l| l == line), "{out}");
    assert_eq!(srpt.finish(Some("-TERM"), Duration::from_secs(10)), Some(0));

    // An rping server and client: the server ends when its client hangs up.
    let port = free_tcp_port().to_string();
    let mut rping = w.bg(&["rping", "-s", "-a", &sa, "-p", &port]);
    wait_bound(a, &mut rping);
    let out = w.ok(
        &["rping", "-c", "-a", &sa, "-p", &port, "-C", "3", "-v"],
        long,
    );
    assert!(out.contains("ping data: rdma-ping-2: "), "{out}");
    assert_eq!(rping.finish(None, Duration::from_secs(10)), Some(0));
    assert!(
        rping.err().contains("server DISCONNECT EVENT..."),
        "{}",
        rping.err()
    );

    // ucmatose: the server ends after its client's connections.
    let port = free_tcp_port().to_string();
    let mut uc = w.bg(&["ucmatose", "-b", &sa, "-p", &port, "-C", "3"]);
    uc.wait_out("cmatose: starting server", Duration::from_secs(10));
    wait_bound(a, &mut uc);
    let out = w.ok(&["ucmatose", "-s", &sa, "-p", &port, "-C", "3"], long);
    assert!(
        out.contains("test complete") && out.contains("return status 0"),
        "{out}"
    );
    assert_eq!(uc.finish(None, Duration::from_secs(10)), Some(0));

    // udaddy: the same over SIDR.
    let mut ud = w.bg(&["udaddy", "-b", &sa]);
    ud.wait_out("udaddy: starting server", Duration::from_secs(10));
    wait_bound(a, &mut ud);
    let out = w.ok(&["udaddy", "-s", &sa], long);
    assert!(out.contains("return status 0"), "{out}");
    assert_eq!(ud.finish(None, Duration::from_secs(10)), Some(0));

    // cmtime: the server runs until stopped.
    let port = free_tcp_port().to_string();
    let mut ct = w.bg(&["cmtime", "-b", &sa, "-p", &port]);
    wait_bound(a, &mut ct);
    let out = w.ok(
        &["cmtime", "-s", &sa, "-b", &sb, "-c", "50", "-p", &port],
        long,
    );
    assert!(
        out.contains("connect") && out.contains("us / conn"),
        "{out}"
    );
    let _ = ct.finish(Some("-TERM"), Duration::from_secs(10));

    // pingpong: the server ends after one client.
    let port = free_tcp_port().to_string();
    let mut pp = w.bg(&[
        "pingpong", "rc", "-d", &sa, "-p", &port, "-s", "4096", "-n", "100", "-c",
    ]);
    pp.wait_out("local address:", Duration::from_secs(10));
    let out = w.ok(
        &[
            "pingpong", "rc", "-d", &sb, "-p", &port, "-s", "4096", "-n", "100", "-c", &sa,
        ],
        long,
    );
    assert!(out.contains("iters in"), "{out}");
    assert_eq!(pp.finish(None, Duration::from_secs(10)), Some(0));

    // decode of a fixture.
    let fixture = repo().join("fixtures/captures/b_rping.pcap");
    let out = w.ok(&["decode", fixture.to_str().unwrap(), "-c", "5"], long);
    assert!(out.contains("InfiniBand"), "{out}");

    // perf write bw -n 200; perf cm -c 200 -r 1.
    let out = w.ok(
        &[
            "perf", "write", "bw", "-n", "200", "--client", &sa, "--server", &sb,
        ],
        long,
    );
    assert!(out.contains("run 1: softrdma"), "{out}");
    let out = w.ok(
        &[
            "perf", "cm", "-c", "200", "-r", "1", "--client", &sa, "--server", &sb,
        ],
        long,
    );
    assert!(out.contains("conn/s"), "{out}");

    // Nothing left: no process, no address, no port.
    for bg in [&mut srpt, &mut rping, &mut uc, &mut ud, &mut ct, &mut pp] {
        assert!(
            bg.child.try_wait().unwrap().is_some(),
            "{} still runs",
            bg.name
        );
    }
    let left = our_softrdma_children();
    assert!(left.is_empty(), "processes left: {left:?}");
    for ip in [a, b] {
        assert!(!udp_bound(ip, 4791), "{ip}:4791 still held");
        UdpSocket::bind((ip, 4791)).unwrap();
    }
    assert!(
        t0.elapsed() < Duration::from_secs(120),
        "the walkthrough took {:?}",
        t0.elapsed()
    );
}
