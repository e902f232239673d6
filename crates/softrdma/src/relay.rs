//! The frame relay (issue 21): forwards Ethernet frames **unchanged** between two interfaces
//! of one network namespace, with the impairments no qdisc on this host gives — seeded random
//! loss, delay and jitter, and ECN marking above a queue threshold.
//!
//! Why frames and not datagrams: a RoCEv2 packet's ICRC covers its IP addresses and RC checks
//! the source GID, so a UDP proxy (which would re-address every packet) cannot stand between
//! two RoCE endpoints. The relay is a bump in the wire instead: an `AF_PACKET` raw socket
//! bound to each end (`SOCK_RAW`, `ETH_P_ALL`), every frame received on one sent out of the
//! other as it came. The one change it makes is the one a switch makes: CE in the ECN field of
//! an ECT packet, with the IPv4 header checksum fixed (the ICRC masks the TOS byte and the
//! traffic class, so the RoCE packet stays valid).
//!
//! The sockets use `PACKET_VNET_HDR`: each frame comes with the kernel's `virtio_net_hdr`, and
//! goes out with it unchanged. A veth passes a checksum-offloaded packet (`CHECKSUM_PARTIAL`)
//! with its transport checksum not yet computed; forwarding the header keeps it a partial
//! checksum the next namespace does not verify, where a bare frame would arrive with a wrong
//! checksum and be dropped by the receiver's UDP or TCP. (The narrow link turns GSO and TSO
//! off on the veths, so the relay sees wire-sized frames and its loss is per packet.)
//!
//! Everything here is safe code: `nix` opens, binds (to the `sockaddr_ll` that
//! `getifaddrs` reports for the interface) and reads the sockets, `rustix` polls them.
//!
//! Impairments, in the order a frame meets them (IP frames only; ARP and the rest pass):
//! 1. random loss with probability `loss` (a SplitMix64 stream from `seed`: the same seed
//!    loses the same frame numbers);
//! 2. optionally a bottleneck of the relay's own ([`Shape`]): the frame waits for the link
//!    (`rate`) behind the bytes queued before it, is dropped when more than `queue` bytes
//!    wait (tail drop), and, when ECT, is marked CE when more than `ecn_threshold` bytes wait
//!    (the step marking DCTCP and DCQCN configure their switches with);
//! 3. delay plus a uniform jitter in `[0, jitter]`, never reordering (a frame leaves no
//!    earlier than the one before it in its direction).

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::socket::{self, AddressFamily, LinkAddr, MsgFlags, SockFlag, SockProtocol, SockType};

/// `SOL_PACKET` options (include/uapi/linux/if_packet.h).
mod opts {
    use nix::{setsockopt_impl, sockopt_impl};

    const PACKET_VNET_HDR: libc::c_int = 15;
    const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

    sockopt_impl!(
        /// Every frame read or written is preceded by a `virtio_net_hdr`.
        VnetHdr,
        SetOnly,
        libc::SOL_PACKET,
        PACKET_VNET_HDR,
        bool
    );
    sockopt_impl!(
        /// Do not deliver the frames this host sends on the interface (our own forwards).
        IgnoreOutgoing,
        SetOnly,
        libc::SOL_PACKET,
        PACKET_IGNORE_OUTGOING,
        bool
    );
}

/// `sizeof(struct virtio_net_hdr)`.
const VNET_HDR: usize = 10;
/// `PACKET_OUTGOING` (a frame this host sent, looped back to a packet socket).
const PACKET_OUTGOING: u8 = 4;
/// Frames above this are not expected (GSO is off on the link): read room for 64 KiB anyway.
const FRAME_ROOM: usize = VNET_HDR + 65_536 + 64;

/// The relay's own bottleneck: what makes its queue, and so ECN marking, possible.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    /// Bit/s each way.
    pub rate_bps: u64,
    /// Tail-drop limit of each direction's queue, bytes.
    pub queue_bytes: u64,
    /// ECT frames that find more than this many bytes queued are marked CE; `None`: no
    /// marking.
    pub ecn_threshold: Option<u64>,
}

