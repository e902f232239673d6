//! Addresses that join and leave a running device (the interface's addresses changed, as
//! rxe follows them through netdev events): the GID table follows, holes and all, and an
//! added address is served by the loop that runs the device — here the node's loop.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use common::{connect, end, ping_pong};
use softrdma_driver::cm::Cm;
use softrdma_driver::{Device, DeviceConfig};
use softrdma_wire::Gid;

fn ip(b: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 26, b))
}

fn gid_index(d: &Device, a: IpAddr) -> Option<u16> {
    d.gid_table()
        .iter()
        .find(|e| e.gid == Gid::from_ip(a))
        .map(|e| e.index)
}

#[test]
fn addresses_added_and_removed_while_running_follow_the_gid_table_and_are_served() {
    let open = |b| Device::open_with(DeviceConfig::new(ip(b)).background()).unwrap();
    let (d1, d2) = (open(1), open(2));
    let cm = Cm::new(7);
    cm.add_device(&d1).unwrap();
    cm.add_device(&d2).unwrap();
    assert_eq!(gid_index(&d1, ip(1)), Some(1));

    // Added: GID 2 and a socket, served by the node's loop.
    assert!(d1.add_address(ip(3)).unwrap());
    assert!(!d1.add_address(ip(3)).unwrap(), "added twice");
    assert_eq!(gid_index(&d1, ip(3)), Some(2));
    assert!(d1.local_addrs().iter().any(|a| a.ip() == ip(3)));
    let (a, b) = (end(&d1), end(&d2));
    connect(&a, 2, &b, ip(2));
    connect(&b, 1, &a, ip(3));
    ping_pong(&a, &b, 20);
    let dc = d1.driver_counters();
    assert_eq!(dc.tx_wrong_source + dc.tx_errors, 0, "{dc:?}");

    // Removed: its index empties, the others keep theirs, the socket closes.
    assert!(d1.remove_address(ip(3)).unwrap());
    assert!(!d1.remove_address(ip(3)).unwrap(), "removed twice");
    assert_eq!(gid_index(&d1, ip(3)), None);
    assert!(d1.query_gid(1, 2).is_err());
    assert_eq!(gid_index(&d1, ip(1)), Some(1));
    assert!(!d1.local_addrs().iter().any(|a| a.ip() == ip(3)));
    let start = Instant::now();
    while let Err(e) = std::net::UdpSocket::bind((ip(3), 4791)) {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "the removed address's socket is still open: {e}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    // The next address takes the empty index; an address another process (here: a socket
    // of this test) holds is not added.
    assert!(d1.add_address(ip(4)).unwrap());
    assert_eq!(gid_index(&d1, ip(4)), Some(2));
    let held = std::net::UdpSocket::bind((ip(5), 4791)).unwrap();
    assert!(!d1.add_address(ip(5)).unwrap());
    assert_eq!(gid_index(&d1, ip(5)), None);
    drop(held);
    let (a2, b2) = (end(&d1), end(&d2));
    connect(&a2, 2, &b2, ip(2));
    connect(&b2, 1, &a2, ip(4));
    ping_pong(&a2, &b2, 10);
}
