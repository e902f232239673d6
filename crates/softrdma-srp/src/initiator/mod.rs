//! The SRP initiator engine, sans-IO: what Linux 6.1's `ib_srp`
//! (`drivers/infiniband/ulp/srp/ib_srp.c`) does on the wire for one target port
//! (`struct srp_target_port`): its logins, channels, credits, SCSI commands, task management
//! on timeout and logout.
//!
//! Like [`crate::SrpTarget`], [`SrpInitiator`] works on the caller's [`Stack`] and
//! [`RdmaCm`](softrdma_core::rdma_cm::RdmaCm) lent with the time in each call (`Cm::with(port, |rdma, stack, now| ..)` in a
//! program, `softrdma_core::sim` in tests). The caller hands it the CM events of its ids
//! ([`SrpInitiator::rdma_event`], [`SrpInitiator::ib_event`]), its CQ's completions
//! ([`SrpInitiator::poll`]) and its timers ([`SrpInitiator::poll_timeout`] /
//! [`SrpInitiator::handle_timeout`]); it submits commands ([`SrpInitiator::submit`]) and
//! takes their ends from [`SrpInitiator::poll_completion`].
//!
//! What goes on the wire, after ib_srp:
//! - **Login** (`srp_send_req`): RDMA CM (`rdma_resolve_addr`, `rdma_resolve_route`,
//!   `rdma_connect` with the 56-byte `srp_login_req_rdma`) or IB CM (`ib_send_cm_req` to
//!   `service_id` with the 64-byte `srp_login_req`); requested IU length
//!   `srp_max_it_iu_len` (48 + 16 + 20 + 16 × `cmd_sg_entries`, or 68 + 8192 with immediate
//!   data, capped by `max_it_iu_size`), direct and indirect buffers, SINGLE for the first
//!   channel and MULTI for the others (one after the other), IMMED_REQUESTED at offset 68,
//!   initiator port id = `initiator_ext` and our GID 0's interface id, target port id =
//!   `id_ext` and `ioc_guid`; CM parameters: responder resources 4, initiator depth 0, flow control,
//!   retry count `tl_retry_count` (7), RNR retry 7, 15 CM retries.
//! - **Credits**: each channel starts with the login response's `req_lim_delta`; a command
//!   needs more than one (one stays for task management, `SRP_TSK_MGMT_SQ_SIZE`), a task
//!   management IU one; every SRP_RSP and SRP_CRED_REQ adds its `req_lim_delta`.
//!   SRP_CRED_REQ and SRP_AER_REQ are answered (SRP_CRED_RSP / SRP_AER_RSP) without credit.
//! - **Commands** (`srp_queuecommand`, `srp_map_data`): tag `hw queue << 16 | tag`
//!   (`blk_mq_unique_tag`), LUN as `int_to_scsilun`; data-out that fits in the IU goes as
//!   immediate data, one buffer as a direct descriptor, up to `cmd_sg_entries` as an indirect
//!   one (the table also in our memory, readable by the target).
//! - **Timeouts** (`srp_abort`, `srp_reset_device`): a command past its deadline gets an
//!   ABORT TASK (tag `SRP_TAG_TSK_MGMT | n`); an answer within 5 s ends the command as timed
//!   out; no answer escalates to a LOGICAL UNIT RESET (task tag `SRP_TAG_NO_REQ`), which
//!   ends every command of the LUN; if that fails too, the target is given up on.
//! - **Logout** (`srp_disconnect_target`): a DREQ per channel (ib_srp sends no SRP_I_LOGOUT).
//!
//! Tags are 8-byte fields Linux writes in host byte order (little-endian on x86); ours are
//! kept the same way and byte-swapped into the wire's big-endian reading, so the bytes on
//! the wire are ib_srp's.

pub mod cdb;
mod completion;
mod error;
mod io;
mod lifecycle;
mod login;
mod reconnect;
mod tmf;

use std::collections::VecDeque;
use std::fmt;
use std::net::IpAddr;

