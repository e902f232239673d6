//! The RoCEv2 UDP endpoint: one unconnected socket on `<ip>:4791` per device.
//!
//! Built on `quinn-udp` (quinn's socket layer: `sendmsg` with UDP GSO on send, `recvmmsg` with
//! UDP GRO on receive, `IP_PKTINFO` for the destination address) and `socket2`/`rustix` for the
//! options quinn-udp does not set the way RoCE needs them:
//!
//! - **Unconnected**: a connected UDP socket numbers its IPv4 IDs from a per-socket random
//!   counter; an unconnected one with DF set sends ID 0 (see `docs/measurements.md` for the
//!   measurements), and the ICRC covers the ID, so the sender must know it.
//! - **DF set** with `IP_MTU_DISCOVER = IP_PMTUDISC_DO` (and `IPV6_MTU_DISCOVER =
//!   IPV6_PMTUDISC_DO` + `IPV6_DONTFRAG` for IPv6): RoCE packets are never fragmented, an
//!   oversized send fails with `EMSGSIZE` instead. quinn-udp sets `PMTUDISC_PROBE`; we override
//!   it after quinn-udp's setup.
//! - **Large buffers**: 4 MiB each way by default, forced past `net.core.[rw]mem_max` where the
//!   process may (`SO_RCVBUFFORCE` needs `CAP_NET_ADMIN`), else clamped by the kernel.
//! - **Non-blocking**: every receive and send is non-blocking; the blocking variants wait for
//!   readiness with epoll (`mio`) and a timeout, so a wait never holds a syscall that batching
//!   would have to interrupt.
//! - **Lazy timer**: a receive wait with a timeout does not pass the timeout to `epoll_wait`.
//!   Each `epoll_wait(timeout)` arms and cancels a kernel hrtimer, and on the VMs we measure
//!   on that costs about 9 µs per sleep (two clock-event reprogrammings, VM exits): 8-byte
//!   ping-pong in event mode went from 44 to 26 µs without it. Instead a `timerfd` sits in
//!   the epoll set and is re-armed only when a deadline comes *earlier* than the one it holds;
//!   a deadline that moves later (an RC ACK timer pushed back by every ACK) leaves it alone,
//!   and its early expiry is one spurious wake-up per timeout period.

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use nix::sys::socket::sockopt as sockopt_nix;
use quinn_udp::{RecvMeta, UdpSockRef, UdpSocketState};
use rustix::net::sockopt::{self, Ipv4PathMtuDiscovery, Ipv6PathMtuDiscovery};
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};
use socket2::{Domain, Protocol, Socket, Type};

use crate::timer::Notifier;

/// The RoCEv2 UDP destination port (IANA "roce", IBTA Annex A17.2.1).
pub const ROCEV2_PORT: u16 = 4791;

/// The largest UDP payload of one IPv4 datagram (65535 - 20 IP - 8 UDP); a GSO send is one
/// datagram to the socket layer, so this bounds the bytes of one GSO transmit too.
pub const MAX_UDP_PAYLOAD_V4: usize = 65_507;
/// The largest UDP payload of one IPv6 datagram without jumbograms (65535 - 8 UDP).
pub const MAX_UDP_PAYLOAD_V6: usize = 65_527;

/// One `sendmmsg` carries at most this many messages (the kernel's UIO_MAXIOV is far above;
/// this bounds the per-call header arrays).
const GROUP: usize = 64;

/// One GSO send given as pieces the kernel gathers (headers from one buffer, payloads from
/// where they lie): `len` bytes in all, `segment_size` as in [`Transmit`].
#[derive(Debug)]
pub struct VectoredTransmit<'a> {
    pub destination: SocketAddr,
    pub parts: Vec<io::IoSlice<'a>>,
    pub len: usize,
    pub segment_size: Option<usize>,
    pub tos: u8,
}

/// Most datagrams one `recvmmsg` returns (quinn-udp's batch size on Linux).
pub const RECV_BATCH: usize = quinn_udp::BATCH_SIZE;

const READ: Token = Token(0);
const WAKE: Token = Token(1);
const WRITE: Token = Token(2);
const TIMER: Token = Token(3);
/// Another endpoint's socket watched by this one's receive wait ([`UdpEndpoint::watch_also`]).
const OTHER: Token = Token(4);

/// One send: a datagram, or with `segment_size` several datagrams of that size (the last may be
/// shorter) to the same destination in one syscall (UDP GSO).
#[derive(Debug, Clone, Copy)]
pub struct Transmit<'a> {
    /// Where the datagrams go.
    pub destination: SocketAddr,
    /// The UDP payload(s), back to back.
    pub contents: &'a [u8],
    /// `Some(n)`: `contents` is `ceil(len / n)` datagrams of `n` bytes each (the last may be
    /// shorter). `None`: one datagram.
    pub segment_size: Option<usize>,
    /// The IPv4 TOS / IPv6 traffic class byte (DSCP and ECN) of every datagram: what rxe
    /// puts in the IP header from the QP's address vector. 0 by default.
    pub tos: u8,
}

impl<'a> Transmit<'a> {
    /// One datagram.
    pub fn single(destination: SocketAddr, contents: &'a [u8]) -> Self {
        Self {
            destination,
            contents,
            segment_size: None,
            tos: 0,
        }
    }

    /// Several datagrams of `segment_size` bytes (the last may be shorter), sent with GSO where
    /// the kernel offers it.
    pub fn segmented(destination: SocketAddr, contents: &'a [u8], segment_size: usize) -> Self {
        Self {
            destination,
            contents,
            segment_size: Some(segment_size),
            tos: 0,
        }
    }

    /// The same datagrams with IP TOS (traffic class) `tos`.
    pub fn with_tos(mut self, tos: u8) -> Self {
        self.tos = tos;
        self
    }

    /// How many datagrams this transmit puts on the wire.
    pub fn datagrams(&self) -> usize {
        match self.segment_size {
            Some(s) if s > 0 && self.contents.len() > s => self.contents.len().div_ceil(s),
            _ => 1,
        }
    }
}

/// What one receive buffer holds: one datagram, or with GRO several datagrams of
/// `segment_size` bytes from the same source (the last may be shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvDatagram {
    /// The sender's address.
    pub src: SocketAddr,
    /// The destination address of the datagram (`IP_PKTINFO` / `IPV6_PKTINFO`, or the bound
    /// address for an endpoint bound to one, which does not ask for them).
    pub dst_ip: Option<IpAddr>,
    /// Bytes in the buffer.
    pub len: usize,
    /// Size of each datagram in the buffer; equals `len` when GRO did not coalesce.
    pub segment_size: usize,
    /// The ECN field of the IP header (0 unless [`UdpEndpoint::set_recv_ecn`] asked for
    /// it; GRO only coalesces datagrams with the same TOS, so it holds for every segment).
    pub ecn: u8,
}

