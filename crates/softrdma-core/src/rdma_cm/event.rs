//! RDMA CM ids as the user holds them, and the events (`struct rdma_cm_event`).

use softrdma_wire::cm::RejectReason;

use crate::verbs::AddressVector;

/// The kernel's `-ETIMEDOUT`, the status of UNREACHABLE after the REQ or REP ran out of
/// retries and of DISCONNECTED after the DREQ did (`cma_ib_handler`).
pub const ETIMEDOUT: i32 = -110;
/// `-ENODEV`: no device holds the address (ADDR_ERROR).
pub const ENODEV: i32 = -19;
/// `-EADDRNOTAVAIL`.
pub const EADDRNOTAVAIL: i32 = -99;
/// `-ENETUNREACH`: no route between the two addresses (ROUTE_ERROR).
pub const ENETUNREACH: i32 = -101;
/// `-EINVAL`: e.g. ADDR_ERROR for an IPoIB-space id on a RoCE device (`cma_acquire_dev_*`),
/// or for a SIDR REP whose Q_Key differs from the id's (`cma_set_qkey`); CONNECT_ERROR when
/// a REP names another ECE vendor than ours (librdmacm's `ucma_process_conn_resp_ece`).
pub const EINVAL: i32 = -22;

/// Enhanced Connection Establishment parameters (`struct rdma_ucm_ece` / `ibv_ece`): a
/// 24-bit vendor ID (the REQ/REP's VendorID field) and vendor options (the MAD's
/// AttributeModifier). Zero: no ECE.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug, Hash)]
pub struct Ece {
    pub vendor_id: u32,
    pub attr_mod: u32,
}

/// `event->param.ud` of a UD id's ESTABLISHED: where to send (`ah_attr`), the remote QPN
/// and the Q_Key of the SIDR REP.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct UdParam {
    pub ah: AddressVector,
    pub qp_num: u32,
    pub qkey: u32,
}

/// An RDMA CM id the user owns (`struct rdma_cm_id *`): not `Clone`, consumed by
/// [`super::RdmaCm::destroy`] / [`super::RdmaCm::reject`]. A CONNECT_REQUEST hands a new one
/// over inside its event ([`RdmaCmEvent::ConnectRequest`]), as the IB CM's REQ_RECEIVED does.
#[must_use = "an RDMA CM id must be destroyed (RdmaCm::destroy) or kept"]
#[derive(PartialEq, Eq, Debug, Hash)]
pub struct RdmaCmId(pub(super) u32);

impl RdmaCmId {
    /// The id's name (what events and lookups use).
    pub fn name(&self) -> RdmaId {
        RdmaId(self.0)
    }
}

impl PartialEq<RdmaId> for RdmaCmId {
    fn eq(&self, other: &RdmaId) -> bool {
        self.0 == other.0
    }
}

/// The name of an RDMA CM id: copyable, owns nothing; only the CM makes them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct RdmaId(pub(super) u32);

impl RdmaId {
    /// A number for logs.
    pub fn value(&self) -> u32 {
        self.0
    }
}

macro_rules! event_types {
    ($($v:ident => $s:literal,)*) => {
        /// `enum rdma_cm_event_type`, in the kernel's order.
        #[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
        pub enum RdmaCmEventType { $($v,)* }

        impl RdmaCmEventType {
            /// Every event type, in the kernel's order.
            pub const ALL: &'static [RdmaCmEventType] = &[$(RdmaCmEventType::$v,)*];

            /// `rdma_event_str`.
            pub fn as_str(&self) -> &'static str {
                match self { $(RdmaCmEventType::$v => $s,)* }
            }
        }
    };
}

event_types! {
    AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
    AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
    RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
    RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
    ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
    ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
    ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
    Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
    Rejected => "RDMA_CM_EVENT_REJECTED",
    Established => "RDMA_CM_EVENT_ESTABLISHED",
    Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
    DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
    MulticastJoin => "RDMA_CM_EVENT_MULTICAST_JOIN",
    MulticastError => "RDMA_CM_EVENT_MULTICAST_ERROR",
    AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
    TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
}

impl std::fmt::Display for RdmaCmEventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `struct rdma_conn_param` (the fields RC uses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnParam {
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: bool,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

impl Default for ConnParam {
    /// What librdmacm users typically pass (and `rdma_accept(id, NULL)` answers with):
    /// one outstanding RDMA READ each way, retry and RNR retry counts 7, so that a lost packet
    /// is retransmitted rather than fatal.
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: false,
            retry_count: 7,
            rnr_retry_count: 7,
        }
    }
}

