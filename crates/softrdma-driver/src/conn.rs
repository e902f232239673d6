//! Connections for people who want a connection, not an event loop: an [`Endpoint`] on a
//! local address, [`Endpoint::connect`] → [`Connection`], [`Listener::accept`] →
//! [`Connection`], and SEND / RECV / RDMA WRITE / RDMA READ on registered [`Region`]s —
//! blocking, or `async` (any executor; tokio in the examples). The feel is quinn's
//! `Endpoint` / `Connection`; underneath it is the same RDMA CM (`softrdma_core::rdma_cm`),
//! IB CM and RC transport the tools use, so on the wire a [`Connection`] is what librdmacm
//! would have made: REQ / REP / RTU with the IP CM header, DREQ / DREP.
//!
//! `connect` and `accept` each block until the other side answers, so the two sides run on
//! two threads (or in two processes); read top to bottom in one thread, the connect would
//! wait for an accept that never comes. Every endpoint is a device on its own address's UDP
//! port 4791 (any 127.x.y.z on loopback). The README's version is
//! `examples/conn_first.rs`.
//!
//! ```
//! use std::thread;
//! use std::time::Duration;
//! use softrdma_driver::conn::{ConnError, Endpoint};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The server, on its own thread: accept blocks until a client connects.
//! let server_ep = Endpoint::bind("127.0.93.1:7471".parse()?)?;
//! let listener = server_ep.listen()?;
//! let server = thread::spawn(move || -> Result<Vec<u8>, ConnError> {
//!     let conn = listener.accept()?;
//!     let got = conn.recv_msg()?;
//!     conn.next_event(Duration::from_secs(30)); // the client's DISCONNECTED
//!     conn.disconnect()?;
//!     Ok(got)
//! });
//! // The client, from another address.
//! let client = Endpoint::bind("127.0.93.2:0".parse()?)?;
//! let conn = client.connect("127.0.93.1:7471".parse()?)?;
//! conn.send_msg(b"hello")?;
//! conn.disconnect()?;
//! assert_eq!(server.join().map_err(|_| "the server panicked")??, b"hello");
//! # Ok(()) }
//! ```
//!
//! What it sets up, and what to change ([`ConnOptions`]):
//!
//! - The RC QP: its own CQ, 64 send and 64 receive WRs, one SGE; every WR signalled. The
//!   connection parameters are [`ConnParam::default`]: one outstanding RDMA READ each way,
//!   retry and RNR retry counts 7 (a lost packet is retransmitted, a missing receive waits).
//! - Port space TCP (`service ID 0x0106xxxx`) unless [`ConnOptions::port_space`] says IB.
//! - Options as `rdma_set_option`: TOS, ACK timeout; the min RNR timer; ECE.
//! - Every CM step (address, route, connect, accept) and every wait for a completion has a
//!   timeout ([`ConnOptions::timeout`], 30 s): a silent peer is an error, not a hang.
//!
//! Errors ([`ConnError`]) say what the peer or the network said: a reject carries its
//! reason ([`ConnError::reject_reason`]) and the peer's private data; UNREACHABLE its
//! status (`-110`: no answer; a SIDR status for UD). CM events after the connection is up
//! come out of [`Connection::next_event`] as [`ConnEvent`]s.
//!
//! UD: [`Endpoint::ud_socket`] is a datagram socket (one UD QP): [`UdSocket::resolve`] asks
//! a remote UD listener for its QPN and Q_Key over SIDR (as `udaddy` does), then
//! [`UdSocket::send_to`] / [`UdSocket::recv_from`]; [`Endpoint::listen_ud`] answers SIDR
//! requests on a port with the socket's QPN.
//!
//! Threads and queues: the device's loop runs on its own thread (`Progress::Thread`) and
//! handles a CM message in the turn that receives it; the event it makes waits in the CM's
//! one bounded queue ([`crate::cm`]) until the thread waiting on that id — and only that
//! one — takes it ([`Cm::wait_event_of`]). There is no thread between the two and no
//! queue per id: a request holds its listener's backlog slot until [`Listener::incoming`]
//! takes it, and a request beyond the backlog is dropped (counted, `backlog_drops`) and
//! served when the requester's CM retries. Every blocking call is its `_async` twin run on
//! the calling thread ([`crate::wait::block_on`]); every timed wait is an entry in the
//! process's one timer ([`crate::wait::within`]), not a thread.
//!
//! Examples (`crates/softrdma-driver/examples/`, run by `cargo test` from `tests/conn.rs`):
//! `conn_server` + `conn_client` (private data, SEND both ways, RDMA WRITE and READ,
//! disconnect), `conn_async` (the same on tokio), `ud_echo` (UD over SIDR).

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use softrdma_core::rdma_cm::{
    init_ah_from_wc, ConnParam, Ece, PortSpace, RdmaCm, RdmaCmError, RdmaCmEvent, RdmaCmEventType,
    RdmaCmId, RdmaId, RdmaOption, UdParam, RDMA_UDP_QKEY,
};
use softrdma_core::verbs::{
    AccessFlags, AddressVector, CqId, MrKeys, PdId, QpCap, QpInitAttr, QpType, RecvWr, SendOp,
    SendWr, Sge, UdDest, WcOpcode, WcStatus, WorkCompletion,
};
use softrdma_wire::cm::RejectReason;

use crate::cm::Cm;
use crate::device::{AsyncDevice, Device, DeviceConfig};
use crate::wait::{block_on, within};

/// Why a connection call failed.
#[derive(Debug)]
pub enum ConnError {
    /// The peer refused (REJECTED): the IB CM reject reason (28 = consumer defined, what
    /// `rdma_reject` sends; 8 = nobody listens on the service ID; 35 = an ECE option the
    /// peer does not support) and the peer's private data.
    Rejected {
        reason: RejectReason,
        private_data: Vec<u8>,
    },
    /// UNREACHABLE: `-110` when the REQ (or SIDR REQ) ran out of retries; for UD the SIDR
    /// REP status (1: no UD listener on that port, 2: refused).
    Unreachable { status: i32 },
    /// ADDR_ERROR (`-19`: no device holds the source address; `-22` ...).
    AddrError { status: i32 },
    /// ROUTE_ERROR.
    RouteError { status: i32 },
    /// CONNECT_ERROR (the REP could not be acted on).
    ConnectError { status: i32 },
    /// The connection is disconnected (DISCONNECTED seen).
    Disconnected,
    /// A work request completed in error.
    Completion { status: WcStatus, opcode: WcOpcode },
    /// No answer within the timeout (what was awaited).
    TimedOut(&'static str),
    /// A range outside the region, or a message larger than the scratch buffer.
    OutOfBounds,
    /// The RDMA CM refused the call.
    Cm(RdmaCmError),
    /// The device refused (a verb, the socket).
    Device(crate::device::Error),
}

impl ConnError {
    /// The reject reason of [`ConnError::Rejected`].
    pub fn reject_reason(&self) -> Option<RejectReason> {
        match self {
            ConnError::Rejected { reason, .. } => Some(*reason),
            _ => None,
        }
    }

    /// The private data the peer sent with its reject (148 bytes, zero-padded; empty for
    /// other errors).
    pub fn private_data(&self) -> &[u8] {
        match self {
            ConnError::Rejected { private_data, .. } => private_data,
            _ => &[],
        }
    }

    /// `rdma_is_consumer_reject`: rejected by the peer's application (reason 28).
    pub fn is_consumer_reject(&self) -> bool {
        self.reject_reason() == Some(RejectReason::CONSUMER_DEFINED)
    }

