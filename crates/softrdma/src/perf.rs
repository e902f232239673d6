//! `softrdma perf send|write|read bw|lat`: perftest-style measurements between two softrdma
//! devices in one process (two threads: a server device on 127.0.0.2 and a client device on
//! 127.0.0.1, each a [`softrdma_driver::Device`] with its own UDP socket on `<ip>:4791`), with
//! a TCP baseline on loopback in the same run (a stream of the same bytes for `bw`, a
//! ping-pong of the same size for `lat`), printing ours, TCP's, the ratio and the CPU time per
//! GB moved or per round trip.
//!
//! The devices are the driver's runtime, as applications get it: the event loop runs inline in
//! the CQ polls of the thread that uses the device ([`Progress::Inline`]), busy-polling the
//! socket ([`PollMode::BusyPoll`], the default, as perftest spins on its CQ), sleeping in
//! epoll until input (`-e`, [`PollMode::Blocking`]) or spinning a while first (`--spin-us`,
//! [`PollMode::SpinThenBlock`]). Both devices defer the sends a turn's
//! input causes to the next post ([`DeviceConfig::defer_flush`]), so a ping-pong's request
//! and the ACK of the previous answer leave in one GSO `sendmsg`.
//!
//! - `bw`: the client keeps `-t` WRs of `-s` bytes outstanding (SENDs into receives the server
//!   keeps posted, RDMA WRITEs into the server's buffer, or RDMA READs from it) and counts
//!   completed bytes from the first post to the last completion.
//! - `lat`: round trips. SEND: ping-pong of SENDs. WRITE: the client WRITEs a counter into the
//!   server's buffer, the server sees it in memory and WRITEs it back (perftest's write_lat).
//!   READ: one READ at a time. Figures are round-trip times (perftest prints half of them).
//!   The first 1% of the round trips (at least 10; with `-D`, at least the first 1% of the
//!   time) are warm-up: run, but not in the figures, so `-n` must be at least 11.
//! - `lat` alternates blocks of our round trips with blocks of TCP's: a blocking TCP
//!   ping-pong and, when we busy-poll, one that busy-polls too (non-blocking `recv` in a loop
//!   on both ends), which is what the busy-polled ratio compares with. While one block runs
//!   the others' server sides sleep, so each block starts with one unrecorded round trip
//!   that wakes its server side. By default it pins the
//!   server side to CPU 1 and the client side to CPU 0 (`--pin`): on the 2-vCPU VMs we measure
//!   on, a ping-pong's round trip is 16 µs when the scheduler packs both threads on one vCPU
//!   and 80-120 µs when every wake-up crosses vCPUs (an IPI to a halted vCPU costs the waker
//!   ~20 µs inside its `sendmsg`/`write`), the placement is sticky, and unpinned runs compared
//!   ours in one placement with TCP in the other.
//! - CPU: each thread's own CPU clock (`CLOCK_THREAD_CPUTIME_ID`, nanoseconds), summed over
//!   the threads doing the work while they do it: for ours the client and server threads
//!   during our blocks, for TCP the client and its echo (or reader) thread. Busy-polling
//!   burns both sides' cores, so its CPU per round trip is about twice the round trip.
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
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use softrdma_core::device::Mtu;
use softrdma_core::verbs::{
    steps_to_rts, AccessFlags, AddressVector, CqId, MrKeys, QpAttr, QpInitAttr, QpType, RecvWr,
    SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use softrdma_driver::{Device, DeviceConfig, IoStats, Notifier, PollMode, Progress};
use softrdma_wire::Gid;

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

/// What competes with ours on the narrow link (`--compete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Compete {
    /// A bulk TCP stream (the kernel's default congestion control, cubic) in the same
    /// direction as our data, for the whole run.
    Tcp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Test {
    Bw,
    Lat,
}

/// The largest message (the port's `max_msg_sz`, 8 MiB).
const MAX_SIZE: u32 = 0x80_0000;
/// The most WRs in flight (`-t`; the device's `max_qp_wr`).
const MAX_TX_DEPTH: u32 = 0x4000;
/// The most iterations (`-n`).
const MAX_ITERS: u64 = 1_000_000_000;
/// The longest run (`-D`, seconds).
const MAX_DURATION: f64 = 3600.0;
/// The most repetitions (`-r`).
const MAX_RUNS: u32 = 1000;
/// Round trips of warm-up at least (`lat`).
const MIN_WARMUP: u64 = 10;
/// How long without a completion (or an answer) before a run gives up.
const STALL: Duration = Duration::from_secs(10);

/// `softrdma perf`: one subcommand per measurement.
#[derive(Debug, clap::Args)]
#[command(subcommand_required = true, arg_required_else_help = true)]
pub struct PerfArgs {
    #[command(subcommand)]
    pub cmd: PerfCmd,
}

/// The measurements. Every one runs both sides on this host over loopback, ours against a
/// baseline in the same run; options common to several go in their own structs, so a new one
/// (a link rate, say) is one field.
#[derive(Debug, clap::Subcommand)]
pub enum PerfCmd {
    /// RC SEND between two softrdma devices on loopback: `bw` (bandwidth) or `lat`
    /// (round-trip latency), perftest-style, against TCP in the same run.
    Send(Args),
    /// RDMA WRITE between two softrdma devices on loopback: `bw` or `lat`, perftest-style,
    /// against TCP in the same run.
    Write(Args),
    /// RDMA READ between two softrdma devices on loopback: `bw` or `lat`, perftest-style,
    /// against TCP in the same run.
    Read(Args),
    /// Connection setup rate: full RDMA CM cycles (create id, resolve address and route,
    /// create QP, connect, disconnect, destroy; all in flight as cmtime issues them) between
    /// two devices on loopback, against TCP connect/accept/close with the same number in
    /// flight, and one connection's setup latency against TCP's.
    Cm(crate::perf_cm::Plan),
    /// N RC connections held at once by two processes on loopback (this tool runs itself
    /// again as the server): setup cost by block, each side's RSS per connection, teardown.
    Live(crate::perf_live::Plan),
    /// SRP block I/O (target and initiator in this process, memory LUN) against fio with
    /// nbdkit over TCP on loopback: 4 KiB random and 1 MiB sequential read and write.
    Srp(crate::perf_srp::Plan2),
}

/// Runs the `softrdma perf` subcommand.
pub fn run_cmd(p: PerfArgs) -> ExitCode {
    match p.cmd {
        PerfCmd::Send(a) => run(&Args {
            verb: Verb::Send,
            ..a
        }),
        PerfCmd::Write(a) => run(&Args {
            verb: Verb::Write,
            ..a
        }),
        PerfCmd::Read(a) => run(&Args {
            verb: Verb::Read,
            ..a
        }),
        PerfCmd::Cm(p) => crate::perf_cm::run(&p),
        PerfCmd::Live(p) => crate::perf_live::run(&p),
        PerfCmd::Srp(p) => crate::perf_srp::run(&p),
    }
}

/// perftest-like measurements: softrdma device to softrdma device over loopback UDP, with a
/// TCP baseline in the same run.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Operation: send, write or read (the subcommand: `softrdma perf write bw`).
    #[arg(skip = Verb::Send)]
    pub verb: Verb,
    /// Measurement: bw (bandwidth) or lat (round-trip latency).
    #[arg(value_enum)]
    pub test: Test,
    /// Message size in bytes, 1..=8388608 (default: 1 MiB for bw, 8 for lat).
    #[arg(short = 's', long, value_parser = parse_size)]
    pub size: Option<u32>,
    /// Iterations, 1..=1000000000 (messages for bw, round trips for lat, of which the first
    /// 1%, at least 10, are warm-up: lat needs 11 or more; default 1000 for bw, 10000 for lat).
    #[arg(short = 'n', long, conflicts_with = "duration", value_parser = parse_iters)]
    pub iters: Option<u64>,
    /// Run for this many seconds (more than 0, at most 3600) instead of a number of iterations.
    #[arg(short = 'D', long, value_parser = parse_duration, allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (loopback's interface MTU 65536 allows all).
    #[arg(short = 'm', long, default_value_t = 4096, value_parser = parse_mtu)]
    pub mtu: u32,
    /// Outstanding work requests for bw (perftest's tx depth), 1..=16384.
    #[arg(short = 't', long = "tx-depth", default_value_t = 16, value_parser = parse_tx_depth)]
    pub tx_depth: u32,
    /// Sleep in epoll until input instead of busy-polling (ibv_*_pingpong -e).
    #[arg(short = 'e', long, conflicts_with = "busy")]
    pub events: bool,
    /// Busy-poll completions (the default; perftest's behaviour).
    #[arg(long)]
    pub busy: bool,
    /// Spin this many microseconds for input, then sleep in epoll (the driver's
    /// spin-then-block wait, whose spins stop as soon as they lose their core to another
    /// thread): on a loaded machine two busy-pollers wait for timeslices (bw 0.2x TCP at load
    /// 15, where `-e` gave 0.5x; measurements.md). Compared with TCP's blocking ping-pong.
    #[arg(long, value_name = "US", conflicts_with_all = ["busy", "events"], value_parser = parse_spin)]
    pub spin_us: Option<u64>,
    /// Repeat the whole measurement (ours and TCP) this many times, 1..=1000.
    #[arg(short = 'r', long, default_value_t = 1, value_parser = parse_runs)]
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
    /// during which one started (virtual machines running on the same CPUs skew the figures).
    #[arg(long)]
    pub wait_quiet: bool,
    /// Pin threads: `cross` (default) puts the server side (our server device, TCP's echo)
    /// on CPU 1 and the client side on CPU 0 (like two hosts: every wake-up crosses CPUs),
    /// `same` puts all on CPU 0, `off` leaves placement to the scheduler. Unpinned, the
    /// placement sticks to whichever of the two it started in (on a two-vCPU virtual machine
    /// a TCP ping-pong took 16 µs packed on one vCPU and 80-120 µs across two), and ours and
    /// TCP's may land in different ones even when interleaved.
    #[arg(long, value_enum, default_value = "cross")]
    pub pin: Pin,
    /// Print both devices' non-zero counters after each run.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// The client device's address.
    #[arg(long, default_value = "127.0.0.1")]
    pub client: IpAddr,
    /// Through a narrow link instead of loopback (bw only; root): two network namespaces
    /// joined by a veth pair (MTU 1500), each direction shaped to RATE (like `2gbit`) by
    /// `htb` over a shallow tail-drop `bfifo` (`--link-queue`). Our server device and TCP's
    /// reader sit on one side (10.221.0.1), the clients on the other (10.221.0.2); the path
    /// MTU is at most 1024. The namespaces are deleted at the end.
    #[arg(long, value_parser = crate::narrow_link::parse_rate)]
    pub link: Option<u64>,
    /// The narrow link's queue in bytes, each direction.
    #[arg(long, default_value_t = crate::narrow_link::DEFAULT_QUEUE, requires = "link")]
    pub link_queue: u64,
    /// Random loss on the narrow link, like `1%`: puts the frame relay (`relay.rs`) between
    /// the two sides, which loses that share of the IP frames it forwards, each direction
    /// (seeded: `--loss-seed`). Ours and TCP go through the same relay.
    #[arg(long, value_parser = crate::relay::parse_share, requires = "link")]
    pub loss: Option<f64>,
    /// The relay's loss seed.
    #[arg(long, default_value_t = 1, requires = "link")]
    pub loss_seed: u64,
    /// One-way delay the relay adds, microseconds (puts the relay in the path).
    #[arg(long, requires = "link")]
    pub delay_us: Option<u64>,
    /// Jitter the relay adds on top of the delay, microseconds (uniform, no reordering).
    #[arg(long, requires = "link")]
    pub jitter_us: Option<u64>,
    /// ECN marking: the relay becomes the bottleneck itself (rate `--link`, queue
    /// `--link-queue`, no htb) and marks CE on ECT frames that find more than BYTES queued.
    #[arg(long, requires = "link")]
    pub ecn_mark: Option<u64>,
    /// Share the narrow link with a competing flow for the whole run instead of measuring
    /// ours and TCP one after the other: prints both goodputs over the same interval and
    /// Jain's fairness index of the two, (a + b)^2 / (2 (a^2 + b^2)) (1 = equal shares,
    /// 0.5 = one flow has everything). Without -D the run takes 10 s.
    #[arg(long, value_enum, requires = "link")]
    pub compete: Option<Compete>,
}

