//! Device and port attributes as `ibv_query_device` / `ibv_query_port` return them, with the
//! values a Linux 6.1 rxe device reports (drivers/infiniband/sw/rxe/rxe_param.h and
//! `rxe_init_device_param` / `rxe_init_port_param` in rxe.c).

use softrdma_wire::Guid;

use super::mtu::Mtu;

/// `RXE_MAX_QP`: the QPs an rxe device allows.
pub const RXE_MAX_QP: u32 = 0x10000;

/// `enum ib_atomic_cap`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AtomicCap {
    /// `IB_ATOMIC_NONE`: no atomics.
    None,
    /// `IB_ATOMIC_HCA`: atomic with respect to this device only (rxe's value).
    Hca,
    /// `IB_ATOMIC_GLOB`: atomic with respect to CPUs and other devices too.
    Glob,
}

/// Device capability flags (`enum ib_device_cap_flags` / `ibv_device_cap_flags`; bit values
/// as in the uverbs ABI).
pub mod cap_flags {
    /// `IB_DEVICE_BAD_PKEY_CNTR`: the port counts bad P_Keys.
    pub const BAD_PKEY_CNTR: u64 = 1 << 1;
    /// `IB_DEVICE_BAD_QKEY_CNTR`: the port counts Q_Key violations.
    pub const BAD_QKEY_CNTR: u64 = 1 << 2;
    /// `IB_DEVICE_AUTO_PATH_MIG`.
    pub const AUTO_PATH_MIG: u64 = 1 << 4;
    /// `IB_DEVICE_CHANGE_PHY_PORT`.
    pub const CHANGE_PHY_PORT: u64 = 1 << 5;
    /// `IB_DEVICE_UD_AV_PORT_ENFORCE`.
    pub const UD_AV_PORT_ENFORCE: u64 = 1 << 6;
    /// `IB_DEVICE_PORT_ACTIVE_EVENT`.
    pub const PORT_ACTIVE_EVENT: u64 = 1 << 10;
    /// `IB_DEVICE_SYS_IMAGE_GUID`.
    pub const SYS_IMAGE_GUID: u64 = 1 << 11;
    /// `IB_DEVICE_RC_RNR_NAK_GEN`: the responder sends RNR NAKs.
    pub const RC_RNR_NAK_GEN: u64 = 1 << 12;
    /// `IB_DEVICE_SRQ_RESIZE`.
    pub const SRQ_RESIZE: u64 = 1 << 13;
    /// `IB_DEVICE_MEM_MGT_EXTENSIONS`.
    pub const MEM_MGT_EXTENSIONS: u64 = 1 << 21;

    /// What rxe advertises (`RXE_DEVICE_CAP_FLAGS`, less the kernel-internal
    /// `IB_DEVICE_ALLOW_USER_UNREG`).
    pub const RXE: u64 = BAD_PKEY_CNTR
        | BAD_QKEY_CNTR
        | AUTO_PATH_MIG
        | CHANGE_PHY_PORT
        | UD_AV_PORT_ENFORCE
        | PORT_ACTIVE_EVENT
        | SYS_IMAGE_GUID
        | RC_RNR_NAK_GEN
        | SRQ_RESIZE
        | MEM_MGT_EXTENSIONS;
}

