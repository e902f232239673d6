//! What the bytes mean: every packet format softrdma speaks, as zero-copy views and as
//! validated representations.
//!
//! # The contract (after smoltcp's `wire`)
//!
//! Each format comes at two levels:
//!
//! - a **view**, `Packet<T: AsRef<[u8]>>` (named after the format: `Bth`, `Mad`, `Req`, ...), that
//!   reads and writes fields in place. `new_checked` validates the length once; after it
//!   succeeded no accessor or setter panics. `new_unchecked` is for emitting into a buffer the
//!   caller sized with `Repr::buffer_len`.
//! - a **`Repr`**, a plain struct holding the decoded fields, with `parse` (from a checked view
//!   or a byte slice), `emit` (into a buffer exactly `buffer_len()` long) and `buffer_len`.
//!   `parse` never panics; `emit` never panics as long as the buffer has the right length.
//!
//! Protocol code points (opcodes, attribute IDs, reject reasons, statuses, ...) are open
//! newtypes (made with the `code_point!` macro; e.g. [`roce::Opcode`]): an unknown value on the wire is kept as a value, never
//! a parse error. Parse errors are [`Error`]s naming the field at fault.
//!
//! Every `Repr` also implements [`dissect::Dissect`], which lays its fields out as a named
//! tree; `softrdma decode` prints that tree the way `tshark -V` does, or as JSON.

#![forbid(unsafe_code)]

#[macro_use]
mod macros;

pub mod dissect;
pub mod error;
pub mod field;
pub mod types;

pub mod cm;
pub mod dm;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod icrc;
pub mod link;
pub mod mad;
pub mod nbd;
pub mod pcap;
pub mod rdma_cm;
pub mod roce;
pub mod scsi;
pub mod srp;

#[cfg(test)]
mod test_support;

pub use error::{Error, Result};
pub use types::{Gid, Guid};
