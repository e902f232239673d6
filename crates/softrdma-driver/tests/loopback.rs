//! The endpoint on loopback: 127.0.0.1 and 127.0.0.2 (and ::1), no privileges needed.
//!
//! Tests bind port 0 so they run in parallel; one test binds the real RoCEv2 port 4791, on
//! loopback addresses it finds free (never 127.0.0.1, which a running softrdma may hold).

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::io::IoSliceMut;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use softrdma_driver::timer::{wait_for_input, Input, PollMode};
use softrdma_driver::udp::{EndpointConfig, Readiness, Transmit, UdpEndpoint, ROCEV2_PORT};
use softrdma_driver::Clock;

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

fn ep(ip: IpAddr) -> UdpEndpoint {
    ep_with(ip, &EndpointConfig::default())
}

fn ep_with(ip: IpAddr, cfg: &EndpointConfig) -> UdpEndpoint {
    UdpEndpoint::bind_with(SocketAddr::new(ip, 0), cfg).expect("bind on loopback")
}

/// Receive buffers big enough for a full GRO batch.
fn bufs(n: usize) -> Vec<Vec<u8>> {
    vec![vec![0u8; 64 * 1024 + 4096]; n]
}

/// Receives until `want` datagrams arrived (or 2 s passed); returns them split into segments.
fn recv_datagrams(ep: &UdpEndpoint, want: usize) -> Vec<(SocketAddr, Option<IpAddr>, Vec<u8>)> {
    let mut storage = bufs(8);
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while out.len() < want && Instant::now() < deadline {
        let mut slices: Vec<IoSliceMut<'_>> =
            storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        let recs = ep
            .recv_batch_timeout(&mut slices, Some(Duration::from_millis(200)))
            .expect("recv");
        drop(slices);
        for (rec, buf) in recs.iter().zip(storage.iter()) {
            for seg in rec.segments(buf) {
                out.push((rec.src, rec.dst_ip, seg.to_vec()));
            }
        }
    }
    out
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn single_datagrams_between_127_0_0_1_and_127_0_0_2() {
    let a = ep(A);
    let b = ep(B);
    let msg = pattern(300, 1);
    a.send(&Transmit::single(b.local_addr(), &msg)).unwrap();
    let got = recv_datagrams(&b, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, a.local_addr(), "source is A's bound address");
    assert_eq!(got[0].1, Some(B), "IP_PKTINFO reports the destination");
    assert_eq!(got[0].2, msg);

    // And back.
    b.send(&Transmit::single(a.local_addr(), b"pong")).unwrap();
    let got = recv_datagrams(&a, 1);
    assert_eq!(got[0].0, b.local_addr());
    assert_eq!(got[0].2, b"pong");
}

#[test]
fn gso_send_arrives_as_separate_datagrams() {
    let a = ep(A);
    let b = ep(B);
    let caps = a.capabilities();
    // 10 full segments of 1100 bytes and a short one: datagram boundaries must survive,
    // whether the kernel segments (GSO) or hands them over coalesced (GRO).
    let seg = 1100;
    let data = pattern(seg * 10 + 77, 7);
    let t = Transmit::segmented(b.local_addr(), &data, seg);
    assert_eq!(t.datagrams(), 11);
    assert_eq!(a.send_batch(&[t]).unwrap(), 1);
    let got = recv_datagrams(&b, 11);
    assert_eq!(got.len(), 11, "caps: {caps:?}");
    for (i, (src, _, bytes)) in got.iter().enumerate() {
        assert_eq!(*src, a.local_addr());
        let want = &data[i * seg..((i + 1) * seg).min(data.len())];
        assert_eq!(bytes.as_slice(), want, "segment {i}");
    }
}

#[test]
fn oversized_gso_transmit_is_split_and_no_gso_mode_works() {
    for gso in [true, false] {
        let cfg = EndpointConfig {
            gso,
            ..EndpointConfig::default()
        };
        let a = ep_with(A, &cfg);
        let b = ep(B);
        if !gso {
            assert_eq!(a.max_gso_segments(), 1);
        }
        // 100 segments of 1024: more than 64 GSO segments and more than 64 KiB in one send.
        let seg = 1024;
        let data = pattern(seg * 100, 3);
        let sent = a
            .send_batch_blocking(
                &[Transmit::segmented(b.local_addr(), &data, seg)],
                Some(Duration::from_secs(1)),
            )
            .unwrap();
        assert_eq!(sent, 1);
        let got = recv_datagrams(&b, 100);
        assert_eq!(got.len(), 100, "gso={gso}");
        let joined: Vec<u8> = got.into_iter().flat_map(|g| g.2).collect();
        assert_eq!(joined, data);
    }
}

#[test]
fn batch_to_several_destinations() {
    let a = ep(A);
    let b = ep(B);
    let c = ep(A);
    let m1 = pattern(64, 1);
    let m2 = pattern(64, 2);
    let m3 = pattern(4096, 3);
    let ts = [
        Transmit::single(b.local_addr(), &m1),
        Transmit::single(c.local_addr(), &m2),
        Transmit::single(b.local_addr(), &m3),
    ];
    assert_eq!(a.send_batch(&ts).unwrap(), 3);
    let at_b: Vec<Vec<u8>> = recv_datagrams(&b, 2).into_iter().map(|g| g.2).collect();
    assert_eq!(at_b, vec![m1, m3]);
    let at_c = recv_datagrams(&c, 1);
    assert_eq!(at_c[0].2, m2);
}

#[test]
fn df_is_set_and_buffers_are_large() {
    for ip in [A, IpAddr::V6(Ipv6Addr::LOCALHOST)] {
        let Ok(e) = UdpEndpoint::bind_with(SocketAddr::new(ip, 0), &EndpointConfig::default())
        else {
            eprintln!("skipping {ip}: cannot bind (no IPv6 on this host?)");
            continue;
        };
        let caps = e.capabilities();
        assert!(!caps.may_fragment, "{ip}: {caps:?}");
        assert!(caps.recv_buffer >= 256 * 1024, "{ip}: {caps:?}");
        assert!(caps.send_buffer >= 256 * 1024, "{ip}: {caps:?}");
        if ip.is_ipv4() {
            let v = rustix::net::sockopt::ip_mtu_discover(e.socket().as_fd()).unwrap();
            assert_eq!(v, rustix::net::sockopt::Ipv4PathMtuDiscovery::DO);
        } else {
            let v = rustix::net::sockopt::ipv6_mtu_discover(e.socket().as_fd()).unwrap();
            assert_eq!(v, rustix::net::sockopt::Ipv6PathMtuDiscovery::DO);
        }
        // Unconnected: no peer.
        assert!(e.socket().peer_addr().is_err());
    }
}

#[test]
fn ipv6_loopback() {
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let (Ok(a), Ok(b)) = (
        UdpEndpoint::bind_with(SocketAddr::new(v6, 0), &EndpointConfig::default()),
        UdpEndpoint::bind_with(SocketAddr::new(v6, 0), &EndpointConfig::default()),
    ) else {
        eprintln!("skipping: no IPv6 loopback");
        return;
    };
    let data = pattern(2000 * 5, 9);
    a.send(&Transmit::segmented(b.local_addr(), &data, 2000))
        .unwrap();
    let got = recv_datagrams(&b, 5);
    assert_eq!(got.len(), 5);
    assert_eq!(got[0].1, Some(v6));
    let joined: Vec<u8> = got.into_iter().flat_map(|g| g.2).collect();
    assert_eq!(joined, data);

    // More than one GSO send's worth (64 segments / 65,527 bytes for IPv6).
    let data = pattern(1024 * 100, 4);
    let t = Transmit::segmented(b.local_addr(), &data, 1024);
    assert_eq!(
        a.send_batch_blocking(&[t], Some(Duration::from_secs(1)))
            .unwrap(),
        1
    );
    let got = recv_datagrams(&b, 100);
    assert_eq!(got.len(), 100);
    let joined: Vec<u8> = got.into_iter().flat_map(|g| g.2).collect();
    assert_eq!(joined, data);
}

#[test]
fn recv_timeout_and_notifier() {
    let a = ep(A);
    let mut storage = bufs(2);
    let mut slices: Vec<IoSliceMut<'_>> = storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();

    // Nothing queued: non-blocking receive returns nothing at once.
    assert!(a.recv_batch(&mut slices).unwrap().is_empty());

    // Timeout.
    let t0 = Instant::now();
    let got = a
        .recv_batch_timeout(&mut slices, Some(Duration::from_millis(50)))
        .unwrap();
    assert!(got.is_empty());
    assert!(t0.elapsed() >= Duration::from_millis(50));

    // A notification from another thread ends a long wait early.
    let n = a.notifier();
    let t0 = Instant::now();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        n.notify().unwrap();
    });
    assert_eq!(
        a.wait_readable(Some(Duration::from_secs(5))).unwrap(),
        Readiness::Woken
    );
    assert!(t0.elapsed() < Duration::from_secs(4));
    h.join().unwrap();
}

