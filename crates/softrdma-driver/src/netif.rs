//! The MTU of the network interface an address lives on: what rxe derives its port's active
//! MTU from (`rxe_set_mtu` with the netdev's MTU), so a device bound to an address on a
//! 1500-byte Ethernet gets path MTU 1024 and one on loopback (65536) gets 4096, as an rxe
//! port on either would.

use std::net::IpAddr;

use nix::ifaddrs::getifaddrs;
use nix::sys::socket::SockaddrStorage;

fn ip_of(s: &SockaddrStorage) -> Option<IpAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(IpAddr::V4(v4.ip()));
    }
    s.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
}

/// Bits of a netmask (its leading ones).
fn prefix_len(mask: IpAddr) -> u32 {
    match mask {
        IpAddr::V4(m) => u32::from(m).leading_ones(),
        IpAddr::V6(m) => u128::from(m).leading_ones(),
    }
}

/// Whether `ip` is in the network of `addr`/`mask`.
fn in_network(ip: IpAddr, addr: IpAddr, mask: IpAddr) -> bool {
    match (ip, addr, mask) {
        (IpAddr::V4(i), IpAddr::V4(a), IpAddr::V4(m)) => {
            let m = u32::from(m);
            u32::from(i) & m == u32::from(a) & m
        }
        (IpAddr::V6(i), IpAddr::V6(a), IpAddr::V6(m)) => {
            let m = u128::from(m);
            u128::from(i) & m == u128::from(a) & m
        }
        _ => false,
    }
}

/// The interface holding `ip`: the one with `ip` as an address, else the one whose network
/// (address/netmask) holds it most narrowly — 127.0.0.2 is served by `lo` though only
/// 127.0.0.1/8 is configured on it.
pub fn interface_of(ip: IpAddr) -> Option<String> {
    let mut best: Option<(u32, String)> = None;
    for a in getifaddrs().ok()? {
        let Some(addr) = a.address.as_ref().and_then(ip_of) else {
            continue;
        };
        if addr == ip {
            return Some(a.interface_name);
        }
        let Some(mask) = a.netmask.as_ref().and_then(ip_of) else {
            continue;
        };
        let bits = prefix_len(mask);
        if in_network(ip, addr, mask) && best.as_ref().is_none_or(|(b, _)| bits > *b) {
            best = Some((bits, a.interface_name));
        }
    }
    best.map(|(_, n)| n)
}

/// The MTU of the interface holding `ip` (`/sys/class/net/<if>/mtu`), if there is one.
pub fn interface_mtu(ip: IpAddr) -> Option<u32> {
    let name = interface_of(ip)?;
    // An interface name never holds '/' (the kernel refuses it); checked anyway, since it
    // becomes a path.
    if name.contains('/') || name.is_empty() {
        return None;
    }
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn networks_and_prefixes() {
        let a = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
        let m = IpAddr::V4(Ipv4Addr::new(255, 0, 0, 0));
        assert!(in_network(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), a, m));
        assert!(!in_network(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), a, m));
        assert_eq!(prefix_len(m), 8);
        assert!(!in_network("::1".parse().unwrap(), a, m));
    }

    /// Loopback addresses other than 127.0.0.1 are found on `lo` through its /8, and get its
    /// MTU (65536 on Linux unless changed, which the test does not assume).
    #[test]
    fn loopback_addresses_have_the_loopback_mtu() {
        let one = interface_mtu(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let two = interface_mtu(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
        assert!(one.is_some());
        assert_eq!(one, two);
        assert_eq!(
            interface_of(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))),
            interface_of(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        // A device config takes it; an address on no interface keeps the 1500 default.
        let cfg = crate::DeviceConfig::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(cfg.netdev_mtu, 1500);
        assert_eq!(Some(cfg.with_interface_mtu().netdev_mtu), two);
        let none = crate::DeviceConfig::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 77)));
        if interface_of(none.ip).is_none() {
            assert_eq!(none.with_interface_mtu().netdev_mtu, 1500);
        }
    }
}
