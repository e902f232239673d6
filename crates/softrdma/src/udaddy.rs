//! `softrdma udaddy`: a peer of rdma-core 44's `udaddy` (librdmacm/examples/udaddy.c): N UD
//! "connections" through the RDMA CM (SIDR), C SENDs with immediate of S bytes each way.
//!
//! The exchange (udaddy.c): the client resolves, creates its UD QP, posts C receives and
//! `rdma_connect`s (SIDR REQ); the server, for each CONNECT_REQUEST, creates its QP, posts
//! C receives and accepts (SIDR REP with the QPN and Q_Key 0x01234567). The client's
//! ESTABLISHED names the server's QPN, Q_Key and address; it sends C unsignalled SENDs
//! with immediate (its own QPN) and waits for C receives. The server waits for C receives,
//! answers on an AH made from the first one's GRH (`ibv_create_ah_from_wc`), to the QPN in
//! the immediate, with its own Q_Key, C signalled SENDs. No disconnect. Output lines and
//! exit status are udaddy's; the port is 7174 and `-p` is the port space, as in v44.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use softrdma_core::rdma_cm::{
    init_ah_from_wc, ConnParam, IbAddr, PortSpace, RdmaCmEvent, RdmaCmEventType, RdmaCmId,
    RdmaOption,
};
use softrdma_core::verbs::{
    AccessFlags, AddressVector, CqId, MrKeys, RecvWr, SendOp, SendWr, Sge, UdDest, WorkCompletion,
};
use softrdma_driver::cm::Event;
use softrdma_wire::Gid;

use crate::cmtool::{self, CmDevice};

/// udaddy's fixed port.
const PORT: u16 = 7174;
/// The GRH area in front of every receive.
const GRH: u32 = 40;
const IOVA: u64 = 0x10_0000;
/// How long the tool waits for completions before it stops with a message (v44 waits
/// forever); for CM events it waits `--timeout` (a SIDR REQ gives up after 16 × 4.096 s).
const DATA_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Parser)]
pub struct Args {
    /// Client: the server's address; without it, run as the server.
    #[arg(short = 's')]
    pub server: Option<String>,
    /// Bind address (server: listen on it; client: the source address).
    #[arg(short = 'b')]
    pub bind: Option<String>,
    /// Number of connections.
    #[arg(short = 'c', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub connections: u32,
    /// Messages each way per connection.
    #[arg(short = 'C', default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=4096))]
    pub message_count: u32,
    /// Message size in bytes (at most the port's active MTU; 0: no data).
    #[arg(short = 'S', default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=65536))]
    pub message_size: u32,
    /// Type of service of the client's ids (`strtoul(…, 0)`).
    #[arg(short = 't', value_parser = parse_c_u8)]
    pub tos: Option<u8>,
    /// Port space as a number: 0x111 UDP (default), 0x2 IPoIB (`strtol(…, 0)`).
    #[arg(short = 'p', value_parser = parse_c_u16)]
    pub port_space_num: Option<u16>,
    /// Port space: udp or ipoib.
    #[arg(short = 'P')]
    pub port_space: Option<String>,
    /// Address format: name, ip, ipv6, or gid.
    #[arg(short = 'f')]
    pub format: Option<String>,
    /// Record every datagram to this pcap file (not a udaddy flag).
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Give up waiting for CM events after SECS seconds (not a udaddy flag; default 90: the
    /// CM gives up on an unanswered SIDR REQ after about 66 s).
    #[arg(long, value_name = "SECS", default_value_t = 90, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
}

/// C's `strtoul(s, NULL, 0)`: 0x… hex, 0… octal, else decimal.
fn parse_c(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        u64::from_str_radix(&t[1..], 8)
    } else {
        t.parse()
    };
    r.map_err(|_| format!("'{s}' is not a number"))
}

fn parse_c_u8(s: &str) -> Result<u8, String> {
    parse_c(s).map(|v| v as u8)
}

fn parse_c_u16(s: &str) -> Result<u16, String> {
    parse_c(s).and_then(|v| u16::try_from(v).map_err(|_| format!("'{s}' is out of range")))
}

struct Node {
    id: Option<RdmaCmId>,
    cq: Option<CqId>,
    qpn: u32,
    mr: Option<MrKeys>,
    ah: Option<AddressVector>,
    remote_qpn: u32,
    remote_qkey: u32,
    connected: bool,
}

