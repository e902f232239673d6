//! Work requests: what `ibv_post_send` / `ibv_post_recv` take. Buffers are named by SGEs
//! `(lkey, addr, length)`, never held (see the memory model in [`super::mr`]).

use softrdma_wire::Gid;

use super::cq::WcOpcode;

/// A scatter/gather element (`struct ibv_sge`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Sge {
    /// Start address (inside the MR's `[iova, iova + len)`).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The MR's lkey.
    pub lkey: u32,
}

/// An address vector (`struct ibv_ah_attr` with its GRH, as RoCE uses it): where UD sends
/// go and what an RC QP's primary path is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AddressVector {
    /// Destination GID (on RoCEv2: the peer's IP address).
    pub dgid: Gid,
    /// Index of the source GID in our GID table.
    pub sgid_index: u16,
    /// Hop limit / IPv4 TTL (the kernel uses 64 on RoCE).
    pub hop_limit: u8,
    /// Traffic class / IPv4 TOS.
    pub traffic_class: u8,
    /// Flow label (20 bits; gives the RC UDP source port).
    pub flow_label: u32,
    /// Service level (0 on RoCE).
    pub sl: u8,
    /// Port number (1).
    pub port_num: u8,
}

impl Default for AddressVector {
    fn default() -> AddressVector {
        AddressVector {
            dgid: Gid::ZERO,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            port_num: 1,
        }
    }
}

/// Where a UD send goes (`wr.ud`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct UdDest {
    /// The address.
    pub av: AddressVector,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Q_Key to put in the DETH (if its top bit is set, the QP's own Q_Key is used instead,
    /// IBTA 10.2.5).
    pub remote_qkey: u32,
}

/// The operation of a send WR, with its operation-specific fields.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SendOp {
    /// `IBV_WR_SEND`.
    Send,
    /// `IBV_WR_SEND_WITH_IMM`.
    SendWithImm {
        /// Immediate data (host order).
        imm: u32,
    },
    /// `IBV_WR_SEND_WITH_INV` (RC).
    SendWithInv {
        /// The rkey the responder invalidates.
        invalidate_rkey: u32,
    },
    /// `IBV_WR_RDMA_WRITE` (RC/UC).
    RdmaWrite {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// `IBV_WR_RDMA_WRITE_WITH_IMM` (RC/UC).
    RdmaWriteWithImm {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// `IBV_WR_RDMA_READ` (RC).
    RdmaRead {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` (RC).
    AtomicCmpSwp {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` (RC).
    AtomicFetchAdd {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value to add.
        add: u64,
    },
}

impl SendOp {
    /// The completion opcode this operation reports.
    pub const fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => {
                WcOpcode::Send
            }
            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
            SendOp::AtomicCmpSwp { .. } => WcOpcode::CompSwap,
            SendOp::AtomicFetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }

    /// True for the two atomics.
    pub const fn is_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::AtomicCmpSwp { .. } | SendOp::AtomicFetchAdd { .. }
        )
    }

    /// True for the plain and immediate SENDs (all a UD QP can do).
    pub const fn is_send(&self) -> bool {
        matches!(self, SendOp::Send | SendOp::SendWithImm { .. })
    }

    /// The verbs name (`IBV_WR_*`).
    pub const fn name(&self) -> &'static str {
        match self {
            SendOp::Send => "SEND",
            SendOp::SendWithImm { .. } => "SEND_WITH_IMM",
            SendOp::SendWithInv { .. } => "SEND_WITH_INV",
            SendOp::RdmaWrite { .. } => "RDMA_WRITE",
            SendOp::RdmaWriteWithImm { .. } => "RDMA_WRITE_WITH_IMM",
            SendOp::RdmaRead { .. } => "RDMA_READ",
            SendOp::AtomicCmpSwp { .. } => "ATOMIC_CMP_AND_SWP",
            SendOp::AtomicFetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
        }
    }
}

/// A send work request (`struct ibv_send_wr`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Local buffers (gathered for sends/writes, scattered into for READs/atomics).
    pub sg_list: Vec<Sge>,
    /// `IBV_SEND_SIGNALED`: complete into the send CQ even if the QP is not `sq_sig_all`.
    pub signaled: bool,
    /// `IBV_SEND_SOLICITED`: set the BTH solicited-event bit.
    pub solicited: bool,
    /// `IBV_SEND_FENCE`.
    pub fence: bool,
    /// `IBV_SEND_INLINE`: the data is carried in the WR instead of an MR.
    pub inline_data: Option<Vec<u8>>,
    /// UD destination (required on UD/GSI QPs, refused elsewhere).
    pub ud: Option<UdDest>,
}

impl SendWr {
    /// A signaled WR with no SGEs.
    pub fn new(wr_id: u64, op: SendOp) -> SendWr {
        SendWr {
            wr_id,
            op,
            sg_list: Vec::new(),
            signaled: true,
            solicited: false,
            fence: false,
            inline_data: None,
            ud: None,
        }
    }

    /// Adds an SGE.
    pub fn with_sge(mut self, sge: Sge) -> SendWr {
        self.sg_list.push(sge);
        self
    }

    /// Sets the UD destination.
    pub fn with_ud(mut self, ud: UdDest) -> SendWr {
        self.ud = Some(ud);
        self
    }

    /// The total length of the local data (inline or SGEs), saturating.
    pub fn length(&self) -> u64 {
        match &self.inline_data {
            Some(d) => d.len() as u64,
            None => self
                .sg_list
                .iter()
                .fold(0u64, |a, s| a.saturating_add(u64::from(s.length))),
        }
    }
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where received data goes.
    pub sg_list: Vec<Sge>,
}

impl RecvWr {
    /// A receive WR with these SGEs.
    pub fn new(wr_id: u64, sg_list: Vec<Sge>) -> RecvWr {
        RecvWr { wr_id, sg_list }
    }

    /// The total buffer length, saturating.
    pub fn length(&self) -> u64 {
        self.sg_list
            .iter()
            .fold(0u64, |a, s| a.saturating_add(u64::from(s.length)))
    }
}
