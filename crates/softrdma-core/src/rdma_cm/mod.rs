//! The RDMA CM (kernel `drivers/infiniband/core/cma.c` and `ucma.c`, with librdmacm's
//! calls; RoCE: RC ids in the TCP and IB port spaces, UD ids over SIDR in the UDP space, IP
//! or native GID addressing) on top of the IB CM [`CmEndpoint`], over every port the IB CM
//! was given.
//!
//! Ids: [`RdmaCm::create_id`] returns an owned [`RdmaCmId`]; commands borrow it;
//! [`RdmaCm::destroy`] and [`RdmaCm::reject`] consume it. A CONNECT_REQUEST hands a new
//! owned id to the user inside its event. Events name ids by [`RdmaId`]. After an id is
//! destroyed no event for it is delivered (queued ones are withdrawn).
//!
//! What each call does, following cma.c:
//! - [`RdmaCm::bind_addr`] (`rdma_bind_addr`): the address must be the wildcard (0.0.0.0 /
//!   ::, every device) or a RoCEv2 GID of one of the CM's ports, which binds the id to that
//!   device; port 0 takes an ephemeral port chosen at random in 32768..=60999 and then the
//!   next one this id may share (`cma_alloc_any_port`): a port no id of the space holds, or
//!   one whose every holder differs from the id in destination port, source address or
//!   destination address, each compared where both have one (`cma_port_is_unique`, the
//!   kernel's port reuse: an active id's port is chosen at `rdma_resolve_addr`, with the
//!   destination known, so a source address holds 28,232 connections to each destination
//!   address and port, not 28,232 in all); two ids on one port of one port space conflict
//!   when their addresses are equal or either is the wildcard, unless both set REUSEADDR or
//!   both are AF-only and of different families (`cma_check_port`).
//! - [`RdmaCm::resolve_addr`] (`rdma_resolve_addr`): the source address is the bound one or
//!   the one the caller's routing table gave; the id is bound to the device that owns it
//!   (`cma_acquire_dev_by_src_ip`) → ADDR_RESOLVED, or ADDR_ERROR with `-ENODEV`.
//! - [`RdmaCm::resolve_route`] (`cma_resolve_iboe_route`): the path is built locally — GIDs
//!   from the addresses, hop limit 64, the port's active MTU, packet lifetime
//!   [`ROCE_PACKET_LIFE_TIME`]; the flow label is computed at connect from the ports →
//!   ROUTE_RESOLVED, or ROUTE_ERROR (`-ENETUNREACH`) for mixed address families.
//! - [`RdmaCm::listen`] (`rdma_listen`) on the IB CM service ID `0x0106 << 16 | port`
//!   (`cma_get_service_id`). Listeners of one port with different addresses share one IB CM
//!   listener (`ib_cm_insert_listen`); a REQ goes to the listener bound to its destination
//!   address, else to a wildcard one. The backlog is ucma's: CONNECT_REQUESTs queued and not
//!   yet taken by [`RdmaCm::poll_event`]; a REQ beyond it is dropped without a REJ (the IB
//!   CM id is destroyed silently, `-ENOMEM`), so the peer retransmits it and is served once
//!   the application catches up. The whole event queue is bounded too (ours:
//!   [`CmConfig::event_queue_limit`]): when it is full a REQ is dropped the same way and a
//!   retransmission notice is dropped, both counted ([`RdmaCmCounters`]).
//! - A REQ is checked as `cma_ib_req_handler` / `cma_save_net_info` / `cma_ib_acquire_dev`
//!   do: the 36-byte IP CM header must have version 0 and IP version 4 or 6, a listener
//!   must match its destination, and the new id is bound to the device the REQ arrived on,
//!   which must match the listener (its bound device, or any for the wildcard), be up, and
//!   hold a RoCEv2 GID for the destination address. Any failure destroys the IB CM id in
//!   REQ_RCVD: REJ 28 (consumer defined) without private data. Then the delayed MRA is
//!   prepared (`ib_prepare_cm_mra`, service timeout [`CMA_CM_MRA_SETTING`]).
//! - [`RdmaCm::connect`] (`cma_connect_ib`): REQ with the header (the bound or an ephemeral
//!   source port, flow label `(sport·31 + dport) & 0xfffff`), random starting PSN, CM
//!   response timeouts 20, 15 CM retries. With a QP, a REP moves it to RTR/RTS, sends the
//!   RTU and raises ESTABLISHED (`cma_rep_recv`); without one, CONNECT_RESPONSE, and the
//!   user moves its own QP and calls [`RdmaCm::establish`].
//! - [`RdmaCm::accept`] (`cma_accept_ib`): QP to RTR then RTS, then REP. RTU → ESTABLISHED.
//! - [`RdmaCm::reject`]: REJ 28 with the consumer's private data (a UD id: SIDR REP
//!   status 2).
//! - [`RdmaCm::disconnect`]: QP to ERR, then DREQ (ESTABLISHED) or DREP (after a DREQ).
//! - Events with the kernel's statuses (`cma_ib_handler`): UNREACHABLE with `-ETIMEDOUT`
//!   when the REQ or REP ran out of retries; REJECTED with the reason as status, its private
//!   data, and the QP moved to ERR; DISCONNECTED once per connection (DREQ or DREP
//!   received, or the DREQ timed out: status `-ETIMEDOUT`); TIMEWAIT_EXIT.
//! - PSNs as cm.c/cma.c set them: a REQ's or REP's starting PSN is where its *sender's* RQ
//!   starts (`rdma_init_qp_attr`: RTR `rq_psn = seq_num`).
//!
//! - Port spaces ([`RdmaCm::create_id_ps`]): TCP and IB ids are RC, UDP and IPoIB ids UD
//!   (librdmacm's rule); each space has its own ports (`cma_pernet_xa`). A UD id's
//!   [`RdmaCm::connect`] is a SIDR REQ (the IP header and up to 180 bytes of consumer data,
//!   `1 << (20 - 8)` ms per try, 15 retries: `cma_resolve_ib_udp`), answered by ESTABLISHED
//!   with the peer's AH, QPN and Q_Key ([`UdParam`]), UNREACHABLE with the SIDR status, or
//!   UNREACHABLE `-ETIMEDOUT`; its [`RdmaCm::accept`] is a SIDR REP with the QPN and Q_Key
//!   ([`RDMA_UDP_QKEY`] by default, `cma_send_sidr_rep`), its reject a SIDR REP status 2.
//!   IPoIB's Q_Key comes from an SA the RoCE port does not have: as in the kernel
//!   (`cma_acquire_dev_by_src_ip`, `cma_ib_acquire_dev`), an IPoIB id cannot use a RoCE
//!   device (bind `-EINVAL`, ADDR_ERROR `-EINVAL`, a SIDR REQ to a wildcard IPoIB listener
//!   gets status 2). [`init_ah_from_wc`] is `ibv_init_ah_from_wc` for the reply path.
//! - Native (AF_IB) addressing ([`RdmaCm::bind_ib`], [`RdmaCm::resolve_addr_ib`], [`IbAddr`]):
//!   a GID and a port, service ID `(space << 16) | port` as `rdma_getaddrinfo` makes it;
//!   no IP header in the private data (`cma_user_data_offset`), route hop limit 1, the
//!   device found by the destination GID's subnet prefix (`cma_resolve_ib_dev`). The
//!   kernel cannot do this over RoCE (`rdma_cap_af_ib`); softrdma can, with itself.
//! - Options ([`RdmaCm::set_option`], `rdma_set_option` / `ucma_set_option_id`): TOS
//!   (the path's traffic class: REQ, QP address vectors, a UD id's AH), REUSEADDR and
//!   AFONLY with `cma_check_port`'s rules (an IPv4 bind is AF-only by default, an IPv6 one
//!   is not: `bindv6only` = 0), ACK_TIMEOUT (RC only; the QP's RTS timeout, and when set
//!   before the route the RoCE packet lifetime `timeout - 1`), and
//!   [`RdmaCm::set_min_rnr_timer`] (the RTR `min_rnr_timer`, `rdma_init_qp_attr`).
//! - ECE ([`RdmaCm::connect_ece`], [`RdmaCm::accept_ece`], [`RdmaCm::reject_ece`] = REJ 35)
//!   with librdmacm's negotiation (`init_ece`, `ucma_copy_ece_param_to_kern_rep`,
//!   `ucma_process_conn_resp_ece`): the REP echoes the requester's vendor ID with the
//!   options both sides have (none when the vendors differ); a REP naming another vendor
//!   than ours is CONNECT_ERROR `-EINVAL`. [`RdmaCm::reject_with`] takes reason 28 or 35
//!   only, as `ucma_reject`.
//!
//! - Multicast ([`multicast`]): `rdma_join_multicast(_ex)` / `rdma_leave_multicast` as on a
//!   RoCEv2 port (MGID `::ffff:group`, MULTICAST_JOIN at once: no SA).
//!
//! Not done: IPoIB over an IB port (no SA), the REP's ECE options on the active
//! side (the IB CM's REP event does not carry the MAD's attribute modifier). The active
//! side's MADs carry the TOS (the kernel's AH from the path); a passive side's answers do
//! not (the kernel copies the request's GRH traffic class, which the socket does not see).

mod event;
pub mod multicast;
mod notify;
mod queue;
#[cfg(test)]
mod tests;
mod ud;

pub use event::{
    ConnParam, Ece, RdmaCmEvent, RdmaCmEventType, RdmaCmId, RdmaId, UdParam, EADDRNOTAVAIL, EINVAL,
    ENETUNREACH, ENODEV, ETIMEDOUT,
};
pub use notify::{EVENT_COMM_EST, EVENT_PATH_MIG};
pub use queue::AnyEvent;
pub use softrdma_wire::rdma_cm::PortSpace;
pub use ud::{init_ah_from_wc, RDMA_UDP_QKEY, SIDR_TIMEOUT_MS};

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use softrdma_wire::cm::{PathMtu, RejectReason, TransportType};
use softrdma_wire::rdma_cm::{service_id, IpCmHeader, CMA_VERSION, IP_CM_HEADER_LEN};
use softrdma_wire::Gid;

use crate::cm::{
    CmConfig, CmEndpoint, CmError, CmEvent, CmId, CmPort, CmState, RepParams, ReqParams,
    CMA_CM_MRA_SETTING,
};
use crate::device::{GidType, PortState, PORT_NUM};
use crate::mad::{AgentId, MadAgent, MadEvent, MadOp};
use crate::rand::Rng;
use crate::time::Instant;
use crate::transport::Stack;
use crate::verbs::{AccessFlags, QpAttr, QpAttrMask, QpState, QpType, VerbsError};

