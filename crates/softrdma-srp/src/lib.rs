//! The SCSI RDMA Protocol target of softrdma, sans-IO: what Linux 6.1's `ib_srpt`
//! (`drivers/infiniband/ulp/srpt/ib_srpt.c`) does on the wire, over softrdma's RDMA CM / IB CM
//! and verbs, with the SCSI core (`softrdma-scsi`) behind it.
//!
//! - [`login`]: the login request in both CM layouts, `srpt_cm_req_recv`'s checks in its
//!   order and reasons, the SRP_LOGIN_RSP / SRP_LOGIN_REJ.
//! - [`channel`]: the channel states, forward only.
//! - [`iu`]: SRP_CMD descriptors read in place, SRP_RSP written in place (shared with an
//!   initiator).
//! - [`target`]: [`SrpTarget`], the engine: logins, CM events, completions, the data path.
//! - [`initiator`]: [`SrpInitiator`], what ib_srp does: logins over the RDMA CM or the IB
//!   CM, channels, credits, commands, task management on timeout, logout.
//! - [`add_target`]: the target string ib_srp's `add_target` takes.
//! - [`dm`]: the device-management MAD answers (`srpt_mgmt_method_get`).
//! - [`guid`]: GUID text forms.
//! - [`verify`]: the self-describing data pattern of verified workloads.
//! - `wr_id`: the work request ids both engines pack (channel, kind, slot).
//!
//! `docs/srp-target.md` describes the protocol as implemented and where it differs from 6.1.

#![forbid(unsafe_code)]

pub mod add_target;
pub mod channel;
pub mod dm;
pub mod guid;
pub mod initiator;
pub mod iu;
pub mod login;
pub mod target;
pub mod verify;
mod wr_id;

pub use add_target::{AddTarget, Dest};
pub use channel::ChannelState;
pub use initiator::{
    Command, Completion, DataDir, DownReason, InitiatorConfig, InitiatorEvent, IoError, LoginError,
    ScsiResult, Segment, SessionState, SrpInitiator, SubmitError,
};
pub use login::{AclEntry, LoginPolicy, LoginRequest, Refusal};
pub use target::{
    ChannelId, ConnId, LoginFailure, LogoutBy, ManageError, MediaError, SrpConfig, SrpEvent,
    SrpTarget, TargetPort,
};
