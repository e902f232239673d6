//! `softrdma rping`: a peer of rdma-core's `rping` (librdmacm/examples/rping.c) over a
//! softrdma device and our own RDMA CM.
//!
//! The protocol, as rping runs it (one RC QP, RDMA_PS_TCP, default port 7174):
//! 1. the client SENDs a 16-byte `struct rping_rdma_info` (big-endian buf address u64,
//!    rkey u32, size u32) naming its "ping" buffer ("rdma-ping-N: " then letters A..z);
//! 2. the server RDMA READs it (the length the client advertised, into its own buffer: a
//!    client larger than the server fails the READ with a local protection error, status 4,
//!    as rping does), then SENDs a 16-byte "go ahead";
//! 3. the client SENDs the info of its sink buffer; the server RDMA WRITEs the data back
//!    (strlen + 1 bytes) and SENDs "go ahead" again; the client prints
//!    `ping data: rdma-ping-N: ...` with -v.
//!
//! After COUNT pings the client disconnects (DREQ); the server sees DISCONNECTED, answers
//! DREP and exits 0 (with `-P` it serves the next client). A failure on either side (a
//! completion error, a bad message, SIGINT or SIGTERM) disconnects before the process
//! exits, as the kernel does for a process that exits, so the peer is never left waiting;
//! a signal then ends the process as the signal would.
//!
//! The server without `-a` (or with `-a 0.0.0.0` / `-a ::`) listens on the wildcard: a
//! device on every local address of the family, all in one CM, and each connection's QP on
//! the device its request came in on.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use softrdma_core::cm::CmEvent;
use softrdma_core::rdma_cm::{
    ConnParam, RdmaCm, RdmaCmEvent, RdmaCmEventType, RdmaCmId, RdmaOption,
};
use softrdma_core::verbs::{
    AccessFlags, CqId, MrKeys, PdId, QpAttr, QpAttrMask, QpInitAttr, QpState, RecvWr, SendOp,
    SendWr, Sge, WcOpcode, WcStatus,
};
use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::Device;

use crate::cmtool::{self, signals, CmText, SIGNAL_SLICE};

/// `RPING_BUFSIZE`.
const RPING_BUFSIZE: u32 = 64 * 1024;
/// `RPING_MIN_BUFSIZE`: sizeof("2147483647") + sizeof("rdma-ping-%d: ").
const RPING_MIN_BUFSIZE: u32 = 11 + 15;
/// `RPING_SQ_DEPTH`.
const SQ_DEPTH: u32 = 16;
const INFO_LEN: usize = 16;
/// rping's `rdma_listen(cb->cm_id, 3)`.
const BACKLOG: u32 = 3;

const RECV_IOVA: u64 = 0x1000;
const SEND_IOVA: u64 = 0x2000;
const RDMA_IOVA: u64 = 0x10_0000;
const START_IOVA: u64 = 0x20_0000;

const WR_RECV: u64 = 1;
const WR_SEND: u64 = 2;
const WR_RDMA: u64 = 3;

/// The exit status of a refused argument (rping's `EINVAL`).
const EINVAL: u8 = 22;

/// `softrdma rping -s [-a ADDR] [-P] | -c -a ADDR [-I ADDR]` `[-p PORT] [-C COUNT] [-S SIZE]
/// [-q] [-v] [-V] [-d]`.
#[derive(Debug, clap::Args)]
#[command(disable_version_flag = true)]
pub struct Args {
    /// Server side.
    #[arg(short = 's')]
    pub server: bool,
    /// Client side.
    #[arg(short = 'c')]
    pub client: bool,
    /// Address, a name or a number. Server: where to listen (default 0.0.0.0: every local
    /// IPv4 address; -a :: every IPv6 one). Client: the server's.
    #[arg(short = 'a')]
    pub addr: Option<String>,
    /// Client: the source address, a name or a number (default: the one routed towards the
    /// server; on one host with a loopback server, the next free 127.0.0.x).
    #[arg(short = 'I')]
    pub source: Option<String>,
    /// Port, 1 to 65535.
    #[arg(short = 'p', default_value = "7174", allow_hyphen_values = true)]
    pub port: String,
    /// Ping count, 0 (forever) to 2147483647.
    #[arg(short = 'C', default_value = "0", allow_hyphen_values = true)]
    pub count: String,
    /// Ping data size, 26 to 65535.
    #[arg(short = 'S', default_value = "64", allow_hyphen_values = true)]
    pub size: String,
    /// Server: persistent, serving one client after another until interrupted.
    #[arg(short = 'P')]
    pub persistent: bool,
    /// Use a self-created, self-modified QP (rdma_init_qp_attr, rdma_establish).
    #[arg(short = 'q')]
    pub self_qp: bool,
    /// Client: type of service (`rdma_set_option(RDMA_OPTION_ID_TOS)`), 0 to 255: the
    /// connection's traffic class and the IP TOS byte of its packets.
    #[arg(short = 't', value_parser = clap::value_parser!(u8))]
    pub tos: Option<u8>,
    /// Display ping data to stdout (CM retransmissions go to stderr with or without it).
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Validate ping data.
    #[arg(short = 'V')]
    pub validate: bool,
    /// Debug printfs.
    #[arg(short = 'd')]
    pub debug: bool,
    /// Server: wait this many milliseconds before accepting (not an rping flag; lets a
    /// retransmitted REQ draw the RDMA CM's delayed MRA).
    #[arg(long, default_value_t = 0)]
    pub accept_delay: u64,
    /// Server, test aid (not an rping flag): answer every connection request with
    /// rdma_reject (REJ reason 28, consumer defined) carrying the private data
    /// "softrdma-reject"; never accepts, runs until killed.
    #[arg(long)]
    pub reject: bool,
    /// Record every datagram to this pcap file (a wildcard server: one file per device,
    /// NAME-IP.EXT).
    #[arg(long)]
    pub pcap: Option<PathBuf>,
}

