//! `softrdma perf live`: N established RC connections held at once by two processes on
//! loopback (issue 13, "The CM at scale").
//!
//! The tool runs the client and re-executes itself (`--serve`, hidden) as the server
//! process. The server opens a device on the first free address of 127.0.0.1.. (or
//! `--server`), listens on one port per 10,000 connections from `--port` on (one source
//! address holds at most 28,232 connections per destination port: the ephemeral range), and
//! accepts every request with a QP of its own. The client opens a device on the next free
//! address (or `--client`) and sets up N RC connections through the RDMA CM with `--window`
//! of them in flight — create id, resolve address, resolve route, create QP, connect —
//! until all N are ESTABLISHED on both sides (the server reports its count on its stdout).
//! Then it reports:
//!
//! - the setup time of each block of `--block` (10,000) connections, by completion order,
//!   and the last block's against the first's (the CM's, the MAD layer's and the
//!   transport's look-ups are O(log n): the ratio stays near 1);
//! - each process's RSS (`/proc/self/status` VmRSS) before and after, per connection;
//! - after `--hold` seconds, the teardown: every connection disconnected (`--window` at a
//!   time), both sides' ids and QPs destroyed, its time and the RSS after.
//!
//! `softrdma perf live -c 100000` is the figure (docs/measurements.md).

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, ChildStdout, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softrdma_core::cm::{CmConfig, RXE_CA_ACK_DELAY};
use softrdma_core::rdma_cm::{ConnParam, RdmaCmEvent, RdmaCmEventType as T, RdmaCmId, RdmaId};
use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::{Device, DeviceConfig};
use softrdma_wire::Guid;

use crate::cmtool::{self, CmDevice, CmText};

/// `softrdma perf live [-c N] [-w WINDOW] ...` (parsed apart from `perf VERB TEST`).
#[derive(Debug, Clone, clap::Args)]
pub struct Plan {
    /// Connections to hold at once.
    #[arg(short = 'c', long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub connections: u32,
    /// Connections being set up (and torn down) at once.
    #[arg(short = 'w', long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=4000))]
    pub window: u32,
    /// Connections per block of the setup report (first block against last).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub block: u32,
    /// The server's address (default: the first free one of 127.0.0.1..=127.0.0.254).
    #[arg(long)]
    pub server: Option<IpAddr>,
    /// The client's address (default: the next free one after the server's).
    #[arg(long)]
    pub client: Option<IpAddr>,
    /// The first of the server's ports (one per 10,000 connections).
    #[arg(long, default_value_t = 7471, value_parser = cmtool::parse_port)]
    pub port: u16,
    /// Seconds to hold the connections before tearing them down.
    #[arg(long, default_value_t = 0)]
    pub hold: u64,
    /// Give up when nothing progresses for this many seconds.
    #[arg(long, default_value_t = 60)]
    pub stall: u64,
    /// Internal: run as the server process (the client starts it).
    #[arg(long, hide = true)]
    pub serve: bool,
}

/// Connections per listening port.
const PER_PORT: u32 = 10_000;
/// QP1 receive buffers: a window's worth of MADs arriving together fits.
const QP1_DEPTH: u32 = 8192;

fn ports_for(n: u32) -> u32 {
    n.div_ceil(PER_PORT).max(1)
}

/// VmRSS of this process, KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// A device for `n` connections on `ip`, with a CM on it.
fn open_on(ip: IpAddr, n: u32) -> Result<CmDevice, softrdma_driver::Error> {
    let mut cfg = DeviceConfig::new(ip).with_max_qp(n.saturating_add(1024).max(65_536));
    cfg.qp1_recv_depth = QP1_DEPTH;
    let dev = Device::open_with(cfg)?;
    let cm = Cm::with_config(CmConfig {
        node_guid: Guid(0),
        ca_ack_delay: RXE_CA_ACK_DELAY,
        seed: cmtool::seed(),
        // Every REQ of a window may wait for its answer together, and its events be queued.
        half_open_limit: 8192,
        event_queue_limit: 8192,
    });
    let port = cm
        .add_device(&dev)
        .map_err(|e| softrdma_driver::Error::Io(std::io::Error::other(e.to_string())))?;
    let pd = dev.alloc_pd()?;
    Ok(CmDevice { dev, cm, port, pd })
}