impl RecvDatagram {
    /// The individual datagrams in `buf` (the buffer this record describes).
    pub fn segments<'b>(&self, buf: &'b [u8]) -> std::slice::Chunks<'b, u8> {
        let data = buf.get(..self.len).unwrap_or(buf);
        data.chunks(self.segment_size.max(1))
    }

    /// How many datagrams the buffer holds.
    pub fn datagrams(&self) -> usize {
        if self.len == 0 {
            1
        } else {
            self.len.div_ceil(self.segment_size.max(1))
        }
    }

    fn from_meta(m: &RecvMeta) -> Self {
        Self {
            src: m.addr,
            dst_ip: m.dst_ip,
            len: m.len,
            segment_size: if m.stride == 0 { m.len } else { m.stride },
            ecn: m.ecn.map_or(0, |e| e as u8),
        }
    }
}

/// What the kernel offers this socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Most datagrams one GSO send may carry (1: no GSO). May drop to 1 at run time if the
    /// device refuses GSO (quinn-udp then falls back).
    pub max_gso_segments: usize,
    /// How many datagrams GRO may coalesce into one receive buffer (1: no GRO); size receive
    /// buffers to `segments × datagram size`.
    pub gro_segments: usize,
    /// Whether the IP layer may fragment our datagrams (false when DF could be set).
    pub may_fragment: bool,
    /// The receive buffer the kernel granted (the kernel reports twice the requested size).
    pub recv_buffer: usize,
    /// The send buffer the kernel granted.
    pub send_buffer: usize,
}

/// How to open an endpoint.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// `SO_RCVBUF` to ask for.
    pub recv_buffer: usize,
    /// `SO_SNDBUF` to ask for.
    pub send_buffer: usize,
    /// Use UDP GSO for segmented transmits when the kernel offers it (`false`: one `sendmsg`
    /// per datagram, for comparison). GRO is always requested (quinn-udp turns it on where the
    /// kernel has it; no safe API turns it off again).
    pub gso: bool,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        Self {
            recv_buffer: 4 << 20,
            send_buffer: 4 << 20,
            gso: true,
        }
    }
}

/// The syscalls an endpoint made (what `softrdma perf -v` prints per round trip).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Receive calls (`recvmmsg`).
    pub recv_calls: u64,
    /// Receive calls that found nothing queued.
    pub recv_empty: u64,
    /// Receive-side sleeps (`epoll_wait`).
    pub recv_waits: u64,
    /// Send calls (`sendmsg`; a GSO send is one).
    pub send_calls: u64,
    /// How the receive waits of a spinning loop ([`crate::PollMode::SpinThenBlock`]) went:
    /// whether a hop cost a spin or a sleeping thread's wake-up.
    pub spins: SpinStats,
}

/// What the spinning receive waits of one endpoint did ([`crate::timer::wait_for_input`]
/// with [`crate::PollMode::SpinThenBlock`]), one count per wait that found its socket empty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpinStats {
    /// Spun and found input, having kept its core.
    pub found: u64,
    /// Spun and lost its core to other threads (then slept; spinning backs off).
    pub lost: u64,
    /// Spun for the whole spin without input, then slept.
    pub expired: u64,
    /// Slept at once: spinning was backed off after a lost spin.
    pub backed_off: u64,
}

/// One spinning wait's outcome, for [`SpinStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpinOutcome {
    Found,
    Lost,
    Expired,
    BackedOff,
}

#[derive(Default)]
struct IoCounters {
    recv_calls: AtomicU64,
    recv_empty: AtomicU64,
    recv_waits: AtomicU64,
    send_calls: AtomicU64,
    spin_found: AtomicU64,
    spin_lost: AtomicU64,
    spin_expired: AtomicU64,
    spin_backed_off: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Whether a wait ended with data, a [`Notifier`] wake-up, or the timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// The socket has something to read (or to write, for [`UdpEndpoint::wait_writable`]).
    Ready,
    /// Another thread called [`Notifier::notify`].
    Woken,
    /// The timeout passed.
    TimedOut,
}

struct Waiter {
    poll: Poll,
    events: Events,
    /// The lazy timer (receive side only), see the module docs.
    timer: Option<LazyTimer>,
}

/// A `timerfd` in the waiter's epoll set and the deadline it is armed for.
pub(crate) struct LazyTimer {
    fd: OwnedFd,
    armed: Option<Instant>,
}

impl LazyTimer {
    /// The token its expirations carry.
    pub(crate) const TOKEN: Token = TIMER;

    /// A timer in `registry`'s epoll set, reported as [`LazyTimer::TOKEN`].
    pub(crate) fn new(registry: &mio::Registry) -> io::Result<Self> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        registry.register(&mut SourceFd(&fd.as_raw_fd()), TIMER, Interest::READABLE)?;
        Ok(Self { fd, armed: None })
    }

    /// Makes sure the timer fires no later than `deadline` (which is in the future).
    pub(crate) fn arm(&mut self, deadline: Instant, now: Instant) -> io::Result<()> {
        if self.armed.is_some_and(|a| a <= deadline) {
            return Ok(()); // fires earlier (or on time): the caller re-checks and waits again
        }
        // Relative: std's Instant is CLOCK_MONOTONIC but does not expose its timespec.
        let d = deadline
            .saturating_duration_since(now)
            .max(Duration::from_nanos(1));
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(d.subsec_nanos()),
            },
        };
        timerfd_settime(&self.fd, TimerfdTimerFlags::empty(), &spec)?;
        self.armed = Some(deadline);
        Ok(())
    }

    /// The timer fired: consume the expiration so the fd's readiness resets.
    pub(crate) fn fired(&mut self) {
        let mut buf = [0u8; 8];
        let _ = rustix::io::read(&self.fd, &mut buf);
        self.armed = None;
    }
}

impl Waiter {
    fn new() -> io::Result<Self> {
        Ok(Self {
            poll: Poll::new()?,
            events: Events::with_capacity(8),
            timer: None,
        })
    }

