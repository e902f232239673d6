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
    ConnParam, IbAddr, PortSpace, RdmaCmEvent, RdmaCmEventType, RdmaCmId, RdmaOption,
};
use softrdma_driver::cm::Event;
use softrdma_wire::Gid;

use crate::cmtool;
use crate::udtool::{self, fail, status, Fail, Node, Ud};

/// udaddy's fixed port.
const PORT: u16 = 7174;
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
    #[arg(short = 'p', value_parser = cmtool::parse_c_u16)]
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

/// `strtoul(s, NULL, 0)` into a byte (`-t`).
fn parse_c_u8(s: &str) -> Result<u8, String> {
    cmtool::parse_c(s).map(|v| v as u8)
}

/// The address form of `-f`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Any,
    Numeric,
    Gid,
}

struct Test {
    ud: Ud,
    connections: u32,
    ps: PortSpace,
    tos: Option<u8>,
    format: Format,
    /// How long to wait for CM events (`--timeout`).
    event_timeout: Duration,
    /// The client's server, for the retry notices.
    peer: String,
}

impl Test {
    fn new(a: &Args, d: cmtool::CmDevice, (ps, format): (PortSpace, Format), peer: String) -> Test {
        Test {
            ud: Ud::new("udaddy", d, a.connections, a.message_count, a.message_size),
            connections: a.connections,
            ps,
            tos: None,
            format,
            event_timeout: Duration::from_secs(a.timeout),
            peer,
        }
    }

