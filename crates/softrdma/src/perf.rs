//! `softrdma perf send|write|read bw|lat`: perftest-style measurements between two softrdma
//! devices in one process (two threads: a server device on 127.0.0.2 and a client device on
//! 127.0.0.1, each with its own UDP socket on `<ip>:4791`), with a TCP baseline on loopback
//! in the same run (a stream of the same bytes for `bw`, an 8-byte-style ping-pong of the same
//! size for `lat`), printing ours, TCP's, the ratio and CPU seconds per GB moved (process CPU
//! from `/proc/self/stat`, both threads together).
//!
//! - `bw`: the client keeps `-t` WRs of `-s` bytes outstanding (SENDs into receives the server
//!   keeps posted, RDMA WRITEs into the server's buffer, or RDMA READs from it) and counts
//!   completed bytes from the first post to the last completion.
//! - `lat`: round trips. SEND: ping-pong of SENDs. WRITE: the client WRITEs a counter into the
//!   server's buffer, the server sees it in memory and WRITEs it back (perftest's write_lat).
//!   READ: one READ at a time. Figures are round-trip times (perftest prints half of them).
//! - Completions are busy-polled unless `-e` (sleep in epoll until the socket has input).
//! - `lat` alternates blocks of our round trips with blocks of TCP's, and by default pins the
//!   server side to CPU 1 and the client side to CPU 0 (`--pin`): on the 2-vCPU VMs we
//!   measure on, a ping-pong's round trip is 16 µs when the scheduler packs both threads on
//!   one vCPU and 80-120 µs when every wake-up crosses vCPUs (an IPI to a halted vCPU costs
//!   the waker ~20 µs inside its `sendmsg`/`write`), the placement is sticky, and unpinned
//!   runs compared ours in one placement with TCP in the other.
//!
//! Event mode (`-e`) accounting, 8-byte SEND, per round trip and side: one `sendmsg` (the
//! request or answer and the ACK of the previous message as one GSO train), one `epoll_wait`
//! (no timeout: timers are a lazily armed timerfd), one `recvmmsg` — `-v` prints these. TCP
//! does one `write` and one blocking `read`; the rest of the gap is our user-space transport
//! work on the critical path (about 2 µs per side on a warm CPU, 4-5 µs right after a wake-up
//! from halt).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use softrdma_core::device::Mtu;
use softrdma_core::verbs::{RecvWr, SendOp, SendWr, Sge, WcStatus};