    fn from_event(e: &RdmaCmEvent) -> ConnError {
        use RdmaCmEvent as E;
        match e {
            E::Rejected {
                reason,
                private_data,
                ..
            } => ConnError::Rejected {
                reason: *reason,
                private_data: private_data.clone(),
            },
            E::Unreachable { status, .. } => ConnError::Unreachable { status: *status },
            E::AddrError { status, .. } => ConnError::AddrError { status: *status },
            E::RouteError { status, .. } => ConnError::RouteError { status: *status },
            E::ConnectError { status, .. } => ConnError::ConnectError { status: *status },
            E::Disconnected { .. } => ConnError::Disconnected,
            e => ConnError::ConnectError { status: e.status() },
        }
    }
}

/// How much of zero-padded private data is not padding.
fn used_len(d: &[u8]) -> usize {
    d.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
}

impl std::fmt::Display for ConnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnError::Rejected {
                reason,
                private_data,
            } => {
                write!(
                    f,
                    "connection rejected: {} (reason {})",
                    reason.description().unwrap_or("unrecognized reason"),
                    reason.0
                )?;
                let n = used_len(private_data);
                if n > 0 {
                    write!(f, ", with {n} bytes of private data")?;
                }
                Ok(())
            }
            ConnError::Unreachable { status: -110 } => {
                f.write_str("peer unreachable: no answer (timed out)")
            }
            ConnError::Unreachable { status: 1 } => {
                f.write_str("peer unreachable: service ID not supported (SIDR status 1)")
            }
            ConnError::Unreachable { status } => write!(f, "peer unreachable (status {status})"),
            ConnError::AddrError { status } => write!(f, "address resolution failed ({status})"),
            ConnError::RouteError { status } => write!(f, "route resolution failed ({status})"),
            ConnError::ConnectError { status } => write!(f, "connection failed ({status})"),
            ConnError::Disconnected => f.write_str("disconnected"),
            ConnError::Completion { status, opcode } => {
                write!(f, "{opcode:?} completed with {status}")
            }
            ConnError::TimedOut(what) => write!(f, "timed out waiting for {what}"),
            ConnError::OutOfBounds => f.write_str("range outside the region"),
            ConnError::Cm(e) => write!(f, "RDMA CM: {e}"),
            ConnError::Device(e) => write!(f, "device: {e}"),
        }
    }
}

impl std::error::Error for ConnError {}

impl From<RdmaCmError> for ConnError {
    fn from(e: RdmaCmError) -> Self {
        ConnError::Cm(e)
    }
}

impl From<crate::device::Error> for ConnError {
    fn from(e: crate::device::Error) -> Self {
        ConnError::Device(e)
    }
}

impl From<crate::cm::Error> for ConnError {
    fn from(e: crate::cm::Error) -> Self {
        match e {
            crate::cm::Error::Rdma(r) => ConnError::Cm(r),
            crate::cm::Error::NoSuchId => ConnError::Cm(RdmaCmError::NoSuchId),
            crate::cm::Error::NoSuchPort => ConnError::Cm(RdmaCmError::NoDevice),
            crate::cm::Error::OtherCm => ConnError::Cm(RdmaCmError::NoDevice),
        }
    }
}

/// Result of this module.
pub type Result<T> = std::result::Result<T, ConnError>;

/// An RDMA CM event of a connection, with its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnEvent {
    AddrResolved,
    AddrError {
        status: i32,
    },
    RouteResolved,
    RouteError {
        status: i32,
    },
    /// A request on a listener (the new id is handled by [`Listener::incoming`]).
    ConnectRequest {
        private_data: Vec<u8>,
        param: ConnParam,
        ece: Ece,
    },
    ConnectResponse {
        private_data: Vec<u8>,
        param: ConnParam,
        ece: Ece,
    },
    ConnectError {
        status: i32,
    },
    Unreachable {
        status: i32,
    },
    Rejected {
        reason: RejectReason,
        private_data: Vec<u8>,
    },
    /// Connected; for a UD id with the peer's address, QPN and Q_Key.
    Established {
        private_data: Vec<u8>,
        param: ConnParam,
        ece: Ece,
        ud: Option<UdParam>,
    },
    /// The peer disconnected (status 0) or our DREQ timed out (`-110`).
    Disconnected {
        status: i32,
    },
    TimewaitExit,
    /// Anything else (device removal, multicast...).
    Other {
        kind: RdmaCmEventType,
        status: i32,
    },
}

impl From<&RdmaCmEvent> for ConnEvent {
    fn from(e: &RdmaCmEvent) -> ConnEvent {
        use RdmaCmEvent as E;
        match e {
            E::AddrResolved { .. } => ConnEvent::AddrResolved,
            E::AddrError { status, .. } => ConnEvent::AddrError { status: *status },
            E::RouteResolved { .. } => ConnEvent::RouteResolved,
            E::RouteError { status, .. } => ConnEvent::RouteError { status: *status },
            E::ConnectRequest {
                private_data,
                param,
                ece,
                ..
            } => ConnEvent::ConnectRequest {
                private_data: private_data.clone(),
                param: param.clone(),
                ece: *ece,
            },
            E::ConnectResponse {
                private_data,
                param,
                ece,
                ..
            } => ConnEvent::ConnectResponse {
                private_data: private_data.clone(),
                param: param.clone(),
                ece: *ece,
            },
            E::ConnectError { status, .. } => ConnEvent::ConnectError { status: *status },
            E::Unreachable { status, .. } => ConnEvent::Unreachable { status: *status },
            E::Rejected {
                reason,
                private_data,
                ..
            } => ConnEvent::Rejected {
                reason: *reason,
                private_data: private_data.clone(),
            },
            E::Established {
                private_data,
                param,
                ece,
                ud,
                ..
            } => ConnEvent::Established {
                private_data: private_data.clone(),
                param: param.clone(),
                ece: *ece,
                ud: *ud,
            },
            E::Disconnected { status, .. } => ConnEvent::Disconnected { status: *status },
            E::TimewaitExit { .. } => ConnEvent::TimewaitExit,
            E::MulticastJoin { .. } | E::MulticastError { .. } => ConnEvent::Other {
                kind: e.kind(),
                status: e.status(),
            },
        }
    }
}

/// How to connect or accept.
#[derive(Clone, Debug)]
pub struct ConnOptions {
    /// `struct rdma_conn_param` (private data, resources, retry counts).
    pub param: ConnParam,
    /// Port space: TCP (default) or IB.
    pub port_space: PortSpace,
    /// `RDMA_OPTION_ID_TOS` (client side; the passive QP takes the REQ's).
    pub tos: Option<u8>,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's local ACK timeout exponent.
    pub ack_timeout: Option<u8>,
    /// `rdma_set_min_rnr_timer`.
    pub min_rnr_timer: Option<u8>,
    /// ECE to offer (`rdma_connect_ece`) or accept with (`rdma_accept_ece`).
    pub ece: Option<Ece>,
    /// Send and receive queue depths.
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    /// The message ring of [`Connection::recv_msg`]: this many receives of
    /// [`ConnOptions::msg_size`] bytes, posted before the REQ (or REP) goes out so that
    /// the peer's first SEND finds one, and reposted as messages are taken. Every SEND the
    /// peer makes lands there (receives complete in the order they were posted); set 0 to
    /// post receives of one's own ([`Connection::recv`], [`Connection::post_recv`]).
    pub msg_slots: u32,
    /// The size of each message-ring receive and of [`Connection::send_msg`]'s buffer.
    pub msg_size: u32,
    /// Each CM step and each completion may take this long.
    pub timeout: Duration,
}

impl Default for ConnOptions {
    fn default() -> Self {
        ConnOptions {
            param: ConnParam::default(),
            port_space: PortSpace::TCP,
            tos: None,
            ack_timeout: None,
            min_rnr_timer: None,
            ece: None,
            max_send_wr: 64,
            max_recv_wr: 64,
            msg_slots: 16,
            msg_size: 4096,
            timeout: Duration::from_secs(30),
        }
    }
}