    /// udaddy's cma_handler; `Err` ends the event loop with its status.
    fn on_event(&mut self, e: RdmaCmEvent) -> Result<(), Fail> {
        use RdmaCmEventType as T;
        match e.kind() {
            T::AddrResolved => {
                let i = self.ud.node_of(&e).ok_or_else(|| fail(-22, "unknown id"))?;
                let id = self.ud.id(i)?;
                if let Some(t) = self.tos {
                    if let Err(err) = self
                        .ud
                        .d
                        .cm
                        .with_cm(|cm| cm.set_option(id, RdmaOption::Tos(t)))
                    {
                        eprintln!("udaddy: set TOS option failed: {err}");
                    }
                }
                if let Err(err) = self.ud.d.cm.with_cm(|cm| cm.resolve_route(id)) {
                    eprintln!("udaddy: resolve route failed: {err}");
                    self.ud.connect_done();
                    return Err(status(-1));
                }
            }
            T::RouteResolved => {
                let i = self.ud.node_of(&e).ok_or_else(|| fail(-22, "unknown id"))?;
                let r = self
                    .ud
                    .verify_test_params()
                    .and_then(|()| self.ud.init_node(i, true))
                    .and_then(|()| {
                        let id = self.ud.id(i)?;
                        let qpn = self.ud.nodes[i].qpn;
                        let p = ConnParam::default();
                        self.ud
                            .d
                            .cm
                            .with_id(id.name(), |cm, s, now| {
                                cm.connect(now, s, id, Some(qpn), &p)
                            })
                            .map_err(|e| e.to_string())
                            .and_then(|r| r.map_err(|e| e.to_string()))
                            .map_err(|err| {
                                eprintln!("udaddy: failure connecting: {err}");
                                status(-1)
                            })
                    });
                if let Err(f) = r {
                    self.ud.connect_done();
                    return Err(f);
                }
            }
            T::ConnectRequest => {
                let id = e.into_new_id().ok_or_else(|| fail(-22, "no new id"))?;
                return self.connect_handler(id);
            }
            T::Established => {
                let i = self.ud.node_of(&e).ok_or_else(|| fail(-22, "unknown id"))?;
                let Some(ud) = e.ud() else {
                    self.ud.connect_done();
                    return Err(fail(-1, "udaddy: failure creating address handle"));
                };
                let n = &mut self.ud.nodes[i];
                n.remote_qpn = ud.qp_num;
                n.remote_qkey = ud.qkey;
                n.ah = Some(ud.ah);
                n.connected = true;
                self.ud.connect_done();
            }
            T::AddrError | T::RouteError | T::ConnectError | T::Unreachable | T::Rejected => {
                self.ud.connect_done();
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
        let i = self.ud.nodes.len();
        if i as u32 == self.connections {
            println!("udaddy: failing connection request");
            let now = self.ud.d.dev.now();
            self.ud.d.cm.with_cm(|cm| {
                if let Err((id, _)) = cm.reject(now, id, &[]) {
                    cm.destroy(now, id);
                }
            });
            return Err(status(-12));
        }
        self.ud.nodes.push(Node::new(Some(id)));
        let r = self
            .ud
            .verify_test_params()
            .and_then(|()| self.ud.init_node(i, true));
        let r = r.and_then(|()| {
            let id = self.ud.id(i)?;
            let qpn = self.ud.nodes[i].qpn;
            self.ud
                .d
                .cm
                .with_id(id.name(), |cm, _, now| cm.accept_ud(now, id, qpn, 0, &[]))
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
                .map_err(|err| {
                    eprintln!("udaddy: failure accepting: {err}");
                    status(-1)
                })
        });
        match r {
            Ok(()) => {
                self.ud.nodes[i].connected = true;
                self.ud.connect_done();
                Ok(())
            }
            Err(f) => {
                if let Some(m) = &f.msg {
                    println!("{m}");
                }
                println!("udaddy: failing connection request");
                self.ud.connect_done();
                if let Some(id) = self.ud.nodes[i].id.take() {
                    let now = self.ud.d.dev.now();
                    self.ud.d.cm.with_cm(|cm| {
                        if let Err((id, _)) = cm.reject(now, id, &[]) {
                            cm.destroy(now, id);
                        }
                    });
                }
                Err(status(f.ret))
            }
        }
    }

    /// `connect_events`: events until every connection is up or failed, or an error.
    fn connect_events(&mut self) -> Result<(), Fail> {
        while self.ud.connects_left > 0 {
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
                match self.ud.d.cm.wait_event(left) {
                    Some(Event::Rdma(e)) => break e,
                    Some(Event::Ib(ev)) => {
                        let now = self.ud.d.dev.now();
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
    let mut t = Test::new(a, d, (ps, fmt), String::new());
    let listen = t.ud.d.cm.with_cm(|cm| cm.create_id_ps(t.ps));
    let r = t.ud.d.cm.with_cm(|cm| {
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
            Err(status(-1))
        }
        Ok(()) => match t.ud.d.cm.with_cm(|cm| cm.listen(&listen, 0)) {
            Err(e) => {
                eprintln!("udaddy: failure trying to listen: {e}");
                Err(status(-1))
            }
            Ok(()) => (|| {
                // v44 ignores what connect_events returns here.
                if let Err(f) = t.connect_events() {
                    if let Some(m) = f.msg {
                        println!("{m}");
                    }
                }
                if t.ud.count > 0 {
                    println!("receiving data transfers");
                    t.ud.poll_cqs(DATA_TIMEOUT, "completions", true)?;
                    println!("sending replies");
                    for i in 0..t.ud.nodes.len() {
                        t.ud.post_sends(i, true)?;
                    }
                    t.ud.poll_cqs(DATA_TIMEOUT, "completions", true)?;
                    println!("data transfers complete");
                }
                Ok(())
            })(),
        },
    };
    t.ud.d.cm.with_cm(|cm| cm.destroy(t.ud.d.dev.now(), listen));
    t.ud.destroy_ids();
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
    let d = udtool::open_client("udaddy", src, dst.ip(), a.pcap.as_ref())?;
    let src = d.dev.local_addr().ip();
    let mut t = Test::new(a, d, (ps, fmt), dst.to_string());
    t.tos = a.tos;
    t.ud.create_ids(a.connections, t.ps);
    println!("udaddy: connecting");
    let r = (|| {
        for i in 0..t.ud.nodes.len() {
            let id = t.ud.id(i)?;
            let r = if t.format == Format::Gid {
                t.ud.d.cm.with_cm(|cm| {
                    cm.resolve_addr_ib(
                        id,
                        Some(Gid::from(src)),
                        IbAddr::new(Gid::from(dst.ip()), PORT),
                    )
                })
            } else {
                t.ud.d
                    .cm
                    .resolve_addr(id, Some(src), dst)
                    .map_err(|e| match e {
                        softrdma_driver::cm::Error::Rdma(r) => r,
                        _ => softrdma_core::rdma_cm::RdmaCmError::NoDevice,
                    })
            };
            if let Err(e) = r {
                eprintln!("udaddy: failure getting addr: {e}");
                t.ud.connect_done();
                return Err(status(-1));
            }
        }
        eprintln!(
            "udaddy: waiting for {dst} to answer (each unanswered SIDR REQ retry shows here; a \
             dead address gives up after about 66 s, or --timeout SECS)"
        );
        t.connect_events()?;
        if t.ud.count > 0 {
            println!("initiating data transfers");
            for i in 0..t.ud.nodes.len() {
                t.ud.post_sends(i, false)?;
            }
            println!("receiving data transfers");
            t.ud.poll_cqs(DATA_TIMEOUT, "completions", true)?;
            println!("data transfers complete");
        }
        Ok(())
    })();
    t.ud.destroy_ids();
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
    udtool::report(r)
}
