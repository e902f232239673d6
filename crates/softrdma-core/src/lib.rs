//! The sans-IO heart of softrdma (`docs/architecture.md`): a software RDMA device that behaves like a
//! Linux `rdma_rxe` device, its verbs objects and the QP state machine.
//!
//! Nothing in this crate touches a socket, a clock, a thread or a global random number
//! generator: time comes in as a [`time::Instant`] parameter, randomness as a seeded
//! [`rand::Rng`] owned by the object that needs it, and bytes in and out as slices. The
//! driver crate owns the sockets and the real clock.
//!
//! - [`device`]: the device model: node GUID, port (state, MTU), GID table, P_Key table,
//!   device/port attributes as `ibv_query_device`/`ibv_query_port` return them, and the
//!   named drop/error counters.
//! - [`verbs`]: PD, MR (with the memory model described in `docs/memory.md`), CQ, SRQ, QP
//!   and the QP state machine ([`verbs::qp_state`]).
//! - [`cm`]: the IB CM (`CmEndpoint`) on top of the MAD layer.
//! - [`rdma_cm`]: the RDMA CM on top of the IB CM (RC and UD over SIDR; TCP, UDP, IB port
//!   spaces; IP and GID addressing; options; ECE).
//! - [`mad`]: the MAD layer on QP1 (agents, TIDs, timeouts/retries, response matching).
//! - [`node`]: [`Node`], all of the above for one host as one sans-IO object, with the
//!   call order written down once.

#![forbid(unsafe_code)]

pub mod cm;
#[cfg(test)]
mod cm_sim;
pub mod device;
pub mod fuzzing;
pub mod mad;
pub mod node;
pub mod rand;
pub mod rdma_cm;
pub mod time;
pub mod transport;
pub mod verbs;

/// The deterministic network simulation (tests of this crate, and of the crates above it
/// with the `sim` feature).
#[cfg(any(test, feature = "sim"))]
pub mod sim;

pub use device::{Device, DeviceConfig};
pub use node::Node;
pub use transport::{Stack, Transmit};
pub use verbs::Verbs;
