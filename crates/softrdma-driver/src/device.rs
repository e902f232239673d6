//! The device runtime: one [`UdpEndpoint`] and the real [`Clock`], and the event loop that
//! moves datagrams and timeouts between the socket and the device's port of a sans-IO
//! [`Node`] (its own node at open, its CM's after [`crate::cm::Cm::add_device`]; see
//! the `host` module). The loop adds no call order of its own: it is the node's.
//!
//! ```text
//!  recv batch ──► for each record, each GRO segment: node.handle_datagram(now, port, src, dst, seg)
//!  deadline   ──► node.handle_timeout(now)
//!  then       ──► node.poll_transmit_batch(now, port) until empty ──► sendmmsg (GSO trains)
//! ```
//!
//! [`Device`] is the blocking verbs API (`alloc_pd`, `reg_mr`, `create_cq`, `create_qp`,
//! `modify_qp`, `post_send`, `post_recv`, `poll_cq`, `wait_cq`, queries and counters). Where the
//! loop runs is the [`Progress`] choice:
//!
//! - [`Progress::Thread`]: a background thread owns the socket's receive side and sleeps in
//!   epoll (or spins, per its [`PollMode`]) until input, the stack's next timer, or a
//!   [`crate::Notifier`] wake-up. The stack sits behind a mutex; a verbs call locks it, and
//!   a call that may move the next timer earlier (`post_send`, `modify_qp`) wakes the loop only
//!   when it actually did. Blocking waiters sleep on a condition variable the loop signals after
//!   every turn that handled input or timers; async waiters ([`crate::AsyncDevice`]) are woken
//!   through their `Waker`s at the same point.
//! - [`Progress::Inline`]: no thread. The caller's own `poll_cq` / `wait_cq` runs the loop: each
//!   `poll_cq` first does one non-blocking `recvmmsg` turn, and `wait_cq` keeps turning — spinning
//!   on the socket with [`PollMode::BusyPoll`], the way `ibv_rc_pingpong` without `-e` spins on
//!   its CQ. This is the low-latency path: no thread wake-up sits between a datagram's arrival
//!   and its completion. Nothing happens while nobody polls (ACKs, retransmissions wait for the
//!   next poll), which is the contract of a polled device.
//!
//! Each flush sends what the stack has as GSO trains ([`Stack::poll_transmit_batch`]): a
//! multi-packet message's segments, and a ping-pong's request with the ACK of the previous
//! answer as its short last segment, leave in one `sendmsg` each
//! ([`DeviceConfig::gso_coalesce`] = false: one datagram per `sendmsg`). Verified against the
//! lab's 6.1 guest: the 64 packets of a 64 KiB RC SEND left the host as one GSO send, crossed
//! the bridge with IPv4 IDs 0, 1, 2, … (software segmentation), and rxe accepted every one.
//!
//! Sends always happen in the thread that produced them (the poster's thread for a UD send or
//! the first packets of an RC message, the loop's for ACKs and responses), under the stack lock,
//! so the order the stack chose is the order on the wire.
//!
//! # Source port and ICRC
//!
//! rxe derives each QP's UDP source port from its QPN or flow label. A device has one socket
//! per address it serves, each bound to `<addr>:4791`, so its datagrams leave from port 4791 (a legal choice: the source
//! port is only ECMP entropy, and rxe replies to 4791 whatever the source port was); the
//! device tells the stack so ([`Stack::set_udp_src_port`]) and every ICRC is sealed for it,
//! with the IPv4 ID of the datagram's place in its GSO send (0 for a datagram sent alone; see
//! `docs/measurements.md` for the measurement), DF set. A train leaves on the socket of its
//! source address (the address of the GID the QP's or AH's `sgid_index` names); one whose
//! source the device does not serve (the link-local GID on an IPv4 socket) is dropped and
//! counted in [`DriverCounters::tx_wrong_source`], as a kernel would fail to route it.
//!
//! # Several addresses, one loop
//!
//! An rxe port serves every address of its interface. A device opened with
//! [`DeviceConfig::more_ips`] does too: one socket per address (not one wildcard socket with
//! `IP_PKTINFO`: a wildcard `0.0.0.0:4791` could not coexist with another process's device on
//! `127.0.0.2:4791`, which the "two processes on one host" rule needs, and a socket bound to
//! one address needs no control message per datagram). The first address's socket is the
//! loop's: its epoll set also watches the other sockets ([`UdpEndpoint::watch_also`]) and its
//! notifier wakes the loop; a receive drains every socket into the one batch of buffers
//! ([`crate::timer::wait_for_input_any`]), each record's destination address saying which
//! address it came to. An address another process already holds is left out, of the sockets
//! and of the GID table.
//!
//! # GID table of a driver device
//!
//! By default a device gets a locally administered MAC derived from its IP address
//! (`02:00:` + the address's last four bytes, [`crate::tap::mac_for_ip`]), so its GID table
//! looks like an rxe port on an Ethernet interface (softrdma-core's `GidTable`): **index 0 is
//! the link-local default GID** `fe80::<EUI-64 of the MAC>` and **index 1 is the device's IP
//! address** (`::ffff:a.b.c.d` for IPv4, the address itself for IPv6). That is the lab's
//! convention (`ibv_rc_pingpong -g 1` selects the IPv4 GID there), and the same `-g 1` works
//! against a softrdma device on 127.0.0.1; the [`DeviceConfig::more_ips`] follow, in order,
//! as rxe lists an interface's further addresses. [`DeviceConfig::without_mac`] gives the
//! MAC-less table instead (index 0 = the IP address). The link-local GID cannot be used as a source on
//! an IPv4 socket (see above).

use std::fmt;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use softrdma_core::cm::{CmConfig, CmPort, RXE_CA_ACK_DELAY};
use softrdma_core::node::{MadClass, NodeError};
use softrdma_core::Node;
use softrdma_wire::Guid;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant as StdInstant};

use softrdma_core::device::{
    Counters, DeviceAttr, GidEntry, GidType, PortAttr, QueryError, PORT_NUM,
};
use softrdma_core::mad::{MadAgent, MadCounters};
use softrdma_core::time::Instant;
use softrdma_core::transport::emit::{Train, TransmitBatch};
use softrdma_core::verbs::{
    AccessFlags, CqId, Memory, Mr, MrKeys, MrTable, PdId, QpAttr, QpAttrMask, QpCap, QpInitAttr,
    RecvWr, SendWr, SrqId, VerbsError, WorkCompletion,
};
use softrdma_core::Stack;
use softrdma_wire::icrc::ROCE_V2_PORT;

use crate::clock::{duration_to_micros, Clock, Micros};
use crate::host::{Host, HostState};
use crate::mad::{ClientClass, MadClient, PortCtx};
use crate::tap::{mac_for_ip, Tap};
use crate::timer::{wait_for_input, wait_for_input_any, Input, PollMode};
use crate::udp::{
    EndpointConfig, RecvDatagram, UdpEndpoint, VectoredTransmit, MAX_UDP_PAYLOAD_V4,
    MAX_UDP_PAYLOAD_V6, RECV_BATCH,
};
use crate::wait::Waiters;

/// Where the event loop runs (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A background thread runs the loop, waiting as the [`PollMode`] says.
    Thread(PollMode),
    /// The caller's `poll_cq` / `wait_cq` run the loop; no thread.
    Inline,
}

/// How to open a [`Device`].
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// The device's IP address; the endpoint binds `<ip>:4791`.
    pub ip: IpAddr,
    /// Further addresses the device serves, as an rxe port serves every address of its
    /// interface (default none): each gets a socket on `<addr>:4791`, watched by the same
    /// loop, and a RoCEv2 GID after `ip`'s, in this order. An address another process holds
    /// (or the host does not have) is left out, of the sockets and of the GID table.
    pub more_ips: Vec<IpAddr>,
    /// Device name (`query_device`, messages). Default `softrdma-<ip>`.
    pub name: String,
    /// The MAC the GID table is built with (`None`: no default link-local GID; see the
    /// module docs). Default: [`mac_for_ip`].
    pub mac: Option<[u8; 6]>,
    /// The "netdev" MTU the port's active MTU derives from (default 1500, giving 1024 as on
    /// an Ethernet rxe port).
    pub netdev_mtu: u32,
    /// Where the event loop runs (default: a background thread sleeping in epoll).
    pub progress: Progress,
    /// How `wait_cq` waits when the CQ is empty (default: block). With
    /// [`Progress::Inline`], this is also how the caller's thread waits for the socket.
    pub wait: PollMode,
    /// Record every datagram sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Socket options.
    pub endpoint: EndpointConfig,
    /// Send the stack's GSO trains as such (default true; false: one datagram per `sendmsg`;
    /// without GSO on the socket this changes nothing).
    pub gso_coalesce: bool,
    /// Seed of the stack's keys and PSNs (default: from the clock and the process id).
    pub seed: u64,
    /// QP1's receive buffers (default [`softrdma_core::mad::port::DEFAULT_RECV_DEPTH`]).
    pub qp1_recv_depth: u32,
    /// Test aid: received datagrams for which this returns true are dropped before the
    /// stack sees them (and counted in [`DriverCounters::rx_filtered`]).
    pub rx_drop: Option<RxDropFilter>,
    /// Leave what a loop turn's input made the stack queue (ACKs, READ responses, answers to
    /// retransmissions) for the next `post_send`, or the start of the next turn, instead of
    /// sending it at the end of the turn (default false). With [`Progress::Inline`] this is
    /// how a ping-pong's ACK of the answer leaves with the next request, as one GSO `sendmsg`:
    /// one send per round trip and side instead of two. With [`Progress::Inline`], the MADs
    /// of [`Device::with_mad`] (CM commands) wait for the next turn too, so a burst of
    /// commands leaves batched. A caller that stops polling should end with
    /// [`Device::flush`] ([`Device::progress_for`] does).
    pub defer_flush: bool,
    /// With [`DeviceConfig::defer_flush`] on an inline device: whether commands' sends
    /// (CM MADs, what a QP modification queued) wait for the next turn too (default true,
    /// the batching above). False: commands send at once and only what a turn's input
    /// queued waits — for a device whose turns an application's polls drive while another
    /// thread may issue commands and nobody turns the loop soon (the drop-in
    /// `libibverbs.so.1`: its RDMA CM's REQ must not wait for the next poll).
    pub defer_commands: bool,
    /// The device's QP limit, `max_qp` (default rxe's 65,536; see
    /// [`softrdma_core::DeviceConfig::max_qp`]).
    pub max_qp: u32,
    /// With [`Progress::Thread`]: an application thread that polls a CQ turns the loop
    /// itself (non-blocking, when nobody else is turning it right now), and while such
    /// polls keep coming the node's loop thread keeps out of their way
    /// (the node loop, `node_loop.rs`): the answer to a SEND then leaves from the polling thread
    /// without a cross-thread wake-up, as with [`Progress::Inline`], and the loop thread
    /// still makes progress when nobody polls (default false; the drop-in
    /// `libibverbs.so.1` sets it).
    pub app_turns: bool,
    /// The index of the interface the addresses belong to (default 0: none). An IPv6
    /// link-local address in [`DeviceConfig::more_ips`] (the default GID at index 0, as rxe
    /// lists it) is bound and sent from in this scope, and a link-local destination
    /// (a RoCEv2 GID carries no scope) is reached through it; without a scope such an
    /// address is left out, as an address the host does not have.
    pub scope_id: u32,
}