/// The arguments, checked.
struct Opts {
    server: bool,
    /// Server: where to listen; client: the server.
    addr: SocketAddr,
    /// Client: `-I`.
    source: Option<IpAddr>,
    count: u32,
    size: u32,
    persistent: bool,
    self_qp: bool,
    tos: Option<u8>,
    verbose: bool,
    validate: bool,
    debug: bool,
    accept_delay: u64,
    reject: bool,
    pcap: Option<PathBuf>,
}

/// Why a run ended early.
enum Fail {
    /// A failure, with what to print.
    Msg(String),
    /// SIGINT or SIGTERM: everything was hung up; die of it.
    Signal(i32),
}

impl<E: std::fmt::Display> From<E> for Fail {
    fn from(e: E) -> Self {
        Fail::Msg(e.to_string())
    }
}

fn fail(m: impl Into<String>) -> Fail {
    Fail::Msg(m.into())
}

/// A decimal number within `lo..=hi`, or rping's message for `what`.
fn ranged(s: &str, what: &str, lo: i64, hi: i64) -> Result<u32, String> {
    match s.trim().parse::<i64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v as u32),
        _ => Err(format!("Invalid {what} {s} (valid range is {lo} to {hi})")),
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    softrdma_driver::cm::resolve_host(host, port, None)
        .map_err(|e| format!("getaddrinfo failed ({e}) - invalid hostname or IP address"))
}

/// Every argument, before any work: one line naming the valid range or the fix.
fn check(a: &Args) -> Result<Opts, String> {
    if a.server == a.client {
        return Err("rping: give one of -s (server) and -c (client)".into());
    }
    let port = ranged(&a.port, "port", 1, 65535)? as u16;
    let count = ranged(&a.count, "count", 0, i64::from(i32::MAX))?;
    let size = ranged(
        &a.size,
        "size",
        i64::from(RPING_MIN_BUFSIZE),
        i64::from(RPING_BUFSIZE - 1),
    )?;
    let server_only = [
        (a.persistent, "-P (persistent server)"),
        (a.reject, "--reject"),
        (a.accept_delay > 0, "--accept-delay"),
    ];
    if a.client {
        if let Some((_, flag)) = server_only.iter().find(|(on, _)| *on) {
            return Err(format!("rping: {flag} is a server flag: it needs -s"));
        }
    } else if a.source.is_some() {
        return Err("rping: -I (the client's source address) needs -c".into());
    }
    let (addr, source) = if a.server {
        (resolve(a.addr.as_deref().unwrap_or("0.0.0.0"), port)?, None)
    } else {
        let host = a
            .addr
            .as_deref()
            .ok_or("rping: the client needs -a ADDR (the server's name or address)".to_string())?;
        let dst = resolve(host, port)?;
        if dst.ip().is_unspecified() {
            return Err(format!(
                "rping: -a {} is the wildcard, not a server to connect to",
                dst.ip()
            ));
        }
        let src = match a.source.as_deref() {
            Some(s) => Some(
                cmtool::source_of_family(s, dst, "-a", "-I").map_err(|e| format!("rping: {e}"))?,
            ),
            None => None,
        };
        (dst, src)
    };
    Ok(Opts {
        server: a.server,
        addr,
        source,
        count,
        size,
        persistent: a.persistent,
        self_qp: a.self_qp,
        tos: a.tos,
        verbose: a.verbose,
        validate: a.validate,
        debug: a.debug,
        accept_delay: a.accept_delay,
        reject: a.reject,
        pcap: a.pcap.clone(),
    })
}

macro_rules! dbg_log {
    ($o:expr, $($t:tt)*) => { if $o.debug { println!($($t)*); } };
}

/// A connection's verbs resources (rping_setup_qp + rping_setup_buffers).
struct Res {
    pd: PdId,
    cq: CqId,
    qpn: u32,
    recv: MrKeys,
    send: MrKeys,
    rdma: MrKeys,
    /// The client's ping buffer.
    start: Option<MrKeys>,
}

impl Res {
    fn new(dev: &Device, o: &Opts) -> Result<Res, Fail> {
        let pd = dev.alloc_pd()?;
        let cq = match dev.create_cq(SQ_DEPTH * 2) {
            Ok(cq) => cq,
            Err(e) => {
                let _ = dev.dealloc_pd(pd);
                return Err(fail(format!("ibv_create_cq: {e}")));
            }
        };
        let qp = dev.create_qp(QpInitAttr::rc(pd, cq, SQ_DEPTH, 2));
        let qpn = match qp {
            Ok((qpn, _)) => qpn,
            Err(e) => {
                let _ = dev.destroy_cq(cq);
                let _ = dev.dealloc_pd(pd);
                return Err(fail(format!("rdma_create_qp: {e}")));
            }
        };
        let mut r = Res {
            pd,
            cq,
            qpn,
            recv: MrKeys { lkey: 0, rkey: 0 },
            send: MrKeys { lkey: 0, rkey: 0 },
            rdma: MrKeys { lkey: 0, rkey: 0 },
            start: None,
        };
        if let Err(e) = r.fill(dev, o) {
            r.free(dev);
            return Err(e);
        }
        Ok(r)
    }