use crate::perf_node::{Node, Remote, BUF_IOVA};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Verb {
    Send,
    Write,
    Read,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pin {
    Cross,
    Same,
    Off,
}

/// Pins the calling thread to `cpu` (ignored where not allowed).
fn pin_to(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// Which CPU the server side (`server` true) or client side runs on under `pin`.
fn pin_side(pin: Pin, server: bool) {
    match pin {
        Pin::Cross => pin_to(usize::from(server)),
        Pin::Same => pin_to(0),
        Pin::Off => {}
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Test {
    Bw,
    Lat,
}

/// perftest-like measurements: softrdma device to softrdma device over loopback UDP, with a
/// TCP baseline in the same run.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Operation: send, write or read.
    #[arg(value_enum)]
    pub verb: Verb,
    /// Measurement: bw (bandwidth) or lat (round-trip latency).
    #[arg(value_enum)]
    pub test: Test,
    /// Message size in bytes (default: 1 MiB for bw, 8 for lat).
    #[arg(short = 's', long)]
    pub size: Option<usize>,
    /// Iterations (messages for bw, round trips for lat; default 1000 for bw, 10000 for lat).
    #[arg(short = 'n', long)]
    pub iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long)]
    pub duration: Option<f64>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (loopback's interface MTU 65536 allows all).
    #[arg(short = 'm', long, default_value_t = 4096)]
    pub mtu: u32,
    /// Outstanding work requests for bw (perftest's tx depth).
    #[arg(short = 't', long = "tx-depth", default_value_t = 16)]
    pub tx_depth: usize,
    /// Sleep in epoll until input instead of busy-polling (ibv_*_pingpong -e).
    #[arg(short = 'e', long, conflicts_with = "busy")]
    pub events: bool,
    /// Busy-poll completions (the default; perftest's behaviour).
    #[arg(long)]
    pub busy: bool,
    /// Repeat the whole measurement (ours and TCP) this many times.
    #[arg(short = 'r', long, default_value_t = 1)]
    pub runs: u32,
    /// Skip the TCP baseline.
    #[arg(long)]
    pub no_tcp: bool,
    /// Only the TCP baseline (for profiling it alone).
    #[arg(long, hide = true, conflicts_with = "no_tcp")]
    pub tcp_only: bool,
    /// Send one datagram per sendmsg (no UDP GSO), for comparison.
    #[arg(long)]
    pub no_gso: bool,
    /// The server device's address.
    #[arg(long, default_value = "127.0.0.2")]
    pub server: IpAddr,
    /// Before each run wait (up to 10 min) until no `qemu-system*` process runs, and mark runs
    /// during which one started (lab guests share the 2 cores and skew the figures).
    #[arg(long)]
    pub wait_quiet: bool,
    /// Pin threads: `cross` (default) puts the server side (our server device, TCP's echo)
    /// on CPU 1 and the client side on CPU 0 (like two hosts: every wake-up crosses CPUs),
    /// `same` puts all on CPU 0, `off` leaves placement to the scheduler. Unpinned, the
    /// placement sticks to whichever of the two it started in (on these VMs a TCP ping-pong
    /// takes 16 µs packed on one vCPU and 80-120 µs across two), and ours and TCP's may land
    /// in different ones even when interleaved.
    #[arg(long, value_enum, default_value = "cross")]
    pub pin: Pin,
    /// Print both devices' non-zero counters after each run.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// The client device's address.
    #[arg(long, default_value = "127.0.0.1")]
    pub client: IpAddr,
}

/// Process CPU time (user + system, all threads) from /proc/self/stat.
fn cpu_seconds() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the ")" that ends the command name: state is field 3; utime 14, stime 15.
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = rustix::param::clock_ticks_per_second().max(1) as f64;
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // rest[0] is field 3, so field k is rest[k - 3].
    (get(14 - 3) + get(15 - 3)) / tick
}

/// One measurement's outcome.
#[derive(Clone, Copy, Debug, Default)]
struct Outcome {
    /// Bytes moved (bw) or round trips (lat).
    bytes: u64,
    secs: f64,
    cpu: f64,
    /// Round-trip times, µs (lat): median, mean, p99.
    rtt: Option<(f64, f64, f64)>,
    /// The TCP baseline measured interleaved with this run (lat).
    tcp: Option<Tcp>,
}

/// A TCP outcome (kept apart so `Outcome` stays `Copy` without recursion).
#[derive(Clone, Copy, Debug, Default)]
struct Tcp {
    rounds: u64,
    secs: f64,
    cpu: f64,
    rtt: (f64, f64, f64),
}

impl From<Tcp> for Outcome {
    fn from(t: Tcp) -> Outcome {
        Outcome {
            bytes: t.rounds,
            secs: t.secs,
            cpu: t.cpu,
            rtt: Some(t.rtt),
            tcp: None,
        }
    }
}

impl Outcome {
    fn mbps(&self) -> f64 {
        self.bytes as f64 / self.secs.max(1e-9) / 1e6
    }
    fn cpu_per_gb(&self) -> f64 {
        self.cpu / (self.bytes as f64 / 1e9).max(1e-12)
    }
}

fn mtu_of(bytes: u32) -> Option<Mtu> {
    Some(match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        _ => return None,
    })
}

