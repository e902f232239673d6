//! `softrdma rping`: a peer of rdma-core's `rping` (librdmacm/examples/rping.c) over a
//! softrdma device and our own RDMA CM.
//!
//! The protocol, as rping runs it (one RC QP, RDMA_PS_TCP, default port 7174):
//! 1. the client SENDs a 16-byte `struct rping_rdma_info` (big-endian buf address u64,
//!    rkey u32, size u32) naming its "ping" buffer ("rdma-ping-N: " then letters A..z);
//! 2. the server RDMA READs it, then SENDs a 16-byte "go ahead";
//! 3. the client SENDs the info of its sink buffer; the server RDMA WRITEs the data back
//!    (strlen + 1 bytes) and SENDs "go ahead" again; the client prints
//!    `ping data: rdma-ping-N: ...` with -v.
//!
//! After COUNT pings the client disconnects (DREQ); the server sees DISCONNECTED, answers
//! DREP and exits 0.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use softrdma_core::cm::{CmEvent, CmPort};
use softrdma_core::rdma_cm::RdmaCmEvent;
use softrdma_core::rdma_cm::{ConnParam, RdmaCm, RdmaCmEventType, RdmaCmId};
use softrdma_core::verbs::{
    AccessFlags, CqId, MrKeys, QpCap, QpInitAttr, QpType, RecvWr, SendOp, SendWr, Sge, WcOpcode,
    WcStatus, WorkCompletion,
};
use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::{Device, DeviceConfig};
use softrdma_wire::cm::AttrId;

/// `RPING_BUFSIZE`.
const RPING_BUFSIZE: u32 = 64 * 1024;
/// `RPING_MIN_BUFSIZE`: sizeof("2147483647") + sizeof("rdma-ping-%d: ").
const RPING_MIN_BUFSIZE: u32 = 11 + 15;
/// `RPING_SQ_DEPTH`.
const SQ_DEPTH: u32 = 16;
const INFO_LEN: usize = 16;

const RECV_IOVA: u64 = 0x1000;
const SEND_IOVA: u64 = 0x2000;
const RDMA_IOVA: u64 = 0x10_0000;
const START_IOVA: u64 = 0x20_0000;

const WR_RECV: u64 = 1;
const WR_SEND: u64 = 2;
const WR_RDMA: u64 = 3;

/// `softrdma rping -s|-c -a ADDR [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [-d]`.
#[derive(Debug, clap::Args)]
#[command(disable_version_flag = true)]
pub struct Args {
    /// Server side.
    #[arg(short = 's')]
    pub server: bool,
    /// Client side.
    #[arg(short = 'c')]
    pub client: bool,
    /// Address (server: bind; client: the server's).
    #[arg(short = 'a')]
    pub addr: IpAddr,
    /// Client: the source address (default: the one routed towards the server).
    #[arg(short = 'I')]
    pub source: Option<IpAddr>,
    /// Port.
    #[arg(short = 'p', default_value_t = 7174)]
    pub port: u16,
    /// Ping count (0: forever).
    #[arg(short = 'C', default_value_t = 0)]
    pub count: u32,
    /// Ping data size.
    #[arg(short = 'S', default_value_t = 64)]
    pub size: u32,
    /// Display ping data to stdout.
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
    /// Record every datagram to this pcap file.
    #[arg(long)]
    pub pcap: Option<std::path::PathBuf>,
}

struct Fail(String);

impl<E: std::fmt::Display> From<E> for Fail {
    fn from(e: E) -> Self {
        Fail(e.to_string())
    }
}

macro_rules! dbg_log {
    ($cb:expr, $($t:tt)*) => { if $cb.debug { println!($($t)*); } };
}

/// The control block (`struct rping_cb`).
struct Cb {
    dev: Device,
    cm: Cm,
    port: CmPort,
    cq: CqId,
    qpn: u32,
    recv: MrKeys,
    send: MrKeys,
    rdma: MrKeys,
    start: Option<MrKeys>,
    size: u32,
    debug: bool,
    id: Option<RdmaCmId>,
    /// The listener (server).
    listener: Option<RdmaCmId>,
}

/// What a wait ended with.
enum Got {
    Wc(WorkCompletion),
    Disconnected,
}

impl Cb {
    fn post_recv(&self) -> Result<(), Fail> {
        let wr = RecvWr::new(
            WR_RECV,
            vec![Sge {
                addr: RECV_IOVA,
                length: INFO_LEN as u32,
                lkey: self.recv.lkey,
            }],
        );
        Ok(self.dev.post_recv(self.qpn, wr)?)
    }