    fn fill(&mut self, dev: &Device, o: &Opts) -> Result<(), Fail> {
        let moved = if o.self_qp {
            // rping -q: ibv_create_qp, then INIT with no remote access (the CM's INIT
            // attributes add it once the connection is known).
            let attr = QpAttr {
                qp_state: QpState::Init,
                pkey_index: 0,
                port_num: 1,
                qp_access_flags: AccessFlags::NONE,
                ..QpAttr::default()
            };
            dev.modify_qp(
                self.qpn,
                &attr,
                QpAttrMask::STATE
                    | QpAttrMask::PKEY_INDEX
                    | QpAttrMask::PORT
                    | QpAttrMask::ACCESS_FLAGS,
            )
            .map_err(|e| e.to_string())
        } else {
            dev.with_stack(|s| RdmaCm::init_qp(s, self.qpn))
                .map_err(|e| e.to_string())
        };
        moved.map_err(|e| fail(format!("rdma_create_qp: {e}")))?;
        let rw = AccessFlags(
            AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0,
        );
        let size = o.size as usize;
        self.recv = dev.reg_mr(
            self.pd,
            vec![0; INFO_LEN],
            RECV_IOVA,
            AccessFlags::LOCAL_WRITE,
        )?;
        self.send = dev.reg_mr(self.pd, vec![0; INFO_LEN], SEND_IOVA, AccessFlags::NONE)?;
        self.rdma = dev.reg_mr(self.pd, vec![0; size], RDMA_IOVA, rw)?;
        if !o.server {
            self.start = Some(dev.reg_mr(self.pd, vec![0; size], START_IOVA, rw)?);
        }
        Ok(())
    }

    fn free(&self, dev: &Device) {
        let _ = dev.destroy_qp(self.qpn);
        let _ = dev.destroy_cq(self.cq);
        for k in [
            Some(self.recv),
            Some(self.send),
            Some(self.rdma),
            self.start,
        ]
        .into_iter()
        .flatten()
        {
            if k.lkey != 0 {
                let _ = dev.dereg_mr(k.lkey);
            }
        }
        let _ = dev.dealloc_pd(self.pd);
    }
}

/// What a wait ended with.
enum Got {
    Wc(WcOpcode),
    Disconnected,
}

/// One connection (`struct rping_cb` for one id).
struct Conn<'a> {
    o: &'a Opts,
    cm: Cm,
    dev: Device,
    id: Option<RdmaCmId>,
    res: Option<Res>,
    /// Server: CONNECT_REQUESTs for the listener that came meanwhile, served next (`-P`).
    stash: Vec<RdmaCmEvent>,
    /// DISCONNECTED was seen.
    disconnected: bool,
}

impl<'a> Conn<'a> {
    fn new(o: &'a Opts, cm: Cm, dev: Device, id: RdmaCmId) -> Conn<'a> {
        Conn {
            o,
            cm,
            dev,
            id: Some(id),
            res: None,
            stash: Vec::new(),
            disconnected: false,
        }
    }

    fn side(&self) -> &'static str {
        if self.o.server {
            "server"
        } else {
            "client"
        }
    }

    fn res(&self) -> Result<&Res, Fail> {
        self.res.as_ref().ok_or_else(|| fail("no QP"))
    }

    fn id(&self) -> Result<&RdmaCmId, Fail> {
        self.id.as_ref().ok_or_else(|| fail("no id"))
    }

    fn setup(&mut self) -> Result<(), Fail> {
        let r = Res::new(&self.dev, self.o)?;
        self.res = Some(r);
        self.post_recv()?;
        dbg_log!(self.o, "created qp {}", self.res()?.qpn);
        Ok(())
    }

    fn post_recv(&self) -> Result<(), Fail> {
        let r = self.res()?;
        let wr = RecvWr::new(
            WR_RECV,
            vec![Sge {
                addr: RECV_IOVA,
                length: INFO_LEN as u32,
                lkey: r.recv.lkey,
            }],
        );
        Ok(self.dev.post_recv(r.qpn, wr)?)
    }

    fn post(&self, wr_id: u64, op: SendOp, addr: u64, len: u32, lkey: u32) -> Result<(), Fail> {
        let mut wr = SendWr::new(wr_id, op).with_sge(Sge {
            addr,
            length: len,
            lkey,
        });
        wr.signaled = true;
        self.dev
            .post_send(self.res()?.qpn, wr)
            .map_err(|e| fail(format!("post send error: {e}")))
    }

    fn send_go_ahead(&self) -> Result<(), Fail> {
        let r = self.res()?;
        self.post(
            WR_SEND,
            SendOp::Send,
            SEND_IOVA,
            INFO_LEN as u32,
            r.send.lkey,
        )
    }