impl ConnOptions {
    /// The defaults with this private data in the REQ (or REP).
    pub fn with_private_data(mut self, pd: &[u8]) -> Self {
        self.param.private_data = pd.to_vec();
        self
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The events of one id, read from the CM's own bounded queue: a waiter takes its id's
/// events and no other's ([`Cm::wait_event_of`]), so nothing sits between the loop turn
/// that queued an event and the thread that waits for it, and a listener's requests hold
/// its backlog until [`Listener::incoming`] takes them.
#[derive(Clone)]
struct IdEvents {
    cm: Cm,
    id: RdmaId,
}

impl IdEvents {
    fn try_pop(&self) -> Option<RdmaCmEvent> {
        self.cm.poll_event_of(self.id)
    }

    async fn next(&self) -> RdmaCmEvent {
        self.cm.next_event_of(self.id).await
    }
}

struct EpInner {
    dev: Device,
    cm: Cm,
    pd: PdId,
    local: SocketAddr,
    next_iova: AtomicU64,
}

/// A local RDMA endpoint: a softrdma device on one address (RoCEv2, UDP 4791) with the
/// RDMA CM on it. Cheap to clone.
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<EpInner>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("local", &self.inner.local)
            .finish()
    }
}

impl Endpoint {
    /// Opens a device on `addr`'s IP address (its loop on a background thread) and the RDMA
    /// CM on it; `addr`'s port is where [`Endpoint::listen`] listens (0: an ephemeral one).
    pub fn bind(addr: SocketAddr) -> Result<Endpoint> {
        Self::bind_with(addr, DeviceConfig::new(addr.ip()).background())
    }

    /// [`Endpoint::bind`] with a device configuration of the caller's (pcap, MTU, seed);
    /// its loop must run on a thread.
    pub fn bind_with(addr: SocketAddr, config: DeviceConfig) -> Result<Endpoint> {
        let dev = Device::open_with(config)?;
        let seed = dev.now().total_micros() ^ u64::from(std::process::id()) << 32;
        let cm = Cm::new(seed);
        // Every id here has an owner that takes its own events; nobody takes IB CM
        // notices.
        cm.keep_ib_events(false);
        cm.add_device(&dev)?;
        let pd = dev.alloc_pd()?;
        Ok(Endpoint {
            inner: Arc::new(EpInner {
                dev,
                cm,
                pd,
                local: addr,
                next_iova: AtomicU64::new(0x1000_0000),
            }),
        })
    }

    /// The address given to [`Endpoint::bind`].
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    /// The device underneath (verbs of one's own).
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// The CM underneath.
    pub fn cm(&self) -> &Cm {
        &self.inner.cm
    }

    /// Registers `len` bytes (zeroed) for local and remote access (`ibv_reg_mr` with local
    /// write, remote write and remote read).
    pub fn register(&self, len: usize) -> Result<Region> {
        let iova = self
            .inner
            .next_iova
            .fetch_add((len as u64).div_ceil(4096).max(1) * 4096, Ordering::Relaxed);
        let access = AccessFlags(
            AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_READ.0,
        );
        let keys = self
            .inner
            .dev
            .reg_mr(self.inner.pd, vec![0u8; len], iova, access)?;
        Ok(Region {
            dev: self.inner.dev.clone(),
            keys,
            addr: iova,
            len,
        })
    }

    /// Listens (port space TCP) on the port given to [`Endpoint::bind`].
    pub fn listen(&self) -> Result<Listener> {
        self.listen_on(self.inner.local.port())
    }

    /// Listens on `port` (port space TCP; 0: an ephemeral port).
    pub fn listen_on(&self, port: u16) -> Result<Listener> {
        self.listen_ps(PortSpace::TCP, port)
    }

    /// Listens on `port` in port space `ps` (TCP or IB).
    pub fn listen_ps(&self, ps: PortSpace, port: u16) -> Result<Listener> {
        self.listen_with(ps, port, 0)
    }

    /// Listens on `port` in port space `ps` with `rdma_listen`'s `backlog`: at most that
    /// many requests wait for [`Listener::incoming`]; one more is dropped without a REJ
    /// (counted in [`Cm::rdma_counters`]' `backlog_drops`) and served when its requester's
    /// CM sends it again. 0: the RDMA CM's default.
    pub fn listen_with(&self, ps: PortSpace, port: u16, backlog: u32) -> Result<Listener> {
        let addr = SocketAddr::new(self.inner.local.ip(), port);
        let id = self
            .inner
            .cm
            .with_cm(|cm| cm.listen_on_ps(ps, addr, backlog))?;
        let name = id.name();
        let local = self
            .inner
            .cm
            .with_cm(|cm| cm.local_addr(name))
            .unwrap_or(addr);
        Ok(Listener {
            ep: self.clone(),
            id: Some(id),
            events: self.events_of(name),
            local,
        })
    }

    /// Connects to `remote` with the defaults (blocking).
    pub fn connect(&self, remote: SocketAddr) -> Result<Connection> {
        self.connect_with(remote, &ConnOptions::default())
    }

    /// Connects to `remote` (blocking): address, route, REQ, then ESTABLISHED or the error
    /// the peer gave.
    pub fn connect_with(&self, remote: SocketAddr, opts: &ConnOptions) -> Result<Connection> {
        block_on(self.connect_with_async(remote, opts))
    }

    /// [`Endpoint::connect`], async.
    pub async fn connect_async(&self, remote: SocketAddr) -> Result<Connection> {
        self.connect_with_async(remote, &ConnOptions::default())
            .await
    }

    /// [`Endpoint::connect_with`], async.
    pub async fn connect_with_async(
        &self,
        remote: SocketAddr,
        opts: &ConnOptions,
    ) -> Result<Connection> {
        let mut c = Connecting::start(self, remote, opts)?;
        loop {
            let mb = c.events.clone();
            let e = within(opts.timeout, mb.next())
                .await
                .ok_or(ConnError::TimedOut(c.waiting_for()))?;
            if let Some(conn) = c.on_event(e)? {
                return Ok(conn);
            }
        }
    }

    /// A UD datagram socket: one UD QP with the RDMA CM's Q_Key 0x01234567, `depth`
    /// receives of up to the port's MTU posted at all times.
    pub fn ud_socket(&self) -> Result<UdSocket> {
        UdSocket::open(self, 64)
    }

    /// Answers every SIDR REQ for UDP-space `port` with `socket`'s QPN and Q_Key (what a
    /// `udaddy` server's accept does), until the listener is dropped.
    pub fn listen_ud(&self, port: u16, socket: &UdSocket) -> Result<UdListener> {
        let addr = SocketAddr::new(self.inner.local.ip(), port);
        let id = self
            .inner
            .cm
            .with_cm(|cm| cm.listen_on_ps(PortSpace::UDP, addr, 0))?;
        self.inner.cm.answer_sidr(id.name(), socket.qpn);
        Ok(UdListener {
            ep: self.clone(),
            id: Some(id),
        })
    }

    fn now(&self) -> softrdma_core::time::Instant {
        self.inner.dev.now()
    }

    fn destroy_id(&self, id: RdmaCmId) {
        let now = self.now();
        self.inner.cm.with_cm(|cm| cm.destroy(now, id));
    }

    fn events_of(&self, id: RdmaId) -> IdEvents {
        IdEvents {
            cm: self.inner.cm.clone(),
            id,
        }
    }