/// `struct rdma_cm_event`, one variant per event the CM delivers, each with the data the
/// kernel fills in for it: the new id only in CONNECT_REQUEST (it is the user's from then
/// on: dropping the event destroys nothing, so it must be accepted, rejected or destroyed),
/// the reject reason only in REJECTED, a status only where the kernel sets one.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a CONNECT_REQUEST carries a new id that must be accepted, rejected or destroyed"]
pub enum RdmaCmEvent {
    AddrResolved {
        id: RdmaId,
    },
    /// `status`: a negative errno ([`ENODEV`], [`EINVAL`]).
    AddrError {
        id: RdmaId,
        status: i32,
    },
    RouteResolved {
        id: RdmaId,
    },
    /// `status`: a negative errno ([`ENETUNREACH`]).
    RouteError {
        id: RdmaId,
        status: i32,
    },
    /// A REQ (or SIDR REQ) for `listen_id`: `new_id` is the user's now.
    ConnectRequest {
        new_id: RdmaCmId,
        listen_id: RdmaId,
        /// The REQ's private data after the IP CM header.
        private_data: Vec<u8>,
        /// The peer's parameters seen from our side (responder resources = what we may
        /// answer with); `ConnParam::default()` for a SIDR REQ, which carries none.
        param: ConnParam,
        /// The REQ's ECE (`Ece::default()` without, and for a SIDR REQ).
        ece: Ece,
    },
    /// The REP of an id without a QP: the user answers with `rdma_establish`.
    ConnectResponse {
        id: RdmaId,
        private_data: Vec<u8>,
        param: ConnParam,
        /// The REP's vendor ID and the options negotiated.
        ece: Ece,
    },
    /// `status`: a negative errno ([`EINVAL`] for a REP naming another ECE vendor), or 0.
    ConnectError {
        id: RdmaId,
        status: i32,
    },
    /// `status`: [`ETIMEDOUT`] after the REQ, REP or SIDR REQ ran out of retries, or a
    /// SIDR REP's non-zero status, whose private data comes along.
    Unreachable {
        id: RdmaId,
        status: i32,
        private_data: Vec<u8>,
    },
    /// A REJ: the kernel's `event->status` is the reason's number.
    Rejected {
        id: RdmaId,
        reason: RejectReason,
        private_data: Vec<u8>,
    },
    /// The connection is up: after the REP (active side: its private data, parameters and
    /// ECE), the RTU or `notify_comm_est` (passive side: no data, default parameters), or
    /// a SIDR REP (UD: its private data and `ud`).
    Established {
        id: RdmaId,
        private_data: Vec<u8>,
        param: ConnParam,
        ece: Ece,
        /// UD ids: the peer's AH, QPN and Q_Key.
        ud: Option<UdParam>,
    },
    /// `status`: 0, or [`ETIMEDOUT`] when our DREQ went unanswered.
    Disconnected {
        id: RdmaId,
        status: i32,
    },
    TimewaitExit {
        id: RdmaId,
    },
    /// `rdma_join_multicast` joined: the group's AH, QPN 0xFFFFFF and the Q_Key to send with.
    MulticastJoin {
        id: RdmaId,
        ud: UdParam,
    },
    /// A join that failed after it was taken: `status` a negative errno.
    MulticastError {
        id: RdmaId,
        status: i32,
    },
}

impl RdmaCmEvent {
    /// The event's type (`event->event`).
    pub fn kind(&self) -> RdmaCmEventType {
        use RdmaCmEventType as T;
        match self {
            RdmaCmEvent::AddrResolved { .. } => T::AddrResolved,
            RdmaCmEvent::AddrError { .. } => T::AddrError,
            RdmaCmEvent::RouteResolved { .. } => T::RouteResolved,
            RdmaCmEvent::RouteError { .. } => T::RouteError,
            RdmaCmEvent::ConnectRequest { .. } => T::ConnectRequest,
            RdmaCmEvent::ConnectResponse { .. } => T::ConnectResponse,
            RdmaCmEvent::ConnectError { .. } => T::ConnectError,
            RdmaCmEvent::Unreachable { .. } => T::Unreachable,
            RdmaCmEvent::Rejected { .. } => T::Rejected,
            RdmaCmEvent::Established { .. } => T::Established,
            RdmaCmEvent::Disconnected { .. } => T::Disconnected,
            RdmaCmEvent::TimewaitExit { .. } => T::TimewaitExit,
            RdmaCmEvent::MulticastJoin { .. } => T::MulticastJoin,
            RdmaCmEvent::MulticastError { .. } => T::MulticastError,
        }
    }

