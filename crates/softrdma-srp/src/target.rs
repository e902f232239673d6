//! The SRP target engine: logins, channels and the data path, sans-IO.
//!
//! [`SrpTarget`] works on the core's [`Stack`] (QPs, CQs, MRs) and [`RdmaCm`] (the RDMA
//! CM, and the IB CM inside it) that the caller lends it in each call, with the time: the
//! runtime's `Cm::with(port, |rdma, stack, now| ..)` in a daemon, a simulation in tests. It
//! holds the SCSI core ([`softrdma_scsi::Target`]) and executes commands straight on the
//! registered buffers: data-out is RDMA-READ into a data buffer (or taken in place from the
//! receive buffer, for immediate data) and handed to the store from there; data-in is read
//! by the store into a data buffer and RDMA-WRITTEN from there. Buffers are registered once
//! and reused; an I/O allocates nothing but the work requests' SGE lists.
//!
//! Ownership of CM ids follows `srpt_cm_req_recv`: a login that succeeds moves the id into
//! the channel ([`ChannelId`]); one that fails gives it back inside [`LoginFailure`], whose
//! [`LoginFailure::reject`] sends the REJ and destroys it. A channel destroys its id when it
//! is released.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::IpAddr;

use softrdma_core::cm::{CmEvent, CmId, CmIdRef, CmPort, RepParams, ReqInfo};
use softrdma_core::device::{GidType, PORT_NUM};
use softrdma_core::rdma_cm::{ConnParam, RdmaCm, RdmaCmEvent, RdmaCmEventType, RdmaCmId, RdmaId};
use softrdma_core::time::Instant;
use softrdma_core::verbs::{
    AccessFlags, CqId, MrKeys, PdId, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType,
    RecvWr, SendOp, SendWr, Sge, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};
use softrdma_core::Stack;
use softrdma_scsi::{
    Cmd, CoreError, Data, DataDir, Decoded, InPlace, InitiatorId, LunId, NexusId, Residual,
    Response, SenseReason, Target, TmfKind, TmfResponse,
};
use softrdma_wire::cm::RejectReason;
use softrdma_wire::scsi::ScsiStatus;
use softrdma_wire::srp::login::{MultiChannelAction, MultiChannelResult};
use softrdma_wire::srp::{
    DirectBuf, LoginRejRepr, LoginReqRdmaRepr, LoginReqRepr, Opcode, RspCode, TLogoutReason,
    TaskMgmtFunction, TskMgmtRepr,
};

use crate::channel::ChannelState;
use crate::iu::{self, CmdIu, DataPhase, DescError, Direction, RspResidual};
use crate::login::{self, LoginPolicy, LoginRequest, Refusal, SRPT_RDMA_DEPTH};

/// The CM id of a channel: RDMA CM (RoCE logins through `dest=ip:port`) or IB CM (logins
/// to service ID = the target GUID).
#[derive(Debug, PartialEq, Eq)]
pub enum ConnId {
    Rdma(RdmaCmId),
    Ib(CmId),
}

impl ConnId {
    fn destroy(self, now: Instant, rdma: &mut RdmaCm) {
        match self {
            ConnId::Rdma(id) => rdma.destroy(now, id),
            ConnId::Ib(id) => rdma.cm_mut().destroy(now, id),
        }
    }
}

/// A login that failed: the CM id is the caller's again, with the SRP_LOGIN_REJ to send.
#[must_use = "the CM id must be rejected (LoginFailure::reject) or destroyed"]
#[derive(Debug)]
pub struct LoginFailure {
    pub conn: ConnId,
    /// Why (`None`: the private data was no SRP login at all).
    pub refusal: Option<Refusal>,
    /// The SRP_LOGIN_REJ for the REJ's private data (`None`: a REJ without it).
    pub rej: Option<LoginRejRepr>,
}

impl LoginFailure {
    /// Sends the REJ (reason 28, consumer defined, the SRP_LOGIN_REJ as private data) and
    /// destroys the id, as the caller of `srpt_cm_req_recv` does when it returns non-zero.
    pub fn reject(self, now: Instant, rdma: &mut RdmaCm) {
        let data = self.rej.map(|r| r.to_bytes()).unwrap_or_default();
        match self.conn {
            ConnId::Rdma(id) => {
                if let Err((id, _)) = rdma.reject(now, id, &data) {
                    rdma.destroy(now, id);
                }
            }
            ConnId::Ib(id) => {
                let cm = rdma.cm_mut();
                let _ = cm.send_rej(now, &id, RejectReason::CONSUMER_DEFINED, &[], &data);
                cm.destroy(now, id);
            }
        }
    }
}

/// A channel's name (what events carry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChannelId(pub u32);

impl fmt::Display for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ch{}", self.0)
    }
}

/// A port (device) the target serves, as [`SrpTarget::add_port`] numbered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetPort(pub usize);

/// Who ended a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogoutBy {
    /// The initiator: DREQ, or SRP_I_LOGOUT.
    Initiator,
    /// The target: its DREQ (shutdown, a SINGLE re-login), or SRP_T_LOGOUT.
    Target,
}

/// What the target tells its user (the daemon logs these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SrpEvent {
    /// `Received SRP_LOGIN_REQ ...`: every login, before the checks.
    LoginRequest {
        initiator: String,
        target: String,
        it_iu_len: u32,
        source: String,
    },
    LoginAccepted {
        channel: ChannelId,
        initiator: String,
        source: String,
        it_iu_len: u32,
        immediate: bool,
        multichannel: MultiChannelResult,
        cm: &'static str,
    },
    LoginRefused {
        initiator: String,
        source: String,
        refusal: Option<Refusal>,
    },
    StateChanged {
        channel: ChannelId,
        from: ChannelState,
        to: ChannelState,
    },
    Logout {
        channel: ChannelId,
        by: LogoutBy,
        why: String,
    },
    /// Something the initiator did wrong, or an error completion.
    Warning {
        channel: Option<ChannelId>,
        what: String,
    },
}

/// The target's configuration.
#[derive(Debug, Clone)]
pub struct SrpConfig {
    pub login: LoginPolicy,
    /// Send queue of a channel (RDMA READs/WRITEs and responses). ib_srpt sizes it
    /// `srp_sq_size / 2` = 2048 by default; the initiator cannot see it.
    pub sq_size: u32,
    /// The largest data buffer of one I/O (ib_srpt's `srp_max_rdma_size` cap, 16 MiB).
    pub max_io: u32,
}

impl SrpConfig {
    pub fn new(guid: u64) -> SrpConfig {
        SrpConfig {
            login: LoginPolicy::new(guid),
            sq_size: 512,
            max_io: 1 << 24,
        }
    }
}

// wr_id: channel (32 bits) | kind (8) | index (24).
const K_RECV: u64 = 1;
const K_SEND: u64 = 2;
const K_READ: u64 = 3;
const K_WRITE: u64 = 4;
const K_DRAIN: u64 = 5;

fn wr_id(ch: u32, kind: u64, idx: u32) -> u64 {
    u64::from(ch) << 32 | kind << 24 | u64::from(idx & 0xff_ffff)
}

fn split_wr_id(w: u64) -> (u32, u64, u32) {
    ((w >> 32) as u32, (w >> 24) & 0xff, (w & 0xff_ffff) as u32)
}

struct PortRes {
    cm_port: CmPort,
    pd: PdId,
    cq: CqId,
}

type NexusKey = ([u8; 16], [u8; 16]);

struct NexusEntry {
    scsi: NexusId,
    channels: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum IoState {
    #[default]
    Free,
    /// Waiting for a data buffer (or, on a lent medium, for its place in it).
    NeedBuf,
    /// Has its buffer; the RDMA READs wait for send queue room.
    NeedRead,
    /// RDMA READs in flight.
    Reading,
    /// Response ready; its RDMA WRITEs and SEND wait for send queue room.
    NeedRsp,
    /// The SEND is posted.
    RspSent,
}

#[derive(Debug, Clone, Copy)]
enum RspKind {
    Scsi(Response),
    Tmf(RspCode),
    TLogout(TLogoutReason),
}

#[derive(Default)]
struct Io {
    state: IoState,
    tag: u64,
    lun: LunId,
    dir: Direction,
    /// The initiator's memory (copied out of the receive buffer, reused across I/Os).
    descs: Vec<DirectBuf>,
    cmd: Option<Cmd>,
    rsp: Option<RspKind>,
    data: Option<DataAt>,
    reads_left: u32,
    /// Data-in bytes to write before the response.
    write_len: u32,
    /// Recorded with `Target::task_started` and not finished.
    task: bool,
    /// Aborted by a task management function (`task_aborted_status`: end with TASK
    /// ABORTED, else silently).
    aborted: Option<bool>,
    /// Disconnect once this response (a T_LOGOUT) is sent.
    logout_after: bool,
}

/// Where an I/O's data lies in the port's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DataAt {
    /// One of the channel's bounce buffers (an index into `bufs`), from its start.
    Buf(usize),
    /// In place in a LUN's lent medium: the MR's lkey and the byte offset in it.
    Medium { lkey: u32, offset: u64 },
}