    fn send_info(&self, buf: u64, rkey: u32) -> Result<(), Fail> {
        let mut info = [0u8; INFO_LEN];
        info[..8].copy_from_slice(&buf.to_be_bytes());
        info[8..12].copy_from_slice(&rkey.to_be_bytes());
        info[12..].copy_from_slice(&self.o.size.to_be_bytes());
        dbg_log!(
            self.o,
            "RDMA addr {buf:x} rkey {rkey:x} len {}",
            self.o.size
        );
        self.dev.write_mr(self.res()?.send.lkey, SEND_IOVA, &info)?;
        self.send_go_ahead()
    }

    /// The next event of this connection's id (waiting up to `wait`; `None`: no waiting).
    /// CM retransmissions are printed on stderr; a CONNECT_REQUEST for the listener is
    /// kept for later; a caught signal ends the wait.
    fn next_event(&mut self, wait: Option<Duration>) -> Result<Option<RdmaCmEvent>, Fail> {
        let end = Instant::now() + wait.unwrap_or(Duration::ZERO);
        loop {
            if let Some(s) = signals::caught() {
                return Err(Fail::Signal(s));
            }
            let e = match wait {
                Some(_) => {
                    let left = end.saturating_duration_since(Instant::now());
                    match cmtool::wait_event(&self.cm, left) {
                        Ok(e) => e,
                        Err(s) => return Err(Fail::Signal(s)),
                    }
                }
                None => self.cm.poll_event(),
            };
            let Some(e) = e else { return Ok(None) };
            match e {
                Event::Rdma(e) if self.id.as_ref().is_some_and(|i| *i == e.id()) => {
                    dbg_log!(self.o, "cma_event type {}", e.kind().as_str());
                    return Ok(Some(e));
                }
                Event::Rdma(e) if e.kind() == RdmaCmEventType::ConnectRequest => {
                    dbg_log!(self.o, "cma_event type {} (queued)", e.kind().as_str());
                    self.stash.push(e);
                }
                Event::Rdma(_) => {}
                Event::Ib(ev) => {
                    let peer = if self.o.server {
                        "the client".to_string()
                    } else {
                        self.o.addr.to_string()
                    };
                    print_retry(&peer, &self.dev, &ev)
                }
            }
        }
    }

    /// Waits for the next completion that is not a SEND's (rping's semaphore), turning the
    /// CM meanwhile; DISCONNECTED ends the wait. A completion in error is printed as rping
    /// prints it (`cq completion failed status 12`) and fails the wait.
    fn wait(&mut self, what: &str) -> Result<Got, Fail> {
        let mut wcs = Vec::new();
        loop {
            while let Some(e) = self.next_event(None)? {
                match e.kind() {
                    RdmaCmEventType::Disconnected => {
                        eprintln!("{} DISCONNECT EVENT...", self.side());
                        self.disconnected = true;
                        return Ok(Got::Disconnected);
                    }
                    RdmaCmEventType::Established
                    | RdmaCmEventType::TimewaitExit
                    | RdmaCmEventType::ConnectResponse => {}
                    other => {
                        eprintln!("cma event {}, error {}", other.as_str(), e.status());
                        return Err(fail(format!("wait for {what}: {}", other.as_str())));
                    }
                }
            }
            wcs.clear();
            let cm = self.cm.clone();
            let (cq, qpn) = {
                let r = self.res()?;
                (r.cq, r.qpn)
            };
            self.dev
                .wait_cq_or(cq, &mut wcs, 1, Some(SIGNAL_SLICE), &move || {
                    cm.has_event() || signals::caught().is_some()
                })?;
            for wc in wcs.drain(..) {
                if wc.qp_num != qpn || wc.status == WcStatus::WrFlushErr {
                    continue;
                }
                if wc.status != WcStatus::Success {
                    eprintln!("cq completion failed status {}", wc.status.to_verbs());
                    return Err(fail(format!(
                        "wait for {what}: a completion failed ({})",
                        wc.status
                    )));
                }
                match wc.opcode {
                    WcOpcode::Send => dbg_log!(self.o, "send completion"),
                    WcOpcode::Recv => {
                        dbg_log!(self.o, "recv completion");
                        if wc.byte_len as usize != INFO_LEN {
                            eprintln!("Received bogus data, size {}", wc.byte_len);
                            return Err(fail(format!("wait for {what}: bogus data")));
                        }
                        self.post_recv()?;
                        return Ok(Got::Wc(WcOpcode::Recv));
                    }
                    WcOpcode::RdmaRead => {
                        dbg_log!(self.o, "rdma read completion");
                        return Ok(Got::Wc(wc.opcode));
                    }
                    WcOpcode::RdmaWrite => {
                        dbg_log!(self.o, "rdma write completion");
                        return Ok(Got::Wc(wc.opcode));
                    }
                    other => {
                        return Err(fail(format!(
                            "wait for {what}: unknown completion (opcode {})",
                            other.to_verbs()
                        )))
                    }
                }
            }
        }
    }

    /// Waits for a completion of `op`: `Ok(false)` when the peer disconnected instead.
    fn expect(&mut self, op: WcOpcode, what: &str) -> Result<bool, Fail> {
        match self.wait(what)? {
            Got::Disconnected => Ok(false),
            Got::Wc(got) if got == op => Ok(true),
            Got::Wc(got) => Err(fail(format!(
                "wait for {what}: got a completion of opcode {} instead",
                got.to_verbs()
            ))),
        }
    }

