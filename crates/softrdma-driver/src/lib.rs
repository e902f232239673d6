//! softrdma's driver: the one place with sockets and a real clock.
//!
//! (Facts and evidence are filled in below once measured.)

#![forbid(unsafe_code)]

pub mod clock;
pub mod timer;
pub mod udp;

pub use clock::{Clock, Micros};
pub use timer::{wait_for_input, Input, Notifier, PollMode};
pub use udp::{
    Capabilities, EndpointConfig, Readiness, RecvDatagram, Transmit, UdpEndpoint, ROCEV2_PORT,
};