/// The packet lifetime the kernel's RoCE path records carry (local ACK timeout 19 = 18 + 1).
pub const ROCE_PACKET_LIFE_TIME: u8 = 18;
/// `CMA_CM_RESPONSE_TIMEOUT`.
pub const CMA_CM_RESPONSE_TIMEOUT: u8 = 20;
/// `CMA_MAX_CM_RETRIES`.
pub const CMA_MAX_CM_RETRIES: u8 = 15;
/// The hop limit of a RoCEv2 path (the lab's REQs).
pub const ROCE_HOP_LIMIT: u8 = 64;
/// ucma's default and largest backlog (`max_backlog`, net.rdma_ucm.max_backlog = 1024).
pub const MAX_BACKLOG: u32 = 1024;
/// `inet_get_local_port_range`'s default range, where ephemeral ports come from.
pub const EPHEMERAL_PORTS: std::ops::RangeInclusive<u16> = 32768..=60999;

/// `cma_get_roce_udp_flow_label` (no IPv6 flowinfo given): `(sport·31 + dport)` masked to
/// 20 bits. b_rping.pcap: IP CM source port 0x90f2 to 7174 → flow label 0x1a954.
pub fn roce_udp_flow_label(src_port: u16, dst_port: u16) -> u32 {
    (u32::from(src_port) * 31 + u32::from(dst_port)) & 0xf_ffff
}

/// Why an RDMA CM call failed (the errno librdmacm would return, as a variant).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum RdmaCmError {
    /// Unknown id (`-EINVAL` / `-ENOENT`).
    NoSuchId,
    /// Not a state for this call (`-EINVAL`).
    InvalidState,
    /// An argument the kernel refuses (`-EINVAL`): an option for the wrong QP type, a
    /// reject reason other than 28 or 35, an IPoIB id on a RoCE device...
    Invalid,
    /// No device holds the address (`-ENODEV` / `-EADDRNOTAVAIL`).
    NoDevice,
    /// The address and port are taken (`-EADDRINUSE`, or `-EADDRNOTAVAIL` when a wildcard
    /// is involved).
    AddrInUse,
    /// Every ephemeral port is taken (`-EADDRNOTAVAIL`).
    NoFreePort,
    /// The addresses are of different families (`-EINVAL`).
    FamilyMismatch,
    /// Private data too long for the message (`-EINVAL`).
    TooLong,
    /// The IB CM refused.
    Cm(CmError),
    /// A QP transition failed.
    Verbs(VerbsError),
}

impl From<CmError> for RdmaCmError {
    fn from(e: CmError) -> Self {
        match e {
            CmError::TooLong => RdmaCmError::TooLong,
            e => RdmaCmError::Cm(e),
        }
    }
}

impl From<VerbsError> for RdmaCmError {
    fn from(e: VerbsError) -> Self {
        RdmaCmError::Verbs(e)
    }
}

impl std::fmt::Display for RdmaCmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RdmaCmError::NoSuchId => f.write_str("no such RDMA CM id"),
            RdmaCmError::InvalidState => f.write_str("the id is not in a state for this call"),
            RdmaCmError::Invalid => f.write_str("Invalid argument"),
            RdmaCmError::NoDevice => f.write_str("no RDMA device has this address"),
            RdmaCmError::AddrInUse => f.write_str("address and port already in use"),
            RdmaCmError::NoFreePort => f.write_str("no free ephemeral port"),
            RdmaCmError::FamilyMismatch => {
                f.write_str("source and destination are of different address families")
            }
            RdmaCmError::TooLong => f.write_str("private data too long"),
            RdmaCmError::Cm(e) => write!(f, "IB CM: {e}"),
            RdmaCmError::Verbs(e) => write!(f, "QP: {e}"),
        }
    }
}

impl std::error::Error for RdmaCmError {}

/// `enum rdma_cm_state` (the states this module uses).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CmaState {
    Idle,
    AddrBound,
    AddrResolved,
    RouteResolved,
    Connect,
    Disconnect,
    Listen,
}

/// `rdma_set_option(id, RDMA_OPTION_ID, ...)`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RdmaOption {
    /// `RDMA_OPTION_ID_TOS` (`rdma_set_service_type`): the traffic class of the path. Set
    /// before [`RdmaCm::resolve_route`] to matter.
    Tos(u8),
    /// `RDMA_OPTION_ID_REUSEADDR` (`rdma_set_reuseaddr`): share the port with other ids that
    /// set it too (not once listening).
    ReuseAddr(bool),
    /// `RDMA_OPTION_ID_AFONLY` (`rdma_set_afonly`): bind and listen for this address family
    /// only (before or right after bind).
    AfOnly(bool),
    /// `RDMA_OPTION_ID_ACK_TIMEOUT` (`rdma_set_ack_timeout`): the QP's local ACK timeout
    /// exponent (RC only); before the route also the RoCE packet lifetime (`timeout - 1`).
    AckTimeout(u8),
}

/// A native InfiniBand address (`struct sockaddr_ib` as `rdma_getaddrinfo` fills it for
/// `-f gid`): the GID and the port in the service ID `(space << 16) | port`; P_Key 0xffff.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct IbAddr {
    pub gid: Gid,
    pub port: u16,
}

impl IbAddr {
    pub fn new(gid: Gid, port: u16) -> IbAddr {
        IbAddr { gid, port }
    }
}

impl std::fmt::Display for IbAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}]:{}",
            std::net::Ipv6Addr::from(self.gid.0),
            self.port
        )
    }
}

/// An id's address family (`sa_family` of its source address).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Family {
    V4,
    V6,
    Ib,
}

fn family_of(a: &SocketAddr) -> Family {
    if a.is_ipv4() {
        Family::V4
    } else {
        Family::V6
    }
}

/// A port's addresses and state, as the CM saw them when the port was added.
#[derive(Clone, Debug)]
struct PortInfo {
    /// RoCEv2 GIDs of the port, as addresses.
    addrs: Vec<IpAddr>,
    active_mtu: u8,
    up: bool,
}

/// A route (`struct rdma_route` for RoCE).
#[derive(Clone, Copy, Debug)]
struct Route {
    hop_limit: u8,
    mtu: u8,
    packet_life_time: u8,
    traffic_class: u8,
}

/// Options set on an id.
#[derive(Clone, Copy, Debug, Default)]
struct Options {
    tos: Option<u8>,
    reuseaddr: bool,
    /// AFONLY was set explicitly (`CMA_OPTION_AFONLY`); else bind chooses.
    afonly_set: bool,
    afonly: bool,
    timeout: Option<u8>,
    min_rnr_timer: Option<u8>,
}

#[derive(Debug)]
struct Id {
    state: CmaState,
    ps: PortSpace,
    /// RC (TCP, IB) or UD (UDP, IPoIB).
    qp_type: QpType,
    /// AF_IB addressing: `local`/`remote` hold the GIDs as addresses and the ports.
    ib: bool,
    /// The IB CM id (connecting or connected ids).
    cm: Option<CmId>,
    /// The device the id is bound to.
    port: Option<CmPort>,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
    route: Option<Route>,
    qpn: Option<u32>,
    /// `id_priv->seq_num`: our starting PSN (REQ or REP), where our RQ starts.
    seq_num: u32,
    param: ConnParam,
    /// Listeners: the backlog and how many CONNECT_REQUESTs are queued.
    backlog: u32,
    pending: u32,
    /// Passive ids: the listener whose backlog slot the CONNECT_REQUEST holds.
    parent: Option<u32>,
    opts: Options,
    /// A UD id's Q_Key (`id_priv->qkey`; 0 = not yet set).
    qkey: u32,
    local_ece: Ece,
    remote_ece: Ece,
}

impl Id {
    fn new(ps: PortSpace) -> Id {
        Id {
            state: CmaState::Idle,
            ps,
            qp_type: if matches!(ps, PortSpace::UDP | PortSpace::IPOIB) {
                QpType::Ud
            } else {
                QpType::Rc
            },
            ib: false,
            cm: None,
            port: None,
            local: None,
            remote: None,
            route: None,
            qpn: None,
            seq_num: 0,
            param: ConnParam::default(),
            backlog: 0,
            pending: 0,
            parent: None,
            opts: Options::default(),
            qkey: 0,
            local_ece: Ece::default(),
            remote_ece: Ece::default(),
        }
    }

    fn family(&self) -> Option<Family> {
        if self.ib {
            return Some(Family::Ib);
        }
        self.local.as_ref().map(family_of)
    }

    /// `cma_user_data_offset`: the IP header's room in the private data.
    fn data_offset(&self) -> usize {
        if self.ib {
            0
        } else {
            IP_CM_HEADER_LEN
        }
    }
}

/// What the RDMA CM counts (the kernel has no such counters; drops made visible).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RdmaCmCounters {
    /// REQs (and SIDR REQs) dropped because the listener's backlog was full (the peer
    /// retries).
    pub backlog_drops: u64,
    /// REQs refused with REJ 28 (SIDR REQs with SIDR REP status 2): bad IP CM header, no
    /// matching listener, device refused.
    pub req_refused: u64,
    /// REQs and SIDR REQs refused because the event queue was full
    /// ([`CmConfig::event_queue_limit`]): CONNECT_REQUESTs and the IB CM's REQ_RECEIVED /
    /// SIDR_REQ_RECEIVED, handled as a backlog drop (the new IB CM id destroyed with
    /// `-ENOMEM`: no REJ for a REQ, the peer retries).
    pub queue_full_drops: u64,
    /// Retransmission notices ([`CmEvent::Retry`]) dropped because the event queue was
    /// full.
    pub retry_notice_drops: u64,
}

/// The RDMA CM, on every port its IB CM was given ([`RdmaCm::add_port`]).
#[derive(Debug)]
pub struct RdmaCm {
    cm: CmEndpoint,
    /// The ids, boxed (a B-tree node holds pointers, not 192-byte records: CM memory per
    /// connection, `tests/cm_memory.rs`).
    ids: BTreeMap<u32, Box<Id>>,
    next_id: u32,
    ports: Vec<PortInfo>,
    /// IB CM listeners by service ID, with the RDMA CM listeners sharing each.
    listens: BTreeMap<u64, (CmId, Vec<u32>)>,
    /// IB CM comm ID → RDMA CM id.
    by_cm: BTreeMap<u32, u32>,
    /// The ids bound to a port (not the passive ids a CONNECT_REQUEST made), as (port,
    /// address, id): a bind conflict check is a few range look-ups. Kept by
    /// [`RdmaCm::set_local`], the one place an id's `local` changes.
    bound: BTreeSet<(u16, IpAddr, u32)>,
    /// The comm IDs of the IB CM listeners in `listens`.
    listen_cms: BTreeMap<u32, u64>,
    /// The RDMA CM's events, and the IB CM events that are not the RDMA CM's: ids and
    /// listeners created on the IB CM directly ([`RdmaCm::cm_mut`]), and every id's
    /// retransmission notices; at most [`CmConfig::event_queue_limit`] of them, plus the
    /// events of ids the user holds.
    events: queue::Events,
    queue_limit: usize,
    counters: RdmaCmCounters,
    rng: Rng,
    /// Multicast memberships, (id, group) ([`multicast`]).
    joins: Vec<(u32, multicast::Membership)>,
}

