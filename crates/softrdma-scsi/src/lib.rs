//! The SCSI target core of softrdma's SRP target: logical units over backing stores, the
//! SPC/SBC commands a Linux initiator uses, answered as LIO (the Linux kernel target,
//! `drivers/target/`) answers them, unit attentions and task management. Sans-IO: no
//! sockets, no threads, no clock; the transport (SRP) feeds it commands and buffers.
//!
//! # Flow
//!
//! 1. [`Target::register_nexus`] when an initiator logs in.
//! 2. For each command: [`Target::task_started`], [`Target::decode`] (the CDB, the
//!    direction and length of the initiator's buffers). A [`Decoded::Done`] is a CHECK
//!    CONDITION to send right away; a [`Decoded::Ready`] [`Cmd`] says how many bytes move
//!    which way.
//! 3. The transport fetches the data-out (RDMA READ), or sets a data-in buffer aside, and
//!    calls [`Target::execute`] with it; the [`Response`] gives the status, the sense data,
//!    the data-in length to send (RDMA WRITE) and the residual.
//! 4. [`Target::task_finished`] once the status is out. Task management functions go to
//!    [`Target::task_management`].
//!
//! ```
//! use softrdma_scsi::{
//!     BlockSize, Data, DataDir, Decoded, InitiatorId, LogicalUnit, LunConfig, LunId, MemStore,
//!     Target, TargetConfig,
//! };
//!
//! let mut t = Target::new(TargetConfig::default());
//! let store = MemStore::new(1 << 20, BlockSize::B512).unwrap();
//! t.add_lun(LunId(0), LogicalUnit::new(Box::new(store), LunConfig::default())).unwrap();
//! let nexus = t.register_nexus(InitiatorId(0x1234));
//!
//! // READ(10) of 8 blocks at LBA 0, into a 4096-byte data-in buffer.
//! let cdb = [0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0];
//! let Decoded::Ready(cmd) = t.decode(nexus, LunId(0), &cdb, DataDir::In, 4096).unwrap() else {
//!     unreachable!()
//! };
//! assert_eq!(cmd.transfer_len(), 4096);
//! let mut buf = vec![0u8; 4096];
//! // The first command after login reports the power-on unit attention ...
//! let rsp = t.execute(&cmd, Data::In(&mut buf)).unwrap();
//! assert_eq!(rsp.sense.unwrap().asc_ascq.0, 0x2900);
//! // ... and the retry reads.
//! let rsp = t.execute(&cmd, Data::In(&mut buf)).unwrap();
//! assert!(rsp.is_good());
//! assert_eq!(rsp.data_len, 4096);
//! ```
//!
//! `docs/scsi-target.md` lists the command set, the sense codes, the unit attention rules
//! and where this core deliberately differs from LIO 6.1.

#![forbid(unsafe_code)]

mod cmd;
mod emulate;
pub mod lun;
pub mod pr;
mod provisioning;
pub mod sense;
pub mod store;
mod target;
mod tmf;
mod ua;

#[doc(hidden)]
pub mod fuzzing;

pub use cmd::{Cmd, Data, DataDir, Decoded, Residual, Response};
pub use lun::{LogicalUnit, LunConfig, LunId};
pub use pr::{ItNexus, PrState, PrType};
pub use provisioning::{parse_unmap_list, UnmapDescriptor};
pub use sense::{Sense, SenseReason};
pub use store::{BackingStore, BlockSize, FileStore, MemStore, StoreError};
pub use target::{
    AluaState, CoreError, InPlace, InitiatorId, LunMapping, LunResetUa, NexusId, Placement,
    PortGroup, Target, TargetConfig,
};
pub use tmf::{AbortedTask, TmfKind, TmfOutcome, TmfResponse};