/// A receive-side fault injector: `(source, UDP payload) → drop?`.
#[derive(Clone)]
pub struct RxDropFilter(Arc<RxDropFn>);

type RxDropFn = dyn Fn(SocketAddr, &[u8]) -> bool + Send + Sync;

impl fmt::Debug for RxDropFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RxDropFilter")
    }
}

impl DeviceConfig {
    /// The defaults for a device on `ip`.
    pub fn new(ip: IpAddr) -> DeviceConfig {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        DeviceConfig {
            ip,
            more_ips: Vec::new(),
            name: format!("softrdma-{ip}"),
            mac: Some(mac_for_ip(ip)),
            netdev_mtu: 1500,
            progress: Progress::Thread(PollMode::Blocking),
            wait: PollMode::Blocking,
            pcap: None,
            endpoint: EndpointConfig::default(),
            gso_coalesce: true,
            seed: t ^ (u64::from(std::process::id()) << 32),
            qp1_recv_depth: softrdma_core::mad::port::DEFAULT_RECV_DEPTH,
            rx_drop: None,
            defer_flush: false,
            defer_commands: true,
            max_qp: softrdma_core::device::RXE_MAX_QP,
            app_turns: false,
            scope_id: 0,
        }
    }

    /// Sets [`DeviceConfig::more_ips`].
    pub fn with_more_ips(mut self, ips: impl IntoIterator<Item = IpAddr>) -> Self {
        self.more_ips = ips.into_iter().collect();
        self
    }

    /// Sets the QP limit (scale runs: more than rxe's 65,536).
    pub fn with_max_qp(mut self, max_qp: u32) -> Self {
        self.max_qp = max_qp;
        self
    }

    /// Runs the loop in the caller's thread, busy-polling (the `ibv_rc_pingpong` default).
    pub fn busy_poll(mut self) -> Self {
        self.progress = Progress::Inline;
        self.wait = PollMode::BusyPoll;
        self
    }

    /// Runs the loop on a background thread that sleeps in epoll; waits block.
    pub fn background(mut self) -> Self {
        self.progress = Progress::Thread(PollMode::Blocking);
        self.wait = PollMode::Blocking;
        self
    }

    /// Sets where the loop runs.
    pub fn with_progress(mut self, p: Progress) -> Self {
        self.progress = p;
        self
    }

    /// Sets how `wait_cq` waits.
    pub fn with_wait(mut self, w: PollMode) -> Self {
        self.wait = w;
        self
    }

    /// Records traffic to a pcap file.
    pub fn with_pcap(mut self, path: impl Into<PathBuf>) -> Self {
        self.pcap = Some(path.into());
        self
    }

    /// Builds the GID table without a MAC (index 0 = the IP address).
    pub fn without_mac(mut self) -> Self {
        self.mac = None;
        self
    }

    /// Sets the netdev MTU.
    pub fn with_netdev_mtu(mut self, mtu: u32) -> Self {
        self.netdev_mtu = mtu;
        self
    }

    /// Takes the netdev MTU from the interface that holds the device's address, as an rxe
    /// port takes it from its netdev (keeps the current value when none is found). Loopback
    /// then gets path MTU 4096, a 1500-byte Ethernet 1024.
    pub fn with_interface_mtu(mut self) -> Self {
        if let Some(m) = crate::netif::interface_mtu(self.ip) {
            self.netdev_mtu = m;
        }
        self
    }

    /// Sets the seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Test aid: drops received datagrams for which `f(source, payload)` is true.
    pub fn with_rx_drop(
        mut self,
        f: impl Fn(SocketAddr, &[u8]) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.rx_drop = Some(RxDropFilter(Arc::new(f)));
        self
    }

    /// Sets [`DeviceConfig::defer_flush`].
    pub fn with_defer_flush(mut self, defer: bool) -> Self {
        self.defer_flush = defer;
        self
    }

    /// Sets [`DeviceConfig::defer_commands`].
    pub fn with_defer_commands(mut self, defer: bool) -> Self {
        self.defer_commands = defer;
        self
    }

    /// Sets [`DeviceConfig::scope_id`].
    pub fn with_scope_id(mut self, ifindex: u32) -> Self {
        self.scope_id = ifindex;
        self
    }

    /// Sets [`DeviceConfig::app_turns`].
    pub fn with_app_turns(mut self, on: bool) -> Self {
        self.app_turns = on;
        self
    }
}

