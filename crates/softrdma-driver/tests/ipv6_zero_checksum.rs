//! Linux rxe sends RoCEv2 over IPv6 with UDP checksum 0 (seen in the lab's capture of the
//! guest's ibv_rc_pingpong over fd77::/64). The kernel drops such datagrams on a socket without
//! `UDP_NO_CHECK6_RX`; the endpoint sets it.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::io::IoSliceMut;
use std::net::{Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use nix::{setsockopt_impl, sockopt_impl};
use softrdma_driver::udp::{EndpointConfig, UdpEndpoint};

/// `UDP_NO_CHECK6_TX` (include/uapi/linux/udp.h).
const UDP_NO_CHECK6_TX: libc::c_int = 101;

sockopt_impl!(
    /// `UDP_NO_CHECK6_TX`: send IPv6 UDP with checksum 0, as rxe does.
    UdpNoCheck6Tx,
    SetOnly,
    libc::IPPROTO_UDP,
    UDP_NO_CHECK6_TX,
    bool
);

fn zero_checksum_sender() -> UdpSocket {
    let s = UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).unwrap();
    nix::sys::socket::setsockopt(&s, UdpNoCheck6Tx, &true).unwrap();
    s
}

#[test]
fn zero_checksum_ipv6_datagrams_reach_the_endpoint() {
    let lo = SocketAddr::new(Ipv6Addr::LOCALHOST.into(), 0);
    let ep = UdpEndpoint::bind_with(lo, &EndpointConfig::default()).unwrap();
    // A plain socket as the control: the kernel drops the zero-checksum datagram.
    let plain = UdpSocket::bind(lo).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let tx = zero_checksum_sender();
    tx.send_to(b"to the plain socket", plain.local_addr().unwrap())
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        plain.recv_from(&mut buf).is_err(),
        "a socket without UDP_NO_CHECK6_RX got a zero-checksum datagram: the kernel changed"
    );
    tx.send_to(b"to the endpoint", ep.local_addr()).unwrap();
    let mut storage = vec![0u8; 2048];
    let mut slices = [IoSliceMut::new(&mut storage)];
    let got = ep
        .recv_batch_timeout(&mut slices, Some(Duration::from_secs(2)))
        .unwrap();
    assert_eq!(
        got.len(),
        1,
        "the endpoint did not get the zero-checksum datagram"
    );
    assert_eq!(&storage[..got[0].len], b"to the endpoint");
}