    /// An RC QP (own CQ) in INIT with its message ring posted.
    fn rc_qp(&self, opts: &ConnOptions) -> Result<Qp> {
        let cq = self
            .inner
            .dev
            .create_cq(opts.max_send_wr + opts.max_recv_wr + 16)?;
        let (qpn, _) = self.inner.dev.create_qp(QpInitAttr {
            qp_type: QpType::Rc,
            pd: self.inner.pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: opts.max_send_wr.max(1),
                max_recv_wr: opts.max_recv_wr.max(1),
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        })?;
        let mut qp = Qp {
            dev: self.inner.dev.clone(),
            qpn,
            cq,
            ring: None,
            slots: opts.msg_slots as usize,
            slot: opts.msg_size as usize,
            tx_size: opts.msg_size as usize,
        };
        self.inner.dev.with_stack(|s| RdmaCm::init_qp(s, qpn))?;
        if qp.slots > 0 {
            qp.ring = Some(self.register(qp.slots * qp.slot)?);
            for k in 0..qp.slots {
                qp.post_slot(k)?;
            }
        }
        Ok(qp)
    }

    fn set_options(&self, id: &RdmaCmId, opts: &ConnOptions) -> Result<()> {
        self.inner.cm.with_cm(|cm| -> Result<()> {
            if let Some(t) = opts.tos {
                cm.set_option(id, RdmaOption::Tos(t))?;
            }
            if let Some(t) = opts.ack_timeout {
                cm.set_option(id, RdmaOption::AckTimeout(t))?;
            }
            if let Some(t) = opts.min_rnr_timer {
                cm.set_min_rnr_timer(id, t)?;
            }
            Ok(())
        })
    }
}

/// A connection's QP, CQ and message ring (destroyed with it unless taken).
struct Qp {
    dev: Device,
    qpn: u32,
    cq: CqId,
    ring: Option<Region>,
    slots: usize,
    slot: usize,
    tx_size: usize,
}

const RING_TAG: u64 = 1 << 62;

impl Qp {
    fn post_slot(&self, k: usize) -> Result<()> {
        let Some(ring) = self.ring.as_ref() else {
            return Ok(());
        };
        let sge = ring.sge(&(k * self.slot..(k + 1) * self.slot))?;
        self.dev
            .post_recv(self.qpn, RecvWr::new(RING_TAG | k as u64, vec![sge]))?;
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let _ = self.dev.destroy_qp(self.qpn);
        let _ = self.dev.destroy_cq(self.cq);
    }
}

/// An active connection being set up (the states of `rdma_connect`'s caller).
struct Connecting {
    ep: Endpoint,
    id: Option<RdmaCmId>,
    events: IdEvents,
    opts: ConnOptions,
    qp: Option<Qp>,
    stage: RdmaCmEventType,
}

impl Connecting {
    fn start(ep: &Endpoint, remote: SocketAddr, opts: &ConnOptions) -> Result<Connecting> {
        let id = ep.inner.cm.with_cm(|cm| cm.create_id_ps(opts.port_space));
        let events = ep.events_of(id.name());
        let mut c = Connecting {
            ep: ep.clone(),
            id: None,
            events,
            opts: opts.clone(),
            qp: None,
            stage: RdmaCmEventType::AddrResolved,
        };
        let r = ep
            .inner
            .cm
            .resolve_addr(&id, Some(ep.inner.local.ip()), remote);
        c.id = Some(id);
        r?;
        Ok(c)
    }

    fn waiting_for(&self) -> &'static str {
        match self.stage {
            RdmaCmEventType::AddrResolved => "address resolution",
            RdmaCmEventType::RouteResolved => "route resolution",
            _ => "the peer's answer (REP)",
        }
    }

    fn id(&self) -> Result<&RdmaCmId> {
        self.id.as_ref().ok_or(ConnError::Cm(RdmaCmError::NoSuchId))
    }

    /// One event; `Some` when connected.
    fn on_event(&mut self, e: RdmaCmEvent) -> Result<Option<Connection>> {
        use RdmaCmEventType as T;
        match e {
            RdmaCmEvent::AddrResolved { .. } if self.stage == T::AddrResolved => {
                let ep = self.ep.clone();
                ep.set_options(self.id()?, &self.opts)?;
                let id = self.id()?;
                ep.inner.cm.with_cm(|cm| cm.resolve_route(id))?;
                self.stage = T::RouteResolved;
                Ok(None)
            }
            RdmaCmEvent::RouteResolved { .. } if self.stage == T::RouteResolved => {
                let qp = self.ep.rc_qp(&self.opts)?;
                let qpn = qp.qpn;
                self.qp = Some(qp);
                let ep = self.ep.clone();
                let id = self.id()?;
                let (p, ece) = (self.opts.param.clone(), self.opts.ece);
                ep.inner.cm.with_id(id.name(), |cm, s, now| match ece {
                    Some(ece) => cm.connect_ece(now, s, id, Some(qpn), &p, ece),
                    None => cm.connect(now, s, id, Some(qpn), &p),
                })??;
                self.stage = T::Established;
                Ok(None)
            }
            RdmaCmEvent::Established {
                private_data,
                param,
                ece,
                ..
            } if self.stage == T::Established => {
                let qp = self
                    .qp
                    .take()
                    .ok_or(ConnError::Cm(RdmaCmError::InvalidState))?;
                let id = self.id.take().ok_or(ConnError::Cm(RdmaCmError::NoSuchId))?;
                Ok(Some(Connection::new(
                    &self.ep,
                    id,
                    self.events.clone(),
                    qp,
                    private_data,
                    param,
                    ece,
                    self.opts.timeout,
                )?))
            }
            RdmaCmEvent::AddrError { .. }
            | RdmaCmEvent::RouteError { .. }
            | RdmaCmEvent::Unreachable { .. }
            | RdmaCmEvent::Rejected { .. }
            | RdmaCmEvent::ConnectError { .. }
            | RdmaCmEvent::Disconnected { .. } => Err(ConnError::from_event(&e)),
            _ => Ok(None),
        }
    }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.ep.destroy_id(id);
        }
        self.qp = None;
    }
}

/// A listening id ([`Endpoint::listen`]).
pub struct Listener {
    ep: Endpoint,
    id: Option<RdmaCmId>,
    events: IdEvents,
    local: SocketAddr,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("local", &self.local)
            .finish()
    }
}

impl Listener {
    /// Where it listens (the port chosen for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next connection request (blocking, up to `timeout`): accept or reject it.
    /// Until it is taken here, a request holds one of the listener's backlog slots.
    pub fn incoming(&self, timeout: Duration) -> Result<Incoming> {
        block_on(within(timeout, self.incoming_async()))
            .unwrap_or(Err(ConnError::TimedOut("a connection request")))
    }

    /// [`Listener::incoming`], async (no timeout).
    pub async fn incoming_async(&self) -> Result<Incoming> {
        loop {
            let e = self.events.next().await;
            if let Some(i) = Incoming::from_event(&self.ep, e) {
                return Ok(i);
            }
        }
    }

    /// The next connection, accepted with the defaults (blocking, 30 s for the request).
    pub fn accept(&self) -> Result<Connection> {
        self.incoming(ConnOptions::default().timeout)?.accept()
    }

    /// [`Listener::accept`], async.
    pub async fn accept_async(&self) -> Result<Connection> {
        self.incoming_async().await?.accept_async().await
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Requests still queued are refused (REJ 28) when their ids are destroyed.
        while let Some(e) = self.events.try_pop() {
            if let Some(id) = e.into_new_id() {
                self.ep.destroy_id(id);
            }
        }
        if let Some(id) = self.id.take() {
            self.ep.destroy_id(id);
        }
    }
}

/// A connection request: who asks, with what; [`Incoming::accept`] or [`Incoming::reject`]
/// it (dropping it rejects it: REJ 28).
pub struct Incoming {
    ep: Endpoint,
    id: Option<RdmaCmId>,
    private_data: Vec<u8>,
    param: ConnParam,
    ece: Ece,
    remote: Option<SocketAddr>,
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming")
            .field("remote", &self.remote)
            .field("private_data", &self.private_data.len())
            .finish()
    }
}