use softrdma_core::cm::{CmId, CmPort};
use softrdma_core::rdma_cm::{RdmaCmId, RdmaId};
use softrdma_core::time::{Duration, Instant};
use softrdma_core::verbs::{AccessFlags, CqId, MrKeys, PdId, VerbsError, WorkCompletion};
use softrdma_core::Stack;
use softrdma_wire::srp::{DirectBuf, LoginReqRepr, LoginRspRepr, TaskMgmtFunction};
use softrdma_wire::Gid;

use crate::add_target::{AddTarget, Dest};
use crate::iu::{SRP_CMD_LEN, SRP_IMM_DATA_OFFSET};

pub use error::{DownReason, IoError, LoginError, QpTransitionError, Reject, SubmitError, Warning};
pub use io::{Command, Completion, DataDir, ScsiResult, Segment};
use reconnect::Tl;
pub use reconnect::{validate_tmo, SRP_DEV_LOSS_TMO, SRP_FAST_IO_FAIL_TMO, SRP_RECONNECT_DELAY};
use tmf::{Tmf, TmfKind};

/// `SRP_DEFAULT_QUEUE_SIZE`: the rings of a channel.
pub const SRP_DEFAULT_QUEUE_SIZE: u32 = 64;
/// `SRP_RSP_SQ_SIZE`, `SRP_TSK_MGMT_SQ_SIZE`: ring entries kept for responses to target
/// requests and for task management.
pub const SRP_RSP_SQ_SIZE: u32 = 1;
pub const SRP_TSK_MGMT_SQ_SIZE: u32 = 1;
/// `SRP_DEF_SG_TABLESIZE`: descriptors per SRP_CMD (`cmd_sg_entries`).
pub const SRP_DEF_SG_TABLESIZE: u32 = 12;
/// `SRP_MAX_ADD_CDB_LEN`.
pub const SRP_MAX_ADD_CDB_LEN: u32 = 16;
/// `srp_max_imm_data` (module parameter, default 8 KiB).
pub const SRP_MAX_IMM_DATA: u32 = 8 << 10;
/// `SRP_MAX_IMM_SGE`: buffers immediate data may come from.
pub const SRP_MAX_IMM_SGE: usize = 2;
/// `SRP_ABORT_TIMEOUT_MS`.
pub const SRP_ABORT_TIMEOUT: Duration = Duration::from_secs(5);
/// `SRP_TAG_TSK_MGMT`, `SRP_TAG_NO_REQ`.
pub const SRP_TAG_TSK_MGMT: u64 = 1 << 31;
pub const SRP_TAG_NO_REQ: u64 = 0xffff_ffff;
/// The SCSI midlayer's default command timeout (`SD_TIMEOUT`).
pub const SCSI_CMD_TIMEOUT: Duration = Duration::from_secs(30);
/// ib_srp's responder resources in the REQ ("arbitrary defaults").
pub const SRP_RESPONDER_RESOURCES: u8 = 4;

/// `srp_max_it_iu_len`: the IU length the login requests.
pub fn max_it_iu_len(cmd_sg_cnt: u32, use_imm_data: bool, max_it_iu_size: u32) -> u32 {
    let mut n = SRP_CMD_LEN as u32 + SRP_MAX_ADD_CDB_LEN + 20 + cmd_sg_cnt * 16;
    if use_imm_data {
        n = n.max(SRP_IMM_DATA_OFFSET as u32 + SRP_MAX_IMM_DATA);
    }
    if max_it_iu_size != 0 {
        n = n.min(max_it_iu_size);
    }
    n
}