    fn post(&self, wr_id: u64, op: SendOp, addr: u64, len: u32, lkey: u32) -> Result<(), Fail> {
        let mut wr = SendWr::new(wr_id, op).with_sge(Sge {
            addr,
            length: len,
            lkey,
        });
        wr.signaled = true;
        Ok(self.dev.post_send(self.qpn, wr)?)
    }

    fn send_info(&self, buf: u64, rkey: u32) -> Result<(), Fail> {
        let mut info = [0u8; INFO_LEN];
        info[..8].copy_from_slice(&buf.to_be_bytes());
        info[8..12].copy_from_slice(&rkey.to_be_bytes());
        info[12..].copy_from_slice(&self.size.to_be_bytes());
        dbg_log!(self, "RDMA addr {buf:x} rkey {rkey:x} len {}", self.size);
        self.dev.write_mr(self.send.lkey, SEND_IOVA, &info)?;
        self.post(
            WR_SEND,
            SendOp::Send,
            SEND_IOVA,
            INFO_LEN as u32,
            self.send.lkey,
        )
    }

    /// Waits for the next completion that is not a SEND's (rping's semaphore), turning
    /// the CM meanwhile; DISCONNECTED ends the wait.
    fn wait(&mut self) -> Result<Got, Fail> {
        let mut wcs = Vec::new();
        loop {
            while let Some(e) = self.next_rdma_event(None) {
                dbg_log!(self, "cma_event type {}", e.event.as_str());
                match e.event {
                    RdmaCmEventType::Disconnected => {
                        eprintln!(
                            "{} DISCONNECT EVENT...",
                            if self.start.is_some() {
                                "client"
                            } else {
                                "server"
                            }
                        );
                        return Ok(Got::Disconnected);
                    }
                    RdmaCmEventType::Established | RdmaCmEventType::TimewaitExit => {}
                    other => return Err(Fail(format!("cma event {}", other.as_str()))),
                }
            }
            wcs.clear();
            // Completions and CM events (DISCONNECTED) both end the wait at once.
            let cm = self.cm.clone();
            self.dev.wait_cq_or(
                self.cq,
                &mut wcs,
                1,
                Some(Duration::from_secs(1)),
                &move || cm.has_event(),
            )?;
            for wc in wcs.drain(..) {
                if wc.status == WcStatus::WrFlushErr {
                    continue;
                }
                if wc.status != WcStatus::Success {
                    return Err(Fail(format!("cq completion failed status {:?}", wc.status)));
                }
                match wc.opcode {
                    WcOpcode::Send => dbg_log!(self, "send completion"),
                    WcOpcode::Recv => {
                        dbg_log!(self, "recv completion");
                        if wc.byte_len as usize != INFO_LEN {
                            return Err(Fail(format!("Received bogus data, size {}", wc.byte_len)));
                        }
                        self.post_recv()?;
                        return Ok(Got::Wc(wc));
                    }
                    _ => return Ok(Got::Wc(wc)),
                }
            }
        }
    }

    fn expect(&mut self, op: WcOpcode, what: &str) -> Result<bool, Fail> {
        match self.wait()? {
            Got::Disconnected => Ok(false),
            Got::Wc(wc) if wc.opcode == op => Ok(true),
            Got::Wc(wc) => Err(Fail(format!("wait for {what}: got {:?}", wc.opcode))),
        }
    }

    /// Waits for one event of type `want` (rping's `cma_event_handler` for address and
    /// route resolution).
    fn expect_event(&self, want: RdmaCmEventType) -> Result<(), Fail> {
        match self.next_rdma_event(Some(Duration::from_secs(2))) {
            Some(e) if e.event == want => {
                dbg_log!(self, "cma_event type {}", e.event.as_str());
                Ok(())
            }
            Some(e) => {
                eprintln!("cma event {}, error {}", e.event.as_str(), e.status);
                Err(Fail(format!("waiting for {}", want.as_str())))
            }
            None => Err(Fail(format!("waiting for {}: timeout", want.as_str()))),
        }
    }

    fn cstr(&self, lkey: u32, iova: u64) -> Result<String, Fail> {
        let mut b = vec![0u8; self.size as usize];
        self.dev.read_mr(lkey, iova, &mut b)?;
        let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Ok(String::from_utf8_lossy(&b[..n]).into_owned())
    }

