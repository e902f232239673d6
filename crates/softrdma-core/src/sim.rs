//! A deterministic network simulation (`docs/architecture.md`): a virtual clock, N hosts —
//! bare [`Stack`]s on addresses 10.0.0.1.. for transport tests, or whole
//! [`crate::node::Node`]s (stacks, QP1, MAD layers, CMs) — and a seeded network that loses,
//! duplicates, delays and reorders datagrams. The same seed replays the same run.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::device::DeviceConfig;
use crate::rand::Rng;
use crate::time::{Duration, Instant};
use crate::transport::{Stack, Transmit, TransmitBatch};
use softrdma_wire::icrc::{self, Flow, Ipv4Ident};

/// Network behaviour.
#[derive(Clone, Copy, Debug)]
pub struct NetConfig {
    /// Loss probability in parts per thousand.
    pub loss_permille: u32,
    /// Duplication probability in parts per thousand.
    pub dup_permille: u32,
    /// Base one-way delay.
    pub delay: Duration,
    /// Extra random delay up to this (reorders packets).
    pub jitter: Duration,
}

impl NetConfig {
    /// A perfect network with 10 µs latency.
    pub const PERFECT: NetConfig = NetConfig {
        loss_permille: 0,
        dup_permille: 0,
        delay: Duration::from_micros(10),
        jitter: Duration::ZERO,
    };
}

/// What the simulation needs of a host: sans-IO input and output per port (a [`Stack`] is
/// a host with one port; a [`crate::node::Node`] has one per device).
pub trait Host {
    /// Each port's addresses (the network delivers a datagram for one of them there).
    fn port_addrs(&self) -> Vec<Vec<IpAddr>>;
    fn handle_datagram(
        &mut self,
        now: Instant,
        port: usize,
        src: SocketAddr,
        dst: IpAddr,
        bytes: &[u8],
    );
    /// [`Host::handle_datagram`] with the ECN field the datagram arrived with (a host
    /// that reads none ignores it).
    fn handle_datagram_ecn(
        &mut self,
        now: Instant,
        port: usize,
        src: SocketAddr,
        dst: IpAddr,
        bytes: &[u8],
        ecn: u8,
    ) {
        let _ = ecn;
        self.handle_datagram(now, port, src, dst, bytes);
    }
    /// Timers due by `now` (the simulation calls it when [`Host::poll_timeout`] is due).
    fn handle_timeout(&mut self, now: Instant);
    fn poll_timeout(&self) -> Option<Instant>;
    fn poll_transmit(&mut self, now: Instant, port: usize) -> Option<Transmit>;
    fn poll_transmit_batch(
        &mut self,
        now: Instant,
        port: usize,
        batch: &mut TransmitBatch,
    ) -> usize;
}

impl Host for Stack {
    fn port_addrs(&self) -> Vec<Vec<IpAddr>> {
        vec![self.device.addrs().to_vec()]
    }
    fn handle_datagram(
        &mut self,
        now: Instant,
        _port: usize,
        src: SocketAddr,
        dst: IpAddr,
        bytes: &[u8],
    ) {
        Stack::handle_datagram(self, now, src, dst, bytes);
    }
    fn handle_datagram_ecn(
        &mut self,
        now: Instant,
        _port: usize,
        src: SocketAddr,
        dst: IpAddr,
        bytes: &[u8],
        ecn: u8,
    ) {
        Stack::handle_datagram_ecn(self, now, src, dst, bytes, ecn);
    }
    fn handle_timeout(&mut self, now: Instant) {
        Stack::handle_timeout(self, now);
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Stack::poll_timeout(self)
    }
    fn poll_transmit(&mut self, now: Instant, _port: usize) -> Option<Transmit> {
        Stack::poll_transmit(self, now)
    }
    fn poll_transmit_batch(
        &mut self,
        now: Instant,
        _port: usize,
        batch: &mut TransmitBatch,
    ) -> usize {
        Stack::poll_transmit_batch(self, now, batch)
    }
}

/// A bottleneck link: each stack's outgoing datagrams pass a tail-drop queue drained at a
/// fixed rate (a switch port with a shallow buffer, or `htb` + `bfifo`), then the network's
/// delay. Random loss ([`NetConfig::loss_permille`]) is on the wire after the queue.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    /// Bytes per second.
    pub rate: u64,
    /// The queue's size in bytes (a datagram that does not fit is dropped).
    pub queue: u64,
}

impl Link {
    /// Bytes a datagram of `payload` UDP payload bytes takes on the wire (Ethernet + IPv4 +
    /// UDP headers).
    pub const OVERHEAD: u64 = 14 + 20 + 8;
}