pub fn run(args: &Args) -> ExitCode {
    let Some(mtu) = mtu_of(args.mtu) else {
        eprintln!("perf: -m must be 256, 512, 1024, 2048 or 4096");
        return ExitCode::FAILURE;
    };
    let size = args.size.unwrap_or(match args.test {
        Test::Bw => 1 << 20,
        Test::Lat => 8,
    });
    let iters = args.iters.unwrap_or(match args.test {
        Test::Bw => 1000,
        Test::Lat => 10000,
    });
    let verb = format!("{:?}", args.verb).to_lowercase();
    let test = format!("{:?}", args.test).to_lowercase();
    println!(
        "softrdma perf {verb} {test}: size {size} B, {}, path MTU {}, {}{}, {} <- {}",
        match args.duration {
            Some(d) => format!("{d} s"),
            None => format!("{iters} iterations"),
        },
        args.mtu,
        if args.events {
            "events (-e)"
        } else {
            "busy poll"
        },
        if args.no_gso { ", no GSO" } else { "" },
        args.server,
        args.client,
    );
    let mut ratios = Vec::new();
    for run in 1..=args.runs {
        if args.wait_quiet {
            let t = Instant::now();
            while qemu_running() && t.elapsed() < Duration::from_secs(600) {
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        let ours = if args.tcp_only {
            Outcome::default()
        } else {
            match measure_ours(args, size, iters, mtu) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("perf: {e}");
                    return ExitCode::FAILURE;
                }
            }
        };
        let tcp = if args.no_tcp {
            None
        } else if args.test == Test::Lat && !args.tcp_only {
            ours.tcp.map(Outcome::from)
        } else {
            match measure_tcp(args, size, iters, &ours) {
                Ok(t) => Some(t),
                Err(e) => {
                    eprintln!("perf: tcp baseline: {e}");
                    return ExitCode::FAILURE;
                }
            }
        };
        match args.test {
            Test::Bw => {
                let mut line = format!(
                    "run {run}: softrdma {:8.1} MB/s  CPU {:5.2} s/GB",
                    ours.mbps(),
                    ours.cpu_per_gb()
                );
                if let Some(t) = tcp {
                    let r = ours.mbps() / t.mbps().max(1e-9);
                    ratios.push(r);
                    line += &format!(
                        " | TCP {:8.1} MB/s  CPU {:5.2} s/GB | ratio {r:.2}x TCP",
                        t.mbps(),
                        t.cpu_per_gb()
                    );
                }
                println!("{line}{}", noisy(args));
            }
            Test::Lat => {
                let (med, mean, p99) = ours.rtt.unwrap_or_default();
                let per = ours.cpu / ours.bytes.max(1) as f64 * 1e6;
                let mut line = format!(
                    "run {run}: softrdma RTT median {med:7.1} us mean {mean:7.1} p99 {p99:7.1} (CPU {per:.1} us/iter)"
                );
                if let Some(t) = tcp {
                    let (tm, tmean, tp99) = t.rtt.unwrap_or_default();
                    let tper = t.cpu / t.bytes.max(1) as f64 * 1e6;
                    let r = med / tm.max(1e-9);
                    ratios.push(r);
                    line += &format!(
                        " | TCP median {tm:7.1} mean {tmean:7.1} p99 {tp99:7.1} (CPU {tper:.1} us/iter) | ratio {r:.2}x TCP"
                    );
                }
                println!("{line}{}", noisy(args));
            }
        }
    }
    if ratios.len() > 1 {
        let mut r = ratios.clone();
        r.sort_by(f64::total_cmp);
        println!(
            "ratio over {} runs: min {:.2} median {:.2} max {:.2}",
            r.len(),
            r[0],
            r[r.len() / 2],
            r[r.len() - 1]
        );
    }
    ExitCode::SUCCESS
}

/// Whether a QEMU guest runs on this machine now (`/proc/*/comm` starting "qemu-system").
fn qemu_running() -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.starts_with("qemu-system"))
    })
}