#[test]
fn wait_for_input_modes() {
    let a = ep(A);
    let b = ep(B);
    let clock = Clock::new();
    let mut storage = bufs(4);

    for mode in [
        PollMode::Blocking,
        PollMode::BusyPoll,
        PollMode::SpinThenBlock(Duration::from_micros(200)),
    ] {
        let mut slices: Vec<IoSliceMut<'_>> =
            storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        // Deadline with nothing to read.
        let d = clock.now() + 20_000;
        let r = wait_for_input(&b, &mut slices, &clock, Some(d), mode).unwrap();
        assert_eq!(r, Input::Deadline, "{mode:?}");
        assert!(clock.reached(d));

        // Input before the deadline.
        a.send(&Transmit::single(b.local_addr(), b"hello")).unwrap();
        let d = clock.now() + 2_000_000;
        match wait_for_input(&b, &mut slices, &clock, Some(d), mode).unwrap() {
            Input::Datagrams(recs) => {
                assert_eq!(recs.len(), 1);
                assert_eq!(recs[0].len, 5);
                assert_eq!(recs[0].src, a.local_addr());
            }
            other => panic!("{mode:?}: {other:?}"),
        }

        // Queued input is returned even when the deadline has already passed.
        a.send(&Transmit::single(b.local_addr(), b"late")).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let r = wait_for_input(&b, &mut slices, &clock, Some(0), mode).unwrap();
        assert!(matches!(r, Input::Datagrams(_)), "{mode:?}: {r:?}");

        // A notification, no deadline.
        let n = b.notifier();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            n.notify().unwrap();
        });
        let r = wait_for_input(&b, &mut slices, &clock, None, mode).unwrap();
        assert_eq!(r, Input::Woken, "{mode:?}");
        h.join().unwrap();
    }
}

/// The devices' real port, 4791, on two loopback addresses side by side, no privileges. The
/// addresses are the first two free ones from 127.0.97.1 on: a softrdma left running (a
/// target on 127.0.0.1, say) or another test process holding one does not fail the test.
#[test]
fn rocev2_port_on_two_free_loopback_addresses() {
    let mut free = (1..=254u8).filter_map(|k| {
        let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 97, k));
        UdpEndpoint::bind(ip).ok().map(|e| (ip, e))
    });
    let (ia, a) = free.next().expect("a free 127.0.97.x:4791");
    let (ib, b) = free.next().expect("a second free 127.0.97.x:4791");
    assert_eq!(a.local_addr(), SocketAddr::new(ia, ROCEV2_PORT));
    assert_eq!(b.local_addr(), SocketAddr::new(ib, ROCEV2_PORT));
    a.send(&Transmit::single(b.local_addr(), b"roce")).unwrap();
    let got = recv_datagrams(&b, 1);
    assert_eq!(got[0].0, SocketAddr::new(ia, ROCEV2_PORT));
    assert_eq!(got[0].2, b"roce");
}