/// A device on `given`, or on the first address of 127.0.0.`from`..=254 no other process
/// holds (and that is not `skip`).
fn open_free(
    given: Option<IpAddr>,
    from: u8,
    skip: Option<IpAddr>,
    n: u32,
) -> Result<CmDevice, String> {
    if let Some(ip) = given {
        return open_on(ip, n).map_err(|e| cmtool::device_error(ip, &e, "pass another address"));
    }
    for k in from..=254u8 {
        let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, k));
        if Some(ip) == skip {
            continue;
        }
        match open_on(ip, n) {
            Ok(d) => return Ok(d),
            Err(e) if cmtool::is_in_use(&e) => continue,
            Err(e) => return Err(cmtool::device_error(ip, &e, "pass another address")),
        }
    }
    Err("every address of 127.0.0.1..=127.0.0.254 is held on port 4791".into())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn run(p: &Plan) -> ExitCode {
    let r = if p.serve { serve(p) } else { client(p) };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("perf live: {e}");
            ExitCode::FAILURE
        }
    }
}

// ----- the server process --------------------------------------------------------------

/// A report line of the server (`down 2000 43.6`) as the user reads it.
fn report_text(line: &str) -> String {
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.as_slice() {
        ["up", n, ms] => format!("  server: {n} connections established after {ms} ms"),
        ["down", n, ms] => format!("  server: {n} disconnected and destroyed after {ms} ms"),
        ["rss", kib] => format!("  server: RSS {kib} KiB"),
        ["ready", ip, kib] => format!("  server: listening on {ip}, RSS {kib} KiB"),
        ["done", kib, failed] => {
            format!("  server: done, RSS {kib} KiB, {failed} connections failed")
        }
        _ => format!("  server: {line}"),
    }
}

/// The server: accepts every request, answers each DISCONNECTED with its own disconnect
/// and destroys the id and its QP; reports on stdout (`ready IP RSS`, `up N MS`,
/// `rss KIB`, `down N MS`, `done RSS`). Ends when its stdin closes (the client is gone)
/// or when all N connections are down.
fn serve(p: &Plan) -> Result<(), String> {
    let d = open_free(p.server, 1, None, p.connections)?;
    let ip = d.dev.local_addr().ip();
    let cq = d
        .dev
        .create_cq(64)
        .map_err(|e| format!("ibv_create_cq: {e}"))?;
    let mut listeners = Vec::new();
    for k in 0..ports_for(p.connections) {
        let port = p
            .port
            .checked_add(k as u16)
            .ok_or("the listening ports run past 65535")?;
        let l =
            d.cm.with_cm(|cm| cm.listen_on(SocketAddr::new(ip, port), 0))
                .map_err(|e| format!("listen on {ip}:{port}: {}", e.text()))?;
        listeners.push(l);
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                line.clear();
            }
            stop.store(true, Ordering::Release);
        });
    }
    let say = |m: String| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{m}");
        let _ = out.flush();
    };
    say(format!("ready {ip} {}", rss_kib()));
    let n = p.connections;
    let block = p.block.min(n);
    let mut live: HashMap<RdmaId, (RdmaCmId, u32)> = HashMap::with_capacity(n as usize);
    let (mut up, mut down, mut failed) = (0u32, 0u32, 0u32);
    let mut t_up: Option<Instant> = None;
    let mut t_down: Option<Instant> = None;
    let p_accept = ConnParam::default();
    while !stop.load(Ordering::Acquire) {
        let Some(Event::Rdma(e)) = d.cm.wait_event(Duration::from_millis(100)) else {
            continue;
        };
        match e.kind() {
            T::ConnectRequest => {
                let RdmaCmEvent::ConnectRequest {
                    new_id: id,
                    param: req,
                    ..
                } = e
                else {
                    continue;
                };
                t_up.get_or_insert_with(Instant::now);
                let param = ConnParam {
                    responder_resources: req.responder_resources,
                    initiator_depth: req.initiator_depth,
                    ..p_accept.clone()
                };
                let r = d.rc_qp_on(cq, 1, 1).and_then(|(_, qpn)| {
                    d.cm.with_id(id.name(), |cm, s, now| cm.accept(now, s, &id, qpn, &param))
                        .map_err(|e| e.text())?
                        .map_err(|e| e.text())
                        .map(|()| qpn)
                });
                match r {
                    Ok(qpn) => {
                        live.insert(id.name(), (id, qpn));
                    }
                    Err(err) => {
                        eprintln!("perf live server: accept: {err}");
                        failed += 1;
                        d.cm.with_cm(|cm| cm.destroy(d.dev.now(), id));
                    }
                }
            }
            T::Established => {
                up += 1;
                if up % block == 0 || up == n {
                    let t = t_up.map(|t| t.elapsed()).unwrap_or_default();
                    say(format!("up {up} {:.1}", ms(t)));
                }
                if up == n {
                    say(format!("rss {}", rss_kib()));
                }
            }
            T::Disconnected => {
                t_down.get_or_insert_with(Instant::now);
                if let Some((id, qpn)) = live.remove(&e.id()) {
                    let _ =
                        d.cm.with_id(id.name(), |cm, s, now| cm.disconnect(now, s, &id));
                    d.cm.with_cm(|cm| cm.destroy(d.dev.now(), id));
                    let _ = d.dev.destroy_qp(qpn);
                }
                down += 1;
                if down % block == 0 || down == n {
                    let t = t_down.map(|t| t.elapsed()).unwrap_or_default();
                    say(format!("down {down} {:.1}", ms(t)));
                }
                if down == n {
                    say(format!("done {} {failed}", rss_kib()));
                    break;
                }
            }
            T::Unreachable | T::Rejected | T::ConnectError => {
                failed += 1;
                eprintln!("perf live server: {} ({})", e.kind().as_str(), e.status());
                if let Some((id, qpn)) = live.remove(&e.id()) {
                    d.cm.with_cm(|cm| cm.destroy(d.dev.now(), id));
                    let _ = d.dev.destroy_qp(qpn);
                }
            }
            _ => {}
        }
    }
    for (_, (id, qpn)) in live.drain() {
        d.cm.with_cm(|cm| cm.destroy(d.dev.now(), id));
        let _ = d.dev.destroy_qp(qpn);
    }
    for l in listeners {
        d.cm.with_cm(|cm| cm.destroy(d.dev.now(), l));
    }
    Ok(())
}

