//! The RDMA CM for connected QPs (kernel `drivers/infiniband/core/cma.c` and `ucma.c`, with
//! librdmacm's calls; RoCE, RC over the TCP port space) on top of the IB CM
//! [`CmEndpoint`], over every port the IB CM was given.
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
//!   next free one (`cma_alloc_any_port`); two ids on one port conflict when their
//!   addresses are equal or either is the wildcard (`cma_check_port`, no REUSEADDR yet).
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
//!   the application catches up.
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
//! - [`RdmaCm::reject`]: REJ 28 with the consumer's private data.
//! - [`RdmaCm::disconnect`]: QP to ERR, then DREQ (ESTABLISHED) or DREP (after a DREQ).
//! - Events with the kernel's statuses (`cma_ib_handler`): UNREACHABLE with `-ETIMEDOUT`
//!   when the REQ or REP ran out of retries; REJECTED with the reason as status, its private
//!   data, and the QP moved to ERR; DISCONNECTED once per connection (DREQ or DREP
//!   received, or the DREQ timed out: status `-ETIMEDOUT`); TIMEWAIT_EXIT.
//! - PSNs as cm.c/cma.c set them: a REQ's or REP's starting PSN is where its *sender's* RQ
//!   starts (`rdma_init_qp_attr`: RTR `rq_psn = seq_num`).
//!
//! Not done here (the next layer): UD/SIDR, PS_IB, options (TOS, REUSEADDR, AFONLY, ACK
//! timeout), ECE.

mod event;
#[cfg(test)]
mod tests;

pub use event::{
    ConnParam, RdmaCmEvent, RdmaCmEventType, RdmaCmId, RdmaId, EADDRNOTAVAIL, ENETUNREACH, ENODEV,
    ETIMEDOUT,
};

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};

use softrdma_wire::cm::{Path, PathMtu, RejectReason, TransportType};
use softrdma_wire::rdma_cm::{
    ip_private_data, service_id, IpCmHeader, PortSpace, CMA_VERSION, IP_CM_HEADER_LEN,
};
use softrdma_wire::Gid;

use crate::cm::{
    CmConfig, CmEndpoint, CmError, CmEvent, CmId, CmPort, CmState, RepParams, ReqParams,
    CMA_CM_MRA_SETTING,
};
use crate::device::{GidType, PortState, PORT_NUM};
use crate::mad::{AgentId, MadAddr, MadAgent, MadEvent, MadOp};
use crate::rand::Rng;
use crate::time::Instant;
use crate::transport::Stack;
use crate::verbs::{AccessFlags, QpAttr, QpAttrMask, QpState, VerbsError};

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
    /// No device holds the address (`-ENODEV` / `-EADDRNOTAVAIL`).
    NoDevice,
    /// The address and port are taken (`-EADDRINUSE`).
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
}

#[derive(Debug)]
struct Id {
    state: CmaState,
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
}

impl Id {
    fn new() -> Id {
        Id {
            state: CmaState::Idle,
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
        }
    }
}

/// What the RDMA CM counts (the kernel has no such counters; drops made visible).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct RdmaCmCounters {
    /// REQs dropped because the listener's backlog was full (the peer retries).
    pub backlog_drops: u64,
    /// REQs refused with REJ 28: bad IP CM header, no matching listener, device refused.
    pub req_refused: u64,
}

/// The RDMA CM, on every port its IB CM was given ([`RdmaCm::add_port`]).
#[derive(Debug)]
pub struct RdmaCm {
    cm: CmEndpoint,
    ids: BTreeMap<u32, Id>,
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
    events: VecDeque<RdmaCmEvent>,
    /// IB CM events that are not the RDMA CM's: ids and listeners created on the IB CM
    /// directly ([`RdmaCm::cm_mut`]), and every id's retransmission notices.
    ib_events: VecDeque<CmEvent>,
    counters: RdmaCmCounters,
    rng: Rng,
}