impl DataAt {
    /// The lkey and the address of the data's first byte, for SGEs.
    fn sge_base(self, bufs: &[DataBuf]) -> Option<(u32, u64)> {
        match self {
            DataAt::Buf(b) => bufs.get(b).map(|d| (d.keys.lkey, 0)),
            DataAt::Medium { lkey, offset } => Some((lkey, offset)),
        }
    }
}

/// A LUN's medium, lent by the SCSI core and registered as an MR of a port's PD.
#[derive(Debug, Clone, Copy)]
struct Medium {
    lun: LunId,
    port: usize,
    keys: MrKeys,
}

/// Why [`SrpTarget::lend_media`] refused.
#[derive(Debug)]
pub enum MediaError {
    /// The media can live in one device only; a target with several ports copies.
    OnePortOnly { ports: usize },
    /// Registering a medium as an MR failed.
    Verbs(VerbsError),
}

impl fmt::Display for MediaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MediaError::OnePortOnly { ports } => write!(
                f,
                "LUN media can be lent to a target with one port; this one has {ports}"
            ),
            MediaError::Verbs(e) => write!(f, "registering a LUN medium: {e}"),
        }
    }
}

impl std::error::Error for MediaError {}

struct DataBuf {
    keys: MrKeys,
    len: usize,
    busy: bool,
}

struct Channel {
    port: usize,
    conn: ConnId,
    state: ChannelState,
    qpn: u32,
    key: NexusKey,
    nexus: NexusId,
    initiator: String,
    max_ti_iu_len: u32,
    imm_data_offset: u16,
    max_req: u32,
    max_rsp: u32,
    recv: MrKeys,
    send: MrKeys,
    /// Credits to return with the next response besides its own (aborted commands).
    req_lim_delta: u32,
    free_io: Vec<u32>,
    ios: Vec<Io>,
    /// Received IUs not yet taken (channel not live yet, or no I/O context free).
    waiting: VecDeque<(u32, u32)>,
    /// I/Os waiting for a data buffer or send queue room.
    blocked: VecDeque<u32>,
    bufs: Vec<DataBuf>,
    sq_avail: u32,
    /// A DREQ is due once this port's stack is at hand (a SINGLE login on another port).
    disconnect_due: bool,
}

/// The SRP target (see the module docs).
pub struct SrpTarget {
    cfg: SrpConfig,
    scsi: Target,
    ports: Vec<PortRes>,
    nexuses: BTreeMap<NexusKey, NexusEntry>,
    channels: BTreeMap<u32, Channel>,
    next_channel: u32,
    events: VecDeque<SrpEvent>,
    ib_listener: Option<CmId>,
    wcs: Vec<WorkCompletion>,
    max_io: u32,
    /// LUN media lent to the (single) port's device: READ and WRITE run in place.
    media: Vec<Medium>,
}

impl fmt::Debug for SrpTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SrpTarget")
            .field("guid", &format_args!("{:#018x}", self.cfg.login.guid))
            .field("channels", &self.channels.len())
            .finish()
    }
}

fn verbs<E: fmt::Display>(e: E) -> Refusal {
    Refusal::Resources(e.to_string())
}

impl SrpTarget {
    pub fn new(cfg: SrpConfig, scsi: Target) -> SrpTarget {
        let max_io = cfg.max_io;
        SrpTarget {
            cfg,
            scsi,
            ports: Vec::new(),
            nexuses: BTreeMap::new(),
            channels: BTreeMap::new(),
            next_channel: 1,
            events: VecDeque::new(),
            ib_listener: None,
            wcs: Vec::with_capacity(64),
            max_io,
            media: Vec::new(),
        }
    }

    pub fn config(&self) -> &SrpConfig {
        &self.cfg
    }

    /// The SCSI core (LUNs, and a flush of the stores at shutdown).
    pub fn scsi(&mut self) -> &mut Target {
        &mut self.scsi
    }

    /// Enables or disables the target port (`srpt_set_enabled`): disabling refuses new
    /// logins; the existing channels are disconnected with [`SrpTarget::logout_all`].
    pub fn set_enabled(&mut self, on: bool) {
        self.cfg.login.enabled = on;
    }

    /// Serves one more device: a PD and the completion queue all its channels share.
    pub fn add_port(
        &mut self,
        stack: &mut Stack,
        cm_port: CmPort,
    ) -> Result<TargetPort, VerbsError> {
        if !self.media.is_empty() {
            // The media live in the first port's device; another could not reach them.
            return Err(VerbsError::Limit {
                what: "target ports while LUN media are lent",
                requested: self.ports.len() as u64 + 1,
                max: self.ports.len() as u64,
            });
        }
        let pd = stack.verbs.alloc_pd()?;
        let max = stack.device.query_device().max_cqe;
        let cq = stack.verbs.create_cq(max)?;
        self.ports.push(PortRes { cm_port, pd, cq });
        Ok(TargetPort(self.ports.len() - 1))
    }

    /// Moves every memory LUN's medium into the port's device, registered as an MR, so
    /// that READ data leaves for the initiator straight from the medium and WRITE data
    /// lands in it (see [`Target::lend_medium`]): the copy between a bounce buffer and the
    /// LUN disappears. For a target with one port (the media live in one device), before
    /// any login; LUNs whose store is not memory keep copying. Returns how many were lent.
    pub fn lend_media(&mut self, stack: &mut Stack, port: TargetPort) -> Result<usize, MediaError> {
        if self.ports.len() != 1 || port.0 != 0 {
            return Err(MediaError::OnePortOnly {
                ports: self.ports.len(),
            });
        }
        let pd = self.ports[0].pd;
        let luns: Vec<LunId> = self.scsi.lun_ids().collect();
        let mut n = 0;
        for lun in luns {
            if self.media.iter().any(|m| m.lun == lun) {
                continue;
            }
            let Ok(bytes) = self.scsi.lend_medium(lun) else {
                continue;
            };
            match stack
                .verbs
                .reg_mr_or_return(pd, bytes, 0, AccessFlags::LOCAL_WRITE)
            {
                Ok(keys) => {
                    self.media.push(Medium { lun, port: 0, keys });
                    n += 1;
                }
                Err((e, bytes)) => {
                    let _ = self.scsi.return_medium(lun, bytes);
                    return Err(MediaError::Verbs(e));
                }
            }
        }
        Ok(n)
    }

    /// Gives every lent medium back to its LUN (deregistering its MR), e.g. before the
    /// target's device goes away while the SCSI core lives on. Media whose MR is still in
    /// use by a posted work request are not affected: call it with no channel open.
    pub fn return_media(&mut self, stack: &mut Stack) {
        for m in std::mem::take(&mut self.media) {
            if let Ok(bytes) = stack.verbs.dereg_mr(m.keys.lkey) {
                let _ = self.scsi.return_medium(m.lun, bytes);
            }
        }
    }

    /// The completion queue of a port (the daemon waits on it).
    pub fn cq(&self, port: TargetPort) -> Option<CqId> {
        self.ports.get(port.0).map(|p| p.cq)
    }

    /// The port serving a CM port.
    pub fn port_for(&self, cm_port: CmPort) -> Option<TargetPort> {
        self.ports
            .iter()
            .position(|p| p.cm_port == cm_port)
            .map(TargetPort)
    }

    /// Listens on the IB CM for logins to service ID = the target GUID, as ib_srpt does on
    /// InfiniBand ports (`ib_cm_listen(sdev->cm_id, srpt_service_guid)`).
    pub fn listen_ib(&mut self, rdma: &mut RdmaCm) -> Result<(), softrdma_core::cm::CmError> {
        let cm = rdma.cm_mut();
        let id = cm.create_id();
        cm.listen(&id, self.cfg.login.guid)?;
        self.ib_listener = Some(id);
        Ok(())
    }

