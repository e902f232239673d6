//! Identifiers shared by many formats.

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A 128-bit Global Identifier. On RoCEv2 it is an IP address: IPv4 addresses appear
/// IPv4-mapped (`::ffff:a.b.c.d`), as `rdma_ip2gid` makes them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID (an unused path, e.g. the REQ's alternate path).
    pub const ZERO: Gid = Gid([0; 16]);

    /// The GID of an IP address (IPv4 becomes IPv4-mapped IPv6).
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IPv4 address if this GID is IPv4-mapped.
    pub fn to_ipv4(&self) -> Option<Ipv4Addr> {
        Ipv6Addr::from(self.0).to_ipv4_mapped()
    }

    /// The IP address this GID stands for on RoCEv2.
    pub fn to_ip(&self) -> IpAddr {
        match self.to_ipv4() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(self.0)),
        }
    }

    /// The subnet prefix (upper 64 bits).
    pub fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().unwrap_or([0; 8]))
    }

    /// The interface ID (lower 64 bits).
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().unwrap_or([0; 8]))
    }
}

impl From<IpAddr> for Gid {
    fn from(ip: IpAddr) -> Gid {
        Gid::from_ip(ip)
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(ip: Ipv4Addr) -> Gid {
        Gid::from_ip(IpAddr::V4(ip))
    }
}

impl fmt::Display for Gid {
    /// IPv4-mapped GIDs print as dotted quads (as tshark does), others as IPv6.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_ipv4() {
            Some(v4) => write!(f, "{v4}"),
            None => write!(f, "{}", Ipv6Addr::from(self.0)),
        }
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// A 64-bit Globally Unique Identifier (node/CA/port GUID, IOC GUID).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Guid(pub u64);

impl Guid {
    /// The EUI-64 GUID Linux derives from a 48-bit MAC (`addrconf_addr_eui48`, as rxe's node
    /// GUID): flip the universal/local bit, insert `ff:fe` in the middle.
    pub fn from_mac(mac: [u8; 6]) -> Guid {
        Guid(u64::from_be_bytes([
            mac[0] ^ 0x02,
            mac[1],
            mac[2],
            0xff,
            0xfe,
            mac[3],
            mac[4],
            mac[5],
        ]))
    }
}

impl fmt::Display for Guid {
    /// The colon form the kernel prints (`5054:00ff:fe77:000a`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        write!(
            f,
            "{:04x}:{:04x}:{:04x}:{:04x}",
            (v >> 48) & 0xffff,
            (v >> 32) & 0xffff,
            (v >> 16) & 0xffff,
            v & 0xffff
        )
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Guid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_from_ipv4_is_mapped() {
        let g = Gid::from(Ipv4Addr::new(10, 77, 0, 10));
        assert_eq!(&g.0[10..], &[0xff, 0xff, 10, 77, 0, 10]);
        assert_eq!(g.to_string(), "10.77.0.10");
        assert_eq!(g.to_ip(), IpAddr::V4(Ipv4Addr::new(10, 77, 0, 10)));
    }

    #[test]
    fn guid_from_mac_matches_rxe() {
        // The lab guest's MAC 52:54:00:77:00:0a gives node GUID 5054:00ff:fe77:000a.
        let g = Guid::from_mac([0x52, 0x54, 0x00, 0x77, 0x00, 0x0a]);
        assert_eq!(g.0, 0x5054_00ff_fe77_000a);
        assert_eq!(g.to_string(), "5054:00ff:fe77:000a");
    }
}