impl Incoming {
    fn from_event(ep: &Endpoint, e: RdmaCmEvent) -> Option<Incoming> {
        let RdmaCmEvent::ConnectRequest {
            new_id: id,
            private_data,
            param,
            ece,
            ..
        } = e
        else {
            return None;
        };
        let remote = ep.inner.cm.with_cm(|cm| cm.remote_addr(id.name()));
        Some(Incoming {
            ep: ep.clone(),
            id: Some(id),
            private_data,
            param,
            ece,
            remote,
        })
    }

    /// The requester's address and port.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote
    }

    /// The consumer private data of the REQ: the 56 bytes after the IP CM header (92 with
    /// native addressing), zero-padded past what the requester sent.
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The requester's parameters, seen from our side.
    pub fn param(&self) -> &ConnParam {
        &self.param
    }

    /// The ECE the REQ offered.
    pub fn ece(&self) -> Ece {
        self.ece
    }

    /// Accepts with the defaults: `rdma_accept(id, NULL)` — the request's resources,
    /// retry counts 7 — and waits for the RTU (ESTABLISHED).
    pub fn accept(self) -> Result<Connection> {
        let opts = self.default_accept();
        self.accept_with(&opts)
    }

    fn default_accept(&self) -> ConnOptions {
        ConnOptions {
            param: ConnParam {
                responder_resources: self.param.responder_resources,
                initiator_depth: self.param.initiator_depth,
                ..ConnParam::default()
            },
            ..ConnOptions::default()
        }
    }

    fn start_accept(&mut self, opts: &ConnOptions) -> Result<(Qp, IdEvents)> {
        let ep = self.ep.clone();
        let id = self
            .id
            .as_ref()
            .ok_or(ConnError::Cm(RdmaCmError::NoSuchId))?;
        ep.set_options(id, opts)?;
        let qp = ep.rc_qp(opts)?;
        let qpn = qp.qpn;
        let events = ep.events_of(id.name());
        let (p, ece) = (opts.param.clone(), opts.ece);
        let r = ep.inner.cm.with_id(id.name(), |cm, s, now| match ece {
            Some(ece) => cm.accept_ece(now, s, id, qpn, &p, ece),
            None => cm.accept(now, s, id, qpn, &p),
        });
        r.map_err(ConnError::from)
            .and_then(|r| r.map_err(ConnError::from))?;
        Ok((qp, events))
    }

    fn finish(
        &mut self,
        qp: Qp,
        events: IdEvents,
        e: Option<RdmaCmEvent>,
        timeout: Duration,
    ) -> Result<Connection> {
        let e = e.ok_or(ConnError::TimedOut("the RTU"))?;
        if e.kind() != RdmaCmEventType::Established {
            return Err(ConnError::from_event(&e));
        }
        let id = self.id.take().ok_or(ConnError::Cm(RdmaCmError::NoSuchId))?;
        Connection::new(
            &self.ep,
            id,
            events,
            qp,
            std::mem::take(&mut self.private_data),
            self.param.clone(),
            self.ece,
            timeout,
        )
    }

    /// Accepts with these options (private data in the REP, resources, ACK timeout, min
    /// RNR timer, ECE) and waits for the RTU.
    pub fn accept_with(self, opts: &ConnOptions) -> Result<Connection> {
        block_on(self.accept_with_async(opts))
    }

    /// [`Incoming::accept`], async.
    pub async fn accept_async(self) -> Result<Connection> {
        let opts = self.default_accept();
        self.accept_with_async(&opts).await
    }

    /// [`Incoming::accept_with`], async.
    pub async fn accept_with_async(mut self, opts: &ConnOptions) -> Result<Connection> {
        let (qp, mb) = self.start_accept(opts)?;
        let e = within(opts.timeout, mb.next()).await;
        self.finish(qp, mb, e, opts.timeout)
    }

    /// `rdma_reject`: REJ 28 (consumer defined) with `private_data`.
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        self.reject_with(RejectReason::CONSUMER_DEFINED, private_data)
    }

    /// `rdma_reject_ece`: REJ 35 (vendor option not supported).
    pub fn reject_ece(self, private_data: &[u8]) -> Result<()> {
        self.reject_with(RejectReason::VENDOR_OPTION_NOT_SUPPORTED, private_data)
    }

    fn reject_with(mut self, reason: RejectReason, pd: &[u8]) -> Result<()> {
        let id = self.id.take().ok_or(ConnError::Cm(RdmaCmError::NoSuchId))?;
        let now = self.ep.now();
        let r = self
            .ep
            .inner
            .cm
            .with_cm(|cm| match cm.reject_with(now, id, reason, pd) {
                Ok(()) => Ok(()),
                Err((id, e)) => {
                    cm.destroy(now, id);
                    Err(e)
                }
            });
        Ok(r?)
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.ep.destroy_id(id);
        }
    }
}

/// Registered memory ([`Endpoint::register`]): local buffers of SENDs and RECVs, and
/// targets of the peer's RDMA WRITEs and READs ([`Region::remote`]).
pub struct Region {
    dev: Device,
    keys: MrKeys,
    addr: u64,
    len: usize,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("rkey", &format_args!("{:#x}", self.keys.rkey))
            .finish()
    }
}

/// What the peer needs to RDMA WRITE into or READ from a [`Region`]: send it in private
/// data or a message ([`RemoteRegion::to_bytes`], 16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteRegion {
    pub addr: u64,
    pub len: u32,
    pub rkey: u32,
}

impl RemoteRegion {
    /// Address, rkey, length, big-endian (rping's layout).
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// The inverse of [`RemoteRegion::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Option<RemoteRegion> {
        let b: &[u8; 16] = b.get(..16)?.try_into().ok()?;
        Some(RemoteRegion {
            addr: u64::from_be_bytes(b[..8].try_into().ok()?),
            rkey: u32::from_be_bytes(b[8..12].try_into().ok()?),
            len: u32::from_be_bytes(b[12..].try_into().ok()?),
        })
    }
}

impl Region {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its keys.
    pub fn keys(&self) -> MrKeys {
        self.keys
    }

    /// What the peer needs to access it.
    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion {
            addr: self.addr,
            len: self.len as u32,
            rkey: self.keys.rkey,
        }
    }

    fn sge(&self, r: &Range<usize>) -> Result<Sge> {
        if r.start > r.end || r.end > self.len {
            return Err(ConnError::OutOfBounds);
        }
        Ok(Sge {
            addr: self.addr + r.start as u64,
            length: (r.end - r.start) as u32,
            lkey: self.keys.lkey,
        })
    }

    /// Copies `data` in at `offset`.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.sge(&(offset..offset + data.len()))?;
        Ok(self
            .dev
            .write_mr(self.keys.lkey, self.addr + offset as u64, data)?)
    }

    /// Copies bytes out from `offset`.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.sge(&(offset..offset + out.len()))?;
        Ok(self
            .dev
            .read_mr(self.keys.lkey, self.addr + offset as u64, out)?)
    }

    /// A copy of `range`.
    pub fn to_vec(&self, range: Range<usize>) -> Result<Vec<u8>> {
        let mut v = vec![0u8; range.end.saturating_sub(range.start)];
        self.read_at(range.start, &mut v)?;
        Ok(v)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = self.dev.dereg_mr(self.keys.lkey);
    }
}

/// An established RC connection.
pub struct Connection {
    ep: Endpoint,
    id: Option<RdmaCmId>,
    events: IdEvents,
    qp: Qp,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
    private_data: Vec<u8>,
    param: ConnParam,
    ece: Ece,
    timeout: Duration,
    next_wr: AtomicU64,
    /// Completions of WRs posted by calls, and message-ring receives, not yet taken.
    done: Completions,
    disconnected: AtomicBool,
    tx: Mutex<Option<Region>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("qpn", &self.qp.qpn)
            .finish()
    }
}