/// How the initiator behaves where ib_srp has module parameters or the SCSI midlayer
/// decides.
#[derive(Debug, Clone)]
pub struct InitiatorConfig {
    pub target: AddTarget,
    /// Our address (RDMA CM source; IB CM: our GID is its RoCEv2 GID). Defaults to the
    /// target string's `src=`.
    pub src: Option<IpAddr>,
    /// `ch_count` when the target string has none.
    pub default_ch_count: u32,
    /// `srp_use_imm_data` (default true).
    pub use_imm_data: bool,
    /// A command's deadline before ABORT TASK (the SCSI timeout, 30 s).
    pub cmd_timeout: Duration,
    /// How long a task management function may take (`SRP_ABORT_TIMEOUT_MS`).
    pub abort_timeout: Duration,
    /// Seeds the IB CM's starting PSNs.
    pub seed: u64,
    /// `reconnect_delay`: seconds between reconnect attempts after a lost channel (`None`:
    /// off, no reconnect). See the `reconnect` module for the three timers.
    pub reconnect_delay: Option<Duration>,
    /// `fast_io_fail_tmo`: after a failure, held commands fail at once from then on.
    pub fast_io_fail_tmo: Option<Duration>,
    /// `dev_loss_tmo`: after a failure, the device is given up.
    pub dev_loss_tmo: Option<Duration>,
}

impl InitiatorConfig {
    pub fn new(target: AddTarget) -> InitiatorConfig {
        InitiatorConfig {
            target,
            src: None,
            default_ch_count: 1,
            use_imm_data: true,
            cmd_timeout: SCSI_CMD_TIMEOUT,
            abort_timeout: SRP_ABORT_TIMEOUT,
            seed: 0x5352_5049,
            // Off: a lost target fails the session at once (what a program that logs in,
            // does one thing and logs out wants); `softrdma srp` sets ib_srp's defaults.
            reconnect_delay: None,
            fast_io_fail_tmo: None,
            dev_loss_tmo: None,
        }
    }
}

/// The session's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionState {
    /// Channels are being logged in.
    LoggingIn,
    /// Every channel that could log in is live.
    Live,
    /// DREQs sent; waiting for the channels to close.
    LoggingOut,
    /// Logged out; resources released.
    Closed,
    /// The first channel's login failed.
    LoginFailed(LoginError),
    /// The target went away (every channel down, and no reconnect, or `dev_loss_tmo`
    /// passed): why.
    Failed(DownReason),
    /// A channel was lost; commands are held while reconnects are tried
    /// (`SRP_RPORT_BLOCKED`).
    Blocked(DownReason),
    /// Still reconnecting, but `fast_io_fail_tmo` has passed: commands fail at once
    /// (`SRP_RPORT_FAIL_FAST`).
    FailFast(DownReason),
}

/// A channel's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChannelState {
    /// Address and route resolution (RDMA CM).
    Resolving,
    /// REQ sent.
    Connecting,
    Live,
    /// DREQ sent (or a DREQ received and answered).
    Disconnecting,
    /// Down: failed, or disconnected and released.
    Closed,
}

/// What a channel negotiated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelInfo {
    pub index: usize,
    pub state: ChannelState,
    pub qpn: u32,
    /// The login request as sent (IB CM layout; the RDMA CM's carries the same fields).
    pub login_req: LoginReqRepr,
    pub login_rsp: Option<LoginRspRepr>,
    /// Credits now.
    pub req_lim: i64,
    pub use_imm_data: bool,
    pub max_it_iu_len: u32,
    pub max_ti_iu_len: u32,
    /// Tags (commands in flight at most) on this channel.
    pub can_queue: u32,
    pub via_ib_cm: bool,
}