    /// Waits for one event of type `want` on the id (address and route resolution,
    /// connection).
    fn expect_event(&mut self, want: RdmaCmEventType, limit: Duration) -> Result<(), Fail> {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(fail(format!("waiting for {}: timeout", want.as_str())));
            }
            let Some(e) = self.next_event(Some(left))? else {
                continue;
            };
            if e.kind() == want {
                return Ok(());
            }
            if e.kind() == RdmaCmEventType::TimewaitExit {
                continue;
            }
            eprintln!("cma event {}, error {}", e.kind().as_str(), e.status());
            return Err(fail(format!("waiting for {}", want.as_str())));
        }
    }

    fn cstr(&self, lkey: u32, iova: u64) -> Result<String, Fail> {
        let mut b = vec![0u8; self.o.size as usize];
        self.dev.read_mr(lkey, iova, &mut b)?;
        let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Ok(String::from_utf8_lossy(&b[..n]).into_owned())
    }

    /// rping_self_modify_qp: INIT, RTR, RTS from `rdma_init_qp_attr`.
    fn self_modify_qp(&self, through: QpState) -> Result<(), Fail> {
        let (id, qpn) = (self.id()?.name(), self.res()?.qpn);
        for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
            let (mut a, m) = self
                .cm
                .with_cm(|c| c.init_qp_attr(id, st))
                .map_err(|e| fail(format!("rdma_init_qp_attr: {}", e.text())))?;
            if st == QpState::Rtr {
                // The source GID of the id's address (the kernel's sgid_attr).
                a.ah_attr.sgid_index = self.dev.ip_gid_index().unwrap_or(1);
            }
            self.dev
                .modify_qp(qpn, &a, m)
                .map_err(|e| fail(format!("ibv_modify_qp: {e}")))?;
            if st == through {
                break;
            }
        }
        Ok(())
    }

    /// rping_disconnect (-q: the QP to ERR first, as the CM does not hold it), then
    /// waits up to `linger` for DISCONNECTED (the DREP), then destroys the id and frees
    /// the resources. Returns the requests kept meanwhile.
    fn hang_up(mut self, linger: Duration) -> Vec<RdmaCmEvent> {
        if let Some(id) = &self.id {
            if self.o.self_qp {
                if let Some(r) = &self.res {
                    let err = QpAttr {
                        qp_state: QpState::Err,
                        ..QpAttr::default()
                    };
                    let _ = self.dev.modify_qp(r.qpn, &err, QpAttrMask::STATE);
                }
            }
            // DREQ when established, DREP after the peer's DREQ; nothing otherwise.
            let sent = matches!(
                self.cm
                    .with_id(id.name(), |cm, s, now| cm.disconnect(now, s, id)),
                Ok(Ok(()))
            );
            if sent && !self.disconnected && !linger.is_zero() {
                let end = Instant::now() + linger;
                while !self.disconnected {
                    let left = end.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    match self.cm.wait_event(left.min(SIGNAL_SLICE)) {
                        Some(Event::Rdma(e)) if *id == e.id() => {
                            self.disconnected = e.kind() == RdmaCmEventType::Disconnected;
                        }
                        Some(Event::Rdma(e)) if e.kind() == RdmaCmEventType::ConnectRequest => {
                            self.stash.push(e)
                        }
                        _ => {}
                    }
                }
            }
        }
        if let Some(id) = self.id.take() {
            let now = self.dev.now();
            self.cm.with_cm(|cm| cm.destroy(now, id));
        }
        if let Some(r) = self.res.take() {
            r.free(&self.dev);
        }
        std::mem::take(&mut self.stash)
    }
}

/// Prints an IB CM retransmission notice on stderr (with or without `-v`: a peer that does
/// not answer shows at once, and stdout stays rping's own lines):
/// `rping: no answer from 127.0.0.9:7174 yet: REQ retry 3/15, next in 6.1 s`.
fn print_retry(peer: &str, dev: &Device, ev: &CmEvent) {
    if let Some(line) = cmtool::retry_note("rping", peer, dev.now(), ev) {
        eprintln!("{line}");
    }
}

/// The private data `--reject` puts in its REJ (reason 28).
const REJECT_PRIVATE_DATA: &[u8] = b"softrdma-reject";

fn run_server(o: &Opts) -> Result<(), Fail> {
    let bind = o.addr;
    let (cm, devs) = if bind.ip().is_unspecified() {
        let (cm, devs) =
            cmtool::open_every(bind.is_ipv4(), o.pcap.as_ref(), "rping").map_err(Fail::Msg)?;
        let names: Vec<&str> = devs.iter().map(|d| d.name()).collect();
        eprintln!(
            "rping: listening on {bind}, every local {} address: {} device{} ({})",
            if bind.is_ipv4() { "IPv4" } else { "IPv6" },
            devs.len(),
            if devs.len() == 1 { "" } else { "s" },
            names.join(", ")
        );
        (cm, devs)
    } else {
        let d = cmtool::open(
            bind.ip(),
            o.pcap.as_ref(),
            "listen on another local address with -a ADDR",
            cmtool::THREAD,
        )
        .map_err(Fail::Msg)?;
        (d.cm.clone(), vec![d.dev.clone()])
    };
    dbg_log!(o, "rdma_bind_addr successful");
    let listener = cm
        .with_cm(|c| c.listen_on(bind, BACKLOG))
        .map_err(|e| fail(format!("rdma_listen on {bind}: {}", e.text())))?;
    dbg_log!(o, "rdma_listen");
    let mut pending: VecDeque<RdmaCmEvent> = VecDeque::new();
    let r = serve(o, &cm, &mut pending);
    // Requests never served are refused (destroying their ids sends the REJ).
    let now = devs[0].now();
    for e in pending {
        if let Some(id) = e.into_new_id() {
            cm.with_cm(|c| c.destroy(now, id));
        }
    }
    cm.with_cm(|c| c.destroy(now, listener));
    // The pcap files are complete before `main` returns (see cmtool::CmDevice's drop).
    for d in &devs {
        let _ = d.flush_pcap();
    }
    r
}