/// Host scheduling noise: each host's thread is off the CPU for `length` of every `period`
/// (host `i`'s stalls start `i × period / hosts` into each period, so the two ends of a
/// connection stall at different times), as a busy-polling userspace stack is on a loaded
/// machine. A stalled host sends nothing, its timers wait, and datagrams arriving for it
/// wait in its socket until the stall ends (no socket-buffer limit).
#[derive(Clone, Copy, Debug)]
pub struct Stalls {
    pub period: Duration,
    pub length: Duration,
}

struct InFlight {
    at: Instant,
    seq: u64,
    to: usize,
    src: SocketAddr,
    dst: IpAddr,
    payload: Vec<u8>,
    /// The ECN field of its IP header (the sender's TOS, CE if the link marked it).
    ecn: u8,
}

// Datagrams in flight leave in (time, sequence) order.
impl PartialEq for InFlight {
    fn eq(&self, o: &InFlight) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &InFlight) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &InFlight) -> Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// The simulated world.
pub struct Sim<H: Host = Stack> {
    pub now: Instant,
    /// The hosts (for transport tests, bare stacks).
    pub stacks: Vec<H>,
    /// Every address on the network; `addr_at[k]` is the (host, port) that holds `addrs[k]`.
    pub addrs: Vec<IpAddr>,
    addr_at: Vec<(usize, usize)>,
    /// A host marked down receives nothing and sends nothing (a dead peer).
    pub down: Vec<bool>,
    pub net: NetConfig,
    /// Every datagram delivered: (from host, to host, payload).
    pub tap: Vec<(usize, usize, Vec<u8>)>,
    pub record: bool,
    /// Drain the stacks with [`Stack::poll_transmit_batch`] (GSO trains, split into their
    /// datagrams here as the kernel would) instead of [`Stack::poll_transmit`].
    pub batched: bool,
    /// Batched mode: trains each host sent, datagrams in them (by host: a requester's
    /// trains are not diluted by the one-datagram ACK trains of its peer), and segments
    /// whose ICRC was not right for their index in the train as the IPv4 ID (must stay 0).
    pub trains: Vec<u64>,
    pub train_datagrams: Vec<u64>,
    pub icrc_id_errors: u64,
    /// The bottleneck link, if any; each stack's queue drains at `busy_until_ns`.
    pub link: Option<Link>,
    /// ECN marking at the link's queue: ECT datagrams that find more than this many bytes
    /// queued arrive CE.
    pub ecn_mark: Option<u64>,
    /// Datagrams the link marked CE, per sending stack.
    pub ce_marked: Vec<u64>,
    busy_until_ns: Vec<u64>,
    /// Datagrams the link's queues dropped, and bytes they delivered, per sending stack.
    pub link_drops: Vec<u64>,
    pub link_bytes: Vec<u64>,
    /// Host scheduling noise, if any.
    pub stalls: Option<Stalls>,
    batch: TransmitBatch,
    rng: Rng,
    flight: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
}

impl Sim<Stack> {
    /// `n` stacks on 10.0.0.1..=n, network `net`, all randomness from `seed`.
    pub fn new(n: usize, net: NetConfig, seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let stacks = (0..n)
            .map(|i| {
                Stack::new(
                    DeviceConfig::new(format!("sim{i}"), vec![Sim::<Stack>::addr(i)]),
                    rng.next_u64(),
                )
            })
            .collect();
        Sim::with_hosts_and_rng(stacks, net, rng)
    }
}