impl Node {
    fn new(id: Option<RdmaCmId>) -> Node {
        Node {
            id,
            cq: None,
            qpn: 0,
            mr: None,
            ah: None,
            remote_qpn: 0,
            remote_qkey: 0,
            connected: false,
        }
    }
}

/// The address form of `-f`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Any,
    Numeric,
    Gid,
}

struct Test {
    d: CmDevice,
    nodes: Vec<Node>,
    connections: u32,
    connects_left: u32,
    count: u32,
    size: u32,
    ps: PortSpace,
    tos: Option<u8>,
    format: Format,
    /// How long to wait for CM events (`--timeout`).
    event_timeout: Duration,
    /// The client's server, for the retry notices.
    peer: String,
}

/// An error that ends the run with `ret` (udaddy's `return status`), after `msg` (stdout).
struct Fail {
    ret: i32,
    msg: Option<String>,
}

fn fail(ret: i32, msg: impl Into<String>) -> Fail {
    Fail {
        ret,
        msg: Some(msg.into()),
    }
}

impl Test {
    fn node_of(&self, e: &RdmaCmEvent) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.id.as_ref().is_some_and(|i| *i == e.id()))
    }

    /// `verify_test_params`: the message must fit the port's active MTU.
    fn verify_test_params(&self) -> Result<(), Fail> {
        let mtu = self
            .d
            .dev
            .query_port(1)
            .map(|p| p.active_mtu.bytes())
            .unwrap_or(1024);
        if self.count > 0 && self.size > mtu {
            return Err(fail(
                -22,
                format!(
                    "udaddy: message_size {} is larger than active mtu {mtu}",
                    self.size
                ),
            ));
        }
        Ok(())
    }

    /// `init_node` + `post_recvs`: a CQ of 2·C, a UD QP with C WRs each way (made ready by
    /// the CM: INIT with the Q_Key, RTR, RTS), a buffer of S + 40 bytes, C receives.
    fn init_node(&mut self, i: usize) -> Result<(), Fail> {
        let c = self.count;
        let cq = self
            .d
            .dev
            .create_cq((c * 2).max(2))
            .map_err(|e| fail(-12, format!("udaddy: unable to create CQ ({e})")))?;
        let (_, qpn) = self
            .d
            .ud_qp_on(cq, c.max(1), c.max(1))
            .map_err(|e| fail(-1, format!("udaddy: unable to create QP: {e}")))?;
        let id = self.nodes[i]
            .id
            .as_ref()
            .ok_or_else(|| fail(-22, "no id"))?;
        self.d
            .cm
            .with_id(id.name(), |cm, s, _| cm.init_qp_for(s, id, qpn))
            .map_err(|e| fail(-1, format!("udaddy: unable to create QP: {e}")))?
            .map_err(|e| fail(-1, format!("udaddy: unable to create QP: {e}")))?;
        let n = &mut self.nodes[i];
        n.cq = Some(cq);
        n.qpn = qpn;
        if c == 0 {
            return Ok(());
        }
        let mr = self
            .d
            .dev
            .reg_mr(
                self.d.pd,
                vec![0u8; (self.size + GRH) as usize],
                IOVA,
                AccessFlags::LOCAL_WRITE,
            )
            .map_err(|_| fail(-1, "failed to reg MR"))?;
        for k in 0..c {
            let wr = RecvWr::new(
                u64::from(k),
                vec![Sge {
                    addr: IOVA,
                    length: self.size + GRH,
                    lkey: mr.lkey,
                }],
            );
            self.d
                .dev
                .post_recv(qpn, wr)
                .map_err(|e| fail(-1, format!("failed to post receives: {e}")))?;
        }
        self.nodes[i].mr = Some(mr);
        Ok(())
    }

    /// `post_sends`: C SENDs with immediate (our QPN, big-endian on the wire) of S bytes.
    fn post_sends(&self, i: usize, signaled: bool) -> Result<(), Fail> {
        let n = &self.nodes[i];
        let (Some(ah), Some(mr)) = (n.ah, n.mr.as_ref()) else {
            return Ok(());
        };
        if !n.connected || self.count == 0 {
            return Ok(());
        }
        for k in 0..self.count {
            let mut wr = SendWr::new(u64::from(k), SendOp::SendWithImm { imm: n.qpn })
                .with_sge(Sge {
                    addr: IOVA,
                    length: self.size,
                    lkey: mr.lkey,
                })
                .with_ud(UdDest {
                    av: ah,
                    remote_qpn: n.remote_qpn,
                    remote_qkey: n.remote_qkey,
                });
            wr.signaled = signaled;
            self.d
                .dev
                .post_send(n.qpn, wr)
                .map_err(|e| fail(-1, format!("failed to post sends: {e}")))?;
        }
        Ok(())
    }

    /// `poll_cqs`: C completions on each connected node (of any kind, status not looked at);
    /// the first completion of a node without an AH makes the reply AH from its GRH.
    fn poll_cqs(&mut self) -> Result<(), Fail> {
        let mut wcs: Vec<WorkCompletion> = Vec::new();
        for i in 0..self.nodes.len() {
            if !self.nodes[i].connected {
                continue;
            }
            let Some(cq) = self.nodes[i].cq else { continue };
            let end = Instant::now() + DATA_TIMEOUT;
            let mut done = 0;
            while done < self.count {
                if Instant::now() > end {
                    return Err(fail(-110, "udaddy: timed out waiting for completions"));
                }
                wcs.clear();
                let n = self
                    .d
                    .dev
                    .wait_cq_or(cq, &mut wcs, 8, Some(Duration::from_millis(200)), &|| false)
                    .map_err(|e| fail(-1, format!("udaddy: failed polling CQ: {e}")))?;
                if n > 0 && self.nodes[i].ah.is_none() {
                    self.create_reply_ah(i, &wcs[0])
                        .map_err(|_| fail(-1, "udaddy: failed to create reply AH"))?;
                }
                done += n as u32;
            }
        }
        Ok(())
    }

    /// `create_reply_ah`: `ibv_create_ah_from_wc` on the GRH in front of the receive, the
    /// client's QPN from the immediate, our QP's Q_Key.
    fn create_reply_ah(&mut self, i: usize, wc: &WorkCompletion) -> Result<(), ()> {
        let n = &self.nodes[i];
        let mr = n.mr.as_ref().ok_or(())?;
        let mut grh = [0u8; GRH as usize];
        self.d
            .dev
            .read_mr(mr.lkey, IOVA, &mut grh)
            .map_err(|_| ())?;
        let ah = self
            .d
            .dev
            .with_stack(|s| init_ah_from_wc(s, wc, &grh))
            .ok_or(())?;
        let qkey = self.d.dev.query_qp(n.qpn).map_err(|_| ())?.qkey;
        let n = &mut self.nodes[i];
        n.ah = Some(ah);
        n.remote_qpn = wc.imm_data.unwrap_or(0);
        n.remote_qkey = qkey;
        Ok(())
    }

    fn connect_error(&mut self) {
        self.connects_left = self.connects_left.saturating_sub(1);
    }

    /// udaddy's cma_handler; `Err` ends the event loop with its status.
    fn on_event(&mut self, e: RdmaCmEvent) -> Result<(), Fail> {
        use RdmaCmEventType as T;
        match e.kind() {
            T::AddrResolved => {
                let i = self.node_of(&e).ok_or_else(|| fail(-22, "unknown id"))?;
                let id = self.nodes[i]
                    .id
                    .as_ref()
                    .ok_or_else(|| fail(-22, "no id"))?;
                if let Some(t) = self.tos {
                    if let Err(err) = self
                        .d
                        .cm
                        .with_cm(|cm| cm.set_option(id, RdmaOption::Tos(t)))
                    {
                        eprintln!("udaddy: set TOS option failed: {err}");
                    }
                }
                if let Err(err) = self.d.cm.with_cm(|cm| cm.resolve_route(id)) {
                    eprintln!("udaddy: resolve route failed: {err}");
                    self.connect_error();
                    return Err(Fail { ret: -1, msg: None });
                }
            }
            T::RouteResolved => {
                let i = self.node_of(&e).ok_or_else(|| fail(-22, "unknown id"))?;
                let r = self
                    .verify_test_params()
                    .and_then(|()| self.init_node(i))
                    .and_then(|()| {
                        let id = self.nodes[i]
                            .id
                            .as_ref()
                            .ok_or_else(|| fail(-22, "no id"))?;
                        let qpn = self.nodes[i].qpn;
                        let p = ConnParam::default();
                        self.d
                            .cm
                            .with_id(id.name(), |cm, s, now| {
                                cm.connect(now, s, id, Some(qpn), &p)
                            })
                            .map_err(|e| e.to_string())
                            .and_then(|r| r.map_err(|e| e.to_string()))
                            .map_err(|err| {
                                eprintln!("udaddy: failure connecting: {err}");
                                Fail { ret: -1, msg: None }
                            })
                    });
                if let Err(f) = r {
                    self.connect_error();
                    return Err(f);
                }
            }
            T::ConnectRequest => {
                let id = e.into_new_id().ok_or_else(|| fail(-22, "no new id"))?;
                return self.connect_handler(id);
            }
            T::Established => {
                let i = self.node_of(&e).ok_or_else(|| fail(-22, "unknown id"))?;
                let Some(ud) = e.ud() else {
                    self.connect_error();
                    return Err(fail(-1, "udaddy: failure creating address handle"));
                };
                let n = &mut self.nodes[i];
                n.remote_qpn = ud.qp_num;
                n.remote_qkey = ud.qkey;
                n.ah = Some(ud.ah);
                n.connected = true;
                self.connects_left = self.connects_left.saturating_sub(1);
            }
            T::AddrError | T::RouteError | T::ConnectError | T::Unreachable | T::Rejected => {
                self.connect_error();
                return Err(fail(
                    e.status(),
                    format!(
                        "udaddy: event: {}, error: {}",
                        e.kind().as_str(),
                        e.status()
                    ),
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// `connect_handler`: a slot, the resources, C receives, `rdma_accept` (SIDR REP). A
    /// request beyond `-c`, or one that fails, is rejected (SIDR REP status 2).
    fn connect_handler(&mut self, id: RdmaCmId) -> Result<(), Fail> {
        let i = self.nodes.len();
        if i as u32 == self.connections {
            println!("udaddy: failing connection request");
            let now = self.d.dev.now();
            self.d.cm.with_cm(|cm| {
                if let Err((id, _)) = cm.reject(now, id, &[]) {
                    cm.destroy(now, id);
                }
            });
            return Err(Fail {
                ret: -12,
                msg: None,
            });
        }
        self.nodes.push(Node::new(Some(id)));
        let r = self.verify_test_params().and_then(|()| self.init_node(i));
        let r = r.and_then(|()| {
            let id = self.nodes[i]
                .id
                .as_ref()
                .ok_or_else(|| fail(-22, "no id"))?;
            let qpn = self.nodes[i].qpn;
            self.d
                .cm
                .with_id(id.name(), |cm, _, now| cm.accept_ud(now, id, qpn, 0, &[]))
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
                .map_err(|err| {
                    eprintln!("udaddy: failure accepting: {err}");
                    Fail { ret: -1, msg: None }
                })
        });
        match r {
            Ok(()) => {
                self.nodes[i].connected = true;
                self.connects_left = self.connects_left.saturating_sub(1);
                Ok(())
            }
            Err(f) => {
                if let Some(m) = &f.msg {
                    println!("{m}");
                }
                println!("udaddy: failing connection request");
                self.connect_error();
                if let Some(id) = self.nodes[i].id.take() {
                    let now = self.d.dev.now();
                    self.d.cm.with_cm(|cm| {
                        if let Err((id, _)) = cm.reject(now, id, &[]) {
                            cm.destroy(now, id);
                        }
                    });
                }
                Err(Fail {
                    ret: f.ret,
                    msg: None,
                })
            }
        }
    }

    /// `connect_events`: events until every connection is up or failed, or an error.
    fn connect_events(&mut self) -> Result<(), Fail> {
        while self.connects_left > 0 {
            let end = Instant::now() + self.event_timeout;
            let e = loop {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(fail(
                        -110,
                        format!(
                            "udaddy: timed out waiting for CM events ({} s, --timeout SECS)",
                            self.event_timeout.as_secs()
                        ),
                    ));
                }
                match self.d.cm.wait_event(left) {
                    Some(Event::Rdma(e)) => break e,
                    Some(Event::Ib(ev)) => {
                        let now = self.d.dev.now();
                        if let Some(l) = cmtool::retry_note("udaddy", &self.peer, now, &ev) {
                            eprintln!("{l}");
                        }
                    }
                    None => {}
                }
            };
            self.on_event(e)?;
        }
        Ok(())
    }

    fn destroy(&mut self) {
        let now = self.d.dev.now();
        for n in &mut self.nodes {
            if let Some(id) = n.id.take() {
                self.d.cm.with_cm(|cm| cm.destroy(now, id));
            }
        }
    }
}

fn port_space(a: &Args) -> PortSpace {
    let mut ps = PortSpace::UDP;
    if let Some(p) = a.port_space_num {
        ps = PortSpace(p);
    }
    if let Some(p) = a.port_space.as_deref() {
        let l = p.to_ascii_lowercase();
        if l.starts_with("ipoib") {
            ps = PortSpace::IPOIB;
        } else if !l.starts_with("udp") {
            eprintln!("Warning: unknown port space format");
        }
    }
    ps
}

fn format(a: &Args) -> Format {
    match a.format.as_deref().map(|f| f.to_ascii_lowercase()) {
        None => Format::Any,
        Some(f) if f.starts_with("ip") => Format::Numeric,
        Some(f) if f.starts_with("gid") => Format::Gid,
        Some(f) => {
            if !f.starts_with("name") {
                eprintln!("Warning: unknown address format");
            }
            Format::Any
        }
    }
}

/// `rdma_getaddrinfo` for the tool's addresses: a name or a number (`-f ip`: a number),
/// or with `-f gid` a GID in IPv6 notation.
fn parse_addr(s: &str, fmt: Format, port: u16, what: &str) -> Result<SocketAddr, Fail> {
    let e = |m: String| fail(-2, format!("udaddy: {what} error: {m}"));
    match fmt {
        Format::Gid => s
            .parse::<std::net::Ipv6Addr>()
            .map(|g| SocketAddr::new(Gid(g.octets()).to_ip(), port))
            .map_err(|_| e("Name or service not known".into())),
        Format::Numeric => s
            .parse::<IpAddr>()
            .map(|ip| SocketAddr::new(ip, port))
            .map_err(|_| e("Name or service not known".into())),
        Format::Any => {
            softrdma_driver::cm::resolve_host(s, port, None).map_err(|x| e(x.to_string()))
        }
    }
}

fn run_server(a: &Args, t_args: (PortSpace, Format)) -> Result<(), Fail> {
    println!("udaddy: starting server");
    let (ps, fmt) = t_args;
    let Some(b) = a.bind.as_deref() else {
        return Err(fail(
            -22,
            "udaddy: give -b ADDR: a softrdma device opens on one local address",
        ));
    };
    let bind = parse_addr(b, fmt, PORT, "getrdmaaddr")?;
    let d = cmtool::open(
        bind.ip(),
        a.pcap.as_ref(),
        "listen on another local address with -b ADDR",
        cmtool::THREAD,
    )
    .map_err(|m| fail(-19, m))?;
    let mut t = Test {
        d,
        nodes: Vec::new(),
        connections: a.connections,
        connects_left: a.connections,
        count: if a.message_size == 0 {
            0
        } else {
            a.message_count
        },
        size: a.message_size,
        ps,
        tos: None,
        format: fmt,
        event_timeout: Duration::from_secs(a.timeout),
        peer: String::new(),
    };
    let listen = t.d.cm.with_cm(|cm| cm.create_id_ps(t.ps));
    let r = t.d.cm.with_cm(|cm| {
        if t.format == Format::Gid {
            cm.bind_ib(&listen, IbAddr::new(Gid::from(bind.ip()), PORT))
                .map(|_| ())
        } else {
            cm.bind_addr(&listen, bind).map(|_| ())
        }
    });
    let r = match r {
        Err(e) => {
            eprintln!("udaddy: bind address failed: {e}");
            Err(Fail { ret: -1, msg: None })
        }
        Ok(()) => match t.d.cm.with_cm(|cm| cm.listen(&listen, 0)) {
            Err(e) => {
                eprintln!("udaddy: failure trying to listen: {e}");
                Err(Fail { ret: -1, msg: None })
            }
            Ok(()) => (|| {
                // v44 ignores what connect_events returns here.
                if let Err(f) = t.connect_events() {
                    if let Some(m) = f.msg {
                        println!("{m}");
                    }
                }
                if t.count > 0 {
                    println!("receiving data transfers");
                    t.poll_cqs()?;
                    println!("sending replies");
                    for i in 0..t.nodes.len() {
                        t.post_sends(i, true)?;
                    }
                    t.poll_cqs()?;
                    println!("data transfers complete");
                }
                Ok(())
            })(),
        },
    };
    t.d.cm.with_cm(|cm| cm.destroy(t.d.dev.now(), listen));
    t.destroy();
    r
}

fn run_client(a: &Args, t_args: (PortSpace, Format)) -> Result<(), Fail> {
    println!("udaddy: starting client");
    let (ps, fmt) = t_args;
    let dst = parse_addr(
        a.server.as_deref().unwrap_or_default(),
        fmt,
        PORT,
        "getaddrinfo",
    )?;
    let src = match a.bind.as_deref() {
        Some(b) => Some(parse_addr(b, fmt, 0, "getaddrinfo")?.ip()),
        None => None,
    };
    // The source rule of the other tools: the routed address, or on IPv4 loopback a free
    // 127.0.0.x when a server on this host holds it.
    let d = cmtool::open_client(
        src,
        dst.ip(),
        a.pcap.as_ref(),
        "-b",
        "udaddy",
        cmtool::THREAD,
    )
    .map_err(|m| fail(-19, m))?;
    let src = d.dev.local_addr().ip();
    let mut t = Test {
        d,
        nodes: Vec::new(),
        connections: a.connections,
        connects_left: a.connections,
        count: if a.message_size == 0 {
            0
        } else {
            a.message_count
        },
        size: a.message_size,
        ps,
        tos: a.tos,
        format: fmt,
        event_timeout: Duration::from_secs(a.timeout),
        peer: dst.to_string(),
    };
    for _ in 0..a.connections {
        let id = t.d.cm.with_cm(|cm| cm.create_id_ps(t.ps));
        t.nodes.push(Node::new(Some(id)));
    }
    println!("udaddy: connecting");
    let r = (|| {
        for i in 0..t.nodes.len() {
            let id = t.nodes[i].id.as_ref().ok_or_else(|| fail(-22, "no id"))?;
            let r = if t.format == Format::Gid {
                t.d.cm.with_cm(|cm| {
                    cm.resolve_addr_ib(
                        id,
                        Some(Gid::from(src)),
                        IbAddr::new(Gid::from(dst.ip()), PORT),
                    )
                })
            } else {
                t.d.cm
                    .resolve_addr(id, Some(src), dst)
                    .map_err(|e| match e {
                        softrdma_driver::cm::Error::Rdma(r) => r,
                        _ => softrdma_core::rdma_cm::RdmaCmError::NoDevice,
                    })
            };
            if let Err(e) = r {
                eprintln!("udaddy: failure getting addr: {e}");
                t.connect_error();
                return Err(Fail { ret: -1, msg: None });
            }
        }
        eprintln!(
            "udaddy: waiting for {dst} to answer (each unanswered SIDR REQ retry shows here; a \
             dead address gives up after about 66 s, or --timeout SECS)"
        );
        t.connect_events()?;
        if t.count > 0 {
            println!("initiating data transfers");
            for i in 0..t.nodes.len() {
                t.post_sends(i, false)?;
            }
            println!("receiving data transfers");
            t.poll_cqs()?;
            println!("data transfers complete");
        }
        Ok(())
    })();
    t.destroy();
    r
}

pub fn run(args: Args) -> ExitCode {
    let ps = port_space(&args);
    let fmt = format(&args);
    let r = if args.server.is_some() {
        run_client(&args, (ps, fmt))
    } else {
        run_server(&args, (ps, fmt))
    };
    let status = match r {
        Ok(()) => 0,
        Err(f) => {
            if let Some(m) = f.msg {
                println!("{m}");
            }
            f.ret
        }
    };
    println!("test complete");
    println!("return status {status}");
    ExitCode::from((status & 0xff) as u8)
}
