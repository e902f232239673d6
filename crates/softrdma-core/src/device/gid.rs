//! The GID table of a RoCE port, built from the device's addresses as ib_core's
//! `roce_gid_mgmt.c` builds it for an rxe device.
//!
//! - Index 0 is the *default GID*: the link-local `fe80::/64` GID whose interface ID is the
//!   EUI-64 of the netdev's MAC (`rdma_gid_set_default` / `addrconf_ifid_eui48`). It exists
//!   only when the device has a MAC. The lab guest (MAC 52:54:00:77:00:0a) shows
//!   index 0 = fe80::5054:ff:fe77:a.
//! - Then one entry per IP address of the interface and per GID type the port supports, in
//!   address order: IPv4 addresses become IPv4-mapped GIDs (`rdma_ip2gid`), IPv6 addresses
//!   are used as they are. The lab shows index 1 = ::ffff:10.77.0.10.
//! - rxe advertises only `RDMA_CORE_CAP_PROT_ROCE_UDP_ENCAP`, so its table holds RoCEv2
//!   entries only; a device configured with RoCEv1 as well gets a v1 and a v2 entry per
//!   address (v1 first, as ib_core adds them in `enum ib_gid_type` order).
//! - An address equal to a GID already present (an IPv6 link-local equal to the default GID)
//!   is not added twice (ib_cache's `add_modify_gid` finds the existing entry).

use core::fmt;
use std::net::{IpAddr, Ipv6Addr};

use softrdma_wire::{Gid, Guid};

/// The GID types of `enum ib_gid_type` (include/rdma/ib_verbs.h), with its values.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum GidType {
    /// `IB_GID_TYPE_IB` (0): native InfiniBand.
    Ib,
    /// `IB_GID_TYPE_ROCE` (1): RoCEv1 (GRH over Ethernet, ethertype 0x8915).
    RoceV1,
    /// `IB_GID_TYPE_ROCE_UDP_ENCAP` (2): RoCEv2 (IP/UDP 4791). What softrdma speaks.
    RoceV2,
}

impl GidType {
    /// The kernel's enum value.
    pub const fn to_kernel(self) -> u8 {
        match self {
            GidType::Ib => 0,
            GidType::RoceV1 => 1,
            GidType::RoceV2 => 2,
        }
    }

    /// The name sysfs prints in `gid_attrs/types/N` ("IB/RoCE v1", "RoCE v2").
    pub const fn sysfs_name(self) -> &'static str {
        match self {
            GidType::Ib | GidType::RoceV1 => "IB/RoCE v1",
            GidType::RoceV2 => "RoCE v2",
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.sysfs_name())
    }
}

/// Which network a RoCEv2 GID's packets travel on (`rdma_gid_attr_network_type`): IPv4 for
/// IPv4-mapped GIDs, IPv6 otherwise; IB for the other GID types.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NetworkType {
    /// `RDMA_NETWORK_IB` (and RoCEv1).
    Ib,
    /// `RDMA_NETWORK_IPV4`.
    Ipv4,
    /// `RDMA_NETWORK_IPV6`.
    Ipv6,
}

/// One GID table entry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct GidEntry {
    /// Its index in the port's table (what `sgid_index` and `ibv_query_gid` use).
    pub index: u16,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub gid_type: GidType,
}

impl GidEntry {
    /// The network the entry's packets use.
    pub fn network_type(&self) -> NetworkType {
        match self.gid_type {
            GidType::Ib | GidType::RoceV1 => NetworkType::Ib,
            GidType::RoceV2 => match self.gid.to_ipv4() {
                Some(_) => NetworkType::Ipv4,
                None => NetworkType::Ipv6,
            },
        }
    }

    /// The IP address a RoCEv2 entry stands for.
    pub fn ip(&self) -> IpAddr {
        self.gid.to_ip()
    }
}

/// `RXE_PORT_GID_TBL_LEN` (rxe_param.h): the table's capacity.
pub const GID_TABLE_LEN: usize = 1024;

/// The link-local default GID of a MAC: `fe80::` + the MAC's EUI-64.
pub fn default_gid_from_mac(mac: [u8; 6]) -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..].copy_from_slice(&Guid::from_mac(mac).0.to_be_bytes());
    Gid(g)
}

/// A port's GID table: entries indexed from 0, in index order; dense until an address is
/// removed, which leaves its index empty until another address takes it (as on an rxe port).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GidTable {
    entries: Vec<GidEntry>,
}

/// Why a GID could not be added.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GidTableError {
    /// The table already holds `GID_TABLE_LEN` entries.
    Full,
}

impl GidTable {
    /// Builds the table the way ib_core does for a port (see the module docs).
    pub fn build(mac: Option<[u8; 6]>, addrs: &[IpAddr], types: &[GidType]) -> GidTable {
        let mut t = GidTable::default();
        if let Some(mac) = mac {
            for &ty in types {
                // The table is empty: cannot be full.
                let _ = t.add(default_gid_from_mac(mac), ty);
            }
        }
        for &ip in addrs {
            for &ty in types {
                if t.add(Gid::from_ip(ip), ty).is_err() {
                    return t;
                }
            }
        }
        t
    }