impl RdmaCm {
    pub fn new(cfg: CmConfig) -> Result<RdmaCm, RdmaCmError> {
        let rng = Rng::new(cfg.seed ^ 0x5244_4d41_5f43_4d00);
        Ok(RdmaCm {
            cm: CmEndpoint::new(cfg)?,
            ids: BTreeMap::new(),
            next_id: 1,
            ports: Vec::new(),
            listens: BTreeMap::new(),
            by_cm: BTreeMap::new(),
            bound: BTreeSet::new(),
            listen_cms: BTreeMap::new(),
            events: VecDeque::new(),
            ib_events: VecDeque::new(),
            counters: RdmaCmCounters::default(),
            rng,
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
        if e.event == RdmaCmEventType::ConnectRequest {
            if let Some(l) = e.listen_id.and_then(|l| self.ids.get_mut(&l.0)) {
                l.pending = l.pending.saturating_sub(1);
            }
        }
        Some(e)
    }

    /// The next IB CM event that is not the RDMA CM's (see [`RdmaCm::cm_mut`]), or a
    /// [`CmEvent::Retry`] notice of any id. Events of ids destroyed since they were queued
    /// are not delivered (a REQ of a destroyed listener is dropped, destroying its id).
    pub fn poll_ib_event(&mut self) -> Option<CmEvent> {
        while let Some(ev) = self.ib_events.pop_front() {
            let live = |r| self.cm.state(r).is_some();
            if live(ev.id()) && ev.listen_id().is_none_or(live) {
                return Some(ev);
            }
        }
        None
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

    /// `rdma_get_local_addr`.
    pub fn local_addr(&self, id: RdmaId) -> Option<SocketAddr> {
        self.ids.get(&id.0).and_then(|i| i.local)
    }

    /// `rdma_get_peer_addr`.
    pub fn remote_addr(&self, id: RdmaId) -> Option<SocketAddr> {
        self.ids.get(&id.0).and_then(|i| i.remote)
    }

    /// How many ids exist (listeners and connections).
    pub fn id_count(&self) -> usize {
        self.ids.len()
    }

    fn id_mut(&mut self, id: &RdmaCmId) -> Result<&mut Id, RdmaCmError> {
        self.ids.get_mut(&id.0).ok_or(RdmaCmError::NoSuchId)
    }

    fn alloc_id(&mut self, i: Id) -> u32 {
        loop {
            let n = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if let std::collections::btree_map::Entry::Vacant(e) = self.ids.entry(n) {
                e.insert(i);
                return n;
            }
        }
    }

    /// `rdma_create_id(RDMA_PS_TCP, IB_QPT_RC)`.
    pub fn create_id(&mut self) -> RdmaCmId {
        RdmaCmId(self.alloc_id(Id::new()))
    }

    /// The port whose RoCEv2 GIDs hold `ip`.
    fn port_for(&self, ip: IpAddr) -> Option<CmPort> {
        self.cm
            .ports()
            .zip(self.ports.iter())
            .find(|(_, p)| p.addrs.contains(&ip))
            .map(|(c, _)| c)
    }

    /// `cma_check_port`: another id of the same family on `port` whose address is `ip`,
    /// or either of them the wildcard.
    fn port_taken(&self, skip: u32, ip: IpAddr, port: u16) -> bool {
        use std::net::{Ipv4Addr, Ipv6Addr};
        let (lo, hi, any) = if ip.is_ipv4() {
            (
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                IpAddr::V4(Ipv4Addr::BROADCAST),
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            )
        } else {
            (
                IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                IpAddr::V6(Ipv6Addr::from(u128::MAX)),
                IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            )
        };
        let other = |from: IpAddr, to: IpAddr| {
            self.bound
                .range((port, from, 0)..=(port, to, u32::MAX))
                .any(|&(_, _, k)| k != skip)
        };
        if ip.is_unspecified() {
            other(lo, hi)
        } else {
            other(ip, ip) || other(any, any)
        }
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

    fn alloc_port(&mut self, skip: u32, ip: IpAddr) -> Result<u16, RdmaCmError> {
        let (lo, hi) = (*EPHEMERAL_PORTS.start(), *EPHEMERAL_PORTS.end());
        let n = u32::from(hi - lo) + 1;
        let start = self.rng.next_u32() % n;
        (0..n)
            .map(|k| lo + ((start + k) % n) as u16)
            .find(|&p| !self.port_taken(skip, ip, p))
            .ok_or(RdmaCmError::NoFreePort)
    }

    /// `rdma_bind_addr`. Returns the bound address (with the port chosen for port 0).
    pub fn bind_addr(
        &mut self,
        id: &RdmaCmId,
        addr: SocketAddr,
    ) -> Result<SocketAddr, RdmaCmError> {
        if self.id_mut(id)?.state != CmaState::Idle {
            return Err(RdmaCmError::InvalidState);
        }
        let port = if addr.ip().is_unspecified() {
            None
        } else {
            Some(self.port_for(addr.ip()).ok_or(RdmaCmError::NoDevice)?)
        };
        let p = if addr.port() == 0 {
            self.alloc_port(id.0, addr.ip())?
        } else if self.port_taken(id.0, addr.ip(), addr.port()) {
            return Err(RdmaCmError::AddrInUse);
        } else {
            addr.port()
        };
        let bound = SocketAddr::new(addr.ip(), p);
        self.set_local(id.0, bound);
        let i = self.id_mut(id)?;
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
            CmaState::AddrBound => i.local,
            _ => return Err(RdmaCmError::InvalidState),
        };
        let src_ip = match (bound.map(|b| b.ip()).filter(|b| !b.is_unspecified()), src) {
            (Some(b), _) => b,
            (None, Some(s)) => s,
            (None, None) => return Err(RdmaCmError::NoDevice),
        };
        if src_ip.is_ipv4() != dst.is_ipv4() {
            return Err(RdmaCmError::FamilyMismatch);
        }
        let Some(port) = self.port_for(src_ip) else {
            self.events
                .push_back(RdmaCmEvent::new(RdmaCmEventType::AddrError, id.0).with_status(ENODEV));
            return Ok(());
        };
        let sport = match bound.map(|b| b.port()).filter(|&p| p != 0) {
            Some(p) => p,
            None => self.alloc_port(id.0, src_ip)?,
        };
        self.set_local(id.0, SocketAddr::new(src_ip, sport));
        let i = self.id_mut(id)?;
        i.port = Some(port);
        i.remote = Some(dst);
        i.state = CmaState::AddrResolved;
        self.events
            .push_back(RdmaCmEvent::new(RdmaCmEventType::AddrResolved, id.0));
        Ok(())
    }

    /// `rdma_resolve_route` for RoCE (`cma_resolve_iboe_route`): built locally.
    pub fn resolve_route(&mut self, id: &RdmaCmId) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        if i.state != CmaState::AddrResolved {
            return Err(RdmaCmError::InvalidState);
        }
        let info = i.port.and_then(|p| self.ports.get(p.index())).cloned();
        let (Some(info), Some(local), Some(remote)) = (info, i.local, i.remote) else {
            return Err(RdmaCmError::InvalidState);
        };
        if local.is_ipv4() != remote.is_ipv4() || !info.up {
            self.events.push_back(
                RdmaCmEvent::new(RdmaCmEventType::RouteError, id.0).with_status(ENETUNREACH),
            );
            return Ok(());
        }
        let i = self.id_mut(id)?;
        i.route = Some(Route {
            hop_limit: ROCE_HOP_LIMIT,
            mtu: info.active_mtu,
            packet_life_time: ROCE_PACKET_LIFE_TIME,
        });
        i.state = CmaState::RouteResolved;
        self.events
            .push_back(RdmaCmEvent::new(RdmaCmEventType::RouteResolved, id.0));
        Ok(())
    }

    /// `rdma_listen` (the id must be bound; `backlog` 0 or above [`MAX_BACKLOG`] means the
    /// maximum, as ucma clamps it).
    pub fn listen(&mut self, id: &RdmaCmId, backlog: u32) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        if i.state != CmaState::AddrBound {
            return Err(RdmaCmError::InvalidState);
        }
        let port = i.local.map(|l| l.port()).ok_or(RdmaCmError::InvalidState)?;
        let sid = service_id(PortSpace::TCP, port);
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
        let id = self.create_id();
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

    /// `rdma_connect` after the route is resolved; `stack` is the id's device
    /// ([`RdmaCm::port_of`]). `qpn`: the QP (in INIT or RESET) the CM moves; `None` when the
    /// user moves its own QP (then CONNECT_RESPONSE, and [`RdmaCm::establish`]).
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
        let (Some(port), Some(local), Some(remote), Some(route)) =
            (i.port, i.local, i.remote, i.route)
        else {
            return Err(RdmaCmError::InvalidState);
        };
        if param.private_data.len() + IP_CM_HEADER_LEN > softrdma_wire::cm::REQ_PRIVATE_DATA_LEN {
            return Err(RdmaCmError::TooLong);
        }
        let flow_label = roce_udp_flow_label(local.port(), remote.port());
        let psn = self.rng.next_psn();
        let mut pd = IpCmHeader::new(local.ip(), local.port(), remote.ip()).to_bytes();
        pd.extend_from_slice(&param.private_data);
        let p = ReqParams {
            port,
            peer: MadAddr::gsi(Gid::from(remote.ip())),
            primary_path: Path {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: Gid::from(local.ip()),
                remote_gid: Gid::from(remote.ip()),
                flow_label,
                hop_limit: route.hop_limit,
                local_ack_timeout: route.packet_life_time + 1,
                ..Path::default()
            },
            packet_life_time: route.packet_life_time,
            path_mtu: PathMtu(route.mtu),
            partition_key: 0xffff,
            service_id: service_id(PortSpace::TCP, remote.port()),
            qp_num: qpn.unwrap_or(0),
            transport: TransportType::RC,
            starting_psn: psn,
            private_data: pd,
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            remote_cm_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
            local_cm_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
            flow_control: param.flow_control,
            retry_count: param.retry_count.min(7),
            rnr_retry_count: param.rnr_retry_count.min(7),
            max_cm_retries: CMA_MAX_CM_RETRIES,
            srq: false,
            ece_vendor_id: 0,
            ece_attr_mod: 0,
        };
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

    /// The QP of `id` to RTR then RTS from the CM's attributes (`cma_modify_qp_rtr/rts`),
    /// with the connection parameters' resources.
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
        // before its REP is formatted).
        a.rq_psn = i.seq_num;
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
        stack.modify_qp(qpn, &a, m)?;
        Ok(())
    }

    /// `rdma_accept`: QP `qpn` (INIT or RESET) to RTR/RTS, then REP.
    pub fn accept(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        id: &RdmaCmId,
        qpn: u32,
        param: &ConnParam,
    ) -> Result<(), RdmaCmError> {
        let psn = self.rng.next_psn();
        {
            let i = self.id_mut(id)?;
            if i.state != CmaState::Connect || i.cm.is_none() {
                return Err(RdmaCmError::InvalidState);
            }
            i.qpn = Some(qpn);
            i.seq_num = psn;
            i.param = param.clone();
        }
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
            ece_vendor_id: 0,
            ece_attr_mod: 0,
        };
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let cm = i.cm.as_ref().ok_or(RdmaCmError::InvalidState)?;
        self.cm.send_rep(now, cm, &rep)?;
        self.drain(now, Some(stack));
        Ok(())
    }

