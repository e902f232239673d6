//! What the kernel puts in the IPv4 header of our datagrams, and what GRO hands back.
//!
//! `cargo run --example wire_facts -- send [ADDR]` sends, from 127.0.0.1 to ADDR (default
//! 127.0.0.2:47900, with a sink bound there), one burst per socket flavour, each from its own source port so a capture
//! tells them apart (`scripts/wire-facts.sh` captures with dumpcap and reads the IP IDs with
//! tshark):
//!
//! | src port | socket                                                          | sends        |
//! |----------|-----------------------------------------------------------------|--------------|
//! | 47901    | UdpEndpoint: unconnected, IP_PMTUDISC_DO                        | 5 × 100 B    |
//! | 47902    | connected (connect(2)), IP_PMTUDISC_DO                          | 5 × 100 B    |
//! | 47903    | unconnected, kernel default (IP_PMTUDISC_WANT)                  | 5 × 100 B    |
//! | 47904    | unconnected, IP_PMTUDISC_PROBE (quinn-udp's own choice)         | 5 × 100 B    |
//! | 47905    | UdpEndpoint, one GSO send                                       | 2 × (5 × 1000 B) |
//! | 47906    | connected, IP_PMTUDISC_DO, one GSO send                         | 2 × (5 × 1000 B) |
//!
//! `cargo run --example wire_facts -- gro` sends on loopback and prints the receive records:
//! whether GRO coalesced, and the `segment_size` (stride) reported.

#![allow(clippy::unwrap_used)] // an experiment: fail loudly

use std::io::IoSliceMut;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use rustix::net::sockopt::{set_ip_mtu_discover, Ipv4PathMtuDiscovery};
use softrdma_driver::udp::{EndpointConfig, Transmit, UdpEndpoint};

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

fn endpoint(port: u16) -> UdpEndpoint {
    UdpEndpoint::bind_with(SocketAddr::new(A, port), &EndpointConfig::default()).unwrap()
}

fn plain(port: u16, pmtu: Option<Ipv4PathMtuDiscovery>) -> UdpSocket {
    let s = UdpSocket::bind(SocketAddr::new(A, port)).unwrap();
    if let Some(p) = pmtu {
        set_ip_mtu_discover(s.as_fd(), p).unwrap();
    }
    s
}

fn tag(port: u16, i: usize, len: usize) -> Vec<u8> {
    let mut v = format!("wire-facts {port} #{i} ").into_bytes();
    v.resize(len, b'.');
    v
}

fn send(dst: SocketAddr) {
    // A sink, so no ICMP port-unreachable makes the connected socket's later sends fail.
    let _sink = UdpSocket::bind(dst).ok();
    let ep = endpoint(47901);
    for i in 0..5 {
        ep.send(&Transmit::single(dst, &tag(47901, i, 100)))
            .unwrap();
    }

    let s = plain(47902, Some(Ipv4PathMtuDiscovery::DO));
    s.connect(dst).unwrap();
    for i in 0..5 {
        s.send(&tag(47902, i, 100)).unwrap();
    }

    let s = plain(47903, None);
    for i in 0..5 {
        s.send_to(&tag(47903, i, 100), dst).unwrap();
    }

    let s = plain(47904, Some(Ipv4PathMtuDiscovery::PROBE));
    for i in 0..5 {
        s.send_to(&tag(47904, i, 100), dst).unwrap();
    }

    let ep = endpoint(47905);
    for round in 0..2 {
        let data: Vec<u8> = (0..5)
            .flat_map(|i| tag(47905, round * 5 + i, 1000))
            .collect();
        ep.send(&Transmit::segmented(dst, &data, 1000)).unwrap();
    }
    println!("gso max segments: {}", ep.max_gso_segments());

    // A connected GSO socket: UdpEndpoint is never connected, so build one through quinn-udp.
    let s = plain(47906, None);
    let state = quinn_udp::UdpSocketState::new((&s).into()).unwrap();
    set_ip_mtu_discover(s.as_fd(), Ipv4PathMtuDiscovery::DO).unwrap();
    s.connect(dst).unwrap();
    for round in 0..2 {
        let data: Vec<u8> = (0..5)
            .flat_map(|i| tag(47906, round * 5 + i, 1000))
            .collect();
        let t = quinn_udp::Transmit {
            destination: dst,
            ecn: None,
            contents: &data,
            segment_size: Some(1000),
            src_ip: None,
        };
        state.try_send((&s).into(), &t).unwrap();
    }
    println!("sent");
}

fn gro() {
    let rx = UdpEndpoint::bind_with(SocketAddr::new(B, 0), &EndpointConfig::default()).unwrap();
    let tx = UdpEndpoint::bind_with(SocketAddr::new(A, 0), &EndpointConfig::default()).unwrap();
    let no_gso = UdpEndpoint::bind_with(
        SocketAddr::new(A, 0),
        &EndpointConfig {
            gso: false,
            ..EndpointConfig::default()
        },
    )
    .unwrap();
    println!("receiver capabilities: {:?}", rx.capabilities());
    let dst = rx.local_addr();
    let mut storage = vec![vec![0u8; 70_000]; 32];

    let mut report = |what: &str| {
        std::thread::sleep(Duration::from_millis(50));
        let mut slices: Vec<IoSliceMut<'_>> =
            storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        let mut recs = Vec::new();
        loop {
            let got = rx.recv_batch(&mut slices).unwrap();
            if got.is_empty() {
                break;
            }
            recs.extend(got);
        }
        let shown: Vec<String> = recs
            .iter()
            .map(|r| format!("len {} seg {}", r.len, r.segment_size))
            .collect();
        println!("{what}: {} records: [{}]", recs.len(), shown.join(", "));
    };

    // 1. 32 separate datagrams of 1000 bytes, back to back from one socket.
    for i in 0..32 {
        tx.send(&Transmit::single(dst, &tag(1, i, 1000))).unwrap();
    }
    report("32 single sends of 1000 B");

    // 2. One GSO send of 10 × 1000 B + 77 B.
    let data = vec![7u8; 10_077];
    tx.send(&Transmit::segmented(dst, &data, 1000)).unwrap();
    report("one GSO send, 10 x 1000 B + 77 B");

    // 3. Two GSO sends of 4 × 4096 B, back to back.
    let data = vec![9u8; 4 * 4096];
    tx.send(&Transmit::segmented(dst, &data, 4096)).unwrap();
    tx.send(&Transmit::segmented(dst, &data, 4096)).unwrap();
    report("two GSO sends, 4 x 4096 B each");

    // 4. The same 10 × 1000 B + 77 B with GSO off: one sendmsg per datagram.
    let data = vec![7u8; 10_077];
    no_gso.send(&Transmit::segmented(dst, &data, 1000)).unwrap();
    report("GSO off, 10 x 1000 B + 77 B");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("send") => {
            let dst = args
                .get(2)
                .map(|s| s.parse().unwrap())
                .unwrap_or(SocketAddr::new(B, 47900));
            send(dst)
        }
        Some("gro") => gro(),
        _ => eprintln!("usage: wire_facts send [ADDR] | gro"),
    }
}