    /// Adds a GID of a type unless the same (GID, type) is present; returns its index: the
    /// first free one (an address added after another was removed takes its slot, as
    /// ib_cache's `add_modify_gid` takes the first empty entry).
    pub fn add(&mut self, gid: Gid, gid_type: GidType) -> Result<u16, GidTableError> {
        if let Some(i) = self.find(&gid, gid_type) {
            return Ok(i);
        }
        if self.entries.len() >= GID_TABLE_LEN {
            return Err(GidTableError::Full);
        }
        // Entries are kept in index order: the first free index is the first gap.
        let pos = self
            .entries
            .iter()
            .enumerate()
            .position(|(k, e)| usize::from(e.index) != k)
            .unwrap_or(self.entries.len());
        let index = pos as u16;
        self.entries.insert(
            pos,
            GidEntry {
                index,
                gid,
                gid_type,
            },
        );
        Ok(index)
    }

    /// Removes a GID of a type (an address that left the interface, `del_gid`); the
    /// entries after it keep their indexes (a QP's `sgid_index` still names the same
    /// address). Returns the index it had.
    pub fn remove(&mut self, gid: &Gid, gid_type: GidType) -> Option<u16> {
        let pos = self
            .entries
            .iter()
            .position(|e| e.gid == *gid && e.gid_type == gid_type)?;
        Some(self.entries.remove(pos).index)
    }

    /// The entry at `index` (`ibv_query_gid`, `rdma_get_gid_attr`); `None` past the table or
    /// for an entry whose address was removed.
    pub fn get(&self, index: u16) -> Option<&GidEntry> {
        match self.entries.get(usize::from(index)) {
            // No entry removed before it: the common case, by position.
            Some(e) if e.index == index => Some(e),
            _ => self
                .entries
                .binary_search_by_key(&index, |e| e.index)
                .ok()
                .and_then(|k| self.entries.get(k)),
        }
    }

    /// The index of the entry holding `gid` with type `gid_type` (`rdma_find_gid_by_port`):
    /// what `cma_acquire_dev_by_src_ip` / `cma_ib_acquire_dev` need — a GID of the right
    /// type must exist or the request is refused.
    pub fn find(&self, gid: &Gid, gid_type: GidType) -> Option<u16> {
        self.entries
            .iter()
            .find(|e| e.gid == *gid && e.gid_type == gid_type)
            .map(|e| e.index)
    }

    /// The index of the RoCEv2 entry for an IP address.
    pub fn find_ip(&self, ip: IpAddr) -> Option<u16> {
        self.find(&Gid::from_ip(ip), GidType::RoceV2)
    }

    /// All entries in index order.
    pub fn entries(&self) -> &[GidEntry] {
        &self.entries
    }

    /// The number of entries in use.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no GID is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Display for GidTable {
    /// One line per entry, as `show_gids` prints them: index, GID, type, IP.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.entries {
            let ip = match e.gid.to_ipv4() {
                Some(v4) => v4.to_string(),
                None => Ipv6Addr::from(e.gid.0).to_string(),
            };
            writeln!(
                f,
                "{}\t{}\t{}\t{}",
                e.index,
                ipv6_colon(&e.gid),
                e.gid_type,
                ip
            )?;
        }
        Ok(())
    }
}