/// What a request (REQ or SIDR REQ) says about its addresses, after the IP header checks
/// (`cma_save_req_info`, `cma_get_net_dev`).
struct Incoming<'a> {
    /// The IP header's addresses (destination, source, source port) or `None` for an AF_IB
    /// request (no header: `-EAFNOSUPPORT` in `cma_save_ip_info`).
    ip: Option<(IpAddr, IpAddr, u16)>,
    /// The consumer's private data (after the header of an IP request).
    data: &'a [u8],
    /// Our GID and the peer's as the message's path has them (AF_IB ids take these).
    gids: (Gid, Gid),
    /// The port it arrived on.
    port: CmPort,
    /// A SIDR REQ (UD) rather than a REQ.
    sidr: bool,
}

impl RdmaCm {
    pub fn new(cfg: CmConfig) -> Result<RdmaCm, RdmaCmError> {
        let rng = Rng::new(cfg.seed ^ 0x5244_4d41_5f43_4d00);
        let queue_limit = cfg.event_queue_limit;
        Ok(RdmaCm {
            cm: CmEndpoint::new(cfg)?,
            ids: BTreeMap::new(),
            next_id: 1,
            ports: Vec::new(),
            listens: BTreeMap::new(),
            by_cm: BTreeMap::new(),
            bound: BTreeSet::new(),
            listen_cms: BTreeMap::new(),
            events: queue::Events::default(),
            queue_limit,
            counters: RdmaCmCounters::default(),
            rng,
            joins: Vec::new(),
        })
    }

    /// The IB CM underneath.
    pub fn cm(&self) -> &CmEndpoint {
        &self.cm
    }

    /// The IB CM underneath, for ids of its own (their events come out of
    /// [`RdmaCm::poll_ib_event`]). Commands issued here queue MAD operations and events
    /// like any other; the runtime drains both after the call.
    pub fn cm_mut(&mut self) -> &mut CmEndpoint {
        &mut self.cm
    }

    /// The counters.
    pub fn counters(&self) -> RdmaCmCounters {
        self.counters
    }

    /// Runs the RDMA CM on one more port (`stack`'s device, whose MAD layer is `mad`).
    pub fn add_port(&mut self, mad: &mut MadAgent, stack: &Stack) -> Result<CmPort, RdmaCmError> {
        let guid = stack.device.query_device().node_guid;
        let p = self.cm.add_port_with_guid(mad, guid)?;
        self.ports.push(port_info(stack));
        Ok(p)
    }

    /// Refreshes what the CM knows of a port's addresses and state (after a change).
    pub fn update_port(&mut self, port: CmPort, stack: &Stack) {
        if let Some(p) = self.ports.get_mut(port.index()) {
            *p = port_info(stack);
        }
    }

    /// The next RDMA CM event. Taking a CONNECT_REQUEST frees its listener's backlog slot.
    pub fn poll_event(&mut self) -> Option<RdmaCmEvent> {
        let e = self.events.pop_front()?;
        Some(self.taken(e))
    }

    /// The next RDMA CM event for `owner`, leaving everyone else's queued: an event of the
    /// id itself, or a CONNECT_REQUEST that `owner` (a listener) received. Taking a
    /// CONNECT_REQUEST frees the listener's backlog slot, so a listener whose owner does
    /// not take its requests keeps its backlog full (ucma's `rdma_get_cm_event`).
    pub fn poll_event_of(&mut self, owner: RdmaId) -> Option<RdmaCmEvent> {
        let e = self.events.take_first(|e| match e {
            RdmaCmEvent::ConnectRequest { listen_id, .. } => *listen_id == owner,
            e => e.id() == owner,
        })?;
        Some(self.taken(e))
    }

    fn taken(&mut self, e: RdmaCmEvent) -> RdmaCmEvent {
        if let RdmaCmEvent::ConnectRequest { listen_id, .. } = &e {
            if let Some(l) = self.ids.get_mut(&listen_id.0) {
                l.pending = l.pending.saturating_sub(1);
            }
        }
        e
    }

    /// The next IB CM event that is not the RDMA CM's (see [`RdmaCm::cm_mut`]), or a
    /// [`CmEvent::Retry`] notice of any id. Events of ids destroyed since they were queued
    /// are not delivered (a REQ of a destroyed listener is dropped, destroying its id).
    pub fn poll_ib_event(&mut self) -> Option<CmEvent> {
        while let Some(ev) = self.events.pop_ib() {
            if self.ib_live(&ev) {
                return Some(ev);
            }
        }
        None
    }

    /// Whether an IB CM event is still for the user: its id (and listener) not destroyed.
    fn ib_live(&self, ev: &CmEvent) -> bool {
        let live = |r| self.cm.state(r).is_some();
        live(ev.id()) && ev.listen_id().is_none_or(live)
    }

    /// The next event of either kind, in the order they were queued: what a runtime that
    /// delivers both ([`RdmaCm::poll_event`] and [`RdmaCm::poll_ib_event`]) hands out, with
    /// their rules (taking a CONNECT_REQUEST frees its backlog slot; IB CM events of
    /// destroyed ids are skipped).
    pub fn poll_next(&mut self) -> Option<AnyEvent> {
        loop {
            if self.events.ib_first()? {
                let ev = self.events.pop_ib()?;
                if self.ib_live(&ev) {
                    return Some(AnyEvent::Ib(ev));
                }
            } else {
                return self.poll_event().map(AnyEvent::Rdma);
            }
        }
    }

    /// Whether [`RdmaCm::poll_next`] has an event.
    pub fn has_event(&self) -> bool {
        self.events.rdma_len() > 0 || self.events.ib_iter().any(|e| self.ib_live(e))
    }

    /// How many events are queued (both kinds; IB CM events of ids destroyed since are
    /// counted until they are skipped).
    pub fn queued_events(&self) -> usize {
        self.events.len()
    }

    /// Whether the event queue holds [`CmConfig::event_queue_limit`] events.
    fn queue_full(&self) -> bool {
        self.events.len() >= self.queue_limit
    }

    /// The next MAD operation for a port's MAD layer ([`CmEndpoint::poll_mad`]).
    pub fn poll_mad(&mut self) -> Option<(CmPort, AgentId, MadOp)> {
        self.cm.poll_mad()
    }