/// What the initiator tells its user (a program logs these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitiatorEvent {
    /// A login request went out.
    LoginSent { channel: usize, multi: bool },
    /// A channel is live.
    LoggedIn {
        channel: usize,
        rsp: LoginRspRepr,
        immediate: bool,
    },
    /// A channel's login failed (a later channel's failure leaves the session with fewer
    /// channels, as ib_srp does).
    LoginFailed { channel: usize, error: LoginError },
    /// A channel went down.
    ChannelDown { channel: usize, why: DownReason },
    /// A channel we disconnected is closed: our DREQ was answered (DREP), or went
    /// unanswered.
    LoggedOut { channel: usize, answered: bool },
    /// A task management function was sent.
    TaskMgmt {
        channel: usize,
        function: TaskMgmtFunction,
        lun: u64,
        task_tag: u64,
    },
    /// Its answer (`None`: none within the abort timeout).
    TaskMgmtDone {
        channel: usize,
        function: TaskMgmtFunction,
        rsp_code: Option<u8>,
    },
    /// An SRP_RSP for a command that had already ended (after an abort).
    LateResponse { channel: usize, tag: u64 },
    /// SRP_T_LOGOUT received ("Got target logout request").
    TargetLogout { channel: usize, reason: u32 },
    /// SRP_CRED_REQ answered.
    CreditRequest { channel: usize, delta: u32 },
    /// SRP_AER_REQ answered ("ignoring AER").
    AsyncEvent { channel: usize, lun: u64 },
    /// A channel of the live session was lost: the transport layer's timers started
    /// (`srp_start_tl_fail_timers`); `None` timers are off.
    TransportFailed {
        why: DownReason,
        reconnect_delay: Option<Duration>,
        fast_io_fail_tmo: Option<Duration>,
        dev_loss_tmo: Option<Duration>,
    },
    /// A reconnect attempt began (`srp_reconnect_rport`).
    ReconnectAttempt { attempt: u32 },
    /// It failed ("reconnect attempt %d failed").
    ReconnectFailed { attempt: u32, error: LoginError },
    /// Every channel is live again ("reconnect succeeded").
    Reconnected { attempt: u32, down_for: Duration },
    /// `fast_io_fail_tmo` passed: held commands fail from now on.
    FastIoFail { after: Duration },
    /// `dev_loss_tmo` passed: the device is given up.
    DeviceLost { after: Duration, attempts: u32 },
    /// Something unexpected.
    Warning {
        channel: Option<usize>,
        what: Warning,
    },
}

/// Host-order tag ↔ the big-endian u64 the wire crate reads.
fn wire_tag(host: u64) -> u64 {
    host.swap_bytes()
}

#[derive(Debug)]
enum Conn {
    Rdma(RdmaCmId),
    Ib(CmId),
}

/// A command in flight.
#[derive(Debug, Clone, Copy)]
struct Req {
    user: u64,
    lun: u64,
    deadline: Instant,
}

/// A tag, by where its command is.
#[derive(Debug, Clone, Copy, Default)]
enum Slot {
    #[default]
    Free,
    /// Sent; its deadline runs.
    InFlight(Req),
    /// Past its deadline: an ABORT TASK for it is queued or in flight.
    Aborting(Req),
}

impl Slot {
    /// The command, freeing the tag.
    fn take(&mut self) -> Option<Req> {
        match std::mem::take(self) {
            Slot::Free => None,
            Slot::InFlight(r) | Slot::Aborting(r) => Some(r),
        }
    }

    fn req(&self) -> Option<&Req> {
        match self {
            Slot::Free => None,
            Slot::InFlight(r) | Slot::Aborting(r) => Some(r),
        }
    }
}

/// A channel's IU rings and which send IUs are free.
struct Rings {
    rx: MrKeys,
    tx: MrKeys,
    free_tx: Vec<u32>,
}

impl Rings {
    /// A free send IU: the ring's keys and its index.
    fn take_tx(&mut self) -> Option<(MrKeys, u32)> {
        self.free_tx.pop().map(|i| (self.tx, i))
    }
}

struct Channel {
    index: usize,
    state: ChannelState,
    conn: Option<Conn>,
    qpn: u32,
    multi: bool,
    login_req: LoginReqRepr,
    login_rsp: Option<LoginRspRepr>,
    req_lim: i64,
    use_imm: bool,
    max_it_iu_len: u32,
    max_ti_iu_len: u32,
    /// The IU rings, sized by the login response: there from login to release.
    rings: Option<Rings>,
    idb: Option<MrKeys>,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    tsk_mgmt_tag: u64,
    tmf: Option<Tmf>,
    tmf_queue: VecDeque<(TmfKind, u64)>,
    /// RC send queue room.
    sq_avail: u32,
    ib: bool,
}