/// The GID in the kernel's full colon-hex form (`0000:0000:0000:0000:0000:ffff:0a4d:000a`).
pub fn ipv6_colon(gid: &Gid) -> String {
    let mut s = String::with_capacity(39);
    for (i, pair) in gid.0.chunks(2).enumerate() {
        if i > 0 {
            s.push(':');
        }
        let hi = pair.first().copied().unwrap_or(0);
        let lo = pair.get(1).copied().unwrap_or(0);
        s.push_str(&format!("{hi:02x}{lo:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const LAB_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x77, 0x00, 0x0a];

    fn lab_table() -> GidTable {
        GidTable::build(
            Some(LAB_MAC),
            &[IpAddr::V4(Ipv4Addr::new(10, 77, 0, 10))],
            &[GidType::RoceV2],
        )
    }

    #[test]
    fn lab_guest_table() {
        // lab/README.md: index 0 = fe80::5054:ff:fe77:a, index 1 = ::ffff:10.77.0.10.
        let t = lab_table();
        assert_eq!(t.len(), 2);
        let e0 = t.get(0).copied();
        assert_eq!(
            e0.map(|e| Ipv6Addr::from(e.gid.0)),
            Some(
                "fe80::5054:ff:fe77:a"
                    .parse::<Ipv6Addr>()
                    .unwrap_or(Ipv6Addr::UNSPECIFIED)
            )
        );
        let e1 = t.get(1).copied();
        assert_eq!(
            e1.map(|e| Ipv6Addr::from(e.gid.0)),
            Some(
                "::ffff:10.77.0.10"
                    .parse::<Ipv6Addr>()
                    .unwrap_or(Ipv6Addr::UNSPECIFIED)
            )
        );
        assert_eq!(e0.map(|e| e.network_type()), Some(NetworkType::Ipv6));
        assert_eq!(e1.map(|e| e.network_type()), Some(NetworkType::Ipv4));
        assert_eq!(e1.map(|e| e.gid_type), Some(GidType::RoceV2));
        assert!(t.get(2).is_none());
    }

    #[test]
    fn lookup_by_gid_and_type() {
        let t = lab_table();
        let g = Gid::from(Ipv4Addr::new(10, 77, 0, 10));
        assert_eq!(t.find(&g, GidType::RoceV2), Some(1));
        // A GID table entry of the right type must exist (cma_ib_acquire_dev).
        assert_eq!(t.find(&g, GidType::RoceV1), None);
        assert_eq!(
            t.find(&Gid::from(Ipv4Addr::new(10, 77, 0, 11)), GidType::RoceV2),
            None
        );
        assert_eq!(t.find_ip(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 10))), Some(1));
    }

    #[test]
    fn no_mac_no_default_gid() {
        let t = GidTable::build(None, &[IpAddr::V4(Ipv4Addr::LOCALHOST)], &[GidType::RoceV2]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.find_ip(IpAddr::V4(Ipv4Addr::LOCALHOST)), Some(0));
    }

    #[test]
    fn v1_and_v2_per_address_and_dedup() {
        let ll: IpAddr = IpAddr::V6(Ipv6Addr::from(default_gid_from_mac(LAB_MAC).0));
        let v6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1));
        let t = GidTable::build(
            Some(LAB_MAC),
            &[ll, v6],
            &[GidType::RoceV1, GidType::RoceV2],
        );
        // default v1, default v2, (ll deduplicated), fd00::1 v1, fd00::1 v2
        assert_eq!(t.len(), 4);
        assert_eq!(t.get(0).map(|e| e.gid_type), Some(GidType::RoceV1));
        assert_eq!(t.get(1).map(|e| e.gid_type), Some(GidType::RoceV2));
        assert_eq!(t.find_ip(v6), Some(3));
    }

    /// An address removed leaves a hole (the others keep their indexes); the next address
    /// added takes the first hole.
    #[test]
    fn removed_entries_leave_holes_that_new_addresses_fill() {
        let ip = |s: &str| -> IpAddr { s.parse().expect("ip") };
        let mut t = GidTable::build(
            Some(LAB_MAC),
            &[ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::1")],
            &[GidType::RoceV2],
        );
        assert_eq!(
            t.remove(&Gid::from_ip(ip("10.0.0.2")), GidType::RoceV2),
            Some(2)
        );
        assert_eq!(
            t.remove(&Gid::from_ip(ip("10.0.0.2")), GidType::RoceV2),
            None
        );
        assert_eq!(t.len(), 3);
        assert!(t.get(2).is_none());
        assert_eq!(t.find_ip(ip("fd00::1")), Some(3));
        assert_eq!(t.get(3).map(|e| e.ip()), Some(ip("fd00::1")));
        assert_eq!(t.add(Gid::from_ip(ip("10.0.0.9")), GidType::RoceV2), Ok(2));
        assert_eq!(t.get(2).map(|e| e.ip()), Some(ip("10.0.0.9")));
        assert_eq!(t.add(Gid::from_ip(ip("10.0.0.8")), GidType::RoceV2), Ok(4));
        let idx: Vec<u16> = t.entries().iter().map(|e| e.index).collect();
        assert_eq!(idx, [0, 1, 2, 3, 4]);
    }

    #[test]
    fn table_is_bounded() {
        let mut t = GidTable::default();
        for i in 0..GID_TABLE_LEN as u32 {
            assert!(t.add(Gid::from(Ipv4Addr::from(i)), GidType::RoceV2).is_ok());
        }
        assert_eq!(
            t.add(Gid::from(Ipv4Addr::from(0xffff_ffffu32)), GidType::RoceV2),
            Err(GidTableError::Full)
        );
        // Re-adding an existing entry is fine even when full.
        assert_eq!(
            t.add(Gid::from(Ipv4Addr::from(5u32)), GidType::RoceV2),
            Ok(5)
        );
    }

    #[test]
    fn display_like_show_gids() {
        let s = lab_table().to_string();
        assert_eq!(
            s,
            "0\tfe80:0000:0000:0000:5054:00ff:fe77:000a\tRoCE v2\tfe80::5054:ff:fe77:a\n\
             1\t0000:0000:0000:0000:0000:ffff:0a4d:000a\tRoCE v2\t10.77.0.10\n"
        );
    }
}
