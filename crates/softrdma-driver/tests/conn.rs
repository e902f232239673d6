//! The connection API (`softrdma_driver::conn`) on loopback: the examples run against each
//! other (`examples/conn_server.rs` + `conn_client.rs`, `ud_echo.rs`, `conn_async.rs`), and
//! the errors name what the peer said.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use softrdma_core::rdma_cm::{Ece, PortSpace};
use softrdma_driver::conn::{ConnError, ConnEvent, ConnOptions, Endpoint};
use softrdma_wire::cm::RejectReason;

#[path = "../examples/conn_server.rs"]
mod conn_server;

#[path = "../examples/conn_client.rs"]
mod conn_client;

#[path = "../examples/ud_echo.rs"]
mod ud_echo;

#[path = "../examples/conn_async.rs"]
mod conn_async;

#[path = "../examples/conn_first.rs"]
mod conn_first;

fn ip(a: u8, b: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, a, b))
}

/// conn_server and conn_client: connect with private data, SEND both ways, RDMA WRITE and
/// READ, disconnect — the server sees the client's data, the client the server's.
#[test]
fn example_server_and_client() {
    let (tx, rx) = mpsc::channel();
    let server = std::thread::spawn(move || {
        conn_server::run(SocketAddr::new(ip(81, 1), 7471), |a| tx.send(a).unwrap())
            .map_err(|e| e.to_string())
    });
    let at = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let got = conn_client::run(at, ip(81, 2)).unwrap();
    let seen = server.join().unwrap().unwrap();
    assert_eq!(got.reply, b"pong from the server");
    assert_eq!(got.read_back, conn_client::WRITTEN);
    assert_eq!(seen.hello, b"hello from the client");
    assert_eq!(seen.message, b"ping from the client");
    assert_eq!(seen.written, conn_client::WRITTEN);
}

/// conn_first (the README's snippet): a server thread and a client in one process.
#[test]
fn example_first_two_threads() {
    // Its own addresses: a test running at the same time on one of another's (each opens a
    // device on its address) fails with EADDRINUSE.
    let got = conn_first::run(SocketAddr::new(ip(80, 1), 7471), ip(80, 2)).unwrap();
    assert_eq!(got, b"ping");
}

/// ud_echo: SIDR resolution of the server's QPN and Q_Key, a datagram each way, the reply
/// on the address the request came from.
#[test]
fn example_ud_echo() {
    assert_eq!(ud_echo::run(ip(82, 1), ip(82, 2)).unwrap(), b"ECHO ME");
}

/// conn_async: the same on tokio.
#[test]
fn example_async() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let written = rt.block_on(conn_async::run(ip(83, 1), ip(83, 2))).unwrap();
    assert_eq!(written, b"async write");
}

/// Errors say what the peer said: no listener → REJ 8; `reject` → REJ 28 with the data;
/// `reject_ece` → 35; no UD listener → UNREACHABLE status 1.
#[test]
fn errors_carry_the_reject_reason_and_private_data() {
    let s = Endpoint::bind(SocketAddr::new(ip(184, 1), 7000)).unwrap();
    let c = Endpoint::bind(SocketAddr::new(ip(184, 2), 0)).unwrap();
    let t0 = Instant::now();
    let e = c.connect(SocketAddr::new(ip(184, 1), 7000)).unwrap_err();
    assert_eq!(e.reject_reason(), Some(RejectReason::INVALID_SERVICE_ID));
    assert!(!e.is_consumer_reject());
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "a REJ, not a timeout"
    );
    assert_eq!(
        e.to_string(),
        "connection rejected: invalid service ID (reason 8)"
    );

    let l = s.listen().unwrap();
    let srv = std::thread::spawn(move || {
        let i = l.incoming(Duration::from_secs(10)).unwrap();
        assert_eq!(&i.private_data()[..3], b"one");
        i.reject(b"not today").unwrap();
        let i = l.incoming(Duration::from_secs(10)).unwrap();
        assert_eq!(
            i.ece(),
            Ece {
                vendor_id: 0x15b3,
                attr_mod: 3
            }
        );
        i.reject_ece(b"").unwrap();
        l
    });
    let e = c
        .connect_with(
            SocketAddr::new(ip(184, 1), 7000),
            &ConnOptions::default().with_private_data(b"one"),
        )
        .unwrap_err();
    assert!(e.is_consumer_reject(), "{e}");
    assert_eq!(&e.private_data()[..9], b"not today");
    assert_eq!(
        e.to_string(),
        "connection rejected: consumer defined (reason 28), with 9 bytes of private data"
    );
    let opts = ConnOptions {
        ece: Some(Ece {
            vendor_id: 0x15b3,
            attr_mod: 3,
        }),
        ..ConnOptions::default()
    };
    let e = c
        .connect_with(SocketAddr::new(ip(184, 1), 7000), &opts)
        .unwrap_err();
    assert_eq!(
        e.reject_reason(),
        Some(RejectReason::VENDOR_OPTION_NOT_SUPPORTED)
    );
    let _l = srv.join().unwrap();

    let sock = c.ud_socket().unwrap();
    match sock.resolve(SocketAddr::new(ip(184, 1), 7174)) {
        Err(ConnError::Unreachable { status: 1 }) => {}
        other => panic!("expected UNREACHABLE status 1, got {other:?}"),
    }
}