fn noisy(args: &Args) -> &'static str {
    if args.wait_quiet && qemu_running() {
        "  [a QEMU guest was running by the end]"
    } else {
        ""
    }
}

// ----- softrdma ------------------------------------------------------------------------------

/// Slots of `size` bytes in each node's buffer (bounded to 256 MiB in all).
fn slots_for(size: usize, depth: usize) -> usize {
    let want = depth.max(1);
    let cap = ((256usize << 20) / size.max(1)).max(1);
    want.min(cap)
}

fn measure_ours(args: &Args, size: usize, iters: u64, mtu: Mtu) -> Result<Outcome, String> {
    let slots = match args.test {
        Test::Bw => slots_for(size, args.tx_depth.max(64)),
        // Slot 0: what we send; slot 1: where the peer's WRITE lands.
        Test::Lat => 2,
    };
    let buf_len = size.max(8) * slots;
    let busy = !args.events;
    let e = |e: std::io::Error| e.to_string();
    let mut server = Node::new(args.server, buf_len, busy, !args.no_gso, 2).map_err(e)?;
    let mut client = Node::new(args.client, buf_len, busy, !args.no_gso, 1).map_err(e)?;
    let (rs, rc) = (server.remote(), client.remote());
    server.connect(&rc, mtu).map_err(e)?;
    client.connect(&rs, mtu).map_err(e)?;

    let stop = Arc::new(AtomicBool::new(false));
    let verb = args.verb;
    let test = args.test;
    let deadline = args.duration.map(Duration::from_secs_f64);
    let pause = Arc::new(AtomicBool::new(false));
    let server_stop = stop.clone();
    let server_pause = pause.clone();
    let server_waker = server.ep.notifier();
    let pin = args.pin;
    pin_side(pin, false);
    let server_thread = std::thread::spawn(move || {
        pin_side(pin, true);
        serve(
            &mut server,
            &rc,
            verb,
            test,
            size,
            slots,
            &server_stop,
            &server_pause,
        );
        server
    });
    let cpu0 = cpu_seconds();
    let r = match test {
        Test::Bw => client_bw(
            &mut client,
            &rs,
            verb,
            size,
            slots,
            iters,
            args.tx_depth,
            deadline,
        ),
        Test::Lat => {
            let tcp = if args.no_tcp {
                None
            } else {
                Some(
                    TcpPing::new(args.server, size, args.pin)
                        .map_err(|e| format!("tcp baseline: {e}"))?,
                )
            };
            client_lat(&mut client, &rs, verb, size, iters, deadline, tcp, &pause)
        }
    };
    let cpu = cpu_seconds() - cpu0;
    // Let the server answer any last retransmission, then stop it.
    let linger = Instant::now();
    while linger.elapsed() < Duration::from_millis(20) {
        if !client.turn() {
            let _ = client.ep.wait_readable(Some(Duration::from_millis(1)));
        }
    }
    stop.store(true, Ordering::Release);
    let _ = server_waker.notify();
    let server = server_thread.join();
    if args.verbose {
        let (units, unit) = match (&r, test) {
            (Ok(o), Test::Lat) => (o.bytes, "round trip"),
            (Ok(o), Test::Bw) => (o.bytes / size.max(1) as u64, "message"),
            _ => (1, "run"),
        };
        let show = |name: &str, n: &Node| {
            let c: Vec<String> = n
                .stack
                .counters()
                .iter()
                .filter(|(_, v)| *v != 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!(
                "  {name} counters: {} send_errors={}",
                c.join(" "),
                n.send_errors
            );
            let st = n.stats;
            let per = |v: u64| v as f64 / units.max(1) as f64;
            println!(
                "  {name} loop per {unit}: recvmmsg {:.2} (empty {:.2}) epoll sleeps {:.2} sendmsg {:.2}",
                per(st.recv_calls),
                per(st.recv_empty),
                per(st.sleeps),
                per(st.send_calls)
            );
        };
        show("client", &client);
        if let Ok(s) = &server {
            show("server", s);
        }
    }
    let mut o = r?;
    if test == Test::Bw {
        o.cpu = cpu;
    }
    Ok(o)
}

/// The server side: keeps receives posted (SEND), bounces WRITEs (WRITE lat) and SENDs (SEND
/// lat), and otherwise just runs the responder.
#[allow(clippy::too_many_arguments)]
fn serve(
    n: &mut Node,
    peer: &Remote,
    verb: Verb,
    test: Test,
    size: usize,
    slots: usize,
    stop: &AtomicBool,
    pause: &AtomicBool,
) {
    let slot_sge = |n: &Node, k: usize| Sge {
        addr: BUF_IOVA + (k * size) as u64,
        length: size as u32,
        lkey: n.mr.lkey,
    };
    if verb == Verb::Send {
        let depth = match test {
            Test::Bw => slots.max(64),
            Test::Lat => 16,
        };
        for k in 0..depth {
            let s = slot_sge(n, k % slots);
            let _ = n.stack.post_recv(n.qpn, RecvWr::new(k as u64, vec![s]));
        }
    }
    let peer_lat_write = verb == Verb::Write && test == Test::Lat;
    let mut expect: u64 = 1;
    let mut last_check = [0u8; 8];
    while !stop.load(Ordering::Acquire) {
        let did = n.receive();
        let mut progressed = false;
        while let Some(wc) = n.poll_cq() {
            progressed = true;
            if wc.opcode == softrdma_core::verbs::WcOpcode::Recv {
                let s = slot_sge(n, wc.wr_id as usize % slots);
                let _ = n.stack.post_recv(n.qpn, RecvWr::new(wc.wr_id, vec![s]));
                if test == Test::Lat {
                    let wr = SendWr {
                        signaled: false,
                        ..SendWr::new(0, SendOp::Send).with_sge(slot_sge(n, 0))
                    };
                    let _ = n.stack.post_send(n.qpn, wr);
                }
            }
        }
        if peer_lat_write {
            // perftest's write_lat: watch the last 8 bytes of the message for the counter, then
            // WRITE the message (counter included) back into the client's slot 1.
            let at = BUF_IOVA + (size + size.saturating_sub(8)) as u64;
            if n.stack
                .verbs
                .local_read(n.mr.lkey, at, &mut last_check)
                .is_ok()
                && u64::from_le_bytes(last_check) == expect
            {
                expect += 1;
                progressed = true;
                let wr = SendWr {
                    signaled: false,
                    ..SendWr::new(
                        0,
                        SendOp::RdmaWrite {
                            remote_addr: peer.addr + size as u64,
                            rkey: peer.rkey,
                        },
                    )
                    .with_sge(slot_sge(n, 1))
                };
                let _ = n.stack.post_send(n.qpn, wr);
            }
        }
        let sent = n.transmit();
        if !progressed && !did && !sent {
            if pause.load(Ordering::Acquire) {
                // The client runs a TCP block: sleep instead of spinning on its CPU.
                n.sleep();
            } else {
                n.idle();
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn client_bw(
    n: &mut Node,
    peer: &Remote,
    verb: Verb,
    size: usize,
    slots: usize,
    iters: u64,
    depth: usize,
    deadline: Option<Duration>,
) -> Result<Outcome, String> {
    let t0 = Instant::now();
    let mut posted = 0u64;
    let mut done = 0u64;
    let mut last = t0;
    let want = |posted: u64, t0: Instant| match deadline {
        Some(d) => t0.elapsed() < d,
        None => posted < iters,
    };
    loop {
        while (posted - done) < depth as u64 && want(posted, t0) {
            let k = (posted as usize) % slots;
            let sge = Sge {
                addr: BUF_IOVA + (k * size) as u64,
                length: size as u32,
                lkey: n.mr.lkey,
            };
            let remote_addr = peer.addr + (k * size) as u64;
            let op = match verb {
                Verb::Send => SendOp::Send,
                Verb::Write => SendOp::RdmaWrite {
                    remote_addr,
                    rkey: peer.rkey,
                },
                Verb::Read => SendOp::RdmaRead {
                    remote_addr,
                    rkey: peer.rkey,
                },
            };
            n.stack
                .post_send(n.qpn, SendWr::new(posted, op).with_sge(sge))
                .map_err(|e| format!("post_send: {e:?}"))?;
            posted += 1;
        }
        let did = n.turn();
        let mut got = false;
        while let Some(wc) = n.poll_cq() {
            if wc.status != WcStatus::Success {
                return Err(format!("completion {wc:?}"));
            }
            done += 1;
            got = true;
            last = Instant::now();
        }
        if done == posted && !want(posted, t0) {
            break;
        }
        if !did && !got {
            n.idle();
        }
        if t0.elapsed() > Duration::from_secs(600) {
            return Err("bw run took over 10 minutes".into());
        }
    }
    Ok(Outcome {
        bytes: done * size as u64,
        secs: last.duration_since(t0).as_secs_f64(),
        cpu: 0.0,
        rtt: None,
        tcp: None,
    })
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let p99 = v[((v.len() as f64 * 0.99) as usize).min(v.len() - 1)];
    (v[v.len() / 2], mean, p99)
}

/// Round trips per block when ours and TCP's ping-pong alternate.
const LAT_BLOCK: u64 = 250;

/// A connected TCP ping-pong pair (the baseline), run in blocks between ours.
struct TcpPing {
    stream: TcpStream,
    echo: std::thread::JoinHandle<std::io::Result<()>>,
    buf: Vec<u8>,
}

impl TcpPing {
    fn new(server: IpAddr, size: usize, pin: Pin) -> std::io::Result<TcpPing> {
        let listener = TcpListener::bind(SocketAddr::new(server, 0))?;
        let addr = listener.local_addr()?;
        let size = size.max(1);
        let echo = std::thread::spawn(move || -> std::io::Result<()> {
            pin_side(pin, true);
            let (mut s, _) = listener.accept()?;
            s.set_nodelay(true)?;
            let mut buf = vec![0u8; size];
            loop {
                match s.read_exact(&mut buf) {
                    Ok(()) => s.write_all(&buf)?,
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
        });
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        Ok(TcpPing {
            stream,
            echo,
            buf: vec![0u8; size],
        })
    }

    /// One blocking write + blocking read round trip, in µs.
    fn round(&mut self) -> std::io::Result<f64> {
        let start = Instant::now();
        self.stream.write_all(&self.buf)?;
        self.stream.read_exact(&mut self.buf)?;
        Ok(start.elapsed().as_secs_f64() * 1e6)
    }

    fn finish(self) -> std::io::Result<()> {
        self.stream.shutdown(std::net::Shutdown::Write)?;
        self.echo
            .join()
            .map_err(|_| std::io::Error::other("echo panicked"))?
    }
}

/// Round trips of ours, alternating (when `tcp` is given) with blocks of TCP round trips of
/// the same size: the scheduler on these VMs sometimes packs both threads of a ping-pong on
/// one vCPU (a round trip of 16 µs for TCP) and sometimes not (80-120 µs), and switches
/// between the two within a second; blocks of [`LAT_BLOCK`] keep both measurements in the
/// same conditions. While TCP runs, the server device sleeps in epoll even when busy-polling
/// (`pause`), so it does not take a core from TCP's threads.
#[allow(clippy::too_many_arguments)]
fn client_lat(
    n: &mut Node,
    peer: &Remote,
    verb: Verb,
    size: usize,
    iters: u64,
    deadline: Option<Duration>,
    mut tcp: Option<TcpPing>,
    pause: &AtomicBool,
) -> Result<Outcome, String> {
    let sge = Sge {
        addr: BUF_IOVA,
        length: size as u32,
        lkey: n.mr.lkey,
    };
    if verb == Verb::Send {
        for k in 0..16 {
            let _ = n.stack.post_recv(n.qpn, RecvWr::new(k, vec![sge]));
        }
    }
    let t0 = Instant::now();
    let mut rtts = Vec::with_capacity(iters.min(1 << 22) as usize);
    let mut tcp_rtts = Vec::with_capacity(rtts.capacity());
    let (mut ours_secs, mut tcp_secs, mut ours_cpu, mut tcp_cpu) = (0.0, 0.0, 0.0, 0.0);
    let mut i: u64 = 0;
    let more = |i: u64| match deadline {
        Some(d) => t0.elapsed() < d,
        None => i < iters,
    };
    let tail = BUF_IOVA + size.saturating_sub(8) as u64;
    let back = tail + size as u64;
    let mut seen = [0u8; 8];
    while more(i) {
        let block_end = i + LAT_BLOCK;
        let (b0, c0) = (Instant::now(), cpu_seconds());
        while i < block_end && more(i) {
            i += 1;
            let start = Instant::now();
            let op = match verb {
                Verb::Send => SendOp::Send,
                Verb::Write => {
                    // The counter goes in the message's last 8 bytes (sizes below 8: first
                    // bytes).
                    let _ = n.stack.verbs.local_write(n.mr.lkey, tail, &i.to_le_bytes());
                    SendOp::RdmaWrite {
                        remote_addr: peer.addr + size as u64,
                        rkey: peer.rkey,
                    }
                }
                Verb::Read => SendOp::RdmaRead {
                    remote_addr: peer.addr,
                    rkey: peer.rkey,
                },
            };
            let signaled = verb == Verb::Read;
            let wr = SendWr {
                signaled,
                ..SendWr::new(i, op).with_sge(sge)
            };
            n.stack
                .post_send(n.qpn, wr)
                .map_err(|e| format!("post_send: {e:?}"))?;
            n.transmit();
            // Wait for the answer: a completion (SEND: the bounced SEND's receive; READ: the
            // READ), or for WRITE the counter written back into our memory.
            let mut answered = false;
            while !answered {
                let did = n.receive();
                while let Some(wc) = n.poll_cq() {
                    if wc.status != WcStatus::Success {
                        return Err(format!("completion {wc:?}"));
                    }
                    if wc.opcode == softrdma_core::verbs::WcOpcode::Recv {
                        let _ = n.stack.post_recv(n.qpn, RecvWr::new(wc.wr_id, vec![sge]));
                    }
                    if verb != Verb::Write {
                        answered = true;
                    }
                }
                if verb == Verb::Write
                    && n.stack.verbs.local_read(n.mr.lkey, back, &mut seen).is_ok()
                    && u64::from_le_bytes(seen) == i
                {
                    answered = true;
                }
                // Once answered, our ACK of the answer leaves with the next request.
                if !answered && !n.transmit() && !did {
                    n.idle();
                }
                if start.elapsed() > Duration::from_secs(10) {
                    return Err(format!("round trip {i} took over 10 s"));
                }
            }
            rtts.push(start.elapsed().as_secs_f64() * 1e6);
        }
        ours_secs += b0.elapsed().as_secs_f64();
        ours_cpu += cpu_seconds() - c0;
        if let Some(t) = tcp.as_mut() {
            // Our last ACK goes out first, then the server may sleep.
            n.transmit();
            pause.store(true, Ordering::Release);
            let (b0, c0) = (Instant::now(), cpu_seconds());
            let rounds = rtts.len() - tcp_rtts.len();
            for _ in 0..rounds {
                tcp_rtts.push(t.round().map_err(|e| format!("tcp baseline: {e}"))?);
            }
            tcp_secs += b0.elapsed().as_secs_f64();
            tcp_cpu += cpu_seconds() - c0;
            pause.store(false, Ordering::Release);
        }
    }
    let tcp = match tcp {
        Some(t) => {
            t.finish().map_err(|e| format!("tcp baseline: {e}"))?;
            Some(Tcp {
                rounds: tcp_rtts.len() as u64,
                secs: tcp_secs,
                cpu: tcp_cpu,
                rtt: stats(tcp_rtts),
            })
        }
        None => None,
    };
    Ok(Outcome {
        bytes: i,
        secs: ours_secs,
        cpu: ours_cpu,
        rtt: Some(stats(rtts)),
        tcp,
    })
}

// ----- TCP baseline --------------------------------------------------------------------------

fn measure_tcp(args: &Args, size: usize, iters: u64, ours: &Outcome) -> std::io::Result<Outcome> {
    let listener = TcpListener::bind(SocketAddr::new(args.server, 0))?;
    let addr = listener.local_addr()?;
    match args.test {
        Test::Bw => {
            // The same number of bytes as ours moved (or as asked), in `size`-byte writes.
            let total = if ours.bytes > 0 {
                ours.bytes
            } else {
                iters * size as u64
            };
            let chunk = size.clamp(1, 1 << 20);
            let pin = args.pin;
            pin_side(pin, false);
            let reader = std::thread::spawn(move || -> std::io::Result<(u64, Instant)> {
                pin_side(pin, true);
                let (mut s, _) = listener.accept()?;
                let mut buf = vec![0u8; 1 << 20];
                let mut got = 0u64;
                loop {
                    let n = s.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    got += n as u64;
                }
                Ok((got, Instant::now()))
            });
            let cpu0 = cpu_seconds();
            let mut s = TcpStream::connect(addr)?;
            let data = vec![0x5au8; chunk];
            let t0 = Instant::now();
            let mut sent = 0u64;
            while sent < total {
                let n = (total - sent).min(chunk as u64) as usize;
                s.write_all(&data[..n])?;
                sent += n as u64;
            }
            s.shutdown(std::net::Shutdown::Write)?;
            let (got, end) = reader
                .join()
                .map_err(|_| std::io::Error::other("reader panicked"))??;
            let cpu = cpu_seconds() - cpu0;
            Ok(Outcome {
                bytes: got,
                secs: end.duration_since(t0).as_secs_f64(),
                cpu,
                rtt: None,
                tcp: None,
            })
        }
        Test::Lat => {
            let rounds = if ours.bytes > 0 { ours.bytes } else { iters };
            let size = size.max(1);
            let pin = args.pin;
            pin_side(pin, false);
            let echo = std::thread::spawn(move || -> std::io::Result<()> {
                pin_side(pin, true);
                let (mut s, _) = listener.accept()?;
                s.set_nodelay(true)?;
                let mut buf = vec![0u8; size];
                for _ in 0..rounds {
                    s.read_exact(&mut buf)?;
                    s.write_all(&buf)?;
                }
                Ok(())
            });
            let mut s = TcpStream::connect(addr)?;
            s.set_nodelay(true)?;
            let mut buf = vec![0u8; size];
            let mut rtts = Vec::with_capacity(rounds.min(1 << 22) as usize);
            let cpu0 = cpu_seconds();
            let t0 = Instant::now();
            for _ in 0..rounds {
                let start = Instant::now();
                s.write_all(&buf)?;
                s.read_exact(&mut buf)?;
                rtts.push(start.elapsed().as_secs_f64() * 1e6);
            }
            let secs = t0.elapsed().as_secs_f64();
            let cpu = cpu_seconds() - cpu0;
            echo.join()
                .map_err(|_| std::io::Error::other("echo panicked"))??;
            Ok(Outcome {
                bytes: rounds,
                secs,
                cpu,
                rtt: Some(stats(rtts)),
                tcp: None,
            })
        }
    }
}