    /// When [`RdmaCm::handle_timeout`] wants to run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.cm.poll_timeout()
    }

    /// The device an id is bound to (whose stack its commands need).
    pub fn port_of(&self, id: RdmaId) -> Option<CmPort> {
        self.ids.get(&id.0).and_then(|i| i.port)
    }

    /// The id's state.
    pub fn state(&self, id: RdmaId) -> Option<CmaState> {
        self.ids.get(&id.0).map(|i| i.state)
    }

    /// The IB CM state of an id (for tests and diagnostics).
    pub fn cm_state(&self, id: RdmaId) -> Option<CmState> {
        let i = self.ids.get(&id.0)?;
        self.cm.state(i.cm.as_ref()?.as_ref())
    }

    /// The QP attached by `connect`/`accept`.
    pub fn qpn(&self, id: RdmaId) -> Option<u32> {
        self.ids.get(&id.0).and_then(|i| i.qpn)
    }

    /// The id's port space (`id->ps`).
    pub fn port_space(&self, id: RdmaId) -> Option<PortSpace> {
        self.ids.get(&id.0).map(|i| i.ps)
    }

    /// The id's QP type (`id->qp_type`): RC or UD.
    pub fn qp_type(&self, id: RdmaId) -> Option<QpType> {
        self.ids.get(&id.0).map(|i| i.qp_type)
    }

    /// Whether the id uses native (AF_IB) addressing.
    pub fn is_af_ib(&self, id: RdmaId) -> bool {
        self.ids.get(&id.0).is_some_and(|i| i.ib)
    }

    /// `rdma_get_local_addr` (an AF_IB id: its GID as an address and its port).
    pub fn local_addr(&self, id: RdmaId) -> Option<SocketAddr> {
        self.ids.get(&id.0).and_then(|i| i.local)
    }

    /// `rdma_get_peer_addr`.
    pub fn remote_addr(&self, id: RdmaId) -> Option<SocketAddr> {
        self.ids.get(&id.0).and_then(|i| i.remote)
    }

    /// An AF_IB id's source address.
    pub fn local_ib(&self, id: RdmaId) -> Option<IbAddr> {
        let i = self.ids.get(&id.0).filter(|i| i.ib)?;
        i.local.map(|a| IbAddr::new(Gid::from(a.ip()), a.port()))
    }

    /// An AF_IB id's destination address.
    pub fn remote_ib(&self, id: RdmaId) -> Option<IbAddr> {
        let i = self.ids.get(&id.0).filter(|i| i.ib)?;
        i.remote.map(|a| IbAddr::new(Gid::from(a.ip()), a.port()))
    }

    /// The ECE the peer sent (`rdma_get_remote_ece`).
    pub fn remote_ece(&self, id: RdmaId) -> Option<Ece> {
        self.ids.get(&id.0).map(|i| i.remote_ece)
    }

    /// A UD id's Q_Key (0 until set: by [`RdmaCm::init_qp_for`], accept or the SIDR REP).
    pub fn qkey(&self, id: RdmaId) -> Option<u32> {
        self.ids.get(&id.0).map(|i| i.qkey)
    }

    /// The traffic class the id's path carries (its TOS option, else 0).
    pub fn traffic_class(&self, id: RdmaId) -> Option<u8> {
        let i = self.ids.get(&id.0)?;
        Some(
            i.route
                .map(|r| r.traffic_class)
                .unwrap_or(i.opts.tos.unwrap_or(0)),
        )
    }

    /// How many ids exist (listeners and connections).
    pub fn id_count(&self) -> usize {
        self.ids.len()
    }

    fn id_mut(&mut self, id: &RdmaCmId) -> Result<&mut Id, RdmaCmError> {
        self.ids
            .get_mut(&id.0)
            .map(|i| &mut **i)
            .ok_or(RdmaCmError::NoSuchId)
    }

    fn alloc_id(&mut self, i: Id) -> u32 {
        loop {
            let n = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if let std::collections::btree_map::Entry::Vacant(e) = self.ids.entry(n) {
                e.insert(Box::new(i));
                return n;
            }
        }
    }

    /// `rdma_create_id(RDMA_PS_TCP, IB_QPT_RC)`.
    pub fn create_id(&mut self) -> RdmaCmId {
        self.create_id_ps(PortSpace::TCP)
    }

    /// `rdma_create_id(ps)`: librdmacm's QP type for the space (UDP and IPoIB: UD; TCP and
    /// IB: RC).
    pub fn create_id_ps(&mut self, ps: PortSpace) -> RdmaCmId {
        RdmaCmId(self.alloc_id(Id::new(ps)))
    }

    /// `rdma_set_option(RDMA_OPTION_ID, ...)` with the kernel's checks.
    pub fn set_option(&mut self, id: &RdmaCmId, opt: RdmaOption) -> Result<(), RdmaCmError> {
        let i = self.id_mut(id)?;
        match opt {
            RdmaOption::Tos(t) => i.opts.tos = Some(t),
            RdmaOption::ReuseAddr(r) => {
                // rdma_set_reuseaddr: on any time but once listening; off only while idle.
                if (r && i.state != CmaState::Listen) || i.state == CmaState::Idle {
                    i.opts.reuseaddr = r;
                } else {
                    return Err(RdmaCmError::InvalidState);
                }
            }
            RdmaOption::AfOnly(a) => {
                if !matches!(i.state, CmaState::Idle | CmaState::AddrBound) {
                    return Err(RdmaCmError::InvalidState);
                }
                i.opts.afonly_set = true;
                i.opts.afonly = a;
            }
            RdmaOption::AckTimeout(t) => {
                if i.qp_type != QpType::Rc {
                    return Err(RdmaCmError::Invalid);
                }
                i.opts.timeout = Some(t);
            }
        }
        Ok(())
    }

    /// `rdma_set_min_rnr_timer`: the RNR NAK timer code (5 bits) the id's QP sends; RC only.
    pub fn set_min_rnr_timer(&mut self, id: &RdmaCmId, timer: u8) -> Result<(), RdmaCmError> {
        let i = self.id_mut(id)?;
        if timer & 0xe0 != 0 || i.qp_type != QpType::Rc {
            return Err(RdmaCmError::Invalid);
        }
        i.opts.min_rnr_timer = Some(timer);
        Ok(())
    }

    /// `rdma_set_local_ece`: the ECE this id offers (REQ) or accepts (REP); the vendor ID
    /// must not be 0.
    pub fn set_local_ece(&mut self, id: &RdmaCmId, ece: Ece) -> Result<(), RdmaCmError> {
        if ece.vendor_id == 0 || ece.vendor_id > 0x00ff_ffff {
            return Err(RdmaCmError::Invalid);
        }
        self.id_mut(id)?.local_ece = ece;
        Ok(())
    }

    /// The port whose RoCEv2 GIDs hold `ip`.
    fn port_for(&self, ip: IpAddr) -> Option<CmPort> {
        self.cm
            .ports()
            .zip(self.ports.iter())
            .find(|(_, p)| p.addrs.contains(&ip))
            .map(|(c, _)| c)
    }

    /// `cma_check_port`: whether `(ps, fam, ip, port)` may be bound next to the ids already
    /// there (`skip` is the id asking). `reuse`: the asking id's REUSEADDR (0 at listen).
    #[allow(clippy::too_many_arguments)]
    fn check_port(
        &self,
        skip: u32,
        ps: PortSpace,
        fam: Family,
        ip: IpAddr,
        port: u16,
        reuse: bool,
        afonly: bool,
    ) -> Result<(), RdmaCmError> {
        // Only the ids bound to this port (the port index), not every id.
        for k in self.bound_on(port) {
            let Some(cur) = self.ids.get(&k) else {
                continue;
            };
            let Some(l) = cur.local else { continue };
            if k == skip || cur.parent.is_some() || cur.ps != ps || l.port() != port {
                continue;
            }
            if reuse && cur.opts.reuseaddr {
                continue;
            }
            let cfam = cur.family().unwrap_or(fam);
            if afonly && cur.opts.afonly && cfam != fam {
                continue;
            }
            if ip.is_unspecified() || l.ip().is_unspecified() {
                return Err(RdmaCmError::AddrInUse);
            }
            if cfam == fam && Gid::from(l.ip()) == Gid::from(ip) {
                return Err(RdmaCmError::AddrInUse);
            }
        }
        Ok(())
    }

    /// The ids bound to `port` (any address, any family), from the port index.
    fn bound_on(&self, port: u16) -> impl Iterator<Item = u32> + '_ {
        use std::net::{Ipv4Addr, Ipv6Addr};
        let lo = (port, IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
        let hi = (port, IpAddr::V6(Ipv6Addr::from(u128::MAX)), u32::MAX);
        self.bound.range(lo..=hi).map(|&(_, _, k)| k)
    }

    /// The ids bound to `port` on address `ip` exactly, from the port index.
    fn bound_at(&self, port: u16, ip: IpAddr) -> impl Iterator<Item = u32> + '_ {
        self.bound
            .range((port, ip, 0)..=(port, ip, u32::MAX))
            .map(|&(_, _, k)| k)
    }

    /// Binds an id (not a passive one) to `local`, keeping the port index.
    fn set_local(&mut self, id: u32, local: SocketAddr) {
        let Some(i) = self.ids.get_mut(&id) else {
            return;
        };
        if let Some(old) = i.local.replace(local) {
            self.bound.remove(&(old.port(), old.ip(), id));
        }
        if i.parent.is_none() {
            self.bound.insert((local.port(), local.ip(), id));
        }
    }

    /// `cma_alloc_any_port`: a random start in the ephemeral range, then the next port the
    /// id (source address `src`, destination `dst` if known) may take: one no id of the
    /// space holds, or one it may share ([`RdmaCm::port_is_unique`]).
    fn alloc_port(
        &mut self,
        skip: u32,
        ps: PortSpace,
        src: IpAddr,
        dst: Option<SocketAddr>,
    ) -> Result<u16, RdmaCmError> {
        let (lo, hi) = (*EPHEMERAL_PORTS.start(), *EPHEMERAL_PORTS.end());
        let n = u32::from(hi - lo) + 1;
        let start = self.rng.next_u32() % n;
        (0..n)
            .map(|k| lo + ((start + k) % n) as u16)
            .find(|&p| self.port_is_unique(skip, ps, p, src, dst))
            .ok_or(RdmaCmError::NoFreePort)
    }

    /// `cma_port_is_unique`: whether an id with source address `src` and destination `dst`
    /// (`None`: not known yet) may share `port` with every id of space `ps` bound to it
    /// (`skip` is the asking id; passive ids hold no port). Each holder must differ in the
    /// destination port, the source address or the destination address, each compared only
    /// when both have one (not the wildcard, not port 0); addresses of different families
    /// differ (`cma_addr_cmp`).
    fn port_is_unique(
        &self,
        skip: u32,
        ps: PortSpace,
        port: u16,
        src: IpAddr,
        dst: Option<SocketAddr>,
    ) -> bool {
        use std::net::{Ipv4Addr, Ipv6Addr};
        let known = |a: &IpAddr| !a.is_unspecified();
        // Holders with another concrete source address differ from us: only those on our
        // address and on the wildcards need a look (all of them when we are the wildcard).
        let mut candidates: Box<dyn Iterator<Item = u32> + '_> = if known(&src) {
            Box::new(
                [
                    src,
                    IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                    IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                ]
                .into_iter()
                .flat_map(move |a| self.bound_at(port, a)),
            )
        } else {
            Box::new(self.bound_on(port))
        };
        candidates.all(|k| {
            let Some(cur) = self.ids.get(&k) else {
                return true;
            };
            if k == skip || cur.parent.is_some() || cur.ps != ps {
                return true;
            }
            let (cur_src, cur_dst) = (cur.local.map(|l| l.ip()), cur.remote);
            if let (Some(d), Some(c)) = (dst, cur_dst) {
                if d.port() != 0 && c.port() != 0 && d.port() != c.port() {
                    return true;
                }
            }
            if let Some(c) = cur_src {
                if known(&src) && known(&c) && src != c {
                    return true;
                }
            }
            if let (Some(d), Some(c)) = (dst, cur_dst) {
                if known(&d.ip()) && known(&c.ip()) && d.ip() != c.ip() {
                    return true;
                }
            }
            false
        })
    }

    /// `rdma_bind_addr`. Returns the bound address (with the port chosen for port 0).
    pub fn bind_addr(
        &mut self,
        id: &RdmaCmId,
        addr: SocketAddr,
    ) -> Result<SocketAddr, RdmaCmError> {
        self.bind_inner(id, addr, family_of(&addr))
    }

    /// `rdma_bind_addr` with a `sockaddr_ib` (native addressing): the GID must be the zero
    /// GID (any device) or a RoCEv2 GID of one of the CM's ports.
    pub fn bind_ib(&mut self, id: &RdmaCmId, addr: IbAddr) -> Result<IbAddr, RdmaCmError> {
        let a = self.bind_inner(id, SocketAddr::new(addr.gid.to_ip(), addr.port), Family::Ib)?;
        Ok(IbAddr::new(addr.gid, a.port()))
    }

    fn bind_inner(
        &mut self,
        id: &RdmaCmId,
        addr: SocketAddr,
        fam: Family,
    ) -> Result<SocketAddr, RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        if i.state != CmaState::Idle {
            return Err(RdmaCmError::InvalidState);
        }
        let ps = i.ps;
        let port = if addr.ip().is_unspecified() {
            None
        } else {
            let p = self.port_for(addr.ip()).ok_or(RdmaCmError::NoDevice)?;
            // cma_acquire_dev_by_src_ip: an IPoIB id needs an IB port.
            if ps == PortSpace::IPOIB {
                return Err(RdmaCmError::Invalid);
            }
            Some(p)
        };
        // rdma_bind_addr: IPv4 is AF-only unless told otherwise; IPv6 follows bindv6only (0).
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let mut opts = i.opts;
        if !opts.afonly_set {
            opts.afonly = match fam {
                Family::V4 => true,
                Family::V6 => false,
                Family::Ib => opts.afonly,
            };
        }
        let p = if addr.port() == 0 {
            self.alloc_port(id.0, ps, addr.ip(), None)?
        } else {
            self.check_port(
                id.0,
                ps,
                fam,
                addr.ip(),
                addr.port(),
                opts.reuseaddr,
                opts.afonly,
            )?;
            addr.port()
        };
        let bound = SocketAddr::new(addr.ip(), p);
        self.set_local(id.0, bound);
        let i = self.id_mut(id)?;
        i.opts = opts;
        i.ib = fam == Family::Ib;
        i.port = port;
        i.state = CmaState::AddrBound;
        Ok(bound)
    }

    /// `rdma_resolve_addr`: `src` is the address to use (the bound one if the id is bound;
    /// the caller's routing table otherwise); the id is bound to the device that holds it.
    /// ADDR_RESOLVED or ADDR_ERROR follows as an event.
    pub fn resolve_addr(
        &mut self,
        id: &RdmaCmId,
        src: Option<IpAddr>,
        dst: SocketAddr,
    ) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let bound = match i.state {
            CmaState::Idle => None,
            CmaState::AddrBound if !i.ib => i.local,
            _ => return Err(RdmaCmError::InvalidState),
        };
        let ps = i.ps;
        let src_ip = match (bound.map(|b| b.ip()).filter(|b| !b.is_unspecified()), src) {
            (Some(b), _) => b,
            (None, Some(s)) => s,
            (None, None) => return Err(RdmaCmError::NoDevice),
        };
        if src_ip.is_ipv4() != dst.is_ipv4() {
            return Err(RdmaCmError::FamilyMismatch);
        }
        let Some(port) = self.port_for(src_ip) else {
            self.events.push_back(RdmaCmEvent::AddrError {
                id: id.name(),
                status: ENODEV,
            });
            return Ok(());
        };
        if ps == PortSpace::IPOIB {
            // addr_handler → cma_acquire_dev_by_src_ip: -EINVAL on a RoCE port.
            self.events.push_back(RdmaCmEvent::AddrError {
                id: id.name(),
                status: EINVAL,
            });
            return Ok(());
        }
        let sport = match bound.map(|b| b.port()).filter(|&p| p != 0) {
            Some(p) => p,
            None => self.alloc_port(id.0, ps, src_ip, Some(dst))?,
        };
        self.set_local(id.0, SocketAddr::new(src_ip, sport));
        let i = self.id_mut(id)?;
        if bound.is_none() && !i.opts.afonly_set {
            i.opts.afonly = dst.is_ipv4();
        }
        i.port = Some(port);
        i.remote = Some(dst);
        i.state = CmaState::AddrResolved;
        self.events
            .push_back(RdmaCmEvent::AddrResolved { id: id.name() });
        Ok(())
    }

    /// `rdma_resolve_addr` with `sockaddr_ib`s (`cma_resolve_ib_addr`): the source is the
    /// bound GID, else `src`, else the first active port with a RoCEv2 GID of the
    /// destination's subnet prefix (the port holding the destination itself first:
    /// `cma_resolve_ib_dev`). ADDR_RESOLVED or ADDR_ERROR (`-ENODEV`) follows.
    pub fn resolve_addr_ib(
        &mut self,
        id: &RdmaCmId,
        src: Option<Gid>,
        dst: IbAddr,
    ) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let bound = match i.state {
            CmaState::Idle => None,
            CmaState::AddrBound if i.ib => i.local,
            _ => return Err(RdmaCmError::InvalidState),
        };
        let ps = i.ps;
        let want = bound
            .map(|b| Gid::from(b.ip()))
            .filter(|g| *g != Gid::ZERO)
            .or(src);
        let found = match want {
            Some(g) => self.port_for(g.to_ip()).map(|p| (p, g.to_ip())),
            None => self.resolve_ib_dev(&dst.gid),
        };
        let Some((port, src_ip)) = found else {
            self.events.push_back(RdmaCmEvent::AddrError {
                id: id.name(),
                status: ENODEV,
            });
            return Ok(());
        };
        let dst_sa = SocketAddr::new(dst.gid.to_ip(), dst.port);
        let sport = match bound.map(|b| b.port()).filter(|&p| p != 0) {
            Some(p) => p,
            None => self.alloc_port(id.0, ps, src_ip, Some(dst_sa))?,
        };
        self.set_local(id.0, SocketAddr::new(src_ip, sport));
        let i = self.id_mut(id)?;
        i.ib = true;
        i.port = Some(port);
        i.remote = Some(SocketAddr::new(dst.gid.to_ip(), dst.port));
        i.state = CmaState::AddrResolved;
        self.events
            .push_back(RdmaCmEvent::AddrResolved { id: id.name() });
        Ok(())
    }

    /// `cma_resolve_ib_dev`: the port holding `dgid`, else the first up port with a GID of
    /// the same subnet prefix (the upper 64 bits).
    fn resolve_ib_dev(&self, dgid: &Gid) -> Option<(CmPort, IpAddr)> {
        let ports: Vec<(CmPort, &PortInfo)> = self.cm.ports().zip(self.ports.iter()).collect();
        for (c, p) in &ports {
            if let Some(a) = p.addrs.iter().find(|a| Gid::from(**a) == *dgid) {
                return Some((*c, *a));
            }
        }
        ports.iter().filter(|(_, p)| p.up).find_map(|(c, p)| {
            p.addrs
                .iter()
                .find(|a| Gid::from(**a).0[..8] == dgid.0[..8])
                .map(|a| (*c, *a))
        })
    }

    /// `rdma_resolve_route` for RoCE (`cma_resolve_iboe_route`): built locally — hop limit
    /// 64 (1 for AF_IB), the port's MTU, traffic class = TOS, packet lifetime 18 or the ACK
    /// timeout − 1.
    pub fn resolve_route(&mut self, id: &RdmaCmId) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        if i.state != CmaState::AddrResolved {
            return Err(RdmaCmError::InvalidState);
        }
        let info = i.port.and_then(|p| self.ports.get(p.index())).cloned();
        let (Some(info), Some(local), Some(remote)) = (info, i.local, i.remote) else {
            return Err(RdmaCmError::InvalidState);
        };
        if (!i.ib && local.is_ipv4() != remote.is_ipv4()) || !info.up {
            self.events.push_back(RdmaCmEvent::RouteError {
                id: id.name(),
                status: ENETUNREACH,
            });
            return Ok(());
        }
        let i = self.id_mut(id)?;
        let plt = match i.opts.timeout {
            Some(t) if t != 0 => t - 1,
            _ => ROCE_PACKET_LIFE_TIME,
        };
        i.route = Some(Route {
            hop_limit: if i.ib { 1 } else { ROCE_HOP_LIMIT },
            mtu: info.active_mtu,
            packet_life_time: plt,
            traffic_class: i.opts.tos.unwrap_or(0),
        });
        i.state = CmaState::RouteResolved;
        self.events
            .push_back(RdmaCmEvent::RouteResolved { id: id.name() });
        Ok(())
    }

    /// `rdma_listen` (the id must be bound; `backlog` 0 or above [`MAX_BACKLOG`] means the
    /// maximum, as ucma clamps it). With REUSEADDR the port must now be the id's alone
    /// (`cma_check_port` without reuse), and REUSEADDR is cleared.
    pub fn listen(&mut self, id: &RdmaCmId, backlog: u32) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        if i.state != CmaState::AddrBound {
            return Err(RdmaCmError::InvalidState);
        }
        let local = i.local.ok_or(RdmaCmError::InvalidState)?;
        let fam = i.family().unwrap_or(Family::V4);
        let (ps, opts) = (i.ps, i.opts);
        if opts.reuseaddr {
            self.check_port(id.0, ps, fam, local.ip(), local.port(), false, opts.afonly)?;
        }
        let sid = service_id(ps, local.port());
        if let Some((_, l)) = self.listens.get_mut(&sid) {
            l.push(id.0);
        } else {
            let cm = self.cm.create_id();
            if let Err(e) = self.cm.listen(&cm, sid) {
                self.cm.destroy(Instant::ZERO, cm);
                return Err(e.into());
            }
            self.listen_cms.insert(cm.local_comm_id(), sid);
            self.listens.insert(sid, (cm, vec![id.0]));
        }
        let i = self.id_mut(id)?;
        i.opts.reuseaddr = false;
        i.backlog = if backlog == 0 || backlog > MAX_BACKLOG {
            MAX_BACKLOG
        } else {
            backlog
        };
        i.state = CmaState::Listen;
        Ok(())
    }

    /// The convenience of `rping -s`: create, bind and listen in one call.
    pub fn listen_on(&mut self, addr: SocketAddr, backlog: u32) -> Result<RdmaCmId, RdmaCmError> {
        self.listen_on_ps(PortSpace::TCP, addr, backlog)
    }

    /// [`RdmaCm::listen_on`] in a port space.
    pub fn listen_on_ps(
        &mut self,
        ps: PortSpace,
        addr: SocketAddr,
        backlog: u32,
    ) -> Result<RdmaCmId, RdmaCmError> {
        let id = self.create_id_ps(ps);
        let r = self
            .bind_addr(&id, addr)
            .and_then(|_| self.listen(&id, backlog));
        match r {
            Ok(()) => Ok(id),
            Err(e) => {
                self.destroy(Instant::ZERO, id);
                Err(e)
            }
        }
    }

    /// `rdma_create_qp`'s transition: the new QP to INIT (P_Key index 0, port 1, local and
    /// remote write and read).
    pub fn init_qp(stack: &mut Stack, qpn: u32) -> Result<(), RdmaCmError> {
        let attr = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: PORT_NUM,
            qp_access_flags: AccessFlags(
                AccessFlags::LOCAL_WRITE.0
                    | AccessFlags::REMOTE_WRITE.0
                    | AccessFlags::REMOTE_READ.0,
            ),
            ..QpAttr::default()
        };
        let mask = QpAttrMask::STATE
            | QpAttrMask::PKEY_INDEX
            | QpAttrMask::PORT
            | QpAttrMask::ACCESS_FLAGS;
        stack.modify_qp(qpn, &attr, mask)?;
        Ok(())
    }

    /// `cma_init_ud_qp` for a UD QP of the caller's: INIT (P_Key index 0, port 1, `qkey`),
    /// RTR, RTS with SQ PSN 0.
    pub fn init_ud_qp(stack: &mut Stack, qpn: u32, qkey: u32) -> Result<(), RdmaCmError> {
        ud::init_ud_qp(stack, qpn, qkey)
    }

    /// `rdma_create_qp`'s transitions for the id's QP type: RC to INIT ([`RdmaCm::init_qp`]);
    /// UD to INIT with the id's Q_Key (set now if it was not: [`RDMA_UDP_QKEY`]), RTR and RTS
    /// with SQ PSN 0 (`cma_init_ud_qp`).
    pub fn init_qp_for(
        &mut self,
        stack: &mut Stack,
        id: &RdmaCmId,
        qpn: u32,
    ) -> Result<(), RdmaCmError> {
        let i = self.id_mut(id)?;
        if i.qp_type == QpType::Rc {
            return Self::init_qp(stack, qpn);
        }
        if i.qkey == 0 {
            i.qkey = ud::default_qkey(i.ps).ok_or(RdmaCmError::Invalid)?;
        }
        ud::init_ud_qp(stack, qpn, i.qkey)
    }

    /// `rdma_connect` after the route is resolved; `stack` is the id's device
    /// ([`RdmaCm::port_of`]). `qpn`: the QP (in INIT or RESET) the CM moves; `None` when the
    /// user moves its own QP (then CONNECT_RESPONSE, and [`RdmaCm::establish`]). A UD id
    /// sends a SIDR REQ instead (its QP, in RTS, is only named).
    pub fn connect(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        id: &RdmaCmId,
        qpn: Option<u32>,
        param: &ConnParam,
    ) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        if i.state != CmaState::RouteResolved {
            return Err(RdmaCmError::InvalidState);
        }
        if i.qp_type == QpType::Ud {
            return self.connect_ud(now, id, qpn, &param.private_data);
        }
        let (Some(port), Some(local), Some(remote), Some(route)) =
            (i.port, i.local, i.remote, i.route)
        else {
            return Err(RdmaCmError::InvalidState);
        };
        let offset = i.data_offset();
        if param.private_data.len() + offset > softrdma_wire::cm::REQ_PRIVATE_DATA_LEN {
            return Err(RdmaCmError::TooLong);
        }
        let (ece, ps, ib) = (i.local_ece, i.ps, i.ib);
        let flow_label = roce_udp_flow_label(local.port(), remote.port());
        let psn = self.rng.next_psn();
        let mut pd = if ib {
            Vec::new()
        } else {
            IpCmHeader::new(local.ip(), local.port(), remote.ip()).to_bytes()
        };
        pd.extend_from_slice(&param.private_data);
        let mut p = ReqParams::new(
            port,
            Gid::from(local.ip()),
            Gid::from(remote.ip()),
            service_id(ps, remote.port()),
            qpn.unwrap_or(0),
        )
        .with_packet_life_time(route.packet_life_time)
        .with_starting_psn(psn)
        .with_private_data(pd)
        .with_rdma_depths(param.responder_resources, param.initiator_depth)
        .with_cm_response_timeouts(CMA_CM_RESPONSE_TIMEOUT, CMA_CM_RESPONSE_TIMEOUT)
        .with_flow_control(param.flow_control)
        .with_retries(param.retry_count.min(7), param.rnr_retry_count.min(7))
        .with_max_cm_retries(CMA_MAX_CM_RETRIES);
        p.peer = p.peer.with_traffic_class(route.traffic_class);
        p.primary_path.flow_label = flow_label;
        p.primary_path.hop_limit = route.hop_limit;
        p.primary_path.traffic_class = route.traffic_class;
        p.primary_path.local_ack_timeout = route.packet_life_time + 1;
        p.path_mtu = PathMtu(route.mtu);
        (p.ece_vendor_id, p.ece_attr_mod) = (ece.vendor_id, ece.attr_mod);
        let cm = self.cm.create_id();
        if let Err(e) = self.cm.send_req(now, &cm, &p) {
            self.cm.destroy(now, cm);
            return Err(e.into());
        }
        let _ = stack;
        self.by_cm.insert(cm.local_comm_id(), id.0);
        let i = self.id_mut(id)?;
        i.cm = Some(cm);
        i.qpn = qpn;
        i.seq_num = psn;
        i.param = param.clone();
        i.state = CmaState::Connect;
        Ok(())
    }

    /// `rdma_connect_ece` (the kernel's; librdmacm's `rdma_set_local_ece` + `rdma_connect`):
    /// the REQ offers `ece` (vendor ID, options).
    pub fn connect_ece(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        id: &RdmaCmId,
        qpn: Option<u32>,
        param: &ConnParam,
        ece: Ece,
    ) -> Result<(), RdmaCmError> {
        self.set_local_ece(id, ece)?;
        self.connect(now, stack, id, qpn, param)
    }

    /// The QP of `id` to RTR then RTS from the CM's attributes (`cma_modify_qp_rtr/rts`),
    /// with the connection parameters' resources and the id's ACK timeout and min RNR timer.
    fn qp_to_rts(&mut self, stack: &mut Stack, id: u32) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id).ok_or(RdmaCmError::NoSuchId)?;
        let qpn = i.qpn.ok_or(RdmaCmError::InvalidState)?;
        let cm = i.cm.as_ref().ok_or(RdmaCmError::InvalidState)?;
        let cur = stack.verbs.qp(qpn)?.state();
        if cur == QpState::Reset {
            let (a, m) = self.cm.init_qp_attr(cm, QpState::Init)?;
            stack.modify_qp(qpn, &a, m)?;
        }
        let (mut a, m) = self.cm.init_qp_attr(cm, QpState::Rtr)?;
        a.max_dest_rd_atomic = i.param.responder_resources;
        // rdma_init_qp_attr: RTR's rq_psn is the id's seq_num (the passive side moves the QP
        // before its REP is formatted), and the id's min RNR timer.
        a.rq_psn = i.seq_num;
        if let Some(t) = i.opts.min_rnr_timer {
            a.min_rnr_timer = t;
        }
        // The id's source GID (cma's sgid_attr): the RoCEv2 entry of its local address.
        if let Some(l) = i.local {
            a.ah_attr.sgid_index = stack
                .device
                .find_gid(PORT_NUM, &Gid::from(l.ip()), GidType::RoceV2)
                .map_err(|_| RdmaCmError::NoDevice)?;
        }
        stack.modify_qp(qpn, &a, m)?;
        let (mut a, m) = self.cm.init_qp_attr(cm, QpState::Rts)?;
        a.max_rd_atomic = i.param.initiator_depth;
        if let Some(t) = i.opts.timeout {
            a.timeout = t;
        }
        stack.modify_qp(qpn, &a, m)?;
        Ok(())
    }

    /// `rdma_accept`: QP `qpn` (INIT or RESET) to RTR/RTS, then REP. A UD id answers its
    /// SIDR REQ instead: SIDR REP status 0 with `qpn` and the id's Q_Key (default
    /// [`RDMA_UDP_QKEY`]) and `param`'s private data.
    pub fn accept(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        id: &RdmaCmId,
        qpn: u32,
        param: &ConnParam,
    ) -> Result<(), RdmaCmError> {
        if self.id_mut(id)?.qp_type == QpType::Ud {
            return self.accept_ud(now, id, qpn, 0, &param.private_data);
        }
        let psn = self.rng.next_psn();
        let ece = {
            let i = self.id_mut(id)?;
            if i.state != CmaState::Connect || i.cm.is_none() {
                return Err(RdmaCmError::InvalidState);
            }
            i.qpn = Some(qpn);
            i.seq_num = psn;
            i.param = param.clone();
            // ucma_copy_ece_param_to_kern_rep: the requester's vendor, the options agreed.
            let (l, r) = (i.local_ece, i.remote_ece);
            let options = if r.vendor_id != 0 && l.vendor_id == r.vendor_id {
                l.attr_mod & r.attr_mod
            } else {
                0
            };
            i.local_ece.attr_mod = options;
            Ece {
                vendor_id: r.vendor_id,
                attr_mod: options,
            }
        };
        self.qp_to_rts(stack, id.0)?;
        let rep = RepParams {
            qp_num: qpn,
            starting_psn: psn,
            private_data: param.private_data.clone(),
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            failover_accepted: 0,
            flow_control: param.flow_control,
            rnr_retry_count: param.rnr_retry_count.min(7),
            srq: false,
            ece_vendor_id: ece.vendor_id,
            ece_attr_mod: ece.attr_mod,
        };
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let cm = i.cm.as_ref().ok_or(RdmaCmError::InvalidState)?;
        self.cm.send_rep(now, cm, &rep)?;
        self.drain(now, Some(stack));
        Ok(())
    }

    /// `rdma_connect` with `conn_param.qp_num` and no QP for the CM (`rping -q`): the REQ
    /// names `qp_num`, the CM never moves that QP (CONNECT_RESPONSE follows; the user moves
    /// it with [`RdmaCm::init_qp_attr`], calls [`RdmaCm::establish`], and moves it to ERR
    /// itself before [`RdmaCm::disconnect`]).
    pub fn connect_user_qp(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        id: &RdmaCmId,
        qp_num: u32,
        param: &ConnParam,
    ) -> Result<(), RdmaCmError> {
        self.connect(now, stack, id, Some(qp_num), param)?;
        self.id_mut(id)?.qpn = None;
        Ok(())
    }

    /// `rdma_accept_ece`: accept offering `ece`; the REP carries the requester's vendor ID and
    /// the options both offered (none when the vendors differ).
    pub fn accept_ece(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        id: &RdmaCmId,
        qpn: u32,
        param: &ConnParam,
        ece: Ece,
    ) -> Result<(), RdmaCmError> {
        self.set_local_ece(id, ece)?;
        self.accept(now, stack, id, qpn, param)
    }

    /// `rdma_establish`: after CONNECT_RESPONSE, once the user moved its QP, send the RTU.
    pub fn establish(&mut self, now: Instant, id: &RdmaCmId) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let cm = i.cm.as_ref().ok_or(RdmaCmError::InvalidState)?;
        self.cm.send_rtu(now, cm, &[])?;
        Ok(())
    }

    /// `rdma_init_qp_attr` for a user who moves its own QP (CONNECT_RESPONSE, `rping -q`),
    /// with the id's ACK timeout and min RNR timer.
    pub fn init_qp_attr(
        &self,
        id: RdmaId,
        target: QpState,
    ) -> Result<(QpAttr, QpAttrMask), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let cm = i.cm.as_ref().ok_or(RdmaCmError::InvalidState)?;
        let (mut a, m) = self.cm.init_qp_attr(cm, target)?;
        if target == QpState::Rtr {
            a.rq_psn = i.seq_num;
        }
        if m.contains(QpAttrMask::TIMEOUT) {
            if let Some(t) = i.opts.timeout {
                a.timeout = t;
            }
        }
        if m.contains(QpAttrMask::MIN_RNR_TIMER) {
            if let Some(t) = i.opts.min_rnr_timer {
                a.min_rnr_timer = t;
            }
        }
        Ok((a, m))
    }

    /// `rdma_reject`: REJ 28 (consumer defined) with `private_data` (a UD id: SIDR REP
    /// status 2); the id is gone. On failure the id comes back with the error.
    pub fn reject(
        &mut self,
        now: Instant,
        id: RdmaCmId,
        private_data: &[u8],
    ) -> Result<(), (RdmaCmId, RdmaCmError)> {
        self.reject_with(now, id, RejectReason::CONSUMER_DEFINED, private_data)
    }

    /// `rdma_reject_ece`: REJ 35 (vendor option not supported).
    pub fn reject_ece(
        &mut self,
        now: Instant,
        id: RdmaCmId,
        private_data: &[u8],
    ) -> Result<(), (RdmaCmId, RdmaCmError)> {
        self.reject_with(
            now,
            id,
            RejectReason::VENDOR_OPTION_NOT_SUPPORTED,
            private_data,
        )
    }

    /// `ucma_reject`: REJ with `reason`, which must be 28 (consumer defined) or 35 (vendor
    /// option not supported), else `Invalid`.
    pub fn reject_with(
        &mut self,
        now: Instant,
        id: RdmaCmId,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Result<(), (RdmaCmId, RdmaCmError)> {
        if reason != RejectReason::CONSUMER_DEFINED
            && reason != RejectReason::VENDOR_OPTION_NOT_SUPPORTED
        {
            return Err((id, RdmaCmError::Invalid));
        }
        let Some(i) = self.ids.get(&id.0) else {
            return Err((id, RdmaCmError::NoSuchId));
        };
        if i.qp_type == QpType::Ud {
            return self.reject_ud(now, id, private_data);
        }
        if private_data.len() > softrdma_wire::cm::REJ_PRIVATE_DATA_LEN {
            return Err((id, RdmaCmError::TooLong));
        }
        let Some(cm) = i.cm.as_ref() else {
            return Err((id, RdmaCmError::InvalidState));
        };
        if let Err(e) = self.cm.send_rej(now, cm, reason, &[], private_data) {
            return Err((id, e.into()));
        }
        self.destroy(now, id);
        Ok(())
    }

    /// `rdma_disconnect`: the QP to ERR, then DREQ (ESTABLISHED) or DREP (DREQ received).
    pub fn disconnect(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        id: &RdmaCmId,
    ) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        if let Some(qpn) = i.qpn.filter(|_| i.qp_type == QpType::Rc) {
            let attr = QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            };
            // A QP already in ERR or destroyed is fine here, like cma_modify_qp_err.
            let _ = stack.modify_qp(qpn, &attr, QpAttrMask::STATE);
        }
        let cm = i.cm.as_ref().ok_or(RdmaCmError::InvalidState)?;
        match self.cm.state(cm.as_ref()) {
            Some(CmState::Established) => self.cm.send_dreq(now, cm, &[])?,
            Some(CmState::DreqRcvd) => self.cm.send_drep(now, cm, &[])?,
            _ => return Err(RdmaCmError::InvalidState),
        }
        Ok(())
    }

    /// `rdma_destroy_id` (the IB CM destroy rules apply: REJ in REQ_RCVD, DREQ in
    /// ESTABLISHED, SIDR REP status 2 in SIDR_REQ_RCVD...). Queued events for the id are
    /// withdrawn.
    pub fn destroy(&mut self, now: Instant, id: RdmaCmId) {
        self.destroy_inner(now, id.0);
    }

    fn destroy_inner(&mut self, now: Instant, id: u32) {
        let Some(i) = self.ids.remove(&id) else {
            return;
        };
        self.joins.retain(|(owner, _)| *owner != id);
        if let Some(l) = i.local {
            self.bound.remove(&(l.port(), l.ip(), id));
        }
        if let Some(cm) = i.cm {
            self.by_cm.remove(&cm.local_comm_id());
            self.cm.destroy(now, cm);
        }
        if i.state == CmaState::Listen {
            if let Some(sid) = i.local.map(|l| service_id(i.ps, l.port())) {
                if let Some((_, l)) = self.listens.get_mut(&sid) {
                    l.retain(|&x| x != id);
                    if l.is_empty() {
                        if let Some((cm, _)) = self.listens.remove(&sid) {
                            self.listen_cms.remove(&cm.local_comm_id());
                            self.cm.destroy(now, cm);
                        }
                    }
                }
            }
        }
        // Nothing queued names the id (the common case): no scan of the queue.
        if !self.events.names(id) {
            return;
        }
        if let Some(p) = i.parent.and_then(|p| self.ids.get_mut(&p)) {
            // A CONNECT_REQUEST still queued held a backlog slot.
            if self
                .events
                .iter()
                .any(|e| e.id().0 == id && e.kind() == RdmaCmEventType::ConnectRequest)
            {
                p.pending = p.pending.saturating_sub(1);
            }
        }
        // No event for a destroyed id (a CONNECT_REQUEST's new id goes with it), nor a
        // destroyed listener's CONNECT_REQUESTs, whose new ids are destroyed too
        // (ucma_cleanup_ctx_events).
        let gone = self
            .events
            .remove_where(|e| e.id().0 == id || e.listen_id().is_some_and(|l| l.0 == id));
        for e in gone {
            if let RdmaCmEvent::ConnectRequest { new_id, .. } = e {
                self.destroy_inner(now, new_id.0);
            }
        }
    }

    /// An event of `port`'s MAD layer (`stack` is that port's device): into the IB CM,
    /// whose events become RDMA CM events (and answers: REJ for bad REQs, RTU after a REP).
    pub fn handle_mad(&mut self, now: Instant, port: CmPort, stack: &mut Stack, ev: MadEvent) {
        self.cm.handle_mad(now, port, ev);
        self.drain(now, Some(stack));
    }

    /// The IB CM's timers (timewait exits).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.cm.handle_timeout(now);
        self.drain(now, None);
    }

    /// Takes the IB CM's queued events: call after commands issued through
    /// [`RdmaCm::cm_mut`], with the stack of the port they concern.
    pub fn process(&mut self, now: Instant, stack: &mut Stack) {
        self.drain(now, Some(stack));
    }

    fn drain(&mut self, now: Instant, mut stack: Option<&mut Stack>) {
        while let Some(ev) = self.cm.poll_event() {
            self.on_cm_event(now, stack.as_deref_mut(), ev);
        }
    }

    /// DISCONNECTED once per connection (`cma_comp_exch(CONNECT, DISCONNECT)`).
    fn disconnected(&mut self, id: u32, status: i32) {
        if let Some(i) = self.ids.get_mut(&id) {
            if i.state == CmaState::Connect {
                i.state = CmaState::Disconnect;
                self.events.push_back(RdmaCmEvent::Disconnected {
                    id: RdmaId(id),
                    status,
                });
            }
        }
    }

    fn qp_to_err(&self, stack: Option<&mut Stack>, r: u32) {
        if let (Some(qpn), Some(s)) = (self.ids.get(&r).and_then(|i| i.qpn), stack) {
            let attr = QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            };
            let _ = s.modify_qp(qpn, &attr, QpAttrMask::STATE);
        }
    }

    fn on_cm_event(&mut self, now: Instant, stack: Option<&mut Stack>, ev: CmEvent) {
        match ev {
            CmEvent::ReqReceived { id, listen, req } => {
                let ours = self.listen_cms.contains_key(&listen.local_comm_id());
                match (ours, stack) {
                    (true, Some(stack)) => self.on_req(now, stack, id, &req),
                    (true, None) => self.cm.destroy(now, id),
                    (false, _) if self.queue_full() => {
                        // As ucma's backlog: -ENOMEM, no REJ; the peer retries.
                        self.counters.queue_full_drops += 1;
                        self.cm.destroy_silently(now, id);
                    }
                    (false, _) => self
                        .events
                        .push_ib(CmEvent::ReqReceived { id, listen, req }),
                }
                return;
            }
            CmEvent::SidrReqReceived {
                id,
                listen,
                req,
                peer,
            } => {
                let ours = self.listen_cms.contains_key(&listen.local_comm_id());
                match (ours, stack) {
                    (true, Some(stack)) => self.on_sidr_req(now, stack, id, &req, &peer),
                    (true, None) => self.cm.destroy(now, id),
                    (false, _) if self.queue_full() => {
                        // cm_destroy_id(-ENOMEM) in SIDR_REQ_RCVD: SIDR_REP REJECT.
                        self.counters.queue_full_drops += 1;
                        self.cm.destroy_silently(now, id);
                    }
                    (false, _) => self.events.push_ib(CmEvent::SidrReqReceived {
                        id,
                        listen,
                        req,
                        peer,
                    }),
                }
                return;
            }
            _ => {}
        }
        // Events of IB CM ids that are not ours, and retry notices, go to the IB CM user.
        let owner = match &ev {
            CmEvent::Retry { .. } => None,
            e => self.by_cm.get(&e.id().local_comm_id()).copied(),
        };
        let Some(r) = owner else {
            if matches!(ev, CmEvent::Retry { .. }) && self.queue_full() {
                self.counters.retry_notice_drops += 1;
            } else {
                self.events.push_ib(ev);
            }
            return;
        };
        match ev {
            CmEvent::RepReceived { rep, attr_mod, .. } => {
                self.on_rep(now, stack, r, &rep, attr_mod)
            }
            CmEvent::RtuReceived { .. } | CmEvent::UserEstablished { .. } => {
                self.events.push_back(RdmaCmEvent::Established {
                    id: RdmaId(r),
                    private_data: Vec::new(),
                    param: ConnParam::default(),
                    ece: Ece::default(),
                    ud: None,
                })
            }
            CmEvent::ReqError { .. } | CmEvent::RepError { .. } | CmEvent::SidrReqError { .. } => {
                self.events.push_back(RdmaCmEvent::Unreachable {
                    id: RdmaId(r),
                    status: ETIMEDOUT,
                    private_data: Vec::new(),
                })
            }
            CmEvent::SidrRepReceived { rep, .. } => self.on_sidr_rep(stack, r, &rep),
            CmEvent::RejReceived { rej, .. } => {
                // cma_modify_qp_err, then REJECTED with the reason as the status.
                self.qp_to_err(stack, r);
                self.events.push_back(RdmaCmEvent::Rejected {
                    id: RdmaId(r),
                    reason: rej.reason,
                    private_data: rej.private_data.to_vec(),
                });
            }
            CmEvent::DreqError { .. } => self.disconnected(r, ETIMEDOUT),
            CmEvent::DreqReceived { .. } | CmEvent::DrepReceived { .. } => self.disconnected(r, 0),
            CmEvent::TimewaitExit { .. } => self
                .events
                .push_back(RdmaCmEvent::TimewaitExit { id: RdmaId(r) }),
            _ => {}
        }
    }

    /// `cma_ib_handler`'s REP_RECEIVED with librdmacm's ECE check
    /// (`ucma_process_conn_resp_ece`): a REP naming another vendor than ours fails the
    /// connection with CONNECT_ERROR `-EINVAL`.
    fn on_rep(
        &mut self,
        now: Instant,
        stack: Option<&mut Stack>,
        r: u32,
        rep: &softrdma_wire::cm::RepRepr,
        attr_mod: u32,
    ) {
        let Some(i) = self.ids.get(&r) else { return };
        let (has_qp, local_vendor) = (i.qpn.is_some(), i.local_ece.vendor_id);
        // The REP's options travel in its MAD's attribute modifier (cma_rep_recv reads
        // them from the event: ib_event->param.rep_rcvd.ece).
        let ece = Ece {
            vendor_id: rep.vendor_id,
            attr_mod,
        };
        // Seen from our side: the peer's initiator depth is what we answer with.
        let param = ConnParam {
            responder_resources: rep.initiator_depth,
            initiator_depth: rep.responder_resources,
            rnr_retry_count: rep.rnr_retry_count,
            ..ConnParam::default()
        };
        let id = RdmaId(r);
        if !has_qp {
            if let Some(i) = self.ids.get_mut(&r) {
                i.remote_ece = ece;
            }
            self.events.push_back(RdmaCmEvent::ConnectResponse {
                id,
                private_data: rep.private_data.to_vec(),
                param,
                ece,
            });
            return;
        }
        if rep.vendor_id != 0 && rep.vendor_id != local_vendor {
            self.qp_to_err(stack, r);
            if let Some(cm) = self.ids.get(&r).and_then(|i| i.cm.as_ref()) {
                let _ = self
                    .cm
                    .send_rej(now, cm, RejectReason::CONSUMER_DEFINED, &[], &[]);
            }
            self.events
                .push_back(RdmaCmEvent::ConnectError { id, status: EINVAL });
            return;
        }
        if let Some(i) = self.ids.get_mut(&r) {
            i.remote_ece = ece;
            if rep.vendor_id == 0 {
                i.local_ece.attr_mod = 0;
            }
        }
        let ok = stack.is_some_and(|s| self.qp_to_rts(s, r).is_ok())
            && self
                .ids
                .get(&r)
                .and_then(|i| i.cm.as_ref())
                .map(|cm| self.cm.send_rtu(now, cm, &[]).is_ok())
                .unwrap_or(false);
        if ok {
            self.events.push_back(RdmaCmEvent::Established {
                id,
                private_data: rep.private_data.to_vec(),
                param,
                ece,
                ud: None,
            });
        } else {
            // cma_rep_recv failing: REJ CONSUMER_DEFINED and CONNECT_ERROR.
            if let Some(cm) = self.ids.get(&r).and_then(|i| i.cm.as_ref()) {
                let _ = self
                    .cm
                    .send_rej(now, cm, RejectReason::CONSUMER_DEFINED, &[], &[]);
            }
            self.events
                .push_back(RdmaCmEvent::ConnectError { id, status: 0 });
        }
    }

    /// `cma_ib_req_handler` for a REQ on one of our IB CM listeners, arrived on `req.port`.
    fn on_req(&mut self, now: Instant, stack: &mut Stack, cm: CmId, req: &crate::cm::ReqInfo) {
        // cma_ib_check_req_qp_type: our listeners are RC; a UC (or XRC) REQ fails the
        // handler, and the IB CM's destroy in REQ_RCVD is REJ 28 without private data.
        if req.req.transport_service_type != TransportType::RC {
            self.counters.req_refused += 1;
            self.cm.destroy(now, cm);
            return;
        }
        let sid = req.req.service_id;
        // cm_format_paths_from_req: the path's sgid is ours (the REQ's remote GID).
        let path = &req.req.primary_path;
        let pd = &req.req.private_data;
        let found = self.incoming(sid, pd, (path.remote_gid, path.local_gid), req.port, false);
        let Some((l, inc, cm)) = self.admit_request(now, stack, sid, found, cm) else {
            return;
        };
        // ib_prepare_cm_mra: the MRA goes out only if the REQ is retransmitted before the
        // consumer answers.
        let _ = self.cm.send_mra(now, &cm, CMA_CM_MRA_SETTING, true, &[]);
        let ece = Ece {
            vendor_id: req.req.vendor_id,
            attr_mod: req.attr_mod,
        };
        let data = inc.data.to_vec();
        let r = self.new_passive(l, cm, &inc, ece);
        let param = ConnParam {
            private_data: Vec::new(),
            // cm_format_req_event: seen from our side, the peer's initiator depth is what
            // we must answer with responder resources, and vice versa.
            responder_resources: req.req.initiator_depth,
            initiator_depth: req.req.responder_resources,
            flow_control: req.req.end_to_end_flow_control,
            retry_count: req.req.retry_count,
            rnr_retry_count: req.req.rnr_retry_count,
        };
        self.events.push_back(RdmaCmEvent::ConnectRequest {
            new_id: RdmaCmId(r),
            listen_id: RdmaId(l),
            private_data: data,
            param,
            ece,
        });
    }

    /// The passive id of a request accepted by listener `l` (`cma_ib_new_conn_id` /
    /// `cma_ib_new_udp_id`, `cma_save_net_info`): the listener's space and QP type, its
    /// family's addressing; it holds one of the listener's backlog slots.
    fn new_passive(&mut self, l: u32, cm: CmId, inc: &Incoming<'_>, ece: Ece) -> u32 {
        let (ps, qp_type, lib, llocal) = match self.ids.get(&l) {
            Some(li) => (li.ps, li.qp_type, li.ib, li.local),
            None => (PortSpace::TCP, QpType::Rc, false, None),
        };
        let lport = llocal.map(|a| a.port()).unwrap_or(0);
        let (local, remote) = match (lib, inc.ip) {
            // An AF_IB listener: the addresses are the path's GIDs (cma_save_ib_info); a
            // SIDR REQ has no path: the listener's address and the sender's QP1 GID.
            (true, _) => (
                SocketAddr::new(inc.gids.0.to_ip(), lport),
                SocketAddr::new(inc.gids.1.to_ip(), 0),
            ),
            (false, Some((dst, src, sport))) => {
                (SocketAddr::new(dst, lport), SocketAddr::new(src, sport))
            }
            (false, None) => (
                SocketAddr::new(inc.gids.0.to_ip(), lport),
                SocketAddr::new(inc.gids.1.to_ip(), 0),
            ),
        };
        let comm = cm.local_comm_id();
        let mut i = Id::new(ps);
        i.qp_type = qp_type;
        i.ib = lib;
        i.state = CmaState::Connect;
        i.cm = Some(cm);
        i.port = Some(inc.port);
        i.local = Some(local);
        i.remote = Some(remote);
        i.parent = Some(l);
        i.remote_ece = ece;
        let r = self.alloc_id(i);
        self.by_cm.insert(comm, r);
        if let Some(li) = self.ids.get_mut(&l) {
            li.pending += 1;
        }
        r
    }

    /// `cma_save_req_info` + `cma_get_net_dev`'s header checks: an IP request needs CM
    /// header version 0; an IP version other than 4 or 6 makes it an AF_IB request (the
    /// private data is then all the consumer's).
    fn incoming<'a>(
        &self,
        sid: u64,
        pd: &'a [u8],
        gids: (Gid, Gid),
        port: CmPort,
        sidr: bool,
    ) -> Option<Incoming<'a>> {
        softrdma_wire::rdma_cm::split_service_id(sid)?;
        let h = IpCmHeader::parse(pd).ok()?;
        if h.cma_version != CMA_VERSION {
            return None;
        }
        let ip = match h.ip_version {
            4 | 6 => Some((h.dst_ip()?, h.src_ip()?, h.src_port)),
            _ => None,
        };
        let data = if ip.is_some() {
            pd.get(IP_CM_HEADER_LEN..).unwrap_or(&[])
        } else {
            pd
        };
        Some(Incoming {
            ip,
            data,
            gids,
            port,
            sidr,
        })
    }

    /// `cma_find_listener` (`cma_match_private_data`, `cma_match_net_dev`,
    /// `cma_ib_check_req_qp_type`) and `cma_ib_acquire_dev`: the listener bound to the
    /// request's destination, else a wildcard one of its family (an IPv6 wildcard that is
    /// not AF-only takes IPv4 requests too; AF_IB requests need AF_IB listeners); the
    /// request must have come in on the listener's device, which must be up and hold a
    /// RoCEv2 GID for the new id's address.
    /// The listener a REQ or SIDR REQ (`found`: its parsed header, `None` if unusable) is
    /// for, checked as `cma_ib_req_handler` checks both, with the CM id back; `None` when the
    /// request is refused or dropped, the CM id then destroyed. Refused (no usable header,
    /// no listener): destroyed in REQ_RCVD / SIDR_REQ_RCVD, which answers REJ 28 without
    /// data / SIDR REP status 2. Dropped: ucma's backlog is full (`-ENOMEM`: the IB CM
    /// answers nothing), or (ours) the whole event queue is, handled as the backlog is.
    fn admit_request<'a>(
        &mut self,
        now: Instant,
        stack: &Stack,
        sid: u64,
        found: Option<Incoming<'a>>,
        cm: CmId,
    ) -> Option<(u32, Incoming<'a>, CmId)> {
        let Some((l, inc)) = found.and_then(|inc| {
            let l = self.match_listener(stack, sid, &inc)?;
            Some((l, inc))
        }) else {
            self.counters.req_refused += 1;
            self.cm.destroy(now, cm);
            return None;
        };
        let backlog_full = self.ids.get(&l).is_some_and(|li| li.pending >= li.backlog);
        if backlog_full || self.queue_full() {
            if backlog_full {
                self.counters.backlog_drops += 1;
            } else {
                self.counters.queue_full_drops += 1;
            }
            self.cm.destroy_silently(now, cm);
            return None;
        }
        Some((l, inc, cm))
    }

    fn match_listener(&self, stack: &Stack, sid: u64, inc: &Incoming<'_>) -> Option<u32> {
        let (_, listeners) = self.listens.get(&sid)?;
        let matches = |l: &u32, exact: bool| -> bool {
            let Some(li) = self.ids.get(l) else {
                return false;
            };
            let Some(a) = li.local else { return false };
            // cma_ib_check_req_qp_type
            if (li.qp_type == QpType::Ud) != inc.sidr {
                return false;
            }
            let any = a.ip().is_unspecified();
            if exact == any {
                return false;
            }
            match (li.ib, inc.ip) {
                (true, _) => true,
                (false, None) => false,
                (false, Some((dst, _, _))) => {
                    if any {
                        !li.opts.afonly || a.is_ipv4() == dst.is_ipv4()
                    } else {
                        a.is_ipv4() == dst.is_ipv4() && a.ip() == dst
                    }
                }
            }
        };
        let l = *listeners
            .iter()
            .find(|l| matches(l, true))
            .or_else(|| listeners.iter().find(|l| matches(l, false)))?;
        let li = self.ids.get(&l)?;
        if li.port.is_some_and(|p| p != inc.port) {
            return None;
        }
        // cma_ib_acquire_dev: an IPoIB id cannot live on a RoCE port.
        if li.ps == PortSpace::IPOIB {
            return None;
        }
        let info = self.ports.get(inc.port.index())?;
        let our = match (li.ib, inc.ip) {
            (false, Some((dst, _, _))) => Gid::from(dst),
            _ => inc.gids.0,
        };
        if !info.up
            || stack
                .device
                .find_gid(PORT_NUM, &our, GidType::RoceV2)
                .is_err()
        {
            return None;
        }
        Some(l)
    }
}

fn port_info(stack: &Stack) -> PortInfo {
    match stack.device.port(PORT_NUM) {
        Ok(p) => PortInfo {
            addrs: p
                .gids
                .entries()
                .iter()
                .filter(|e| e.gid_type == GidType::RoceV2)
                .map(|e| e.gid.to_ip())
                .collect(),
            active_mtu: p.attr.active_mtu.to_enum(),
            up: p.attr.state == PortState::Active,
        },
        Err(_) => PortInfo {
            addrs: Vec::new(),
            active_mtu: 3,
            up: false,
        },
    }
}