impl Channel {
    /// A send IU is free again (its SEND completed, or it was never posted).
    fn free_tx(&mut self, i: u32) {
        if let Some(r) = &mut self.rings {
            r.free_tx.push(i);
        }
    }

    fn take_tx(&mut self) -> Option<(MrKeys, u32)> {
        self.rings.as_mut().and_then(Rings::take_tx)
    }

    fn info(&self, can_queue: u32) -> ChannelInfo {
        ChannelInfo {
            index: self.index,
            state: self.state,
            qpn: self.qpn,
            login_req: self.login_req,
            login_rsp: self.login_rsp,
            req_lim: self.req_lim,
            use_imm_data: self.use_imm,
            max_it_iu_len: self.max_it_iu_len,
            max_ti_iu_len: self.max_ti_iu_len,
            can_queue: if self.slots.is_empty() {
                can_queue
            } else {
                self.slots.len() as u32
            },
            via_ib_cm: self.ib,
        }
    }
}

/// The SRP initiator of one target port (see the module docs).
pub struct SrpInitiator {
    cfg: InitiatorConfig,
    state: SessionState,
    src: Option<IpAddr>,
    cm_port: Option<CmPort>,
    pd: Option<PdId>,
    cq: Option<CqId>,
    sgid: Gid,
    ch_count: usize,
    /// Ring entries (`target->queue_size`).
    queue_size: u32,
    /// Tags per channel (`can_queue`).
    can_queue: u32,
    cmd_sg_cnt: u32,
    channels: Vec<Channel>,
    completions: VecDeque<Completion>,
    events: VecDeque<InitiatorEvent>,
    wcs: Vec<WorkCompletion>,
    next_channel: usize,
    rng: u64,
    /// Buffers registered by [`SrpInitiator::alloc_buffer`].
    buffers: Vec<MrKeys>,
    /// Reused scratch for immediate data and indirect tables.
    scratch: Vec<u8>,
    descs: Vec<DirectBuf>,
    /// Why the last channel went down.
    last_down: Option<DownReason>,
    /// After a lost channel, with transport timers on: the reconnect state.
    tl: Option<Tl>,
}

impl fmt::Debug for SrpInitiator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SrpInitiator")
            .field("target", &self.cfg.target.to_string())
            .field("state", &self.state)
            .field("channels", &self.channels.len())
            .finish()
    }
}

fn res(e: VerbsError) -> LoginError {
    LoginError::Resources(e)
}

impl SrpInitiator {
    pub fn new(cfg: InitiatorConfig) -> SrpInitiator {
        let t = &cfg.target;
        let (queue_size, can_queue) = match t.queue_size {
            Some(n) => (n + SRP_RSP_SQ_SIZE + SRP_TSK_MGMT_SQ_SIZE, n),
            None => (
                SRP_DEFAULT_QUEUE_SIZE,
                SRP_DEFAULT_QUEUE_SIZE - SRP_RSP_SQ_SIZE - SRP_TSK_MGMT_SQ_SIZE,
            ),
        };
        let ch_count = t.ch_count.unwrap_or(cfg.default_ch_count).max(1) as usize;
        let cmd_sg_cnt = t
            .cmd_sg_entries
            .map_or(SRP_DEF_SG_TABLESIZE, u32::from)
            .max(1);
        let rng = cfg.seed | 1;
        SrpInitiator {
            src: cfg.src.or(match t.dest {
                Dest::Rdma { src, .. } | Dest::Ib { src, .. } => src,
            }),
            cfg,
            state: SessionState::LoggingIn,
            cm_port: None,
            pd: None,
            cq: None,
            sgid: Gid::ZERO,
            ch_count,
            queue_size,
            can_queue,
            cmd_sg_cnt,
            channels: Vec::new(),
            completions: VecDeque::new(),
            events: VecDeque::new(),
            wcs: Vec::with_capacity(64),
            next_channel: 0,
            rng,
            buffers: Vec::new(),
            scratch: Vec::new(),
            descs: Vec::new(),
            last_down: None,
            tl: None,
        }
    }

