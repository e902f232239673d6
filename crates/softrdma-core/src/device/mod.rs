//! The software RDMA device: what a Linux rxe device looks like to `ibv_devinfo`,
//! `ibv_query_gid`, `rdma_cm` and the wire.
//!
//! A [`Device`] has one port (rxe's `RXE_NUM_PORT` = 1, numbered 1 as IB ports are), a node
//! GUID, a GID table built from its IP addresses, a P_Key table, the attributes queries
//! return, and the named [`Counters`].
//!
//! # Node GUID
//!
//! With a MAC, the node GUID is the MAC's EUI-64 (`addrconf_addr_eui48`, as rxe does:
//! 52:54:00:77:00:0a → 5054:00ff:fe77:000a). A softrdma device often has no MAC of its own
//! (it sits on a UDP socket, e.g. on 127.0.0.2, and Linux's loopback MAC is all zeros, which
//! would give every loopback device the same GUID), so without a MAC the GUID is derived
//! from the first IP address:
//! - IPv4 `a.b.c.d`: the EUI-64 of the locally administered MAC `02:00:a:b:c:d`, i.e.
//!   `0000:0aff:fe..`-style `00 00 a ff fe b c d` (the U/L bit flip clears the 0x02);
//! - IPv6: its interface ID (low 64 bits);
//! - no address at all: 0.
//!
//! This keeps GUIDs distinct for distinct addresses and stable across runs.

mod attr;
mod counters;
pub mod gid;
pub mod mtu;
pub mod pkey;

use std::net::IpAddr;

use softrdma_wire::{Gid, Guid};

pub use attr::{cap_flags, AtomicCap, DeviceAttr, PhysState, PortAttr, PortState};
pub use attr::{PORT_CAP_CM_SUP, PORT_CAP_IP_BASED_GIDS, RXE_MAX_QP};
pub(crate) use counters::write_name_value_lines;
pub use counters::Counters;
pub use gid::{GidEntry, GidTable, GidType, NetworkType};
pub use mtu::Mtu;
pub use pkey::{Pkey, PkeyTable};

/// The port number of the device's only port.
pub const PORT_NUM: u8 = 1;

/// How to build a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Device name (`rxe0`, `softrdma0`, ...).
    pub name: String,
    /// The interface's MAC, if it has one (gives the node GUID and the default GID).
    pub mac: Option<[u8; 6]>,
    /// The interface's IP addresses, in the order the GID table gets them.
    pub addrs: Vec<IpAddr>,
    /// The interface MTU (1500 on Ethernet, 65536 on loopback).
    pub netdev_mtu: u32,
    /// GID types the port supports (rxe: RoCEv2 only).
    pub gid_types: Vec<GidType>,
    /// P_Key table length (rxe 6.1: 1).
    pub pkey_table_len: u16,
    /// The device's QP limit, `max_qp` (rxe's `RXE_MAX_QP`, 65,536, by default; raise it
    /// for scale runs, up to [`MAX_QP_LIMIT`]).
    pub max_qp: u32,
    /// The node GUID, if given (else it comes from the MAC or the first address:
    /// [`node_guid`]).
    pub node_guid: Option<Guid>,
}

/// The largest [`DeviceConfig::max_qp`]: QPNs are 24 bits, and the QP index pool (twice the
/// limit, as rxe's 0x20000 indices for 0x10000 QPs) must fit below `0xFF_FFFF`.
pub const MAX_QP_LIMIT: u32 = 0x007F_FFF0;

impl DeviceConfig {
    /// An rxe-like device on an interface with these addresses, MTU 1500, no MAC.
    pub fn new(name: impl Into<String>, addrs: Vec<IpAddr>) -> DeviceConfig {
        DeviceConfig {
            name: name.into(),
            mac: None,
            addrs,
            netdev_mtu: 1500,
            gid_types: vec![GidType::RoceV2],
            pkey_table_len: pkey::RXE_PKEY_TABLE_LEN,
            max_qp: attr::RXE_MAX_QP,
            node_guid: None,
        }
    }

    /// Sets the node GUID (instead of the one the MAC or the address gives).
    pub fn with_node_guid(mut self, guid: Guid) -> DeviceConfig {
        self.node_guid = Some(guid);
        self
    }

    /// Sets the QP limit (clamped to 1..=[`MAX_QP_LIMIT`]).
    pub fn with_max_qp(mut self, max_qp: u32) -> DeviceConfig {
        self.max_qp = max_qp.clamp(1, MAX_QP_LIMIT);
        self
    }

    /// Sets the MAC.
    pub fn with_mac(mut self, mac: [u8; 6]) -> DeviceConfig {
        self.mac = Some(mac);
        self
    }

