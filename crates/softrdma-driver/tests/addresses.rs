//! Addresses that join and leave a running device (the interface's addresses changed, as
//! rxe follows them through netdev events): the GID table follows, holes and all, and an
//! added address is served by the loop that runs the device — here the node's loop.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use softrdma_core::device::Mtu;
use softrdma_core::verbs::{
    steps_to_rts, AccessFlags, AddressVector, CqId, QpAttr, QpCap, QpInitAttr, QpType, RecvWr,
    SendOp, SendWr, Sge, WcStatus,
};
use softrdma_driver::cm::Cm;
use softrdma_driver::{Device, DeviceConfig};
use softrdma_wire::Gid;

fn ip(b: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 26, b))
}

struct End {
    dev: Device,
    cq: CqId,
    qpn: u32,
    lkey: u32,
}

fn end(dev: &Device) -> End {
    let pd = dev.alloc_pd().unwrap();
    let keys = dev
        .reg_mr(pd, vec![0u8; 4096], 0x1000, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let cq = dev.create_cq(64).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let (qpn, _) = dev
        .create_qp(QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            sq_sig_all: true,
        })
        .unwrap();
    End {
        dev: dev.clone(),
        cq,
        qpn,
        lkey: keys.lkey,
    }
}

/// Connects `e` to `peer` at `peer_ip`, sending from `e`'s GID `sgid_index`.
fn connect(e: &End, sgid_index: u16, peer: &End, peer_ip: IpAddr) {
    let attr = QpAttr {
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: peer.qpn,
        rq_psn: 1,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: AddressVector {
            dgid: Gid::from_ip(peer_ip),
            sgid_index,
            hop_limit: 1,
            ..AddressVector::default()
        },
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: 1,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    for (a, mask) in steps_to_rts(QpType::Rc, &attr) {
        e.dev.modify_qp(e.qpn, &a, mask).unwrap();
    }
}

fn completions(e: &End, n: usize) {
    let mut got = 0;
    let mut out = Vec::new();
    while got < n {
        out.clear();
        let k = e
            .dev
            .wait_cq(e.cq, &mut out, n - got, Some(Duration::from_secs(5)))
            .unwrap();
        assert!(k > 0, "{got} of {n} completions within 5 s on {:?}", e.dev);
        assert!(out.iter().all(|w| w.status == WcStatus::Success), "{out:?}");
        got += k;
    }
}

fn ping_pong(a: &End, b: &End, rounds: u64) {
    let sge = |e: &End| Sge {
        addr: 0x1000,
        length: 64,
        lkey: e.lkey,
    };
    for i in 0..rounds {
        b.dev
            .post_recv(b.qpn, RecvWr::new(i, vec![sge(b)]))
            .unwrap();
        a.dev
            .post_recv(a.qpn, RecvWr::new(i, vec![sge(a)]))
            .unwrap();
        a.dev
            .post_send(a.qpn, SendWr::new(i, SendOp::Send).with_sge(sge(a)))
            .unwrap();
        completions(b, 1);
        b.dev
            .post_send(b.qpn, SendWr::new(i, SendOp::Send).with_sge(sge(b)))
            .unwrap();
        completions(a, 2);
        completions(b, 1);
    }
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