/// What the relay does to the IP frames it forwards.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Impairments {
    /// Probability of losing a frame, 0..1.
    pub loss: f64,
    /// The loss stream's seed.
    pub seed: u64,
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Extra delay, uniform in `[0, jitter]`, without reordering.
    pub jitter: Duration,
    /// The relay as the bottleneck (rate, tail-drop queue, ECN marking).
    pub shape: Option<Shape>,
}

/// What the relay has done, both directions together.
#[derive(Debug, Default)]
pub struct Stats {
    pub forwarded: AtomicU64,
    pub lost: AtomicU64,
    pub queue_drops: AtomicU64,
    pub ect_seen: AtomicU64,
    pub ce_marked: AtomicU64,
    /// Frames the outgoing interface refused (`ENOBUFS`, `EAGAIN`).
    pub send_errors: AtomicU64,
    /// Frames that came as GSO trains (forwarded whole: the link should have GSO off).
    pub gso_frames: AtomicU64,
}

/// A snapshot of [`Stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub forwarded: u64,
    pub lost: u64,
    pub queue_drops: u64,
    pub ect_seen: u64,
    pub ce_marked: u64,
    pub send_errors: u64,
    pub gso_frames: u64,
}

impl Counts {
    /// What happened between `earlier` and `self`.
    pub fn minus(&self, earlier: &Counts) -> Counts {
        Counts {
            forwarded: self.forwarded - earlier.forwarded,
            lost: self.lost - earlier.lost,
            queue_drops: self.queue_drops - earlier.queue_drops,
            ect_seen: self.ect_seen - earlier.ect_seen,
            ce_marked: self.ce_marked - earlier.ce_marked,
            send_errors: self.send_errors - earlier.send_errors,
            gso_frames: self.gso_frames - earlier.gso_frames,
        }
    }
}

/// A share such as `1%`, `0.5%` or `0.01`; returns 0..1.
pub fn parse_share(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (t, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1.0).contains(&(v * scale)) => Ok(v * scale),
        _ => Err(format!(
            "{s} is not a share from 0% to 100% (like 1%, 0.5%, 0.01)"
        )),
    }
}

impl Stats {
    pub fn counts(&self) -> Counts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counts {
            forwarded: g(&self.forwarded),
            lost: g(&self.lost),
            queue_drops: g(&self.queue_drops),
            ect_seen: g(&self.ect_seen),
            ce_marked: g(&self.ce_marked),
            send_errors: g(&self.send_errors),
            gso_frames: g(&self.gso_frames),
        }
    }
}

/// SplitMix64: small, seeded, good enough to pick frames to lose.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The ECN field of an IP frame (Ethernet header first), if it is one.
fn ecn_of(frame: &[u8]) -> Option<u8> {
    match ethertype(frame)? {
        0x0800 => frame.get(15).map(|tos| tos & 3),
        0x86dd => frame.get(15).map(|b| (b >> 4) & 3),
        _ => None,
    }
}

fn ethertype(frame: &[u8]) -> Option<u16> {
    frame.get(12..14).map(|t| u16::from_be_bytes([t[0], t[1]]))
}

/// Sets CE on an ECT frame; fixes the IPv4 header checksum. Returns whether it marked.
pub fn mark_ce(frame: &mut [u8]) -> bool {
    match (ethertype(frame), ecn_of(frame)) {
        (Some(0x0800), Some(1 | 2)) => {
            let ihl = usize::from(frame[14] & 0x0f) * 4;
            if ihl < 20 || frame.len() < 14 + ihl {
                return false;
            }
            frame[15] |= 3;
            frame[24] = 0;
            frame[25] = 0;
            let sum = ipv4_checksum(&frame[14..14 + ihl]);
            frame[24..26].copy_from_slice(&sum.to_be_bytes());
            true
        }
        (Some(0x86dd), Some(1 | 2)) => {
            frame[15] |= 0x30;
            true
        }
        _ => false,
    }
}

/// The Internet checksum of an IPv4 header whose checksum field is zero.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// One direction: frames waiting for their departure time.
struct Direction {
    queue: VecDeque<(Instant, Vec<u8>)>,
    /// When the relay's own link (if shaped) finishes sending what it has accepted.
    link_free: Instant,
    /// The last departure scheduled (departures never go backwards: no reordering).
    last_departure: Instant,
}