impl<H: Host> Sim<H> {
    /// The address the simulation gives its `i`-th device: 10.0.0.(i+1).
    pub fn addr(i: usize) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, (i + 1) as u8))
    }

    /// The hosts given (their ports' addresses are their places on the network), network
    /// `net`, all randomness from `seed`.
    pub fn with_hosts(hosts: Vec<H>, net: NetConfig, seed: u64) -> Sim<H> {
        Sim::with_hosts_and_rng(hosts, net, Rng::new(seed))
    }

    fn with_hosts_and_rng(hosts: Vec<H>, net: NetConfig, rng: Rng) -> Sim<H> {
        let mut addrs = Vec::new();
        let mut addr_at = Vec::new();
        for (h, host) in hosts.iter().enumerate() {
            for (p, ips) in host.port_addrs().into_iter().enumerate() {
                for ip in ips {
                    addrs.push(ip);
                    addr_at.push((h, p));
                }
            }
        }
        let n = hosts.len();
        Sim {
            now: Instant::from_millis(1),
            stacks: hosts,
            addrs,
            addr_at,
            down: vec![false; n],
            net,
            tap: Vec::new(),
            record: false,
            batched: false,
            trains: vec![0; n],
            train_datagrams: vec![0; n],
            icrc_id_errors: 0,
            link: None,
            ecn_mark: None,
            ce_marked: vec![0; n],
            busy_until_ns: vec![0; n],
            link_drops: vec![0; n],
            link_bytes: vec![0; n],
            stalls: None,
            batch: TransmitBatch::default(),
            rng,
            flight: BinaryHeap::new(),
            seq: 0,
        }
    }

    /// When host `i` can run at or after `t`: `t`, or the end of the stall `t` falls in.
    fn runnable_at(&self, i: usize, t: Instant) -> Instant {
        let Some(st) = self.stalls else { return t };
        let period = st.period.total_micros().max(1);
        let len = st.length.total_micros().min(period);
        let phase = period * i as u64 / self.stacks.len().max(1) as u64;
        let x = t.total_micros();
        let Some(since) = x.checked_sub(phase) else {
            return t;
        };
        let into = since % period;
        if into < len {
            Instant::from_micros(x - into + len)
        } else {
            t
        }
    }

    fn chance(&mut self, permille: u32) -> bool {
        permille > 0 && (self.rng.next_u32() % 1000) < permille
    }

    fn collect(&mut self) {
        if self.batched {
            return self.collect_batched();
        }
        for i in 0..self.stacks.len() {
            if self.runnable_at(i, self.now) > self.now {
                continue;
            }
            for p in 0..self.ports_of(i) {
                while let Some(tx) = self.stacks[i].poll_transmit(self.now, p) {
                    let src = SocketAddr::new(tx.src_ip, tx.src_port);
                    self.launch(i, src, tx.dst.ip(), &tx.payload, tx.tos);
                }
            }
        }
    }

    fn collect_batched(&mut self) {
        let mut batch = std::mem::take(&mut self.batch);
        for (i, p) in self.host_ports() {
            if self.runnable_at(i, self.now) > self.now {
                continue;
            }
            loop {
                batch.clear();
                if self.stacks[i].poll_transmit_batch(self.now, p, &mut batch) == 0 {
                    break;
                }
                for (t, bytes) in batch.trains() {
                    self.trains[i] += 1;
                    let src = SocketAddr::new(t.src_ip, t.src_port);
                    let flow = Flow {
                        src: t.src_ip,
                        dst: t.dst.ip(),
                        src_port: t.src_port,
                        dst_port: t.dst.port(),
                    };
                    for (k, seg) in bytes.chunks(t.segment_size.max(1)).enumerate() {
                        self.train_datagrams[i] += 1;
                        let ident = Ipv4Ident {
                            id: k as u16,
                            dont_fragment: true,
                        };
                        let ok = t.src_ip.is_ipv6()
                            || icrc::compute_udp(&flow, ident, seg).ok() == icrc::stored(seg).ok();
                        if !ok {
                            self.icrc_id_errors += 1;
                        }
                        self.launch(i, src, t.dst.ip(), seg, t.tos);
                    }
                }
            }
        }
        self.batch = batch;
    }

    /// How many ports host `i` has on the network.
    fn ports_of(&self, i: usize) -> usize {
        self.addr_at
            .iter()
            .filter(|(h, _)| *h == i)
            .map(|(_, p)| p + 1)
            .max()
            .unwrap_or(0)
    }

    /// Every (host, port) on the network, each once.
    fn host_ports(&self) -> Vec<(usize, usize)> {
        let mut v = self.addr_at.clone();
        v.dedup();
        v
    }

    /// Puts one datagram from host `i` on the network (or loses or duplicates it).
    fn launch(&mut self, i: usize, src: SocketAddr, dst: IpAddr, payload: &[u8], tos: u8) {
        let mut ecn = tos & 0b11;
        if self.down[i] {
            return;
        }
        let Some(to) = self.addrs.iter().position(|a| *a == dst) else {
            return;
        };
        // Through the bottleneck's queue first: the datagram leaves the link at `depart`.
        let mut depart = self.now;
        if let Some(link) = self.link {
            let now_ns = self.now.total_micros() * 1000;
            let start = self.busy_until_ns[i].max(now_ns);
            let rate = link.rate.max(1);
            let queued = (start - now_ns).saturating_mul(rate) / 1_000_000_000;
            let size = payload.len() as u64 + Link::OVERHEAD;
            if queued + size > link.queue {
                self.link_drops[i] += 1;
                return;
            }
            // A marking switch: CE on an ECT datagram that finds the queue above the
            // threshold (DCQCN's step marking).
            if self.ecn_mark.is_some_and(|t| queued > t) && matches!(ecn, 0b01 | 0b10) {
                ecn = 0b11;
                self.ce_marked[i] += 1;
            }
            let end = start + size * 1_000_000_000 / rate;
            self.busy_until_ns[i] = end;
            self.link_bytes[i] += payload.len() as u64;
            depart = Instant::from_micros(end.div_ceil(1000));
        }
        if self.chance(self.net.loss_permille) {
            return;
        }
        let copies = if self.chance(self.net.dup_permille) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let j = self.net.jitter.total_micros();
            let extra = if j == 0 {
                0
            } else {
                self.rng.next_u64() % (j + 1)
            };
            self.seq += 1;
            self.flight.push(Reverse(InFlight {
                at: depart + self.net.delay + Duration::from_micros(extra),
                seq: self.seq,
                to,
                src,
                dst,
                payload: payload.to_vec(),
                ecn,
            }));
        }
    }

    /// Advances to the next event and handles it; false when nothing is left to do.
    pub fn step(&mut self) -> bool {
        self.collect();
        let next_pkt = self.flight.peek().map(|f| (f.0.at, f.0.seq));
        let next_timer = self.next_timer();
        let next = match (next_pkt.map(|p| p.0), next_timer) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => return false,
            },
        };
        if next > self.now {
            self.now = next;
        }
        // Deliver one due packet at a time in (time, seq) order, then timers.
        if let Some((at, _)) = next_pkt {
            if at <= self.now {
                if let Some(Reverse(mut f)) = self.flight.pop() {
                    let (host, port) = self.addr_at[f.to];
                    let wake = self.runnable_at(host, self.now);
                    if wake > self.now {
                        // Its thread is off the CPU: the datagram waits in the socket
                        // (in arrival order: the sequence numbers grow).
                        self.seq += 1;
                        f.at = wake;
                        f.seq = self.seq;
                        self.flight.push(Reverse(f));
                        return true;
                    }
                    if !self.down[host] {
                        if self.record {
                            let from = self
                                .addrs
                                .iter()
                                .position(|a| *a == f.src.ip())
                                .map_or(0, |k| self.addr_at[k].0);
                            self.tap.push((from, host, f.payload.clone()));
                        }
                        let now = self.now;
                        self.stacks[host]
                            .handle_datagram_ecn(now, port, f.src, f.dst, &f.payload, f.ecn);
                    }
                }
            }
        }
        let now = self.now;
        for i in 0..self.stacks.len() {
            if self.runnable_at(i, now) > now {
                continue;
            }
            if self.stacks[i].poll_timeout().is_some_and(|t| t <= now) {
                self.stacks[i].handle_timeout(now);
            }
        }
        true
    }

    /// The next stack timer, each one no earlier than its host can run, or the end of a
    /// host's current stall (it may have sends waiting, which need no timer).
    fn next_timer(&self) -> Option<Instant> {
        let now = self.now;
        self.stacks
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let wake = self.runnable_at(i, now);
                if wake > now {
                    Some(wake)
                } else {
                    s.poll_timeout().map(|t| self.runnable_at(i, t))
                }
            })
            .min()
    }

    /// Steps until `done` holds or `limit` of virtual time passes; returns whether `done`.
    pub fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&mut Sim<H>) -> bool,
    ) -> bool {
        let end = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            if self.now > end || !self.step() {
                return done(self);
            }
        }
    }
}

impl<H: Host> Sim<H> {
    /// When [`Sim::step`] has something to do: the next datagram due or stack timer.
    pub fn next_event(&self) -> Option<Instant> {
        let pkt = self.flight.peek().map(|f| f.0.at);
        let timer = self.next_timer();
        match (pkt, timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes what the stacks have sent onto the network (what [`Sim::step`] does first), so
    /// that [`Sim::next_event`] sees it.
    pub fn flush(&mut self) {
        self.collect();
    }

    /// Datagrams on the network, not yet delivered.
    pub fn in_flight(&self) -> usize {
        self.flight.len()
    }

    /// Puts a datagram from stack `from`'s address (UDP port 4791) on the network, as if
    /// that stack had sent it (loss, duplication and delay apply) — for hostile peers that
    /// write their own bytes.
    pub fn inject(&mut self, from: usize, dst: IpAddr, payload: &[u8]) {
        let src = SocketAddr::new(self.addrs[from], softrdma_wire::icrc::ROCE_V2_PORT);
        self.launch(from, src, dst, payload, 0);
    }
}
