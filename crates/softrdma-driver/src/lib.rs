//! softrdma's driver: the one place with sockets and a real clock.
//!
//! The sans-IO core (`softrdma-core`) is driven with `handle_datagram(now, bytes)`,
//! `handle_timeout(now)` and drained with `poll_transmit()` / `poll_timeout()`; this crate owns
//! what those calls need from the operating system:
//!
//! - [`udp`]: [`UdpEndpoint`], one unconnected, DF-set, non-blocking UDP socket per device on
//!   `<ip>:4791` (IPv4 or IPv6), with batched receive (`recvmmsg` + GRO), GSO send, blocking
//!   waits with timeouts, and a [`Capabilities`] query. Built on `quinn-udp` and
//!   `socket2`/`rustix`, so the crate needs no `unsafe`.
//! - [`clock`]: [`Clock`], `std::time::Instant` mapped to [`Micros`] (u64 microseconds since an
//!   arbitrary epoch, the representation of the core's `time::Instant`).
//! - [`timer`]: [`wait_for_input`], the event loop's wait until the earlier of the core's next
//!   timeout and socket input, sleeping in epoll or busy-polling ([`PollMode`]), and
//!   [`Notifier`] to wake it from other threads.
//! - [`device`]: the device runtime: [`Device`] (one endpoint + one `softrdma_core::Stack` +
//!   the clock, the blocking verbs API, its event loop on a background thread or inline in the
//!   caller's CQ polls) and [`AsyncDevice`] (futures that resolve on completions; any
//!   executor — its docs say how to use it from tokio). Its docs say how ICRCs are re-sealed
//!   for the socket's source port and GSO IP IDs, and what the GID indices of a driver device
//!   are.
//! - [`conn`]: connections without an event loop — [`conn::Endpoint`],
//!   [`conn::Listener`], [`conn::Connection`] (SEND, RECV, RDMA WRITE / READ on registered
//!   [`conn::Region`]s, blocking or async), [`conn::UdSocket`] for UD over SIDR. The
//!   examples `conn_server`, `conn_client` and `ud_echo` use it; start there.
//! - [`netif`]: the MTU of the interface an address is on (what a port's active MTU derives
//!   from, as rxe's does from its netdev).
//! - [`tap`]: [`Tap`], the pcap tap (`--pcap FILE`): every datagram sent and received, with
//!   synthesised Ethernet/IP/UDP headers whose IPv4 IDs make every ICRC verify.
//!
//! What the kernel does with our datagrams (IPv4 IDs, GSO, GRO) and loopback throughput, as
//! measured: `docs/measurements.md`.

#![forbid(unsafe_code)]

pub mod clock;
pub mod cm;
pub mod conn;
pub mod device;
mod host;
pub mod mad;
pub mod mcast;
pub mod netif;
mod node_loop;
pub mod tap;
pub mod timer;
pub mod udp;
pub mod wait;

pub use clock::{Clock, Micros};
pub use device::{
    AsyncDevice, Device, DeviceConfig, DriverCounters, Error, Progress, Result as DeviceResult,
};
pub use tap::Tap;
pub use timer::{wait_for_input, wait_for_input_any, Input, Notifier, PollMode};
pub use udp::{
    Capabilities, EndpointConfig, IoStats, Readiness, RecvDatagram, SpinStats, Transmit,
    UdpEndpoint, VectoredTransmit, ROCEV2_PORT,
};