impl Args {
    /// The relay's impairments, when any option asks for the relay.
    fn impairments(&self) -> Option<crate::relay::Impairments> {
        if self.loss.is_none()
            && self.delay_us.is_none()
            && self.jitter_us.is_none()
            && self.ecn_mark.is_none()
        {
            return None;
        }
        Some(crate::relay::Impairments {
            loss: self.loss.unwrap_or(0.0),
            seed: self.loss_seed,
            delay: Duration::from_micros(self.delay_us.unwrap_or(0)),
            jitter: Duration::from_micros(self.jitter_us.unwrap_or(0)),
            shape: self.ecn_mark.map(|t| crate::relay::Shape {
                rate_bps: self.link.unwrap_or(1_000_000_000),
                queue_bytes: self.link_queue,
                ecn_threshold: Some(t),
            }),
        })
    }
}

thread_local! {
    /// The narrow link of this run (`--link`), if any: [`in_side`] opens sockets in it.
    static LINK: std::cell::RefCell<Option<std::rc::Rc<crate::narrow_link::NarrowLink>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` (which opens sockets) in `side`'s namespace of the narrow link when there is
/// one, on this thread; returns to the original namespace after.
fn in_side<T>(
    side: crate::narrow_link::Side,
    f: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    let link = LINK.with(|l| l.borrow().clone());
    let Some(link) = link else { return f() };
    link.enter(side)?;
    let r = f();
    link.leave()?;
    r
}

/// A whole number within `lo..=hi`.
fn ranged(s: &str, lo: u64, hi: u64) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        Ok(_) => Err(format!("{s} is not in {lo}..={hi}")),
        Err(_) => Err(format!("{s} is not a number in {lo}..={hi}")),
    }
}

fn parse_size(s: &str) -> Result<u32, String> {
    ranged(s, 1, u64::from(MAX_SIZE)).map(|v| v as u32)
}

fn parse_iters(s: &str) -> Result<u64, String> {
    ranged(s, 1, MAX_ITERS)
}

fn parse_tx_depth(s: &str) -> Result<u32, String> {
    ranged(s, 1, u64::from(MAX_TX_DEPTH)).map(|v| v as u32)
}

fn parse_spin(s: &str) -> Result<u64, String> {
    ranged(s, 1, 1_000_000)
}

fn parse_runs(s: &str) -> Result<u32, String> {
    ranged(s, 1, u64::from(MAX_RUNS)).map(|v| v as u32)
}

fn parse_duration(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(d) if d > 0.0 && d <= MAX_DURATION => Ok(d),
        _ => Err(format!(
            "{s} is not a number of seconds in (0, {MAX_DURATION}]"
        )),
    }
}

fn parse_mtu(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(v) if mtu_of(v).is_some() => Ok(v),
        _ => Err(format!("{s} is not one of 256, 512, 1024, 2048, 4096")),
    }
}

fn mtu_of(bytes: u32) -> Option<Mtu> {
    Mtu::ALL.into_iter().find(|m| m.bytes() == bytes)
}

impl Verb {
    fn name(self) -> &'static str {
        match self {
            Verb::Send => "send",
            Verb::Write => "write",
            Verb::Read => "read",
        }
    }
}

impl Test {
    fn name(self) -> &'static str {
        match self {
            Test::Bw => "bw",
            Test::Lat => "lat",
        }
    }
}

/// What one run measures, from the arguments (checked before anything is allocated).
#[derive(Debug, Clone, Copy)]
struct Plan {
    verb: Verb,
    test: Test,
    size: usize,
    /// Iterations (including warm-up for lat); unused with `duration`.
    iters: u64,
    duration: Option<Duration>,
    /// Warm-up round trips (lat, `-n`): the first 1%, at least [`MIN_WARMUP`].
    warmup: u64,
    mtu: Mtu,
    depth: usize,
    /// Busy-polling (the default): lat also runs TCP's busy-polled ping-pong.
    busy: bool,
    /// How our devices and the server loop wait for input.
    wait: PollMode,
    ours: bool,
    tcp: bool,
    server: IpAddr,
    client: IpAddr,
}

/// The checks clap cannot make alone; a one-line reason when the arguments are refused.
fn plan(args: &Args) -> Result<Plan, String> {
    let link = args.link.is_some();
    let path_mtu = if link { args.mtu.min(1024) } else { args.mtu };
    let mtu = mtu_of(path_mtu).ok_or("-m must be 256, 512, 1024, 2048 or 4096")?;
    if link && args.test != Test::Bw {
        return Err("--link measures bw only".into());
    }
    if args.compete.is_some() && args.tcp_only {
        return Err("--compete runs ours beside the competing flow: not with --tcp-only".into());
    }
    let size = args.size.unwrap_or(match args.test {
        Test::Bw => 1 << 20,
        Test::Lat => 8,
    }) as usize;
    let iters = args.iters.unwrap_or(match args.test {
        Test::Bw => 1000,
        Test::Lat => 10000,
    });
    let warmup = (iters / 100).max(MIN_WARMUP);
    if args.test == Test::Lat && args.duration.is_none() && iters <= warmup {
        return Err(format!(
            "-n {iters}: lat needs at least {} round trips (the first 1%, at least {MIN_WARMUP}, \
             are warm-up and not in the figures)",
            MIN_WARMUP + 1
        ));
    }
    if args.server == args.client {
        return Err(format!(
            "--server and --client are both {}: the two devices need two addresses",
            args.server
        ));
    }
    if args.server.is_ipv4() != args.client.is_ipv4() {
        return Err(format!(
            "--server {} and --client {} must both be IPv4 or both IPv6",
            args.server, args.client
        ));
    }
    Ok(Plan {
        verb: args.verb,
        test: args.test,
        size,
        iters,
        duration: args
            .duration
            .or(args.compete.map(|_| COMPETE_SECS))
            .map(Duration::from_secs_f64),
        warmup,
        mtu,
        depth: args.tx_depth as usize,
        busy: !args.events && args.spin_us.is_none(),
        wait: wait_mode(args),
        ours: !args.tcp_only,
        tcp: !args.no_tcp,
        server: if link {
            crate::narrow_link::ADDR_A
        } else {
            args.server
        },
        client: if link {
            crate::narrow_link::ADDR_B
        } else {
            args.client
        },
    })
}

// ----- CPU time --------------------------------------------------------------------------------

/// The calling thread's CPU time (user + system), seconds, nanosecond resolution.
fn thread_cpu() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// The CPU time (user + system, seconds) of every thread of the process so far: for a run
/// whose work is spread over threads (`perf cm`'s two devices' threads, TCP's acceptor).
pub(crate) fn process_cpu() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// A thread's CPU time while a shared [`Phase`] says it is measured. Reads the clock only when
/// the phase it sees changes, so a ping-pong pays nothing per round trip for it.
#[derive(Debug, Default)]
struct CpuMeter {
    counting: bool,
    mark: f64,
    total: f64,
}

impl CpuMeter {
    fn observe(&mut self, measured: bool) {
        if measured != self.counting {
            let now = thread_cpu();
            if self.counting {
                self.total += now - self.mark;
            } else {
                self.mark = now;
            }
            self.counting = measured;
        }
    }

    fn finish(mut self) -> f64 {
        self.observe(false);
        self.total
    }
}

/// What the client tells a peer thread (our server, a TCP echo): warming up, measured, paused
/// (the client runs another block: sleep instead of spinning), or done.
#[derive(Clone, Debug)]
struct Phase(Arc<AtomicU8>);

const WARM: u8 = 0;
const RUN: u8 = 1;
const PAUSE: u8 = 2;
const STOP: u8 = 3;

impl Phase {
    fn new(v: u8) -> Phase {
        Phase(Arc::new(AtomicU8::new(v)))
    }
    fn set(&self, v: u8) {
        self.0.store(v, Ordering::Release);
    }
    fn get(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }
}

// ----- pinning -------------------------------------------------------------------------------

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

// ----- figures -------------------------------------------------------------------------------

/// Round-trip times: count, sum, and 10 ns bins up to 10 ms (exact values above), so the
/// median and p99 need no per-sample memory however long the run.
struct Rtts {
    bins: Vec<u32>,
    over: Vec<f64>,
    n: u64,
    sum: f64,
}

/// Bins per µs.
const BINS_PER_US: f64 = 100.0;
const BINS: usize = 1_000_000;

impl Rtts {
    fn new() -> Rtts {
        Rtts {
            bins: vec![0; BINS],
            over: Vec::new(),
            n: 0,
            sum: 0.0,
        }
    }

    fn push(&mut self, us: f64) {
        let b = (us.max(0.0) * BINS_PER_US) as usize;
        match self.bins.get_mut(b) {
            Some(c) => *c += 1,
            None => self.over.push(us),
        }
        self.n += 1;
        self.sum += us;
    }

    /// The `k`-th smallest (0-based), to the bin's middle.
    fn nth(&self, k: u64) -> f64 {
        let mut seen = 0u64;
        for (b, &c) in self.bins.iter().enumerate() {
            seen += u64::from(c);
            if seen > k {
                return (b as f64 + 0.5) / BINS_PER_US;
            }
        }
        let mut over = self.over.clone();
        over.sort_by(f64::total_cmp);
        let i = (k - seen) as usize;
        over.get(i).or(over.last()).copied().unwrap_or(0.0)
    }

    fn stats(&self) -> RttStats {
        if self.n == 0 {
            return RttStats::default();
        }
        let p99 = ((self.n as f64 * 0.99) as u64).min(self.n - 1);
        RttStats {
            median: self.nth(self.n / 2),
            mean: self.sum / self.n as f64,
            p99: self.nth(p99),
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct RttStats {
    median: f64,
    mean: f64,
    p99: f64,
}

/// One measurement's outcome.
#[derive(Clone, Copy, Debug, Default)]
struct Outcome {
    /// Bytes moved (bw) or round trips (lat), warm-up excluded.
    units: u64,
    secs: f64,
    cpu: f64,
    /// Round-trip times (lat).
    rtt: RttStats,
    /// The longest time without a completion (bw; ours only), from the start.
    max_gap: Duration,
    /// What recovery cost (bw; ours only).
    recovery: Option<Recovery>,
}

/// What loss recovery did in one bw run (ours): the requester's and the responder's
/// transport counters over the run.
#[derive(Clone, Copy, Debug, Default)]
struct Recovery {
    /// The requester's ACK timeouts (each a go-back-N that waited for the timer).
    ack_timeouts: u64,
    /// Its tail-loss probes and the go-back-Ns a probe's answer started.
    tail_probes: u64,
    fast_retransmits: u64,
    /// Request packets it sent, of them re-sent, and those a go-back did not re-send (an
    /// ACK during it covered them: the responder had kept them).
    sent: u64,
    resent: u64,
    skipped: u64,
    /// Request packets the responder received; of them out of sequence (after a hole),
    /// of those kept until the hole filled and not kept (its bound was full), and
    /// duplicates (already had them). Discarded: out of sequence and not kept, and
    /// duplicates.
    received: u64,
    out_of_seq: u64,
    kept: u64,
    kept_overflow: u64,
    duplicates: u64,
}

impl Recovery {
    /// The counters of the run's requester (`client`) and responder (`server`) devices.
    fn of(client: &Device, server: &Device) -> Recovery {
        let (c, s) = (client.counters(), server.counters());
        Recovery {
            ack_timeouts: c.ack_timeouts,
            tail_probes: c.tail_probes,
            fast_retransmits: c.fast_retransmits,
            sent: c.sent_pkts,
            resent: c.retransmitted_pkts,
            skipped: c.skipped_resends,
            received: s.rcvd_pkts,
            out_of_seq: s.out_of_seq_request,
            kept: s.kept_requests,
            kept_overflow: s.kept_overflow,
            duplicates: s.duplicate_request,
        }
    }

    /// ` | ACK timeouts … | resent …% of sent | discarded …% of received`.
    fn text(&self) -> String {
        let pct = |a: u64, b: u64| 100.0 * a as f64 / b.max(1) as f64;
        format!(
            " | ACK timeouts {} (tail probes {}, fast retransmits {}) | resent {:.1}% of sent ({} skipped) | discarded {:.1}% of received ({} out of sequence, {} of them kept, {} over the bound; {} duplicates)",
            self.ack_timeouts,
            self.tail_probes,
            self.fast_retransmits,
            pct(self.resent, self.sent),
            self.skipped,
            pct(
                self.out_of_seq.saturating_sub(self.kept) + self.duplicates,
                self.received
            ),
            self.out_of_seq,
            self.kept,
            self.kept_overflow,
            self.duplicates
        )
    }
}

impl Outcome {
    fn mbps(&self) -> f64 {
        self.units as f64 / self.secs.max(1e-9) / 1e6
    }
    fn cpu_per_gb(&self) -> f64 {
        self.cpu / (self.units as f64 / 1e9).max(1e-12)
    }
    fn cpu_per_round_us(&self) -> f64 {
        self.cpu / self.units.max(1) as f64 * 1e6
    }
    /// `median … mean … p99 … (CPU … us/iter)`, with ` us` after the median if `unit`.
    fn lat_text(&self, unit: bool) -> String {
        let RttStats { median, mean, p99 } = self.rtt;
        let us = if unit { " us" } else { "" };
        format!(
            "median {median:7.1}{us} mean {mean:7.1} p99 {p99:7.1} (CPU {:.1} us/iter)",
            self.cpu_per_round_us()
        )
    }
}

/// A run's outcomes: ours, TCP's, and (lat, busy-polled) TCP's busy-polled ping-pong.
#[derive(Clone, Copy, Debug, Default)]
struct RunOutcome {
    ours: Option<Outcome>,
    tcp: Option<Outcome>,
    tcp_busy: Option<Outcome>,
    /// Packets the narrow link's queues dropped during ours, during TCP's.
    link_drops: Option<(u64, u64)>,
    /// What the frame relay did during ours, during TCP's.
    relay: Option<(crate::relay::Counts, crate::relay::Counts)>,
    /// `--compete`: the competing flow over the same interval as ours (`tcp` is then
    /// none), and the queue drops while both ran.
    competing: Option<Outcome>,
    compete_drops: Option<u64>,
}

/// How long a `--compete` run takes without `-D`, seconds.
const COMPETE_SECS: f64 = 10.0;

/// Jain's fairness index of some throughputs: (Σx)² / (n Σx²); 1 when all are equal, 1/n
/// when one flow has everything (Jain, Chiu and Hawe, DEC-TR-301, 1984).
fn jain_index(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || sq <= 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * sq)
}

/// The frame relay's counters so far, if the link has one.
fn relay_counts() -> Option<crate::relay::Counts> {
    LINK.with(|l| l.borrow().as_ref().and_then(|l| l.relay_counts()))
}

/// Packets the narrow link's queues have dropped so far (both directions).
fn link_drops() -> Option<u64> {
    LINK.with(|l| {
        l.borrow()
            .as_ref()
            .map(|l| l.drops().iter().map(|d| d.1).sum())
    })
}

pub fn run(args: &Args) -> ExitCode {
    let plan = match plan(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("perf: {e}");
            return ExitCode::FAILURE;
        }
    };
    let amount = match args.duration {
        Some(d) if plan.test == Test::Lat => {
            format!("{d} s (first 1%, at least {MIN_WARMUP} round trips: warm-up)")
        }
        Some(d) => format!("{d} s"),
        None if plan.test == Test::Lat => {
            format!("{} iterations (first {}: warm-up)", plan.iters, plan.warmup)
        }
        None => format!("{} iterations", plan.iters),
    };
    println!(
        "softrdma perf {} {}: size {} B, {amount}, path MTU {}, {}{}, {} <- {}",
        plan.verb.name(),
        plan.test.name(),
        plan.size,
        plan.mtu.bytes(),
        match wait_mode(args) {
            PollMode::Blocking => "events (-e)".to_string(),
            PollMode::BusyPoll => "busy poll".to_string(),
            PollMode::SpinThenBlock(d) => format!("spin {} us, then events", d.as_micros()),
        },
        if args.no_gso { ", no GSO" } else { "" },
        plan.server,
        plan.client,
    );
    let _link = match args.link {
        Some(rate) => match match args.impairments() {
            None => crate::narrow_link::NarrowLink::create(rate, args.link_queue),
            imp => crate::narrow_link::NarrowLink::create_with(rate, args.link_queue, imp),
        } {
            Ok(l) => {
                println!(
                    "narrow link: {} Mbit/s each way, {} B tail-drop queue{}, veth MTU {}, path MTU {}",
                    rate / 1_000_000,
                    args.link_queue,
                    match args.impairments() {
                        None => String::new(),
                        Some(i) => format!(
                            "; frame relay: loss {:.2}% (seed {}), delay {} us + jitter {} us{}",
                            i.loss * 100.0,
                            i.seed,
                            i.delay.as_micros(),
                            i.jitter.as_micros(),
                            match i.shape {
                                Some(s) => format!(
                                    ", the relay shapes (no htb) and marks CE above {} B",
                                    s.ecn_threshold.unwrap_or(0)
                                ),
                                None => String::new(),
                            }
                        ),
                    },
                    crate::narrow_link::LINK_MTU,
                    plan.mtu.bytes()
                );
                let l = std::rc::Rc::new(l);
                LINK.with(|s| *s.borrow_mut() = Some(l.clone()));
                Some(LinkGuard(l))
            }
            Err(e) => {
                eprintln!("perf: --link: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let mut ratios = Vec::new();
    let mut fairness = Vec::new();
    for run in 1..=args.runs {
        if args.wait_quiet {
            let t = Instant::now();
            while qemu_running() && t.elapsed() < Duration::from_secs(600) {
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        let r = match plan.test {
            Test::Bw => measure_bw(args, &plan),
            Test::Lat => measure_lat(args, &plan),
        };
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                eprintln!("perf: {e}");
                return ExitCode::FAILURE;
            }
        };
        let ours = r.ours.unwrap_or_default();
        let line = match plan.test {
            Test::Bw => {
                let mut line = format!(
                    "run {run}: softrdma {:8.1} MB/s  CPU {:5.2} s/GB",
                    ours.mbps(),
                    ours.cpu_per_gb()
                );
                if let Some(t) = r.tcp {
                    line += &format!(
                        " | TCP {:8.1} MB/s  CPU {:5.2} s/GB",
                        t.mbps(),
                        t.cpu_per_gb()
                    );
                    if r.ours.is_some() {
                        let x = ours.mbps() / t.mbps().max(1e-9);
                        ratios.push(x);
                        line += &format!(" | ratio {x:.2}x TCP: higher is better");
                    }
                }
                if let (Some(c), Some(rate)) = (r.competing, args.link) {
                    let pct = |mbps: f64| 100.0 * mbps * 8e6 / rate as f64;
                    let j = jain_index(&[ours.mbps(), c.mbps()]);
                    fairness.push(j);
                    line += &format!(
                        " | competing TCP {:8.1} MB/s | of the link: softrdma {:.0}% TCP {:.0}% together {:.0}% | Jain's index {j:.3}",
                        c.mbps(),
                        pct(ours.mbps()),
                        pct(c.mbps()),
                        pct(ours.mbps() + c.mbps())
                    );
                    if let Some(d) = r.compete_drops {
                        line += &format!(" | queue drops {d}");
                    }
                }
                if let (Some(rate), None) = (args.link, r.competing) {
                    // Goodput (payload) against the link's bit rate.
                    let pct = |mbps: f64| 100.0 * mbps * 8e6 / rate as f64;
                    line += &format!(" | of the link: softrdma {:.0}%", pct(ours.mbps()));
                    if let Some(t) = r.tcp {
                        line += &format!(" TCP {:.0}%", pct(t.mbps()));
                    }
                    if let Some(d) = &r.link_drops {
                        line += &format!(" | queue drops: softrdma {} TCP {}", d.0, d.1);
                    }
                    if let Some(d) = &r.relay {
                        line += &format!(
                            " | relay lost: softrdma {} TCP {}, CE marked: softrdma {} TCP {}",
                            d.0.lost, d.1.lost, d.0.ce_marked, d.1.ce_marked
                        );
                    }
                    line += &format!(
                        " | longest gap between completions {:.1} ms",
                        ours.max_gap.as_secs_f64() * 1e3
                    );
                    if let Some(rc) = ours.recovery {
                        line += &rc.text();
                    }
                }
                line
            }
            Test::Lat => {
                let mut line = format!("run {run}: softrdma RTT {}", ours.lat_text(true));
                if let Some(t) = r.tcp {
                    line += &format!(" | TCP {}", t.lat_text(false));
                }
                if let Some(t) = r.tcp_busy {
                    line += &format!(" | TCP busy-poll {}", t.lat_text(false));
                }
                // Like with like: a busy-polled run against TCP busy-polling, an event-mode run
                // against TCP's blocking reads.
                let base = match (r.tcp_busy, r.tcp) {
                    (Some(t), _) => Some((t, "TCP busy-poll")),
                    (None, Some(t)) => Some((t, "TCP")),
                    _ => None,
                };
                if let (Some((t, name)), true) = (base, r.ours.is_some()) {
                    let x = ours.rtt.median / t.rtt.median.max(1e-9);
                    ratios.push(x);
                    line += &format!(" | ratio {x:.2}x {name}: lower is better");
                }
                line
            }
        };
        println!("{line}{}", noisy(args));
    }
    if fairness.len() > 1 {
        let mut f = fairness.clone();
        f.sort_by(f64::total_cmp);
        println!(
            "Jain's index over {} runs: min {:.3} median {:.3} max {:.3}",
            f.len(),
            f[0],
            f[f.len() / 2],
            f[f.len() - 1]
        );
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

/// Takes the narrow link out of [`LINK`] when the run ends (so it is deleted).
struct LinkGuard(#[allow(dead_code)] std::rc::Rc<crate::narrow_link::NarrowLink>);

impl Drop for LinkGuard {
    fn drop(&mut self) {
        LINK.with(|s| s.borrow_mut().take());
    }
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

/// Base address (iova) of every node's buffer.
const BUF_IOVA: u64 = 0x1000_0000;

/// Most bytes of one node's buffer (slots of `size` bytes; WRs beyond reuse them).
const MAX_BUF: usize = 256 << 20;

/// How our devices wait for input: `-e`, `--spin-us` or busy-polling.
fn wait_mode(args: &Args) -> PollMode {
    match (args.events, args.spin_us) {
        (true, _) => PollMode::Blocking,
        (false, Some(us)) => PollMode::SpinThenBlock(Duration::from_micros(us)),
        (false, None) => PollMode::BusyPoll,
    }
}

/// Slots of `size` bytes in each node's buffer for bw: the depth, at least 64, within
/// [`MAX_BUF`].
fn slots_for(size: usize, depth: usize) -> usize {
    let cap = (MAX_BUF / size.max(1)).max(1);
    depth.max(64).min(cap)
}

/// Where a node's QP and buffer are, for its peer.
#[derive(Clone, Copy, Debug)]
struct Remote {
    ip: IpAddr,
    qpn: u32,
    rkey: u32,
    addr: u64,
}

/// One device with one RC QP, its CQ and its buffer.
struct Node {
    dev: Device,
    ip: IpAddr,
    cq: CqId,
    qpn: u32,
    mr: MrKeys,
}

/// Queue depths of one node.
#[derive(Clone, Copy, Debug)]
struct Depths {
    send: u32,
    recv: u32,
}

impl Node {
    fn open(
        ip: IpAddr,
        seed: u64,
        args: &Args,
        buf_len: usize,
        depths: Depths,
    ) -> Result<Node, String> {
        let mut cfg = DeviceConfig::new(ip)
            .with_netdev_mtu(if args.link.is_some() {
                crate::narrow_link::LINK_MTU
            } else {
                65536 // loopback
            })
            .with_seed(seed)
            .with_defer_flush(true)
            .with_progress(Progress::Inline)
            .with_wait(wait_mode(args));
        cfg.name = format!("perf{seed}");
        cfg.endpoint.gso = !args.no_gso;
        let dev = Device::open_with(cfg).map_err(|e| {
            if crate::cmtool::is_in_use(&e) {
                crate::cmtool::in_use_message(
                    ip,
                    "choose other loopback addresses with --server ADDR and --client ADDR",
                )
            } else {
                format!("device on {ip}: {e}")
            }
        })?;
        // Through the narrow link the controller is on (that is what the link measures);
        // on loopback off, as every device's default. SOFTRDMA_CC overrides either.
        crate::narrow_link::apply_cc(&dev, args.link.is_some());
        let err =
            |what: &'static str| move |e: softrdma_driver::Error| format!("{ip}: {what}: {e}");
        let pd = dev.alloc_pd().map_err(err("alloc_pd"))?;
        let cq = dev
            .create_cq(depths.send + depths.recv)
            .map_err(err("create_cq"))?;
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        // A non-zero fill writes every page now, as perftest initialises its buffers: a page's
        // first write in the measurement would cost a page fault (and, after a read had mapped
        // the zero page, a TLB shootdown IPI to the other CPU).
        let mr = dev
            .reg_mr(pd, vec![0xa5; buf_len], BUF_IOVA, access)
            .map_err(err("reg_mr"))?;
        let (qpn, _) = dev
            .create_qp(QpInitAttr::rc(pd, cq, depths.send, depths.recv))
            .map_err(err("create_qp"))?;
        Ok(Node {
            dev,
            ip,
            cq,
            qpn,
            mr,
        })
    }

    /// What the peer needs to know.
    fn remote(&self) -> Remote {
        Remote {
            ip: self.ip,
            qpn: self.qpn,
            rkey: self.mr.rkey,
            addr: BUF_IOVA,
        }
    }

    /// RESET → INIT → RTR → RTS towards `peer`.
    fn connect(&self, peer: &Remote, mtu: Mtu) -> Result<(), String> {
        let sgid_index = self
            .dev
            .ip_gid_index()
            .ok_or_else(|| format!("{}: no GID for the device's address", self.ip))?;
        let attr = QpAttr {
            qp_access_flags: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            path_mtu: mtu,
            dest_qp_num: peer.qpn,
            rq_psn: 0,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 1,
            ah_attr: AddressVector {
                dgid: Gid::from(peer.ip),
                sgid_index,
                ..AddressVector::default()
            },
            timeout: 14, // 4.096 µs × 2^14 ≈ 67 ms
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: 0,
            max_rd_atomic: 16,
            ..QpAttr::default()
        };
        for (a, mask) in steps_to_rts(QpType::Rc, &attr) {
            self.dev
                .modify_qp(self.qpn, &a, mask)
                .map_err(|e| format!("{}: modify_qp to {}: {e}", self.ip, a.qp_state))?;
        }
        Ok(())
    }

    fn sge(&self, slot: usize, size: usize) -> Sge {
        Sge {
            addr: BUF_IOVA + (slot * size) as u64,
            length: size as u32,
            lkey: self.mr.lkey,
        }
    }

    fn post_send(&self, wr: SendWr) -> Result<(), String> {
        self.dev
            .post_send(self.qpn, wr)
            .map_err(|e| format!("{}: post_send: {e}", self.ip))
    }

    fn post_recv(&self, wr_id: u64, sge: Sge) -> Result<(), String> {
        self.dev
            .post_recv(self.qpn, RecvWr::new(wr_id, vec![sge]))
            .map_err(|e| format!("{}: post_recv: {e}", self.ip))
    }

    /// Completions already there (no loop turn), appended to `out`.
    fn take_completions(&self, out: &mut Vec<WorkCompletion>) -> Result<usize, String> {
        out.clear();
        self.dev
            .wait_cq(self.cq, out, 64, Some(Duration::ZERO))
            .map_err(|e| format!("{}: poll_cq: {e}", self.ip))
    }

    /// Waits up to `timeout` for completions (the device's wait mode), appended to `out`.
    fn wait_completions(
        &self,
        out: &mut Vec<WorkCompletion>,
        timeout: Duration,
    ) -> Result<usize, String> {
        out.clear();
        self.dev
            .wait_cq(self.cq, out, 64, Some(timeout))
            .map_err(|e| format!("{}: wait_cq: {e}", self.ip))
    }

    /// Whether the `k` = min(size, 8) bytes at the end of `slot` hold `stamp`'s low bytes.
    fn has_stamp(&self, slot: usize, size: usize, stamp: u64) -> bool {
        let k = size.min(8);
        let mut got = [0u8; 8];
        let at = BUF_IOVA + ((slot + 1) * size - k) as u64;
        let Some(dst) = got.get_mut(..k) else {
            return false;
        };
        self.dev.read_mr(self.mr.lkey, at, dst).is_ok()
            && got.get(..k) == stamp.to_le_bytes().get(..k)
    }

    /// Writes `stamp`'s low min(size, 8) bytes at the end of `slot`.
    fn stamp(&self, slot: usize, size: usize, stamp: u64) -> Result<(), String> {
        let k = size.min(8);
        let at = BUF_IOVA + ((slot + 1) * size - k) as u64;
        let bytes = stamp.to_le_bytes();
        self.dev
            .write_mr(self.mr.lkey, at, bytes.get(..k).unwrap_or_default())
            .map_err(|e| format!("{}: write_mr: {e}", self.ip))
    }
}

fn check(wc: &WorkCompletion, ip: IpAddr) -> Result<(), String> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(format!(
            "{ip}: completion of wr_id {} failed: {} ({})",
            wc.wr_id,
            wc.status.as_str(),
            wc.status.to_verbs()
        ))
    }
}

/// Our two nodes, connected, with the server on its own thread.
struct Pair {
    client: Node,
    peer: Remote,
    /// The server's device (for its counters) and how to wake its thread.
    server_dev: Device,
    server_waker: Notifier,
    phase: Phase,
    server: std::thread::JoinHandle<Result<f64, String>>,
}

impl Pair {
    fn open(args: &Args, plan: &Plan) -> Result<Pair, String> {
        let (slots, client_depths, server_depths) = match plan.test {
            Test::Bw => {
                let slots = slots_for(plan.size, plan.depth);
                // SEND bw: the server keeps as many receives posted as the client may have
                // SENDs outstanding, and at least a buffer's worth.
                let recv = (plan.depth.max(slots) as u32).min(MAX_TX_DEPTH);
                (
                    slots,
                    Depths {
                        send: plan.depth as u32,
                        recv: 1,
                    },
                    Depths { send: 1, recv },
                )
            }
            // Slot 0: what we send; slot 1: where the peer's WRITE lands.
            Test::Lat => (
                2,
                Depths {
                    send: 64,
                    recv: LAT_RECVS,
                },
                Depths {
                    send: 64,
                    recv: LAT_RECVS,
                },
            ),
        };
        let buf_len = plan.size * slots;
        use crate::narrow_link::Side;
        let server = in_side(Side::A, || {
            Node::open(plan.server, 2, args, buf_len, server_depths)
        })?;
        let client = in_side(Side::B, || {
            Node::open(plan.client, 1, args, buf_len, client_depths)
        })?;
        let (rs, rc) = (server.remote(), client.remote());
        server.connect(&rc, plan.mtu)?;
        client.connect(&rs, plan.mtu)?;
        let phase = Phase::new(WARM);
        let server_dev = server.dev.clone();
        let server_waker = server.dev.notifier();
        let (p, pl, pin) = (phase.clone(), *plan, args.pin);
        pin_side(pin, false);
        let server = std::thread::spawn(move || {
            pin_side(pin, true);
            serve(&server, &rc, &pl, slots, server_depths.recv, &p)
        });
        Ok(Pair {
            client,
            peer: rs,
            server_dev,
            server_waker,
            phase,
            server,
        })
    }

    /// Lets the server answer any last retransmission, stops it; returns its measured CPU.
    fn finish(self, verbose: Option<(u64, &str, [IoStats; 2])>) -> Result<f64, String> {
        let _ = self.client.dev.progress_for(Duration::from_millis(20));
        self.phase.set(STOP);
        let _ = self.server_waker.notify();
        let cpu = self
            .server
            .join()
            .map_err(|_| "the server thread panicked".to_string())?;
        if let Some((units, unit, before)) = verbose {
            let qpn = self.client.qpn;
            if let Some(cc) = self.client.dev.with_stack(|s| s.cc(qpn).cloned()) {
                println!(
                    "  client congestion control: rate {:.0} MB/s, mode {:?}, srtt {:?} us (min {:?}, dev {}), cuts: delay {} loss {} CNP {}, losses not cut {}, competitive-mode entries {}",
                    cc.rate / 1e6,
                    cc.mode,
                    cc.srtt,
                    cc.min_rtt,
                    cc.rttvar,
                    cc.cuts_delay,
                    cc.cuts_loss,
                    cc.cuts_cnp,
                    cc.losses_ignored,
                    cc.compete_entries
                );
            }
            for ((name, dev), before) in
                [("client", &self.client.dev), ("server", &self.server_dev)]
                    .into_iter()
                    .zip(before)
            {
                show_counters(name, dev, units, unit, before);
            }
        }
        cpu
    }
}

fn show_counters(name: &str, dev: &Device, units: u64, unit: &str, before: IoStats) {
    let c: Vec<String> = dev
        .counters()
        .iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let d = dev.driver_counters();
    println!(
        "  {name} counters: {} send_errors={}",
        c.join(" "),
        d.tx_errors + d.tx_dropped
    );
    let st = dev.io_stats();
    let per = |now: u64, then: u64| (now - then) as f64 / units.max(1) as f64;
    println!(
        "  {name} loop per {unit}: recvmmsg {:.2} (empty {:.2}) epoll sleeps {:.2} sendmsg {:.2}",
        per(st.recv_calls, before.recv_calls),
        per(st.recv_empty, before.recv_empty),
        per(st.recv_waits, before.recv_waits),
        per(st.send_calls, before.send_calls)
    );
}

/// Receives the lat client and server keep posted (SEND lat).
const LAT_RECVS: u32 = 16;

/// How long an idle server waits in one go before looking at its phase again.
const SERVER_TICK: Duration = Duration::from_millis(50);

/// The server side: keeps receives posted (SEND), bounces WRITEs (WRITE lat) and SENDs (SEND
/// lat), and otherwise just runs the responder. Returns its CPU time while measured.
fn serve(
    n: &Node,
    peer: &Remote,
    plan: &Plan,
    slots: usize,
    recvs: u32,
    phase: &Phase,
) -> Result<f64, String> {
    let size = plan.size;
    let mut meter = CpuMeter::default();
    if plan.verb == Verb::Send {
        for k in 0..u64::from(recvs) {
            n.post_recv(k, n.sge(k as usize % slots, size))?;
        }
    }
    let write_lat = plan.verb == Verb::Write && plan.test == Test::Lat;
    let mut expect: u64 = 1;
    let mut wcs = Vec::with_capacity(64);
    let base = plan.wait;
    loop {
        let ph = phase.get();
        meter.observe(ph == RUN);
        if ph == STOP {
            break;
        }
        let mut progressed = n.take_completions(&mut wcs)? > 0;
        for wc in &wcs {
            check(wc, n.ip)?;
            if wc.opcode == WcOpcode::Recv {
                n.post_recv(wc.wr_id, n.sge(wc.wr_id as usize % slots, size))?;
                if plan.test == Test::Lat {
                    let wr = SendWr {
                        signaled: false,
                        ..SendWr::new(0, SendOp::Send).with_sge(n.sge(0, size))
                    };
                    n.post_send(wr)?;
                }
            }
        }
        if write_lat && n.has_stamp(1, size, expect) {
            // perftest's write_lat: the counter arrived at the end of slot 1; WRITE the message
            // (counter included) back into the client's slot 1.
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
                .with_sge(n.sge(1, size))
            };
            n.post_send(wr)?;
        }
        if !progressed {
            // While the client runs a TCP block, sleep instead of spinning on its CPU.
            let mode = if ph == PAUSE {
                PollMode::Blocking
            } else {
                base
            };
            n.dev
                .progress_wait(mode, Some(SERVER_TICK))
                .map_err(|e| format!("{}: event loop: {e}", n.ip))?;
        }
    }
    n.dev.flush();
    Ok(meter.finish())
}

fn measure_bw(args: &Args, plan: &Plan) -> Result<RunOutcome, String> {
    if args.compete.is_some() {
        return measure_compete(args, plan);
    }
    let mut out = RunOutcome::default();
    let d0 = link_drops();
    let r0 = relay_counts();
    if plan.ours {
        let pair = Pair::open(args, plan)?;
        let before = [pair.client.dev.io_stats(), pair.server_dev.io_stats()];
        let r = client_bw(&pair, plan);
        let recovery = Recovery::of(&pair.client.dev, &pair.server_dev);
        let units = r.as_ref().map_or(1, |o| o.units / plan.size as u64);
        let server_cpu = pair.finish(args.verbose.then_some((units, "message", before)))?;
        let mut o = r?;
        o.cpu += server_cpu;
        o.recovery = Some(recovery);
        out.ours = Some(o);
    }
    if plan.tcp {
        let bytes = match out.ours {
            Some(o) => o.units,
            None => plan.iters * plan.size as u64,
        };
        let d1 = link_drops();
        let r1 = relay_counts();
        out.tcp = Some(tcp_bw(args, plan, bytes).map_err(|e| format!("tcp baseline: {e}"))?);
        if let (Some(a), Some(b), Some(c)) = (d0, d1, link_drops()) {
            out.link_drops = Some((b - a, c - b));
        }
        if let (Some(a), Some(b), Some(c)) = (r0, r1, relay_counts()) {
            out.relay = Some((b.minus(&a), c.minus(&b)));
        }
    }
    Ok(out)
}

/// `--compete tcp`: a bulk TCP stream through the link in our data's direction (client to
/// server for SEND and WRITE, server to client for READ's responses) starts first and runs
/// until ours has finished; each one's goodput is counted over the interval ours ran.
fn measure_compete(args: &Args, plan: &Plan) -> Result<RunOutcome, String> {
    use crate::narrow_link::Side;
    let toward_server = plan.verb != Verb::Read;
    let (recv_side, send_side) = if toward_server {
        (Side::A, Side::B)
    } else {
        (Side::B, Side::A)
    };
    let recv_addr = if toward_server {
        plan.server
    } else {
        plan.client
    };
    let tcp = CompetingTcp::start(args.pin, recv_side, send_side, recv_addr)
        .map_err(|e| format!("competing tcp: {e}"))?;
    // Let the stream leave slow start and fill the queue: ours joins a link already in use.
    std::thread::sleep(Duration::from_millis(500));
    let pair = Pair::open(args, plan)?;
    let before = [pair.client.dev.io_stats(), pair.server_dev.io_stats()];
    let (d0, g0, t0) = (link_drops(), tcp.received(), Instant::now());
    let r = client_bw(&pair, plan);
    let (d1, g1, secs) = (link_drops(), tcp.received(), t0.elapsed().as_secs_f64());
    tcp.stop().map_err(|e| format!("competing tcp: {e}"))?;
    let units = r.as_ref().map_or(1, |o| o.units / plan.size as u64);
    let server_cpu = pair.finish(args.verbose.then_some((units, "message", before)))?;
    let mut o = r?;
    o.cpu += server_cpu;
    Ok(RunOutcome {
        ours: Some(o),
        competing: Some(Outcome {
            units: g1 - g0,
            secs,
            // Not measured (not printed): the share of the link is the point here.
            cpu: 0.0,
            rtt: RttStats::default(),
            max_gap: Duration::ZERO,
            recovery: None,
        }),
        compete_drops: d0.zip(d1).map(|(a, b)| b - a),
        ..RunOutcome::default()
    })
}

/// A bulk TCP stream through the narrow link for as long as it is kept: a sender writing as
/// fast as the socket takes, a reader counting bytes as they arrive.
struct CompetingTcp {
    stop: Arc<std::sync::atomic::AtomicBool>,
    got: Arc<std::sync::atomic::AtomicU64>,
    threads: Vec<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl CompetingTcp {
    fn start(
        pin: Pin,
        recv_side: crate::narrow_link::Side,
        send_side: crate::narrow_link::Side,
        recv_addr: IpAddr,
    ) -> std::io::Result<CompetingTcp> {
        use std::sync::atomic::{AtomicBool, AtomicU64};
        let io = |e: String| std::io::Error::other(e);
        let listener = in_side(recv_side, || {
            TcpListener::bind(SocketAddr::new(recv_addr, 0)).map_err(|e| e.to_string())
        })
        .map_err(io)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let got = Arc::new(AtomicU64::new(0));
        let server_side = recv_side == crate::narrow_link::Side::A;
        let (g, st) = (got.clone(), stop.clone());
        let reader = std::thread::spawn(move || -> std::io::Result<()> {
            pin_side(pin, server_side);
            let (mut s, _) = listener.accept()?;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = s.read(&mut buf)?;
                if n == 0 || st.load(Ordering::Relaxed) {
                    break;
                }
                g.fetch_add(n as u64, Ordering::Relaxed);
            }
            Ok(())
        });
        let s = in_side(send_side, || {
            TcpStream::connect(addr).map_err(|e| e.to_string())
        })
        .map_err(io)?;
        let st = stop.clone();
        let sender = std::thread::spawn(move || -> std::io::Result<()> {
            pin_side(pin, !server_side);
            let mut s = s;
            let data = vec![0x5au8; 1 << 20];
            while !st.load(Ordering::Relaxed) {
                if let Err(e) = s.write_all(&data) {
                    // The reader stops first and closes its end.
                    return if st.load(Ordering::Relaxed) {
                        Ok(())
                    } else {
                        Err(e)
                    };
                }
            }
            let _ = s.shutdown(std::net::Shutdown::Both);
            Ok(())
        });
        Ok(CompetingTcp {
            stop,
            got,
            threads: vec![reader, sender],
        })
    }

    /// Bytes the reader has received so far.
    fn received(&self) -> u64 {
        self.got.load(Ordering::Relaxed)
    }

    fn stop(self) -> std::io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join()
                .map_err(|_| std::io::Error::other("a tcp thread panicked"))??;
        }
        Ok(())
    }
}

fn client_bw(pair: &Pair, plan: &Plan) -> Result<Outcome, String> {
    let n = &pair.client;
    let peer = &pair.peer;
    let size = plan.size;
    let slots = slots_for(size, plan.depth);
    let mut wcs = Vec::with_capacity(64);
    pair.phase.set(RUN);
    let (t0, cpu0) = (Instant::now(), thread_cpu());
    let (mut posted, mut done) = (0u64, 0u64);
    let mut last = t0;
    let mut max_gap = Duration::ZERO;
    let want = |posted: u64| match plan.duration {
        Some(d) => t0.elapsed() < d,
        None => posted < plan.iters,
    };
    loop {
        while (posted - done) < plan.depth as u64 && want(posted) {
            let k = (posted as usize) % slots;
            let remote_addr = peer.addr + (k * size) as u64;
            let op = match plan.verb {
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
            n.post_send(SendWr::new(posted, op).with_sge(n.sge(k, size)))?;
            posted += 1;
        }
        if done == posted {
            break;
        }
        if n.wait_completions(&mut wcs, STALL)? == 0 {
            return Err(format!(
                "no completion for {} s ({done} of {posted} messages done)",
                STALL.as_secs()
            ));
        }
        for wc in &wcs {
            check(wc, n.ip)?;
            done += 1;
        }
        let now = Instant::now();
        max_gap = max_gap.max(now.duration_since(last));
        last = now;
    }
    let cpu = thread_cpu() - cpu0;
    pair.phase.set(PAUSE);
    Ok(Outcome {
        units: done * size as u64,
        secs: last.duration_since(t0).as_secs_f64(),
        cpu,
        max_gap,
        rtt: RttStats::default(),
        recovery: None,
    })
}

/// Round trips per block when ours and TCP's ping-pongs alternate.
const LAT_BLOCK: u64 = 250;

/// The client side of our ping-pong.
struct OursLat {
    pair: Pair,
    verb: Verb,
    size: usize,
    /// Round trips so far (warm-up included): the counter of WRITE lat.
    i: u64,
    wcs: Vec<WorkCompletion>,
    mode: PollMode,
}

impl OursLat {
    fn new(pair: Pair, plan: &Plan) -> Result<OursLat, String> {
        let n = &pair.client;
        if plan.verb == Verb::Send {
            for k in 0..u64::from(LAT_RECVS) {
                n.post_recv(k, n.sge(0, plan.size))?;
            }
        }
        Ok(OursLat {
            pair,
            verb: plan.verb,
            size: plan.size,
            i: 0,
            wcs: Vec::with_capacity(64),
            mode: plan.wait,
        })
    }

    /// One round trip, in µs.
    fn round(&mut self) -> Result<f64, String> {
        let n = &self.pair.client;
        let peer = &self.pair.peer;
        let size = self.size;
        self.i += 1;
        let i = self.i;
        let start = Instant::now();
        let op = match self.verb {
            Verb::Send => SendOp::Send,
            Verb::Write => {
                // The counter goes in the message's last 8 bytes (all of it below 8).
                n.stamp(0, size, i)?;
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
        let wr = SendWr {
            signaled: self.verb == Verb::Read,
            ..SendWr::new(i, op).with_sge(n.sge(0, size))
        };
        n.post_send(wr)?;
        // Wait for the answer: a completion (SEND: the bounced SEND's receive; READ: the
        // READ), or for WRITE the counter written back into our memory. Our ACK of it leaves
        // with the next request (defer_flush).
        loop {
            let left = STALL.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(format!(
                    "round trip {i} got no answer in {} s",
                    STALL.as_secs()
                ));
            }
            if self.verb == Verb::Write {
                if n.has_stamp(1, size, i) {
                    break;
                }
                n.dev
                    .progress_wait(self.mode, Some(left))
                    .map_err(|e| format!("{}: event loop: {e}", n.ip))?;
                continue;
            }
            if n.wait_completions(&mut self.wcs, left)? == 0 {
                continue;
            }
            for wc in &self.wcs {
                check(wc, n.ip)?;
                if wc.opcode == WcOpcode::Recv {
                    n.post_recv(wc.wr_id, n.sge(0, size))?;
                }
            }
            break;
        }
        Ok(start.elapsed().as_secs_f64() * 1e6)
    }
}

/// A connected TCP ping-pong pair (the baseline), run in blocks between ours. Busy: both ends
/// spin on non-blocking reads while measured (the echo sleeps in a blocking read while paused).
struct TcpPing {
    stream: TcpStream,
    echo: std::thread::JoinHandle<std::io::Result<f64>>,
    buf: Vec<u8>,
    busy: bool,
    phase: Phase,
}

impl TcpPing {
    fn new(server: IpAddr, size: usize, pin: Pin, busy: bool) -> std::io::Result<TcpPing> {
        let listener = TcpListener::bind(SocketAddr::new(server, 0))?;
        let addr = listener.local_addr()?;
        let phase = Phase::new(PAUSE);
        let p = phase.clone();
        let echo = std::thread::spawn(move || -> std::io::Result<f64> {
            pin_side(pin, true);
            let (mut s, _) = listener.accept()?;
            s.set_nodelay(true)?;
            let mut buf = vec![0u8; size];
            let mut meter = CpuMeter::default();
            let mut blocking = true;
            loop {
                let ph = p.get();
                meter.observe(ph == RUN);
                if busy && blocking != (ph == PAUSE) {
                    blocking = ph == PAUSE;
                    s.set_nonblocking(!blocking)?;
                }
                let got = if blocking {
                    s.read_exact(&mut buf).map(|()| true)
                } else {
                    spin_read(&mut s, &mut buf, Some(&p))
                };
                match got {
                    Ok(true) => spin_write(&mut s, &buf)?,
                    Ok(false) => {} // paused mid-spin: block instead
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(e),
                }
            }
            Ok(meter.finish())
        });
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(busy)?;
        Ok(TcpPing {
            stream,
            echo,
            buf: vec![0u8; size],
            busy,
            phase,
        })
    }

    /// One round trip (write, then read the echo), in µs.
    fn round(&mut self) -> std::io::Result<f64> {
        let start = Instant::now();
        if self.busy {
            spin_write(&mut self.stream, &self.buf)?;
            spin_read(&mut self.stream, &mut self.buf, None)?;
        } else {
            self.stream.write_all(&self.buf)?;
            self.stream.read_exact(&mut self.buf)?;
        }
        Ok(start.elapsed().as_secs_f64() * 1e6)
    }

    /// Closes the connection; returns the echo thread's CPU time while measured.
    fn finish(self) -> std::io::Result<f64> {
        self.stream.shutdown(std::net::Shutdown::Write)?;
        self.echo
            .join()
            .map_err(|_| std::io::Error::other("echo panicked"))?
    }
}

/// Reads `buf.len()` bytes from a non-blocking stream, spinning on would-block. With `pause`:
/// gives up (`Ok(false)`) when it turns PAUSE before the first byte.
fn spin_read(s: &mut TcpStream, buf: &mut [u8], pause: Option<&Phase>) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(buf.get_mut(got..).unwrap_or_default()) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if got == 0 && pause.is_some_and(|p| p.get() == PAUSE) {
                    return Ok(false);
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Writes all of `buf` to a stream that may be non-blocking, spinning on would-block.
fn spin_write(s: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
    let mut put = 0;
    while put < buf.len() {
        match s.write(buf.get(put..).unwrap_or_default()) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(k) => put += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Which figure a [`LatSide`] gives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Ours,
    Tcp,
    TcpBusy,
}

/// One side of the latency comparison: ours or a TCP ping-pong, with what it measured.
struct LatSide<'a> {
    slot: Slot,
    kind: LatKind<'a>,
    rtts: Rtts,
    secs: f64,
    cpu: f64,
}

enum LatKind<'a> {
    Ours(&'a mut OursLat),
    Tcp(&'a mut TcpPing),
}

impl LatSide<'_> {
    fn phase(&self) -> &Phase {
        match &self.kind {
            LatKind::Ours(o) => &o.pair.phase,
            LatKind::Tcp(t) => &t.phase,
        }
    }

    fn round(&mut self) -> Result<f64, String> {
        match &mut self.kind {
            LatKind::Ours(o) => o.round(),
            LatKind::Tcp(t) => t.round().map_err(|e| format!("tcp baseline: {e}")),
        }
    }

    /// `count` round trips, recorded or (warm-up) not; a warm-up goes on until `at_least`
    /// has passed too. Returns the round trips done. A recorded block starts with one
    /// unrecorded round trip: the peer slept while the other blocks ran, and its wake-up is
    /// an artefact of interleaving, not part of a ping-pong's round trip.
    fn block(&mut self, count: u64, measured: bool, at_least: Duration) -> Result<u64, String> {
        self.phase().set(WARM);
        if measured {
            self.round()?;
            self.phase().set(RUN);
        }
        let (t0, c0) = (Instant::now(), thread_cpu());
        let mut done = 0;
        while done < count || (!measured && t0.elapsed() < at_least) {
            let us = self.round()?;
            if measured {
                self.rtts.push(us);
            }
            done += 1;
        }
        if measured {
            self.secs += t0.elapsed().as_secs_f64();
            self.cpu += thread_cpu() - c0;
        }
        self.phase().set(PAUSE);
        if let LatKind::Ours(o) = &self.kind {
            // Our last ACK goes out, and the server stops spinning (it sleeps until the next
            // block's first request).
            o.pair.client.dev.flush();
            let _ = o.pair.server_waker.notify();
        }
        Ok(done)
    }

    fn outcome(&self) -> Outcome {
        Outcome {
            units: self.rtts.n,
            secs: self.secs,
            cpu: self.cpu,
            rtt: self.rtts.stats(),
            max_gap: Duration::ZERO,
            recovery: None,
        }
    }
}

/// Round trips of ours, alternating (unless `--no-tcp`) with blocks of TCP round trips of the
/// same size: the scheduler on these VMs sometimes packs both threads of a ping-pong on one
/// vCPU (a round trip of 16 µs for TCP) and sometimes not (80-120 µs), and switches between
/// the two within a second; blocks of [`LAT_BLOCK`] keep all measurements in the same
/// conditions. While another block runs, the server side of each sleeps (our server device
/// in epoll even when busy-polling, a busy TCP echo in a blocking read), so it does not take
/// a core from the block that runs.
fn measure_lat(args: &Args, plan: &Plan) -> Result<RunOutcome, String> {
    let mut ours = match plan.ours {
        true => Some(OursLat::new(Pair::open(args, plan)?, plan)?),
        false => None,
    };
    let tcp_err = |e: std::io::Error| format!("tcp baseline: {e}");
    let mut tcp = match plan.tcp {
        true => Some(TcpPing::new(plan.server, plan.size, args.pin, false).map_err(tcp_err)?),
        false => None,
    };
    let mut tcp_busy = match plan.tcp && plan.busy {
        true => Some(TcpPing::new(plan.server, plan.size, args.pin, true).map_err(tcp_err)?),
        false => None,
    };
    let devs = ours
        .as_ref()
        .map(|o| (o.pair.client.dev.clone(), o.pair.server_dev.clone()));
    let side = |slot, kind| LatSide {
        slot,
        kind,
        rtts: Rtts::new(),
        secs: 0.0,
        cpu: 0.0,
    };
    let mut sides: Vec<LatSide<'_>> = Vec::new();
    if let Some(o) = ours.as_mut() {
        sides.push(side(Slot::Ours, LatKind::Ours(o)));
    }
    if let Some(t) = tcp.as_mut() {
        sides.push(side(Slot::Tcp, LatKind::Tcp(t)));
    }
    if let Some(t) = tcp_busy.as_mut() {
        sides.push(side(Slot::TcpBusy, LatKind::Tcp(t)));
    }

    let mut before = None;
    let r = run_blocks(&mut sides, plan, || {
        before = devs.as_ref().map(|(c, s)| [c.io_stats(), s.io_stats()]);
    });
    let mut out = RunOutcome::default();
    for s in &sides {
        let o = Some(s.outcome());
        match s.slot {
            Slot::Ours => out.ours = o,
            Slot::Tcp => out.tcp = o,
            Slot::TcpBusy => out.tcp_busy = o,
        }
    }
    drop(sides);
    if let Some(o) = ours {
        let units = out.ours.map_or(1, |o| o.units);
        let verbose = match (args.verbose && r.is_ok(), before) {
            (true, Some(b)) => Some((units, "round trip", b)),
            _ => None,
        };
        // The server's error, if it had one, says more than the client's missing answer.
        let cpu = o.pair.finish(verbose)?;
        r.clone()?;
        if let Some(x) = out.ours.as_mut() {
            x.cpu += cpu;
        }
    }
    r?;
    for (t, slot) in [(tcp, &mut out.tcp), (tcp_busy, &mut out.tcp_busy)] {
        if let Some(t) = t {
            let cpu = t.finish().map_err(tcp_err)?;
            if let Some(x) = slot.as_mut() {
                x.cpu += cpu;
            }
        }
    }
    Ok(out)
}

/// The warm-up, then (after `measuring`) the recorded blocks of every side in turn.
fn run_blocks(
    sides: &mut [LatSide<'_>],
    plan: &Plan,
    measuring: impl FnOnce(),
) -> Result<(), String> {
    // Warm-up: the first 1% (at least MIN_WARMUP round trips; with -D, at least 1% of the
    // time: as many as the first side does in it), run by every side, recorded by none.
    let t0 = Instant::now();
    let (mut warmup, mut at_least) = match plan.duration {
        Some(d) => (MIN_WARMUP, d / 100),
        None => (plan.warmup, Duration::ZERO),
    };
    for s in sides.iter_mut() {
        warmup = s.block(warmup, false, at_least)?;
        at_least = Duration::ZERO;
    }
    measuring();
    let mut done = warmup;
    let more = |done: u64| match plan.duration {
        Some(d) => t0.elapsed() < d,
        None => done < plan.iters,
    };
    // At least one block, however short -D is.
    loop {
        let count = match plan.duration {
            Some(_) => LAT_BLOCK,
            None => LAT_BLOCK.min(plan.iters.saturating_sub(done)).max(1),
        };
        for s in sides.iter_mut() {
            s.block(count, true, Duration::ZERO)?;
        }
        done += count;
        if !more(done) {
            return Ok(());
        }
    }
}

// ----- TCP baseline (bw) ---------------------------------------------------------------------

/// A TCP stream of `total` bytes in `size`-byte writes; CPU of the writer and reader threads.
fn tcp_bw(args: &Args, plan: &Plan, total: u64) -> std::io::Result<Outcome> {
    use crate::narrow_link::Side;
    let io = |e: String| std::io::Error::other(e);
    let listener = in_side(Side::A, || {
        TcpListener::bind(SocketAddr::new(plan.server, 0)).map_err(|e| e.to_string())
    })
    .map_err(io)?;
    let addr = listener.local_addr()?;
    let chunk = plan.size.clamp(1, 1 << 20);
    let pin = args.pin;
    pin_side(pin, false);
    let reader = std::thread::spawn(move || -> std::io::Result<(u64, Instant, f64)> {
        pin_side(pin, true);
        let (mut s, _) = listener.accept()?;
        let c0 = thread_cpu();
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        Ok((got, Instant::now(), thread_cpu() - c0))
    });
    let mut s = in_side(Side::B, || {
        TcpStream::connect(addr).map_err(|e| e.to_string())
    })
    .map_err(io)?;
    let data = vec![0x5au8; chunk];
    let (t0, c0) = (Instant::now(), thread_cpu());
    let mut sent = 0u64;
    while sent < total {
        let n = (total - sent).min(chunk as u64) as usize;
        s.write_all(data.get(..n).unwrap_or_default())?;
        sent += n as u64;
    }
    s.shutdown(std::net::Shutdown::Write)?;
    let cpu = thread_cpu() - c0;
    let (got, end, reader_cpu) = reader
        .join()
        .map_err(|_| std::io::Error::other("reader panicked"))??;
    Ok(Outcome {
        units: got,
        secs: end.duration_since(t0).as_secs_f64(),
        cpu: cpu + reader_cpu,
        rtt: RttStats::default(),
        max_gap: Duration::ZERO,
        recovery: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_size_is_the_port_max_msg_sz() {
        let port = softrdma_core::device::PortAttr::rxe(65536, 1);
        assert_eq!(MAX_SIZE, port.max_msg_sz);
        assert_eq!(
            MAX_TX_DEPTH,
            softrdma_core::device::DeviceAttr::rxe(Default::default()).max_qp_wr
        );
    }

    #[test]
    fn wait_modes_from_the_flags() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        use clap::Parser;
        let mode = |flags: &[&str]| {
            let argv = ["perf", "bw"].iter().chain(flags);
            Cli::try_parse_from(argv).map(|c| (wait_mode(&c.args), plan(&c.args).map(|p| p.busy)))
        };
        assert_eq!(mode(&[]).unwrap(), (PollMode::BusyPoll, Ok(true)));
        assert_eq!(mode(&["-e"]).unwrap(), (PollMode::Blocking, Ok(false)));
        // Spin-then-block is compared with TCP's blocking ping-pong, not its busy one.
        assert_eq!(
            mode(&["--spin-us", "50"]).unwrap(),
            (
                PollMode::SpinThenBlock(Duration::from_micros(50)),
                Ok(false)
            )
        );
        assert!(mode(&["--spin-us", "50", "-e"]).is_err());
        assert!(mode(&["--spin-us", "50", "--busy"]).is_err());
        assert!(mode(&["--spin-us", "0"]).is_err());
    }

    #[test]
    fn jain_index_of_shares() {
        assert!((jain_index(&[100.0, 100.0]) - 1.0).abs() < 1e-12);
        assert!((jain_index(&[100.0, 0.0]) - 0.5).abs() < 1e-12);
        // 2:1 -> 9 / (2 * 5) = 0.9, the bar.
        assert!((jain_index(&[200.0, 100.0]) - 0.9).abs() < 1e-12);
        assert_eq!(jain_index(&[]), 0.0);
        assert_eq!(jain_index(&[0.0, 0.0]), 0.0);
    }

    #[test]
    fn rtt_statistics_from_bins() {
        let mut r = Rtts::new();
        for us in [10.0, 12.0, 11.0, 13.0, 20_000.0] {
            r.push(us);
        }
        let s = r.stats();
        assert!((s.median - 12.005).abs() < 1e-9, "{}", s.median);
        assert!((s.mean - (10.0 + 12.0 + 11.0 + 13.0 + 20_000.0) / 5.0).abs() < 1e-9);
        assert_eq!(s.p99, 20_000.0);
        assert_eq!(Rtts::new().stats().median, 0.0);
    }

    #[test]
    fn cpu_meter_counts_only_measured_time() {
        let spin = |secs: f64| {
            let t = thread_cpu();
            while thread_cpu() - t < secs {
                std::hint::spin_loop();
            }
        };
        let mut m = CpuMeter::default();
        let t0 = thread_cpu();
        m.observe(true);
        spin(0.02);
        m.observe(false);
        let t1 = thread_cpu();
        spin(0.01); // not measured
        let cpu = m.finish();
        assert!(cpu >= 0.02 && cpu <= t1 - t0, "{cpu} of {}", t1 - t0);
    }
}