impl Direction {
    fn new(now: Instant) -> Direction {
        Direction {
            queue: VecDeque::new(),
            link_free: now,
            last_departure: now,
        }
    }
}

/// The per-frame decision, apart from the sockets (so it is tested without root).
pub struct Impairer {
    imp: Impairments,
    rng: Rng,
}

/// What [`Impairer::admit`] decided for a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send at this time (possibly marked CE in place).
    Send {
        at: Instant,
        marked: bool,
    },
    Lost,
    QueueDrop,
}

impl Impairer {
    pub fn new(imp: Impairments) -> Impairer {
        Impairer {
            rng: Rng::new(imp.seed),
            imp,
        }
    }

    /// Decides the fate of `frame` (vnet header stripped), arriving `now`, against the
    /// direction's link state.
    fn admit(
        &mut self,
        frame: &mut [u8],
        now: Instant,
        link_free: &mut Instant,
        last_departure: &mut Instant,
    ) -> Verdict {
        if ecn_of(frame).is_none() {
            // Not IP: ARP, neighbour discovery's frames aside, pass at once.
            return Verdict::Send {
                at: now.max(*last_departure),
                marked: false,
            };
        }
        if self.imp.loss > 0.0 && self.rng.unit() < self.imp.loss {
            return Verdict::Lost;
        }
        let mut marked = false;
        let mut depart = now;
        if let Some(shape) = self.imp.shape {
            let start = (*link_free).max(now);
            let backlog_ns = start.duration_since(now).as_nanos() as u64;
            let queued =
                (u128::from(backlog_ns) * u128::from(shape.rate_bps) / 8 / 1_000_000_000) as u64;
            if queued + frame.len() as u64 > shape.queue_bytes {
                return Verdict::QueueDrop;
            }
            if shape.ecn_threshold.is_some_and(|t| queued > t) {
                marked = mark_ce(frame);
            }
            // Ethernet's preamble, SFD, FCS and gap: 24 bytes a frame on the wire.
            let wire_bits = (frame.len() as u64 + 24) * 8;
            *link_free =
                start + Duration::from_nanos(wire_bits * 1_000_000_000 / shape.rate_bps.max(1));
            depart = *link_free;
        }
        let mut extra = self.imp.delay;
        if !self.imp.jitter.is_zero() {
            extra += self.imp.jitter.mul_f64(self.rng.unit());
        }
        let at = (depart + extra).max(*last_departure);
        *last_departure = at;
        Verdict::Send { at, marked }
    }
}

/// A running relay; stops (and joins its thread) on drop.
pub struct Relay {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), String>>>,
    pub stats: Arc<Stats>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("stats", &self.stats.counts())
            .finish()
    }
}

fn open_bound(ifname: &str) -> Result<OwnedFd, String> {
    let fd = socket::socket(
        AddressFamily::Packet,
        SockType::Raw,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        SockProtocol::EthAll,
    )
    .map_err(|e| format!("AF_PACKET socket: {e}"))?;
    socket::setsockopt(&fd, opts::VnetHdr, &true).map_err(|e| format!("PACKET_VNET_HDR: {e}"))?;
    // Older kernels lack it; the pkttype check below covers them.
    let _ = socket::setsockopt(&fd, opts::IgnoreOutgoing, &true);
    let _ = socket::setsockopt(&fd, socket::sockopt::RcvBufForce, &(8 << 20));
    let _ = socket::setsockopt(&fd, socket::sockopt::SndBufForce, &(8 << 20));
    // The interface's own sockaddr_ll (ifindex; protocol 0 keeps the socket's ETH_P_ALL).
    let addr = nix::ifaddrs::getifaddrs()
        .map_err(|e| format!("getifaddrs: {e}"))?
        .filter(|a| a.interface_name == ifname)
        .find_map(|a| a.address.and_then(|s| s.as_link_addr().copied()))
        .ok_or_else(|| format!("no interface {ifname} in the relay's namespace"))?;
    socket::bind(fd.as_raw_fd(), &addr).map_err(|e| format!("bind to {ifname}: {e}"))?;
    Ok(fd)
}