    pub fn config(&self) -> &InitiatorConfig {
        &self.cfg
    }

    pub fn state(&self) -> &SessionState {
        &self.state
    }

    pub fn is_live(&self) -> bool {
        self.state == SessionState::Live
    }

    /// Whether the session is over (closed, failed or never logged in).
    pub fn is_done(&self) -> bool {
        matches!(
            self.state,
            SessionState::Closed | SessionState::LoginFailed(_) | SessionState::Failed(_)
        )
    }

    /// The CQ all channels share (a program waits on it).
    pub fn cq(&self) -> Option<CqId> {
        self.cq
    }

    /// The initiator port identifier (`initiator_ext` + our GID 0's interface ID).
    pub fn initiator_port_id(&self) -> [u8; 16] {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.cfg.target.initiator_ext.to_be_bytes());
        id[8..].copy_from_slice(&self.sgid.0[8..16]);
        id
    }

    /// The channels and what they negotiated.
    pub fn channels(&self) -> Vec<ChannelInfo> {
        self.channels
            .iter()
            .map(|c| c.info(self.can_queue))
            .collect()
    }

    /// Commands in flight (tags in use).
    pub fn in_flight(&self) -> usize {
        self.channels
            .iter()
            .map(|c| c.slots.len() - c.free_slots.len())
            .sum()
    }

    /// Commands that can be in flight at once: tags over the live channels.
    pub fn queue_depth(&self) -> usize {
        self.channels
            .iter()
            .filter(|c| c.state == ChannelState::Live)
            .map(|c| c.slots.len())
            .sum()
    }

    /// Whether `id` is one of our RDMA CM ids.
    pub fn owns_rdma(&self, id: RdmaId) -> bool {
        self.channels
            .iter()
            .any(|c| matches!(&c.conn, Some(Conn::Rdma(i)) if *i == id))
    }

    pub fn poll_event(&mut self) -> Option<InitiatorEvent> {
        self.events.pop_front()
    }

    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Registers `len` bytes the target may read and write (`iova` is where they appear
    /// in the MR's address space).
    pub fn alloc_buffer(
        &mut self,
        stack: &mut Stack,
        len: usize,
        iova: u64,
    ) -> Result<MrKeys, VerbsError> {
        let pd = match self.pd {
            Some(p) => p,
            None => {
                let p = stack.verbs.alloc_pd()?;
                self.pd = Some(p);
                p
            }
        };
        // Huge pages from 2 MiB on: every packet of an I/O lands in or leaves from it.
        let k = stack.verbs.reg_mr_with(
            pd,
            softrdma_core::verbs::Memory::zeroed(len),
            iova,
            AccessFlags(
                AccessFlags::LOCAL_WRITE.0
                    | AccessFlags::REMOTE_READ.0
                    | AccessFlags::REMOTE_WRITE.0,
            ),
        )?;
        self.buffers.push(k);
        Ok(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_iu_len_as_ib_srp() {
        // 48 + 16 + 20 + 12 × 16 = 276; with immediate data 68 + 8192.
        assert_eq!(max_it_iu_len(12, false, 0), 276);
        assert_eq!(max_it_iu_len(12, true, 0), 8260);
        assert_eq!(max_it_iu_len(12, true, 1024), 1024);
    }

    #[test]
    fn tags_are_host_order_on_the_wire() {
        // Channel 1, tag 5: Linux writes 05 00 01 00 00 00 00 00 on x86.
        let t = wire_tag(1 << 16 | 5);
        assert_eq!(t.to_be_bytes(), [5, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(wire_tag(t), 1 << 16 | 5);
    }
}
