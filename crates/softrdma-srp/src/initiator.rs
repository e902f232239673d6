//! The SRP initiator engine, sans-IO: what Linux 6.1's `ib_srp`
//! (`drivers/infiniband/ulp/srp/ib_srp.c`) does on the wire for one target port
//! (`struct srp_target_port`): its logins, channels, credits, SCSI commands, task management
//! on timeout and logout.
//!
//! Like [`crate::SrpTarget`], [`SrpInitiator`] works on the caller's [`Stack`] and
//! [`RdmaCm`] lent with the time in each call (`Cm::with(port, |rdma, stack, now| ..)` in a
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

use std::collections::VecDeque;
use std::fmt;
use std::net::IpAddr;

use softrdma_core::cm::{CmEvent, CmId, CmPort, ReqParams};
use softrdma_core::device::{GidType, PORT_NUM};
use softrdma_core::mad::MadAddr;
use softrdma_core::rdma_cm::{ConnParam, RdmaCm, RdmaCmEvent, RdmaCmEventType, RdmaCmId, RdmaId};
use softrdma_core::time::{Duration, Instant};
use softrdma_core::verbs::{
    AccessFlags, CqId, MrKeys, PdId, QpAttr, QpAttrMask, QpInitAttr, QpState, RecvWr, SendOp,
    SendWr, Sge, VerbsError, WcStatus, WorkCompletion,
};
use softrdma_core::Stack;
use softrdma_scsi::LunId;
use softrdma_wire::cm::{Path, PathMtu, RejectReason, TransportType};
use softrdma_wire::scsi::ScsiStatus;
use softrdma_wire::srp::{
    CredReqRepr, DirectBuf, LoginRejReason, LoginRejRepr, LoginReqRdmaRepr, LoginReqRepr,
    LoginRspRepr, Opcode, RspRepr, TLogoutRepr, TaskMgmtFunction, BUF_FORMAT_DIRECT,
    BUF_FORMAT_INDIRECT, IMMED_REQUESTED,
};
use softrdma_wire::Gid;

use crate::add_target::{AddTarget, Dest};
use crate::iu::{self, CmdData, SRP_CMD_LEN, SRP_IMM_DATA_OFFSET};

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
        }
    }
}

/// A rejected login: the CM's reject reason and, for a consumer-defined reject, the
/// SRP_LOGIN_REJ in its private data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    pub cm_reason: RejectReason,
    /// The first private data byte (the IU type ib_srp looks at).
    pub opcode: Option<u8>,
    pub login_rej: Option<LoginRejRepr>,
}

impl Reject {
    fn new(reason: Option<RejectReason>, private_data: &[u8]) -> Reject {
        let cm_reason = reason.unwrap_or(RejectReason(0));
        let login_rej = if cm_reason == RejectReason::CONSUMER_DEFINED {
            LoginRejRepr::parse(private_data).ok()
        } else {
            None
        };
        Reject {
            cm_reason,
            opcode: private_data.first().copied(),
            login_rej,
        }
    }

    /// The SRP_LOGIN_REJ reason, if there was one.
    pub fn srp_reason(&self) -> Option<LoginRejReason> {
        self.login_rej.map(|r| r.reason)
    }
}

impl fmt::Display for Reject {
    /// ib_srp's messages (`srp_rdma_cm_rej_handler`, `srp_ib_cm_rej_handler`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.cm_reason, self.login_rej) {
            (RejectReason::CONSUMER_DEFINED, Some(r))
                if r.reason == LoginRejReason::REQ_IT_IU_LENGTH_TOO_LARGE =>
            {
                f.write_str("SRP_LOGIN_REJ: requested max_it_iu_len too large")
            }
            (RejectReason::CONSUMER_DEFINED, Some(r)) => {
                write!(
                    f,
                    "SRP LOGIN REJECTED, reason {:#010x} ({})",
                    r.reason.0, r.reason
                )
            }
            (RejectReason::CONSUMER_DEFINED, None) => write!(
                f,
                "REJ reason: IB_CM_REJ_CONSUMER_DEFINED, opcode {:#04x}",
                self.opcode.unwrap_or(0)
            ),
            (RejectReason::STALE_CONN, _) => f.write_str("REJ reason: stale connection"),
            (RejectReason::DUPLICATE_LOCAL_COMM_ID, _) => {
                f.write_str("REJ reason: IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID")
            }
            (r, _) => write!(f, "REJ reason {:#x} ({})", r.0, r.message()),
        }
    }
}

/// Why a login (of the first channel) failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginError {
    /// No source address, or no device holds it (`RDMA_CM_EVENT_ADDR_ERROR`).
    Address(String),
    /// `RDMA_CM_EVENT_ROUTE_ERROR`.
    Route(String),
    /// The REQ went unanswered (`RDMA_CM_EVENT_UNREACHABLE`, `IB_CM_REQ_ERROR`).
    Unreachable,
    /// REJ received.
    Rejected(Reject),
    /// `RDMA_CM_EVENT_CONNECT_ERROR` or a failed QP transition.
    Connect(String),
    /// The REP's private data is no SRP_LOGIN_RSP ("Unhandled RSP opcode").
    BadResponse(String),
    /// A QP, CQ or buffer could not be made.
    Resources(String),
}

impl fmt::Display for LoginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoginError::Address(w) => write!(f, "address resolution failed: {w}"),
            LoginError::Route(w) => write!(f, "Path resolution failed: {w}"),
            LoginError::Unreachable => {
                f.write_str("the target did not answer the login (CM REQ timed out)")
            }
            LoginError::Rejected(r) => r.fmt(f),
            LoginError::Connect(w) => write!(f, "Sending CM REQ failed: {w}"),
            LoginError::BadResponse(w) => write!(f, "bad login response: {w}"),
            LoginError::Resources(w) => write!(f, "channel resources: {w}"),
        }
    }
}

impl std::error::Error for LoginError {}

/// Why a command ended without a SCSI status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoError {
    /// The command passed its deadline and was aborted (ABORT TASK answered with `rsp_code`,
    /// or ended by a LOGICAL UNIT RESET: `rsp_code` None).
    TimedOut { rsp_code: Option<u8> },
    /// Another command's LOGICAL UNIT RESET ended it.
    Reset,
    /// Its channel went down (the reason).
    ChannelDown(String),
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoError::TimedOut { rsp_code: Some(c) } => {
                write!(f, "timed out; aborted (ABORT TASK answered, RSP_CODE {c})")
            }
            IoError::TimedOut { rsp_code: None } => {
                f.write_str("timed out; ended by a LOGICAL UNIT RESET")
            }
            IoError::Reset => f.write_str("ended by a LOGICAL UNIT RESET"),
            IoError::ChannelDown(w) => write!(f, "channel down: {w}"),
        }
    }
}

impl std::error::Error for IoError {}

/// Why a command was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitError {
    /// No channel is live.
    NotLive,
    /// Every live channel is out of credits or free tags (`SCSI_MLQUEUE_HOST_BUSY`): wait
    /// for a completion.
    Busy,
    /// More buffers than an SRP_CMD carries ("Could not fit S/G list into SRP_CMD").
    TooManySegments { got: usize, max: usize },
    /// A CDB longer than 32 bytes, or a data direction without buffers.
    BadCommand(&'static str),
    /// A buffer could not be read (immediate data).
    Buffer(String),
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubmitError::NotLive => f.write_str("no live channel"),
            SubmitError::Busy => f.write_str("no credit or tag free"),
            SubmitError::TooManySegments { got, max } => write!(
                f,
                "Could not fit S/G list into SRP_CMD ({got} buffers, at most {max})"
            ),
            SubmitError::BadCommand(w) => f.write_str(w),
            SubmitError::Buffer(w) => write!(f, "buffer: {w}"),
        }
    }
}

impl std::error::Error for SubmitError {}