// ----- the client (and the run) ---------------------------------------------------------

/// The server process, its report lines, and the way to stop it.
struct Server {
    child: Child,
    lines: Receiver<String>,
    /// Lines read but not yet matched by [`Server::expect`], and whether they were printed.
    backlog: VecDeque<(String, bool)>,
}

impl Server {
    fn start(p: &Plan) -> Result<(Server, IpAddr, u64), String> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args(["perf", "live", "--serve"])
            .args(["-c", &p.connections.to_string()])
            .args(["--port", &p.port.to_string()])
            .args(["--block", &p.block.to_string()]);
        if let Some(ip) = p.server {
            cmd.args(["--server", &ip.to_string()]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting the server process: {e}"))?;
        let out: ChildStdout = child.stdout.take().ok_or("server stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut s = Server {
            child,
            lines: rx,
            backlog: VecDeque::new(),
        };
        let ready = s.expect("ready", Duration::from_secs(30))?;
        let mut w = ready.split_whitespace();
        let ip: IpAddr = w
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("server: {ready}"))?;
        let rss = w.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        Ok((s, ip, rss))
    }

    /// The next report line whose first word is `word` (the rest of it), within `limit`;
    /// the lines before it are progress, printed (unless [`Server::drain`] printed them).
    fn expect(&mut self, word: &str, limit: Duration) -> Result<String, String> {
        let end = Instant::now() + limit;
        loop {
            let (line, printed) = match self.backlog.pop_front() {
                Some(l) => l,
                None => {
                    let left = end.saturating_duration_since(Instant::now());
                    match self.lines.recv_timeout(left) {
                        Ok(l) => (l, false),
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            return Err(format!("the server did not report '{word}' in {limit:?}"))
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => {
                            return Err(format!("the server exited before reporting '{word}'"))
                        }
                    }
                }
            };
            let mut w = line.splitn(2, ' ');
            if w.next() == Some(word) {
                return Ok(w.next().unwrap_or_default().to_string());
            }
            if !printed {
                println!("{}", report_text(&line));
            }
        }
    }

    /// Prints the report lines that arrived meanwhile (kept for [`Server::expect`]).
    fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            println!("{}", report_text(&l));
            self.backlog.push_back((l, true));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Closing its stdin ends the server; it exits on its own after its cleanup.
        drop(self.child.stdin.take());
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Default)]
struct Conn {
    id: Option<RdmaCmId>,
    qpn: Option<u32>,
    started: Option<Instant>,
    up: Option<Instant>,
}

fn kib_per(kib: u64, before: u64, n: u32) -> f64 {
    (kib.saturating_sub(before) as f64 * 1024.0) / f64::from(n.max(1))
}