/// Accepts and serves connections: one, or with `-P` one after another.
fn serve(o: &Opts, cm: &Cm, pending: &mut VecDeque<RdmaCmEvent>) -> Result<(), Fail> {
    loop {
        let (req, id) = next_request(o, cm, pending)?;
        dbg_log!(o, "child cma {}", id.name().value());
        let Some(dev) = cm
            .with_cm(|c| c.port_of(id.name()))
            .and_then(|p| cm.device(p))
        else {
            cm.with_cm(|c| c.destroy(softrdma_core::time::Instant::ZERO, id));
            continue;
        };
        let mut conn = Conn::new(o, cm.clone(), dev, id);
        let r = accept_and_serve(&mut conn, &req);
        // After a DREQ this sends the DREP; after a failure, the DREQ.
        let linger = if r.is_ok() {
            Duration::ZERO
        } else {
            Duration::from_secs(1)
        };
        pending.extend(conn.hang_up(linger));
        match r {
            Ok(()) if o.persistent => {}
            Err(Fail::Msg(m)) if o.persistent => eprintln!("rping server: connection failed: {m}"),
            r => return r,
        }
    }
}

/// The next CONNECT_REQUEST (one kept from before first); `--reject` refuses them here.
fn next_request(
    o: &Opts,
    cm: &Cm,
    pending: &mut VecDeque<RdmaCmEvent>,
) -> Result<(ConnParam, RdmaCmId), Fail> {
    loop {
        let e = match pending.pop_front() {
            Some(e) => e,
            None => match cmtool::wait_event(cm, Duration::from_secs(1)) {
                Err(s) => return Err(Fail::Signal(s)),
                Ok(None) => continue,
                Ok(Some(Event::Rdma(e))) => {
                    if e.kind() != RdmaCmEventType::ConnectRequest {
                        continue;
                    }
                    dbg_log!(o, "cma_event type {}", e.kind().as_str());
                    e
                }
                Ok(Some(Event::Ib(ev))) => {
                    if let Some((_, d)) = cm.devices().first() {
                        print_retry("the client", d, &ev);
                    }
                    continue;
                }
            },
        };
        let RdmaCmEvent::ConnectRequest {
            new_id: id, param, ..
        } = e
        else {
            continue;
        };
        if o.reject {
            let port = cm.with_cm(|c| c.port_of(id.name()));
            let Some(port) = port else {
                cm.with_cm(|c| c.destroy(softrdma_core::time::Instant::ZERO, id));
                continue;
            };
            cm.with(port, |c, _, now| {
                c.reject(now, id, REJECT_PRIVATE_DATA).map_err(|(id, e)| {
                    c.destroy(now, id);
                    e
                })
            })
            .map_err(|err| fail(format!("rdma_reject: {}", err.text())))?
            .map_err(|err| fail(format!("rdma_reject: {}", err.text())))?;
            println!("rejected connect request (--reject)");
            continue;
        }
        return Ok((param, id));
    }
}

/// `req`: the CONNECT_REQUEST's parameters.
fn accept_and_serve(conn: &mut Conn<'_>, req: &ConnParam) -> Result<(), Fail> {
    let o = conn.o;
    conn.setup()?;
    if o.accept_delay > 0 {
        // The CM runs in the device's loop: a retransmitted REQ is answered with the MRA
        // meanwhile.
        let end = Instant::now() + Duration::from_millis(o.accept_delay);
        while Instant::now() < end {
            if let Some(s) = signals::caught() {
                return Err(Fail::Signal(s));
            }
            std::thread::sleep(
                end.saturating_duration_since(Instant::now())
                    .min(SIGNAL_SLICE),
            );
        }
    }
    dbg_log!(o, "accepting client connection request");
    let p = if o.self_qp {
        // rping -q: the CM's INIT attributes on the QP, then rdma_accept with the QP's
        // number and rping_init_conn_param (the core's accept moves it to RTR and RTS).
        conn.self_modify_qp(QpState::Init)?;
        ConnParam::default()
    } else {
        // rdma_accept(id, NULL): librdmacm answers with the request's resources and retry
        // counts 7.
        ConnParam {
            responder_resources: req.responder_resources,
            initiator_depth: req.initiator_depth,
            ..ConnParam::default()
        }
    };
    let qpn = conn.res()?.qpn;
    let id = conn.id()?;
    conn.cm
        .with_id(id.name(), |cm, s, now| cm.accept(now, s, id, qpn, &p))
        .map_err(|e| fail(format!("rdma_accept: {}", e.text())))?
        .map_err(|e| fail(format!("rdma_accept: {}", e.text())))?;
    server_loop(conn)
}