    /// Sets the netdev MTU.
    pub fn with_netdev_mtu(mut self, mtu: u32) -> DeviceConfig {
        self.netdev_mtu = mtu;
        self
    }
}

/// The node GUID of a device (see the module docs).
pub fn node_guid(mac: Option<[u8; 6]>, addrs: &[IpAddr]) -> Guid {
    if let Some(mac) = mac {
        return Guid::from_mac(mac);
    }
    match addrs.first() {
        Some(IpAddr::V4(v4)) => {
            let o = v4.octets();
            Guid::from_mac([0x02, 0x00, o[0], o[1], o[2], o[3]])
        }
        Some(IpAddr::V6(v6)) => Guid(Gid(v6.octets()).interface_id()),
        None => Guid(0),
    }
}

/// The device's port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// Its attributes.
    pub attr: PortAttr,
    /// Its GID table.
    pub gids: GidTable,
    /// Its P_Key table.
    pub pkeys: PkeyTable,
    /// The port GUID (rxe: the node GUID).
    pub guid: Guid,
    netdev_mtu: u32,
}

impl Port {
    /// The MTU in bytes the port uses (`mtu_cap`).
    pub fn mtu_cap(&self) -> u32 {
        self.attr.active_mtu.bytes()
    }

    /// The netdev MTU the active MTU was derived from.
    pub fn netdev_mtu(&self) -> u32 {
        self.netdev_mtu
    }
}

/// Why a device query failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum QueryError {
    /// No such port (only port 1 exists).
    InvalidPort(u8),
    /// No GID at this index.
    InvalidGidIndex(u16),
    /// No P_Key slot at this index.
    InvalidPkeyIndex(u16),
}

impl core::fmt::Display for QueryError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            QueryError::InvalidPort(p) => write!(f, "invalid port {p} (only port 1 exists)"),
            QueryError::InvalidGidIndex(i) => write!(f, "no GID at index {i}"),
            QueryError::InvalidPkeyIndex(i) => write!(f, "no P_Key at index {i}"),
        }
    }
}

impl std::error::Error for QueryError {}

/// A software RDMA device (the model; verbs objects live in [`crate::verbs::Verbs`]).
#[derive(Clone, Debug)]
pub struct Device {
    name: String,
    mac: Option<[u8; 6]>,
    /// The interface's addresses (what the GID table's RoCEv2 entries were built from).
    addrs: Vec<IpAddr>,
    /// The GID types each address gets (`DeviceConfig::gid_types`).
    gid_types: Vec<GidType>,
    attr: DeviceAttr,
    port: Port,
    /// Drop and error counters; the transport increments them.
    pub counters: Counters,
}

