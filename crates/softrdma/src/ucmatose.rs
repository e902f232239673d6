//! `softrdma ucmatose`: a peer of rdma-core's `ucmatose` (librdmacm/examples/cmatose.c):
//! N RC connections through the RDMA CM, C messages of S bytes each way, then disconnect.
//!
//! The exchange (cmatose.c): every connection posts C receives before it connects or
//! accepts. Once all are established the server sends C messages on each, waits for the
//! send completions, then receives the client's C replies; the client receives first, then
//! replies. The server disconnects first; the client answers each DISCONNECTED with its own
//! `rdma_disconnect`. Output lines and exit status are cmatose's.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use softrdma_core::rdma_cm::{
    ConnParam, IbAddr, PortSpace, RdmaCmEvent, RdmaCmEventType, RdmaCmId, RdmaOption,
};
use softrdma_core::verbs::{
    AccessFlags, CqId, MrKeys, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use softrdma_driver::cm::Event;
use softrdma_wire::Gid;

use crate::cmtool::{self, signals, CmDevice, CmText, SIGNAL_SLICE};

#[derive(Debug, Parser)]
pub struct Args {
    /// Client: the server's address (a name or an address); without it, run as the server.
    #[arg(short = 's')]
    pub server: Option<String>,
    /// Bind to this local address (server: listen on it; client: the source address).
    #[arg(short = 'b')]
    pub bind: Option<String>,
    /// Address format: name, ip, ipv6, or gid (native GID addressing, with `-P ib`).
    #[arg(short = 'f')]
    pub format: Option<String>,
    /// Port space: tcp or ib.
    #[arg(short = 'P', default_value = "tcp")]
    pub port_space: String,
    /// Number of connections.
    #[arg(short = 'c', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub connections: u32,
    /// Messages each way per connection.
    #[arg(short = 'C', default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=4096))]
    pub message_count: u32,
    /// Message size in bytes.
    #[arg(short = 'S', default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub message_size: u32,
    /// Type of service, set on the client's ids once their address resolves.
    #[arg(short = 't', value_parser = parse_c_u8)]
    pub tos: Option<u8>,
    /// Port, 1 to 65535.
    #[arg(short = 'p', default_value_t = 7471, value_parser = cmtool::parse_port)]
    pub port: u16,
    /// ACK timeout (`RDMA_OPTION_ID_ACK_TIMEOUT`), 0 to 31: client ids at address
    /// resolution, server ids before accepting.
    #[arg(short = 'a', value_parser = parse_ack_timeout)]
    pub ack_timeout: Option<u8>,
    /// Migrate ids between event channels (not supported: one event queue per process).
    #[arg(short = 'm')]
    pub migrate: bool,
    /// Record every datagram to this pcap file (not a ucmatose flag).
    #[arg(long)]
    pub pcap: Option<PathBuf>,
}

/// How long any one wait may take before the tool gives up with a message.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
const WR_SEND: u64 = 1 << 32;
const WR_RECV: u64 = 2 << 32;
const IOVA: u64 = 0x10_0000;

struct Node {
    id: Option<RdmaCmId>,
    qpn: u32,
    mr: MrKeys,
    established: bool,
    disconnected: bool,
    sends: u32,
    recvs: u32,
}

struct Test {
    d: CmDevice,
    cq: CqId,
    nodes: Vec<Node>,
    args: Args,
    ps: PortSpace,
}

/// `strtoul(s, NULL, 0)` into a byte, as cmatose's `-t` / `-a` (`atoi` for `-a`).
fn parse_c_u8(s: &str) -> Result<u8, String> {
    parse_c_in(s, 255)
}

/// An ACK timeout exponent, 0 to 31 (what the CM's 5-bit field holds).
fn parse_ack_timeout(s: &str) -> Result<u8, String> {
    parse_c_in(s, 31)
}

/// A number as C's `strtol(s, NULL, 0)` reads it (0x hex, 0 octal), at most `hi`.
fn parse_c_in(s: &str, hi: u8) -> Result<u8, String> {
    match cmtool::parse_c(s) {
        Ok(v) if v <= u64::from(hi) => Ok(v as u8),
        _ => Err(format!("{s} is not in 0..={hi}")),
    }
}

/// What `-f` asks for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Format {
    /// Names or numbers (IPv6 preferred with `ipv6`).
    Ip(Option<bool>),
    /// Native addressing: GIDs in IPv6 notation (`AF_IB`).
    Gid,
}