fn server_loop(cb: &mut Conn<'_>) -> Result<(), Fail> {
    loop {
        // The client's source info.
        if !cb.expect(WcOpcode::Recv, "RDMA_READ_ADV")? {
            return Ok(());
        }
        let (raddr, rkey, rlen) = read_info(cb)?;
        dbg_log!(
            cb.o,
            "Received rkey {rkey:x} addr {raddr:x} len {rlen} from peer"
        );
        // rping READs the length the client advertised: more than our buffer fails with a
        // local protection error (status 4), as rping's does.
        let lkey = cb.res()?.rdma.lkey;
        cb.post(
            WR_RDMA,
            SendOp::RdmaRead {
                remote_addr: raddr,
                rkey,
            },
            RDMA_IOVA,
            rlen,
            lkey,
        )?;
        dbg_log!(cb.o, "server posted rdma read req");
        if !cb.expect(WcOpcode::RdmaRead, "RDMA_READ_COMPLETE")? {
            return Ok(());
        }
        let data = cb.cstr(lkey, RDMA_IOVA)?;
        if cb.o.verbose {
            println!("server ping data: {data}");
        }
        cb.send_go_ahead()?;
        dbg_log!(cb.o, "server posted go ahead");
        // The client's sink info.
        if !cb.expect(WcOpcode::Recv, "RDMA_WRITE_ADV")? {
            return Ok(());
        }
        let (raddr, rkey, _) = read_info(cb)?;
        let wlen = data.len() as u32 + 1;
        dbg_log!(
            cb.o,
            "rdma write from lkey {lkey:x} laddr {RDMA_IOVA:x} len {wlen}"
        );
        cb.post(
            WR_RDMA,
            SendOp::RdmaWrite {
                remote_addr: raddr,
                rkey,
            },
            RDMA_IOVA,
            wlen,
            lkey,
        )?;
        if !cb.expect(WcOpcode::RdmaWrite, "RDMA_WRITE_COMPLETE")? {
            return Ok(());
        }
        dbg_log!(cb.o, "server rdma write complete");
        cb.send_go_ahead()?;
        dbg_log!(cb.o, "server posted go ahead");
    }
}

fn read_info(cb: &Conn<'_>) -> Result<(u64, u32, u32), Fail> {
    let mut b = [0u8; INFO_LEN];
    cb.dev.read_mr(cb.res()?.recv.lkey, RECV_IOVA, &mut b)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    let mut k = [0u8; 4];
    k.copy_from_slice(&b[8..12]);
    let mut s = [0u8; 4];
    s.copy_from_slice(&b[12..16]);
    Ok((
        u64::from_be_bytes(a),
        u32::from_be_bytes(k),
        u32::from_be_bytes(s),
    ))
}