    fn disconnect(&mut self) {
        if let Some(id) = &self.id {
            let _ = self
                .cm
                .with_id(id.name(), |cm, s, now| cm.disconnect(now, s, id));
        }
    }

    /// `rdma_destroy_id` of everything (the DREQ or DREP of a destroy goes out at once).
    fn destroy(&mut self) {
        for id in [self.id.take(), self.listener.take()].into_iter().flatten() {
            self.cm.with_cm(|cm| cm.destroy(self.dev.now(), id));
        }
    }

    /// The next RDMA CM event (waiting up to `wait`; `None`: no waiting), printing IB CM
    /// retry notices with `-d`.
    fn next_rdma_event(&self, wait: Option<Duration>) -> Option<RdmaCmEvent> {
        let end = wait.map(|w| Instant::now() + w);
        loop {
            let e = match end {
                Some(end) => self
                    .cm
                    .wait_event(end.saturating_duration_since(Instant::now()))?,
                None => self.cm.poll_event()?,
            };
            match e {
                Event::Rdma(e) => return Some(e),
                Event::Ib(CmEvent::Retry {
                    msg,
                    attempt,
                    max,
                    next_deadline,
                    ..
                }) => {
                    let next = next_deadline.saturating_duration_since(self.dev.now());
                    let what = match msg {
                        AttrId::REQ => "REQ",
                        AttrId::REP => "REP",
                        AttrId::DREQ => "DREQ",
                        AttrId::SIDR_REQ => "SIDR_REQ",
                        _ => "CM MAD",
                    };
                    dbg_log!(
                        self,
                        "{what} retry {attempt}/{max}, next in {:.1} s",
                        next.total_micros() as f64 / 1e6
                    );
                }
                Event::Ib(_) => {}
            }
        }
    }
}

fn setup(args: &Args, local: IpAddr, client: bool) -> Result<Cb, Fail> {
    let mut cfg = DeviceConfig::new(local);
    if let Some(p) = &args.pcap {
        cfg = cfg.with_pcap(p);
    }
    let dev = Device::open_with(cfg).map_err(|e| Fail(format!("device {local}: {e}")))?;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        ^ u64::from(std::process::id());
    let cm = Cm::new(seed);
    let port = cm.add_device(&dev)?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(SQ_DEPTH * 2)?;
    let (qpn, _) = dev.create_qp(QpInitAttr {
        qp_type: QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: SQ_DEPTH,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    })?;
    dev.with_stack(|s| RdmaCm::init_qp(s, qpn))
        .map_err(|e| Fail(format!("rdma_create_qp: {e}")))?;
    let rw = AccessFlags(
        AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0,
    );
    let size = args.size as usize;
    let recv = dev.reg_mr(pd, vec![0; INFO_LEN], RECV_IOVA, AccessFlags::LOCAL_WRITE)?;
    let send = dev.reg_mr(pd, vec![0; INFO_LEN], SEND_IOVA, AccessFlags::NONE)?;
    let rdma = dev.reg_mr(pd, vec![0; size], RDMA_IOVA, rw)?;
    let start = if client {
        Some(dev.reg_mr(pd, vec![0; size], START_IOVA, rw)?)
    } else {
        None
    };
    let cb = Cb {
        dev,
        cm,
        port,
        cq,
        qpn,
        recv,
        send,
        rdma,
        start,
        size: args.size,
        debug: args.debug,
        id: None,
        listener: None,
    };
    cb.post_recv()?;
    Ok(cb)
}

/// The private data `--reject` puts in its REJ (reason 28).
const REJECT_PRIVATE_DATA: &[u8] = b"softrdma-reject";