    /// Waits up to `timeout` (passed to `epoll_wait`); returns (socket ready, woken).
    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<(bool, bool)> {
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            // A signal: report nothing and let the caller re-check its deadline.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok((false, false)),
            Err(e) => return Err(e),
        }
        let mut ready = false;
        let mut woken = false;
        let mut fired = false;
        for ev in self.events.iter() {
            match ev.token() {
                WAKE => woken = true,
                TIMER => fired = true,
                _ => ready = true,
            }
        }
        if fired {
            if let Some(t) = self.timer.as_mut() {
                t.fired();
            }
        }
        Ok((ready, woken))
    }

    /// Waits until `deadline` (`None`: no limit) without giving `epoll_wait` a timeout: the
    /// lazy timer bounds the sleep (re-armed here if it fired for an earlier deadline).
    fn wait_until(&mut self, deadline: Option<Instant>) -> io::Result<(bool, bool)> {
        let Some(d) = deadline else {
            return self.wait(None);
        };
        loop {
            let now = Instant::now();
            if d <= now {
                return self.wait(Some(Duration::ZERO));
            }
            match self.timer.as_mut() {
                Some(t) => t.arm(d, now)?,
                None => return self.wait(Some(d - now)),
            }
            let (ready, woken) = self.wait(None)?;
            if ready || woken {
                return Ok((ready, woken));
            }
        }
    }
}

/// A RoCEv2 UDP endpoint: an unconnected, DF-set, non-blocking UDP socket with batched I/O.
///
/// All methods take `&self`: one thread may send while another receives.
pub struct UdpEndpoint {
    socket: UdpSocket,
    state: UdpSocketState,
    local: SocketAddr,
    /// The destination of every datagram when bound to one address (no `IP_PKTINFO` then).
    fixed_dst: Option<IpAddr>,
    gso: bool,
    reader: Mutex<Waiter>,
    writer: Mutex<Waiter>,
    notifier: Notifier,
    /// The last receive returned fewer records than it had buffers (the queue was empty) and
    /// no receive wait has returned since; see [`UdpEndpoint::rx_drained`].
    rx_drained: AtomicBool,
    io: IoCounters,
}