/// Why a device call failed.
#[derive(Debug)]
pub enum Error {
    /// The socket (or the pcap file) failed.
    Io(io::Error),
    /// The verb was refused.
    Verbs(VerbsError),
    /// A query named something that does not exist.
    Query(QueryError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::Verbs(e) => write!(f, "{e}"),
            Error::Query(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            Error::Verbs(e) => Some(e),
            Error::Query(e) => Some(e),
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<VerbsError> for Error {
    fn from(e: VerbsError) -> Self {
        Error::Verbs(e)
    }
}

impl From<QueryError> for Error {
    fn from(e: QueryError) -> Self {
        Error::Query(e)
    }
}

/// The result of a device call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the driver itself counts (the stack's drop counters are [`Device::counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverCounters {
    /// Datagrams handed to the kernel.
    pub tx_datagrams: u64,
    /// `sendmsg` calls (a GSO send is one).
    pub tx_sends: u64,
    /// Datagrams the socket refused (errors other than a full buffer), dropped.
    pub tx_errors: u64,
    /// Datagrams dropped because the send buffer stayed full.
    pub tx_dropped: u64,
    /// Datagrams dropped because their source address is not the device's.
    pub tx_wrong_source: u64,
    /// Datagrams received.
    pub rx_datagrams: u64,
    /// Receive buffers filled (with GRO one may hold several datagrams).
    pub rx_records: u64,
    /// Event loop turns that handled input or timers.
    pub turns: u64,
    /// Pcap records written.
    pub pcap_packets: u64,
    /// Pcap write errors (the tap is closed after the first).
    pub pcap_errors: u64,
    /// Datagrams dropped by [`DeviceConfig::with_rx_drop`].
    pub rx_filtered: u64,
    /// Of [`DriverCounters::turns`], those an application's CQ poll ran in its own thread
    /// ([`DeviceConfig::app_turns`]).
    pub app_turns: u64,
}

/// The longest a background loop sleeps without looking at the stack's timers.
const LOOP_TICK: Duration = Duration::from_millis(5);
/// How late a timer may fire (µs) before a verbs call wakes the background loop for it.
const TIMER_SLACK_US: u64 = 1000;

/// How long a send waits for buffer space before the datagram is dropped.
const SEND_BLOCK_LIMIT: Duration = Duration::from_millis(100);

/// Size of one receive buffer: a whole GSO train from a loopback peer (≤ 64 KiB) fits.
const RX_BUF_LEN: usize = 65_536;

struct State {
    /// The node this device is a port of (its own at open; its CM's after
    /// [`crate::cm::Cm::add_device`]) and the port.
    host: Arc<Host>,
    port: CmPort,
    /// The management classes attached through [`Device::attach_mad_client`] (the node
    /// runs them; the device tells them when a turn ended, after its locks are released).
    clients: Arc<Vec<Arc<dyn MadClient>>>,
    tap: Option<Tap>,
    counters: DriverCounters,
    /// The GSO trains of one flush (memory reused).
    batch: TransmitBatch,
}

impl State {
    /// The loop's next deadline: the node's (the transport's, the MAD layers', a class's
    /// or the CM's timer).
    fn poll_timeout(&self) -> Option<Instant> {
        self.host.lock().node.poll_timeout()
    }
}

/// The CM configuration of a device's own node (a [`crate::cm::Cm`] that takes the
/// device brings its own): rxe's CA ACK delay, the node GUID the device's.
pub(crate) fn private_cm_config(seed: u64) -> CmConfig {
    CmConfig {
        node_guid: Guid(0),
        ca_ack_delay: RXE_CA_ACK_DELAY,
        seed,
        ..CmConfig::default()
    }
}

/// `fe80::/10`: an IPv6 address that means something only on one interface.
fn is_link_local(ip: &Ipv6Addr) -> bool {
    ip.segments()[0] & 0xffc0 == 0xfe80
}

/// `dst` as the socket bound at `local` reaches it: a link-local destination (a GID has no
/// scope) gets the scope of the link-local socket it leaves from, as rxe sends on its
/// netdev.
fn scoped(dst: SocketAddr, local: SocketAddr) -> SocketAddr {
    match (dst, local) {
        (SocketAddr::V6(d), SocketAddr::V6(l))
            if d.scope_id() == 0 && is_link_local(d.ip()) && l.scope_id() != 0 =>
        {
            SocketAddr::V6(SocketAddrV6::new(
                *d.ip(),
                d.port(),
                d.flowinfo(),
                l.scope_id(),
            ))
        }
        _ => dst,
    }
}

/// Binds the socket of a further address (`port`, link-local in `scope`); `None` when the
/// address is held by another process (a second program on this host opening the same
/// interface's device) or not an address of this host (any more), or link-local without a
/// scope: served by someone else or nobody, so not in this device's GID table.
fn bind_more(
    ip: IpAddr,
    port: u16,
    scope: u32,
    config: &EndpointConfig,
) -> io::Result<Option<UdpEndpoint>> {
    let at = match ip {
        IpAddr::V6(v6) if is_link_local(&v6) => {
            SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope))
        }
        _ => SocketAddr::new(ip, port),
    };
    match UdpEndpoint::bind_with(at, config) {
        Ok(e) => Ok(Some(e)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::AddrInUse
                    | io::ErrorKind::AddrNotAvailable
                    | io::ErrorKind::InvalidInput
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// A node's refusal while opening a device, as a device error.
fn node_error(e: NodeError) -> Error {
    match e {
        NodeError::Qp1(v) => Error::Verbs(v),
        other => Error::Io(io::Error::other(other.to_string())),
    }
}

/// A device's stack in its node (a device is always a port of its host's node).
fn port_stack(node: &mut Node, port: CmPort) -> &mut Stack {
    node.stack_mut(port)
        .unwrap_or_else(|| unreachable!("a device's port is in its host's node"))
}

struct RxBufs {
    storage: Vec<Vec<u8>>,
    records: Vec<RecvDatagram>,
}

impl RxBufs {
    fn new(n: usize) -> Self {
        RxBufs {
            storage: (0..n).map(|_| vec![0u8; RX_BUF_LEN]).collect(),
            records: Vec::with_capacity(n),
        }
    }
}

pub(crate) struct Shared {
    /// The socket of the device's first address: its receive wait is the loop's, and its
    /// notifier wakes the loop.
    ep: Arc<UdpEndpoint>,
    /// The sockets of the further addresses ([`DeviceConfig::more_ips`]), watched by `ep`'s
    /// wait ([`UdpEndpoint::watch_also`]).
    ///
    /// Addresses join and leave while the device runs ([`Device::add_address`],
    /// [`Device::remove_address`]: the interface's addresses changed); a turn works on the
    /// set it read at its start (a socket removed meanwhile closes when that turn is done).
    more: std::sync::RwLock<Vec<Arc<UdpEndpoint>>>,
    /// [`DeviceConfig::scope_id`] and [`DeviceConfig::endpoint`], for addresses added later.
    scope_id: u32,
    endpoint_config: EndpointConfig,
    clock: Clock,
    local: SocketAddr,
    name: String,
    progress: Progress,
    wait: PollMode,
    coalesce: bool,
    rx_drop: Option<RxDropFilter>,
    defer_flush: bool,
    defer_commands: bool,
    state: Mutex<State>,
    rx: Mutex<RxBufs>,
    /// Signalled after every loop turn that handled input or timers, and after posts
    /// (blocking waiters under the state lock, see [`Shared::cv_wait`]; async ones).
    waiters: Waiters,
    shutdown: AtomicBool,
    /// The deadline the background loop is sleeping towards (`u64::MAX`: none); written
    /// under the state lock.
    loop_deadline: AtomicU64,
    /// Set once the node's loop runs this device (a threaded device added to a CM, see
    /// [`crate::node_loop`]): its own loop thread ends, and its wake-ups go to
    /// `node_notifier`.
    on_node_loop: AtomicBool,
    node_notifier: std::sync::OnceLock<crate::Notifier>,
    /// [`DeviceConfig::app_turns`].
    app_turns: bool,
    /// When the application last polled a CQ of this device ([`Clock`] microseconds; 0:
    /// never): the node's loop leaves the device to polls that keep coming
    /// ([`Shared::app_polling`]).
    app_polled: AtomicU64,
    /// Since when the output of this device's turns has waited for the application's next
    /// post or poll ([`DeviceConfig::defer_flush`]; [`Clock`] microseconds, 0: nothing
    /// waits). Written under the state lock; read by the node's loop, which sends it itself
    /// once it is old ([`Shared::deferred_due`]).
    deferred_since: AtomicU64,
}

/// What one turn of the node's loop found ([`Shared::turn_for_node_loop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeLoopTurn {
    /// The device's sockets were left drained (if not, the loop must look again at once:
    /// their readiness is edge-triggered).
    pub drained: bool,
    /// The turn received datagrams.
    pub received: bool,
}

/// What a turn does first with the output earlier turns deferred
/// ([`DeviceConfig::defer_flush`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deferred {
    /// Sends it before it receives.
    SendFirst,
    /// Leaves it for the application's next post to carry (the node loop's turn while the
    /// application is busy with the device, and the output is young).
    LeaveToApp,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn now(&self) -> Instant {
        Instant::from_micros(self.clock.now())
    }

    /// The sockets of the further addresses, as they are now.
    fn more(&self) -> Vec<Arc<UdpEndpoint>> {
        self.more.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every socket of the device, the first address's first.
    fn endpoints(&self) -> Vec<Arc<UdpEndpoint>> {
        let mut v = vec![self.ep.clone()];
        v.extend(self.more());
        v
    }

    /// Runs `f` on this device's stack (the device's lock, then its host's).
    fn with_stack<R>(&self, f: impl FnOnce(&mut Stack) -> R) -> R {
        let st = self.state();
        let mut h = st.host.lock();
        f(port_stack(&mut h.node, st.port))
    }

    /// [`Shared::with_stack`] for a command: then sends what it queued and wakes whoever
    /// it concerns.
    fn command<R>(&self, f: impl FnOnce(&mut Stack) -> R) -> R {
        let mut st = self.state();
        let r = {
            let mut h = st.host.lock();
            f(port_stack(&mut h.node, st.port))
        };
        self.flush_command(&mut st);
        self.kick_loop(&st);
        drop(st);
        self.signal();
        r
    }

    /// Runs `f` on this device's host with its port and the time, as a command (a CM
    /// call on this device): then sends what it queued and wakes whoever it concerns.
    pub(crate) fn node_command<R>(
        &self,
        f: impl FnOnce(&mut HostState, CmPort, Instant) -> R,
    ) -> R {
        let mut st = self.state();
        let now = self.now();
        let r = f(&mut st.host.lock(), st.port, now);
        self.flush_command(&mut st);
        self.kick_loop(&st);
        drop(st);
        self.signal();
        r
    }

    /// Sends what commands on the CM alone queued on this device's port (as after any
    /// command: an inline device with defer_flush leaves it to its next turn).
    pub(crate) fn flush_commands(&self) {
        let mut st = self.state();
        self.flush_command(&mut st);
        self.kick_loop(&st);
    }

    /// The host this device is a port of, and the port.
    pub(crate) fn host(&self) -> (Arc<Host>, CmPort) {
        let st = self.state();
        (st.host.clone(), st.port)
    }

    /// Moves this device out of its host into `to` (see [`crate::host`]): its stack, QP1
    /// and classes become a port of `to`'s node. Returns the new port.
    pub(crate) fn move_to(
        self: &Arc<Self>,
        to: &Arc<Host>,
    ) -> std::result::Result<CmPort, NodeError> {
        let mut st = self.state();
        if Arc::ptr_eq(&st.host, to) {
            return Ok(st.port);
        }
        let port = {
            let mut from = st.host.lock();
            let own = std::mem::replace(&mut from.node, Node::new(private_cm_config(0))?);
            let mut ports = own.into_ports();
            let Some(p) = ports.pop().filter(|_| ports.is_empty()) else {
                // Only a device's own host is left; it has exactly its one port.
                return Err(NodeError::NoSuchPort);
            };
            to.lock().node.adopt_port(p)?
        };
        st.host = to.clone();
        st.port = port;
        to.add_device(Arc::downgrade(self), port);
        drop(st);
        if matches!(self.progress, Progress::Thread(_)) && !to.is_private() {
            // One loop over all the node's sockets; if it cannot start (no thread, no
            // epoll), the device's own loop goes on running it, as before.
            if let Err(e) = to.run_on_loop(self) {
                eprintln!(
                    "softrdma {}: the node's loop: {e}; the device keeps its own",
                    self.name
                );
            }
        }
        // Wake the loop: its next deadline is now the new node's (and the device's own
        // loop thread ends if the node's took it over).
        let _ = self.ep.notifier().notify();
        self.wake_loop();
        Ok(port)
    }

    /// Wakes the thread that runs this device's loop: its own, or the node's.
    fn wake_loop(&self) {
        // A failed eventfd write leaves it to the loop's next tick (≤ 5 ms).
        let _ = match self.node_notifier.get() {
            Some(n) => n.notify(),
            None => self.ep.notifier().notify(),
        };
    }

    /// Whether the node's loop runs this device.
    pub(crate) fn on_node_loop(&self) -> bool {
        self.on_node_loop.load(Ordering::Acquire)
    }

    /// The node's loop takes this device over: wake-ups go to `n` from now on, and the
    /// device's own loop thread ends after its current turn.
    pub(crate) fn hand_to_node_loop(&self, n: crate::Notifier) {
        let _ = self.node_notifier.set(n);
        self.on_node_loop.store(true, Ordering::Release);
    }

    /// The descriptors of the device's sockets.
    pub(crate) fn socket_fds(&self) -> Vec<std::os::fd::RawFd> {
        let eps = self.endpoints();
        crate::node_loop::fds(&eps.iter().map(|e| &**e).collect::<Vec<_>>())
    }

    /// The node loop's turn of this device: non-blocking turns while its sockets had more
    /// than a batch queued (at most a few, so one busy device cannot starve the others),
    /// unless another thread holds its loop right now (which then drains it). Returns
    /// whether its sockets were left drained: if not, the loop must not sleep (their
    /// readiness is edge-triggered: no new edge comes for what is already queued).
    ///
    /// `leave_young`: output younger than this (the ACK of a WRITE this turn received)
    /// waits for the application's next post, which carries it in one send with its own
    /// request, instead of leaving alone now (`None`: it all leaves now). Sent alone, the
    /// ACK completes the peer's WRITE before the answer comes, the peer stops polling to
    /// spin on its memory (perftest's `ib_write_lat`), and the answer then finds no poll
    /// to turn it, at every hop from then on; carried with the answer, both arrive while
    /// the peer polls for the ACK and its poll turns them together.
    pub(crate) fn turn_for_node_loop(
        &self,
        leave_young: Option<Duration>,
    ) -> io::Result<NodeLoopTurn> {
        let Ok(mut rx) = self.rx.try_lock() else {
            return Ok(NodeLoopTurn {
                drained: true,
                received: false,
            });
        };
        let first = match leave_young {
            Some(young) if self.deferred_due(young).is_none_or(|d| !d.is_zero()) => {
                Deferred::LeaveToApp
            }
            _ => Deferred::SendFirst,
        };
        let mut out = NodeLoopTurn {
            drained: false,
            received: false,
        };
        for _ in 0..4 {
            self.turn_with(&mut rx, None, first)?;
            out.received |= !rx.records.is_empty();
            if self.ep.rx_drained() && self.more().iter().all(|e| e.rx_drained()) {
                out.drained = true;
                break;
            }
        }
        if self.defer_flush && first == Deferred::SendFirst {
            // The loop may sleep now: what its turns left for an application's next post
            // (defer_flush) must not wait for that.
            self.flush(&mut self.state());
        }
        Ok(out)
    }

    /// How long until the output deferred for the application's next post
    /// ([`DeviceConfig::defer_flush`]) has waited `limit` (zero: it has), or `None` when
    /// nothing waits.
    pub(crate) fn deferred_due(&self, limit: Duration) -> Option<Duration> {
        let since = self.deferred_since.load(Ordering::Acquire);
        (since != 0).then(|| {
            self.clock
                .until(since.saturating_add(duration_to_micros(limit)))
        })
    }

    /// Whether the application has polled a CQ of this device within `grace`
    /// ([`DeviceConfig::app_turns`]; a poll that finds its CQ empty turns the device): the
    /// node's loop then keeps out of its way.
    pub(crate) fn app_polling(&self, grace: Duration) -> bool {
        if !self.app_turns {
            return false;
        }
        let at = self.app_polled.load(Ordering::Relaxed);
        at != 0 && self.clock.now().saturating_sub(at) <= duration_to_micros(grace)
    }

    /// Whether the application's CQ polls turn this device ([`DeviceConfig::app_turns`]).
    pub(crate) fn turned_by_app(&self) -> bool {
        self.app_turns
    }

    /// Notes an application's CQ poll of an [`DeviceConfig::app_turns`] device, whatever
    /// it finds, for the node's loop ([`Shared::app_polling`]).
    fn note_app_poll(&self) {
        self.app_polled
            .store(self.clock.now().max(1), Ordering::Relaxed);
    }

    /// An application's CQ poll on an [`DeviceConfig::app_turns`] device that found its CQ
    /// empty: one non-blocking turn unless another thread is turning the loop right now.
    fn app_turn(&self) -> io::Result<()> {
        if let Ok(mut rx) = self.rx.try_lock() {
            if self.turn(&mut rx, None)? {
                self.state().counters.app_turns += 1;
            }
        }
        Ok(())
    }

    /// How the node's loop should wait for this device: the [`PollMode`] its own loop thread
    /// had ([`Progress::Thread`]); `Blocking` for any other device.
    pub(crate) fn loop_mode(&self) -> PollMode {
        match self.progress {
            Progress::Thread(m) => m,
            Progress::Inline => PollMode::Blocking,
        }
    }

    /// How long the node's loop may sleep: until the node's next timer, at most `tick`;
    /// the deadline is published to `devices` so that a command moving a timer earlier
    /// wakes the loop ([`Shared::kick_loop`]).
    pub(crate) fn arm_node_loop_deadline(
        &self,
        devices: &[Arc<Shared>],
        tick: Duration,
    ) -> Duration {
        let now = self.clock.now();
        let tick_us = duration_to_micros(tick);
        let next = self
            .state()
            .poll_timeout()
            .map(|t| t.total_micros())
            .unwrap_or(u64::MAX)
            .min(now.saturating_add(tick_us));
        for d in devices {
            d.loop_deadline.store(next, Ordering::Release);
        }
        self.clock.until(next)
    }

    /// The node's loop woke: no deadline to compare against until it sleeps again.
    pub(crate) fn disarm_node_loop_deadline(&self) {
        self.loop_deadline.store(u64::MAX, Ordering::Release);
    }

    /// Wakes blocking and async waiters.
    fn signal(&self) {
        self.waiters.signal();
    }

    /// Waits up to `d` with the state lock `st` (taken before the caller checked what it
    /// waits for, so a signal after that check sees this waiter counted). Returns the lock
    /// and whether the wait timed out.
    fn cv_wait<'a>(&self, st: MutexGuard<'a, State>, d: Duration) -> (MutexGuard<'a, State>, bool) {
        self.waiters.wait(st, d)
    }

    /// After a call that may have moved the stack's next timer earlier: wake the background
    /// loop if it sleeps towards a later deadline. Called with the state lock held.
    fn kick_loop(&self, st: &State) {
        if !matches!(self.progress, Progress::Thread(_)) {
            return;
        }
        let next = st
            .poll_timeout()
            .map(|t| t.total_micros())
            .unwrap_or(u64::MAX);
        // The loop never sleeps longer than LOOP_TICK, so a timer due later than its current
        // deadline needs no wake-up unless it is due more than TIMER_SLACK before it: posting an
        // RC message (which arms a 67 ms ACK timer) then costs no thread wake-up.
        if next.saturating_add(TIMER_SLACK_US) < self.loop_deadline.load(Ordering::Acquire) {
            self.wake_loop();
        }
    }

    /// After a command (a CM call, a QP modification): [`Shared::flush`], except on an
    /// inline device with defer_flush, which sends what commands queued when its thread next
    /// turns the loop (a turn starts with a flush). A thread that answers a thousand events
    /// before it waits again then puts a thousand REPs on the wire as a few GSO trains, not
    /// a thousand `sendmsg` calls; it turns the loop to learn the outcome, so nothing waits
    /// longer than that. Called with the state lock held.
    fn flush_command(&self, st: &mut State) {
        if !(self.defer_flush && self.defer_commands && self.progress == Progress::Inline) {
            self.flush(st);
        }
    }

    /// Sends everything the stack wants to send, as the GSO trains
    /// [`Stack::poll_transmit_batch`] builds (each train one `sendmsg`, never split: its
    /// segments are sealed for IPv4 IDs 0, 1, 2, …). Called with the state lock held.
    fn flush(&self, st: &mut State) {
        self.flush_from(st, true);
    }

    /// Sends what the port's transport has queued, and first (`mads`) what its MAD layer
    /// and the CM have.
    fn flush_from(&self, st: &mut State, mads: bool) {
        self.deferred_since.store(0, Ordering::Release);
        let now = self.now();
        let State {
            host,
            port,
            batch,
            tap,
            counters,
            ..
        } = st;
        batch.max_segments = if self.coalesce {
            self.ep.max_gso_segments()
        } else {
            1
        };
        let mut h = host.lock();
        loop {
            let n = match mads {
                true => h.node.poll_transmit_batch(now, *port, batch),
                false => port_stack(&mut h.node, *port).poll_transmit_batch(now, batch),
            };
            let stack = port_stack(&mut h.node, *port);
            self.send_trains(batch, stack.verbs.mr_table(), tap, counters);
            batch.clear();
            if n == 0 {
                break;
            }
        }
        if counters.pcap_errors > 0 {
            *tap = None;
        }
    }

    /// [`Shared::flush`] of what the port's transport has queued (ACKs, posted sends),
    /// leaving the MAD layer's queue for the next flush.
    fn flush_transport(&self, st: &mut State) {
        self.flush_from(st, false);
    }

    /// Sends the batch's trains, each one GSO send, as few syscalls as
    /// [`UdpEndpoint::send_many`] manages (one `sendmmsg` per run of trains with the same
    /// segment size); waits for send-buffer space up to [`SEND_BLOCK_LIMIT`], then drops
    /// (and counts) what is left.
    fn send_trains(
        &self,
        batch: &TransmitBatch,
        mrs: &MrTable,
        tap: &mut Option<Tap>,
        counters: &mut DriverCounters,
    ) {
        if batch.train_list().is_empty() {
            // Nothing to send (the flush at the start of each turn with defer_flush, once
            // per empty CQ poll on an app_turns device): no socket set, no vectors.
            return;
        }
        // Read, not cloned: this is every flush's path. Nothing below reads the set again
        // (a second read lock in one thread could wait behind a writer).
        let more = self.more.read().unwrap_or_else(|p| p.into_inner());
        if more.is_empty() {
            self.send_trains_on(&self.ep, true, batch, mrs, tap, counters);
            return;
        }
        // Several sockets: each train leaves on its source address's; one without is
        // counted and dropped, as on one socket.
        let eps: Vec<&UdpEndpoint> = std::iter::once(&*self.ep)
            .chain(more.iter().map(|e| &**e))
            .collect();
        for train in batch.train_list() {
            let served = eps.iter().any(|e| {
                e.local_addr().ip() == train.src_ip
                    && e.local_addr().is_ipv4() == train.dst.is_ipv4()
            });
            if !served {
                counters.tx_wrong_source += train.segments as u64;
            }
        }
        for ep in eps {
            self.send_trains_on(ep, false, batch, mrs, tap, counters);
        }
    }

    /// [`Shared::send_trains`] of the trains whose source is `ep`'s address (all of them
    /// when `ep` is the device's only socket: the others are counted as from a wrong
    /// source).
    fn send_trains_on(
        &self,
        ep: &UdpEndpoint,
        only: bool,
        batch: &TransmitBatch,
        mrs: &MrTable,
        tap: &mut Option<Tap>,
        counters: &mut DriverCounters,
    ) {
        let local = ep.local_addr();
        let mut ts = Vec::with_capacity(batch.train_list().len());
        let mut sent_trains = Vec::with_capacity(ts.capacity());
        let mut pieces = Vec::new();
        for train in batch.train_list() {
            if train.src_ip != local.ip() || train.dst.is_ipv4() != local.is_ipv4() {
                if only {
                    counters.tx_wrong_source += train.segments as u64;
                }
                continue;
            }
            pieces.clear();
            if !batch.train_slices(train, mrs, &mut pieces) {
                counters.tx_errors += train.segments as u64;
                continue;
            }
            ts.push(VectoredTransmit {
                destination: scoped(train.dst, local),
                parts: pieces.iter().map(|p| io::IoSlice::new(p)).collect(),
                len: train.len(),
                segment_size: train.gso_segment_size(),
                tos: train.tos,
            });
            sent_trains.push(train);
        }
        let deadline = StdInstant::now() + SEND_BLOCK_LIMIT;
        let mut done = 0;
        while done < ts.len() {
            // The tap records what a send carried at the time it was handed to the socket.
            let at = tap.is_some().then(std::time::SystemTime::now);
            match ep.send_many_vectored(&ts[done..]) {
                Ok(k) => {
                    if let Some(tap) = tap.as_mut() {
                        tap.stamp(at);
                    }
                    for (train, t) in sent_trains[done..done + k].iter().zip(&ts[done..done + k]) {
                        self.account_sent(local, train, &t.parts, tap, counters);
                    }
                    if let Some(tap) = tap.as_mut() {
                        tap.stamp(None);
                    }
                    done += k;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(StdInstant::now());
                    if left.is_zero() || ep.wait_writable(Some(left)).is_err() {
                        for train in &sent_trains[done..] {
                            counters.tx_dropped += train.segments as u64;
                        }
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    counters.tx_errors += sent_trains[done].segments as u64;
                    done += 1;
                }
            }
        }
    }

    fn account_sent(
        &self,
        local: SocketAddr,
        train: &Train,
        parts: &[io::IoSlice<'_>],
        tap: &mut Option<Tap>,
        counters: &mut DriverCounters,
    ) {
        counters.tx_sends += 1;
        counters.tx_datagrams += train.segments as u64;
        if let Some(tap) = tap.as_mut() {
            // The tap records datagrams whole: gather the train's pieces (only when
            // capturing).
            let mut bytes = Vec::with_capacity(train.len());
            for p in parts {
                bytes.extend_from_slice(p);
            }
            let seg = train.segment_size.max(1);
            for (k, d) in bytes.chunks(seg).enumerate() {
                if tap
                    .sent_tos(local, train.dst, k as u16, train.tos, d)
                    .is_err()
                {
                    counters.pcap_errors += 1;
                }
            }
            counters.pcap_packets = tap.packets;
        }
    }

    /// One turn of the loop. With `wait = None`, a non-blocking receive; with
    /// `Some((deadline, mode))`, waits as `mode` says until input, the stack's next timer,
    /// `deadline`, or a notification. Returns whether input or timers were handled.
    fn turn(&self, rx: &mut RxBufs, wait: Option<(Option<Micros>, PollMode)>) -> io::Result<bool> {
        self.turn_with(rx, wait, Deferred::SendFirst)
    }

    /// [`Shared::turn`], doing `first` with what earlier turns deferred.
    fn turn_with(
        &self,
        rx: &mut RxBufs,
        wait: Option<(Option<Micros>, PollMode)>,
        first: Deferred,
    ) -> io::Result<bool> {
        if self.defer_flush && first == Deferred::SendFirst {
            // What the previous turn left (DeviceConfig::defer_flush) goes out before waiting.
            self.flush(&mut self.state());
        }
        let RxBufs { storage, records } = rx;
        records.clear();
        let mut cm_events = false;
        let mut others = Vec::new();
        {
            let mut slices: Vec<IoSliceMut<'_>> =
                storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
            match wait {
                None => {
                    let mut n = self.ep.recv_batch_into(&mut slices, records)?;
                    let more = self.more.read().unwrap_or_else(|p| p.into_inner());
                    for ep in more.iter() {
                        if n < slices.len() {
                            n += ep.recv_batch_into(&mut slices[n..], records)?;
                        }
                    }
                }
                Some((user_deadline, mode)) => {
                    let stack_deadline = {
                        let st = self.state();
                        let d = st.poll_timeout().map(|t| t.total_micros());
                        let d = match (d, user_deadline) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                        self.loop_deadline
                            .store(d.unwrap_or(u64::MAX), Ordering::Release);
                        d
                    };
                    let eps = self.endpoints();
                    let got = if eps.len() == 1 {
                        wait_for_input(&self.ep, &mut slices, &self.clock, stack_deadline, mode)?
                    } else {
                        let eps: Vec<&UdpEndpoint> = eps.iter().map(|e| &**e).collect();
                        wait_for_input_any(&eps, &mut slices, &self.clock, stack_deadline, mode)?
                    };
                    match got {
                        Input::Datagrams(got) => records.extend(got),
                        Input::Deadline | Input::Woken => {}
                    }
                    self.loop_deadline.store(u64::MAX, Ordering::Release);
                }
            }
        }
        let received_at = std::time::SystemTime::now();
        let now = self.now();
        let mut st = self.state();
        let mut worked = !records.is_empty();
        if let Some(tap) = st.tap.as_mut() {
            // The batch's records carry the time the receive returned.
            tap.stamp(Some(received_at));
        }
        // The node's call order: each datagram through the transport, QP1, the MAD layer
        // and the CM within its handle_datagram (a REQ is a CONNECT_REQUEST, or refused,
        // when it returns; QP1's buffers are reposted as each MAD is taken), then the
        // timers due.
        let events_before;
        {
            let State {
                host,
                port,
                tap,
                counters,
                ..
            } = &mut *st;
            let mut h = host.lock();
            events_before = h.node.rdma().queued_events();
            for (rec, buf) in records.iter().zip(storage.iter()) {
                counters.rx_records += 1;
                let dst = SocketAddr::new(rec.dst_ip.unwrap_or(self.local.ip()), self.local.port());
                for seg in rec.segments(buf) {
                    counters.rx_datagrams += 1;
                    if let Some(tap) = tap.as_mut() {
                        if tap.received(rec.src, dst, seg).is_err() {
                            counters.pcap_errors += 1;
                        }
                    }
                    if self.rx_drop.as_ref().is_some_and(|f| (f.0)(rec.src, seg)) {
                        counters.rx_filtered += 1;
                        continue;
                    }
                    h.node
                        .handle_datagram_ecn(now, *port, rec.src, dst.ip(), seg, rec.ecn);
                }
            }
            if h.node.poll_timeout().is_some_and(|t| t <= now) {
                h.node.handle_timeout(now);
                worked = true;
            }
            if worked {
                h.after_input(now);
            }
            if h.node.rdma().queued_events() != events_before {
                cm_events = true;
            }
            if worked {
                others = host.others_with_sends(&h, *port);
            }
        }
        if let Some(tap) = st.tap.as_mut() {
            tap.stamp(None);
        }
        if let Some(tap) = st.tap.as_ref() {
            st.counters.pcap_packets = tap.packets;
        }
        if st.counters.pcap_errors > 0 {
            st.tap = None;
        }
        if !self.defer_flush {
            self.flush(&mut st);
        } else if worked && self.deferred_since.load(Ordering::Relaxed) == 0 {
            // What this turn queued waits for the next post or turn; the node's loop sends
            // it once it is old (Shared::deferred_due).
            self.deferred_since
                .store(self.clock.now().max(1), Ordering::Release);
        }
        if worked {
            st.counters.turns += 1;
        }
        let clients = st.clients.clone();
        let host = cm_events.then(|| st.host.clone());
        drop(st);
        for c in clients.iter() {
            c.end_turn();
        }
        if worked {
            self.signal();
        }
        if let Some(h) = host {
            h.signal();
        }
        for d in others {
            d.wake_loop();
        }
        Ok(worked)
    }

    /// One datagram that arrived on another socket of this device (a multicast group's,
    /// `crate::mcast`), handled as a turn of the loop handles one: through the node, then
    /// the flush and the wake-ups.
    pub(crate) fn inject(&self, src: SocketAddr, dst: IpAddr, data: &[u8]) {
        let now = self.now();
        let mut st = self.state();
        let cm_events;
        let others;
        {
            let State {
                host,
                port,
                tap,
                counters,
                ..
            } = &mut *st;
            counters.rx_records += 1;
            counters.rx_datagrams += 1;
            if let Some(tap) = tap.as_mut() {
                tap.stamp(Some(std::time::SystemTime::now()));
                if tap
                    .received(src, SocketAddr::new(dst, self.local.port()), data)
                    .is_err()
                {
                    counters.pcap_errors += 1;
                }
                tap.stamp(None);
            }
            let mut h = host.lock();
            let before = h.node.rdma().queued_events();
            h.node.handle_datagram(now, *port, src, dst, data);
            h.after_input(now);
            cm_events = h.node.rdma().queued_events() != before;
            others = host.others_with_sends(&h, *port);
        }
        self.flush(&mut st);
        st.counters.turns += 1;
        let clients = st.clients.clone();
        let host = cm_events.then(|| st.host.clone());
        drop(st);
        for c in clients.iter() {
            c.end_turn();
        }
        self.signal();
        if let Some(h) = host {
            h.signal();
        }
        for d in others {
            // A failed eventfd write leaves it to that loop's next tick.
            let _ = d.ep.notifier().notify();
        }
    }

    /// Runs one non-blocking turn unless another thread is driving the loop right now.
    fn turn_inline(&self) -> io::Result<()> {
        if let Ok(mut rx) = self.rx.try_lock() {
            self.turn(&mut rx, None)?;
        }
        Ok(())
    }

    fn run_background(self: Arc<Self>, mode: PollMode) {
        let mut rx = lock(&self.rx);
        let tick = duration_to_micros(LOOP_TICK);
        // Until the node's loop takes the device over (crate::node_loop).
        while !self.shutdown.load(Ordering::Acquire) && !self.on_node_loop() {
            let until = self.clock.now().saturating_add(tick);
            if let Err(e) = self.turn(&mut rx, Some((Some(until), mode))) {
                // A socket error that is not about one datagram (EBADF, ENOMEM): report once
                // a second at most and keep going; the device stays usable for queries.
                eprintln!("softrdma {}: event loop: {e}", self.name);
                std::thread::sleep(Duration::from_millis(1000));
            }
        }
    }

    fn poll_cq_locked(&self, cq: CqId, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        Ok(self.with_stack(|s| s.verbs.poll_cq_into(cq, out, max))?)
    }
}

/// Stops the background loop when the last [`Device`] handle goes away.
struct LoopGuard {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for LoopGuard {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        let _ = self.shared.ep.notifier().notify();
        if let Some(t) = lock(&self.thread).take() {
            // The last clone may go on the loop thread itself (a handler holding one): it
            // ends by itself once it sees `shutdown`; joining itself would panic (EDEADLK).
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        // What a deferred flush left (DeviceConfig::defer_flush) leaves before the socket
        // closes.
        self.shared.flush(&mut self.shared.state());
        if let Some(tap) = self.shared.state().tap.as_mut() {
            let _ = tap.flush();
        }
    }
}

/// A softrdma device: the blocking verbs API over one UDP endpoint (see the module docs).
/// Cheap to clone; the loop stops when the last clone is dropped.
#[derive(Clone)]
pub struct Device {
    shared: Arc<Shared>,
    _guard: Arc<LoopGuard>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.shared.name)
            .field("local", &self.shared.local)
            .field("progress", &self.shared.progress)
            .finish()
    }
}

impl Device {
    /// Opens a device on `ip` (binds `<ip>:4791`) with the default configuration: a
    /// background loop, blocking waits.
    pub fn open(ip: IpAddr) -> Result<Device> {
        Device::open_with(DeviceConfig::new(ip))
    }

    /// Opens a device.
    pub fn open_with(config: DeviceConfig) -> Result<Device> {
        let ep =
            UdpEndpoint::bind_with(SocketAddr::new(config.ip, ROCE_V2_PORT), &config.endpoint)?;
        let local = ep.local_addr();
        let mut more = Vec::new();
        for &ip in &config.more_ips {
            if ip == config.ip || more.iter().any(|e: &UdpEndpoint| e.local_addr().ip() == ip) {
                continue;
            }
            if let Some(e) = bind_more(ip, local.port(), config.scope_id, &config.endpoint)? {
                ep.watch_also(&e)?;
                more.push(e);
            }
        }
        let addrs = std::iter::once(config.ip)
            .chain(more.iter().map(|e| e.local_addr().ip()))
            .collect();
        let mut core_cfg = softrdma_core::DeviceConfig::new(config.name.clone(), addrs)
            .with_netdev_mtu(config.netdev_mtu)
            .with_max_qp(config.max_qp);
        core_cfg.mac = config.mac;
        let mut stack = Stack::new(core_cfg, config.seed);
        // Everything leaves from the one socket: seal for its source port (the core's default
        // is rxe's per-QP port, which a single socket cannot send from).
        stack.set_udp_src_port(Some(local.port()));
        // QP1 exists from the start, as on an rxe port, and the CM runs on it (as on any
        // kernel port): the device is the one port of a node of its own until a Cm takes
        // it into the Cm's.
        let mut node = Node::new(private_cm_config(config.seed)).map_err(node_error)?;
        let port = node
            .add_port(stack, config.qp1_recv_depth)
            .map_err(node_error)?;
        let host = Arc::new(Host::new(node, true));
        let max_segs = ep.max_gso_segments();
        let max_train = if local.is_ipv6() {
            MAX_UDP_PAYLOAD_V6
        } else {
            MAX_UDP_PAYLOAD_V4
        };
        let tap = match &config.pcap {
            Some(p) => Some(Tap::create(p)?),
            None => None,
        };
        let shared = Arc::new(Shared {
            ep: Arc::new(ep),
            more: std::sync::RwLock::new(more.into_iter().map(Arc::new).collect()),
            scope_id: config.scope_id,
            endpoint_config: config.endpoint.clone(),
            clock: Clock::process(),
            local,
            name: config.name,
            progress: config.progress,
            wait: config.wait,
            coalesce: config.gso_coalesce,
            rx_drop: config.rx_drop,
            defer_flush: config.defer_flush,
            defer_commands: config.defer_commands,
            state: Mutex::new(State {
                host: host.clone(),
                port,
                clients: Arc::new(Vec::new()),
                tap,
                counters: DriverCounters::default(),
                // Payloads go to the socket from their MRs (the kernel's copy is the only
                // one): copying each into the batch first was a third of the sending
                // thread's time at 1 MiB.
                batch: {
                    let mut b = TransmitBatch::new(max_segs, max_train);
                    b.in_place = true;
                    b
                },
            }),
            rx: Mutex::new(RxBufs::new(RECV_BATCH)),
            waiters: Waiters::default(),
            shutdown: AtomicBool::new(false),
            loop_deadline: AtomicU64::new(u64::MAX),
            on_node_loop: AtomicBool::new(false),
            node_notifier: std::sync::OnceLock::new(),
            app_turns: config.app_turns && matches!(config.progress, Progress::Thread(_)),
            app_polled: AtomicU64::new(0),
            deferred_since: AtomicU64::new(0),
        });
        host.add_device(Arc::downgrade(&shared), port);
        let thread = match config.progress {
            Progress::Thread(mode) => {
                let s = shared.clone();
                Some(
                    std::thread::Builder::new()
                        .name(format!("softrdma-{}", config.ip))
                        .spawn(move || s.run_background(mode))?,
                )
            }
            Progress::Inline => None,
        };
        let guard = Arc::new(LoopGuard {
            shared: shared.clone(),
            thread: Mutex::new(thread),
        });
        Ok(Device {
            shared,
            _guard: guard,
        })
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The endpoint's address (`<ip>:4791`).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local
    }

    /// Every address the device serves (`<ip>:4791` first, then the
    /// [`DeviceConfig::more_ips`] it could bind), one socket each.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.shared
            .endpoints()
            .iter()
            .map(|e| e.local_addr())
            .collect()
    }

    /// An address the interface gained (`ip addr add`; rxe learns it from a netdev
    /// event): the device binds a socket on it, watched by the loop that runs the device,
    /// and its GID joins the table in the first free index, where a QP's `sgid_index` and
    /// the RDMA CM find it. `Ok(false)` when the device serves it already, or cannot bind it
    /// (another process holds it; not an address of this host).
    pub fn add_address(&self, ip: IpAddr) -> Result<bool> {
        let sh = &self.shared;
        if sh.local.ip() == ip {
            // The first address came back: its socket never closed; its GID returns.
            let st = sh.state();
            let mut h = st.host.lock();
            return h.node.port_address(st.port, ip, true).map_err(node_error);
        }
        if sh.endpoints().iter().any(|e| e.local_addr().ip() == ip) {
            return Ok(false);
        }
        let Some(e) = bind_more(ip, sh.local.port(), sh.scope_id, &sh.endpoint_config)? else {
            return Ok(false);
        };
        // The device's own loop watches it (until the node's takes the device over) …
        sh.ep.watch_also(&e)?;
        let e = Arc::new(e);
        sh.more
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(e.clone());
        // … and so does the node's loop, once it runs the device (a device handed to it
        // meanwhile had the socket registered with the others: that is no error).
        if sh.on_node_loop() {
            let (host, _) = sh.host();
            match host.watch_socket(std::os::fd::AsRawFd::as_raw_fd(e.socket())) {
                Err(err) if err.kind() != io::ErrorKind::AlreadyExists => return Err(err.into()),
                _ => {}
            }
        }
        let st = sh.state();
        let changed = st
            .host
            .lock()
            .node
            .port_address(st.port, ip, true)
            .map_err(node_error)?;
        Ok(changed)
    }

    /// An address the interface lost: its GID leaves the table (its index stays empty
    /// until another address takes it; the other GIDs keep theirs) and, for a further
    /// address, its socket closes (a datagram in flight to it is lost, as on rxe). The
    /// device's first address keeps its socket until the device closes (the loop waits on
    /// it) but leaves the table all the same. `Ok(false)` when the device did not serve it.
    pub fn remove_address(&self, ip: IpAddr) -> Result<bool> {
        let sh = &self.shared;
        let gone = {
            let mut more = sh.more.write().unwrap_or_else(|p| p.into_inner());
            let k = more.iter().position(|e| e.local_addr().ip() == ip);
            k.map(|k| more.remove(k))
        };
        if gone.is_none() && sh.local.ip() != ip {
            return Ok(false);
        }
        // Closing the socket (its last reference: a turn may hold one a moment longer)
        // takes it out of every epoll set.
        drop(gone);
        let st = sh.state();
        let changed = st
            .host
            .lock()
            .node
            .port_address(st.port, ip, false)
            .map_err(node_error)?;
        Ok(changed)
    }

    /// The device's clock (what the stack and the CM are given as `now`).
    pub fn now(&self) -> Instant {
        self.shared.now()
    }

    /// Where the event loop runs.
    pub fn progress(&self) -> Progress {
        self.shared.progress
    }

    /// Whether the application's CQ polls turn the loop too ([`DeviceConfig::app_turns`]).
    pub fn app_turns(&self) -> bool {
        self.shared.app_turns
    }

    /// Attaches a management class to QP1 (see [`crate::mad`]): `register` runs under the
    /// device lock to register the client's agents on the MAD layer and build the client.
    pub fn attach_mad_client<C: MadClient + 'static, E>(
        &self,
        register: impl FnOnce(&mut MadAgent, &Stack) -> std::result::Result<Arc<C>, E>,
    ) -> std::result::Result<Arc<C>, E> {
        let mut st = self.shared.state();
        let port = st.port;
        let mut client = None;
        st.host
            .lock()
            .node
            .attach_class(port, |mad, stack| {
                register(mad, stack).map(|c| {
                    client = Some(c.clone());
                    Box::new(ClientClass(c)) as Box<dyn MadClass>
                })
            })
            .unwrap_or_else(|_| unreachable!("a device's port is in its host's node"))?;
        let c = client.unwrap_or_else(|| unreachable!("attached above"));
        Arc::make_mut(&mut st.clients).push(c.clone());
        Ok(c)
    }