/// What `ibv_query_device` returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version (rxe: 0, printed "0.0.0").
    pub fw_ver: u64,
    /// Node GUID.
    pub node_guid: Guid,
    /// System image GUID (rxe: the node GUID).
    pub sys_image_guid: Guid,
    /// Largest MR (`RXE_MAX_MR_SIZE` = all ones).
    pub max_mr_size: u64,
    /// Supported page sizes (`RXE_PAGE_SIZE_CAP`).
    pub page_size_cap: u64,
    /// IEEE OUI (`RXE_VENDOR_ID` = 0xFFFFFF, IBTA A3.3.1 "no vendor").
    pub vendor_id: u32,
    /// Vendor part ID (rxe: 0).
    pub vendor_part_id: u32,
    /// Hardware version (rxe: 0).
    pub hw_ver: u32,
    /// Max QPs (`RXE_MAX_QP`).
    pub max_qp: u32,
    /// Max outstanding WRs on any work queue (`RXE_MAX_QP_WR`).
    pub max_qp_wr: u32,
    /// Capability flags ([`cap_flags`]).
    pub device_cap_flags: u64,
    /// Max scatter/gather entries per WR (`RXE_MAX_SGE`).
    pub max_sge: u32,
    /// Max SGEs for RDMA READ (`RXE_MAX_SGE_RD`).
    pub max_sge_rd: u32,
    /// Max CQs (`RXE_MAX_CQ`).
    pub max_cq: u32,
    /// Max CQEs per CQ (`(1 << RXE_MAX_LOG_CQE) - 1`).
    pub max_cqe: u32,
    /// Max MRs (`RXE_MAX_MR`).
    pub max_mr: u32,
    /// Max PDs (`RXE_MAX_PD`).
    pub max_pd: u32,
    /// Max RDMA READ/atomic requests a QP can receive (responder resources).
    pub max_qp_rd_atom: u32,
    /// Max RDMA READ/atomic resources of the device.
    pub max_res_rd_atom: u32,
    /// Max RDMA READ/atomic requests a QP can have outstanding (initiator depth).
    pub max_qp_init_rd_atom: u32,
    /// Atomic support.
    pub atomic_cap: AtomicCap,
    /// Max address handles (`RXE_MAX_AH`).
    pub max_ah: u32,
    /// Max SRQs (`RXE_MAX_SRQ`).
    pub max_srq: u32,
    /// Max WRs per SRQ (`RXE_MAX_SRQ_WR`).
    pub max_srq_wr: u32,
    /// Max SGEs per SRQ WR (`RXE_MAX_SRQ_SGE`).
    pub max_srq_sge: u32,
    /// Max P_Keys (`RXE_MAX_PKEYS`).
    pub max_pkeys: u16,
    /// Local CA ACK delay (`RXE_LOCAL_CA_ACK_DELAY`, the REP's target ACK delay).
    pub local_ca_ack_delay: u8,
    /// Number of physical ports (rxe: 1).
    pub phys_port_cnt: u8,
    /// Max inline data per send WR (rxe: 32 SGEs' worth = 512 bytes).
    pub max_inline_data: u32,
}

impl DeviceAttr {
    /// The attributes of a Linux 6.1 rxe device with node GUID `guid`.
    pub fn rxe(guid: Guid) -> DeviceAttr {
        DeviceAttr {
            fw_ver: 0,
            node_guid: guid,
            sys_image_guid: guid,
            max_mr_size: u64::MAX,
            page_size_cap: 0xffff_f000,
            vendor_id: 0x00ff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: RXE_MAX_QP,
            max_qp_wr: 0x4000,
            device_cap_flags: cap_flags::RXE,
            max_sge: 32,
            max_sge_rd: 32,
            max_cq: 16384,
            max_cqe: (1 << 15) - 1,
            max_mr: 256 * 1024,
            max_pd: 0x7ffc,
            max_qp_rd_atom: 128,
            max_res_rd_atom: 0x3f000,
            max_qp_init_rd_atom: 128,
            atomic_cap: AtomicCap::Hca,
            max_ah: 100,
            max_srq: 960,
            max_srq_wr: 0x4000,
            max_srq_sge: 27,
            max_pkeys: 1,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
            max_inline_data: 32 * 16,
        }
    }
}

/// `enum ib_port_state`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PortState {
    /// `IB_PORT_NOP` (0).
    Nop,
    /// `IB_PORT_DOWN` (1): the netdev is down or has no carrier.
    Down,
    /// `IB_PORT_INIT` (2).
    Init,
    /// `IB_PORT_ARMED` (3).
    Armed,
    /// `IB_PORT_ACTIVE` (4): traffic flows.
    Active,
}