/// A command's data direction (from the initiator's side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataDir {
    #[default]
    None,
    /// Data from the target (READ): RDMA WRITEs into our buffers.
    FromTarget,
    /// Data to the target (WRITE): RDMA READs from our buffers, or immediate data.
    ToTarget,
}

/// A piece of registered memory (an MR from [`SrpInitiator::alloc_buffer`] or the
/// caller's own, registered with remote read and write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub mr: MrKeys,
    /// The address in the MR's virtual address space.
    pub addr: u64,
    pub len: u32,
}

/// A SCSI command to send.
#[derive(Debug, Clone, Copy)]
pub struct Command<'a> {
    pub lun: u64,
    pub cdb: &'a [u8],
    pub dir: DataDir,
    pub segs: &'a [Segment],
    /// The caller's cookie, handed back in the [`Completion`].
    pub user: u64,
    /// The deadline (default [`InitiatorConfig::cmd_timeout`]).
    pub timeout: Option<Duration>,
    /// The channel to use (default: the next live one with room).
    pub channel: Option<usize>,
}

impl<'a> Command<'a> {
    pub fn new(lun: u64, cdb: &'a [u8]) -> Command<'a> {
        Command {
            lun,
            cdb,
            dir: DataDir::None,
            segs: &[],
            user: 0,
            timeout: None,
            channel: None,
        }
    }
    pub fn read_into(mut self, segs: &'a [Segment]) -> Self {
        self.dir = DataDir::FromTarget;
        self.segs = segs;
        self
    }
    pub fn write_from(mut self, segs: &'a [Segment]) -> Self {
        self.dir = DataDir::ToTarget;
        self.segs = segs;
        self
    }
    pub fn user(mut self, user: u64) -> Self {
        self.user = user;
        self
    }
}

/// A command's SCSI outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiResult {
    pub status: ScsiStatus,
    /// Sense data (fixed format from Linux targets), if the response had any.
    pub sense: Vec<u8>,
    /// Residual: > 0 underflow (bytes not moved), < 0 overflow.
    pub resid: i64,
}

impl ScsiResult {
    /// Sense key, ASC, ASCQ of fixed-format sense data.
    pub fn sense_key(&self) -> Option<(u8, u8, u8)> {
        (self.sense.len() >= 14).then(|| (self.sense[2] & 0x0f, self.sense[12], self.sense[13]))
    }
}

/// A command that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// Its tag (host order: `channel << 16 | slot`).
    pub tag: u64,
    pub user: u64,
    pub lun: u64,
    pub channel: usize,
    pub result: Result<ScsiResult, IoError>,
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
    /// The target went away (every channel down): why.
    Failed(String),
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
    ChannelDown { channel: usize, why: String },
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
    /// Something unexpected.
    Warning {
        channel: Option<usize>,
        what: String,
    },
}

// wr_id: channel (16 bits) | kind (8) | index (32).
const K_RECV: u64 = 1;
const K_SEND: u64 = 2;

fn wr_id(ch: usize, kind: u64, idx: u32) -> u64 {
    (ch as u64) << 40 | kind << 32 | u64::from(idx)
}