    /// The id the event is about (`event->id`): a CONNECT_REQUEST's new id.
    pub fn id(&self) -> RdmaId {
        match self {
            RdmaCmEvent::ConnectRequest { new_id, .. } => new_id.name(),
            RdmaCmEvent::AddrResolved { id }
            | RdmaCmEvent::AddrError { id, .. }
            | RdmaCmEvent::RouteResolved { id }
            | RdmaCmEvent::RouteError { id, .. }
            | RdmaCmEvent::ConnectResponse { id, .. }
            | RdmaCmEvent::ConnectError { id, .. }
            | RdmaCmEvent::Unreachable { id, .. }
            | RdmaCmEvent::Rejected { id, .. }
            | RdmaCmEvent::Established { id, .. }
            | RdmaCmEvent::Disconnected { id, .. }
            | RdmaCmEvent::TimewaitExit { id }
            | RdmaCmEvent::MulticastJoin { id, .. }
            | RdmaCmEvent::MulticastError { id, .. } => *id,
        }
    }

    /// CONNECT_REQUEST: its new id (the rest of the event is dropped; match on the variant
    /// to keep both).
    pub fn into_new_id(self) -> Option<RdmaCmId> {
        match self {
            RdmaCmEvent::ConnectRequest { new_id, .. } => Some(new_id),
            _ => None,
        }
    }

    /// CONNECT_REQUEST: the listener (`event->listen_id`).
    pub fn listen_id(&self) -> Option<RdmaId> {
        match self {
            RdmaCmEvent::ConnectRequest { listen_id, .. } => Some(*listen_id),
            _ => None,
        }
    }

    /// The kernel's `event->status`: 0, a negative errno ([`ETIMEDOUT`], [`ENODEV`]...), for
    /// REJECTED the reject reason, for a SIDR UNREACHABLE the SIDR status.
    pub fn status(&self) -> i32 {
        match self {
            RdmaCmEvent::AddrError { status, .. }
            | RdmaCmEvent::RouteError { status, .. }
            | RdmaCmEvent::ConnectError { status, .. }
            | RdmaCmEvent::Unreachable { status, .. }
            | RdmaCmEvent::Disconnected { status, .. }
            | RdmaCmEvent::MulticastError { status, .. } => *status,
            RdmaCmEvent::Rejected { reason, .. } => i32::from(reason.0),
            _ => 0,
        }
    }

    /// The event's private data (empty where it has none).
    pub fn private_data(&self) -> &[u8] {
        match self {
            RdmaCmEvent::ConnectRequest { private_data, .. }
            | RdmaCmEvent::ConnectResponse { private_data, .. }
            | RdmaCmEvent::Unreachable { private_data, .. }
            | RdmaCmEvent::Rejected { private_data, .. }
            | RdmaCmEvent::Established { private_data, .. } => private_data,
            _ => &[],
        }
    }

    /// CONNECT_REQUEST / CONNECT_RESPONSE / ESTABLISHED: the peer's parameters.
    pub fn param(&self) -> Option<&ConnParam> {
        match self {
            RdmaCmEvent::ConnectRequest { param, .. }
            | RdmaCmEvent::ConnectResponse { param, .. }
            | RdmaCmEvent::Established { param, .. } => Some(param),
            _ => None,
        }
    }

    /// CONNECT_REQUEST / CONNECT_RESPONSE / ESTABLISHED: the ECE (`Ece::default()` for
    /// every other event and without ECE).
    pub fn ece(&self) -> Ece {
        match self {
            RdmaCmEvent::ConnectRequest { ece, .. }
            | RdmaCmEvent::ConnectResponse { ece, .. }
            | RdmaCmEvent::Established { ece, .. } => *ece,
            _ => Ece::default(),
        }
    }

    /// ESTABLISHED of a UD id: the peer's AH, QPN and Q_Key; MULTICAST_JOIN: the group's.
    pub fn ud(&self) -> Option<&UdParam> {
        match self {
            RdmaCmEvent::Established { ud, .. } => ud.as_ref(),
            RdmaCmEvent::MulticastJoin { ud, .. } => Some(ud),
            _ => None,
        }
    }

    /// REJECTED: the reason.
    pub fn reject_reason(&self) -> Option<RejectReason> {
        match self {
            RdmaCmEvent::Rejected { reason, .. } => Some(*reason),
            _ => None,
        }
    }

    /// `rdma_is_consumer_reject`: REJECTED with reason 28 (consumer defined).
    pub fn is_consumer_reject(&self) -> bool {
        self.reject_reason() == Some(RejectReason::CONSUMER_DEFINED)
    }

    /// `rdma_consumer_reject_data`: the private data of a REJECTED event whose reason is
    /// consumer defined (28); `None` otherwise.
    pub fn consumer_reject_data(&self) -> Option<&[u8]> {
        self.is_consumer_reject().then_some(self.private_data())
    }

    /// `rdma_reject_msg`: the IB CM's text for the reject reason (`ibcm_reject_msg`).
    pub fn reject_msg(&self) -> &'static str {
        match self.reject_reason() {
            Some(r) => r.description().unwrap_or("unrecognized reason"),
            None => "unrecognized event",
        }
    }
}