    /// Wakes the background loop (if any) for a turn.
    pub fn wake(&self) {
        self.shared.wake_loop();
    }

    /// Runs `f` with the stack and the MAD layer under the device lock, as a client does
    /// in the loop, then puts what it queued on QP1 and the wire.
    pub fn with_mad<R>(&self, f: impl FnOnce(&mut PortCtx<'_>) -> R) -> R {
        let mut st = self.shared.state();
        let now = self.shared.now();
        let port = st.port;
        let r = st
            .host
            .lock()
            .node
            .with_mad(now, port, f)
            .unwrap_or_else(|_| unreachable!("a device's port is in its host's node"));
        self.shared.flush_command(&mut st);
        self.shared.kick_loop(&st);
        drop(st);
        self.shared.signal();
        r
    }

    /// The MAD layer's counters, QP1's send/receive errors, and MADs for agents no
    /// attached client owns.
    pub fn mad_counters(&self) -> (MadCounters, (u64, u64), u64) {
        let st = self.shared.state();
        let h = st.host.lock();
        let orphaned = h.node.counters().orphaned_mads;
        match h.node.mad(st.port) {
            Some(m) => (*m.agent().counters(), m.errors(), orphaned),
            None => (MadCounters::default(), (0, 0), orphaned),
        }
    }

    /// Runs `f` on the stack under its lock, then sends what it queued (the escape hatch for
    /// verbs this type does not wrap; an inline device with defer_flush sends it when its
    /// loop next turns, as for every command).
    pub fn with_stack<R>(&self, f: impl FnOnce(&mut Stack) -> R) -> R {
        self.shared.command(f)
    }

    // ----- queries -----

    /// `ibv_query_device`.
    pub fn query_device(&self) -> DeviceAttr {
        self.shared.with_stack(|s| s.device.query_device().clone())
    }

    /// `ibv_query_port` (port 1 is the only port).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        Ok(self
            .shared
            .with_stack(|s| s.device.query_port(port).cloned())?)
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: u16) -> Result<GidEntry> {
        Ok(self
            .shared
            .with_stack(|s| s.device.query_gid(port, index))?)
    }

    /// The whole GID table of port 1.
    pub fn gid_table(&self) -> Vec<GidEntry> {
        self.shared.with_stack(|s| {
            s.device
                .port(PORT_NUM)
                .map(|p| p.gids.entries().to_vec())
                .unwrap_or_default()
        })
    }

    /// The index of the RoCEv2 GID of the device's own IP address (1 with the default MAC).
    pub fn ip_gid_index(&self) -> Option<u16> {
        let ip = self.shared.local.ip();
        self.shared.with_stack(|s| {
            s.device
                .find_gid(PORT_NUM, &softrdma_wire::Gid::from_ip(ip), GidType::RoceV2)
                .ok()
        })
    }

    /// The stack's counters (`rdma statistic show`: drops by reason, packets).
    pub fn counters(&self) -> Counters {
        self.shared.with_stack(|s| s.counters().clone())
    }

    /// The driver's own counters.
    pub fn driver_counters(&self) -> DriverCounters {
        self.shared.state().counters
    }

    // ----- objects -----

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<PdId> {
        Ok(self.shared.with_stack(|s| s.verbs.alloc_pd())?)
    }

    /// `ibv_dealloc_pd`.
    pub fn dealloc_pd(&self, pd: PdId) -> Result<()> {
        Ok(self.shared.with_stack(|s| s.verbs.dealloc_pd(pd))?)
    }

    /// `ibv_reg_mr`: `bytes` move into the device, addressed from `iova`; read and write them
    /// with [`Device::read_mr`], [`Device::write_mr`], [`Device::with_mr`], get them back
    /// with [`Device::dereg_mr`].
    pub fn reg_mr(
        &self,
        pd: PdId,
        bytes: impl Into<Memory>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys> {
        Ok(self
            .shared
            .with_stack(|s| s.verbs.reg_mr_with(pd, bytes, iova, access))?)
    }

    /// `ibv_dereg_mr`: returns the region's bytes.
    pub fn dereg_mr(&self, lkey: u32) -> Result<Memory> {
        Ok(self.shared.with_stack(|s| s.verbs.dereg_mr(lkey))?)
    }

    /// Copies bytes out of a region (`addr` in the region's iova space).
    pub fn read_mr(&self, lkey: u32, addr: u64, out: &mut [u8]) -> Result<()> {
        Ok(self
            .shared
            .with_stack(|s| s.verbs.local_read(lkey, addr, out))?)
    }

    /// Copies bytes into a region.
    pub fn write_mr(&self, lkey: u32, addr: u64, data: &[u8]) -> Result<()> {
        Ok(self
            .shared
            .with_stack(|s| s.verbs.local_write(lkey, addr, data))?)
    }

    /// Runs `f` on a region under the stack lock (no copy).
    pub fn with_mr<R>(&self, lkey: u32, f: impl FnOnce(&mut Mr) -> R) -> Result<R> {
        Ok(self.shared.with_stack(|s| s.verbs.mr_mut(lkey).map(f))?)
    }

    /// `ibv_create_cq`.
    pub fn create_cq(&self, cqe: u32) -> Result<CqId> {
        Ok(self.shared.with_stack(|s| s.verbs.create_cq(cqe))?)
    }

    /// How many completions were ever added to `cq` (a completion channel's "new since
    /// armed" check). Takes the lock briefly and wakes nobody.
    pub fn cq_completions_added(&self, cq: CqId) -> Result<u64> {
        Ok(self
            .shared
            .with_stack(|s| s.verbs.cq(cq).map(|c| c.completions_added()))?)
    }

    /// `ibv_destroy_cq`.
    pub fn destroy_cq(&self, cq: CqId) -> Result<()> {
        Ok(self.shared.with_stack(|s| s.verbs.destroy_cq(cq))?)
    }

    /// `ibv_create_qp`: the QP number and the capabilities granted.
    pub fn create_qp(&self, init: QpInitAttr) -> Result<(u32, QpCap)> {
        Ok(self.shared.with_stack(|s| s.verbs.create_qp(init))?)
    }

    /// `ibv_modify_qp`.
    pub fn modify_qp(&self, qpn: u32, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        Ok(self.shared.command(|s| s.modify_qp(qpn, attr, mask))?)
    }

    /// `ibv_query_qp`: the QP's current attributes and state.
    pub fn query_qp(&self, qpn: u32) -> Result<QpAttr> {
        Ok(self.shared.with_stack(|s| {
            s.verbs.qp(qpn).map(|qp| {
                let mut a = *qp.attr();
                a.qp_state = qp.state();
                a.cur_qp_state = qp.state();
                a
            })
        })?)
    }

    /// `ibv_destroy_qp`. What the QP's last turns left to send (with
    /// [`DeviceConfig::defer_flush`]: the ACK of the last message received, which a
    /// ping-pong that ends sends with no further post) leaves first: destroyed, the QP would
    /// take it along, and the peer would retry its last message until it fails.
    pub fn destroy_qp(&self, qpn: u32) -> Result<()> {
        if self.shared.defer_flush {
            // The transport's queue only: the MADs the CM queued (a server's DREP for the
            // DREQ that made it destroy this QP) leave with the rest of the turn's, one
            // train, instead of one sendmmsg per destroyed QP (perf cm's server spent a
            // tenth of its rate run's samples in those).
            self.shared.flush_transport(&mut self.shared.state());
        }
        Ok(self.shared.with_stack(|s| s.destroy_qp(qpn))?)
    }

    // ----- data path -----

    /// `ibv_post_send`: the first packets leave from this thread before it returns.
    pub fn post_send(&self, qpn: u32, wr: SendWr) -> Result<()> {
        let mut st = self.shared.state();
        {
            let mut h = st.host.lock();
            port_stack(&mut h.node, st.port).post_send(qpn, wr)?;
        }
        self.shared.flush(&mut st);
        self.shared.kick_loop(&st);
        drop(st);
        // A UD send (or a failed one) may have completed already.
        self.shared.signal();
        Ok(())
    }

    /// The next asynchronous event of the device's verbs objects (`ibv_get_async_event`'s
    /// source: QP fatal, SQ drained, last WQE, SRQ limit, CQ overrun). Wakes nobody.
    pub fn poll_async_event(&self) -> Option<softrdma_core::verbs::AsyncEvent> {
        self.shared.with_stack(|s| s.verbs.poll_event())
    }

    /// `ibv_post_srq_recv`.
    pub fn post_srq_recv(&self, srq: SrqId, wr: RecvWr) -> Result<()> {
        Ok(self.shared.with_stack(|s| s.verbs.post_srq_recv(srq, wr))?)
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&self, qpn: u32, wr: RecvWr) -> Result<()> {
        Ok(self.shared.with_stack(|s| s.post_recv(qpn, wr))?)
    }

    /// `ibv_poll_cq`: up to `max` completions appended to `out`, without waiting. With
    /// [`Progress::Inline`] it first runs one non-blocking loop turn; with
    /// [`DeviceConfig::app_turns`], one when the CQ was empty.
    pub fn poll_cq_into(
        &self,
        cq: CqId,
        out: &mut Vec<WorkCompletion>,
        max: usize,
    ) -> Result<usize> {
        if self.shared.progress == Progress::Inline {
            self.shared.turn_inline()?;
        } else if self.shared.app_turns {
            // What is already there first: a sender reaping a full CQ pays no receive
            // syscall per poll; an empty CQ turns the loop here, in the polling thread.
            let n = self.shared.poll_cq_locked(cq, out, max)?;
            if n == 0 {
                self.shared.app_turn()?;
            }
            let n = if n > 0 {
                n
            } else {
                self.shared.poll_cq_locked(cq, out, max)?
            };
            self.shared.note_app_poll();
            return Ok(n);
        }
        self.shared.poll_cq_locked(cq, out, max)
    }

    /// `ibv_poll_cq` returning a vector.
    pub fn poll_cq(&self, cq: CqId, max: usize) -> Result<Vec<WorkCompletion>> {
        let mut out = Vec::new();
        self.poll_cq_into(cq, &mut out, max)?;
        Ok(out)
    }

    /// Waits until `cq` has at least one completion (or `timeout` passes: `Ok(0)`), then
    /// appends up to `max` to `out`. Waits as [`DeviceConfig::wait`] says: blocking, spinning,
    /// or spinning then blocking; with [`Progress::Inline`] the waiting thread runs the loop.
    pub fn wait_cq(
        &self,
        cq: CqId,
        out: &mut Vec<WorkCompletion>,
        max: usize,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.wait_cq_or(cq, out, max, timeout, &|| false)
    }

    /// [`Device::wait_cq`] that also returns (with 0) as soon as `stop()` is true, checked
    /// whenever the loop signals its waiters — e.g. when a CM event arrived on this device
    /// ([`crate::cm::Cm::has_event`]), so one thread can wait for completions and CM events
    /// together without naps.
    pub fn wait_cq_or(
        &self,
        cq: CqId,
        out: &mut Vec<WorkCompletion>,
        max: usize,
        timeout: Option<Duration>,
        stop: &dyn Fn() -> bool,
    ) -> Result<usize> {
        let start = StdInstant::now();
        let deadline = timeout.map(|t| start + t);
        match self.shared.progress {
            Progress::Inline => self.wait_inline(cq, out, max, deadline, stop),
            Progress::Thread(_) => self.wait_thread(cq, out, max, start, deadline, stop),
        }
    }

    fn wait_inline(
        &self,
        cq: CqId,
        out: &mut Vec<WorkCompletion>,
        max: usize,
        deadline: Option<StdInstant>,
        stop: &dyn Fn() -> bool,
    ) -> Result<usize> {
        let sh = &self.shared;
        let user_deadline = deadline.map(|d| sh.clock.from_std(d).saturating_add(1));
        loop {
            let n = sh.poll_cq_locked(cq, out, max)?;
            if n > 0 {
                return Ok(n);
            }
            if deadline.is_some_and(|d| StdInstant::now() >= d) || stop() {
                return Ok(0);
            }
            match sh.rx.try_lock() {
                Ok(mut rx) => {
                    sh.turn(&mut rx, Some((user_deadline, sh.wait)))?;
                }
                Err(_) => {
                    // Another thread is driving: wait for its signal a little.
                    let st = sh.state();
                    drop(sh.cv_wait(st, Duration::from_millis(1)));
                }
            }
        }
    }

    fn wait_thread(
        &self,
        cq: CqId,
        out: &mut Vec<WorkCompletion>,
        max: usize,
        start: StdInstant,
        deadline: Option<StdInstant>,
        stop: &dyn Fn() -> bool,
    ) -> Result<usize> {
        let sh = &self.shared;
        let spin_until = match sh.wait {
            PollMode::Blocking => None,
            PollMode::BusyPoll => {
                deadline.or_else(|| start.checked_add(Duration::from_secs(1 << 30)))
            }
            PollMode::SpinThenBlock(d) => Some(start + d),
        };
        loop {
            let mut st = sh.state();
            let n = {
                let mut h = st.host.lock();
                port_stack(&mut h.node, st.port)
                    .verbs
                    .poll_cq_into(cq, out, max)?
            };
            if n > 0 {
                return Ok(n);
            }
            let now = StdInstant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(0);
            }
            if stop() {
                return Ok(0);
            }
            if spin_until.is_some_and(|s| now < s) {
                drop(st);
                std::hint::spin_loop();
                continue;
            }
            let left = deadline.map(|d| d.saturating_duration_since(now));
            // Sleep for at most a second at a time so a lost signal costs little.
            let wait = left
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            let (g, _) = sh.cv_wait(st, wait);
            st = g;
            drop(st);
        }
    }

    /// Runs the loop for `d` in the caller's thread (inline devices: lets ACKs and
    /// retransmissions out while the application has nothing to poll). Returns at once on a
    /// background-loop device.
    pub fn progress_for(&self, d: Duration) -> Result<()> {
        if self.shared.progress != Progress::Inline {
            return Ok(());
        }
        let end = StdInstant::now() + d;
        let until = self.shared.clock.from_std(end);
        while StdInstant::now() < end {
            match self.shared.rx.try_lock() {
                Ok(mut rx) => {
                    self.shared
                        .turn(&mut rx, Some((Some(until), PollMode::Blocking)))?;
                }
                Err(_) => std::thread::sleep(Duration::from_micros(100)),
            }
        }
        self.flush();
        Ok(())
    }

    /// [`Progress::Inline`]: one turn of the loop that waits (as the device's [`PollMode`]
    /// says) until input, a timer or `until`; returns whether it handled anything. Returns
    /// at once if another thread is turning the loop, or for a threaded device.
    pub fn progress_until(&self, until: StdInstant) -> Result<bool> {
        if self.shared.progress != Progress::Inline {
            return Ok(false);
        }
        let deadline = self.shared.clock.from_std(until);
        match self.shared.rx.try_lock() {
            Ok(mut rx) => Ok(self
                .shared
                .turn(&mut rx, Some((Some(deadline), self.shared.wait)))?),
            Err(_) => Ok(false),
        }
    }

    /// [`Progress::Inline`]: one non-blocking turn of the loop.
    pub fn poll_once(&self) -> Result<()> {
        if self.shared.progress == Progress::Inline {
            self.shared.turn_inline()?;
        }
        Ok(())
    }

    /// Runs one turn of the loop in the caller's thread: waits as `mode` says (whatever
    /// [`DeviceConfig::wait`] is) until input, the stack's next timer, `timeout` or a
    /// [`Device::notifier`] wake-up, handles what came, sends what the stack has. Returns
    /// whether input or timers were handled. For an application that waits for something
    /// other than a completion (a peer's RDMA WRITE landing in memory). When another thread
    /// drives the loop (always, on a [`Progress::Thread`] device), waits up to `timeout`
    /// (at most a second) for that thread's next turn that handled something instead.
    pub fn progress_wait(&self, mode: PollMode, timeout: Option<Duration>) -> Result<bool> {
        let sh = &self.shared;
        let deadline = timeout.and_then(|t| StdInstant::now().checked_add(t));
        // A device on its node's loop is that loop's alone (its own loop thread held its
        // buffers for good; the node's takes them each turn): never turned from here.
        let rx = match sh.on_node_loop() {
            true => None,
            false => sh.rx.try_lock().ok(),
        };
        match rx {
            Some(mut rx) => {
                let until = deadline.map(|d| sh.clock.from_std(d).saturating_add(1));
                Ok(sh.turn(&mut rx, Some((until, mode)))?)
            }
            None => {
                let wait = timeout
                    .unwrap_or(Duration::from_secs(1))
                    .min(Duration::from_secs(1));
                let st = sh.state();
                let (st, timed_out) = sh.cv_wait(st, wait);
                drop(st);
                Ok(!timed_out)
            }
        }
    }

    /// Sends what the stack has queued now (with [`DeviceConfig::defer_flush`], what the last
    /// turn left).
    pub fn flush(&self) {
        self.shared.flush(&mut self.shared.state());
    }

    /// Wakes a thread sleeping in this device's loop from any thread: a
    /// [`Device::progress_wait`] returns (an inline [`Device::wait_cq`] re-checks its CQ and
    /// waits on).
    pub fn notifier(&self) -> crate::Notifier {
        self.shared.ep.notifier()
    }

    /// Congestion control and pacing on or off (`Stack::set_congestion_control`), and with
    /// it the reading of the ECN field of received datagrams (CE marks answered with CNPs;
    /// our RC packets are ECT(0) while it is on).
    pub fn set_congestion_control(&self, on: bool) -> Result<()> {
        self.with_stack(|s| s.set_congestion_control(on));
        self.shared.ep.set_recv_ecn(on)?;
        Ok(())
    }

    /// The endpoint's syscall counts (`recvmmsg`, `epoll_wait`, `sendmsg`).
    pub fn io_stats(&self) -> crate::udp::IoStats {
        self.shared.ep.io_stats()
    }

    /// Flushes the pcap file, if any.
    pub fn flush_pcap(&self) -> Result<()> {
        if let Some(t) = self.shared.state().tap.as_mut() {
            t.flush()?;
        }
        Ok(())
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

// ----- async -----

/// The async face of a [`Device`] (a thin wrapper): the same verbs, plus
/// [`AsyncDevice::poll_cq_wait`], a future that resolves when the CQ has completions.
///
/// The futures use only `std::task` (the loop thread wakes their `Waker`s), so they run on
/// any executor — tokio included — without the driver depending on one. Needs a device with
/// a background loop ([`Progress::Thread`]): an inline device has nobody to wake the future.
///
/// # From tokio
///
/// Nothing tokio-specific is needed: open the device with [`AsyncDevice::open`] (or wrap a
/// [`DeviceConfig::background`] device), clone it into the tasks that use it (it is
/// `Clone + Send + Sync`; clones share one device), and `.await`
/// [`AsyncDevice::poll_cq_wait`]. Both the multi-thread and the current-thread runtime work
/// (`tests/device.rs`: `tokio_*_rc_pingpong` run an RC ping-pong whose two ends are tokio tasks
/// that wait only there, every wait under a timeout):
///
/// - The wake-up comes from the device's loop thread, outside the runtime; tokio's `Waker`s
///   may be woken from any thread, so this needs no runtime handle and no `spawn_blocking`.
/// - `poll_cq_wait` is **cancel-safe**: completions leave the CQ only in the poll that returns
///   them, so dropping the future (`tokio::time::timeout`, a losing `tokio::select!` branch)
///   loses none; the next wait finds them.
/// - The verbs (`post_send`, `post_recv`, `reg_mr`, `modify_qp`, …) only take the stack's
///   mutex for a few microseconds and never wait for the network: call them directly from
///   async code. Do **not** call [`Device::wait_cq`] or [`Device::progress_for`] there: they
///   block the runtime thread.
/// - Each wake-up is a thread hand-off (loop thread → tokio worker). For the lowest ping-pong
///   latency, busy-poll an inline device ([`DeviceConfig::busy_poll`]) on a thread of its own
///   instead, as `ibv_rc_pingpong` without `-e` does.
///
/// ```no_run
/// # use softrdma_core::verbs::{CqId, SendWr, SendOp, Sge};
/// # use softrdma_driver::AsyncDevice;
/// # async fn run(dev: AsyncDevice, qpn: u32, cq: CqId, lkey: u32) -> softrdma_driver::device::Result<()> {
/// let wr = SendWr::new(1, SendOp::Send).with_sge(Sge { addr: 0x1000, length: 8, lkey });
/// dev.post_send(qpn, wr)?;
/// let wcs = tokio::time::timeout(std::time::Duration::from_secs(5), dev.poll_cq_wait(cq, 16))
///     .await
///     .expect("no completion in 5 s")?;
/// assert_eq!(wcs[0].wr_id, 1);
/// # Ok(()) }
/// # fn main() {
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
/// let dev = AsyncDevice::open("127.0.0.1".parse().unwrap()).unwrap();
/// // … alloc_pd / reg_mr / create_cq / create_qp / modify_qp via dev.device() …
/// # let (qpn, cq, lkey) = (0, todo!(), 0);
/// rt.block_on(run(dev.clone(), qpn, cq, lkey)).unwrap();
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncDevice {
    dev: Device,
}

impl AsyncDevice {
    /// Wraps a device whose loop runs on a background thread.
    pub fn new(dev: Device) -> Result<AsyncDevice> {
        if dev.progress() == Progress::Inline {
            return Err(Error::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "AsyncDevice needs a device with a background loop (Progress::Thread)",
            )));
        }
        Ok(AsyncDevice { dev })
    }

    /// Opens a device on `ip` with a background loop.
    pub fn open(ip: IpAddr) -> Result<AsyncDevice> {
        AsyncDevice::new(Device::open_with(DeviceConfig::new(ip).background())?)
    }

    /// The blocking device underneath (all the other verbs).
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Resolves with up to `max` completions once `cq` has any.
    pub async fn poll_cq_wait(&self, cq: CqId, max: usize) -> Result<Vec<WorkCompletion>> {
        CqWait {
            shared: self.dev.shared().clone(),
            cq,
            max,
        }
        .await
    }

    /// `ibv_post_send`.
    pub fn post_send(&self, qpn: u32, wr: SendWr) -> Result<()> {
        self.dev.post_send(qpn, wr)
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&self, qpn: u32, wr: RecvWr) -> Result<()> {
        self.dev.post_recv(qpn, wr)
    }
}

struct CqWait {
    shared: Arc<Shared>,
    cq: CqId,
    max: usize,
}

impl Future for CqWait {
    type Output = Result<Vec<WorkCompletion>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let st = self.shared.state();
        let mut out = Vec::new();
        let polled = {
            let mut h = st.host.lock();
            port_stack(&mut h.node, st.port)
                .verbs
                .poll_cq_into(self.cq, &mut out, self.max)
        };
        match polled {
            Err(e) => return Poll::Ready(Err(e.into())),
            Ok(n) if n > 0 => return Poll::Ready(Ok(out)),
            Ok(_) => {}
        }
        // Register while still holding the state lock: the loop signals after releasing it,
        // so a completion cannot slip between this check and the registration.
        self.shared.waiters.register(cx.waker());
        drop(st);
        Poll::Pending
    }
}

#[doc(hidden)]
pub fn _assert_send_sync() {
    fn ok<T: Send + Sync>() {}
    ok::<Device>();
    ok::<AsyncDevice>();
}
