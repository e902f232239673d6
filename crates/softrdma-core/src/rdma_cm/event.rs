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
/// over inside its event ([`RdmaCmEvent::new_id`]), as the IB CM's REQ_RECEIVED does.
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

/// `struct rdma_cm_event`.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a CONNECT_REQUEST carries a new id that must be accepted, rejected or destroyed"]
pub struct RdmaCmEvent {
    pub event: RdmaCmEventType,
    pub id: RdmaId,
    /// CONNECT_REQUEST: the listener.
    pub listen_id: Option<RdmaId>,
    /// CONNECT_REQUEST: the new id, now the user's.
    pub new_id: Option<RdmaCmId>,
    /// The kernel's `event->status`: 0, a negative errno ([`ETIMEDOUT`], [`ENODEV`]...), or
    /// for REJECTED the reject reason.
    pub status: i32,
    /// The event's private data (REQ: after the IP CM header; REP; REJ; DREQ).
    pub private_data: Vec<u8>,
    /// REJECTED: the reason.
    pub reject_reason: Option<RejectReason>,
    /// CONNECT_REQUEST / ESTABLISHED / CONNECT_RESPONSE: the peer's parameters, seen from
    /// our side (responder resources = what we may answer with).
    pub param: ConnParam,
    /// ESTABLISHED of a UD id (after the SIDR REP): the peer's AH, QPN and Q_Key.
    pub ud: Option<UdParam>,
    /// CONNECT_REQUEST: the REQ's ECE; ESTABLISHED / CONNECT_RESPONSE: the REP's vendor ID
    /// and the options negotiated (`Ece::default()` without ECE).
    pub ece: Ece,
}

impl RdmaCmEvent {
    pub(super) fn new(event: RdmaCmEventType, id: u32) -> RdmaCmEvent {
        RdmaCmEvent {
            event,
            id: RdmaId(id),
            listen_id: None,
            new_id: None,
            status: 0,
            private_data: Vec::new(),
            reject_reason: None,
            param: ConnParam::default(),
            ud: None,
            ece: Ece::default(),
        }
    }

    pub(super) fn with_status(mut self, status: i32) -> Self {
        self.status = status;
        self
    }

    /// `rdma_is_consumer_reject`: REJECTED with reason 28 (consumer defined).
    pub fn is_consumer_reject(&self) -> bool {
        self.event == RdmaCmEventType::Rejected
            && self.reject_reason == Some(RejectReason::CONSUMER_DEFINED)
    }

    /// `rdma_consumer_reject_data`: the private data of a REJECTED event whose reason is
    /// consumer defined (28); `None` otherwise.
    pub fn consumer_reject_data(&self) -> Option<&[u8]> {
        self.is_consumer_reject().then_some(&self.private_data[..])
    }

    /// `rdma_reject_msg`: the IB CM's text for the reject reason (`ibcm_reject_msg`).
    pub fn reject_msg(&self) -> &'static str {
        match self.reject_reason {
            Some(r) => r.description().unwrap_or("unrecognized reason"),
            None => "unrecognized event",
        }
    }
}