impl Device {
    /// Builds a device. The port starts ACTIVE (a softrdma device's "netdev" is a bound UDP
    /// socket, which is up as soon as it exists); [`Device::set_link`] models carrier loss.
    pub fn new(config: DeviceConfig) -> Device {
        let guid = config
            .node_guid
            .unwrap_or_else(|| node_guid(config.mac, &config.addrs));
        let mut attr = DeviceAttr::rxe(guid);
        attr.max_pkeys = config.pkey_table_len.max(1);
        attr.max_qp = config.max_qp.clamp(1, MAX_QP_LIMIT);
        let mut port_attr = PortAttr::rxe(config.netdev_mtu, config.pkey_table_len.max(1));
        port_attr.state = PortState::Active;
        port_attr.phys_state = PhysState::LinkUp;
        let port = Port {
            attr: port_attr,
            gids: GidTable::build(config.mac, &config.addrs, &config.gid_types),
            pkeys: PkeyTable::new(config.pkey_table_len),
            guid,
            netdev_mtu: config.netdev_mtu,
        };
        Device {
            name: config.name,
            mac: config.mac,
            addrs: config.addrs,
            gid_types: config.gid_types,
            attr,
            port,
            counters: Counters::default(),
        }
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface's IP addresses, in the order the GID table got them.
    pub fn addrs(&self) -> &[IpAddr] {
        &self.addrs
    }

    /// An address the interface gained (an rxe port learns it from a netdev event): a GID
    /// per configured type in the first free slots. Returns whether the device did not
    /// have it.
    pub fn add_addr(&mut self, ip: IpAddr) -> bool {
        if self.addrs.contains(&ip) {
            return false;
        }
        for &ty in &self.gid_types {
            // A full table leaves the address without a GID, as ib_cache would.
            let _ = self.port.gids.add(Gid::from_ip(ip), ty);
        }
        self.addrs.push(ip);
        true
    }

    /// An address the interface lost: its GIDs leave the table (their indexes become
    /// empty; the default GID stays). Returns whether the device had it.
    pub fn remove_addr(&mut self, ip: IpAddr) -> bool {
        let Some(k) = self.addrs.iter().position(|a| *a == ip) else {
            return false;
        };
        self.addrs.remove(k);
        let gid = Gid::from_ip(ip);
        let default = self.mac.map(gid::default_gid_from_mac);
        if default != Some(gid) {
            for ty in [GidType::Ib, GidType::RoceV1, GidType::RoceV2] {
                self.port.gids.remove(&gid, ty);
            }
        }
        true
    }

    /// The MAC, if any.
    pub fn mac(&self) -> Option<[u8; 6]> {
        self.mac
    }

    /// The node GUID.
    pub fn node_guid(&self) -> Guid {
        self.attr.node_guid
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> &DeviceAttr {
        &self.attr
    }

    /// `ibv_query_port`.
    pub fn query_port(&self, port: u8) -> Result<&PortAttr, QueryError> {
        self.port(port).map(|p| &p.attr)
    }

    /// The port, by number (only 1).
    pub fn port(&self, port: u8) -> Result<&Port, QueryError> {
        if port == PORT_NUM {
            Ok(&self.port)
        } else {
            Err(QueryError::InvalidPort(port))
        }
    }

    /// The port mutably (the driver changes link state, MTU, addresses).
    pub fn port_mut(&mut self, port: u8) -> Result<&mut Port, QueryError> {
        if port == PORT_NUM {
            Ok(&mut self.port)
        } else {
            Err(QueryError::InvalidPort(port))
        }
    }

    /// `ibv_query_gid` with its type (`ibv_query_gid_ex`).
    pub fn query_gid(&self, port: u8, index: u16) -> Result<GidEntry, QueryError> {
        self.port(port)?
            .gids
            .get(index)
            .copied()
            .ok_or(QueryError::InvalidGidIndex(index))
    }

    /// The index of `gid` of type `gid_type` on `port` (`rdma_find_gid_by_port`).
    pub fn find_gid(&self, port: u8, gid: &Gid, gid_type: GidType) -> Result<u16, QueryError> {
        let p = self.port(port)?;
        p.gids
            .find(gid, gid_type)
            .ok_or(QueryError::InvalidGidIndex(u16::MAX))
    }

    /// `ibv_query_pkey`.
    pub fn query_pkey(&self, port: u8, index: u16) -> Result<Pkey, QueryError> {
        self.port(port)?
            .pkeys
            .get(index)
            .ok_or(QueryError::InvalidPkeyIndex(index))
    }

    /// The counters (`rdma statistic show`); by name with [`Counters::get`].
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Carrier up/down: ACTIVE/LINK_UP or DOWN/DISABLED (`rxe_port_up` / `rxe_port_down`).
    pub fn set_link(&mut self, up: bool) {
        let a = &mut self.port.attr;
        if up {
            a.state = PortState::Active;
            a.phys_state = PhysState::LinkUp;
        } else {
            a.state = PortState::Down;
            a.phys_state = PhysState::Disabled;
        }
    }

    /// The netdev MTU changed (`rxe_set_mtu` on NETDEV_CHANGEMTU).
    pub fn set_netdev_mtu(&mut self, mtu: u32) {
        self.port.netdev_mtu = mtu;
        self.port.attr.active_mtu = Mtu::from_netdev_mtu(mtu, self.port.attr.max_mtu);
    }

    /// Counts a Q_Key violation (counter and the port attribute, as rxe's
    /// `set_qkey_viol_cntr` does).
    pub fn count_bad_qkey(&mut self) {
        self.counters.drop_bad_qkey += 1;
        self.port.attr.qkey_viol_cntr = self.port.attr.qkey_viol_cntr.saturating_add(1);
    }

    /// Counts a bad P_Key (counter and the port attribute, as rxe's `set_bad_pkey_cntr`).
    pub fn count_bad_pkey(&mut self) {
        self.counters.drop_bad_pkey += 1;
        self.port.attr.bad_pkey_cntr = self.port.attr.bad_pkey_cntr.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn lab_device() -> Device {
        Device::new(
            DeviceConfig::new("rxe0", vec![IpAddr::V4(Ipv4Addr::new(10, 77, 0, 10))])
                .with_mac([0x52, 0x54, 0x00, 0x77, 0x00, 0x0a]),
        )
    }

    #[test]
    fn lab_guest_identity() {
        let d = lab_device();
        assert_eq!(d.node_guid(), Guid(0x5054_00ff_fe77_000a));
        let p = d.query_port(1).expect("port 1");
        assert_eq!(p.active_mtu, Mtu::Mtu1024);
        assert_eq!(p.max_mtu, Mtu::Mtu4096);
        assert_eq!(p.state, PortState::Active);
        assert_eq!(p.pkey_tbl_len, 1);
        assert_eq!(
            d.query_gid(1, 0).map(|e| e.gid.interface_id()),
            Ok(0x5054_00ff_fe77_000a)
        );
        assert_eq!(
            d.query_gid(1, 1).map(|e| e.gid),
            Ok(Gid::from(Ipv4Addr::new(10, 77, 0, 10)))
        );
        assert_eq!(d.query_gid(1, 2), Err(QueryError::InvalidGidIndex(2)));
        assert_eq!(d.query_gid(2, 0), Err(QueryError::InvalidPort(2)));
        assert_eq!(d.query_pkey(1, 0), Ok(Pkey::DEFAULT_FULL));
        assert_eq!(d.query_pkey(1, 1), Err(QueryError::InvalidPkeyIndex(1)));
        assert_eq!(
            d.find_gid(1, &Gid::from(Ipv4Addr::new(10, 77, 0, 10)), GidType::RoceV2),
            Ok(1)
        );
        assert!(d
            .find_gid(1, &Gid::from(Ipv4Addr::new(10, 77, 0, 10)), GidType::RoceV1)
            .is_err());
    }

    #[test]
    fn rxe_device_attributes() {
        let d = lab_device();
        let a = d.query_device();
        assert_eq!(a.vendor_id, 0xffffff);
        assert_eq!(a.max_qp, 65536);
        assert_eq!(DeviceConfig::new("x", vec![]).max_qp, 65536);
        assert_eq!(a.max_qp_wr, 16384);
        assert_eq!(a.max_sge, 32);
        assert_eq!(a.max_cqe, 32767);
        assert_eq!(a.max_qp_rd_atom, 128);
        assert_eq!(a.max_qp_init_rd_atom, 128);
        assert_eq!(a.max_srq_wr, 16384);
        assert_eq!(a.atomic_cap, AtomicCap::Hca);
        assert_eq!(a.local_ca_ack_delay, 15);
        assert_eq!(a.sys_image_guid, a.node_guid);
        assert_ne!(a.device_cap_flags & cap_flags::RC_RNR_NAK_GEN, 0);
    }

    #[test]
    fn guid_without_mac() {
        let g = node_guid(None, &[IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))]);
        assert_eq!(g, Guid(0x0000_7fff_fe00_0002));
        assert_ne!(
            g,
            node_guid(None, &[IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))])
        );
        let v6 = Ipv6Addr::new(0xfd00, 0, 0, 0, 0x1111, 0x2222, 0x3333, 0x4444);
        assert_eq!(
            node_guid(None, &[IpAddr::V6(v6)]),
            Guid(0x1111_2222_3333_4444)
        );
        assert_eq!(node_guid(None, &[]), Guid(0));
        // No MAC: no link-local default GID, index 0 is the IPv4 GID.
        let d = Device::new(DeviceConfig::new(
            "softrdma0",
            vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
        ));
        assert_eq!(
            d.query_gid(1, 0).map(|e| e.gid),
            Ok(Gid::from(Ipv4Addr::LOCALHOST))
        );
    }

    #[test]
    fn link_and_mtu_changes() {
        let mut d = lab_device();
        d.set_link(false);
        assert_eq!(d.query_port(1).map(|p| p.state), Ok(PortState::Down));
        assert_eq!(
            d.query_port(1).map(|p| p.phys_state),
            Ok(PhysState::Disabled)
        );
        d.set_link(true);
        assert_eq!(d.query_port(1).map(|p| p.state), Ok(PortState::Active));
        d.set_netdev_mtu(9000);
        assert_eq!(d.query_port(1).map(|p| p.active_mtu), Ok(Mtu::Mtu4096));
        d.set_netdev_mtu(65536);
        assert_eq!(d.port(1).map(|p| p.mtu_cap()), Ok(4096));
    }

    #[test]
    fn key_violation_counters() {
        let mut d = lab_device();
        d.count_bad_qkey();
        d.count_bad_pkey();
        d.count_bad_pkey();
        assert_eq!(d.counters().get("drop_bad_qkey"), Some(1));
        assert_eq!(d.counters().get("drop_bad_pkey"), Some(2));
        assert_eq!(d.query_port(1).map(|p| p.qkey_viol_cntr), Ok(1));
        assert_eq!(d.query_port(1).map(|p| p.bad_pkey_cntr), Ok(2));
    }
}
