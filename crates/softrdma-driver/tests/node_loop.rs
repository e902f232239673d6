//! One loop over all the sockets of a node: the threaded devices a `Cm` takes are run by one
//! thread of the node's (`softrdma-node`), not a thread each; two CMs are two nodes with a
//! loop each. One test in this binary, so that the threads counted are its own.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use common::{connect, end, ping_pong, End};
use softrdma_core::verbs::{RecvWr, SendOp, SendWr, Sge, WcStatus};
use softrdma_driver::cm::Cm;
use softrdma_driver::{Device, DeviceConfig, PollMode};

fn ip(b: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 24, b))
}

/// The process's threads by name (`/proc/self/task/*/comm`, 15 characters at most).
fn threads(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with(prefix))
        .count()
}

/// Waits up to 2 s for `n` threads named `prefix*`.
fn expect_threads(prefix: &str, n: usize) {
    let start = Instant::now();
    while threads(prefix) != n {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{} threads named {prefix}*, expected {n}",
            threads(prefix)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Connects `e` to `peer` at the peer's first address, from `e`'s own.
fn link(e: &End, peer: &End) {
    connect(
        e,
        e.dev.ip_gid_index().unwrap(),
        peer,
        peer.dev.local_addr().ip(),
    );
}

#[test]
fn the_devices_of_a_cm_run_on_one_loop_thread_of_its_node() {
    let open = |b| Device::open_with(DeviceConfig::new(ip(b)).background()).unwrap();
    let (d1, d2, d3) = (open(1), open(2), open(3));
    expect_threads("softrdma-127.0.", 3);
    expect_threads("softrdma-node", 0);

    // Two devices of one CM: their own loop threads end, one node loop runs both.
    let cm = Cm::new(1);
    cm.add_device(&d1).unwrap();
    cm.add_device(&d2).unwrap();
    expect_threads("softrdma-127.0.", 1);
    expect_threads("softrdma-node", 1);
    let (a, b) = (end(&d1), end(&d2));
    link(&a, &b);
    link(&b, &a);
    ping_pong(&a, &b, 50);

    // A second CM is a second node, with its own loop (perf's client and server).
    let cm2 = Cm::new(2);
    cm2.add_device(&d3).unwrap();
    expect_threads("softrdma-127.0.", 0);
    expect_threads("softrdma-node", 2);
    let (c, a2) = (end(&d3), end(&d1));
    link(&c, &a2);
    link(&a2, &c);
    ping_pong(&c, &a2, 50);
    ping_pong(&a, &b, 10);
    for d in [&d1, &d2, &d3] {
        let dc = d.driver_counters();
        assert_eq!(
            dc.tx_errors + dc.tx_dropped + dc.tx_wrong_source,
            0,
            "{dc:?}"
        );
    }

    // A device taken out of its CM (a context closed) releases its address; opened again,
    // it is a new port of the same node, on the same loop.
    let port2 = cm.port_for_ip(ip(2)).unwrap();
    cm.remove_device(&d2).unwrap();
    assert!(cm.port_for_ip(ip(2)).is_none());
    assert!(cm.device(port2).is_none());
    drop((b, d2));
    // (The node's loop may hold the device for the rest of a turn.)
    let start = Instant::now();
    while let Err(e) = std::net::UdpSocket::bind((ip(2), 4791)) {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "the removed device's address is still held: {e}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let d2 = open(2);
    let port2b = cm.add_device(&d2).unwrap();
    assert_ne!(port2, port2b);
    assert_eq!(cm.port_for_ip(ip(2)), Some(port2b));
    expect_threads("softrdma-127.0.", 0);
    expect_threads("softrdma-node", 2);
    let (a3, b) = (end(&d1), end(&d2));
    link(&a3, &b);
    link(&b, &a3);
    ping_pong(&a3, &b, 20);

    // Devices whose application's polls turn them too (the drop-in library's): on the
    // node's loop, a busy-polling thread turns them itself (the completions came in its
    // turns), and the loop still runs them when nobody polls (the channel-style wait below).
    let open_polled = |b| {
        let c = DeviceConfig::new(ip(b))
            .with_progress(softrdma_driver::Progress::Thread(PollMode::Blocking))
            .with_app_turns(true)
            .with_defer_flush(true);
        Device::open_with(c).unwrap()
    };
    let (d4, d5) = (open_polled(4), open_polled(5));
    let cm3 = Cm::new(3);
    cm3.add_device(&d4).unwrap();
    cm3.add_device(&d5).unwrap();
    expect_threads("softrdma-node", 3);
    let (p, q) = (end(&d4), end(&d5));
    assert!(p.dev.app_turns() && !a.dev.app_turns());
    link(&p, &q);
    link(&q, &p);
    ping_pong(&p, &q, 200);
    let (c4, c5) = (d4.driver_counters(), d5.driver_counters());
    assert!(
        c4.app_turns > 0 && c5.app_turns > 0,
        "no poll turned the devices: {c4:?} {c5:?}"
    );
    assert_eq!(a.dev.driver_counters().app_turns, 0);
    // Nobody polls: the node's loop delivers (and what a turn deferred leaves with it).
    let sge = |e: &End| Sge {
        addr: 0x1000,
        length: 64,
        lkey: e.lkey,
    };
    q.dev
        .post_recv(q.qpn, RecvWr::new(9, vec![sge(&q)]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(10));
    p.dev
        .post_send(p.qpn, SendWr::new(9, SendOp::Send).with_sge(sge(&p)))
        .unwrap();
    let mut out = Vec::new();
    for e in [&q, &p] {
        out.clear();
        let k = e
            .dev
            .wait_cq(e.cq, &mut out, 1, Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(k, 1, "the node's loop did not deliver on {:?}", e.dev);
        assert_eq!(out[0].status, WcStatus::Success);
    }

    // The node's loop ends with its last device.
    drop((a, a3, b, c, a2, d1, d2, d3, cm, cm2));
    drop((p, q, d4, d5, cm3));
    expect_threads("softrdma-node", 0);
}