/// Options travel: ECE accepted (the REP echoes the vendor), the server's options, PS_IB,
/// and the server sees the client's DISCONNECTED as an event.
#[test]
fn options_ece_and_events() {
    let s = Endpoint::bind(SocketAddr::new(ip(185, 1), 0)).unwrap();
    let c = Endpoint::bind(SocketAddr::new(ip(185, 2), 0)).unwrap();
    let l = s.listen_ps(PortSpace::IB, 7471).unwrap();
    let at = l.local_addr();
    let srv = std::thread::spawn(move || {
        let i = l.incoming(Duration::from_secs(10)).unwrap();
        let ece = i.ece();
        let conn = i
            .accept_with(&ConnOptions {
                ece: Some(ece),
                ack_timeout: Some(16),
                min_rnr_timer: Some(12),
                ..ConnOptions::default()
            })
            .unwrap();
        assert_eq!(conn.recv_msg().unwrap(), b"tos");
        let e = conn.next_event(Duration::from_secs(10));
        assert!(
            matches!(e, Some(ConnEvent::Disconnected { status: 0 })),
            "{e:?}"
        );
        conn.disconnect().unwrap();
        ece
    });
    let opts = ConnOptions {
        port_space: PortSpace::IB,
        tos: Some(0x48),
        ack_timeout: Some(14),
        ece: Some(Ece {
            vendor_id: 0xabcd,
            attr_mod: 1,
        }),
        ..ConnOptions::default()
    };
    let conn = c.connect_with(at, &opts).unwrap();
    assert_eq!(conn.peer_ece().vendor_id, 0xabcd);
    let a = c.device().query_qp(conn.qp_num()).unwrap();
    assert_eq!((a.timeout, a.ah_attr.traffic_class), (14, 0x48));
    conn.send_msg(b"tos").unwrap();
    conn.disconnect().unwrap();
    assert_eq!(srv.join().unwrap().vendor_id, 0xabcd);
}

/// A listener with backlog 4 whose application does not call `incoming()` for a while:
/// four requests wait (each holding a backlog slot: nothing takes them off the CM's queue
/// behind the application's back), the fifth client's REQ is dropped without a REJ and
/// counted, and once the application takes requests, the fifth client's retried REQ is
/// served too: five connections.
#[test]
fn a_listeners_backlog_holds_until_the_application_takes_a_request() {
    let s = Endpoint::bind(SocketAddr::new(ip(88, 1), 7000)).unwrap();
    let listener = s.listen_with(PortSpace::TCP, 7000, 4).unwrap();
    let clients: Vec<_> = (0..5u8)
        .map(|k| {
            std::thread::spawn(move || {
                let c = Endpoint::bind(SocketAddr::new(ip(88, 10 + k), 0)).unwrap();
                let conn = c.connect(SocketAddr::new(ip(88, 1), 7000));
                conn.map(|conn| (c, conn))
            })
        })
        .collect();
    // The application is busy: wait until the fifth REQ has been dropped.
    let t0 = Instant::now();
    while s.cm().rdma_counters().backlog_drops == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no REQ was dropped");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        s.cm().queued_events(),
        4,
        "four requests wait in the backlog"
    );
    let mut accepted = Vec::new();
    for _ in 0..5 {
        accepted.push(listener.accept().unwrap());
    }
    for c in clients {
        c.join().unwrap().unwrap();
    }
    assert!(s.cm().rdma_counters().backlog_drops >= 1);
    assert_eq!(accepted.len(), 5);
}

/// No queue of the connection API grows without bound when its application does not take
/// its events: a listener nobody serves holds its backlog, and the flood beyond it is
/// dropped and counted, never queued.
#[test]
fn an_application_that_never_takes_its_events_cannot_grow_the_queue() {
    let s = Endpoint::bind(SocketAddr::new(ip(89, 1), 7000)).unwrap();
    let _listener = s.listen_with(PortSpace::TCP, 7000, 2).unwrap();
    let clients: Vec<_> = (0..6u8)
        .map(|k| {
            std::thread::spawn(move || {
                let c = Endpoint::bind(SocketAddr::new(ip(89, 10 + k), 0)).unwrap();
                let opts = ConnOptions {
                    timeout: Duration::from_secs(1),
                    ..ConnOptions::default()
                };
                c.connect_with(SocketAddr::new(ip(89, 1), 7000), &opts)
                    .is_ok()
            })
        })
        .collect();
    let t0 = Instant::now();
    while s.cm().rdma_counters().backlog_drops < 4 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the flood was not dropped"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The two requests in the backlog, and what their ids' peers said since (a REJ when
    // they gave up): a few events per id the backlog admitted, never one per REQ sent.
    let bound = 2 * 4;
    assert!(
        s.cm().queued_events() <= bound,
        "{}",
        s.cm().queued_events()
    );
    for c in clients {
        assert!(!c.join().unwrap(), "nobody accepted");
    }
    assert!(
        s.cm().queued_events() <= bound,
        "{}",
        s.cm().queued_events()
    );
    assert!(s.cm().rdma_counters().backlog_drops >= 4);
}