fn run_server(args: &Args) -> Result<(), Fail> {
    let mut cb = setup(args, args.addr, false)?;
    let (ip, port) = (args.addr, args.port);
    let l = cb
        .cm
        .with_cm(|cm| cm.listen_on(SocketAddr::new(ip, port), 0))
        .map_err(|e| Fail(format!("rdma_listen on {ip}:{port}: {e}")))?;
    cb.listener = Some(l);
    dbg_log!(cb, "rdma_listen");
    let (req, id) = loop {
        if let Some(mut e) = cb.next_rdma_event(Some(Duration::from_secs(1))) {
            if e.event == RdmaCmEventType::ConnectRequest {
                let Some(id) = e.new_id.take() else { continue };
                if args.reject {
                    cb.cm
                        .with(cb.port, |cm, _, now| {
                            cm.reject(now, id, REJECT_PRIVATE_DATA).map_err(|(id, e)| {
                                cm.destroy(now, id);
                                e
                            })
                        })
                        .map_err(|err| Fail(format!("rdma_reject: {err}")))?
                        .map_err(|err| Fail(format!("rdma_reject: {err}")))?;
                    println!("rejected connect request (--reject)");
                    continue;
                }
                break (e, id);
            }
        }
    };
    dbg_log!(cb, "child cma {}", id.name().value());
    if args.accept_delay > 0 {
        let end = Instant::now() + Duration::from_millis(args.accept_delay);
        while Instant::now() < end {
            // The CM runs in the device's loop: a retransmitted REQ is answered with the
            // MRA meanwhile.
            std::thread::sleep(end.saturating_duration_since(Instant::now()));
        }
    }
    // rdma_accept(id, NULL): librdmacm answers with the request's resources and retry
    // counts 7.
    let p = ConnParam {
        private_data: Vec::new(),
        responder_resources: req.param.responder_resources,
        initiator_depth: req.param.initiator_depth,
        flow_control: false,
        retry_count: 7,
        rnr_retry_count: 7,
    };
    let qpn = cb.qpn;
    let r = cb
        .cm
        .with_id(id.name(), |cm, s, now| cm.accept(now, s, &id, qpn, &p))
        .map_err(|e| Fail(format!("rdma_accept: {e}")));
    cb.id = Some(id);
    r?.map_err(|e| Fail(format!("rdma_accept: {e}")))?;
    // The server waits for ESTABLISHED then for the first RECV (rping_accept + test).
    let r = server_loop(&mut cb, args);
    // After a DREQ this sends the DREP (on the wire before it returns).
    cb.disconnect();
    cb.destroy();
    r
}

fn server_loop(cb: &mut Cb, args: &Args) -> Result<(), Fail> {
    loop {
        // Client's source info.
        let (raddr, rkey, rlen) = match cb.wait()? {
            Got::Disconnected => return Ok(()),
            Got::Wc(wc) if wc.opcode == WcOpcode::Recv => read_info(cb)?,
            Got::Wc(wc) => return Err(Fail(format!("wait for RDMA_READ_ADV: {:?}", wc.opcode))),
        };
        dbg_log!(
            cb,
            "Received rkey {rkey:x} addr {raddr:x} len {rlen} from peer"
        );
        let len = rlen.min(cb.size);
        cb.post(
            WR_RDMA,
            SendOp::RdmaRead {
                remote_addr: raddr,
                rkey,
            },
            RDMA_IOVA,
            len,
            cb.rdma.lkey,
        )?;
        if !cb.expect(WcOpcode::RdmaRead, "RDMA_READ_COMPLETE")? {
            return Err(Fail("wait for RDMA_READ_COMPLETE: disconnected".into()));
        }
        let data = cb.cstr(cb.rdma.lkey, RDMA_IOVA)?;
        if args.verbose {
            println!("server ping data: {data}");
        }
        cb.post(
            WR_SEND,
            SendOp::Send,
            SEND_IOVA,
            INFO_LEN as u32,
            cb.send.lkey,
        )?;
        // Client's sink info.
        let (raddr, rkey, _) = match cb.wait()? {
            Got::Wc(wc) if wc.opcode == WcOpcode::Recv => read_info(cb)?,
            _ => return Err(Fail("wait for RDMA_WRITE_ADV".into())),
        };
        let wlen = (data.len() as u32 + 1).min(cb.size);
        cb.post(
            WR_RDMA,
            SendOp::RdmaWrite {
                remote_addr: raddr,
                rkey,
            },
            RDMA_IOVA,
            wlen,
            cb.rdma.lkey,
        )?;
        if !cb.expect(WcOpcode::RdmaWrite, "RDMA_WRITE_COMPLETE")? {
            return Err(Fail("wait for RDMA_WRITE_COMPLETE: disconnected".into()));
        }
        cb.post(
            WR_SEND,
            SendOp::Send,
            SEND_IOVA,
            INFO_LEN as u32,
            cb.send.lkey,
        )?;
    }
}