impl Connection {
    #[allow(clippy::too_many_arguments)]
    fn new(
        ep: &Endpoint,
        id: RdmaCmId,
        events: IdEvents,
        qp: Qp,
        private_data: Vec<u8>,
        param: ConnParam,
        ece: Ece,
        timeout: Duration,
    ) -> Result<Connection> {
        let (name, cq) = (id.name(), qp.cq);
        let (local, remote) = ep
            .inner
            .cm
            .with_cm(|cm| (cm.local_addr(name), cm.remote_addr(name)));
        Ok(Connection {
            ep: ep.clone(),
            id: Some(id),
            events,
            qp,
            local,
            remote,
            private_data,
            param,
            ece,
            timeout,
            next_wr: AtomicU64::new(1),
            done: Completions::new(&ep.inner.dev, cq, RING_TAG, timeout),
            disconnected: AtomicBool::new(false),
            tx: Mutex::new(None),
        })
    }

    /// Our address and port.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    /// The peer's address and port.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote
    }

    /// The peer's private data: the REQ's consumer data (passive side, 56 bytes) or the REP's
    /// (active side, 196 bytes), zero-padded past what the peer sent.
    pub fn peer_private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The peer's connection parameters, seen from our side.
    pub fn peer_param(&self) -> &ConnParam {
        &self.param
    }

    /// The ECE the peer sent (REQ on the passive side; REP's vendor ID on the active side).
    pub fn peer_ece(&self) -> Ece {
        self.ece
    }

    /// Our QP number.
    pub fn qp_num(&self) -> u32 {
        self.qp.qpn
    }

    /// The endpoint it belongs to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    fn post_send(&self, wr: SendWr) -> Result<u64> {
        if self.disconnected.load(Ordering::Relaxed) {
            return Err(ConnError::Disconnected);
        }
        let id = wr.wr_id;
        let mut wr = wr;
        wr.signaled = true;
        self.ep.inner.dev.post_send(self.qp.qpn, wr)?;
        Ok(id)
    }

    fn wr_id(&self) -> u64 {
        self.next_wr.fetch_add(1, Ordering::Relaxed)
    }

    fn check(wc: WorkCompletion) -> Result<WorkCompletion> {
        match wc.status {
            WcStatus::Success => Ok(wc),
            WcStatus::WrFlushErr => Err(ConnError::Disconnected),
            status => Err(ConnError::Completion {
                status,
                opcode: wc.opcode,
            }),
        }
    }

    /// Waits for a completion (others are kept for their waiters): `Some(id)` that WR's,
    /// `None` the next message-ring receive.
    async fn wait_wc(&self, what: Option<u64>) -> Result<WorkCompletion> {
        Self::check(self.done.wait(what, "a work completion").await?)
    }

    fn send_wr(&self, buf: &Region, range: &Range<usize>, op: SendOp) -> Result<SendWr> {
        Ok(SendWr::new(self.wr_id(), op).with_sge(buf.sge(range)?))
    }

    fn recv_wr(&self, buf: &Region, range: &Range<usize>) -> Result<u64> {
        let id = self.wr_id();
        self.ep
            .inner
            .dev
            .post_recv(self.qp.qpn, RecvWr::new(id, vec![buf.sge(range)?]))?;
        Ok(id)
    }

    fn write_op(remote: &RemoteRegion, offset: u64) -> SendOp {
        SendOp::RdmaWrite {
            remote_addr: remote.addr + offset,
            rkey: remote.rkey,
        }
    }

    fn read_op(remote: &RemoteRegion, offset: u64) -> SendOp {
        SendOp::RdmaRead {
            remote_addr: remote.addr + offset,
            rkey: remote.rkey,
        }
    }

    /// SEND `buf[range]`; returns once it is acknowledged.
    pub fn send(&self, buf: &Region, range: Range<usize>) -> Result<()> {
        block_on(self.send_async(buf, range))
    }

    /// Receives one message into `buf[range]` (posting the receive now, behind the message
    /// ring's, so use it with [`ConnOptions::msg_slots`] 0); returns its length.
    pub fn recv(&self, buf: &Region, range: Range<usize>) -> Result<usize> {
        block_on(self.recv_async(buf, range))
    }

    /// Posts a receive into `buf[range]` ahead of the peer's SEND; wait for it with
    /// [`PendingRecv::wait`].
    pub fn post_recv(&self, buf: &Region, range: Range<usize>) -> Result<PendingRecv<'_>> {
        Ok(PendingRecv {
            conn: self,
            wr_id: self.recv_wr(buf, &range)?,
        })
    }

    /// RDMA WRITE `buf[range]` to the peer's `remote` region at `offset`.
    pub fn write(
        &self,
        buf: &Region,
        range: Range<usize>,
        remote: &RemoteRegion,
        offset: u64,
    ) -> Result<()> {
        block_on(self.write_async(buf, range, remote, offset))
    }

    /// RDMA READ from the peer's `remote` region at `offset` into `buf[range]`.
    pub fn read(
        &self,
        buf: &Region,
        range: Range<usize>,
        remote: &RemoteRegion,
        offset: u64,
    ) -> Result<()> {
        block_on(self.read_async(buf, range, remote, offset))
    }

    /// [`Connection::send`], async.
    pub async fn send_async(&self, buf: &Region, range: Range<usize>) -> Result<()> {
        self.post_and_wait(buf, range, SendOp::Send).await
    }

    /// [`Connection::recv`], async.
    pub async fn recv_async(&self, buf: &Region, range: Range<usize>) -> Result<usize> {
        let id = self.recv_wr(buf, &range)?;
        self.wait_wc(Some(id)).await.map(|wc| wc.byte_len as usize)
    }

    /// [`Connection::write`], async.
    pub async fn write_async(
        &self,
        buf: &Region,
        range: Range<usize>,
        remote: &RemoteRegion,
        offset: u64,
    ) -> Result<()> {
        self.post_and_wait(buf, range, Self::write_op(remote, offset))
            .await
    }

    /// [`Connection::read`], async.
    pub async fn read_async(
        &self,
        buf: &Region,
        range: Range<usize>,
        remote: &RemoteRegion,
        offset: u64,
    ) -> Result<()> {
        self.post_and_wait(buf, range, Self::read_op(remote, offset))
            .await
    }

    /// Posts `op` on `buf[range]` and waits for its completion.
    async fn post_and_wait(&self, buf: &Region, range: Range<usize>, op: SendOp) -> Result<()> {
        let id = self.post_send(self.send_wr(buf, &range, op)?)?;
        self.wait_wc(Some(id)).await.map(|_| ())
    }

    /// A buffer holding `data` for one message SEND (the connection's own when free; the
    /// transport reads it until the SEND is acknowledged, so a busy one is not reused).
    fn msg_buf(&self, data: &[u8]) -> Result<Region> {
        if data.len() > self.qp.tx_size {
            return Err(ConnError::OutOfBounds);
        }
        let r = match lock(&self.tx).take() {
            Some(r) => r,
            None => self.ep.register(self.qp.tx_size)?,
        };
        r.write_at(0, data)?;
        Ok(r)
    }

    fn msg_done(&self, r: Region) {
        let mut tx = lock(&self.tx);
        if tx.is_none() {
            *tx = Some(r);
        }
    }

    /// The message of a ring completion; the slot is posted again.
    fn ring_msg(&self, wc: &WorkCompletion) -> Result<Vec<u8>> {
        let k = (wc.wr_id & !RING_TAG) as usize;
        let ring = self.qp.ring.as_ref().ok_or(ConnError::OutOfBounds)?;
        let base = k * self.qp.slot;
        let n = (wc.byte_len as usize).min(self.qp.slot);
        let data = ring.to_vec(base..base + n);
        self.qp.post_slot(k)?;
        data
    }

    /// SENDs `data` (at most [`ConnOptions::msg_size`] bytes) from the connection's own
    /// buffer; returns once it is acknowledged.
    pub fn send_msg(&self, data: &[u8]) -> Result<()> {
        block_on(self.send_msg_async(data))
    }

    /// The next message from the ring ([`ConnOptions::msg_slots`]), in arrival order.
    pub fn recv_msg(&self) -> Result<Vec<u8>> {
        block_on(self.recv_msg_async())
    }

    /// [`Connection::send_msg`], async.
    pub async fn send_msg_async(&self, data: &[u8]) -> Result<()> {
        let buf = self.msg_buf(data)?;
        let id = self.post_send(self.send_wr(&buf, &(0..data.len()), SendOp::Send)?)?;
        self.wait_wc(Some(id)).await?;
        self.msg_done(buf);
        Ok(())
    }

    /// [`Connection::recv_msg`], async.
    pub async fn recv_msg_async(&self) -> Result<Vec<u8>> {
        if self.qp.ring.is_none() {
            return Err(ConnError::OutOfBounds);
        }
        let wc = self.wait_wc(None).await?;
        self.ring_msg(&wc)
    }

    /// The next CM event of this connection (DISCONNECTED when the peer disconnects,
    /// TIMEWAIT_EXIT), waiting up to `timeout`.
    pub fn next_event(&self, timeout: Duration) -> Option<ConnEvent> {
        block_on(within(timeout, self.next_event_async()))
    }

    /// [`Connection::next_event`], async (no timeout).
    pub async fn next_event_async(&self) -> ConnEvent {
        let e = self.events.next().await;
        if e.kind() == RdmaCmEventType::Disconnected {
            self.disconnected.store(true, Ordering::Relaxed);
        }
        ConnEvent::from(&e)
    }

    /// Whether DISCONNECTED was seen.
    pub fn is_disconnected(&self) -> bool {
        self.disconnected.load(Ordering::Relaxed)
    }

    fn start_disconnect(&self) -> Result<()> {
        let id = self
            .id
            .as_ref()
            .ok_or(ConnError::Cm(RdmaCmError::NoSuchId))?;
        self.ep
            .inner
            .cm
            .with_id(id.name(), |cm, s, now| cm.disconnect(now, s, id))??;
        Ok(())
    }

    /// `rdma_disconnect`: the QP to ERR and a DREQ (or the DREP when the peer disconnected
    /// first); waits for DISCONNECTED.
    pub fn disconnect(&self) -> Result<()> {
        block_on(self.disconnect_async())
    }

    /// [`Connection::disconnect`], async.
    pub async fn disconnect_async(&self) -> Result<()> {
        let was = self.is_disconnected();
        self.start_disconnect()?;
        if was {
            return Ok(());
        }
        let disconnected = async {
            loop {
                if let ConnEvent::Disconnected { .. } = self.next_event_async().await {
                    return;
                }
            }
        };
        within(self.timeout, disconnected)
            .await
            .ok_or(ConnError::TimedOut("DISCONNECTED"))
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // rdma_destroy_id: a DREQ if still connected (the IB CM's destroy in ESTABLISHED),
        // the DREP if the peer's DREQ is unanswered; the QP and CQ go with `qp`.
        if let Some(id) = self.id.take() {
            if self.is_disconnected() {
                let _ = self
                    .ep
                    .inner
                    .cm
                    .with_id(id.name(), |cm, s, now| cm.disconnect(now, s, &id));
            }
            self.ep.destroy_id(id);
        }
        *lock(&self.tx) = None;
    }
}