impl std::fmt::Debug for UdpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpEndpoint")
            .field("local", &self.local)
            .field("capabilities", &self.capabilities())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while waiting cannot leave the poll state inconsistent; keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl UdpEndpoint {
    /// Opens the RoCEv2 endpoint of a device: `ip:4791`, default configuration.
    pub fn bind(ip: IpAddr) -> io::Result<Self> {
        Self::bind_with(SocketAddr::new(ip, ROCEV2_PORT), &EndpointConfig::default())
    }

    /// Opens an endpoint on any address and port (port 0 picks one; tests use this to run in
    /// parallel without fighting over 4791).
    pub fn bind_with(addr: SocketAddr, config: &EndpointConfig) -> io::Result<Self> {
        let domain = Domain::for_address(addr);
        let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        if addr.is_ipv6() {
            // A device is one address family; never let a v6 socket see v4-mapped traffic.
            sock.set_only_v6(true)?;
        }
        set_buffer(&sock, config.recv_buffer, true);
        set_buffer(&sock, config.send_buffer, false);
        if !addr.is_ipv6() {
            // A UD send to a multicast GID leaves with rxe's TTL (the AH's hop limit, 64 from
            // the RDMA CM's join; seen in the lab's kernel-to-kernel mckey), not the socket
            // default of 1. The ICRC masks the TTL, so this is only what the wire shows.
            sock.set_multicast_ttl_v4(64)?;
        }
        sock.bind(&addr.into())?;
        let socket: UdpSocket = sock.into();

        // quinn-udp makes the socket non-blocking and turns on GRO, IP_PKTINFO/IPV6_RECVPKTINFO,
        // IPV6_DONTFRAG and PMTUDISC_PROBE.
        let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
        // Then DF the way RoCE wants it: PMTUDISC_DO (see the module docs).
        sockopt::set_ip_mtu_discover(socket.as_fd(), Ipv4PathMtuDiscovery::DO).or_else(|e| {
            if addr.is_ipv6() {
                Ok(()) // v6-only sockets may refuse the v4 option; IPV6_MTU_DISCOVER below rules.
            } else {
                Err(io::Error::from(e))
            }
        })?;
        if addr.is_ipv6() {
            sockopt::set_ipv6_mtu_discover(socket.as_fd(), Ipv6PathMtuDiscovery::DO)?;
            // Linux rxe sends RoCEv2 over IPv6 with UDP checksum 0 (RFC 6935 zero checksums
            // for tunnels; its own tunnel socket accepts them) and the kernel drops such
            // datagrams on any socket without UDP_NO_CHECK6_RX. Seen in the lab: the guest's
            // ibv_rc_pingpong over fd77::/64 sent every SEND with checksum 0x0000 and a socket
            // without the option never saw one.
            nix::sys::socket::setsockopt(&socket, UdpNoCheck6Rx, &true).map_err(io::Error::from)?;
        }

        // Control messages cost put_cmsg work per datagram in the kernel and parsing here
        // (about 0.5 µs per 8-byte round trip, both sides): quinn-udp asks for the TOS byte
        // (ECN), which RoCE does not use, and for the destination address, which a socket
        // bound to one address already knows.
        if addr.is_ipv6() {
            let _ = nix::sys::socket::setsockopt(&socket, sockopt_nix::Ipv6RecvTClass, &false);
        } else {
            let _ = nix::sys::socket::setsockopt(&socket, sockopt_nix::IpRecvTos, &false);
        }
        let fixed_dst = (!addr.ip().is_unspecified()).then(|| addr.ip());
        if fixed_dst.is_some() {
            let _ = if addr.is_ipv6() {
                nix::sys::socket::setsockopt(&socket, sockopt_nix::Ipv6RecvPacketInfo, &false)
            } else {
                nix::sys::socket::setsockopt(&socket, sockopt_nix::Ipv4PacketInfo, &false)
            };
        }

        let mut reader = Waiter::new()?;
        reader.timer = Some(LazyTimer::new(reader.poll.registry())?);
        // The writer's epoll watches the socket only while someone waits for room (see
        // `wait_writable`).
        let writer = Waiter::new()?;
        let fd = socket.as_raw_fd();
        reader
            .poll
            .registry()
            .register(&mut SourceFd(&fd), READ, Interest::READABLE)?;
        let notifier = Notifier::new(reader.poll.registry(), WAKE)?;
        let local = socket.local_addr()?;
        Ok(Self {
            socket,
            state,
            local,
            fixed_dst,
            gso: config.gso,
            reader: Mutex::new(reader),
            writer: Mutex::new(writer),
            notifier,
            rx_drained: AtomicBool::new(false),
            io: IoCounters::default(),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The underlying socket (for options this type does not wrap).
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// What the kernel offers: GSO segments, GRO, DF, buffer sizes.
    pub fn capabilities(&self) -> Capabilities {
        let sref = UdpSockRef::from(&self.socket);
        let recv_buffer = self.state.recv_buffer_size(sref).unwrap_or(0);
        let send_buffer = self
            .state
            .send_buffer_size(UdpSockRef::from(&self.socket))
            .unwrap_or(0);
        Capabilities {
            max_gso_segments: self.max_gso_segments(),
            gro_segments: self.state.gro_segments(),
            may_fragment: self.state.may_fragment(),
            recv_buffer,
            send_buffer,
        }
    }

    /// Most datagrams one GSO transmit may carry on this socket now (1 = no GSO).
    pub fn max_gso_segments(&self) -> usize {
        if self.gso {
            self.state.max_gso_segments().max(1)
        } else {
            1
        }
    }

    /// Whether received datagrams report their ECN field (`IP_RECVTOS` /
    /// `IPV6_RECVTCLASS`): on with congestion control (CE marks draw CNPs), off otherwise —
    /// the control message costs work per datagram on both sides of the syscall.
    pub fn set_recv_ecn(&self, on: bool) -> io::Result<()> {
        let r = if self.local.is_ipv6() {
            nix::sys::socket::setsockopt(&self.socket, sockopt_nix::Ipv6RecvTClass, &on)
        } else {
            nix::sys::socket::setsockopt(&self.socket, sockopt_nix::IpRecvTos, &on)
        };
        r.map_err(io::Error::from)
    }

    /// The syscalls made so far.
    pub fn io_stats(&self) -> IoStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        IoStats {
            recv_calls: get(&self.io.recv_calls),
            recv_empty: get(&self.io.recv_empty),
            recv_waits: get(&self.io.recv_waits),
            send_calls: get(&self.io.send_calls),
            spins: SpinStats {
                found: get(&self.io.spin_found),
                lost: get(&self.io.spin_lost),
                expired: get(&self.io.spin_expired),
                backed_off: get(&self.io.spin_backed_off),
            },
        }
    }

    /// Counts one spinning wait's outcome ([`IoStats::spins`]).
    pub(crate) fn count_spin(&self, outcome: SpinOutcome) {
        bump(match outcome {
            SpinOutcome::Found => &self.io.spin_found,
            SpinOutcome::Lost => &self.io.spin_lost,
            SpinOutcome::Expired => &self.io.spin_expired,
            SpinOutcome::BackedOff => &self.io.spin_backed_off,
        });
    }

    /// Whether the last receive drained the queue (it filled fewer buffers than it had) and no
    /// receive wait has returned since. Readiness is edge-triggered and anything arriving after
    /// that receive ends the next wait at once, so a blocking loop may go straight to the wait:
    /// one `recvmmsg` per wake-up instead of two ([`crate::timer::wait_for_input`] does).
    pub fn rx_drained(&self) -> bool {
        self.rx_drained.load(Ordering::Relaxed)
    }

    /// Forgets that the last receive drained the queue ([`UdpEndpoint::rx_drained`]): for a
    /// loop over several sockets whose wait returned through another endpoint's wait, or
    /// that had no buffer left to receive on this one.
    pub(crate) fn mark_undrained(&self) {
        self.rx_drained.store(false, Ordering::Relaxed);
    }

    /// Makes this endpoint's receive wait ([`UdpEndpoint::wait_readable`]) also end when
    /// `other`'s socket becomes readable, so one thread sleeps on several sockets (a device
    /// serving several addresses, one socket each; [`crate::timer::wait_for_input_any`]).
    /// `other` must outlive the watch: the loop that waits holds both.
    pub fn watch_also(&self, other: &UdpEndpoint) -> io::Result<()> {
        let fd = other.socket.as_raw_fd();
        lock(&self.reader)
            .poll
            .registry()
            .register(&mut SourceFd(&fd), OTHER, Interest::READABLE)
    }

    /// A handle other threads use to wake a thread blocked in a receive wait on this endpoint.
    pub fn notifier(&self) -> Notifier {
        self.notifier.clone()
    }

    fn max_payload(&self) -> usize {
        if self.local.is_ipv6() {
            MAX_UDP_PAYLOAD_V6
        } else {
            MAX_UDP_PAYLOAD_V4
        }
    }

    /// Sends one transmit, non-blocking. A segmented transmit larger than one GSO send may
    /// carry (segments or 64 KiB) is split into several sends, and sent datagram by datagram
    /// when GSO is off. Errors are the socket's (`WouldBlock` when the send buffer is full; a
    /// split transmit may then have been sent in part, which UDP's loss model absorbs).
    pub fn send(&self, t: &Transmit<'_>) -> io::Result<()> {
        let seg = match t.segment_size {
            Some(s) if s > 0 && t.contents.len() > s => s,
            _ => return self.send_one(t.destination, t.contents, None, t.tos),
        };
        // One send when it fits: by bytes and by segment count, the short last segment
        // included. A GSO train the core sealed (each segment's ICRC for its IPv4 ID, its
        // index in the train) must leave whole: split, the tail would restart at ID 0 and
        // every ICRC after the split would be wrong (a kernel peer drops them silently).
        let segments = t.contents.len().div_ceil(seg);
        if t.contents.len() <= self.max_payload() && segments <= self.max_gso_segments() {
            return self.send_one(t.destination, t.contents, Some(seg), t.tos);
        }
        let per_send = self.max_gso_segments().min(self.max_payload() / seg).max(1);
        for chunk in t.contents.chunks(per_send * seg) {
            let gso = (chunk.len() > seg).then_some(seg);
            self.send_one(t.destination, chunk, gso, t.tos)?;
        }
        Ok(())
    }

    fn send_one(
        &self,
        dst: SocketAddr,
        contents: &[u8],
        seg: Option<usize>,
        tos: u8,
    ) -> io::Result<()> {
        // An ECN codepoint alone (congestion control's ECT(0)) is what quinn-udp's own
        // control message carries; any other TOS needs the whole byte.
        if tos & !0b11 != 0 {
            return self.send_one_tos(dst, contents, seg, tos);
        }
        let tx = quinn_udp::Transmit {
            destination: dst,
            ecn: quinn_udp::EcnCodepoint::from_bits(tos),
            contents,
            segment_size: seg,
            src_ip: None,
        };
        bump(&self.io.send_calls);
        self.state.try_send(UdpSockRef::from(&self.socket), &tx)
    }

    /// A send with a TOS byte of its own: quinn-udp always puts an `IP_TOS` /
    /// `IPV6_TCLASS` control message holding only the ECN bits on its sends, so these go
    /// through `sendmsg` here, with the whole byte (and the GSO segment size).
    fn send_one_tos(
        &self,
        dst: SocketAddr,
        contents: &[u8],
        seg: Option<usize>,
        tos: u8,
    ) -> io::Result<()> {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, SockaddrStorage};
        use std::os::fd::AsRawFd;
        let iov = [io::IoSlice::new(contents)];
        let addr = SockaddrStorage::from(dst);
        let tclass = i32::from(tos);
        let seg16 = seg.map(|s| s.min(usize::from(u16::MAX)) as u16);
        let mut cmsgs = Vec::with_capacity(2);
        if dst.is_ipv4() {
            cmsgs.push(ControlMessage::Ipv4Tos(&tos));
        } else {
            cmsgs.push(ControlMessage::Ipv6TClass(&tclass));
        }
        if let Some(s) = seg16.as_ref() {
            cmsgs.push(ControlMessage::UdpGsoSegments(s));
        }
        bump(&self.io.send_calls);
        sendmsg(
            self.socket.as_raw_fd(),
            &iov,
            &cmsgs,
            MsgFlags::empty(),
            Some(&addr),
        )
        .map(|_| ())
        .map_err(io::Error::from)
    }

    /// Whether `t` leaves in one send (by bytes and by segment count): what [`Self::send`]
    /// would not split.
    fn fits_one_send(&self, t: &Transmit<'_>) -> bool {
        match t.segment_size {
            Some(s) if s > 0 && t.contents.len() > s => {
                t.contents.len() <= self.max_payload()
                    && t.contents.len().div_ceil(s) <= self.max_gso_segments()
            }
            _ => true,
        }
    }

    /// Sends `transmits` in order with as few syscalls as it can, non-blocking: consecutive
    /// transmits with the same GSO segment size and TOS leave in one `sendmmsg` (each
    /// message its own GSO send, so a sealed train is never split). Returns how many went
    /// out before the socket would block (`Err(WouldBlock)` only if none did); other errors
    /// end the call like [`Self::send_batch`].
    pub fn send_many(&self, transmits: &[Transmit<'_>]) -> io::Result<usize> {
        let key = |t: &Transmit<'_>| {
            let gso = t.segment_size.filter(|&s| s > 0 && t.contents.len() > s);
            (gso, t.tos)
        };
        let mut sent = 0;
        while sent < transmits.len() {
            let first = &transmits[sent];
            let k = key(first);
            let mut end = sent + 1;
            while end < transmits.len()
                && end - sent < GROUP
                && key(&transmits[end]) == k
                && self.fits_one_send(&transmits[end])
            {
                end += 1;
            }
            if end - sent == 1 || !self.fits_one_send(first) {
                match self.send(first) {
                    Ok(()) => sent += 1,
                    Err(e) if sent == 0 => return Err(e),
                    Err(_) => return Ok(sent),
                }
                continue;
            }
            let group = &transmits[sent..end];
            let dsts: Vec<SocketAddr> = group.iter().map(|t| t.destination).collect();
            let iovs: Vec<[io::IoSlice<'_>; 1]> = group
                .iter()
                .map(|t| [io::IoSlice::new(t.contents)])
                .collect();
            let (gso, tos) = k;
            match self.sendmmsg_group(&dsts, &iovs, gso, tos) {
                Ok(n) => {
                    sent += n;
                    if n < group.len() {
                        return Ok(sent);
                    }
                }
                Err(e) => {
                    if sent == 0 {
                        return Err(e);
                    }
                    return Ok(sent);
                }
            }
        }
        Ok(sent)
    }

    /// One `sendmmsg` of `iovs.len()` messages (message *i*: the pieces `iovs[i]` to
    /// `dsts[i]`), all with GSO segment size `gso` and TOS `tos`. Returns how many left.
    fn sendmmsg_group<'b, I: AsRef<[io::IoSlice<'b>]>>(
        &self,
        dsts: &[SocketAddr],
        iovs: &[I],
        gso: Option<usize>,
        tos: u8,
    ) -> io::Result<usize> {
        use nix::sys::socket::{sendmmsg, ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage};
        let Some(first) = dsts.first() else {
            return Ok(0);
        };
        // nix ties every borrow of the call to one lifetime: reborrow the pieces locally.
        let iovs: Vec<&[io::IoSlice<'_>]> = iovs.iter().map(|i| i.as_ref()).collect();
        let addrs: Vec<Option<SockaddrStorage>> = dsts
            .iter()
            .map(|d| Some(SockaddrStorage::from(*d)))
            .collect();
        let seg16 = gso.map(|s| s.min(usize::from(u16::MAX)) as u16);
        let tclass = i32::from(tos);
        let mut cmsgs = Vec::with_capacity(2);
        if let Some(s) = seg16.as_ref() {
            cmsgs.push(ControlMessage::UdpGsoSegments(s));
        }
        if tos != 0 {
            if first.is_ipv4() {
                cmsgs.push(ControlMessage::Ipv4Tos(&tos));
            } else {
                cmsgs.push(ControlMessage::Ipv6TClass(&tclass));
            }
        }
        // Exactly the space of the messages used: nix 0.32 sets every header's
        // msg_controllen to the buffer's capacity, and a zeroed slot after the last
        // message makes the kernel refuse the call (EINVAL).
        let mut space = 0;
        if seg16.is_some() {
            space += nix::sys::socket::cmsg_space::<u16>();
        }
        if tos != 0 {
            space += if first.is_ipv4() {
                nix::sys::socket::cmsg_space::<u8>()
            } else {
                nix::sys::socket::cmsg_space::<i32>()
            };
        }
        let mut hdrs = MultiHeaders::<SockaddrStorage>::preallocate(
            dsts.len(),
            (space > 0).then(|| Vec::with_capacity(space)),
        );
        bump(&self.io.send_calls);
        match sendmmsg(
            self.socket.as_raw_fd(),
            &mut hdrs,
            &iovs,
            &addrs,
            &cmsgs,
            MsgFlags::empty(),
        ) {
            Ok(res) => Ok(res.count()),
            Err(e) => Err(io::Error::from(e)),
        }
    }

    /// Sends `transmits`, each one GSO send gathered by the kernel from its pieces (no copy
    /// into one buffer first), in order, as few `sendmmsg` calls as runs of equal segment
    /// size and TOS allow; non-blocking, counted as [`Self::send_many`]. Each must fit one
    /// send (`max_payload` bytes, [`Self::max_gso_segments`] segments): a sealed
    /// train is never split. One that does not fails the call with `InvalidInput` (when
    /// first) or ends it.
    pub fn send_many_vectored(&self, transmits: &[VectoredTransmit<'_>]) -> io::Result<usize> {
        let key = |t: &VectoredTransmit<'_>| {
            let gso = t.segment_size.filter(|&s| s > 0 && t.len > s);
            (gso, t.tos)
        };
        let fits = |t: &VectoredTransmit<'_>| match key(t).0 {
            Some(s) => t.len <= self.max_payload() && t.len.div_ceil(s) <= self.max_gso_segments(),
            None => true,
        };
        let mut sent = 0;
        while sent < transmits.len() {
            let k = key(&transmits[sent]);
            if !fits(&transmits[sent]) {
                if sent == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "a GSO train larger than one send",
                    ));
                }
                return Ok(sent);
            }
            let mut end = sent + 1;
            while end < transmits.len()
                && end - sent < GROUP
                && key(&transmits[end]) == k
                && fits(&transmits[end])
            {
                end += 1;
            }
            let group = &transmits[sent..end];
            let dsts: Vec<SocketAddr> = group.iter().map(|t| t.destination).collect();
            let iovs: Vec<&[io::IoSlice<'_>]> = group.iter().map(|t| t.parts.as_slice()).collect();
            match self.sendmmsg_group(&dsts, &iovs, k.0, k.1) {
                Ok(n) => {
                    sent += n;
                    if n < group.len() {
                        return Ok(sent);
                    }
                }
                Err(e) if sent == 0 => return Err(e),
                Err(_) => return Ok(sent),
            }
        }
        Ok(sent)
    }

    /// Sends a batch, non-blocking: returns how many transmits went out before the socket
    /// would block (`Err(WouldBlock)` only if none did). Other errors end the batch; if some
    /// transmits went out first, the count is returned and the error is dropped, as a lost
    /// datagram would be.
    ///
    /// quinn-udp 0.5 issues one `sendmsg` per transmit: the batching that saves syscalls is GSO
    /// (up to [`Capabilities::max_gso_segments`] datagrams per `sendmsg`), so the core should
    /// hand over a message's packets as one segmented transmit.
    pub fn send_batch(&self, transmits: &[Transmit<'_>]) -> io::Result<usize> {
        for (i, t) in transmits.iter().enumerate() {
            if let Err(e) = self.send(t) {
                if i == 0 {
                    return Err(e);
                }
                return Ok(i);
            }
        }
        Ok(transmits.len())
    }

    /// Sends a whole batch, waiting for send-buffer space when the socket would block, up to
    /// `timeout` in total (`None`: no limit). Returns how many transmits went out.
    pub fn send_batch_blocking(
        &self,
        transmits: &[Transmit<'_>],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut sent = 0;
        while sent < transmits.len() {
            match self.send_batch(&transmits[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = remaining(deadline);
                    if left == Some(Duration::ZERO) {
                        break;
                    }
                    self.wait_writable(left)?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(sent)
    }

    /// Receives what is queued, non-blocking, into `bufs` (one record per buffer filled, at
    /// most [`RECV_BATCH`] per call). An empty vector means nothing was queued.
    ///
    /// With GRO a buffer may hold several datagrams (see [`RecvDatagram::segments`]); buffers
    /// should be at least `gro_segments × max datagram` bytes (64 × 4 KiB + headers suits
    /// RoCE), or a coalesced batch is truncated by the kernel.
    pub fn recv_batch(&self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<Vec<RecvDatagram>> {
        let mut out = Vec::new();
        self.recv_batch_into(bufs, &mut out)?;
        Ok(out)
    }

    /// [`UdpEndpoint::recv_batch`] appending to a caller's vector (no allocation in steady
    /// state); returns how many records were appended.
    pub fn recv_batch_into(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        out: &mut Vec<RecvDatagram>,
    ) -> io::Result<usize> {
        if bufs.is_empty() {
            return Ok(0);
        }
        let mut meta = [RecvMeta::default(); RECV_BATCH];
        let n_bufs = bufs.len().min(RECV_BATCH);
        let bufs = bufs.get_mut(..n_bufs).unwrap_or_default();
        loop {
            bump(&self.io.recv_calls);
            match self
                .state
                .recv(UdpSockRef::from(&self.socket), bufs, &mut meta[..n_bufs])
            {
                Ok(n) => {
                    self.rx_drained.store(n < n_bufs, Ordering::Relaxed);
                    if n == 0 {
                        bump(&self.io.recv_empty);
                    }
                    out.extend(meta.iter().take(n).map(|m| {
                        let mut r = RecvDatagram::from_meta(m);
                        r.dst_ip = r.dst_ip.or(self.fixed_dst);
                        r
                    }));
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.rx_drained.store(true, Ordering::Relaxed);
                    bump(&self.io.recv_empty);
                    return Ok(0);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Receives, waiting up to `timeout` (`None`: forever) for something to arrive. Returns an
    /// empty vector on timeout or when woken by the [`Notifier`].
    pub fn recv_batch_timeout(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        timeout: Option<Duration>,
    ) -> io::Result<Vec<RecvDatagram>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let got = self.recv_batch(bufs)?;
            if !got.is_empty() {
                return Ok(got);
            }
            let left = remaining(deadline);
            if left == Some(Duration::ZERO) {
                return Ok(got);
            }
            if self.wait_readable(left)? == Readiness::Woken {
                return Ok(got);
            }
        }
    }

    /// Blocks until the socket may be readable, the [`Notifier`] fires, or `timeout` passes.
    ///
    /// Readiness is edge-triggered: call this only after a receive returned nothing, as
    /// [`UdpEndpoint::recv_batch_timeout`] and [`crate::timer::wait_for_input`] do; a
    /// notification that arrived earlier and was not yet taken is reported at once.
    ///
    /// The timeout is kept by a lazily armed `timerfd`, not by `epoll_wait` (see the module
    /// docs).
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<Readiness> {
        self.wait_readable_until(timeout.and_then(|t| Instant::now().checked_add(t)))
    }

    /// [`UdpEndpoint::wait_readable`] with an absolute deadline (`None`: none).
    pub fn wait_readable_until(&self, deadline: Option<Instant>) -> io::Result<Readiness> {
        if self.notifier.take() {
            return Ok(Readiness::Woken);
        }
        bump(&self.io.recv_waits);
        let waited = lock(&self.reader).wait_until(deadline);
        self.rx_drained.store(false, Ordering::Relaxed);
        let (ready, _) = waited?;
        if self.notifier.take() {
            Ok(Readiness::Woken)
        } else if ready {
            Ok(Readiness::Ready)
        } else {
            Ok(Readiness::TimedOut)
        }
    }

    /// Blocks until the socket may be writable or `timeout` passes (call after `WouldBlock`).
    pub fn wait_writable(&self, timeout: Option<Duration>) -> io::Result<Readiness> {
        // Registered for the wait only: every registration sits on the socket's wait queue,
        // and the kernel calls each one for every datagram it frees (`sock_wfree`), which
        // was a few per cent of a 1 MiB sender's time. Adding an edge-triggered watch
        // reports the current state, so room that came before the wait is not missed.
        let mut w = lock(&self.writer);
        let fd = self.socket.as_raw_fd();
        w.poll
            .registry()
            .register(&mut SourceFd(&fd), WRITE, Interest::WRITABLE)?;
        let r = w.wait(timeout);
        let _ = w.poll.registry().deregister(&mut SourceFd(&fd));
        let (ready, _) = r?;
        Ok(if ready {
            Readiness::Ready
        } else {
            Readiness::TimedOut
        })
    }
}

/// `UDP_NO_CHECK6_RX` as a nix socket option (no safe wrapper in rustix or socket2).
mod no_check6 {
    use nix::{setsockopt_impl, sockopt_impl};

    /// `UDP_NO_CHECK6_RX` (include/uapi/linux/udp.h; not in the libc crate for glibc).
    const UDP_NO_CHECK6_RX: libc::c_int = 102;

    sockopt_impl!(
        /// Accept IPv6 UDP datagrams whose checksum is 0 (what rxe sends).
        UdpNoCheck6Rx,
        SetOnly,
        libc::IPPROTO_UDP,
        UDP_NO_CHECK6_RX,
        bool
    );
}
use no_check6::UdpNoCheck6Rx;

fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

/// Sets a socket buffer, forcing past the sysctl maximum where the process may.
pub(crate) fn set_buffer(sock: &Socket, size: usize, recv: bool) {
    let forced = if recv {
        sockopt::set_socket_recv_buffer_size_force(sock, size)
    } else {
        sockopt::set_socket_send_buffer_size_force(sock, size)
    };
    if forced.is_err() {
        // Without CAP_NET_ADMIN the kernel clamps to net.core.[rw]mem_max; that is fine.
        let _ = if recv {
            sock.set_recv_buffer_size(size)
        } else {
            sock.set_send_buffer_size(size)
        };
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn transmit_datagram_counts() {
        let dst = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 1);
        let buf = [0u8; 2500];
        assert_eq!(Transmit::single(dst, &buf).datagrams(), 1);
        assert_eq!(Transmit::segmented(dst, &buf, 1000).datagrams(), 3);
        assert_eq!(Transmit::segmented(dst, &buf, 2500).datagrams(), 1);
        assert_eq!(Transmit::segmented(dst, &buf, 4096).datagrams(), 1);
        assert_eq!(Transmit::segmented(dst, &buf, 0).datagrams(), 1);
        assert_eq!(Transmit::segmented(dst, &[], 1000).datagrams(), 1);
    }

    /// `n` datagrams from `rx` (which has `IP_RECVTOS` on): each one's length and TOS.
    fn recv_with_tos(rx: &std::net::UdpSocket, n: usize) -> Vec<(usize, Option<u8>)> {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, SockaddrStorage};
        use std::os::fd::AsRawFd;
        (0..n)
            .map(|_| {
                let mut buf = [0u8; 512];
                let mut iov = [io::IoSliceMut::new(&mut buf)];
                let mut space = nix::cmsg_space!(u8);
                let m = recvmsg::<SockaddrStorage>(
                    rx.as_raw_fd(),
                    &mut iov,
                    Some(&mut space),
                    nix::sys::socket::MsgFlags::empty(),
                )
                .unwrap();
                let tos = m.cmsgs().unwrap().find_map(|c| match c {
                    ControlMessageOwned::Ipv4Tos(t) => Some(t),
                    _ => None,
                });
                (m.bytes, tos)
            })
            .collect()
    }

    /// An endpoint on loopback and a plain socket that receives with each datagram's TOS,
    /// with its address.
    fn endpoint_and_tos_receiver() -> (UdpEndpoint, std::net::UdpSocket, SocketAddr) {
        let lo = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
        let ep = UdpEndpoint::bind_with(lo, &EndpointConfig::default()).unwrap();
        let rx = std::net::UdpSocket::bind(lo).unwrap();
        nix::sys::socket::setsockopt(&rx, sockopt_nix::IpRecvTos, &true).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let dst = rx.local_addr().unwrap();
        (ep, rx, dst)
    }

    /// A transmit with a TOS byte leaves with it in the IP header (single and GSO sends);
    /// one without keeps TOS 0.
    #[test]
    fn tos_reaches_the_ip_header() {
        let (ep, rx, dst) = endpoint_and_tos_receiver();
        let data = [7u8; 300];
        ep.send(&Transmit::single(dst, &data[..100]).with_tos(0xb8))
            .unwrap();
        ep.send(&Transmit::segmented(dst, &data, 100).with_tos(0x20))
            .unwrap();
        ep.send(&Transmit::single(dst, &data[..100])).unwrap();
        let got = recv_with_tos(&rx, 5);
        assert_eq!(
            got,
            vec![
                (100, Some(0xb8)),
                (100, Some(0x20)),
                (100, Some(0x20)),
                (100, Some(0x20)),
                (100, Some(0))
            ]
        );
    }

    /// ECT(0) alone goes out through quinn-udp's own ECN control message (single and GSO
    /// sends); an endpoint that asked for the ECN field (`set_recv_ecn`) sees it on receipt,
    /// one that did not sees 0.
    #[test]
    fn ect_is_sent_and_the_ecn_field_read_when_asked() {
        let (ep, rx, dst) = endpoint_and_tos_receiver();
        let data = [9u8; 200];
        ep.send(&Transmit::single(dst, &data[..100]).with_tos(0b10))
            .unwrap();
        ep.send(&Transmit::segmented(dst, &data, 100).with_tos(0b10))
            .unwrap();
        assert_eq!(
            recv_with_tos(&rx, 3),
            vec![(100, Some(2)), (100, Some(2)), (100, Some(2))]
        );
        // Two endpoints: the receiver reads the field only once asked.
        let lo = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
        let a = UdpEndpoint::bind_with(lo, &EndpointConfig::default()).unwrap();
        let b = UdpEndpoint::bind_with(lo, &EndpointConfig::default()).unwrap();
        let mut buf = vec![0u8; 2048];
        let mut got = |want_ecn: bool| {
            b.set_recv_ecn(want_ecn).unwrap();
            a.send(&Transmit::single(b.local_addr(), &data[..50]).with_tos(0b10))
                .unwrap();
            let mut bufs = [IoSliceMut::new(&mut buf)];
            let r = b
                .recv_batch_timeout(&mut bufs, Some(Duration::from_secs(2)))
                .unwrap();
            assert_eq!(r.len(), 1);
            r[0].ecn
        };
        assert_eq!(got(false), 0);
        assert_eq!(got(true), 0b10);
        assert_eq!(got(false), 0);
    }

    /// `send_many` puts runs of same-shaped transmits in one `sendmmsg` (GSO and TOS
    /// control messages per message) and every datagram arrives whole, in order, with its
    /// TOS.
    #[test]
    fn send_many_batches_and_keeps_shapes() {
        let (ep, rx, dst) = endpoint_and_tos_receiver();
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let ts = [
            Transmit::segmented(dst, &data[..250], 100),
            Transmit::segmented(dst, &data[..300], 100),
            Transmit::single(dst, &data[..40]),
            Transmit::single(dst, &data[..50]),
            Transmit::single(dst, &data[..60]).with_tos(0x20),
            Transmit::single(dst, &data[..70]).with_tos(0x20),
        ];
        let calls = ep.io_stats().send_calls;
        assert_eq!(ep.send_many(&ts).unwrap(), ts.len());
        // Three runs: the two GSO sends, the two plain ones, the two with a TOS.
        assert_eq!(ep.io_stats().send_calls - calls, 3);
        let got: Vec<(usize, u8)> = recv_with_tos(&rx, 10)
            .into_iter()
            .map(|(n, t)| (n, t.unwrap_or(0)))
            .collect();
        assert_eq!(
            got,
            [
                (100, 0),
                (100, 0),
                (50, 0),
                (100, 0),
                (100, 0),
                (100, 0),
                (40, 0),
                (50, 0),
                (60, 0x20),
                (70, 0x20)
            ]
        );
    }

    /// A GSO train given as pieces cut anywhere (not at segment boundaries) leaves as the
    /// datagrams of its concatenation, in one call with the next train of its shape.
    #[test]
    fn vectored_trains_are_their_concatenation() {
        let lo = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
        let ep = UdpEndpoint::bind_with(lo, &EndpointConfig::default()).unwrap();
        let rx = std::net::UdpSocket::bind(lo).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let dst = rx.local_addr().unwrap();
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let cut = |ends: &[usize]| -> Vec<io::IoSlice<'_>> {
            let mut at = 0;
            ends.iter()
                .map(|&e| {
                    let s = io::IoSlice::new(&data[at..e]);
                    at = e;
                    s
                })
                .collect()
        };
        let ts = [
            VectoredTransmit {
                destination: dst,
                parts: cut(&[12, 130, 131, 250]),
                len: 250,
                segment_size: Some(100),
                tos: 0,
            },
            VectoredTransmit {
                destination: dst,
                parts: cut(&[60, 300]),
                len: 300,
                segment_size: Some(100),
                tos: 0,
            },
        ];
        let calls = ep.io_stats().send_calls;
        assert_eq!(ep.send_many_vectored(&ts).unwrap(), 2);
        assert_eq!(ep.io_stats().send_calls - calls, 1);
        let mut buf = [0u8; 2000];
        let mut got = vec![];
        for _ in 0..6 {
            let n = rx.recv(&mut buf).unwrap();
            got.push(buf[..n].to_vec());
        }
        let want: Vec<Vec<u8>> = data[..250]
            .chunks(100)
            .chain(data[..300].chunks(100))
            .map(|c| c.to_vec())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn lazy_timer_never_ends_a_wait_early_or_late() {
        let any = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
        let ep = UdpEndpoint::bind_with(any, &EndpointConfig::default()).unwrap();
        // A long deadline arms the timer; a shorter one later must re-arm it earlier.
        let t = Instant::now();
        assert_eq!(
            ep.wait_readable(Some(Duration::from_millis(5))).unwrap(),
            Readiness::TimedOut
        );
        assert!(t.elapsed() >= Duration::from_millis(5));
        let t = Instant::now();
        assert_eq!(
            ep.wait_readable(Some(Duration::from_millis(20))).unwrap(),
            Readiness::TimedOut
        );
        let e = t.elapsed();
        assert!(e >= Duration::from_millis(20), "woke after {e:?}");
        // The timer is now armed for nothing; a wait with an earlier deadline than a stale
        // armed one still ends on time, and a later one does not end at the stale expiry.
        let t = Instant::now();
        let _ = ep.wait_readable(Some(Duration::from_millis(2)));
        assert!(t.elapsed() >= Duration::from_millis(2));
        // Input ends the wait at once, timer armed or not.
        let tx = UdpSocket::bind(any).unwrap();
        tx.send_to(b"x", ep.local_addr()).unwrap();
        let t = Instant::now();
        assert_eq!(
            ep.wait_readable(Some(Duration::from_secs(5))).unwrap(),
            Readiness::Ready
        );
        assert!(t.elapsed() < Duration::from_secs(4));
        // Zero timeout: a poll.
        assert_eq!(
            ep.wait_readable(Some(Duration::ZERO)).unwrap(),
            Readiness::TimedOut
        );
    }

    /// A GSO train of full segments and a short last one that together fit one send leaves
    /// in one `sendmsg`: the core sealed each segment's ICRC for its index in the train (the
    /// IPv4 ID the kernel gives it), so a split would make the tail's ICRCs wrong. Found in
    /// the lab: 62 × 1040-byte RDMA WRITE segments + a 52-byte SRP_RSP SEND went out as two
    /// sends, and the guest's rxe dropped the SEND until its retransmission 2.1 s later.
    #[test]
    fn a_train_that_fits_leaves_in_one_send() {
        let any = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
        let ep = UdpEndpoint::bind_with(any, &EndpointConfig::default()).unwrap();
        let rx = UdpSocket::bind(any).unwrap();
        if ep.max_gso_segments() < 63 {
            return; // no GSO here: one datagram per send anyway
        }
        let buf = vec![7u8; 62 * 1040 + 52];
        let before = ep.io_stats().send_calls;
        ep.send(&Transmit::segmented(rx.local_addr().unwrap(), &buf, 1040))
            .unwrap();
        assert_eq!(ep.io_stats().send_calls - before, 1);
        // Still split when it does not fit (here: more bytes than one UDP datagram carries).
        let big = vec![7u8; 64 * 1040 + 52];
        let before = ep.io_stats().send_calls;
        ep.send(&Transmit::segmented(rx.local_addr().unwrap(), &big, 1040))
            .unwrap();
        assert!(ep.io_stats().send_calls - before >= 2);
    }

    #[test]
    fn recv_record_segments() {
        let src = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 1);
        let buf: Vec<u8> = (0..=255).collect();
        let r = RecvDatagram {
            src,
            dst_ip: None,
            len: 250,
            segment_size: 100,
            ecn: 0,
        };
        let segs: Vec<&[u8]> = r.segments(&buf).collect();
        assert_eq!(segs.len(), 3);
        assert_eq!(r.datagrams(), 3);
        assert_eq!(segs[2], &buf[200..250]);
        // A record longer than its buffer (never from the kernel) does not panic.
        let r = RecvDatagram { len: 1000, ..r };
        assert_eq!(r.segments(&buf).map(<[u8]>::len).sum::<usize>(), 256);
        // Zero-length datagram, zero stride.
        let r = RecvDatagram {
            src,
            dst_ip: None,
            len: 0,
            segment_size: 0,
            ecn: 0,
        };
        assert_eq!(r.segments(&buf).count(), 0);
        assert_eq!(r.datagrams(), 1);
    }
}
