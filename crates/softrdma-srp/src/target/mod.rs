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

mod completion;
mod io;
mod lifecycle;
mod login;
mod manage;
mod media;
mod tmf;

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::IpAddr;

use softrdma_core::cm::{CmId, CmIdRef, CmPort};
use softrdma_core::rdma_cm::{RdmaCm, RdmaCmId, RdmaId};
use softrdma_core::time::Instant;
use softrdma_core::verbs::{CqId, MrKeys, PdId, RecvWr, Sge, VerbsError, WorkCompletion};
use softrdma_core::Stack;
use softrdma_scsi::{LunId, LunMapping, NexusId, Target};
use softrdma_wire::cm::RejectReason;
use softrdma_wire::srp::login::MultiChannelResult;
use softrdma_wire::srp::LoginRejRepr;

use crate::channel::ChannelState;
use crate::login::{AclEntry, LoginPolicy, Refusal};
use crate::wr_id::{WrId, WrKind};

use io::{DataBuf, Io};
pub use manage::ManageError;
pub use media::MediaError;
use media::Medium;

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
    /// Node ACLs with their own LUN numbers (LIO's mapped LUNs): the first entry that
    /// admits a new I_T nexus gives it that map; an initiator no entry here admits sees
    /// every LU at its own number.
    pub lun_maps: Vec<(AclEntry, BTreeMap<LunId, LunMapping>)>,
}

impl SrpConfig {
    pub fn new(guid: u64) -> SrpConfig {
        SrpConfig {
            login: LoginPolicy::new(guid),
            sq_size: 512,
            max_io: 1 << 24,
            lun_maps: Vec::new(),
        }
    }
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

struct Channel {
    port: usize,
    conn: ConnId,
    state: ChannelState,
    qpn: u32,
    key: NexusKey,
    nexus: NexusId,
    initiator: String,
    /// The initiator's address (RDMA CM logins), for address ACL entries.
    source: Option<IpAddr>,
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
}

pub(super) fn post_recv_slot(
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
            WrId::new(ch, WrKind::Recv, slot).to_u64(),
            vec![Sge {
                addr: u64::from(slot) * u64::from(max_req),
                length: max_req,
                lkey: recv.lkey,
            }],
        ),
    )
}