fn client(p: &Plan) -> Result<(), String> {
    let run_start = Instant::now();
    let n = p.connections;
    let nports = ports_for(n);
    println!(
        "softrdma perf live: {n} RC connections held at once, {} in flight, two processes on loopback",
        p.window
    );
    let (mut server, server_ip, server_rss0) = Server::start(p)?;
    let d = open_free(p.client, 2, Some(server_ip), n)?;
    let client_ip = d.dev.local_addr().ip();
    let cq = d
        .dev
        .create_cq(64)
        .map_err(|e| format!("ibv_create_cq: {e}"))?;
    let rss0 = rss_kib();
    println!(
        "server {server_ip} (pid {}, ports {}..={}), client {client_ip} (pid {}); RSS before: server {server_rss0} KiB, client {rss0} KiB",
        server.child.id(),
        p.port,
        p.port + (nports - 1) as u16,
        std::process::id()
    );
    let mut conns: Vec<Conn> = (0..n).map(|_| Conn::default()).collect();
    let mut by_id: HashMap<RdmaId, usize> = HashMap::with_capacity(n as usize);
    let param = ConnParam::default();
    let (mut next, mut in_flight, mut up) = (0usize, 0u32, 0u32);
    let mut done_order: Vec<Instant> = Vec::with_capacity(n as usize);
    let stall = Duration::from_secs(p.stall);
    let mut last_progress = Instant::now();
    let t0 = Instant::now();
    let mut block_t = t0;
    println!("connecting");
    while up < n {
        while in_flight < p.window && next < n as usize {
            let id = d.cm.with_cm(|cm| cm.create_id());
            let dst = SocketAddr::new(server_ip, p.port + (next as u32 % nports) as u16);
            d.cm.resolve_addr(&id, Some(client_ip), dst)
                .map_err(|e| format!("connection {next}: rdma_resolve_addr: {}", e.text()))?;
            by_id.insert(id.name(), next);
            let c = &mut conns[next];
            c.id = Some(id);
            c.started = Some(Instant::now());
            next += 1;
            in_flight += 1;
        }
        let Some(Event::Rdma(e)) = d.cm.wait_event(Duration::from_millis(200)) else {
            if last_progress.elapsed() > stall {
                return Err(format!(
                    "no progress for {} s: {up} of {n} established, {in_flight} in flight",
                    p.stall
                ));
            }
            continue;
        };
        let Some(&k) = by_id.get(&e.id()) else {
            continue;
        };
        last_progress = Instant::now();
        let c = &mut conns[k];
        let Some(id) = c.id.as_ref() else { continue };
        match e.kind() {
            T::AddrResolved => {
                d.cm.with_cm(|cm| cm.resolve_route(id))
                    .map_err(|e| format!("connection {k}: rdma_resolve_route: {}", e.text()))?;
            }
            T::RouteResolved => {
                let (_, qpn) = d.rc_qp_on(cq, 1, 1)?;
                c.qpn = Some(qpn);
                d.cm.with_id(id.name(), |cm, s, now| {
                    cm.connect(now, s, id, Some(qpn), &param)
                })
                .map_err(|e| e.text())?
                .map_err(|e| format!("connection {k}: rdma_connect: {}", e.text()))?;
            }
            T::Established => {
                let now = Instant::now();
                c.up = Some(now);
                done_order.push(now);
                up += 1;
                in_flight -= 1;
                if up % p.block == 0 || up == n {
                    let b = now - block_t;
                    block_t = now;
                    println!(
                        "  {up:>7}/{n} established on the client after {:8.1} ms (this block {:7.1} ms, {:6.0} conn/s)",
                        ms(now - t0),
                        ms(b),
                        f64::from(p.block.min(n)) / b.as_secs_f64()
                    );
                    server.drain();
                }
            }
            other => {
                return Err(format!(
                    "connection {k}: {} (status {}) with {up} established",
                    other.as_str(),
                    e.status()
                ));
            }
        }
    }
    let t_client = t0.elapsed();
    // The server counts its ESTABLISHED (the RTUs) and reports the last.
    let up_line = loop {
        let l = server.expect("up", stall)?;
        if l.split_whitespace()
            .next()
            .and_then(|v| v.parse::<u32>().ok())
            == Some(n)
        {
            break l;
        }
    };
    let t_both = t0.elapsed();
    let server_rss1: u64 = server
        .expect("rss", stall)?
        .trim()
        .parse()
        .map_err(|_| "server rss")?;
    let rss1 = rss_kib();
    println!(
        "all {n} ESTABLISHED on both sides: client after {:.1} ms, server after {:.1} ms of its own ({:.0} conn/s overall)",
        ms(t_client),
        up_line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0),
        f64::from(n) / t_both.as_secs_f64()
    );
    // Setup cost by block (completion order) and each block's mean connection latency.
    let b = p.block.min(n) as usize;
    let nblocks = done_order.len() / b;
    let mut blocks = Vec::new();
    for k in 0..nblocks {
        let start = if k == 0 { t0 } else { done_order[k * b - 1] };
        let end = done_order[(k + 1) * b - 1];
        let lat: f64 = conns[k * b..(k + 1) * b]
            .iter()
            .filter_map(|c| Some(c.up?.saturating_duration_since(c.started?)))
            .map(ms)
            .sum::<f64>()
            / b as f64;
        blocks.push((ms(end - start), lat));
    }
    println!("setup by block of {b} (ms to complete the block; mean connect latency, ms):");
    for (k, (t, lat)) in blocks.iter().enumerate() {
        println!("  block {:>3}: {t:9.1} ms  latency {lat:7.2} ms", k + 1);
    }
    if let (Some(first), Some(last)) = (blocks.first(), blocks.last()) {
        println!(
            "first {b}: {:.1} ms, last {b}: {:.1} ms, last/first {:.2} (latency {:.2} / {:.2} ms, ratio {:.2})",
            first.0,
            last.0,
            last.0 / first.0,
            first.1,
            last.1,
            last.1 / first.1
        );
    }
    println!(
        "RSS with {n} connections: client {rss1} KiB (+{} KiB, {:.0} B per connection), server {server_rss1} KiB (+{} KiB, {:.0} B per connection)",
        rss1.saturating_sub(rss0),
        kib_per(rss1, rss0, n),
        server_rss1.saturating_sub(server_rss0),
        kib_per(server_rss1, server_rss0, n)
    );
    if p.hold > 0 {
        println!("holding {n} connections for {} s", p.hold);
        std::thread::sleep(Duration::from_secs(p.hold));
        server.drain();
    }

    // Teardown: DREQs, `--window` at a time; each DISCONNECTED destroys the id and its QP.
    println!("disconnecting");
    let t1 = Instant::now();
    let mut left: Vec<usize> = (0..n as usize).rev().collect();
    let (mut pending, mut down) = (0u32, 0u32);
    let mut block_t = t1;
    last_progress = Instant::now();
    while down < n {
        while pending < p.window {
            let Some(k) = left.pop() else { break };
            let Some(id) = conns[k].id.as_ref() else {
                continue;
            };
            d.cm.with_id(id.name(), |cm, s, now| cm.disconnect(now, s, id))
                .map_err(|e| e.text())?
                .map_err(|e| format!("connection {k}: rdma_disconnect: {}", e.text()))?;
            pending += 1;
        }
        let Some(Event::Rdma(e)) = d.cm.wait_event(Duration::from_millis(200)) else {
            if last_progress.elapsed() > stall {
                return Err(format!(
                    "teardown: no progress for {} s: {down} of {n} down",
                    p.stall
                ));
            }
            continue;
        };
        if e.kind() != T::Disconnected {
            continue;
        }
        let Some(k) = by_id.remove(&e.id()) else {
            continue;
        };
        last_progress = Instant::now();
        if let Some(id) = conns[k].id.take() {
            d.cm.with_cm(|cm| cm.destroy(d.dev.now(), id));
        }
        if let Some(qpn) = conns[k].qpn.take() {
            let _ = d.dev.destroy_qp(qpn);
        }
        pending -= 1;
        down += 1;
        if down % p.block == 0 || down == n {
            let now = Instant::now();
            println!(
                "  {down:>7}/{n} disconnected and destroyed on the client after {:8.1} ms (this block {:7.1} ms)",
                ms(now - t1),
                ms(now - block_t)
            );
            block_t = now;
            server.drain();
        }
    }
    let t_client_down = t1.elapsed();
    let done = server.expect("done", stall)?;
    let t_down = t1.elapsed();
    let mut w = done.split_whitespace();
    let server_rss2: u64 = w.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    let server_failed: u32 = w.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    let rss2 = rss_kib();
    println!(
        "teardown of {n}: client {:.1} ms, both sides {:.1} ms ({:.0} conn/s); RSS after: client {rss2} KiB, server {server_rss2} KiB",
        ms(t_client_down),
        ms(t_down),
        f64::from(n) / t_down.as_secs_f64()
    );
    let ids_left = d.cm.with_cm(|cm| cm.id_count());
    println!(
        "client ids left: {ids_left}; server failures: {server_failed}; total run {:.1} s",
        run_start.elapsed().as_secs_f64()
    );
    if ids_left != 0 || server_failed != 0 {
        return Err("not every id was torn down cleanly".into());
    }
    Ok(())
}