impl PortState {
    /// The kernel's enum value.
    pub const fn to_kernel(self) -> u8 {
        match self {
            PortState::Nop => 0,
            PortState::Down => 1,
            PortState::Init => 2,
            PortState::Armed => 3,
            PortState::Active => 4,
        }
    }

    /// The name `ibv_devinfo` prints (`PORT_ACTIVE`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            PortState::Nop => "PORT_NOP",
            PortState::Down => "PORT_DOWN",
            PortState::Init => "PORT_INIT",
            PortState::Armed => "PORT_ARMED",
            PortState::Active => "PORT_ACTIVE",
        }
    }
}

/// `enum ib_port_phys_state` values rxe uses.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PhysState {
    /// `IB_PORT_PHYS_STATE_DISABLED` (3): netdev down.
    Disabled,
    /// `IB_PORT_PHYS_STATE_POLLING` (2): the initial value.
    Polling,
    /// `IB_PORT_PHYS_STATE_LINK_UP` (5): netdev up with carrier.
    LinkUp,
}

impl PhysState {
    /// The kernel's enum value.
    pub const fn to_kernel(self) -> u8 {
        match self {
            PhysState::Polling => 2,
            PhysState::Disabled => 3,
            PhysState::LinkUp => 5,
        }
    }
}

/// Port capability flag `IB_PORT_CM_SUP` (bit 16): the port runs a CM.
pub const PORT_CAP_CM_SUP: u32 = 1 << 16;
/// Port capability flag `IB_PORT_IP_BASED_GIDS` (bit 26): GIDs come from IP addresses.
pub const PORT_CAP_IP_BASED_GIDS: u32 = 1 << 26;

/// What `ibv_query_port` returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical state.
    pub state: PortState,
    /// Physical state.
    pub phys_state: PhysState,
    /// Largest MTU the port supports (`IB_MTU_4096`).
    pub max_mtu: Mtu,
    /// MTU in use, derived from the netdev MTU ([`Mtu::from_netdev_mtu`]).
    pub active_mtu: Mtu,
    /// GID table capacity (1024).
    pub gid_tbl_len: u32,
    /// Capability flags (CM supported, IP-based GIDs: what ib_core reports for rxe).
    pub port_cap_flags: u32,
    /// Largest message (`RXE_PORT_MAX_MSG_SZ` = 8 MiB).
    pub max_msg_sz: u32,
    /// Bad P_Key counter (`ibv_query_port` field; also in [`super::Counters`]).
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// LID (RoCE: 0).
    pub lid: u16,
    /// SM LID (RoCE: 0).
    pub sm_lid: u16,
    /// LMC (0).
    pub lmc: u8,
    /// Max VLs (1).
    pub max_vl_num: u8,
    /// SM SL (0).
    pub sm_sl: u8,
    /// Subnet timeout (0).
    pub subnet_timeout: u8,
    /// Active width (`IB_WIDTH_1X` = 1).
    pub active_width: u8,
    /// Active speed (1 = SDR).
    pub active_speed: u8,
    /// Link layer: always Ethernet for RoCE.
    pub link_layer_ethernet: bool,
}

impl PortAttr {
    /// An rxe port (before any netdev event): max MTU 4096, active MTU from `netdev_mtu`.
    pub fn rxe(netdev_mtu: u32, pkey_tbl_len: u16) -> PortAttr {
        let max_mtu = Mtu::Mtu4096;
        PortAttr {
            state: PortState::Down,
            phys_state: PhysState::Polling,
            max_mtu,
            active_mtu: Mtu::from_netdev_mtu(netdev_mtu, max_mtu),
            gid_tbl_len: super::gid::GID_TABLE_LEN as u32,
            port_cap_flags: PORT_CAP_CM_SUP | PORT_CAP_IP_BASED_GIDS,
            max_msg_sz: 0x80_0000,
            bad_pkey_cntr: 0,
            qkey_viol_cntr: 0,
            pkey_tbl_len,
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            max_vl_num: 1,
            sm_sl: 0,
            subnet_timeout: 0,
            active_width: 1,
            active_speed: 1,
            link_layer_ethernet: true,
        }
    }
}