fn fail(m: impl Into<String>) -> String {
    m.into()
}

/// A wait ended by SIGINT/SIGTERM, carried as a message: `signal N`.
fn signal_error(sig: i32) -> String {
    format!("signal {sig}")
}

fn is_signal(m: &str) -> Option<i32> {
    m.strip_prefix("signal ")?.parse().ok()
}

/// An error event ends the test with the event's status as the exit status (cmatose's
/// `ret = event->status`): carried in the message as `status N|text`.
fn event_error(e: &RdmaCmEvent) -> String {
    format!(
        "status {}|cmatose: event: {}, error: {}",
        e.status(),
        e.kind().as_str(),
        e.status()
    )
}

impl Test {
    /// The test on device `d`, with the CQ all its connections share.
    fn new(d: CmDevice, args: Args, ps: PortSpace) -> Result<Test, String> {
        let cq = d.shared_cq(args.connections, args.message_count)?;
        Ok(Test {
            d,
            cq,
            nodes: Vec::new(),
            args,
            ps,
        })
    }

    /// cmatose's client parameters: resources 1/1, retry count 5, RNR retry 0 (the server
    /// accepts with the request's, RNR retry 7, as `rdma_accept(id, NULL)` does).
    fn conn_param(&self) -> ConnParam {
        if self.args.server.is_some() {
            ConnParam {
                retry_count: 5,
                rnr_retry_count: 0,
                ..ConnParam::default()
            }
        } else {
            ConnParam::default()
        }
    }

    /// A QP and buffer for a new connection, with its receives posted (cmatose's
    /// init_node + post_recvs).
    fn new_node(&mut self, id: Option<RdmaCmId>) -> Result<usize, String> {
        let count = self.args.message_count.max(1);
        let (qpn, mr) = {
            let (_, qpn) = self.d.rc_qp_on(self.cq, count, count)?;
            let mr = self
                .d
                .dev
                .reg_mr(
                    self.d.pd,
                    vec![0u8; self.args.message_size as usize],
                    IOVA,
                    AccessFlags::LOCAL_WRITE,
                )
                .map_err(|e| format!("ibv_reg_mr: {e}"))?;
            (qpn, mr)
        };
        let n = self.nodes.len();
        for k in 0..self.args.message_count {
            let wr = RecvWr::new(
                WR_RECV | (n as u64) << 16 | u64::from(k),
                vec![Sge {
                    addr: IOVA,
                    length: self.args.message_size,
                    lkey: mr.lkey,
                }],
            );
            self.d
                .dev
                .post_recv(qpn, wr)
                .map_err(|e| format!("ibv_post_recv: {e}"))?;
        }
        self.nodes.push(Node {
            id,
            qpn,
            mr,
            established: false,
            disconnected: false,
            sends: 0,
            recvs: 0,
        });
        Ok(n)
    }