impl Relay {
    /// Starts a relay between `if_a` and `if_b` in the namespace at `netns` (a
    /// `/var/run/netns/NAME` path; `None`: this thread's). Returns once both sockets are
    /// bound.
    pub fn start(
        netns: Option<&str>,
        if_a: &str,
        if_b: &str,
        imp: Impairments,
    ) -> Result<Relay, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Stats::default());
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let (ns, a, b) = (
            netns.map(str::to_string),
            if_a.to_string(),
            if_b.to_string(),
        );
        let (stop2, stats2) = (stop.clone(), stats.clone());
        let thread = std::thread::Builder::new()
            .name("relay".into())
            .spawn(move || {
                let opened = (|| {
                    if let Some(ns) = &ns {
                        let f = std::fs::File::open(ns).map_err(|e| format!("{ns}: {e}"))?;
                        rustix::thread::move_into_link_name_space(
                            f.as_fd(),
                            Some(rustix::thread::LinkNameSpaceType::Network),
                        )
                        .map_err(|e| format!("setns {ns}: {e}"))?;
                    }
                    Ok::<_, String>([open_bound(&a)?, open_bound(&b)?])
                })();
                match opened {
                    Ok(fds) => {
                        let _ = tx.send(Ok(()));
                        run(fds, imp, &stop2, &stats2)
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e.clone()));
                        Err(e)
                    }
                }
            })
            .map_err(|e| format!("relay thread: {e}"))?;
        match rx.recv() {
            Ok(Ok(())) => Ok(Relay {
                stop,
                thread: Some(thread),
                stats,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err("relay thread ended before it started".into()),
        }
    }

    /// A relay that runs nothing (a placeholder while the link around it is being built).
    pub fn stopped() -> Relay {
        Relay {
            stop: Arc::new(AtomicBool::new(true)),
            thread: None,
            stats: Arc::new(Stats::default()),
        }
    }

    /// Stops the relay; its error, if it ended with one.
    pub fn stop(&mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("relay thread panicked".into()),
            None => Ok(()),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The relay's loop: read what both sockets have, decide, send what is due, sleep until the
/// next frame is due or one arrives.
fn run(
    fds: [OwnedFd; 2],
    imp: Impairments,
    stop: &AtomicBool,
    stats: &Stats,
) -> Result<(), String> {
    let now = Instant::now();
    let mut dirs = [Direction::new(now), Direction::new(now)];
    // One impairer per direction, seeded apart, so each direction's losses are its own
    // stream.
    let mut imps = [
        Impairer::new(imp),
        Impairer::new(Impairments {
            seed: imp.seed ^ 0x05ee_d0fb_5eed,
            ..imp
        }),
    ];
    let mut buf = vec![0u8; FRAME_ROOM];
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        // Receive: at most a batch per socket per turn, so a busy direction does not
        // starve the other's departures.
        for (i, fd) in fds.iter().enumerate() {
            for _ in 0..64 {
                match socket::recvfrom::<LinkAddr>(fd.as_raw_fd(), &mut buf) {
                    Ok((n, addr)) => {
                        if addr.is_some_and(|a| a.pkttype() == PACKET_OUTGOING) || n <= VNET_HDR {
                            continue;
                        }
                        if buf[1] != 0 {
                            stats.gso_frames.fetch_add(1, Ordering::Relaxed);
                        }
                        let frame = &mut buf[VNET_HDR..n];
                        if matches!(ecn_of(frame), Some(1 | 2)) {
                            stats.ect_seen.fetch_add(1, Ordering::Relaxed);
                        }
                        let d = &mut dirs[i];
                        match imps[i].admit(frame, now, &mut d.link_free, &mut d.last_departure) {
                            Verdict::Send { at, marked } => {
                                if marked {
                                    stats.ce_marked.fetch_add(1, Ordering::Relaxed);
                                }
                                d.queue.push_back((at, buf[..n].to_vec()));
                            }
                            Verdict::Lost => {
                                stats.lost.fetch_add(1, Ordering::Relaxed);
                            }
                            Verdict::QueueDrop => {
                                stats.queue_drops.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    Err(nix::errno::Errno::EAGAIN) => break,
                    Err(nix::errno::Errno::EINTR) => continue,
                    // The link is being taken down under a running relay: its end.
                    Err(nix::errno::Errno::ENETDOWN | nix::errno::Errno::ENXIO) => return Ok(()),
                    Err(e) => return Err(format!("relay recv: {e}")),
                }
            }
        }
        // Send what is due (a frame received on socket i leaves through the other).
        let now = Instant::now();
        for (i, d) in dirs.iter_mut().enumerate() {
            let out = &fds[1 - i];
            while d.queue.front().is_some_and(|(at, _)| *at <= now) {
                let Some((_, frame)) = d.queue.pop_front() else {
                    break;
                };
                match socket::send(out.as_raw_fd(), &frame, MsgFlags::MSG_DONTWAIT) {
                    Ok(_) => {
                        stats.forwarded.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        stats.send_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        // Sleep until a frame arrives or the next one is due (at most 20 ms, to see `stop`).
        let next = dirs
            .iter()
            .filter_map(|d| d.queue.front().map(|(at, _)| *at))
            .min();
        let wait = next
            .map(|t| t.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_millis(20))
            .min(Duration::from_millis(20));
        if wait.is_zero() {
            continue;
        }
        let mut pfds = [
            rustix::event::PollFd::new(&fds[0], rustix::event::PollFlags::IN),
            rustix::event::PollFd::new(&fds[1], rustix::event::PollFlags::IN),
        ];
        let ts = rustix::event::Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        match rustix::event::poll(&mut pfds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("relay poll: {e}")),
        }
    }
    Ok(())
}

/// `softrdma relay`: the relay as a command, for links built by hand
/// (`scripts/narrow-link.sh up` with `LOSS=…`).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The network namespace to run in (`/var/run/netns/NAME`); default: this process's.
    #[arg(long)]
    pub netns: Option<String>,
    /// The two interfaces to relay between.
    pub if_a: String,
    pub if_b: String,
    /// Random loss of IP frames, like `1%` (each direction).
    #[arg(long, value_parser = parse_share, default_value = "0")]
    pub loss: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// One-way delay, microseconds.
    #[arg(long, default_value_t = 0)]
    pub delay_us: u64,
    /// Uniform extra delay up to this, microseconds (no reordering).
    #[arg(long, default_value_t = 0)]
    pub jitter_us: u64,
    /// Be the bottleneck at this rate (like `2gbit`) over `--queue` bytes, marking CE on
    /// ECT frames above `--ecn-mark` bytes queued.
    #[arg(long, value_parser = crate::narrow_link::parse_rate)]
    pub rate: Option<u64>,
    #[arg(long, default_value_t = crate::narrow_link::DEFAULT_QUEUE)]
    pub queue: u64,
    #[arg(long)]
    pub ecn_mark: Option<u64>,
}

/// Runs the relay until SIGINT/SIGTERM; prints its counters then.
pub fn run_cmd(args: &Args) -> std::process::ExitCode {
    let imp = Impairments {
        loss: args.loss,
        seed: args.seed,
        delay: Duration::from_micros(args.delay_us),
        jitter: Duration::from_micros(args.jitter_us),
        shape: args.rate.map(|rate_bps| Shape {
            rate_bps,
            queue_bytes: args.queue,
            ecn_threshold: args.ecn_mark,
        }),
    };
    let path = args.netns.as_ref().map(|n| format!("/var/run/netns/{n}"));
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, term.clone()) {
            eprintln!("relay: signal: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let mut relay = match Relay::start(path.as_deref(), &args.if_a, &args.if_b, imp) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("relay: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    eprintln!(
        "relay: {} <-> {}: loss {:.2}% (seed {}), delay {} us + jitter {} us{}",
        args.if_a,
        args.if_b,
        args.loss * 100.0,
        args.seed,
        args.delay_us,
        args.jitter_us,
        match imp.shape {
            Some(s) => format!(", shaping to {} bit/s over {} B", s.rate_bps, s.queue_bytes),
            None => String::new(),
        }
    );
    while !term.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = relay.stop();
    println!("relay: {:?}", relay.stats.counts());
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("relay: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_frame(tos: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 12];
        f[12] = 0x08;
        f[14] = 0x45;
        f[15] = tos;
        let total = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 221, 0, 1]);
        f[30..34].copy_from_slice(&[10, 221, 0, 2]);
        let sum = ipv4_checksum(&f[14..34]);
        f[24..26].copy_from_slice(&sum.to_be_bytes());
        f
    }

    #[test]
    fn shares() {
        assert_eq!(parse_share("1%"), Ok(0.01));
        assert_eq!(parse_share("0.01"), Ok(0.01));
        assert_eq!(parse_share("0%"), Ok(0.0));
        assert!(parse_share("101%").is_err());
        assert!(parse_share("-1%").is_err());
        assert!(parse_share("one").is_err());
    }

    #[test]
    fn ce_is_set_on_ect_only_and_the_header_checksum_stays_valid() {
        for (tos, marks) in [(0x02, true), (0x01, true), (0x00, false), (0x03, false)] {
            let mut f = ipv4_frame(tos);
            assert_eq!(mark_ce(&mut f), marks, "tos {tos:#x}");
            assert_eq!(f[15] & 3, if marks { 3 } else { tos & 3 });
            // A valid header sums to zero with its checksum in place.
            assert_eq!(ipv4_checksum(&f[14..34]), 0, "tos {tos:#x}");
        }
        let mut v6 = vec![0u8; 14 + 40];
        v6[12] = 0x86;
        v6[13] = 0xdd;
        v6[14] = 0x60;
        v6[15] = 0x20; // traffic class 0x02: ECT(0)
        assert!(mark_ce(&mut v6));
        assert_eq!((v6[15] >> 4) & 3, 3);
        let mut arp = vec![0u8; 42];
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(!mark_ce(&mut arp));
    }

    #[test]
    fn loss_follows_the_rate_and_the_seed() {
        let run = |seed| {
            let mut imp = Impairer::new(Impairments {
                loss: 0.01,
                seed,
                ..Default::default()
            });
            let t = Instant::now();
            let (mut free, mut last) = (t, t);
            (0..100_000)
                .filter(|_| imp.admit(&mut ipv4_frame(0), t, &mut free, &mut last) == Verdict::Lost)
                .count()
        };
        let lost = run(7);
        assert!((800..1200).contains(&lost), "{lost} of 100000 lost at 1%");
        assert_eq!(run(7), lost, "the same seed loses the same frames");
        assert_ne!(run(8), lost);
    }

    #[test]
    fn a_shaped_queue_marks_above_the_threshold_and_drops_above_the_limit() {
        let t = Instant::now();
        let mut big = ipv4_frame(0x02);
        big.resize(1100, 0);
        let (mut free, mut last) = (t, t);
        let mut imp2 = Impairer::new(Impairments {
            shape: Some(Shape {
                rate_bps: 1_000_000_000,
                queue_bytes: 20_000,
                ecn_threshold: Some(5_000),
            }),
            ..Default::default()
        });
        let v: Vec<Verdict> = (0..30)
            .map(|_| imp2.admit(&mut big.clone(), t, &mut free, &mut last))
            .collect();
        let first_mark = v
            .iter()
            .position(|v| matches!(v, Verdict::Send { marked: true, .. }))
            .expect("marked");
        let first_drop = v
            .iter()
            .position(|v| *v == Verdict::QueueDrop)
            .expect("dropped");
        // 1124 wire bytes a frame: more than 5000 queued from the 6th, more than 20000 at
        // the 18th.
        assert_eq!(first_mark, 5, "{v:?}");
        assert!((16..=18).contains(&first_drop), "{v:?}");
        // Departures are spaced by the serialization time and never reorder.
        let times: Vec<Instant> = v
            .iter()
            .filter_map(|v| match v {
                Verdict::Send { at, .. } => Some(*at),
                _ => None,
            })
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
    }
}
