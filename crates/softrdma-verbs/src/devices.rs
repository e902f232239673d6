//! The devices: one per network interface that has an IP address.
//!
//! **Names.** The device of interface `IF` is `softrdma_IF` (`softrdma_lo`, `softrdma_eth0`),
//! in the order `getifaddrs` lists the interfaces (the loopback first on Linux). Its node GUID
//! is derived from the interface's MAC as rxe derives it (the EUI-64 of the MAC,
//! `softrdma_core::device::node_guid`); the port is ACTIVE with link layer Ethernet and an
//! active MTU from the interface MTU; the GID table is rxe's (ib_core's `roce_gid_mgmt.c`):
//! index 0 the default link-local GID of the MAC (`fe80::` + its EUI-64), then a RoCEv2 GID
//! per address the device serves, IPv4 ones (IPv4-mapped) first, then IPv6, in the
//! interface's order. `ibv_query_gid`, `ibv_query_gid_ex`, `ibv_query_gid_type` and
//! `ibv_devinfo -v` show them; a QP's or AH's `sgid_index` picks the address it sends from.
//!
//! **The addresses a device serves.** Opening a device binds `<addr>:4791` for every address
//! of its interface, one socket each, all watched by the device's one loop: first the
//! interface's first IPv4 address (else its first IPv6 one), then the others
//! ([`DevInfo::served_after`]). The loopback's device serves `127.0.0.1` and `::1`. When the
//! first is an IPv4 loopback address already held by another process (a server on this
//! host), the device takes the first free `127.0.0.x` instead, as two rxe devices on one host
//! would use two addresses, and its GID table says so — a server and a client on one machine
//! just work; a further address another process holds (the second program's `::1`) is left
//! out of its sockets and its table. The default GID at index 0 (rxe lists the EUI-64
//! link-local address of the MAC there) is served when the interface has that address (a
//! veth or Ethernet interface with the kernel's default `addr_gen_mode`): its socket is bound
//! in the interface's scope, and a link-local destination, which a RoCEv2 GID carries
//! without a scope, is reached through the same interface, so `ibv_rc_pingpong -g 0` works
//! between two interfaces of one link. Where the interface lacks it (the loopback; a
//! stable-privacy address instead) GID 0 is listed but not served (a QP on it gets its
//! datagrams counted as from a wrong source and dropped); another link-local address of the
//! interface (a privacy or stable-privacy one) is not listed.
//!
//! **Address changes.** An open context looks at its interface's addresses once a second
//! (`exports::follow_addresses`): one added joins the device (a socket, a GID in the first
//! free index) and one removed leaves it (its index stays empty until another address takes
//! it), as rxe follows its netdev's events. The device list itself is the one taken at the
//! library's first use: an interface that appears later has no device.

use std::net::{IpAddr, Ipv6Addr};

use softrdma_core::device::gid::default_gid_from_mac;

use nix::ifaddrs::getifaddrs;
use nix::sys::socket::SockaddrLike;

/// What we know of a device without opening it.
#[derive(Clone, Debug)]
pub struct DevInfo {
    /// `softrdma_<interface>`.
    pub name: String,
    /// The interface.
    pub ifname: String,
    /// The interface's addresses, IPv4 first.
    pub addrs: Vec<IpAddr>,
    /// The interface's MAC (all zeros for the loopback).
    pub mac: [u8; 6],
    /// The node GUID (host order).
    pub guid: u64,
}

impl DevInfo {
    /// The address a device opened on this interface binds first.
    pub fn addr(&self) -> Option<IpAddr> {
        self.addrs.first().copied()
    }

    /// The further addresses a device whose first address is `first` serves: the
    /// interface's others, in order, but the IPv6 link-local ones other than the default
    /// GID's (see the module docs).
    pub fn served_after(&self, first: IpAddr) -> Vec<IpAddr> {
        let default = IpAddr::V6(Ipv6Addr::from(default_gid_from_mac(self.mac).0));
        self.addrs
            .iter()
            .copied()
            .filter(|a| {
                *a != first && self.addr() != Some(*a) && (!is_link_local_v6(a) || *a == default)
            })
            .collect()
    }
}

/// `fe80::/10`.
fn is_link_local_v6(a: &IpAddr) -> bool {
    matches!(a, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// The interfaces that have an address, as devices.
pub fn scan() -> Vec<DevInfo> {
    let mut out: Vec<DevInfo> = Vec::new();
    let Ok(ifs) = getifaddrs() else {
        return out;
    };
    let mut macs: Vec<(String, [u8; 6])> = Vec::new();
    for i in ifs {
        let Some(a) = i.address else { continue };
        if let Some(link) = a.as_link_addr() {
            if let Some(m) = link.addr() {
                macs.push((i.interface_name.clone(), m));
            }
            continue;
        }
        let ip = if let Some(v4) = a.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = a.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            let _ = a.family();
            continue;
        };
        match out.iter_mut().find(|d| d.ifname == i.interface_name) {
            Some(d) => d.addrs.push(ip),
            None => out.push(DevInfo {
                name: format!("softrdma_{}", i.interface_name),
                ifname: i.interface_name.clone(),
                addrs: vec![ip],
                mac: [0; 6],
                guid: 0,
            }),
        }
    }
    for d in &mut out {
        if let Some((_, m)) = macs.iter().find(|(n, _)| *n == d.ifname) {
            d.mac = *m;
        }
        d.addrs.sort_by_key(|a| !a.is_ipv4());
        d.guid = softrdma_core::device::node_guid(Some(d.mac), &d.addrs).0;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_interface_is_a_device_with_its_address() {
        let devs = scan();
        let lo = devs
            .iter()
            .find(|d| d.ifname == "lo")
            .expect("the loopback interface has an address");
        assert_eq!(lo.name, "softrdma_lo");
        assert_eq!(lo.addr(), Some("127.0.0.1".parse().expect("ip")));
        // rxe's node GUID of an all-zero MAC: EUI-64 with the U/L bit flipped.
        assert_eq!(lo.guid, 0x0200_00ff_fe00_0000);
    }

    /// The further addresses a device serves: the interface's others in order, without its
    /// first (when the device took a free 127.0.0.x instead) and without link-local IPv6
    /// but the default GID's.
    #[test]
    fn served_after_skips_the_first_and_link_local() {
        let ip = |s: &str| -> IpAddr { s.parse().expect("ip") };
        let d = DevInfo {
            name: "softrdma_x".into(),
            ifname: "x".into(),
            addrs: vec![
                ip("10.0.0.1"),
                ip("10.0.1.1"),
                ip("fe80::1"),
                ip("fe80::5054:ff:fe77:a"),
                ip("fd00::1"),
            ],
            mac: [0x52, 0x54, 0, 0x77, 0, 0x0a],
            guid: 0,
        };
        // The MAC's EUI-64 link-local address (GID 0) is served, another one is not.
        assert_eq!(
            d.served_after(ip("10.0.0.1")),
            [ip("10.0.1.1"), ip("fe80::5054:ff:fe77:a"), ip("fd00::1")]
        );
        assert_eq!(
            d.served_after(ip("127.0.0.5")),
            [ip("10.0.1.1"), ip("fe80::5054:ff:fe77:a"), ip("fd00::1")]
        );
    }
}