    fn node_of(&self, e: &RdmaCmEvent) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.id.as_ref().is_some_and(|i| *i == e.id()))
    }

    fn post_sends(&self) -> Result<(), String> {
        for (i, n) in self.nodes.iter().enumerate() {
            for k in 0..self.args.message_count {
                let mut wr = SendWr::new(WR_SEND | (i as u64) << 16 | u64::from(k), SendOp::Send)
                    .with_sge(Sge {
                        addr: IOVA,
                        length: self.args.message_size,
                        lkey: n.mr.lkey,
                    });
                wr.signaled = true;
                self.d
                    .dev
                    .post_send(n.qpn, wr)
                    .map_err(|e| format!("cmatose: failed to post send: {e}"))?;
            }
        }
        Ok(())
    }

    /// Polls completions until every node has `want` of the kind (`send`: sends, else
    /// receives); CM events arriving meanwhile are handled.
    fn poll_cqs(&mut self, send: bool) -> Result<(), String> {
        let want = self.args.message_count;
        let end = Instant::now() + STEP_TIMEOUT;
        let mut wcs: Vec<WorkCompletion> = Vec::new();
        loop {
            let done = self.nodes.iter().all(|n| {
                if send {
                    n.sends >= want
                } else {
                    n.recvs >= want
                }
            });
            if done {
                return Ok(());
            }
            if let Some(sig) = signals::caught() {
                return Err(signal_error(sig));
            }
            if Instant::now() > end {
                return Err(fail(format!(
                    "cmatose: timed out waiting for {} completions",
                    if send { "send" } else { "receive" }
                )));
            }
            wcs.clear();
            let cm = self.d.cm.clone();
            self.d
                .dev
                .wait_cq_or(self.cq, &mut wcs, 16, Some(SIGNAL_SLICE), &move || {
                    cm.has_event() || signals::caught().is_some()
                })
                .map_err(|e| format!("ibv_poll_cq: {e}"))?;
            for wc in wcs.drain(..) {
                let node = ((wc.wr_id >> 16) & 0xffff) as usize;
                if wc.status != WcStatus::Success {
                    return Err(fail(format!(
                        "cmatose: work completion error {} on connection {node}",
                        wc.status.to_verbs()
                    )));
                }
                if let Some(n) = self.nodes.get_mut(node) {
                    match wc.opcode {
                        WcOpcode::Send => n.sends += 1,
                        WcOpcode::Recv => n.recvs += 1,
                        _ => {}
                    }
                }
            }
            while let Some(Event::Rdma(e)) = self.d.cm.poll_event() {
                self.on_event(e)?;
            }
        }
    }

    fn wait_event(&self, what: &str) -> Result<RdmaCmEvent, String> {
        let end = Instant::now() + STEP_TIMEOUT;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("cmatose: timed out waiting for {what}"));
            }
            match cmtool::wait_event(&self.d.cm, left) {
                Ok(Some(Event::Rdma(e))) => return Ok(e),
                Ok(Some(Event::Ib(ev))) => {
                    // Each unanswered REQ resent, on stderr (stdout is cmatose's own).
                    if let Some(peer) = self.args.server.as_deref() {
                        let now = self.d.dev.now();
                        if let Some(l) = cmtool::retry_note("cmatose", peer, now, &ev) {
                            eprintln!("{l}");
                        }
                    }
                }
                Ok(None) => {}
                Err(sig) => return Err(signal_error(sig)),
            }
        }
    }

    /// cmatose's cma_handler.
    fn on_event(&mut self, e: RdmaCmEvent) -> Result<(), String> {
        use RdmaCmEventType as T;
        match e.kind() {
            T::AddrResolved => {
                let i = self.node_of(&e).ok_or("unknown id")?;
                let id = self.nodes[i].id.as_ref().ok_or("no id")?;
                if let Some(t) = self.args.tos {
                    if let Err(err) = self
                        .d
                        .cm
                        .with_cm(|cm| cm.set_option(id, RdmaOption::Tos(t)))
                    {
                        eprintln!("cmatose: set TOS option failed: {err}");
                    }
                }
                if let Some(t) = self.args.ack_timeout {
                    if let Err(err) = self
                        .d
                        .cm
                        .with_cm(|cm| cm.set_option(id, RdmaOption::AckTimeout(t)))
                    {
                        eprintln!("cmatose: set ack timeout option failed: {err}");
                    }
                }
                self.d
                    .cm
                    .with_cm(|cm| cm.resolve_route(id))
                    .map_err(|err| format!("cmatose: resolve route failed: {}", err.text()))?;
            }
            T::RouteResolved => {
                let i = self.node_of(&e).ok_or("unknown id")?;
                let p = self.conn_param();
                let (id, qpn) = (self.nodes[i].id.as_ref().ok_or("no id")?, self.nodes[i].qpn);
                self.d
                    .cm
                    .with_id(id.name(), |cm, s, now| {
                        cm.connect(now, s, id, Some(qpn), &p)
                    })
                    .map_err(|err| format!("cmatose: failure connecting: {}", err.text()))?
                    .map_err(|err| format!("cmatose: failure connecting: {}", err.text()))?;
            }
            T::ConnectRequest => {
                let id = e.into_new_id().ok_or("no new id")?;
                let i = self.new_node(None)?;
                if let Some(t) = self.args.ack_timeout {
                    if let Err(err) = self
                        .d
                        .cm
                        .with_cm(|cm| cm.set_option(&id, RdmaOption::AckTimeout(t)))
                    {
                        eprintln!("cmatose: set ack timeout option failed: {err}");
                    }
                }
                let p = self.conn_param();
                let qpn = self.nodes[i].qpn;
                let r = self
                    .d
                    .cm
                    .with_id(id.name(), |cm, s, now| cm.accept(now, s, &id, qpn, &p));
                self.nodes[i].id = Some(id);
                r.map_err(|err| format!("cmatose: failure accepting: {}", err.text()))?
                    .map_err(|err| format!("cmatose: failure accepting: {}", err.text()))?;
            }
            T::Established => {
                if let Some(i) = self.node_of(&e) {
                    self.nodes[i].established = true;
                }
            }
            T::Disconnected => {
                if let Some(i) = self.node_of(&e) {
                    if !self.nodes[i].disconnected {
                        self.nodes[i].disconnected = true;
                        // The peer disconnected first: answer with our own (the DREP).
                        if let Some(id) = self.nodes[i].id.as_ref() {
                            let _ = self
                                .d
                                .cm
                                .with_id(id.name(), |cm, s, now| cm.disconnect(now, s, id));
                        }
                    }
                }
            }
            T::TimewaitExit => {}
            _ => return Err(event_error(&e)),
        }
        Ok(())
    }

    /// Handles events until `done` says the phase is over.
    fn events_until(&mut self, what: &str, done: impl Fn(&Test) -> bool) -> Result<(), String> {
        while !done(self) {
            let e = self.wait_event(what)?;
            self.on_event(e)?;
        }
        Ok(())
    }

    /// Every connection still up is disconnected (DREQ) before its id goes, as the kernel
    /// does for a process that exits: on a failure or a signal the peer is not left
    /// waiting. Waits up to a second for the DREPs.
    fn hang_up(&mut self) {
        let up = self
            .nodes
            .iter_mut()
            .filter(|n| n.established && !n.disconnected);
        self.d.hang_up(up.filter_map(|n| {
            n.disconnected = true;
            let n: &Node = n;
            n.id.as_ref()
        }));
    }

    fn destroy(&mut self) {
        self.hang_up();
        let now = self.d.dev.now();
        for n in &mut self.nodes {
            if let Some(id) = n.id.take() {
                self.d.cm.with_cm(|cm| cm.destroy(now, id));
            }
        }
    }
}