/// One CQ's completions for the calls that wait on them ([`Connection`] and [`UdSocket`]
/// alike): a posted WR's by its wr_id, and the receives of a ring (wr_ids carrying
/// `ring_tag`) in arrival order. A waiter that finds another's completion keeps it for
/// that one.
struct Completions {
    dev: Device,
    cq: CqId,
    ring_tag: u64,
    timeout: Duration,
    done: Mutex<(BTreeMap<u64, WorkCompletion>, VecDeque<WorkCompletion>)>,
}

impl Completions {
    fn new(dev: &Device, cq: CqId, ring_tag: u64, timeout: Duration) -> Completions {
        Completions {
            dev: dev.clone(),
            cq,
            ring_tag,
            timeout,
            done: Mutex::new((BTreeMap::new(), VecDeque::new())),
        }
    }

    /// `Some(id)`: the completion of that WR; `None`: the next ring receive.
    fn take(&self, what: Option<u64>) -> Option<WorkCompletion> {
        let mut d = lock(&self.done);
        match what {
            Some(id) => d.0.remove(&id),
            None => d.1.pop_front(),
        }
    }

    fn stash(&self, wcs: Vec<WorkCompletion>) {
        let mut d = lock(&self.done);
        for wc in wcs {
            if wc.wr_id & self.ring_tag != 0 {
                d.1.push_back(wc);
            } else {
                d.0.insert(wc.wr_id, wc);
            }
        }
    }

    /// The completion `what` names, waiting up to the timeout (`waiting_for` says what
    /// the caller waited for in the error).
    async fn wait(&self, what: Option<u64>, waiting_for: &'static str) -> Result<WorkCompletion> {
        let adev = AsyncDevice::new(self.dev.clone())?;
        let got = async {
            loop {
                if let Some(wc) = self.take(what) {
                    return Ok(wc);
                }
                self.stash(adev.poll_cq_wait(self.cq, 16).await?);
            }
        };
        within(self.timeout, got)
            .await
            .unwrap_or(Err(ConnError::TimedOut(waiting_for)))
    }
}

/// A receive posted ahead of the peer's SEND ([`Connection::post_recv`]).
pub struct PendingRecv<'a> {
    conn: &'a Connection,
    wr_id: u64,
}

impl PendingRecv<'_> {
    /// Waits for the message; returns its length.
    pub fn wait(self) -> Result<usize> {
        block_on(self.wait_async())
    }

    /// [`PendingRecv::wait`], async.
    pub async fn wait_async(self) -> Result<usize> {
        self.conn
            .wait_wc(Some(self.wr_id))
            .await
            .map(|wc| wc.byte_len as usize)
    }
}

/// A remote UD peer: where to send ([`UdSocket::resolve`] or a received datagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdPeer {
    pub ah: AddressVector,
    pub qpn: u32,
    pub qkey: u32,
}

impl UdPeer {
    /// The peer's IP address.
    pub fn ip(&self) -> IpAddr {
        self.ah.dgid.to_ip()
    }
}

/// A UD datagram socket on an endpoint ([`Endpoint::ud_socket`]).
pub struct UdSocket {
    ep: Endpoint,
    qpn: u32,
    cq: CqId,
    bufs: Region,
    slot: usize,
    depth: usize,
    tx: Region,
    /// Held from copying a datagram into `tx` to posting it (the post copies it out).
    tx_lock: Mutex<()>,
    timeout: Duration,
    next_wr: AtomicU64,
    /// Send completions and received datagrams not yet taken.
    done: Completions,
}

impl std::fmt::Debug for UdSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdSocket").field("qpn", &self.qpn).finish()
    }
}

const RECV_TAG: u64 = 1 << 63;
const GRH: usize = 40;

impl UdSocket {
    fn open(ep: &Endpoint, depth: usize) -> Result<UdSocket> {
        let mtu = ep
            .inner
            .dev
            .query_port(1)
            .map(|p| p.active_mtu.bytes() as usize)
            .unwrap_or(1024);
        let slot = mtu + GRH;
        let cq = ep.inner.dev.create_cq((depth * 2) as u32 + 16)?;
        let (qpn, _) = ep.inner.dev.create_qp(QpInitAttr {
            qp_type: QpType::Ud,
            pd: ep.inner.pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: depth as u32,
                max_recv_wr: depth as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        })?;
        ep.inner
            .dev
            .with_stack(|s| RdmaCm::init_ud_qp(s, qpn, RDMA_UDP_QKEY))?;
        let bufs = ep.register(slot * depth)?;
        let tx = ep.register(mtu)?;
        let s = UdSocket {
            ep: ep.clone(),
            qpn,
            cq,
            bufs,
            slot,
            depth,
            tx,
            tx_lock: Mutex::new(()),
            timeout: ConnOptions::default().timeout,
            next_wr: AtomicU64::new(1),
            done: Completions::new(&ep.inner.dev, cq, RECV_TAG, ConnOptions::default().timeout),
        };
        for k in 0..depth {
            s.post_slot(k)?;
        }
        Ok(s)
    }