fn split_wr_id(w: u64) -> (usize, u64, u32) {
    ((w >> 40) as usize, (w >> 32) & 0xff, w as u32)
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

#[derive(Debug, Clone, Copy)]
struct Req {
    user: u64,
    lun: u64,
    deadline: Instant,
    /// An ABORT TASK for it is queued or in flight.
    aborting: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TmfKind {
    /// ABORT TASK of the command in `slot`.
    Abort {
        slot: u32,
    },
    LunReset,
}

#[derive(Debug, Clone, Copy)]
struct Tmf {
    kind: TmfKind,
    lun: u64,
    /// Host-order tag of the TMF IU (SRP_TAG_TSK_MGMT | n).
    tag: u64,
    deadline: Instant,
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
    rx: Option<MrKeys>,
    tx: Option<MrKeys>,
    idb: Option<MrKeys>,
    free_tx: Vec<u32>,
    slots: Vec<Option<Req>>,
    free_slots: Vec<u32>,
    tsk_mgmt_tag: u64,
    tmf: Option<Tmf>,
    tmf_queue: VecDeque<(TmfKind, u64)>,
    /// RC send queue room.
    sq_avail: u32,
    ib: bool,
}

impl Channel {
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
    last_down: Option<String>,
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

fn res<E: fmt::Display>(e: E) -> LoginError {
    LoginError::Resources(e.to_string())
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

    // ---------------------------------------------------------------------------------
    // Login
    // ---------------------------------------------------------------------------------

    /// Starts the login on `port` (the device whose stack this is): the PD and CQ, then
    /// the first channel (`add_target_store` → `srp_connect_ch`).
    pub fn start(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        port: CmPort,
    ) -> Result<(), LoginError> {
        self.cm_port = Some(port);
        self.sgid = stack
            .device
            .query_gid(PORT_NUM, 0)
            .map(|g| g.gid)
            .map_err(|e| LoginError::Address(format!("{e:?}")))?;
        if self.pd.is_none() {
            self.pd = Some(stack.verbs.alloc_pd().map_err(res)?);
        }
        let per_ch = 3 * self.queue_size + 2;
        let cqe = (per_ch * self.ch_count as u32).min(stack.device.query_device().max_cqe);
        self.cq = Some(stack.verbs.create_cq(cqe).map_err(res)?);
        if self.src.is_none() {
            return self.fail_login(
                0,
                LoginError::Address("no source address (give src= or the local address)".into()),
            );
        }
        self.connect_channel(now, rdma, stack, 0)
    }

    fn next_rand(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The login request of channel `k` (`srp_send_req`).
    fn login_req(&self, multi: bool) -> LoginReqRepr {
        let mut flags = if multi { 1 } else { 0 };
        let mut imm = 0;
        if self.cfg.use_imm_data {
            flags |= IMMED_REQUESTED;
            imm = SRP_IMM_DATA_OFFSET as u16;
        }
        LoginReqRepr {
            tag: 0,
            req_it_iu_len: max_it_iu_len(
                self.cmd_sg_cnt,
                self.cfg.use_imm_data,
                self.cfg.target.max_it_iu_size.unwrap_or(0),
            ),
            req_buf_fmt: BUF_FORMAT_DIRECT | BUF_FORMAT_INDIRECT,
            req_flags: flags,
            imm_data_offset: imm,
            initiator_port_id: self.initiator_port_id(),
            target_port_id: self.cfg.target.target_port_id(),
        }
    }

    /// `srp_create_ch_ib` + `srp_connect_ch` for channel `k`.
    fn connect_channel(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        k: usize,
    ) -> Result<(), LoginError> {
        let (Some(pd), Some(cq), Some(src)) = (self.pd, self.cq, self.src) else {
            return self.fail_login(k, LoginError::Resources("not started".into()));
        };
        let multi = k > 0;
        let ib = !self.cfg.target.using_rdma_cm();
        let qs = self.queue_size;
        let init = QpInitAttr::rc(pd, cq, 2 * qs, qs + 1).signal_all();
        let qpn = match stack.verbs.create_qp(init) {
            Ok((q, _)) => q,
            Err(e) => return self.fail_login(k, res(e)),
        };
        let login_req = self.login_req(multi);
        let idb = stack.verbs.reg_mr_with(
            pd,
            vec![0; (qs * self.cmd_sg_cnt * 16) as usize],
            0,
            AccessFlags(AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_READ.0),
        );
        let idb = match idb {
            Ok(k) => k,
            Err(e) => {
                let _ = stack.destroy_qp(qpn);
                return self.fail_login(k, res(e));
            }
        };
        let ch = Channel {
            index: k,
            state: ChannelState::Resolving,
            conn: None,
            qpn,
            multi,
            login_req,
            login_rsp: None,
            req_lim: 0,
            use_imm: false,
            max_it_iu_len: login_req.req_it_iu_len,
            max_ti_iu_len: 0,
            rx: None,
            tx: None,
            idb: Some(idb),
            free_tx: Vec::new(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            tsk_mgmt_tag: 0,
            tmf: None,
            tmf_queue: VecDeque::new(),
            sq_avail: 2 * qs,
            ib,
        };
        if k < self.channels.len() {
            self.channels[k] = ch;
        } else {
            self.channels.push(ch);
        }
        let t = self.cfg.target.clone();
        match t.dest {
            Dest::Rdma { dest, .. } => {
                if let Err(e) = RdmaCm::init_qp(stack, qpn) {
                    return self.fail_login(k, LoginError::Resources(e.to_string()));
                }
                let id = rdma.create_id();
                let r = rdma.resolve_addr(&id, Some(src), dest);
                self.channels[k].conn = Some(Conn::Rdma(id));
                if let Err(e) = r {
                    return self.fail_login(k, LoginError::Address(e.to_string()));
                }
                Ok(())
            }
            Dest::Ib {
                dgid,
                pkey,
                service_id,
                ..
            } => {
                // srp_init_qp: INIT with the P_Key's index, remote read and write.
                let pkey_index = (0..16u16)
                    .find(|&i| {
                        stack
                            .device
                            .query_pkey(PORT_NUM, i)
                            .is_ok_and(|p| p.0 | 0x8000 == pkey | 0x8000)
                    })
                    .unwrap_or(0);
                let attr = QpAttr {
                    qp_state: QpState::Init,
                    pkey_index,
                    port_num: PORT_NUM,
                    qp_access_flags: AccessFlags(
                        AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0,
                    ),
                    ..QpAttr::default()
                };
                if let Err(e) = stack.modify_qp(
                    qpn,
                    &attr,
                    QpAttrMask::STATE
                        | QpAttrMask::PKEY_INDEX
                        | QpAttrMask::ACCESS_FLAGS
                        | QpAttrMask::PORT,
                ) {
                    return self.fail_login(k, res(e));
                }
                let Some(port) = self.cm_port else {
                    return self.fail_login(k, LoginError::Resources("no port".into()));
                };
                // subnet_timeout 18 (rxe): CM response timeouts 20.
                let subnet_timeout = 18u8;
                let psn = (self.next_rand() & 0xff_ffff) as u32;
                let p = ReqParams {
                    port,
                    peer: MadAddr::gsi(dgid),
                    primary_path: Path {
                        local_lid: 0xffff,
                        remote_lid: 0xffff,
                        local_gid: Gid::from(src),
                        remote_gid: dgid,
                        flow_label: 0,
                        hop_limit: 64,
                        local_ack_timeout: 19,
                        ..Path::default()
                    },
                    packet_life_time: 18,
                    path_mtu: PathMtu(
                        stack
                            .device
                            .query_port(PORT_NUM)
                            .map_or(3, |p| p.active_mtu.to_enum()),
                    ),
                    partition_key: pkey,
                    service_id,
                    qp_num: qpn,
                    transport: TransportType::RC,
                    starting_psn: psn,
                    private_data: login_req.to_bytes(),
                    responder_resources: SRP_RESPONDER_RESOURCES,
                    initiator_depth: 0,
                    remote_cm_response_timeout: subnet_timeout + 2,
                    local_cm_response_timeout: subnet_timeout + 2,
                    flow_control: true,
                    retry_count: t.tl_retry_count.unwrap_or(7),
                    rnr_retry_count: 7,
                    max_cm_retries: 15,
                    srq: false,
                    ece_vendor_id: 0,
                    ece_attr_mod: 0,
                };
                let cm = rdma.cm_mut();
                let id = cm.create_id();
                if let Err(e) = cm.send_req(now, &id, &p) {
                    cm.destroy(now, id);
                    return self.fail_login(k, LoginError::Connect(format!("{e:?}")));
                }
                let c = &mut self.channels[k];
                c.conn = Some(Conn::Ib(id));
                c.state = ChannelState::Connecting;
                self.events
                    .push_back(InitiatorEvent::LoginSent { channel: k, multi });
                Ok(())
            }
        }
    }

    /// A channel's login failed: the first one fails the session, a later one leaves the
    /// session with the channels before it (`target->ch_count = ch - target->ch`).
    fn fail_login(&mut self, k: usize, e: LoginError) -> Result<(), LoginError> {
        self.events.push_back(InitiatorEvent::LoginFailed {
            channel: k,
            error: e.clone(),
        });
        if let Some(c) = self.channels.get_mut(k) {
            c.state = ChannelState::Closed;
        }
        if k == 0 {
            self.state = SessionState::LoginFailed(e.clone());
            Err(e)
        } else {
            self.ch_count = k;
            if self.state == SessionState::LoggingIn {
                self.state = SessionState::Live;
            }
            Ok(())
        }
    }

    fn channel_of_rdma(&self, id: RdmaId) -> Option<usize> {
        self.channels
            .iter()
            .position(|c| matches!(&c.conn, Some(Conn::Rdma(i)) if *i == id))
    }

    /// An RDMA CM event of one of our ids (`srp_rdma_cm_handler`); others are ignored.
    pub fn rdma_event(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ev: &RdmaCmEvent,
    ) {
        let Some(k) = self.channel_of_rdma(ev.id) else {
            return;
        };
        use RdmaCmEventType as T;
        let st = self.channels[k].state;
        match ev.event {
            T::AddrResolved => {
                let r = match &self.channels[k].conn {
                    Some(Conn::Rdma(id)) => rdma.resolve_route(id),
                    _ => return,
                };
                if let Err(e) = r {
                    let _ = self.fail_login_and_release(
                        now,
                        rdma,
                        stack,
                        k,
                        LoginError::Route(e.to_string()),
                    );
                }
            }
            T::AddrError => {
                let _ = self.fail_login_and_release(
                    now,
                    rdma,
                    stack,
                    k,
                    LoginError::Address(format!("RDMA_CM_EVENT_ADDR_ERROR (status {})", ev.status)),
                );
            }
            T::RouteResolved => {
                let c = &self.channels[k];
                let param = ConnParam {
                    private_data: LoginReqRdmaRepr::from(c.login_req).to_bytes(),
                    responder_resources: SRP_RESPONDER_RESOURCES,
                    initiator_depth: 0,
                    flow_control: true,
                    retry_count: self.cfg.target.tl_retry_count.unwrap_or(7),
                    rnr_retry_count: 7,
                };
                let qpn = c.qpn;
                let r = match &c.conn {
                    Some(Conn::Rdma(id)) => rdma.connect(now, stack, id, Some(qpn), &param),
                    _ => return,
                };
                match r {
                    Ok(()) => {
                        self.channels[k].state = ChannelState::Connecting;
                        let multi = self.channels[k].multi;
                        self.events
                            .push_back(InitiatorEvent::LoginSent { channel: k, multi });
                    }
                    Err(e) => {
                        let _ = self.fail_login_and_release(
                            now,
                            rdma,
                            stack,
                            k,
                            LoginError::Connect(e.to_string()),
                        );
                    }
                }
            }
            T::RouteError => {
                let _ = self.fail_login_and_release(
                    now,
                    rdma,
                    stack,
                    k,
                    LoginError::Route(format!("RDMA_CM_EVENT_ROUTE_ERROR (status {})", ev.status)),
                );
            }
            T::Unreachable if st < ChannelState::Live => {
                let _ = self.fail_login_and_release(now, rdma, stack, k, LoginError::Unreachable);
            }
            T::ConnectError if st < ChannelState::Live => {
                let _ = self.fail_login_and_release(
                    now,
                    rdma,
                    stack,
                    k,
                    LoginError::Connect(format!(
                        "RDMA_CM_EVENT_CONNECT_ERROR (status {})",
                        ev.status
                    )),
                );
            }
            T::Rejected if st < ChannelState::Live => {
                let rej = Reject::new(ev.reject_reason, &ev.private_data);
                let _ = self.fail_login_and_release(now, rdma, stack, k, LoginError::Rejected(rej));
            }
            T::Established if st == ChannelState::Connecting => {
                self.logged_in(now, rdma, stack, k, &ev.private_data);
            }
            T::Disconnected => {
                if st == ChannelState::Disconnecting {
                    self.events.push_back(InitiatorEvent::LoggedOut {
                        channel: k,
                        answered: ev.status == 0,
                    });
                }
                if st == ChannelState::Live {
                    // "received DREQ": answer it (DREP), the channel is down.
                    if let Some(Conn::Rdma(id)) = &self.channels[k].conn {
                        let _ = rdma.disconnect(now, stack, id);
                    }
                    self.channel_down(k, "the target disconnected (DREQ received)".into());
                }
                self.release_channel(now, rdma, stack, k);
            }
            T::TimewaitExit => {}
            T::Unreachable | T::ConnectError | T::Rejected => {
                self.channel_down(k, format!("{} (status {})", ev.event, ev.status));
                self.release_channel(now, rdma, stack, k);
            }
            _ => {}
        }
        self.after_change(now, rdma, stack);
    }

    fn fail_login_and_release(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        k: usize,
        e: LoginError,
    ) -> Result<(), LoginError> {
        let r = self.fail_login(k, e);
        self.release_channel(now, rdma, stack, k);
        r
    }

    /// An IB CM event (`srp_ib_cm_handler`); events of other ids are ignored.
    pub fn ib_event(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, ev: &CmEvent) {
        let id = match ev {
            CmEvent::RepReceived { id, .. }
            | CmEvent::ReqError { id, .. }
            | CmEvent::RejReceived { id, .. }
            | CmEvent::DreqReceived { id, .. }
            | CmEvent::DrepReceived { id, .. }
            | CmEvent::DreqError { id, .. }
            | CmEvent::TimewaitExit { id } => *id,
            _ => return,
        };
        let Some(k) = self
            .channels
            .iter()
            .position(|c| matches!(&c.conn, Some(Conn::Ib(i)) if *i == id))
        else {
            return;
        };
        let st = self.channels[k].state;
        match ev {
            CmEvent::RepReceived { rep, .. } if st == ChannelState::Connecting => {
                // srp_cm_rep_handler: the QP to RTR and RTS, then the RTU.
                let pd = rep.private_data.to_vec();
                let qpn = self.channels[k].qpn;
                let src = self.src.map(Gid::from);
                let r: Result<(), String> = (|| {
                    let Some(Conn::Ib(cid)) = &self.channels[k].conn else {
                        return Err("no id".into());
                    };
                    let cm = rdma.cm_mut();
                    let (mut a, m) = cm
                        .init_qp_attr(cid, QpState::Rtr)
                        .map_err(|e| format!("{e:?}"))?;
                    if let Some(g) = src {
                        if let Ok(i) = stack.device.find_gid(PORT_NUM, &g, GidType::RoceV2) {
                            a.ah_attr.sgid_index = i;
                        }
                    }
                    stack.modify_qp(qpn, &a, m).map_err(|e| e.to_string())?;
                    let (a, m) = cm
                        .init_qp_attr(cid, QpState::Rts)
                        .map_err(|e| format!("{e:?}"))?;
                    stack.modify_qp(qpn, &a, m).map_err(|e| e.to_string())?;
                    Ok(())
                })();
                if let Err(e) = r {
                    let _ =
                        self.fail_login_and_release(now, rdma, stack, k, LoginError::Connect(e));
                } else if self.logged_in(now, rdma, stack, k, &pd) {
                    if let Some(Conn::Ib(cid)) = &self.channels[k].conn {
                        let _ = rdma.cm_mut().send_rtu(now, cid, &[]);
                    }
                }
            }
            CmEvent::ReqError { .. } if st < ChannelState::Live => {
                let _ = self.fail_login_and_release(now, rdma, stack, k, LoginError::Unreachable);
            }
            CmEvent::RejReceived { rej, .. } if st < ChannelState::Live => {
                let r = Reject::new(Some(rej.reason), &rej.private_data);
                let _ = self.fail_login_and_release(now, rdma, stack, k, LoginError::Rejected(r));
            }
            CmEvent::DreqReceived { .. } => {
                // "DREQ received - connection closed"
                if let Some(Conn::Ib(cid)) = &self.channels[k].conn {
                    let _ = rdma.cm_mut().send_drep(now, cid, &[]);
                }
                self.qp_to_err(stack, k);
                if st == ChannelState::Live {
                    self.channel_down(k, "the target disconnected (DREQ received)".into());
                }
                self.release_channel(now, rdma, stack, k);
            }
            CmEvent::DrepReceived { .. }
            | CmEvent::DreqError { .. }
            | CmEvent::TimewaitExit { .. } => {
                if st == ChannelState::Disconnecting {
                    self.events.push_back(InitiatorEvent::LoggedOut {
                        channel: k,
                        answered: matches!(ev, CmEvent::DrepReceived { .. }),
                    });
                }
                if st == ChannelState::Live {
                    self.channel_down(k, "connection closed".into());
                }
                self.release_channel(now, rdma, stack, k);
            }
            CmEvent::RejReceived { .. } => {
                self.channel_down(k, "REJ received".into());
                self.release_channel(now, rdma, stack, k);
            }
            _ => {}
        }
        self.after_change(now, rdma, stack);
    }

    /// `srp_cm_rep_handler`: the login response. Returns whether the channel is live.
    fn logged_in(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        k: usize,
        private_data: &[u8],
    ) -> bool {
        let rsp = match LoginRspRepr::parse(private_data) {
            Ok(r) => r,
            Err(_) => {
                let op = private_data.first().copied().unwrap_or(0);
                let _ = self.fail_login(
                    k,
                    LoginError::BadResponse(format!("Unhandled RSP opcode {op:#x}")),
                );
                self.disconnect_channel(now, rdma, stack, k);
                return false;
            }
        };
        let use_imm = self.cfg.use_imm_data && rsp.immediate_supported();
        let max_it = max_it_iu_len(
            self.cmd_sg_cnt,
            use_imm,
            self.cfg.target.max_it_iu_size.unwrap_or(0),
        );
        // Reserve a credit for task management (`can_queue = min(req_lim - 1, can_queue)`).
        let lim = i64::from(rsp.req_lim_delta) - i64::from(SRP_TSK_MGMT_SQ_SIZE);
        if lim < 1 {
            let _ = self.fail_login(
                k,
                LoginError::BadResponse(format!(
                    "the target granted {} credits",
                    rsp.req_lim_delta
                )),
            );
            self.disconnect_channel(now, rdma, stack, k);
            return false;
        }
        self.can_queue = self.can_queue.min(lim as u32);
        let (Some(pd), qs) = (self.pd, self.queue_size) else {
            return false;
        };
        let max_ti = rsp.max_ti_iu_len.max(64);
        let rx = stack.verbs.reg_mr_with(
            pd,
            vec![0; (qs * max_ti) as usize],
            0,
            AccessFlags::LOCAL_WRITE,
        );
        let tx = stack.verbs.reg_mr_with(
            pd,
            vec![0; (qs * max_it) as usize],
            0,
            AccessFlags::LOCAL_WRITE,
        );
        let (rx, tx) = match (rx, tx) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => {
                for k in [a, b].into_iter().flatten() {
                    let _ = stack.verbs.dereg_mr(k.lkey);
                }
                let _ = self.fail_login(k, LoginError::Resources("IU rings".into()));
                self.disconnect_channel(now, rdma, stack, k);
                return false;
            }
        };
        let can_queue = self.can_queue;
        let c = &mut self.channels[k];
        c.login_rsp = Some(rsp);
        c.req_lim = i64::from(rsp.req_lim_delta);
        c.use_imm = use_imm;
        c.max_it_iu_len = max_it;
        c.max_ti_iu_len = max_ti;
        c.rx = Some(rx);
        c.tx = Some(tx);
        c.free_tx = (0..qs).rev().collect();
        c.slots = vec![None; can_queue as usize];
        c.free_slots = (0..can_queue).rev().collect();
        let qpn = c.qpn;
        for i in 0..qs {
            let _ = post_recv(stack, qpn, k, rx, max_ti, i);
        }
        c.state = ChannelState::Live;
        self.events.push_back(InitiatorEvent::LoggedIn {
            channel: k,
            rsp,
            immediate: use_imm,
        });
        true
    }

    /// After a channel changed: log in the next one, or settle the session's state.
    fn after_change(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack) {
        if self.state == SessionState::LoggingIn {
            let done = self
                .channels
                .iter()
                .take(self.ch_count)
                .filter(|c| c.state >= ChannelState::Live)
                .count();
            let last_live = self
                .channels
                .last()
                .is_some_and(|c| c.state == ChannelState::Live);
            if done == self.channels.len() && last_live {
                if self.channels.len() < self.ch_count {
                    let k = self.channels.len();
                    let _ = self.connect_channel(now, rdma, stack, k);
                } else {
                    self.state = SessionState::Live;
                }
            }
        }
        if matches!(self.state, SessionState::Live) {
            // Channels that died after login: when none is left, the session failed.
            if !self.channels.is_empty()
                && self
                    .channels
                    .iter()
                    .all(|c| c.state >= ChannelState::Disconnecting)
            {
                let why = self
                    .last_down
                    .clone()
                    .unwrap_or_else(|| "every channel is down".into());
                self.state = SessionState::Failed(why);
            }
        }
        if self.state == SessionState::LoggingOut
            && self
                .channels
                .iter()
                .all(|c| c.state == ChannelState::Closed)
        {
            self.release_all(stack);
            self.state = SessionState::Closed;
        }
    }
}

impl SrpInitiator {
    // ---------------------------------------------------------------------------------
    // Channels going down
    // ---------------------------------------------------------------------------------

    fn qp_to_err(&mut self, stack: &mut Stack, k: usize) {
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        let _ = stack.modify_qp(self.channels[k].qpn, &attr, QpAttrMask::STATE);
    }

    /// The channel is down: its commands end with `why`.
    fn channel_down(&mut self, k: usize, why: String) {
        let c = &mut self.channels[k];
        if c.state <= ChannelState::Live {
            c.state = ChannelState::Disconnecting;
        }
        c.tmf = None;
        c.tmf_queue.clear();
        for (slot, r) in c.slots.iter_mut().enumerate() {
            if let Some(req) = r.take() {
                self.completions.push_back(Completion {
                    tag: (k as u64) << 16 | slot as u64,
                    user: req.user,
                    lun: req.lun,
                    channel: k,
                    result: Err(IoError::ChannelDown(why.clone())),
                });
                c.free_slots.push(slot as u32);
            }
        }
        self.events.push_back(InitiatorEvent::ChannelDown {
            channel: k,
            why: why.clone(),
        });
        self.last_down = Some(why);
    }

    /// DREQ (or the QP to ERR if the CM refuses) for channel `k`.
    fn disconnect_channel(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, k: usize) {
        let c = &mut self.channels[k];
        if c.state >= ChannelState::Disconnecting {
            return;
        }
        c.state = ChannelState::Disconnecting;
        let ok = match &c.conn {
            Some(Conn::Rdma(id)) => rdma.disconnect(now, stack, id).is_ok(),
            Some(Conn::Ib(id)) => rdma.cm_mut().send_dreq(now, id, &[]).is_ok(),
            None => false,
        };
        self.qp_to_err(stack, k);
        if !ok {
            self.release_channel(now, rdma, stack, k);
        }
    }

    /// `srp_free_ch_ib`: the CM id, the QP, the rings.
    fn release_channel(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, k: usize) {
        let c = &mut self.channels[k];
        c.state = ChannelState::Closed;
        match c.conn.take() {
            Some(Conn::Rdma(id)) => rdma.destroy(now, id),
            Some(Conn::Ib(id)) => rdma.cm_mut().destroy(now, id),
            None => {}
        }
        let _ = stack.destroy_qp(c.qpn);
        for m in [c.rx.take(), c.tx.take(), c.idb.take()]
            .into_iter()
            .flatten()
        {
            let _ = stack.verbs.dereg_mr(m.lkey);
        }
        c.free_tx.clear();
    }

    fn release_all(&mut self, stack: &mut Stack) {
        for k in std::mem::take(&mut self.buffers) {
            let _ = stack.verbs.dereg_mr(k.lkey);
        }
        if let Some(cq) = self.cq.take() {
            let _ = stack.verbs.destroy_cq(cq);
        }
    }

    /// Logs out (`srp_disconnect_target`): a DREQ on every channel; the session is
    /// [`SessionState::Closed`] once they are all answered (or time out). Commands still in
    /// flight end with [`IoError::ChannelDown`].
    pub fn logout(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack) {
        if self.is_done() {
            return;
        }
        self.state = SessionState::LoggingOut;
        for k in 0..self.channels.len() {
            let st = self.channels[k].state;
            if st == ChannelState::Live {
                self.channel_down(k, "logged out".into());
                self.channels[k].state = ChannelState::Live;
                self.disconnect_channel(now, rdma, stack, k);
            } else if st < ChannelState::Live {
                self.release_channel(now, rdma, stack, k);
            }
        }
        // The ChannelDown events of a logout are ours, not news.
        self.events.retain(
            |e| !matches!(e, InitiatorEvent::ChannelDown { why, .. } if why == "logged out"),
        );
        self.after_change(now, rdma, stack);
    }

    // ---------------------------------------------------------------------------------
    // Completions
    // ---------------------------------------------------------------------------------

    /// Polls the CQ and handles what it holds. Returns the number of completions.
    pub fn poll(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack) -> usize {
        let Some(cq) = self.cq else { return 0 };
        let mut wcs = std::mem::take(&mut self.wcs);
        let n = crate::channel::drain_cq(stack, cq, &mut wcs, |stack, wc| {
            self.completion(now, rdma, stack, wc)
        });
        self.wcs = wcs;
        n
    }

    /// One work completion (for a program that took it off the CQ itself).
    pub fn completion(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        wc: &WorkCompletion,
    ) {
        let (k, kind, idx) = split_wr_id(wc.wr_id);
        let Some(c) = self.channels.get_mut(k) else {
            return;
        };
        if kind == K_SEND {
            c.sq_avail += 1;
            if c.tx.is_some() {
                c.free_tx.push(idx);
            }
        }
        if wc.status != WcStatus::Success {
            if c.state == ChannelState::Live && wc.status != WcStatus::WrFlushErr {
                // srp_handle_qp_err: "failed SEND/RECV status ..."
                let why = format!(
                    "failed {} status {:?}",
                    if kind == K_SEND { "SEND" } else { "RECV" },
                    wc.status
                );
                self.channel_down(k, why);
                self.disconnect_channel_after_error(now, rdma, stack, k);
                self.after_change(now, rdma, stack);
            }
            return;
        }
        if kind != K_RECV || c.state != ChannelState::Live {
            if kind == K_SEND {
                self.pump_tmf(now, stack, k);
            }
            return;
        }
        let Some(rx) = c.rx else { return };
        let addr = u64::from(idx) * u64::from(c.max_ti_iu_len);
        let len = wc.byte_len as usize;
        let mut buf = std::mem::take(&mut self.scratch);
        buf.resize(len, 0);
        let ok = stack.verbs.local_read(rx.lkey, addr, &mut buf).is_ok();
        let (qpn, max_ti) = (c.qpn, c.max_ti_iu_len);
        if ok && !buf.is_empty() {
            self.handle_iu(now, stack, k, &buf);
        }
        self.scratch = buf;
        let _ = post_recv(stack, qpn, k, rx, max_ti, idx);
        self.pump_tmf(now, stack, k);
    }

    fn disconnect_channel_after_error(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        k: usize,
    ) {
        // channel_down set DISCONNECTING; send the DREQ anyway (the CM retries it, then
        // gives up into timewait), so a target that is still there hears of it.
        let c = &mut self.channels[k];
        let ok = match &c.conn {
            Some(Conn::Rdma(id)) => rdma.disconnect(now, stack, id).is_ok(),
            Some(Conn::Ib(id)) => rdma.cm_mut().send_dreq(now, id, &[]).is_ok(),
            None => false,
        };
        self.qp_to_err(stack, k);
        if !ok {
            self.release_channel(now, rdma, stack, k);
        }
    }

    /// `srp_recv_done`: one IU from the target.
    fn handle_iu(&mut self, now: Instant, stack: &mut Stack, k: usize, b: &[u8]) {
        match Opcode(b[0]) {
            Opcode::RSP => match RspRepr::parse(b) {
                Ok(r) => self.process_rsp(now, k, r),
                Err(e) => self.events.push_back(InitiatorEvent::Warning {
                    channel: Some(k),
                    what: format!("malformed SRP_RSP: {e}"),
                }),
            },
            Opcode::CRED_REQ => {
                if let Ok(r) = CredReqRepr::parse(b) {
                    self.channels[k].req_lim += i64::from(r.req_lim_delta);
                    self.events.push_back(InitiatorEvent::CreditRequest {
                        channel: k,
                        delta: r.req_lim_delta,
                    });
                    self.send_short(stack, k, Opcode::CRED_RSP, r.tag);
                }
            }
            Opcode::AER_REQ => {
                if let Ok(r) = softrdma_wire::srp::AerReqRepr::parse(b) {
                    self.channels[k].req_lim += i64::from(r.req_lim_delta);
                    self.events.push_back(InitiatorEvent::AsyncEvent {
                        channel: k,
                        lun: r.lun,
                    });
                    self.send_short(stack, k, Opcode::AER_RSP, r.tag);
                }
            }
            Opcode::T_LOGOUT => {
                let reason = TLogoutRepr::parse(b).map(|r| r.reason.0).unwrap_or(0);
                self.events
                    .push_back(InitiatorEvent::TargetLogout { channel: k, reason });
            }
            op => self.events.push_back(InitiatorEvent::Warning {
                channel: Some(k),
                what: format!("Unhandled SRP opcode {:#04x}", op.0),
            }),
        }
    }

    /// SRP_CRED_RSP / SRP_AER_RSP (`srp_response_common`: no credit).
    fn send_short(&mut self, stack: &mut Stack, k: usize, op: Opcode, tag: u64) {
        let c = &mut self.channels[k];
        let (Some(tx), Some(i)) = (c.tx, c.free_tx.pop()) else {
            self.events.push_back(InitiatorEvent::Warning {
                channel: Some(k),
                what: "no IU available to send response".into(),
            });
            return;
        };
        let addr = u64::from(i) * u64::from(c.max_it_iu_len);
        let mut b = [0u8; 16];
        let _ = iu::write_short_iu(&mut b, op, 0, tag);
        let _ = stack.verbs.local_write(tx.lkey, addr, &b);
        let qpn = c.qpn;
        if post_send(stack, qpn, k, tx, addr, 16, i).is_ok() {
            c.sq_avail = c.sq_avail.saturating_sub(1);
        } else {
            c.free_tx.push(i);
        }
    }

    /// `srp_process_rsp`.
    fn process_rsp(&mut self, now: Instant, k: usize, r: RspRepr) {
        let host = wire_tag(r.tag);
        let c = &mut self.channels[k];
        c.req_lim += i64::from(r.req_lim_delta);
        if host & SRP_TAG_TSK_MGMT != 0 {
            match c.tmf {
                Some(t) if t.tag == host => {
                    let code = (r.response_data.len() >= 4).then(|| r.response_data[3]);
                    c.tmf = None;
                    self.tmf_done(now, k, t, code);
                }
                _ => self.events.push_back(InitiatorEvent::Warning {
                    channel: Some(k),
                    what: format!("Received tsk mgmt response too late for tag {host:#x}"),
                }),
            }
            return;
        }
        let slot = (host & 0xffff) as usize;
        let ch_of_tag = (host >> 16) as usize & 0xffff;
        let req = if ch_of_tag == k {
            c.slots.get_mut(slot).and_then(|s| s.take())
        } else {
            None
        };
        let Some(req) = req else {
            self.events.push_back(InitiatorEvent::LateResponse {
                channel: k,
                tag: host,
            });
            return;
        };
        c.free_slots.push(slot as u32);
        let resid = if r.flags.diunder() {
            i64::from(r.data_in_res_cnt)
        } else if r.flags.dounder() {
            i64::from(r.data_out_res_cnt)
        } else if r.flags.diover() {
            -i64::from(r.data_in_res_cnt)
        } else if r.flags.doover() {
            -i64::from(r.data_out_res_cnt)
        } else {
            0
        };
        let sense = if r.flags.snsvalid() {
            r.sense_data
        } else {
            Vec::new()
        };
        self.completions.push_back(Completion {
            tag: host,
            user: req.user,
            lun: req.lun,
            channel: k,
            result: Ok(ScsiResult {
                status: r.status,
                sense,
                resid,
            }),
        });
    }

    // ---------------------------------------------------------------------------------
    // Commands
    // ---------------------------------------------------------------------------------

    fn pick_channel(&mut self, want: Option<usize>) -> Result<usize, SubmitError> {
        let ok = |c: &Channel| {
            c.state == ChannelState::Live
                && !c.free_slots.is_empty()
                && !c.free_tx.is_empty()
                && c.req_lim > i64::from(SRP_TSK_MGMT_SQ_SIZE)
                && c.sq_avail > 0
        };
        if let Some(k) = want {
            return match self.channels.get(k) {
                Some(c) if ok(c) => Ok(k),
                Some(c) if c.state == ChannelState::Live => Err(SubmitError::Busy),
                _ => Err(SubmitError::NotLive),
            };
        }
        let n = self.channels.len();
        if !self.channels.iter().any(|c| c.state == ChannelState::Live) {
            return Err(SubmitError::NotLive);
        }
        for i in 0..n {
            let k = (self.next_channel + i) % n;
            if ok(&self.channels[k]) {
                self.next_channel = (k + 1) % n;
                return Ok(k);
            }
        }
        Err(SubmitError::Busy)
    }

    /// Sends a SCSI command (`srp_queuecommand`). Returns its tag; its end comes from
    /// [`SrpInitiator::poll_completion`].
    pub fn submit(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        cmd: &Command<'_>,
    ) -> Result<u64, SubmitError> {
        if cmd.cdb.len() > 32 || cmd.cdb.is_empty() {
            return Err(SubmitError::BadCommand("a CDB is 1 to 32 bytes"));
        }
        if cmd.dir != DataDir::None && cmd.segs.is_empty() {
            return Err(SubmitError::BadCommand("a data phase needs buffers"));
        }
        if !self.is_live() {
            return Err(SubmitError::NotLive);
        }
        let k = self.pick_channel(cmd.channel)?;
        let max_sg = self.cmd_sg_cnt as usize;
        let c = &self.channels[k];
        let total: u64 = cmd.segs.iter().map(|s| u64::from(s.len)).sum();
        let imm = cmd.dir == DataDir::ToTarget
            && c.use_imm
            && cmd.segs.len() <= SRP_IMM_DATA_SGE_LIMIT
            && SRP_IMM_DATA_OFFSET as u64 + total <= u64::from(c.max_it_iu_len);
        if !imm && cmd.segs.len() > max_sg {
            return Err(SubmitError::TooManySegments {
                got: cmd.segs.len(),
                max: max_sg,
            });
        }
        let (Some(tx), Some(idb)) = (c.tx, c.idb) else {
            return Err(SubmitError::NotLive);
        };
        let c = &mut self.channels[k];
        let slot = c.free_slots.pop().ok_or(SubmitError::Busy)?;
        let Some(ti) = c.free_tx.pop() else {
            c.free_slots.push(slot);
            return Err(SubmitError::Busy);
        };
        let host_tag = (k as u64) << 16 | u64::from(slot);
        let lun = LunId(cmd.lun).to_wire();
        let out = cmd.dir == DataDir::ToTarget;
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.resize(c.max_it_iu_len as usize, 0);
        self.descs.clear();
        let data = if cmd.dir == DataDir::None {
            CmdData::None
        } else if imm {
            CmdData::Immediate { len: total as u32 }
        } else if cmd.segs.len() == 1 {
            let s = cmd.segs[0];
            CmdData::Direct {
                out,
                desc: DirectBuf {
                    va: s.addr,
                    key: s.mr.rkey,
                    len: s.len,
                },
            }
        } else {
            self.descs.extend(cmd.segs.iter().map(|s| DirectBuf {
                va: s.addr,
                key: s.mr.rkey,
                len: s.len,
            }));
            // The whole table in our memory too (req->indirect_desc).
            let table_len = self.descs.len() * 16;
            let at = u64::from(ti) * u64::from(self.cmd_sg_cnt) * 16;
            let mut t = vec![0u8; table_len];
            for (i, d) in self.descs.iter().enumerate() {
                t[16 * i..16 * i + 8].copy_from_slice(&d.va.to_be_bytes());
                t[16 * i + 8..16 * i + 12].copy_from_slice(&d.key.to_be_bytes());
                t[16 * i + 12..16 * i + 16].copy_from_slice(&d.len.to_be_bytes());
            }
            let _ = stack.verbs.local_write(idb.lkey, at, &t);
            CmdData::Indirect {
                out,
                table: DirectBuf {
                    va: at,
                    key: idb.rkey,
                    len: table_len as u32,
                },
                total: total as u32,
                descs: &self.descs,
            }
        };
        let Some(mut len) = iu::write_cmd(&mut buf, wire_tag(host_tag), lun, 0, cmd.cdb, &data)
        else {
            let c = &mut self.channels[k];
            c.free_slots.push(slot);
            c.free_tx.push(ti);
            self.scratch = buf;
            return Err(SubmitError::BadCommand("the IU does not fit"));
        };
        if imm {
            let mut at = SRP_IMM_DATA_OFFSET;
            for s in cmd.segs {
                let n = s.len as usize;
                if let Err(e) = stack
                    .verbs
                    .local_read(s.mr.lkey, s.addr, &mut buf[at..at + n])
                {
                    let c = &mut self.channels[k];
                    c.free_slots.push(slot);
                    c.free_tx.push(ti);
                    self.scratch = buf;
                    return Err(SubmitError::Buffer(e.to_string()));
                }
                at += n;
            }
            len = at;
        }
        let c = &mut self.channels[k];
        let addr = u64::from(ti) * u64::from(c.max_it_iu_len);
        let _ = stack.verbs.local_write(tx.lkey, addr, &buf[..len]);
        self.scratch = buf;
        if let Err(e) = post_send(stack, c.qpn, k, tx, addr, len as u32, ti) {
            c.free_slots.push(slot);
            c.free_tx.push(ti);
            return Err(SubmitError::Buffer(format!("Send failed: {e}")));
        }
        c.sq_avail -= 1;
        c.req_lim -= 1;
        c.slots[slot as usize] = Some(Req {
            user: cmd.user,
            lun: cmd.lun,
            deadline: now + cmd.timeout.unwrap_or(self.cfg.cmd_timeout),
            aborting: false,
        });
        Ok(host_tag)
    }

    // ---------------------------------------------------------------------------------
    // Timeouts and task management
    // ---------------------------------------------------------------------------------

    /// When [`SrpInitiator::handle_timeout`] wants to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut min = |x: Instant| t = Some(t.map_or(x, |y| y.min(x)));
        for c in &self.channels {
            if c.state != ChannelState::Live {
                continue;
            }
            if let Some(m) = &c.tmf {
                min(m.deadline);
            }
            for r in c.slots.iter().flatten() {
                if !r.aborting {
                    min(r.deadline);
                }
            }
        }
        t
    }

    /// Command deadlines (ABORT TASK) and task management timeouts (LUN RESET, then the
    /// target is given up on).
    pub fn handle_timeout(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack) {
        for k in 0..self.channels.len() {
            if self.channels[k].state != ChannelState::Live {
                continue;
            }
            // srp_abort for every command past its deadline.
            let c = &mut self.channels[k];
            for (slot, r) in c.slots.iter_mut().enumerate() {
                if let Some(r) = r {
                    if !r.aborting && r.deadline <= now {
                        r.aborting = true;
                        c.tmf_queue
                            .push_back((TmfKind::Abort { slot: slot as u32 }, r.lun));
                    }
                }
            }
            if let Some(t) = c.tmf {
                if t.deadline <= now {
                    c.tmf = None;
                    self.events.push_back(InitiatorEvent::TaskMgmtDone {
                        channel: k,
                        function: tmf_function(t.kind),
                        rsp_code: None,
                    });
                    match t.kind {
                        // srp_abort FAILED: the midlayer escalates to a device reset.
                        TmfKind::Abort { .. } => {
                            let c = &mut self.channels[k];
                            if !c
                                .tmf_queue
                                .iter()
                                .any(|(q, l)| *q == TmfKind::LunReset && *l == t.lun)
                            {
                                c.tmf_queue.push_front((TmfKind::LunReset, t.lun));
                            }
                        }
                        // srp_reset_device FAILED: host reset = reconnect; we give up.
                        TmfKind::LunReset => {
                            self.give_up(
                                now,
                                rdma,
                                stack,
                                "the target does not answer (ABORT TASK and LOGICAL UNIT RESET timed out)",
                            );
                            return;
                        }
                    }
                }
            }
            self.pump_tmf(now, stack, k);
        }
    }

    /// Every channel down with `why`, DREQs out.
    fn give_up(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, why: &str) {
        for k in 0..self.channels.len() {
            if self.channels[k].state == ChannelState::Live {
                self.channel_down(k, why.to_string());
                self.disconnect_channel_after_error(now, rdma, stack, k);
            }
        }
        self.state = SessionState::Failed(why.to_string());
        self.after_change(now, rdma, stack);
    }

    /// Sends the next queued task management function of channel `k` if none is in
    /// flight (ib_srp sends one at a time, under the rport mutex).
    fn pump_tmf(&mut self, now: Instant, stack: &mut Stack, k: usize) {
        loop {
            let c = &mut self.channels[k];
            if c.tmf.is_some() || c.state != ChannelState::Live {
                return;
            }
            let Some(&(kind, lun)) = c.tmf_queue.front() else {
                return;
            };
            // An ABORT for a command that meanwhile ended: nothing to do.
            if let TmfKind::Abort { slot } = kind {
                if !c
                    .slots
                    .get(slot as usize)
                    .is_some_and(|s| s.is_some_and(|r| r.aborting))
                {
                    c.tmf_queue.pop_front();
                    continue;
                }
            }
            // __srp_get_tx_iu(SRP_IU_TSK_MGMT): a tx IU and a credit (no reserve).
            if c.req_lim <= 0 || c.sq_avail == 0 {
                return;
            }
            let (Some(tx), Some(ti)) = (c.tx, c.free_tx.pop()) else {
                return;
            };
            c.tmf_queue.pop_front();
            c.tsk_mgmt_tag = (c.tsk_mgmt_tag + 1) | SRP_TAG_TSK_MGMT;
            let tag = c.tsk_mgmt_tag;
            let (func, task_tag) = match kind {
                TmfKind::Abort { slot } => (
                    TaskMgmtFunction::ABORT_TASK,
                    (k as u64) << 16 | u64::from(slot),
                ),
                TmfKind::LunReset => (TaskMgmtFunction::LUN_RESET, SRP_TAG_NO_REQ),
            };
            let mut b = [0u8; 48];
            let _ = iu::write_tsk_mgmt(
                &mut b,
                wire_tag(tag),
                LunId(lun).to_wire(),
                func.0,
                wire_tag(task_tag),
            );
            let addr = u64::from(ti) * u64::from(c.max_it_iu_len);
            let _ = stack.verbs.local_write(tx.lkey, addr, &b);
            if post_send(stack, c.qpn, k, tx, addr, 48, ti).is_err() {
                c.free_tx.push(ti);
                return;
            }
            c.sq_avail -= 1;
            c.req_lim -= 1;
            c.tmf = Some(Tmf {
                kind,
                lun,
                tag,
                deadline: now + self.cfg.abort_timeout,
            });
            self.events.push_back(InitiatorEvent::TaskMgmt {
                channel: k,
                function: func,
                lun,
                task_tag,
            });
            return;
        }
    }

    /// The answer to a task management function.
    fn tmf_done(&mut self, _now: Instant, k: usize, t: Tmf, code: Option<u8>) {
        self.events.push_back(InitiatorEvent::TaskMgmtDone {
            channel: k,
            function: tmf_function(t.kind),
            rsp_code: code,
        });
        match t.kind {
            TmfKind::Abort { slot } => {
                // srp_abort: any answer in time is SUCCESS; the command is freed without
                // its credit (the target returns it with a later response).
                let c = &mut self.channels[k];
                if let Some(req) = c.slots.get_mut(slot as usize).and_then(|s| s.take()) {
                    c.free_slots.push(slot);
                    self.completions.push_back(Completion {
                        tag: (k as u64) << 16 | u64::from(slot),
                        user: req.user,
                        lun: req.lun,
                        channel: k,
                        result: Err(IoError::TimedOut { rsp_code: code }),
                    });
                }
            }
            TmfKind::LunReset => {
                if code != Some(0) {
                    // srp_reset_device FAILED: escalation is a host reset; we give up on
                    // the LUN's commands.
                    self.events.push_back(InitiatorEvent::Warning {
                        channel: Some(k),
                        what: format!("LOGICAL UNIT RESET answered RSP_CODE {code:?}"),
                    });
                }
                // Every command of the LUN ends (timed-out ones as such).
                for ch in 0..self.channels.len() {
                    let c = &mut self.channels[ch];
                    for (slot, s) in c.slots.iter_mut().enumerate() {
                        if s.is_some_and(|r| r.lun == t.lun) {
                            let Some(req) = s.take() else { continue };
                            c.free_slots.push(slot as u32);
                            self.completions.push_back(Completion {
                                tag: (ch as u64) << 16 | slot as u64,
                                user: req.user,
                                lun: req.lun,
                                channel: ch,
                                result: Err(if req.aborting {
                                    IoError::TimedOut { rsp_code: None }
                                } else {
                                    IoError::Reset
                                }),
                            });
                        }
                    }
                    c.tmf_queue
                        .retain(|(q, l)| !(matches!(q, TmfKind::Abort { .. }) && *l == t.lun));
                }
            }
        }
    }
}

/// `SRP_MAX_IMM_SGE`.
const SRP_IMM_DATA_SGE_LIMIT: usize = SRP_MAX_IMM_SGE;

fn tmf_function(k: TmfKind) -> TaskMgmtFunction {
    match k {
        TmfKind::Abort { .. } => TaskMgmtFunction::ABORT_TASK,
        TmfKind::LunReset => TaskMgmtFunction::LUN_RESET,
    }
}

fn post_recv(
    stack: &mut Stack,
    qpn: u32,
    ch: usize,
    rx: MrKeys,
    size: u32,
    i: u32,
) -> Result<(), VerbsError> {
    stack.post_recv(
        qpn,
        RecvWr::new(
            wr_id(ch, K_RECV, i),
            vec![Sge {
                addr: u64::from(i) * u64::from(size),
                length: size,
                lkey: rx.lkey,
            }],
        ),
    )
}

fn post_send(
    stack: &mut Stack,
    qpn: u32,
    ch: usize,
    tx: MrKeys,
    addr: u64,
    len: u32,
    i: u32,
) -> Result<(), VerbsError> {
    let wr = SendWr::new(wr_id(ch, K_SEND, i), SendOp::Send).with_sge(Sge {
        addr,
        length: len,
        lkey: tx.lkey,
    });
    stack.post_send(qpn, wr)
}

/// CDBs the SCSI midlayer and `sd` send (what a program needs to use a disk).
pub mod cdb {
    /// TEST UNIT READY.
    pub fn test_unit_ready() -> [u8; 6] {
        [0; 6]
    }

    /// INQUIRY (standard data, `alloc` bytes).
    pub fn inquiry(alloc: u16) -> [u8; 6] {
        let a = alloc.to_be_bytes();
        [0x12, 0, 0, a[0], a[1], 0]
    }

    /// REPORT LUNS.
    pub fn report_luns(alloc: u32) -> [u8; 12] {
        let a = alloc.to_be_bytes();
        [0xa0, 0, 0, 0, 0, 0, a[0], a[1], a[2], a[3], 0, 0]
    }

    /// READ CAPACITY(10).
    pub fn read_capacity10() -> [u8; 10] {
        [0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    }

    /// READ CAPACITY(16) (SERVICE ACTION IN(16)), 32 bytes.
    pub fn read_capacity16() -> [u8; 16] {
        let mut c = [0u8; 16];
        c[0] = 0x9e;
        c[1] = 0x10;
        c[13] = 32;
        c
    }

    /// READ/WRITE as `sd` picks them: (10) when the LBA fits in 32 bits and the count in
    /// 16, else (16). Returns the CDB and its length.
    pub fn rw(write: bool, lba: u64, blocks: u32) -> ([u8; 16], usize) {
        let mut c = [0u8; 16];
        if lba <= u64::from(u32::MAX) && blocks <= 0xffff {
            c[0] = if write { 0x2a } else { 0x28 };
            c[2..6].copy_from_slice(&(lba as u32).to_be_bytes());
            c[7..9].copy_from_slice(&(blocks as u16).to_be_bytes());
            (c, 10)
        } else {
            c[0] = if write { 0x8a } else { 0x88 };
            c[2..10].copy_from_slice(&lba.to_be_bytes());
            c[10..14].copy_from_slice(&blocks.to_be_bytes());
            (c, 16)
        }
    }

    /// SYNCHRONIZE CACHE(10).
    pub fn sync_cache() -> [u8; 10] {
        [0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0]
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

    #[test]
    fn reject_messages() {
        let rej = |reason: u32| LoginRejRepr {
            reason: LoginRejReason(reason),
            tag: 0,
            buf_fmt: 6,
        };
        let r = Reject::new(
            Some(RejectReason::CONSUMER_DEFINED),
            &rej(0x0001_0002).to_bytes(),
        );
        assert_eq!(
            r.to_string(),
            "SRP_LOGIN_REJ: requested max_it_iu_len too large"
        );
        let r = Reject::new(
            Some(RejectReason::CONSUMER_DEFINED),
            &rej(0x0001_0006).to_bytes(),
        );
        assert!(r
            .to_string()
            .starts_with("SRP LOGIN REJECTED, reason 0x00010006"));
        assert_eq!(r.srp_reason(), Some(LoginRejReason(0x0001_0006)));
        let r = Reject::new(Some(RejectReason::INVALID_SERVICE_ID), &[]);
        assert_eq!(r.to_string(), "REJ reason 0x8 (invalid service ID)");
    }
}