fn parse_addr(s: &str, port: u16, f: Format) -> Result<SocketAddr, String> {
    match f {
        Format::Gid => s
            .parse::<std::net::Ipv6Addr>()
            .map(|g| SocketAddr::new(Gid(g.octets()).to_ip(), port))
            .map_err(|_| format!("cmatose: getaddrinfo {s}: not a GID")),
        Format::Ip(v6) => softrdma_driver::cm::resolve_host(s, port, v6.map(|v| !v))
            .map_err(|e| format!("cmatose: getaddrinfo {s}: {e}")),
    }
}

/// `-P` and `-f` as cmatose reads them: a known prefix, else a warning on stderr and the
/// default.
fn check_args(a: &Args) -> Result<(PortSpace, Format), String> {
    if a.migrate {
        return Err(
            "cmatose: -m (migrating ids between event channels) is not supported: \
                    softrdma has one event queue per process"
                .into(),
        );
    }
    let p = a.port_space.to_ascii_lowercase();
    let ps = if p.starts_with("ib") {
        PortSpace::IB
    } else {
        if !p.starts_with("tcp") {
            eprintln!("Warning: unknown port space format");
        }
        PortSpace::TCP
    };
    let f = match a.format.as_deref().map(|f| f.to_ascii_lowercase()) {
        None => Format::Ip(None),
        Some(f) if f.starts_with("ipv6") => Format::Ip(Some(true)),
        Some(f) if f.starts_with("ip") => Format::Ip(None),
        Some(f) if f.starts_with("gid") => Format::Gid,
        Some(f) => {
            if !f.starts_with("name") {
                eprintln!("Warning: unknown address format");
            }
            Format::Ip(None)
        }
    };
    Ok((ps, f))
}