fn read_info(cb: &Cb) -> Result<(u64, u32, u32), Fail> {
    let mut b = [0u8; INFO_LEN];
    cb.dev.read_mr(cb.recv.lkey, RECV_IOVA, &mut b)?;
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

fn run_client(args: &Args) -> Result<(), Fail> {
    let local = args
        .source
        .or_else(|| softrdma_driver::cm::route_source(args.addr))
        .ok_or_else(|| Fail(format!("no route to {}", args.addr)))?;
    let mut cb = setup(args, local, true)?;
    let p = ConnParam {
        private_data: Vec::new(),
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: false,
        retry_count: 7,
        rnr_retry_count: 7,
    };
    let (dst, qpn) = (SocketAddr::new(args.addr, args.port), cb.qpn);
    let id = cb.cm.with_cm(|cm| cm.create_id());
    let id = cb.id.insert(id);
    cb.cm
        .resolve_addr(id, Some(local), dst)
        .map_err(|e| Fail(format!("rdma_resolve_addr: {e}")))?;
    cb.expect_event(RdmaCmEventType::AddrResolved)?;
    let id = cb.id.as_ref().ok_or_else(|| Fail("no id".into()))?;
    cb.cm
        .with_cm(|cm| cm.resolve_route(id))
        .map_err(|e| Fail(format!("rdma_resolve_route: {e}")))?;
    cb.expect_event(RdmaCmEventType::RouteResolved)?;
    let id = cb.id.as_ref().ok_or_else(|| Fail("no id".into()))?;
    cb.cm
        .with_id(id.name(), |cm, s, now| {
            cm.connect(now, s, id, Some(qpn), &p)
        })
        .map_err(|e| Fail(format!("rdma_connect: {e}")))?
        .map_err(|e| Fail(format!("rdma_connect: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let Some(e) = cb.next_rdma_event(Some(Duration::from_secs(1))) else {
            if Instant::now() > deadline {
                return Err(Fail("wait for CONNECTED: timeout".into()));
            }
            continue;
        };
        dbg_log!(cb, "cma_event type {}", e.event.as_str());
        match e.event {
            RdmaCmEventType::Established => break,
            other => {
                // rping: "cma event RDMA_CM_EVENT_REJECTED, error 28" (status = the reason).
                let status = e.reject_reason.map(|r| i32::from(r.0)).unwrap_or(-110);
                eprintln!("cma event {}, error {status}", other.as_str());
                return Err(Fail("connect error".into()));
            }
        }
    }
    dbg_log!(cb, "rdma_connect successful");
    let r = client_loop(&mut cb, args);
    if r.is_ok() {
        cb.disconnect();
        // Wait for the DREP (DISCONNECTED) a little, as rping's teardown does.
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            match cb.next_rdma_event(Some(Duration::from_millis(100))) {
                Some(e) if e.event == RdmaCmEventType::Disconnected => break,
                _ => {}
            }
        }
    }
    cb.destroy();
    r
}

fn client_loop(cb: &mut Cb, args: &Args) -> Result<(), Fail> {
    let start_mr = cb.start.ok_or_else(|| Fail("no start buffer".into()))?;
    let size = cb.size as usize;
    let mut start = 65u8;
    let mut ping = 0u32;
    while args.count == 0 || ping < args.count {
        let text = ping_text(ping, start, size);
        start = if start >= 122 { 65 } else { start + 1 };
        cb.dev.write_mr(start_mr.lkey, START_IOVA, &text)?;
        cb.send_info(START_IOVA, start_mr.rkey)?;
        if !cb.expect(WcOpcode::Recv, "RDMA_WRITE_ADV")? {
            return Ok(());
        }
        cb.send_info(RDMA_IOVA, cb.rdma.rkey)?;
        if !cb.expect(WcOpcode::Recv, "RDMA_WRITE_COMPLETE")? {
            return Ok(());
        }
        if args.validate {
            let mut got = vec![0u8; size];
            cb.dev.read_mr(cb.rdma.lkey, RDMA_IOVA, &mut got)?;
            if got != text {
                return Err(Fail("data mismatch!".into()));
            }
        }
        if args.verbose {
            println!("ping data: {}", cb.cstr(cb.rdma.lkey, RDMA_IOVA)?);
        }
        ping += 1;
    }
    Ok(())
}

pub fn run(args: &Args) -> ExitCode {
    if args.server == args.client {
        eprintln!("rping: exactly one of -s and -c");
        return ExitCode::from(22);
    }
    if args.size < RPING_MIN_BUFSIZE || args.size > RPING_BUFSIZE - 1 {
        eprintln!(
            "Invalid size {} (valid range is {RPING_MIN_BUFSIZE} to {RPING_BUFSIZE})",
            args.size
        );
        return ExitCode::from(22);
    }
    let r = if args.server {
        run_server(args)
    } else {
        run_client(args)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(m)) => {
            eprintln!(
                "rping {} failed: {m}",
                if args.server { "server" } else { "client" }
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
}