    /// `rdma_establish`: after CONNECT_RESPONSE, once the user moved its QP, send the RTU.
    pub fn establish(&mut self, now: Instant, id: &RdmaCmId) -> Result<(), RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::NoSuchId)?;
        let cm = i.cm.as_ref().ok_or(RdmaCmError::InvalidState)?;
        self.cm.send_rtu(now, cm, &[])?;
        Ok(())
    }

    /// `rdma_init_qp_attr` for a user who moves its own QP (CONNECT_RESPONSE, `rping -q`).
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
        Ok((a, m))
    }

    /// `rdma_reject`: REJ 28 (consumer defined) with `private_data`; the id is gone. On
    /// failure the id comes back with the error.
    pub fn reject(
        &mut self,
        now: Instant,
        id: RdmaCmId,
        private_data: &[u8],
    ) -> Result<(), (RdmaCmId, RdmaCmError)> {
        if private_data.len() > softrdma_wire::cm::REJ_PRIVATE_DATA_LEN {
            return Err((id, RdmaCmError::TooLong));
        }
        let Some(i) = self.ids.get(&id.0) else {
            return Err((id, RdmaCmError::NoSuchId));
        };
        let Some(cm) = i.cm.as_ref() else {
            return Err((id, RdmaCmError::InvalidState));
        };
        if let Err(e) = self
            .cm
            .send_rej(now, cm, RejectReason::CONSUMER_DEFINED, &[], private_data)
        {
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
        if let Some(qpn) = i.qpn {
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
    /// ESTABLISHED...). Queued events for the id are withdrawn.
    pub fn destroy(&mut self, now: Instant, id: RdmaCmId) {
        self.destroy_inner(now, id.0);
    }

    fn destroy_inner(&mut self, now: Instant, id: u32) {
        let Some(i) = self.ids.remove(&id) else {
            return;
        };
        if let Some(l) = i.local {
            self.bound.remove(&(l.port(), l.ip(), id));
        }
        if let Some(cm) = i.cm {
            self.by_cm.remove(&cm.local_comm_id());
            self.cm.destroy(now, cm);
        }
        if i.state == CmaState::Listen {
            if let Some(sid) = i.local.map(|l| service_id(PortSpace::TCP, l.port())) {
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
        if let Some(p) = i.parent.and_then(|p| self.ids.get_mut(&p)) {
            // A CONNECT_REQUEST still queued held a backlog slot.
            if self
                .events
                .iter()
                .any(|e| e.id.0 == id && e.event == RdmaCmEventType::ConnectRequest)
            {
                p.pending = p.pending.saturating_sub(1);
            }
        }
        // No event for a destroyed id (a CONNECT_REQUEST's new id goes with it).
        let mut orphans = Vec::new();
        self.events.retain_mut(|e| {
            if e.id.0 == id {
                if let Some(n) = e.new_id.take() {
                    orphans.push(n);
                }
                false
            } else {
                true
            }
        });
        for n in orphans {
            self.destroy_inner(now, n.0);
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

    fn push(&mut self, event: RdmaCmEventType, id: u32) {
        self.events.push_back(RdmaCmEvent::new(event, id));
    }

    /// DISCONNECTED once per connection (`cma_comp_exch(CONNECT, DISCONNECT)`).
    fn disconnected(&mut self, id: u32, status: i32) {
        if let Some(i) = self.ids.get_mut(&id) {
            if i.state == CmaState::Connect {
                i.state = CmaState::Disconnect;
                self.events.push_back(
                    RdmaCmEvent::new(RdmaCmEventType::Disconnected, id).with_status(status),
                );
            }
        }
    }

    fn on_cm_event(&mut self, now: Instant, stack: Option<&mut Stack>, ev: CmEvent) {
        use RdmaCmEventType as T;
        if let CmEvent::SidrReqReceived { listen, .. } = &ev {
            if self.listen_cms.contains_key(&listen.local_comm_id()) {
                // cma_ib_check_req_qp_type: a SIDR_REQ is for a UD listener and these are
                // RC (RDMA_PS_TCP): cma_ib_req_handler fails, the IB CM destroys the new id,
                // which answers SIDR_REP status 2 (REJECT).
                if let CmEvent::SidrReqReceived { id, .. } = ev {
                    self.cm.destroy(now, id);
                }
                return;
            }
        }
        if let CmEvent::ReqReceived { id, listen, req } = ev {
            let ours = self.listen_cms.contains_key(&listen.local_comm_id());
            match (ours, stack) {
                (true, Some(stack)) => self.on_req(now, stack, id, &req),
                (true, None) => self.cm.destroy(now, id),
                (false, _) => self
                    .ib_events
                    .push_back(CmEvent::ReqReceived { id, listen, req }),
            }
            return;
        }
        // Events of IB CM ids that are not ours, and retry notices, go to the IB CM user.
        let owner = match &ev {
            CmEvent::Retry { .. } => None,
            e => self.by_cm.get(&e.id().local_comm_id()).copied(),
        };
        let Some(r) = owner else {
            self.ib_events.push_back(ev);
            return;
        };
        match ev {
            CmEvent::RepReceived { rep, .. } => {
                let has_qp = self.ids.get(&r).is_some_and(|i| i.qpn.is_some());
                if !has_qp {
                    let mut e = RdmaCmEvent::new(T::ConnectResponse, r);
                    e.private_data = rep.private_data.to_vec();
                    e.param.responder_resources = rep.initiator_depth;
                    e.param.initiator_depth = rep.responder_resources;
                    e.param.rnr_retry_count = rep.rnr_retry_count;
                    self.events.push_back(e);
                    return;
                }
                let ok = stack.is_some_and(|s| self.qp_to_rts(s, r).is_ok())
                    && self
                        .ids
                        .get(&r)
                        .and_then(|i| i.cm.as_ref())
                        .map(|cm| self.cm.send_rtu(now, cm, &[]).is_ok())
                        .unwrap_or(false);
                if ok {
                    let mut e = RdmaCmEvent::new(T::Established, r);
                    e.private_data = rep.private_data.to_vec();
                    e.param.responder_resources = rep.initiator_depth;
                    e.param.initiator_depth = rep.responder_resources;
                    e.param.rnr_retry_count = rep.rnr_retry_count;
                    self.events.push_back(e);
                } else {
                    // cma_rep_recv failing: REJ CONSUMER_DEFINED and CONNECT_ERROR.
                    if let Some(cm) = self.ids.get(&r).and_then(|i| i.cm.as_ref()) {
                        let _ = self
                            .cm
                            .send_rej(now, cm, RejectReason::CONSUMER_DEFINED, &[], &[]);
                    }
                    self.push(T::ConnectError, r);
                }
            }
            CmEvent::RtuReceived { .. } | CmEvent::UserEstablished { .. } => {
                self.push(T::Established, r)
            }
            CmEvent::ReqError { .. } | CmEvent::RepError { .. } => self
                .events
                .push_back(RdmaCmEvent::new(T::Unreachable, r).with_status(ETIMEDOUT)),
            CmEvent::RejReceived { rej, .. } => {
                // cma_modify_qp_err, then REJECTED with the reason as the status.
                if let (Some(qpn), Some(s)) = (self.ids.get(&r).and_then(|i| i.qpn), stack) {
                    let attr = QpAttr {
                        qp_state: QpState::Err,
                        ..QpAttr::default()
                    };
                    let _ = s.modify_qp(qpn, &attr, QpAttrMask::STATE);
                }
                let mut e = RdmaCmEvent::new(T::Rejected, r).with_status(i32::from(rej.reason.0));
                e.reject_reason = Some(rej.reason);
                e.private_data = rej.private_data.to_vec();
                self.events.push_back(e);
            }
            CmEvent::DreqError { .. } => self.disconnected(r, ETIMEDOUT),
            CmEvent::DreqReceived { .. } | CmEvent::DrepReceived { .. } => self.disconnected(r, 0),
            CmEvent::TimewaitExit { .. } => self.push(T::TimewaitExit, r),
            _ => {}
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
        let Some(listen) = self.match_listener(stack, sid, req) else {
            // cma_ib_req_handler failing: the id is destroyed in REQ_RCVD → REJ 28, no data.
            self.counters.req_refused += 1;
            self.cm.destroy(now, cm);
            return;
        };
        let (local, remote, data) = listen.1;
        let l = listen.0;
        if self.ids.get(&l).is_some_and(|li| li.pending >= li.backlog) {
            // ucma's backlog is full: -ENOMEM, the IB CM drops the REQ without a REJ.
            self.counters.backlog_drops += 1;
            self.cm.destroy_silently(now, cm);
            return;
        }
        // ib_prepare_cm_mra: the MRA goes out only if the REQ is retransmitted before the
        // consumer answers.
        let _ = self.cm.send_mra(now, &cm, CMA_CM_MRA_SETTING, true, &[]);
        let comm = cm.local_comm_id();
        let r = self.alloc_id(Id {
            state: CmaState::Connect,
            cm: Some(cm),
            port: Some(req.port),
            local: Some(local),
            remote: Some(remote),
            parent: Some(l),
            ..Id::new()
        });
        self.by_cm.insert(comm, r);
        if let Some(li) = self.ids.get_mut(&l) {
            li.pending += 1;
        }
        let mut e = RdmaCmEvent::new(RdmaCmEventType::ConnectRequest, r);
        e.listen_id = Some(RdmaId(l));
        e.new_id = Some(RdmaCmId(r));
        e.private_data = data;
        e.param = ConnParam {
            private_data: Vec::new(),
            // cm_format_req_event: seen from our side, the peer's initiator depth is what
            // we must answer with responder resources, and vice versa.
            responder_resources: req.req.initiator_depth,
            initiator_depth: req.req.responder_resources,
            flow_control: req.req.end_to_end_flow_control,
            retry_count: req.req.retry_count,
            rnr_retry_count: req.req.rnr_retry_count,
        };
        self.events.push_back(e);
    }

    /// The IP CM header checks, the listener by destination address, and device
    /// acquisition (`cma_ib_acquire_dev`): `(listener, (local, remote, private data))`.
    #[allow(clippy::type_complexity)]
    fn match_listener(
        &self,
        stack: &Stack,
        sid: u64,
        req: &crate::cm::ReqInfo,
    ) -> Option<(u32, (SocketAddr, SocketAddr, Vec<u8>))> {
        let (_, listeners) = self.listens.get(&sid)?;
        let (h, data) = ip_private_data(sid, &req.req.private_data)?;
        if h.cma_version != CMA_VERSION
            || !matches!(h.ip_version, 4 | 6)
            || req.req.private_data.len() < IP_CM_HEADER_LEN
        {
            return None;
        }
        let (dst, src) = (h.dst_ip()?, h.src_ip()?);
        let port = (sid & 0xffff) as u16;
        // cma_find_listener: the listener bound to the destination address, else one bound
        // to the wildcard of the destination's family.
        let bound = |l: &u32| self.ids.get(l).and_then(|i| i.local);
        let l = listeners
            .iter()
            .find(|l| bound(l).is_some_and(|a| a.ip() == dst))
            .or_else(|| {
                listeners.iter().find(|l| {
                    bound(l)
                        .is_some_and(|a| a.ip().is_unspecified() && a.is_ipv4() == dst.is_ipv4())
                })
            })?;
        // cma_ib_acquire_dev: the listener's device (or any, for the wildcard) must be the
        // one the REQ came in on, the port up, and its GID table hold a RoCEv2 entry for the
        // address.
        let li = self.ids.get(l)?;
        if li.port.is_some_and(|p| p != req.port) {
            return None;
        }
        let info = self.ports.get(req.port.index())?;
        if !info.up
            || stack
                .device
                .find_gid(PORT_NUM, &Gid::from(dst), GidType::RoceV2)
                .is_err()
        {
            return None;
        }
        Some((
            *l,
            (
                SocketAddr::new(dst, port),
                SocketAddr::new(src, h.src_port),
                data.to_vec(),
            ),
        ))
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