fn run_server(a: Args, (ps, f): (PortSpace, Format)) -> Result<(), String> {
    println!("cmatose: starting server");
    let Some(b) = a.bind.as_deref() else {
        return Err("cmatose: give -b ADDR: a softrdma device opens on one local address".into());
    };
    let bind = parse_addr(b, a.port, f)?;
    let d = cmtool::open(
        bind.ip(),
        a.pcap.as_ref(),
        "listen on another local address with -b ADDR",
        cmtool::THREAD,
    )
    .map_err(|e| format!("cmatose: {e}"))?;
    let mut t = Test::new(d, a, ps)?;
    let listener = t.d.cm.with_cm(|cm| {
        let id = cm.create_id_ps(ps);
        let r = if f == Format::Gid {
            cm.bind_ib(&id, IbAddr::new(Gid::from(bind.ip()), bind.port()))
                .map(|_| ())
        } else {
            cm.bind_addr(&id, bind).map(|_| ())
        };
        match r.and_then(|()| cm.listen(&id, 0)) {
            Ok(()) => Ok(id),
            Err(e) => {
                cm.destroy(softrdma_core::time::Instant::ZERO, id);
                Err(e)
            }
        }
    });
    let listener = listener.map_err(|e| format!("cmatose: bind/listen on {bind}: {}", e.text()))?;
    let total = t.args.connections as usize;
    let r = (|| {
        t.events_until("connections", |t| {
            t.nodes.len() == total && t.nodes.iter().all(|n| n.established)
        })?;
        if t.args.message_count > 0 {
            println!("initiating data transfers");
            t.post_sends()?;
            println!("completing sends");
            t.poll_cqs(true)?;
            println!("receiving data transfers");
            t.poll_cqs(false)?;
            println!("data transfers complete");
        }
        println!("cmatose: disconnecting");
        for n in &mut t.nodes {
            n.disconnected = true;
            if let Some(id) = n.id.as_ref() {
                t.d.cm
                    .with_id(id.name(), |cm, s, now| cm.disconnect(now, s, id))
                    .map_err(|e| format!("cmatose: disconnect: {}", e.text()))?
                    .map_err(|e| format!("cmatose: disconnect: {}", e.text()))?;
            }
        }
        wait_disconnected(&mut t)?;
        println!("disconnected");
        Ok(())
    })();
    t.destroy();
    t.d.cm.with_cm(|cm| cm.destroy(t.d.dev.now(), listener));
    r
}

/// Waits for every connection's DISCONNECTED (the server's own disconnect counts once the
/// peer answered it).
fn wait_disconnected(t: &mut Test) -> Result<(), String> {
    let end = Instant::now() + STEP_TIMEOUT;
    let mut seen = 0usize;
    while seen < t.nodes.len() {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("cmatose: timed out waiting for disconnects".into());
        }
        match cmtool::wait_event(&t.d.cm, left) {
            Ok(Some(Event::Rdma(e))) if e.kind() == RdmaCmEventType::Disconnected => seen += 1,
            Ok(Some(Event::Rdma(e))) if e.kind() == RdmaCmEventType::TimewaitExit => {}
            Ok(Some(Event::Rdma(e))) => t.on_event(e)?,
            Ok(_) => {}
            Err(sig) => return Err(signal_error(sig)),
        }
    }
    Ok(())
}