    /// Whether an IB CM REQ came to our listener.
    pub fn is_ib_listener(&self, listen: CmIdRef) -> bool {
        self.ib_listener.as_ref().is_some_and(|l| *l == listen)
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<SrpEvent> {
        self.events.pop_front()
    }

    /// The channels and their states.
    pub fn channels(&self) -> Vec<(ChannelId, ChannelState)> {
        self.channels
            .iter()
            .map(|(k, c)| (ChannelId(*k), c.state))
            .collect()
    }

    /// The state of a channel (`None` once released).
    pub fn channel_state(&self, ch: ChannelId) -> Option<ChannelState> {
        self.channels.get(&ch.0).map(|c| c.state)
    }

    /// The channel of an RDMA CM id.
    pub fn channel_of(&self, id: RdmaId) -> Option<ChannelId> {
        self.channels
            .iter()
            .find(|(_, c)| matches!(&c.conn, ConnId::Rdma(i) if *i == id))
            .map(|(k, _)| ChannelId(*k))
    }

    /// The QP number of a channel.
    pub fn channel_qpn(&self, ch: ChannelId) -> Option<u32> {
        self.channels.get(&ch.0).map(|c| c.qpn)
    }

    /// The initiator port identifier of a channel (`0x` and 32 hex digits).
    pub fn channel_initiator(&self, ch: ChannelId) -> Option<&str> {
        self.channels.get(&ch.0).map(|c| c.initiator.as_str())
    }

    /// The port a channel lives on.
    pub fn channel_port(&self, ch: ChannelId) -> Option<CmPort> {
        let c = self.channels.get(&ch.0)?;
        self.ports.get(c.port).map(|p| p.cm_port)
    }

    fn state_to(&mut self, ch: u32, to: ChannelState) -> bool {
        let Some(c) = self.channels.get_mut(&ch) else {
            return false;
        };
        let from = c.state;
        if c.state.advance(to) {
            self.events.push_back(SrpEvent::StateChanged {
                channel: ChannelId(ch),
                from,
                to,
            });
            true
        } else {
            false
        }
    }

    // -------------------------------------------------------------------------------
    // Login
    // -------------------------------------------------------------------------------

    /// An RDMA CM CONNECT_REQUEST (`srpt_rdma_cm_req_recv`): the 56-byte login after the IP
    /// CM header. `id` is the request's new id; `private_data` the event's.
    pub fn rdma_connect_request(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        id: RdmaCmId,
        private_data: &[u8],
    ) -> Result<ChannelId, LoginFailure> {
        let source = rdma.remote_addr(id.name());
        let port = rdma
            .port_of(id.name())
            .and_then(|p| self.port_for(p))
            .map(|p| p.0);
        let (Some(port), Ok(r)) = (port, LoginReqRdmaRepr::parse(private_data)) else {
            self.events.push_back(SrpEvent::LoginRefused {
                initiator: String::new(),
                source: source.map(|s| s.to_string()).unwrap_or_default(),
                refusal: None,
            });
            return Err(LoginFailure {
                conn: ConnId::Rdma(id),
                refusal: None,
                rej: None,
            });
        };
        let src = source.map(|s| s.ip().to_string()).unwrap_or_default();
        self.login(
            now,
            rdma,
            stack,
            port,
            ConnId::Rdma(id),
            r.into(),
            source.map(|s| s.ip()),
            src,
            softrdma_wire::Gid::ZERO,
        )
    }

    /// An IB CM REQ to our listener (`srpt_ib_cm_req_recv`): the 64-byte login.
    pub fn ib_req(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        id: CmId,
        req: &ReqInfo,
    ) -> Result<ChannelId, LoginFailure> {
        let gid = req.req.primary_path.local_gid;
        let src = crate::guid::colon_guid(u64::from_be_bytes(
            gid.0[8..16].try_into().unwrap_or([0; 8]),
        ));
        let port = self.port_for(req.port).map(|p| p.0);
        let (Some(port), Ok(r)) = (port, LoginReqRepr::parse(&req.req.private_data[..64])) else {
            self.events.push_back(SrpEvent::LoginRefused {
                initiator: String::new(),
                source: src,
                refusal: None,
            });
            return Err(LoginFailure {
                conn: ConnId::Ib(id),
                refusal: None,
                rej: None,
            });
        };
        self.login(
            now,
            rdma,
            stack,
            port,
            ConnId::Ib(id),
            r.into(),
            Some(gid.to_ip()),
            src,
            req.req.primary_path.remote_gid,
        )
    }

    /// `srpt_cm_req_recv`.
    #[allow(clippy::too_many_arguments)]
    fn login(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        port: usize,
        conn: ConnId,
        req: LoginRequest,
        source: Option<IpAddr>,
        source_name: String,
        our_gid: softrdma_wire::Gid,
    ) -> Result<ChannelId, LoginFailure> {
        let initiator = req.initiator_hex();
        self.events.push_back(SrpEvent::LoginRequest {
            initiator: initiator.clone(),
            target: login::hex_port_id(&req.target_port_id),
            it_iu_len: req.it_iu_len,
            source: source_name.clone(),
        });
        let fail = |me: &mut SrpTarget, conn: ConnId, r: Refusal| {
            me.events.push_back(SrpEvent::LoginRefused {
                initiator: initiator.clone(),
                source: source_name.clone(),
                refusal: Some(r.clone()),
            });
            Err(LoginFailure {
                conn,
                rej: Some(r.login_rej(&req)),
                refusal: Some(r),
            })
        };
        if let Err(r) = login::precheck(&self.cfg.login, &req) {
            return fail(self, conn, r);
        }
        let ib = matches!(conn, ConnId::Ib(_));
        let res = match self.alloc_channel(stack, port, ib, &req) {
            Ok(r) => r,
            Err(r) => return fail(self, conn, r),
        };
        let key = (req.initiator_port_id, req.target_port_id);
        let single = req.multichannel_action() == MultiChannelAction::SINGLE;
        let others: Vec<u32> = self
            .nexuses
            .get(&key)
            .map(|n| {
                n.channels
                    .iter()
                    .copied()
                    .filter(|c| {
                        self.channels
                            .get(c)
                            .is_some_and(|c| c.state < ChannelState::Disconnecting)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let keep = if single { 0 } else { others.len() };
        if let Err(r) = login::session_check(&self.cfg.login, &req, source, keep) {
            res.free(stack);
            return fail(self, conn, r);
        }
        // Multi-channel action (ib_srpt: after the session is set up, before the REP).
        let mc = if single {
            let mut terminated = false;
            for o in others {
                if self.disconnect_channel(now, rdma, Some((port, &mut *stack)), o) {
                    self.events.push_back(SrpEvent::Logout {
                        channel: ChannelId(o),
                        by: LogoutBy::Target,
                        why: "relogin (SINGLE multi-channel action) closed it".into(),
                    });
                    terminated = true;
                }
            }
            if terminated {
                MultiChannelResult::TERMINATED
            } else {
                MultiChannelResult::NO_CHAN
            }
        } else {
            MultiChannelResult::MAINTAINED
        };
        let rsp = login::login_rsp(&self.cfg.login, &req, mc);
        let accepted = match &conn {
            ConnId::Rdma(id) => {
                let param = ConnParam {
                    private_data: rsp.to_bytes(),
                    responder_resources: SRPT_RDMA_DEPTH,
                    initiator_depth: SRPT_RDMA_DEPTH,
                    flow_control: true,
                    retry_count: 7,
                    rnr_retry_count: 7,
                };
                rdma.accept(now, stack, id, res.qpn, &param)
                    .map_err(|e| e.to_string())
            }
            ConnId::Ib(id) => ib_accept(now, rdma, stack, id, res.qpn, our_gid, &rsp.to_bytes()),
        };
        if let Err(e) = accepted {
            res.free(stack);
            return fail(self, conn, Refusal::Resources(e));
        }
        let nexus = match self.nexuses.get_mut(&key) {
            Some(n) => n.scsi,
            None => {
                let scsi = self
                    .scsi
                    .register_nexus(InitiatorId(u128::from_be_bytes(req.initiator_port_id)));
                self.nexuses.insert(
                    key,
                    NexusEntry {
                        scsi,
                        channels: Vec::new(),
                    },
                );
                scsi
            }
        };
        let id = self.next_channel;
        self.next_channel = self.next_channel.wrapping_add(1).max(1);
        if let Some(n) = self.nexuses.get_mut(&key) {
            n.channels.push(id);
        }
        let lp = &self.cfg.login;
        let ch = Channel {
            port,
            conn,
            state: ChannelState::Connecting,
            qpn: res.qpn,
            key,
            nexus,
            initiator: initiator.clone(),
            max_ti_iu_len: req.it_iu_len,
            imm_data_offset: req.accepted_imm_data_offset(),
            max_req: lp.max_req_size,
            max_rsp: lp.max_rsp_size,
            recv: res.recv,
            send: res.send,
            req_lim_delta: 0,
            free_io: (0..lp.rq_size).rev().collect(),
            ios: (0..lp.rq_size).map(|_| Io::default()).collect(),
            waiting: VecDeque::new(),
            blocked: VecDeque::new(),
            bufs: Vec::new(),
            sq_avail: self.cfg.sq_size,
            disconnect_due: false,
        };
        // Rebind the receive wr_ids to the channel's number.
        let ch_recv = ch.recv;
        self.channels.insert(id, ch);
        for i in 0..lp_rq(&self.cfg.login) {
            let _ = post_recv_slot(stack, res.qpn, id, ch_recv, self.cfg.login.max_req_size, i);
        }
        self.events.push_back(SrpEvent::LoginAccepted {
            channel: ChannelId(id),
            initiator,
            source: source_name,
            it_iu_len: req.it_iu_len,
            immediate: req.accepted_imm_data_offset() != 0,
            multichannel: mc,
            cm: if ib { "IB CM" } else { "RDMA CM" },
        });
        Ok(ChannelId(id))
    }

    /// The QP and buffers of a new channel (`srpt_create_ch_ib` and the rings).
    fn alloc_channel(
        &mut self,
        stack: &mut Stack,
        port: usize,
        ib: bool,
        _req: &LoginRequest,
    ) -> Result<ChannelRes, Refusal> {
        let p = self.ports.get(port).ok_or_else(|| verbs("no such port"))?;
        let lp = &self.cfg.login;
        let (pd, cq) = (p.pd, p.cq);
        let max_wr = stack.device.query_device().max_qp_wr;
        let (qpn, _) = stack
            .verbs
            .create_qp(QpInitAttr {
                qp_type: QpType::Rc,
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: self.cfg.sq_size.min(max_wr),
                    max_recv_wr: lp.rq_size.min(max_wr),
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: true,
            })
            .map_err(verbs)?;
        let mut res = ChannelRes {
            qpn,
            recv: MrKeys { lkey: 0, rkey: 0 },
            send: MrKeys { lkey: 0, rkey: 0 },
        };
        let init = if ib {
            // srpt_init_ch_qp: local write only.
            let attr = QpAttr {
                qp_state: QpState::Init,
                pkey_index: 0,
                port_num: PORT_NUM,
                qp_access_flags: AccessFlags::LOCAL_WRITE,
                ..QpAttr::default()
            };
            stack
                .modify_qp(
                    qpn,
                    &attr,
                    QpAttrMask::STATE
                        | QpAttrMask::PKEY_INDEX
                        | QpAttrMask::PORT
                        | QpAttrMask::ACCESS_FLAGS,
                )
                .map_err(verbs)
        } else {
            RdmaCm::init_qp(stack, qpn).map_err(verbs)
        };
        if let Err(e) = init {
            res.free(stack);
            return Err(e);
        }
        let rq = lp.rq_size as usize;
        let recv = stack.verbs.reg_mr_with(
            pd,
            vec![0; rq * lp.max_req_size as usize],
            0,
            AccessFlags::LOCAL_WRITE,
        );
        match recv {
            Ok(k) => res.recv = k,
            Err(e) => {
                res.free(stack);
                return Err(verbs(e));
            }
        }
        match stack.verbs.reg_mr_with(
            pd,
            vec![0; rq * lp.max_rsp_size as usize],
            0,
            AccessFlags::LOCAL_WRITE,
        ) {
            Ok(k) => res.send = k,
            Err(e) => {
                res.free(stack);
                return Err(verbs(e));
            }
        }
        Ok(res)
    }

    // -------------------------------------------------------------------------------
    // CM events
    // -------------------------------------------------------------------------------

    /// An RDMA CM event of one of our channels' ids (`srpt_rdma_cm_handler`), with the
    /// stack of the id's device. Events of other ids are ignored.
    pub fn rdma_event(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ev: &RdmaCmEvent,
    ) {
        let Some(ChannelId(ch)) = self.channel_of(ev.id) else {
            return;
        };
        use RdmaCmEventType as T;
        match ev.event {
            T::Established => self.rtu(now, rdma, stack, ch),
            T::Disconnected => {
                let st = self.channels.get(&ch).map(|c| c.state);
                if st.is_some_and(|s| s < ChannelState::Disconnecting) {
                    self.events.push_back(SrpEvent::Logout {
                        channel: ChannelId(ch),
                        by: LogoutBy::Initiator,
                        why: "DREQ received".into(),
                    });
                    if !self.disconnect_channel(now, rdma, Some((self.port_idx(ch), stack)), ch) {
                        self.close(stack, ch);
                    }
                } else {
                    self.close(stack, ch);
                }
            }
            T::TimewaitExit => self.close(stack, ch),
            T::Rejected | T::Unreachable | T::ConnectError => {
                self.events.push_back(SrpEvent::Warning {
                    channel: Some(ChannelId(ch)),
                    what: format!("{} (status {})", ev.event, ev.status),
                });
                self.close(stack, ch);
            }
            _ => {}
        }
        self.poll_port(now, rdma, stack, self.port_idx(ch));
    }

    /// An IB CM event (`srpt_cm_handler`). A REQ to our listener goes to
    /// [`SrpTarget::ib_req`] instead.
    pub fn ib_event(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, ev: &CmEvent) {
        let id = match ev {
            CmEvent::RtuReceived { id, .. }
            | CmEvent::UserEstablished { id }
            | CmEvent::DreqReceived { id, .. }
            | CmEvent::DrepReceived { id, .. }
            | CmEvent::TimewaitExit { id }
            | CmEvent::RejReceived { id, .. }
            | CmEvent::RepError { id, .. }
            | CmEvent::DreqError { id, .. } => *id,
            _ => return,
        };
        let Some(ch) = self
            .channels
            .iter()
            .find(|(_, c)| matches!(&c.conn, ConnId::Ib(i) if *i == id))
            .map(|(k, _)| *k)
        else {
            return;
        };
        match ev {
            CmEvent::RtuReceived { .. } | CmEvent::UserEstablished { .. } => {
                self.rtu(now, rdma, stack, ch)
            }
            CmEvent::DreqReceived { .. } => {
                self.events.push_back(SrpEvent::Logout {
                    channel: ChannelId(ch),
                    by: LogoutBy::Initiator,
                    why: "DREQ received".into(),
                });
                if !self.disconnect_channel(now, rdma, Some((self.port_idx(ch), stack)), ch) {
                    self.close(stack, ch);
                }
            }
            CmEvent::DrepReceived { .. } | CmEvent::TimewaitExit { .. } => self.close(stack, ch),
            CmEvent::RejReceived { .. } | CmEvent::RepError { .. } => {
                self.events.push_back(SrpEvent::Warning {
                    channel: Some(ChannelId(ch)),
                    what: format!("{ev:?}"),
                });
                self.close(stack, ch);
            }
            _ => {}
        }
        self.poll_port(now, rdma, stack, self.port_idx(ch));
    }

    fn port_idx(&self, ch: u32) -> usize {
        self.channels.get(&ch).map_or(usize::MAX, |c| c.port)
    }

    /// `srpt_cm_rtu_recv`: (IB CM: the QP to RTS,) LIVE, then the IUs that waited.
    fn rtu(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, ch: u32) {
        if let Some(c) = self.channels.get(&ch) {
            if let ConnId::Ib(id) = &c.conn {
                let r = rdma.cm().init_qp_attr(id, QpState::Rts).map(|(mut a, m)| {
                    a.max_rd_atomic = SRPT_RDMA_DEPTH;
                    stack.modify_qp(c.qpn, &a, m)
                });
                if !matches!(r, Ok(Ok(()))) {
                    self.events.push_back(SrpEvent::Warning {
                        channel: Some(ChannelId(ch)),
                        what: "QP transition to RTS failed".into(),
                    });
                    self.close(stack, ch);
                    return;
                }
            }
        }
        if self.state_to(ch, ChannelState::Live) {
            self.process_waiting(now, rdma, stack, ch);
        }
    }

    /// `srpt_disconnect_ch`: DISCONNECTING, then DREQ (or DREP after a DREQ). Whether the
    /// state changed. With `stack` of another port, the DREQ is left for that port's next
    /// [`SrpTarget::poll`].
    fn disconnect_channel(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: Option<(usize, &mut Stack)>,
        ch: u32,
    ) -> bool {
        let Some(port) = self.channels.get(&ch).map(|c| c.port) else {
            return false;
        };
        let stack = match stack {
            Some((p, s)) if p == port => s,
            _ => {
                if let Some(c) = self.channels.get_mut(&ch) {
                    if c.state < ChannelState::Disconnecting {
                        c.disconnect_due = true;
                        return true;
                    }
                }
                return false;
            }
        };
        if !self.state_to(ch, ChannelState::Disconnecting) {
            return false;
        }
        let Some(c) = self.channels.get_mut(&ch) else {
            return false;
        };
        c.disconnect_due = false;
        let ok = match &c.conn {
            ConnId::Rdma(id) => rdma.disconnect(now, stack, id).is_ok(),
            ConnId::Ib(id) => {
                let cm = rdma.cm_mut();
                let r = cm.send_dreq(now, id, &[]).is_ok() || cm.send_drep(now, id, &[]).is_ok();
                let attr = QpAttr {
                    qp_state: QpState::Err,
                    ..QpAttr::default()
                };
                let _ = stack.modify_qp(c.qpn, &attr, QpAttrMask::STATE);
                r
            }
        };
        if !ok {
            self.close(stack, ch);
        }
        true
    }

    /// Target logout of every channel (shutdown): DREQ on each.
    pub fn logout_all(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        port: TargetPort,
    ) {
        let chans: Vec<u32> = self
            .channels
            .iter()
            .filter(|(_, c)| c.port == port.0 && c.state < ChannelState::Disconnecting)
            .map(|(k, _)| *k)
            .collect();
        for ch in chans {
            if self.disconnect_channel(now, rdma, Some((port.0, &mut *stack)), ch) {
                self.events.push_back(SrpEvent::Logout {
                    channel: ChannelId(ch),
                    by: LogoutBy::Target,
                    why: "target shutting down".into(),
                });
            }
        }
        self.poll_port(now, rdma, stack, port.0);
    }

    /// `srpt_close_ch`: DRAINING, the QP to ERR and a zero-length write whose (flushed)
    /// completion says everything before it has completed.
    fn close(&mut self, stack: &mut Stack, ch: u32) {
        if !self.state_to(ch, ChannelState::Draining) {
            return;
        }
        let Some(c) = self.channels.get(&ch) else {
            return;
        };
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        let _ = stack.modify_qp(c.qpn, &attr, QpAttrMask::STATE);
        let wr = SendWr::new(
            wr_id(ch, K_DRAIN, 0),
            SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
        );
        if stack.post_send(c.qpn, wr).is_err() {
            self.state_to(ch, ChannelState::Disconnected);
        }
    }

    /// `srpt_release_channel_work`: the tasks, the nexus (when it was the last channel),
    /// the QP, the buffers and the CM id go.
    fn release(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, ch: u32) {
        let Some(c) = self.channels.remove(&ch) else {
            return;
        };
        for io in &c.ios {
            if io.task {
                self.scsi.task_finished(c.nexus, io.tag);
            }
        }
        if let Some(n) = self.nexuses.get_mut(&c.key) {
            n.channels.retain(|&x| x != ch);
            if n.channels.is_empty() {
                let _ = self.scsi.unregister_nexus(n.scsi);
                self.nexuses.remove(&c.key);
            }
        }
        let _ = stack.destroy_qp(c.qpn);
        let _ = stack.verbs.dereg_mr(c.recv.lkey);
        let _ = stack.verbs.dereg_mr(c.send.lkey);
        for b in &c.bufs {
            let _ = stack.verbs.dereg_mr(b.keys.lkey);
        }
        c.conn.destroy(now, rdma);
    }

    // -------------------------------------------------------------------------------
    // Completions
    // -------------------------------------------------------------------------------

    /// Polls the port's completion queue and runs what the completions allow; also sends the
    /// DREQs left for this port. Returns the number of completions handled.
    pub fn poll(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        port: TargetPort,
    ) -> usize {
        self.poll_port(now, rdma, stack, port.0)
    }

    fn poll_port(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        port: usize,
    ) -> usize {
        let Some(cq) = self.ports.get(port).map(|p| p.cq) else {
            return 0;
        };
        let due: Vec<u32> = self
            .channels
            .iter()
            .filter(|(_, c)| c.port == port && c.disconnect_due)
            .map(|(k, _)| *k)
            .collect();
        for ch in due {
            self.disconnect_channel(now, rdma, Some((port, &mut *stack)), ch);
        }
        let mut wcs = std::mem::take(&mut self.wcs);
        let n = crate::channel::drain_cq(stack, cq, &mut wcs, |stack, wc| {
            self.completion(now, rdma, stack, wc)
        });
        self.wcs = wcs;
        n
    }

    /// One work completion of the port whose stack this is (for a runtime that took it off
    /// the CQ itself, e.g. while waiting for it).
    pub fn completion(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        wc: &WorkCompletion,
    ) {
        let (ch, kind, idx) = split_wr_id(wc.wr_id);
        let Some(c) = self.channels.get_mut(&ch) else {
            return;
        };
        if kind != K_RECV {
            c.sq_avail += 1;
        }
        if kind == K_DRAIN {
            if self.state_to(ch, ChannelState::Disconnected) {
                self.release(now, rdma, stack, ch);
            }
            return;
        }
        let ok = wc.status == WcStatus::Success;
        if !ok || c.state >= ChannelState::Disconnecting {
            if !ok && c.state <= ChannelState::Live && wc.status != WcStatus::WrFlushErr {
                let what = format!(
                    "{:?} completion of {} failed: {:?}",
                    wc.opcode,
                    match kind {
                        K_RECV => "a receive",
                        K_SEND => "a response",
                        K_READ => "an RDMA READ",
                        _ => "an RDMA WRITE",
                    },
                    wc.status
                );
                self.events.push_back(SrpEvent::Warning {
                    channel: Some(ChannelId(ch)),
                    what,
                });
                self.close(stack, ch);
            }
            return;
        }
        match kind {
            K_RECV => {
                if c.waiting.is_empty() && c.state == ChannelState::Live {
                    self.new_iu(now, rdma, stack, ch, idx, wc.byte_len);
                } else {
                    c.waiting.push_back((idx, wc.byte_len));
                    if c.state == ChannelState::Live {
                        self.process_waiting(now, rdma, stack, ch);
                    }
                }
            }
            K_READ => {
                let io = &mut c.ios[idx as usize];
                io.reads_left = io.reads_left.saturating_sub(1);
                if io.reads_left == 0 && io.state == IoState::Reading {
                    self.data_out_done(stack, ch, idx);
                    self.advance(now, rdma, stack, ch, idx);
                }
            }
            K_SEND => {
                let io = &mut c.ios[idx as usize];
                if io.state == IoState::RspSent {
                    let logout = io.logout_after;
                    self.free_io(ch, idx);
                    if logout {
                        self.disconnect_channel(
                            now,
                            rdma,
                            Some((self.port_idx(ch), &mut *stack)),
                            ch,
                        );
                    }
                }
                self.process_blocked(now, rdma, stack, ch);
                self.process_waiting(now, rdma, stack, ch);
            }
            _ => {
                // RDMA WRITE: the response follows it on the send queue.
                self.process_blocked(now, rdma, stack, ch);
            }
        }
    }

    fn process_waiting(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, ch: u32) {
        loop {
            let Some(c) = self.channels.get_mut(&ch) else {
                return;
            };
            if c.state != ChannelState::Live {
                return;
            }
            let Some(&(slot, len)) = c.waiting.front() else {
                return;
            };
            if !self.new_iu(now, rdma, stack, ch, slot, len) {
                return;
            }
        }
    }

    fn process_blocked(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, ch: u32) {
        let n = self.channels.get(&ch).map_or(0, |c| c.blocked.len());
        for _ in 0..n {
            let Some(io) = self
                .channels
                .get_mut(&ch)
                .and_then(|c| c.blocked.pop_front())
            else {
                return;
            };
            self.advance(now, rdma, stack, ch, io);
            // Stop at the first one that is still stuck (it went back to the end).
            if self
                .channels
                .get(&ch)
                .is_some_and(|c| c.blocked.back() == Some(&io))
            {
                let c = self.channels.get_mut(&ch).expect("channel");
                c.blocked.pop_back();
                c.blocked.push_front(io);
                return;
            }
        }
    }

    // -------------------------------------------------------------------------------
    // Information units
    // -------------------------------------------------------------------------------

    /// `srpt_handle_new_iu` for the IU in receive slot `slot`. Returns false if it has to
    /// wait (no I/O context free); it is then (still) at the front of the wait list.
    fn new_iu(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ch: u32,
        slot: u32,
        len: u32,
    ) -> bool {
        let Some(c) = self.channels.get_mut(&ch) else {
            return true;
        };
        let addr = u64::from(slot) * u64::from(c.max_req);
        let opcode = stack
            .verbs
            .mr(c.recv.lkey)
            .ok()
            .and_then(|m| m.slice(addr, 1).ok().map(|b| b[0]));
        let Some(opcode) = opcode else {
            return true;
        };
        let needs_io = matches!(Opcode(opcode), Opcode::CMD | Opcode::TSK_MGMT)
            || !matches!(
                Opcode(opcode),
                Opcode::I_LOGOUT | Opcode::CRED_RSP | Opcode::AER_RSP
            );
        let io = if needs_io {
            match c.free_io.pop() {
                Some(i) => Some(i),
                None => {
                    if c.waiting.front() != Some(&(slot, len)) {
                        c.waiting.push_back((slot, len));
                    }
                    return false;
                }
            }
        } else {
            None
        };
        if c.waiting.front() == Some(&(slot, len)) {
            c.waiting.pop_front();
        }
        let (qpn, recv, max_req) = (c.qpn, c.recv, c.max_req);
        match (Opcode(opcode), io) {
            (Opcode::CMD, Some(io)) => self.handle_cmd(now, rdma, stack, ch, slot, len, io),
            (Opcode::TSK_MGMT, Some(io)) => {
                self.handle_tsk_mgmt(now, rdma, stack, ch, slot, len, io)
            }
            (Opcode::I_LOGOUT, _) => {
                self.events.push_back(SrpEvent::Logout {
                    channel: ChannelId(ch),
                    by: LogoutBy::Initiator,
                    why: "SRP_I_LOGOUT received".into(),
                });
                let _ = post_recv_slot(stack, qpn, ch, recv, max_req, slot);
                self.disconnect_channel(now, rdma, Some((self.port_idx(ch), &mut *stack)), ch);
            }
            (Opcode::CRED_RSP | Opcode::AER_RSP, _) => {
                let _ = post_recv_slot(stack, qpn, ch, recv, max_req, slot);
            }
            (op, Some(io)) => {
                // Anything else (SRP_RSP, a target IU, an unknown type): SRP_T_LOGOUT with
                // INVALID IU TYPE, then the channel goes (SRP r16a 6.6).
                let _ = post_recv_slot(stack, qpn, ch, recv, max_req, slot);
                self.events.push_back(SrpEvent::Warning {
                    channel: Some(ChannelId(ch)),
                    what: format!("received IU with unexpected opcode {:#04x}", op.0),
                });
                self.t_logout(now, rdma, stack, ch, io, TLogoutReason::INVALID_IU_TYPE);
            }
            _ => {}
        }
        true
    }

    fn t_logout(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ch: u32,
        io: u32,
        why: TLogoutReason,
    ) {
        self.events.push_back(SrpEvent::Logout {
            channel: ChannelId(ch),
            by: LogoutBy::Target,
            why: format!("SRP_T_LOGOUT: {why}"),
        });
        if let Some(c) = self.channels.get_mut(&ch) {
            let x = &mut c.ios[io as usize];
            x.rsp = Some(RspKind::TLogout(why));
            x.logout_after = true;
            x.state = IoState::NeedRsp;
        }
        self.advance(now, rdma, stack, ch, io);
    }

    #[allow(clippy::too_many_arguments)]
    fn handle_cmd(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ch: u32,
        slot: u32,
        len: u32,
        io: u32,
    ) {
        let Some(c) = self.channels.get_mut(&ch) else {
            return;
        };
        let addr = u64::from(slot) * u64::from(c.max_req);
        let mut cdb = [0u8; 272];
        let mut cdb_len = 0;
        let mut imm: Option<(u64, u32)> = None;
        let parsed: Result<(u64, [u8; 8], Direction, u32), DescError> = (|| {
            let mr = stack
                .verbs
                .mr(c.recv.lkey)
                .map_err(|_| DescError::BadImmediate)?;
            let b = mr
                .slice(addr, len as usize)
                .map_err(|_| DescError::BadImmediate)?;
            let iu = CmdIu::new(b).ok_or(DescError::Truncated {
                need: iu::SRP_CMD_LEN,
                got: b.len(),
            })?;
            let x = &mut c.ios[io as usize];
            x.tag = iu.tag();
            let cd = iu.cdb().ok_or(DescError::Truncated {
                need: iu::SRP_CMD_LEN,
                got: b.len(),
            })?;
            cdb_len = cd.len().min(cdb.len());
            cdb[..cdb_len].copy_from_slice(&cd[..cdb_len]);
            let phase = iu.data_phase(c.imm_data_offset, c.max_req)?;
            x.descs.clear();
            match phase {
                DataPhase::None => {}
                DataPhase::Rdma { descs, .. } => x.descs.extend(descs.iter()),
                DataPhase::Immediate { data } => {
                    let off = data.as_ptr() as usize - b.as_ptr() as usize;
                    imm = Some((addr + off as u64, data.len() as u32));
                }
            }
            Ok((iu.tag(), iu.lun(), phase.direction(), phase.len()))
        })();
        let _ = &mut cdb_len;
        let (tag, lun, dir, total) = match parsed {
            Ok(p) => p,
            Err(DescError::UnsupportedFormat { data_out, format }) => {
                let _ = post_recv_slot(stack, c.qpn, ch, c.recv, c.max_req, slot);
                self.events.push_back(SrpEvent::Warning {
                    channel: Some(ChannelId(ch)),
                    what: format!("SRP_CMD with unsupported descriptor format {format}"),
                });
                let why = if data_out {
                    TLogoutReason::UNSUPPORTED_DATA_OUT_FORMAT
                } else {
                    TLogoutReason::UNSUPPORTED_DATA_IN_FORMAT
                };
                self.t_logout(now, rdma, stack, ch, io, why);
                return;
            }
            Err(e) => {
                let _ = post_recv_slot(stack, c.qpn, ch, c.recv, c.max_req, slot);
                self.events.push_back(SrpEvent::Warning {
                    channel: Some(ChannelId(ch)),
                    what: format!("parsing the SRP descriptor table failed: {e:?}"),
                });
                let x = &mut c.ios[io as usize];
                x.dir = Direction::None;
                x.rsp = Some(RspKind::Scsi(check(SenseReason::InvalidFieldInCommandIu)));
                x.state = IoState::NeedRsp;
                self.advance(now, rdma, stack, ch, io);
                return;
            }
        };
        let lun = LunId::from_wire(lun);
        let nexus = c.nexus;
        let x = &mut c.ios[io as usize];
        x.tag = tag;
        x.lun = lun;
        x.dir = dir;
        x.aborted = None;
        x.logout_after = false;
        let scsi_dir = match dir {
            Direction::None => DataDir::None,
            Direction::In => DataDir::In,
            Direction::Out => DataDir::Out,
        };
        match self.scsi.task_started(nexus, lun, tag) {
            Ok(()) => x.task = true,
            Err(CoreError::TagInUse { .. }) => {
                let _ = post_recv_slot(stack, c.qpn, ch, c.recv, c.max_req, slot);
                x.rsp = Some(RspKind::Scsi(Response {
                    status: ScsiStatus::BUSY,
                    sense: None,
                    data_len: 0,
                    residual: Residual::None,
                }));
                x.state = IoState::NeedRsp;
                self.advance(now, rdma, stack, ch, io);
                return;
            }
            Err(_) => {}
        }
        let decoded = self
            .scsi
            .decode(nexus, lun, &cdb[..cdb_len], scsi_dir, total);
        let medium = medium_of(&self.media, c.port, lun);
        let (qpn, recv, max_req) = (c.qpn, c.recv, c.max_req);
        match decoded {
            Ok(Decoded::Done(rsp)) => {
                x.rsp = Some(RspKind::Scsi(rsp));
                x.state = IoState::NeedRsp;
            }
            Ok(Decoded::Ready(cmd)) => {
                let n = cmd.transfer_len();
                match (cmd.data_dir(), imm) {
                    (DataDir::None, _) => {
                        let r = self.scsi.execute(&cmd, Data::None);
                        x.rsp = Some(RspKind::Scsi(r.unwrap_or_else(|_| internal())));
                        x.state = IoState::NeedRsp;
                    }
                    (DataDir::Out, Some((a, _))) => {
                        let started = match medium {
                            Some(_) => self.scsi.start_in_place(&cmd),
                            None => Ok(InPlace::No),
                        };
                        let r = match started {
                            // Immediate data into a lent medium: one copy, receive buffer
                            // to medium, after the checks that precede data movement.
                            Ok(InPlace::Go(p)) => {
                                let m = medium.map_or(0, |m| m.keys.lkey);
                                match stack
                                    .verbs
                                    .mr_table_mut()
                                    .copy_between(recv.lkey, a, m, p.offset, n as usize)
                                {
                                    Ok(()) => self.scsi.finish_in_place(&cmd),
                                    Err(_) => Ok(internal()),
                                }
                            }
                            Ok(InPlace::Done(r)) => Ok(r),
                            Err(e) => Err(e),
                            Ok(InPlace::No) => match stack
                                .verbs
                                .mr(recv.lkey)
                                .and_then(|m| Ok(m.slice(a, n as usize)?))
                            {
                                Ok(b) => self.scsi.execute(&cmd, Data::Out(b)),
                                Err(_) => Ok(internal()),
                            },
                        };
                        x.rsp = Some(RspKind::Scsi(r.unwrap_or_else(|_| internal())));
                        x.state = IoState::NeedRsp;
                    }
                    _ if desc_total(&x.descs) < u64::from(n) => {
                        // The descriptors hold less than the data phase: a malformed IU.
                        x.rsp = Some(RspKind::Scsi(check(SenseReason::InvalidFieldInCommandIu)));
                        x.state = IoState::NeedRsp;
                    }
                    _ => {
                        x.cmd = Some(cmd);
                        x.state = IoState::NeedBuf;
                    }
                }
            }
            Err(_) => {
                x.rsp = Some(RspKind::Scsi(internal()));
                x.state = IoState::NeedRsp;
            }
        }
        let _ = post_recv_slot(stack, qpn, ch, recv, max_req, slot);
        self.advance(now, rdma, stack, ch, io);
    }

    #[allow(clippy::too_many_arguments)]
    fn handle_tsk_mgmt(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ch: u32,
        slot: u32,
        len: u32,
        io: u32,
    ) {
        let Some(c) = self.channels.get_mut(&ch) else {
            return;
        };
        let addr = u64::from(slot) * u64::from(c.max_req);
        let tsk = stack
            .verbs
            .mr(c.recv.lkey)
            .ok()
            .and_then(|m| m.slice(addr, len as usize).ok())
            .and_then(|b| TskMgmtRepr::parse(b).ok());
        let _ = post_recv_slot(stack, c.qpn, ch, c.recv, c.max_req, slot);
        let nexus = c.nexus;
        let Some(t) = tsk else {
            let x = &mut c.ios[io as usize];
            x.tag = 0;
            x.rsp = Some(RspKind::Tmf(RspCode::INVALID_FIELDS));
            x.state = IoState::NeedRsp;
            self.advance(now, rdma, stack, ch, io);
            return;
        };
        let kind = match t.function {
            TaskMgmtFunction::ABORT_TASK => TmfKind::AbortTask(t.task_tag),
            TaskMgmtFunction::ABORT_TASK_SET => TmfKind::AbortTaskSet,
            TaskMgmtFunction::CLEAR_TASK_SET => TmfKind::ClearTaskSet,
            TaskMgmtFunction::LUN_RESET => TmfKind::LunReset,
            TaskMgmtFunction::CLEAR_ACA => TmfKind::ClearAca,
            f => TmfKind::Unknown(f.0),
        };
        let lun = LunId::from_wire(t.lun.to_be_bytes());
        let code = match self.scsi.task_management(nexus, lun, kind) {
            Ok(out) => {
                for a in &out.aborted {
                    self.abort_task(now, rdma, stack, a.nexus, a.tag, a.task_aborted_status);
                }
                tmf_code(out.response)
            }
            Err(_) => RspCode::FAILED,
        };
        if let Some(c) = self.channels.get_mut(&ch) {
            let x = &mut c.ios[io as usize];
            x.tag = t.tag;
            x.task = false;
            x.dir = Direction::None;
            x.rsp = Some(RspKind::Tmf(code));
            x.state = IoState::NeedRsp;
        }
        self.advance(now, rdma, stack, ch, io);
    }

    /// A task a task management function ended: it gets TASK ABORTED or nothing, and its
    /// credit comes back with the next response (`srpt_aborted_task`).
    fn abort_task(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        nexus: NexusId,
        tag: u64,
        status: bool,
    ) {
        let found = self.channels.iter().find_map(|(k, c)| {
            (c.nexus == nexus)
                .then(|| {
                    c.ios
                        .iter()
                        .position(|io| io.task && io.tag == tag && io.state != IoState::Free)
                        .map(|i| (*k, i as u32))
                })
                .flatten()
        });
        let Some((ch, i)) = found else { return };
        let c = self.channels.get_mut(&ch).expect("channel");
        let x = &mut c.ios[i as usize];
        x.task = false;
        x.aborted = Some(status);
        if x.state == IoState::Reading {
            // The READs finish first; data_out_done sees the abort.
            return;
        }
        if x.state == IoState::RspSent {
            return;
        }
        c.blocked.retain(|&b| b != i);
        self.finish_abort(now, rdma, stack, ch, i);
    }

    fn finish_abort(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ch: u32,
        i: u32,
    ) {
        let Some(c) = self.channels.get_mut(&ch) else {
            return;
        };
        let x = &mut c.ios[i as usize];
        if x.aborted == Some(true) {
            x.rsp = Some(RspKind::Scsi(Response {
                status: ScsiStatus::TASK_ABORTED,
                sense: None,
                data_len: 0,
                residual: Residual::None,
            }));
            x.write_len = 0;
            x.state = IoState::NeedRsp;
            self.advance(now, rdma, stack, ch, i);
        } else {
            c.req_lim_delta += 1;
            self.free_io(ch, i);
        }
    }

    /// All RDMA READs of an I/O are in: execute it on the buffer.
    fn data_out_done(&mut self, stack: &mut Stack, ch: u32, i: u32) {
        let Some(c) = self.channels.get_mut(&ch) else {
            return;
        };
        let x = &mut c.ios[i as usize];
        if x.aborted.is_some() {
            x.state = IoState::NeedRsp;
            if x.aborted == Some(false) {
                x.state = IoState::Free;
                c.req_lim_delta += 1;
                if let Some(DataAt::Buf(b)) = x.data.take() {
                    c.bufs[b].busy = false;
                }
                *x = Io {
                    descs: std::mem::take(&mut x.descs),
                    ..Io::default()
                };
                c.free_io.push(i);
            } else {
                x.rsp = Some(RspKind::Scsi(Response {
                    status: ScsiStatus::TASK_ABORTED,
                    sense: None,
                    data_len: 0,
                    residual: Residual::None,
                }));
                x.write_len = 0;
            }
            return;
        }
        let (Some(cmd), Some(at)) = (x.cmd.take(), x.data) else {
            x.rsp = Some(RspKind::Scsi(internal()));
            x.state = IoState::NeedRsp;
            return;
        };
        let n = cmd.transfer_len() as usize;
        let r = match at {
            // The data landed in the medium: only the status is left.
            DataAt::Medium { .. } => self
                .scsi
                .finish_in_place(&cmd)
                .unwrap_or_else(|_| internal()),
            DataAt::Buf(b) => {
                let lkey = c.bufs[b].keys.lkey;
                match stack.verbs.mr(lkey).and_then(|m| Ok(m.slice(0, n)?)) {
                    Ok(d) => self
                        .scsi
                        .execute(&cmd, Data::Out(d))
                        .unwrap_or_else(|_| internal()),
                    Err(_) => internal(),
                }
            }
        };
        x.rsp = Some(RspKind::Scsi(r));
        x.write_len = 0;
        x.state = IoState::NeedRsp;
    }

    fn free_io(&mut self, ch: u32, i: u32) {
        let Some(c) = self.channels.get_mut(&ch) else {
            return;
        };
        let x = &mut c.ios[i as usize];
        if let Some(DataAt::Buf(b)) = x.data.take() {
            c.bufs[b].busy = false;
        }
        if x.task {
            self.scsi.task_finished(c.nexus, x.tag);
        }
        *x = Io {
            descs: std::mem::take(&mut x.descs),
            ..Io::default()
        };
        c.free_io.push(i);
    }

    /// An I/O on a LUN whose medium is lent to its port: its data lies in the medium
    /// (`start_in_place`), so it needs no buffer; a data-in's status is known at once. False
    /// when the command does not run in place (not a READ or WRITE): it takes a buffer.
    fn place_io(&mut self, ch: u32, i: u32, m: Medium) -> bool {
        let Some(c) = self.channels.get_mut(&ch) else {
            return true;
        };
        let x = &mut c.ios[i as usize];
        let started = match &x.cmd {
            Some(cmd) => self.scsi.start_in_place(cmd),
            None => Ok(InPlace::Done(internal())),
        };
        let r = match started {
            Ok(InPlace::No) => return false,
            Ok(InPlace::Go(p)) => {
                x.data = Some(DataAt::Medium {
                    lkey: m.keys.lkey,
                    offset: p.offset,
                });
                if x.dir == Direction::Out {
                    x.state = IoState::NeedRead;
                    return true;
                }
                // Data-in: sent from the medium as the RDMA WRITEs go out.
                match x.cmd.take() {
                    Some(cmd) => self
                        .scsi
                        .finish_in_place(&cmd)
                        .unwrap_or_else(|_| internal()),
                    None => internal(),
                }
            }
            Ok(InPlace::Done(r)) => {
                x.cmd = None;
                r
            }
            Err(_) => {
                x.cmd = None;
                internal()
            }
        };
        x.write_len = r.data_len;
        x.rsp = Some(RspKind::Scsi(r));
        x.state = IoState::NeedRsp;
        true
    }

    /// Moves an I/O as far as buffers and the send queue allow.
    fn advance(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack, ch: u32, i: u32) {
        let _ = (now, &rdma);
        loop {
            let Some(c) = self.channels.get_mut(&ch) else {
                return;
            };
            if c.state >= ChannelState::Disconnecting {
                return;
            }
            let state = c.ios[i as usize].state;
            match state {
                IoState::NeedBuf => {
                    let (lun, port) = (c.ios[i as usize].lun, c.port);
                    if let Some(m) = medium_of(&self.media, port, lun) {
                        if self.place_io(ch, i, m) {
                            continue;
                        }
                    }
                    let Some(c) = self.channels.get_mut(&ch) else {
                        return;
                    };
                    let need = c.ios[i as usize]
                        .cmd
                        .as_ref()
                        .map_or(0, |m| m.transfer_len() as usize);
                    let Some(b) = alloc_buf(c, stack, self.ports[c.port].pd, need, self.max_io)
                    else {
                        c.blocked.push_back(i);
                        return;
                    };
                    let x = &mut c.ios[i as usize];
                    x.data = Some(DataAt::Buf(b));
                    if x.dir == Direction::Out {
                        x.state = IoState::NeedRead;
                    } else {
                        // Data-in: the store reads into the buffer now.
                        let cmd = x.cmd.take();
                        let lkey = c.bufs[b].keys.lkey;
                        let r = match (cmd, stack.verbs.mr_mut(lkey)) {
                            (Some(cmd), Ok(m)) => {
                                let d = &mut m.as_mut_slice()[..need];
                                self.scsi
                                    .execute(&cmd, Data::In(d))
                                    .unwrap_or_else(|_| internal())
                            }
                            _ => internal(),
                        };
                        x.write_len = r.data_len;
                        x.rsp = Some(RspKind::Scsi(r));
                        x.state = IoState::NeedRsp;
                    }
                }
                IoState::NeedRead => {
                    let x = &c.ios[i as usize];
                    let n = x.cmd.as_ref().map_or(0, |m| m.transfer_len());
                    let wrs = count_wrs(&x.descs, n);
                    if c.sq_avail < wrs {
                        c.blocked.push_back(i);
                        return;
                    }
                    let Some((lkey, base)) = x.data.and_then(|d| d.sge_base(&c.bufs)) else {
                        return;
                    };
                    let mut posted = 0;
                    let mut off = 0u32;
                    for d in &x.descs {
                        if off >= n {
                            break;
                        }
                        let chunk = d.len.min(n - off);
                        if chunk == 0 {
                            continue;
                        }
                        let wr = SendWr::new(
                            wr_id(ch, K_READ, i),
                            SendOp::RdmaRead {
                                remote_addr: d.va,
                                rkey: d.key,
                            },
                        )
                        .with_sge(Sge {
                            addr: base + u64::from(off),
                            length: chunk,
                            lkey,
                        });
                        if stack.post_send(c.qpn, wr).is_ok() {
                            posted += 1;
                        }
                        off += chunk;
                    }
                    c.sq_avail -= posted;
                    let x = &mut c.ios[i as usize];
                    x.reads_left = posted;
                    x.state = IoState::Reading;
                    if posted == 0 {
                        self.data_out_done(stack, ch, i);
                        continue;
                    }
                    return;
                }
                IoState::NeedRsp => {
                    if c.ios[i as usize].aborted == Some(false) {
                        c.req_lim_delta += 1;
                        self.free_io(ch, i);
                        return;
                    }
                    let x = &c.ios[i as usize];
                    let writes = if x.write_len > 0 && x.dir == Direction::In {
                        count_wrs(&x.descs, x.write_len)
                    } else {
                        0
                    };
                    if c.sq_avail < writes + 1 {
                        c.blocked.push_back(i);
                        return;
                    }
                    post_response(c, &mut self.scsi, stack, ch, i, writes);
                    return;
                }
                IoState::Free | IoState::Reading | IoState::RspSent => return,
            }
        }
    }
}

/// The per-channel resources a login allocates.
struct ChannelRes {
    qpn: u32,
    recv: MrKeys,
    send: MrKeys,
}

impl ChannelRes {
    fn free(&self, stack: &mut Stack) {
        let _ = stack.destroy_qp(self.qpn);
        if self.recv.lkey != 0 {
            let _ = stack.verbs.dereg_mr(self.recv.lkey);
        }
        if self.send.lkey != 0 {
            let _ = stack.verbs.dereg_mr(self.send.lkey);
        }
    }
}

fn lp_rq(p: &LoginPolicy) -> u32 {
    p.rq_size
}

fn post_recv_slot(
    stack: &mut Stack,
    qpn: u32,
    ch: u32,
    recv: MrKeys,
    max_req: u32,
    slot: u32,
) -> Result<(), VerbsError> {
    stack.post_recv(
        qpn,
        RecvWr::new(
            wr_id(ch, K_RECV, slot),
            vec![Sge {
                addr: u64::from(slot) * u64::from(max_req),
                length: max_req,
                lkey: recv.lkey,
            }],
        ),
    )
}

/// The IB CM accept: the QP to RTR (`srpt_ch_qp_rtr`), then the REP with ib_srpt's
/// parameters (`srq = 1`, RNR retry 7, flow control, 4 RDMA READs each way).
fn ib_accept(
    now: Instant,
    rdma: &mut RdmaCm,
    stack: &mut Stack,
    id: &CmId,
    qpn: u32,
    our_gid: softrdma_wire::Gid,
    rsp: &[u8],
) -> Result<(), String> {
    let (mut a, m) = rdma
        .cm()
        .init_qp_attr(id, QpState::Rtr)
        .map_err(|e| format!("{e:?}"))?;
    a.max_dest_rd_atomic = SRPT_RDMA_DEPTH;
    // The source GID: our RoCEv2 entry for the address the REQ was sent to.
    if let Ok(idx) = stack.device.find_gid(PORT_NUM, &our_gid, GidType::RoceV2) {
        a.ah_attr.sgid_index = idx;
    }
    stack.modify_qp(qpn, &a, m).map_err(|e| e.to_string())?;
    let p = RepParams {
        qp_num: qpn,
        starting_psn: 0,
        private_data: rsp.to_vec(),
        responder_resources: SRPT_RDMA_DEPTH,
        initiator_depth: SRPT_RDMA_DEPTH,
        failover_accepted: 0,
        flow_control: true,
        rnr_retry_count: 7,
        srq: true,
        ece_vendor_id: 0,
        ece_attr_mod: 0,
    };
    rdma.cm_mut()
        .send_rep(now, id, &p)
        .map_err(|e| format!("{e:?}"))
}

/// The lent medium of `lun` on `port`, if any (a free function: callers hold a channel).
fn medium_of(media: &[Medium], port: usize, lun: LunId) -> Option<Medium> {
    media
        .iter()
        .find(|m| m.port == port && m.lun == lun)
        .copied()
}

fn desc_total(descs: &[DirectBuf]) -> u64 {
    descs.iter().map(|d| u64::from(d.len)).sum()
}

fn count_wrs(descs: &[DirectBuf], n: u32) -> u32 {
    let mut off = 0u32;
    let mut k = 0;
    for d in descs {
        if off >= n {
            break;
        }
        let c = d.len.min(n - off);
        if c > 0 {
            k += 1;
            off += c;
        }
    }
    k
}

fn alloc_buf(
    c: &mut Channel,
    stack: &mut Stack,
    pd: PdId,
    need: usize,
    max_io: u32,
) -> Option<usize> {
    if need > max_io as usize {
        return None;
    }
    if let Some(i) = c.bufs.iter().position(|b| !b.busy && b.len >= need) {
        c.bufs[i].busy = true;
        return Some(i);
    }
    let size = need.next_power_of_two().max(64 << 10);
    let grow = c.bufs.iter().position(|b| !b.busy);
    if grow.is_none() && c.bufs.len() >= c.ios.len() {
        return None;
    }
    let keys = stack
        .verbs
        .reg_mr_with(pd, vec![0; size], 0, AccessFlags::LOCAL_WRITE)
        .ok()?;
    let b = DataBuf {
        keys,
        len: size,
        busy: true,
    };
    match grow {
        Some(i) => {
            let _ = stack.verbs.dereg_mr(c.bufs[i].keys.lkey);
            c.bufs[i] = b;
            Some(i)
        }
        None => {
            c.bufs.push(b);
            Some(c.bufs.len() - 1)
        }
    }
}

/// The RDMA WRITEs of the data-in (as the descriptors split it), then the SRP_RSP.
fn post_response(
    c: &mut Channel,
    scsi: &mut Target,
    stack: &mut Stack,
    ch: u32,
    i: u32,
    writes: u32,
) {
    let x = &mut c.ios[i as usize];
    if writes > 0 {
        if let Some((lkey, base)) = x.data.and_then(|d| d.sge_base(&c.bufs)) {
            let mut off = 0u32;
            for d in &x.descs {
                if off >= x.write_len {
                    break;
                }
                let chunk = d.len.min(x.write_len - off);
                if chunk == 0 {
                    continue;
                }
                let wr = SendWr::new(
                    wr_id(ch, K_WRITE, i),
                    SendOp::RdmaWrite {
                        remote_addr: d.va,
                        rkey: d.key,
                    },
                )
                .with_sge(Sge {
                    addr: base + u64::from(off),
                    length: chunk,
                    lkey,
                });
                if stack.post_send(c.qpn, wr).is_ok() {
                    c.sq_avail -= 1;
                }
                off += chunk;
            }
        }
    }
    let delta = 1 + std::mem::take(&mut c.req_lim_delta);
    let addr = u64::from(i) * u64::from(c.max_rsp);
    let len = match stack
        .verbs
        .mr_mut(c.send.lkey)
        .and_then(|m| Ok(m.slice_mut(addr, c.max_rsp as usize)?))
    {
        Ok(b) => match x.rsp {
            Some(RspKind::Scsi(r)) => {
                let (under, over, n) = match r.residual {
                    Residual::None => (false, false, 0),
                    Residual::Underflow(n) => (true, false, n),
                    Residual::Overflow(n) => (false, true, n),
                };
                let sense = r.sense.map(|s| s.to_fixed());
                iu::write_rsp(
                    b,
                    x.tag,
                    delta,
                    r.status,
                    RspResidual::new(x.dir, under, over, n),
                    sense.as_ref().map_or(&[][..], |s| &s[..]),
                    c.max_ti_iu_len,
                )
            }
            Some(RspKind::Tmf(code)) => iu::write_tsk_mgmt_rsp(b, x.tag, delta, code),
            Some(RspKind::TLogout(why)) => iu::write_short_iu(b, Opcode::T_LOGOUT, why.0, 0),
            None => None,
        },
        Err(_) => None,
    };
    let Some(len) = len else {
        return;
    };
    let wr = SendWr::new(wr_id(ch, K_SEND, i), SendOp::Send).with_sge(Sge {
        addr,
        length: len as u32,
        lkey: c.send.lkey,
    });
    if stack.post_send(c.qpn, wr).is_ok() {
        c.sq_avail -= 1;
    }
    if x.task {
        scsi.task_finished(c.nexus, x.tag);
        x.task = false;
    }
    x.state = IoState::RspSent;
}

/// CHECK CONDITION with LIO's sense for `r`.
fn check(r: SenseReason) -> Response {
    Response {
        status: ScsiStatus::CHECK_CONDITION,
        sense: Some(r.sense()),
        data_len: 0,
        residual: Residual::None,
    }
}

/// A failure of our own (a buffer that could not be reached): LOGICAL UNIT COMMUNICATION
/// FAILURE, as LIO answers a backend error.
fn internal() -> Response {
    check(SenseReason::LogicalUnitCommunicationFailure)
}

/// The SRP RSP_CODE of a task management outcome. ib_srpt 6.1 (`tcm_to_srp_tsk_mgmt_status`)
/// maps FUNCTION COMPLETE to 0, FUNCTION REJECTED to 4 and everything else to 5 (FAILED) —
/// so LIO's "not supported" becomes FAILED; we answer 4 (SRP r16a table 24) for it.
fn tmf_code(r: TmfResponse) -> RspCode {
    match r {
        TmfResponse::FunctionComplete => RspCode::COMPLETE,
        TmfResponse::FunctionNotSupported | TmfResponse::FunctionRejected => RspCode::NOT_SUPPORTED,
        TmfResponse::TaskDoesNotExist | TmfResponse::LunDoesNotExist => RspCode::FAILED,
    }
}

#[allow(dead_code)]
fn _opcode_is_wc(o: WcOpcode) -> bool {
    matches!(o, WcOpcode::Recv)
}