/// The ping text: "rdma-ping-N: " then letters from `start` cycling 'A'..='z', NUL last.
fn ping_text(ping: u32, start: u8, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{ping}: ").into_bytes();
    b.truncate(size.saturating_sub(1));
    let mut c = start;
    while b.len() < size {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    if let Some(last) = b.last_mut() {
        *last = 0;
    }
    b
}

fn run_client(o: &Opts) -> Result<(), Fail> {
    let d = cmtool::open_client(
        o.source,
        o.addr.ip(),
        o.pcap.as_ref(),
        "-I",
        "rping",
        cmtool::THREAD,
    )
    .map_err(Fail::Msg)?;
    let local = d.dev.local_addr().ip();
    let _ = d.dev.dealloc_pd(d.pd);
    let id = d.cm.with_cm(|cm| cm.create_id());
    dbg_log!(o, "created cm_id {}", id.name().value());
    let mut conn = Conn::new(o, d.cm.clone(), d.dev.clone(), id);
    let r = connect(&mut conn, local).and_then(|()| client_loop(&mut conn));
    // Normal end: wait for the DREP a little, as rping's teardown does; a failure or a
    // signal: a shorter wait.
    let linger = match r {
        Ok(()) => Duration::from_secs(3),
        Err(_) => Duration::from_secs(1),
    };
    conn.hang_up(linger);
    r
}

/// rping_bind_client + rping_setup_qp + rping_connect_client.
fn connect(conn: &mut Conn<'_>, local: IpAddr) -> Result<(), Fail> {
    let o = conn.o;
    let id = conn.id()?;
    conn.cm
        .resolve_addr(id, Some(local), o.addr)
        .map_err(|e| fail(format!("rdma_resolve_addr: {}", e.text())))?;
    conn.expect_event(RdmaCmEventType::AddrResolved, Duration::from_secs(2))?;
    let id = conn.id()?;
    if let Some(t) = o.tos {
        // rping.c sets the TOS once the address is resolved, before the route.
        conn.cm
            .with_cm(|cm| cm.set_option(id, RdmaOption::Tos(t)))
            .map_err(|e| fail(format!("rdma_set_option: {}", e.text())))?;
    }
    conn.cm
        .with_cm(|cm| cm.resolve_route(id))
        .map_err(|e| fail(format!("rdma_resolve_route: {}", e.text())))?;
    conn.expect_event(RdmaCmEventType::RouteResolved, Duration::from_secs(2))?;
    dbg_log!(o, "rdma_resolve_addr - rdma_resolve_route successful");
    conn.setup()?;
    // rping_init_conn_param: one outstanding RDMA READ each way, retry counts 7.
    let p = ConnParam::default();
    // -q: the REQ names our QP but the CM does not move it (CONNECT_RESPONSE, then the QP
    // moved here and rdma_establish).
    let qpn = conn.res()?.qpn;
    let id = conn.id()?;
    conn.cm
        .with_id(id.name(), |cm, s, now| {
            if o.self_qp {
                cm.connect_user_qp(now, s, id, qpn, &p)
            } else {
                cm.connect(now, s, id, Some(qpn), &p)
            }
        })
        .map_err(|e| fail(format!("rdma_connect: {}", e.text())))?
        .map_err(|e| fail(format!("rdma_connect: {}", e.text())))?;
    // The CM gives up on the REQ after 15 retries (about 98 s); the limit is only a guard.
    eprintln!(
        "rping: connecting to {} (a REQ sent; each unanswered retry shows here, and a dead \
         address gives up after about 98 s)",
        o.addr
    );
    let want = if o.self_qp {
        RdmaCmEventType::ConnectResponse
    } else {
        RdmaCmEventType::Established
    };
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(fail("wait for CONNECTED: timeout"));
        }
        let Some(e) = conn.next_event(Some(left))? else {
            continue;
        };
        if e.kind() == want {
            break;
        }
        // rping: "cma event RDMA_CM_EVENT_REJECTED, error 28" (status = the reason).
        eprintln!("cma event {}, error {}", e.kind().as_str(), e.status());
        if e.kind() == RdmaCmEventType::Rejected {
            if let Some(m) = u16::try_from(e.status())
                .ok()
                .and_then(|r| cmtool::rej_meaning(r, o.addr.port()))
            {
                eprintln!("rping: {} rejected the connection: {m}", o.addr);
            }
        }
        return Err(fail("connect error"));
    }
    if o.self_qp {
        dbg_log!(o, "CONNECT_RESPONSE");
        conn.self_modify_qp(QpState::Rts)?;
        let id = conn.id()?;
        conn.cm
            .with_id(id.name(), |cm, _, now| cm.establish(now, id))
            .map_err(|e| fail(format!("rdma_establish: {}", e.text())))?
            .map_err(|e| fail(format!("rdma_establish: {}", e.text())))?;
    }
    dbg_log!(o, "rdma_connect successful");
    Ok(())
}

fn client_loop(cb: &mut Conn<'_>) -> Result<(), Fail> {
    let o = cb.o;
    let (start_mr, rdma_mr) = {
        let r = cb.res()?;
        (r.start.ok_or_else(|| fail("no start buffer"))?, r.rdma)
    };
    let size = o.size as usize;
    let mut start = 65u8;
    let mut ping = 0u32;
    while o.count == 0 || ping < o.count {
        let text = ping_text(ping, start, size);
        start = if start >= 122 { 65 } else { start + 1 };
        cb.dev.write_mr(start_mr.lkey, START_IOVA, &text)?;
        cb.send_info(START_IOVA, start_mr.rkey)?;
        if !cb.expect(WcOpcode::Recv, "RDMA_WRITE_ADV")? {
            return Ok(());
        }
        cb.send_info(RDMA_IOVA, rdma_mr.rkey)?;
        if !cb.expect(WcOpcode::Recv, "RDMA_WRITE_COMPLETE")? {
            return Ok(());
        }
        if o.validate {
            let mut got = vec![0u8; size];
            cb.dev.read_mr(rdma_mr.lkey, RDMA_IOVA, &mut got)?;
            if got != text {
                eprintln!("data mismatch!");
                return Err(fail("data mismatch"));
            }
        }
        if o.verbose {
            println!("ping data: {}", cb.cstr(rdma_mr.lkey, RDMA_IOVA)?);
        }
        ping += 1;
    }
    Ok(())
}

pub fn run(args: &Args) -> ExitCode {
    let o = match check(args) {
        Ok(o) => o,
        Err(m) => {
            eprintln!("{m}");
            return ExitCode::from(EINVAL);
        }
    };
    signals::catch();
    let r = if o.server {
        run_server(&o)
    } else {
        run_client(&o)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail::Signal(s)) => signals::die(s),
        Err(Fail::Msg(m)) => {
            eprintln!(
                "rping {} failed: {m}",
                if o.server { "server" } else { "client" }
            );
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_text_is_rpings() {
        let t = ping_text(0, 65, 64);
        assert_eq!(t.len(), 64);
        assert_eq!(&t[..16], b"rdma-ping-0: ABC");
        assert_eq!(t[63], 0);
        // Letters wrap from 'z' to 'A'.
        let t = ping_text(1, 122, 20);
        assert_eq!(&t[..16], b"rdma-ping-1: zAB");
    }

    #[test]
    fn ranges_are_named() {
        assert_eq!(ranged("64", "size", 26, 65535), Ok(64));
        assert_eq!(
            ranged("10", "size", 26, 65535),
            Err("Invalid size 10 (valid range is 26 to 65535)".into())
        );
        assert!(ranged("x", "count", 0, 5).is_err());
        assert!(ranged("-1", "count", 0, 5).is_err());
    }
}