fn run_client(a: Args, (ps, f): (PortSpace, Format)) -> Result<(), String> {
    println!("cmatose: starting client");
    let dst = parse_addr(a.server.as_deref().unwrap_or_default(), a.port, f)?;
    let src = match a.bind.as_deref() {
        // GIDs (`-f gid`) parse as addresses of the format; IP addresses and names must
        // be of the destination's family.
        Some(b) if f == Format::Gid => Some(parse_addr(b, 0, f)?.ip()),
        Some(b) => Some(
            cmtool::source_of_family(b, dst, "-s", "-b").map_err(|e| format!("cmatose: {e}"))?,
        ),
        None => None,
    };
    let d = cmtool::open_client_b(src, dst, a.pcap.as_ref(), "cmatose")?;
    let src: IpAddr = d.dev.local_addr().ip();
    let mut t = Test::new(d, a, ps)?;
    println!("cmatose: connecting");
    let r = (|| {
        for _ in 0..t.args.connections {
            let id = t.d.cm.with_cm(|cm| cm.create_id_ps(t.ps));
            let i = t.new_node(Some(id))?;
            let id = t.nodes[i].id.as_ref().ok_or("no id")?;
            if f == Format::Gid {
                let to = IbAddr::new(Gid::from(dst.ip()), dst.port());
                t.d.cm
                    .with_cm(|cm| cm.resolve_addr_ib(id, Some(Gid::from(src)), to))
                    .map_err(|e| format!("cmatose: failure getting addr: {}", e.text()))?;
            } else {
                t.d.cm
                    .resolve_addr(id, Some(src), dst)
                    .map_err(|e| format!("cmatose: failure getting addr: {}", e.text()))?;
            }
        }
        eprintln!(
            "cmatose: waiting for {dst} to answer (each unanswered REQ retry shows here; a dead \
             address gives up after about {} s)",
            STEP_TIMEOUT.as_secs().min(98)
        );
        t.events_until("connections", |t| t.nodes.iter().all(|n| n.established))?;
        if t.args.message_count > 0 {
            println!("receiving data transfers");
            t.poll_cqs(false)?;
            println!("sending replies");
            t.post_sends()?;
            t.poll_cqs(true)?;
            println!("data transfers complete");
        }
        // The server disconnects first; each DISCONNECTED is answered in on_event.
        t.events_until("disconnects", |t| t.nodes.iter().all(|n| n.disconnected))?;
        Ok(())
    })();
    t.destroy();
    r
}

pub fn run(args: Args) -> ExitCode {
    let how = match check_args(&args) {
        Ok(v) => v,
        Err(m) => {
            eprintln!("{m}");
            return ExitCode::from(22);
        }
    };
    signals::catch();
    let r = if args.server.is_some() {
        run_client(args, how)
    } else {
        run_server(args, how)
    };
    if let Some(sig) = r.as_ref().err().and_then(|m: &String| is_signal(m)) {
        // Everything was disconnected and destroyed: die of the signal, as cmatose would.
        signals::die(sig);
    }
    let status: i32 = match r {
        Ok(()) => 0,
        Err(m) => match m.strip_prefix("status ").and_then(|r| r.split_once('|')) {
            Some((n, text)) => {
                println!("{text}");
                n.parse().unwrap_or(1)
            }
            None => {
                println!("{m}");
                1
            }
        },
    };
    println!("test complete");
    println!("return status {status}");
    // The shell sees ret & 0xff, as for cmatose's `return ret` from main.
    ExitCode::from((status & 0xff) as u8)
}