    fn post_slot(&self, k: usize) -> Result<()> {
        let sge = self.bufs.sge(&(k * self.slot..(k + 1) * self.slot))?;
        self.ep
            .inner
            .dev
            .post_recv(self.qpn, RecvWr::new(RECV_TAG | k as u64, vec![sge]))?;
        Ok(())
    }

    /// Our QP number.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// The largest datagram (the port's active MTU).
    pub fn max_datagram(&self) -> usize {
        self.slot - GRH
    }

    /// Asks the UD listener at `remote` (UDP port space) for its QPN and Q_Key: a SIDR REQ,
    /// as `rdma_connect` of a UD id (blocking).
    pub fn resolve(&self, remote: SocketAddr) -> Result<UdPeer> {
        block_on(self.resolve_async(remote))
    }

    /// [`UdSocket::resolve`], async.
    pub async fn resolve_async(&self, remote: SocketAddr) -> Result<UdPeer> {
        let (id, mb) = self.start_resolve(remote)?;
        let mut st = UdResolve::Addr;
        loop {
            let e = match within(self.timeout, mb.next()).await {
                Some(e) => e,
                None => {
                    self.ep.destroy_id(id);
                    return Err(ConnError::TimedOut("the SIDR REP"));
                }
            };
            match self.resolve_step(&id, &mut st, e) {
                Ok(Some(p)) => {
                    self.ep.destroy_id(id);
                    return Ok(p);
                }
                Ok(None) => {}
                Err(err) => {
                    self.ep.destroy_id(id);
                    return Err(err);
                }
            }
        }
    }

    fn start_resolve(&self, remote: SocketAddr) -> Result<(RdmaCmId, IdEvents)> {
        let id = self
            .ep
            .inner
            .cm
            .with_cm(|cm| cm.create_id_ps(PortSpace::UDP));
        let mb = self.ep.events_of(id.name());
        if let Err(e) = self
            .ep
            .inner
            .cm
            .resolve_addr(&id, Some(self.ep.inner.local.ip()), remote)
        {
            self.ep.destroy_id(id);
            return Err(e.into());
        }
        Ok((id, mb))
    }

    fn resolve_step(
        &self,
        id: &RdmaCmId,
        st: &mut UdResolve,
        e: RdmaCmEvent,
    ) -> Result<Option<UdPeer>> {
        use RdmaCmEventType as T;
        match (e.kind(), *st) {
            (T::AddrResolved, UdResolve::Addr) => {
                self.ep.inner.cm.with_cm(|cm| cm.resolve_route(id))?;
                *st = UdResolve::Route;
                Ok(None)
            }
            (T::RouteResolved, UdResolve::Route) => {
                let qpn = self.qpn;
                self.ep.inner.cm.with_id(id.name(), |cm, s, now| {
                    cm.connect(now, s, id, Some(qpn), &ConnParam::default())
                })??;
                *st = UdResolve::Sidr;
                Ok(None)
            }
            (T::Established, UdResolve::Sidr) => {
                let ud = e.ud().ok_or(ConnError::ConnectError { status: -22 })?;
                Ok(Some(UdPeer {
                    ah: ud.ah,
                    qpn: ud.qp_num,
                    qkey: ud.qkey,
                }))
            }
            (T::AddrError | T::RouteError | T::Unreachable | T::Rejected | T::ConnectError, _) => {
                Err(ConnError::from_event(&e))
            }
            _ => Ok(None),
        }
    }

    fn send_wr(&self, data: &[u8], peer: &UdPeer) -> Result<u64> {
        if data.len() > self.max_datagram() {
            return Err(ConnError::OutOfBounds);
        }
        let _one = lock(&self.tx_lock);
        self.tx.write_at(0, data)?;
        let id = self.next_wr.fetch_add(1, Ordering::Relaxed);
        let wr = SendWr::new(id, SendOp::Send)
            .with_sge(self.tx.sge(&(0..data.len()))?)
            .with_ud(UdDest {
                av: peer.ah,
                remote_qpn: peer.qpn,
                remote_qkey: peer.qkey,
            });
        self.ep.inner.dev.post_send(self.qpn, wr)?;
        Ok(id)
    }

    fn sent(wc: WorkCompletion) -> Result<()> {
        match wc.status {
            WcStatus::Success => Ok(()),
            status => Err(ConnError::Completion {
                status,
                opcode: wc.opcode,
            }),
        }
    }

    /// Sends one datagram to `peer` (blocking until it left).
    pub fn send_to(&self, data: &[u8], peer: &UdPeer) -> Result<()> {
        block_on(self.send_to_async(data, peer))
    }

    /// [`UdSocket::send_to`], async.
    pub async fn send_to_async(&self, data: &[u8], peer: &UdPeer) -> Result<()> {
        let id = self.send_wr(data, peer)?;
        Self::sent(self.done.wait(Some(id), "a datagram").await?)
    }

    fn received(&self, wc: WorkCompletion) -> Result<(Vec<u8>, UdPeer)> {
        let k = (wc.wr_id & !RECV_TAG) as usize;
        let base = k * self.slot;
        let r = (|| {
            if wc.status != WcStatus::Success {
                return Err(ConnError::Completion {
                    status: wc.status,
                    opcode: wc.opcode,
                });
            }
            let mut grh = [0u8; GRH];
            self.bufs.read_at(base, &mut grh)?;
            let ah = self
                .ep
                .inner
                .dev
                .with_stack(|s| init_ah_from_wc(s, &wc, &grh))
                .ok_or(ConnError::Cm(RdmaCmError::NoDevice))?;
            let n = (wc.byte_len as usize)
                .saturating_sub(GRH)
                .min(self.slot - GRH);
            let data = self.bufs.to_vec(base + GRH..base + GRH + n)?;
            Ok((
                data,
                UdPeer {
                    ah,
                    qpn: wc.src_qp,
                    qkey: RDMA_UDP_QKEY,
                },
            ))
        })();
        if k < self.depth {
            self.post_slot(k)?;
        }
        r
    }

    /// The next datagram and who sent it (its reply address: `ibv_init_ah_from_wc`, the
    /// source QPN, our Q_Key), waiting up to 30 s.
    pub fn recv_from(&self) -> Result<(Vec<u8>, UdPeer)> {
        block_on(self.recv_from_async())
    }

    /// [`UdSocket::recv_from`], async.
    pub async fn recv_from_async(&self) -> Result<(Vec<u8>, UdPeer)> {
        let wc = self.done.wait(None, "a datagram").await?;
        self.received(wc)
    }
}

impl Drop for UdSocket {
    fn drop(&mut self) {
        let _ = self.ep.inner.dev.destroy_qp(self.qpn);
        let _ = self.ep.inner.dev.destroy_cq(self.cq);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum UdResolve {
    Addr,
    Route,
    Sidr,
}

/// Answers SIDR REQs for a port with a socket's QPN ([`Endpoint::listen_ud`]).
pub struct UdListener {
    ep: Endpoint,
    id: Option<RdmaCmId>,
}

impl std::fmt::Debug for UdListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdListener").finish()
    }
}

impl Drop for UdListener {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.ep.inner.cm.stop_answering_sidr(id.name());
            self.ep.destroy_id(id);
        }
    }
}
