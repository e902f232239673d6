//! The device runtime on loopback: two devices per test, each on its own 127.0.x.y address
//! (port 4791 is fixed by RoCEv2, so tests running in parallel use different addresses).

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use softrdma_core::device::Mtu;
use softrdma_core::verbs::{
    steps_to_rts, AccessFlags, AddressVector, CqId, PdId, QpAttr, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendOp, SendWr, Sge, UdDest, WcStatus, WorkCompletion,
};
use softrdma_driver::{AsyncDevice, Device, DeviceConfig};
use softrdma_wire::link::LinkType;
use softrdma_wire::{frame, pcap, Gid};

fn ip(a: u8, b: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, a, b))
}

struct End {
    dev: Device,
    pd: PdId,
    cq: CqId,
    qpn: u32,
    lkey: u32,
    len: usize,
}

fn end(dev: Device, ty: QpType, len: usize) -> End {
    let pd = dev.alloc_pd().unwrap();
    let keys = dev
        .reg_mr(pd, vec![0u8; len], 0x1000, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let cq = dev.create_cq(64).unwrap();
    let (qpn, _) = dev
        .create_qp(QpInitAttr {
            qp_type: ty,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .unwrap();
    End {
        dev,
        pd,
        cq,
        qpn,
        lkey: keys.lkey,
        len,
    }
}

fn av(peer: IpAddr, sgid_index: u16) -> AddressVector {
    AddressVector {
        dgid: Gid::from_ip(peer),
        sgid_index,
        hop_limit: 1,
        ..AddressVector::default()
    }
}

/// INIT → RTR → RTS for an RC QP, with ibv_rc_pingpong's attributes.
fn connect_rc(e: &End, peer_ip: IpAddr, peer_qpn: u32, my_psn: u32, peer_psn: u32) {
    connect_rc_with(e, peer_ip, peer_qpn, my_psn, peer_psn, 14, 7);
}

fn connect_rc_with(
    e: &End,
    peer_ip: IpAddr,
    peer_qpn: u32,
    my_psn: u32,
    peer_psn: u32,
    timeout: u8,
    retry_cnt: u8,
) {
    let sgid = e.dev.ip_gid_index().unwrap();
    connect_rc_from(
        e, sgid, peer_ip, peer_qpn, my_psn, peer_psn, timeout, retry_cnt,
    );
}

/// [`connect_rc_with`] from the GID at `sgid`.
#[allow(clippy::too_many_arguments)]
fn connect_rc_from(
    e: &End,
    sgid: u16,
    peer_ip: IpAddr,
    peer_qpn: u32,
    my_psn: u32,
    peer_psn: u32,
    timeout: u8,
    retry_cnt: u8,
) {
    let d = &e.dev;
    let attr = QpAttr {
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: peer_qpn,
        rq_psn: peer_psn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: av(peer_ip, sgid),
        timeout,
        retry_cnt,
        rnr_retry: 7,
        sq_psn: my_psn,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    for (a, mask) in steps_to_rts(QpType::Rc, &attr) {
        d.modify_qp(e.qpn, &a, mask).unwrap();
    }
}

fn connect_ud(e: &End, psn: u32) {
    let attr = QpAttr {
        qkey: 0x1111_1111,
        sq_psn: psn,
        ..QpAttr::default()
    };
    for (a, mask) in steps_to_rts(QpType::Ud, &attr) {
        e.dev.modify_qp(e.qpn, &a, mask).unwrap();
    }
}

fn post_recv(e: &End, wr_id: u64) {
    e.dev
        .post_recv(
            e.qpn,
            RecvWr::new(
                wr_id,
                vec![Sge {
                    addr: 0x1000,
                    length: e.len as u32,
                    lkey: e.lkey,
                }],
            ),
        )
        .unwrap();
}

fn send(e: &End, wr_id: u64, len: usize, ud: Option<UdDest>) {
    let mut wr = SendWr::new(wr_id, SendOp::Send).with_sge(Sge {
        addr: 0x1000 + if ud.is_some() { 40 } else { 0 },
        length: len as u32,
        lkey: e.lkey,
    });
    wr.ud = ud;
    e.dev.post_send(e.qpn, wr).unwrap();
}

fn wait_one(e: &End) -> WorkCompletion {
    let mut out = Vec::new();
    let n = e
        .dev
        .wait_cq(e.cq, &mut out, 1, Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(n, 1, "no completion within 5 s on {:?}", e.dev);
    assert_eq!(out[0].status, WcStatus::Success, "{:?}", out[0]);
    out[0]
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// One RC pair, every size in turn, A → B and back, bytes checked.
fn rc_roundtrips(a: Device, b: Device, sizes: &[usize]) {
    let max = *sizes.iter().max().unwrap();
    let ea = end(a, QpType::Rc, max);
    let eb = end(b, QpType::Rc, max);
    let (ipa, ipb) = (ea.dev.local_addr().ip(), eb.dev.local_addr().ip());
    connect_rc(&ea, ipb, eb.qpn, 0x00ab_cdef, 0x0012_3456);
    connect_rc(&eb, ipa, ea.qpn, 0x0012_3456, 0x00ab_cdef);
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(len, i as u8);
        post_recv(&eb, 10);
        post_recv(&ea, 20);
        ea.dev.write_mr(ea.lkey, 0x1000, &data).unwrap();
        send(&ea, 1, len, None);
        let wc = wait_one(&eb);
        assert_eq!(wc.wr_id, 10);
        assert_eq!(wc.byte_len as usize, len);
        let mut got = vec![0u8; len];
        eb.dev.read_mr(eb.lkey, 0x1000, &mut got).unwrap();
        assert_eq!(got, data, "size {len}: B received other bytes");
        // B echoes it back.
        send(&eb, 2, len, None);
        let wa = wait_one(&ea);
        let wa2 = wait_one(&ea);
        let mut ids = [wa.wr_id, wa2.wr_id];
        ids.sort_unstable();
        assert_eq!(ids, [1, 20]);
        let mut back = vec![0u8; len];
        ea.dev.read_mr(ea.lkey, 0x1000, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(wait_one(&eb).wr_id, 2);
    }
    for e in [&ea, &eb] {
        let c = e.dev.counters();
        assert_eq!(c.total_drops(), 0, "{:?}", c);
        let dc = e.dev.driver_counters();
        assert_eq!(
            dc.tx_errors + dc.tx_dropped + dc.tx_wrong_source,
            0,
            "{dc:?}"
        );
    }
}

#[test]
fn rc_background_loop() {
    let a = Device::open_with(DeviceConfig::new(ip(10, 1)).background()).unwrap();
    let b = Device::open_with(DeviceConfig::new(ip(10, 2)).background()).unwrap();
    rc_roundtrips(a, b, &[8, 1024, 4096, 65536]);
}

#[test]
fn rc_inline_busy_poll() {
    // Each end waits inline; the other end must keep making progress too, so run B's
    // loop on a background thread and A's inline.
    let a = Device::open_with(DeviceConfig::new(ip(10, 3)).busy_poll()).unwrap();
    let b = Device::open_with(DeviceConfig::new(ip(10, 4)).background()).unwrap();
    rc_roundtrips(a, b, &[8, 4096, 65536]);
}

/// Two inline busy-polling devices that defer their flushes, each on its own thread: an 8-byte
/// ping-pong of unsignaled SENDs sends one datagram train per round trip and side (the ACK of
/// the previous message rides with the next one), and `progress_wait` ends on a notification.
#[test]
fn rc_defer_flush_one_send_per_round_trip() {
    let cfg = |b| {
        DeviceConfig::new(ip(10, b))
            .busy_poll()
            .with_defer_flush(true)
    };
    let a = Device::open_with(cfg(17)).unwrap();
    let b = Device::open_with(cfg(18)).unwrap();
    let ea = end(a, QpType::Rc, 64);
    let eb = end(b, QpType::Rc, 64);
    let (ipa, ipb) = (ea.dev.local_addr().ip(), eb.dev.local_addr().ip());
    connect_rc(&ea, ipb, eb.qpn, 0x10, 0x20);
    connect_rc(&eb, ipa, ea.qpn, 0x20, 0x10);
    let rounds = 200u64;
    let unsignaled = |e: &End| {
        let mut wr = SendWr::new(0, SendOp::Send).with_sge(Sge {
            addr: 0x1000,
            length: 8,
            lkey: e.lkey,
        });
        wr.signaled = false;
        e.dev.post_send(e.qpn, wr).unwrap();
    };
    for _ in 0..4 {
        post_recv(&ea, 1);
        post_recv(&eb, 2);
    }
    let (a0, b0) = (ea.dev.io_stats(), eb.dev.io_stats());
    let echo = std::thread::spawn(move || {
        for _ in 0..rounds {
            assert_eq!(wait_one(&eb).wr_id, 2);
            post_recv(&eb, 2);
            unsignaled(&eb);
        }
        // The last ACK, then answer retransmissions for a moment (none expected).
        eb.dev.progress_for(Duration::from_millis(20)).unwrap();
        eb
    });
    for _ in 0..rounds {
        unsignaled(&ea);
        assert_eq!(wait_one(&ea).wr_id, 1);
        post_recv(&ea, 1);
    }
    ea.dev.progress_for(Duration::from_millis(20)).unwrap();
    let eb = echo.join().unwrap();
    for (e, before) in [(&ea, a0), (&eb, b0)] {
        let sends = e.dev.io_stats().send_calls - before.send_calls;
        // One per round trip plus the last ACK (two without defer_flush); a little slack for
        // a retransmission on a loaded machine.
        assert!(
            sends <= rounds + rounds / 4,
            "{sends} sendmsg for {rounds} round trips"
        );
        let c = e.dev.counters();
        assert_eq!(c.total_drops(), 0, "{c:?}");
    }
    // progress_wait: a blocking turn on an idle device ends on a notification.
    let n = ea.dev.notifier();
    let t = std::time::Instant::now();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        n.notify().unwrap();
    });
    let worked = ea
        .dev
        .progress_wait(
            softrdma_driver::PollMode::Blocking,
            Some(Duration::from_secs(5)),
        )
        .unwrap();
    assert!(!worked);
    assert!(t.elapsed() < Duration::from_secs(4));
    h.join().unwrap();
}

/// With defer_flush, the ACK that a QP's last receive queued leaves when the QP is
/// destroyed: destroyed, the QP would take it along, and the peer would retry its message
/// until it failed (`ibv_rc_pingpong`'s last ACK). `destroy_qp` sends the transport's queue
/// only; the MADs a CM queued wait for the device's next turn, with the rest of it.
#[test]
fn destroying_a_qp_sends_the_ack_its_last_receive_queued() {
    let ipa = IpAddr::V4(Ipv4Addr::new(127, 35, 2, 1));
    let ipb = IpAddr::V4(Ipv4Addr::new(127, 35, 2, 2));
    let a = Device::open_with(DeviceConfig::new(ipa)).unwrap();
    let b = Device::open_with(DeviceConfig::new(ipb).busy_poll().with_defer_flush(true)).unwrap();
    let ea = end(a, QpType::Rc, 64);
    let eb = end(b, QpType::Rc, 64);
    connect_rc(&ea, ipb, eb.qpn, 0x10, 0x20);
    connect_rc(&eb, ipa, ea.qpn, 0x20, 0x10);
    post_recv(&eb, 2);
    let sends = eb.dev.io_stats().send_calls;
    send(&ea, 1, 8, None);
    // b's turn took the SEND; its ACK waits for b's next turn, which never comes.
    assert_eq!(wait_one(&eb).wr_id, 2);
    assert_eq!(
        eb.dev.io_stats().send_calls,
        sends,
        "the ACK left before the destroy"
    );
    eb.dev.destroy_qp(eb.qpn).unwrap();
    // a's SEND completes, in success: the ACK came (a retry could not be answered).
    assert_eq!(wait_one(&ea).wr_id, 1);
}

#[test]
fn rc_without_gso() {
    let mut ca = DeviceConfig::new(ip(10, 15));
    ca.gso_coalesce = false;
    let mut cb = DeviceConfig::new(ip(10, 16));
    cb.endpoint.gso = false;
    let a = Device::open_with(ca).unwrap();
    let b = Device::open_with(cb).unwrap();
    rc_roundtrips(a.clone(), b.clone(), &[8, 65536]);
    for d in [a, b] {
        let dc = d.driver_counters();
        assert_eq!(dc.tx_sends, dc.tx_datagrams, "{dc:?}");
    }
}

#[test]
fn ud_roundtrip_with_grh() {
    let a = Device::open(ip(10, 5)).unwrap();
    let b = Device::open(ip(10, 6)).unwrap();
    let len = 984;
    let ea = end(a, QpType::Ud, len + 40);
    let eb = end(b, QpType::Ud, len + 40);
    connect_ud(&ea, 1);
    connect_ud(&eb, 2);
    let data = pattern(len, 7);
    ea.dev.write_mr(ea.lkey, 0x1000 + 40, &data).unwrap();
    post_recv(&eb, 5);
    let to_b = UdDest {
        av: av(eb.dev.local_addr().ip(), ea.dev.ip_gid_index().unwrap()),
        remote_qpn: eb.qpn,
        remote_qkey: 0x1111_1111,
    };
    send(&ea, 1, len, Some(to_b));
    assert_eq!(wait_one(&ea).wr_id, 1);
    let wc = wait_one(&eb);
    assert_eq!(wc.byte_len as usize, len + 40);
    assert!(wc.grh);
    assert_eq!(wc.src_qp, ea.qpn);
    let mut got = vec![0u8; len];
    eb.dev.read_mr(eb.lkey, 0x1000 + 40, &mut got).unwrap();
    assert_eq!(got, data);
    let _ = ea.pd;
}

#[test]
fn gid_table_index_1_is_the_ip() {
    let d = Device::open(ip(10, 7)).unwrap();
    let g0 = d.query_gid(1, 0).unwrap();
    let g1 = d.query_gid(1, 1).unwrap();
    assert_eq!(
        &g0.gid.0[..2],
        &[0xfe, 0x80],
        "index 0 = link-local default GID"
    );
    assert_eq!(g1.gid, Gid::from_ip(ip(10, 7)));
    assert_eq!(d.ip_gid_index(), Some(1));
    assert!(d.query_gid(1, 2).is_err());
    let port = d.query_port(1).unwrap();
    assert_eq!(port.active_mtu, Mtu::Mtu1024);
    drop(d);
    let d = Device::open_with(DeviceConfig::new(ip(10, 7)).without_mac()).unwrap();
    assert_eq!(d.ip_gid_index(), Some(0));
}

#[test]
fn wrong_source_gid_is_dropped_and_counted() {
    // sgid index 0 is the IPv6 link-local GID: it cannot leave an IPv4 socket.
    let a = Device::open(ip(10, 8)).unwrap();
    let ea = end(a, QpType::Ud, 64);
    connect_ud(&ea, 1);
    let dst = UdDest {
        av: av(ip(10, 9), 0),
        remote_qpn: 0x11,
        remote_qkey: 0x1111_1111,
    };
    send(&ea, 1, 8, Some(dst));
    let _ = wait_one(&ea);
    assert_eq!(ea.dev.driver_counters().tx_wrong_source, 1);
    assert_eq!(ea.dev.driver_counters().tx_datagrams, 0);
}

#[test]
fn pcap_tap_every_icrc_verifies() {
    let dir = std::env::temp_dir().join(format!("softrdma-tap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pa = dir.join("a.pcap");
    let pb = dir.join("b.pcap");
    {
        let a = Device::open_with(DeviceConfig::new(ip(10, 10)).with_pcap(&pa)).unwrap();
        let b = Device::open_with(DeviceConfig::new(ip(10, 11)).with_pcap(&pb)).unwrap();
        rc_roundtrips(a.clone(), b, &[8, 4096, 65536]);
        // The 64-packet messages left as GSO sends (fewer sendmsg calls than datagrams).
        let dc = a.driver_counters();
        assert!(dc.tx_sends < dc.tx_datagrams, "{dc:?}");
    }
    for (path, me) in [(&pa, ip(10, 10)), (&pb, ip(10, 11))] {
        let bytes = std::fs::read(path).unwrap();
        let (recs, err) = pcap::read_all(&bytes).unwrap();
        assert!(err.is_none(), "{err:?}");
        // 3 sizes × (A→B message + B→A message) with 1 + 4 + 64 packets each, plus ACKs.
        let data_pkts = 2 * (1 + 4 + 64);
        assert!(recs.len() >= data_pkts, "{} records", recs.len());
        let mut sent = 0;
        let mut rcvd = 0;
        let mut max_sent_id = 0u16;
        for r in &recs {
            let (_, info) = frame::dissect_frame(LinkType::ETHERNET, r.data);
            assert!(info.malformed.is_empty(), "{:?}", info.malformed);
            assert!(info.roce, "{}", info.info);
            assert_eq!(info.icrc_ok, Some(true), "ICRC of {}", info.info);
            // The IP layer itself says the same (wire::icrc over the synthesised header).
            assert_eq!(softrdma_wire::icrc::verify(&r.data[14..]), Ok(true));
            if info.src == Some(me) {
                assert_eq!(info.src_port, Some(4791));
                // IPv4 ID = index within the GSO send (Ethernet 14 + ID at IP offset 4).
                max_sent_id = max_sent_id.max(u16::from_be_bytes([r.data[18], r.data[19]]));
                sent += 1;
            } else {
                assert_eq!(info.dst, Some(me));
                rcvd += 1;
            }
        }
        assert!(sent > 0 && rcvd > 0);
        assert!(max_sent_id > 0, "no GSO send: every IP ID 0");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ----- async -----

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// A minimal executor: polls on this thread, parks between wake-ups.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let start = Instant::now();
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "future never resolved"
        );
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

#[test]
fn async_poll_cq_wait() {
    let a = AsyncDevice::open(ip(10, 12)).unwrap();
    let b = AsyncDevice::open(ip(10, 13)).unwrap();
    let ea = end(a.device().clone(), QpType::Rc, 4096);
    let eb = end(b.device().clone(), QpType::Rc, 4096);
    connect_rc(&ea, ip(10, 13), eb.qpn, 100, 200);
    connect_rc(&eb, ip(10, 12), ea.qpn, 200, 100);
    for round in 0..20u64 {
        post_recv(&eb, 1000 + round);
        send(&ea, round, 4096, None);
        let wcs = block_on(b.poll_cq_wait(eb.cq, 4)).unwrap();
        assert_eq!(wcs[0].wr_id, 1000 + round);
        let wcs = block_on(a.poll_cq_wait(ea.cq, 4)).unwrap();
        assert_eq!(wcs[0].wr_id, round);
    }
    assert!(AsyncDevice::new(
        Device::open_with(DeviceConfig::new(ip(10, 14)).busy_poll()).unwrap()
    )
    .is_err());
}

// ----- tokio -----
//
// The same futures under tokio: both ends of an RC ping-pong run as tokio tasks that only ever
// wait in `AsyncDevice::poll_cq_wait`, so each round trip needs the device loop thread (not a
// tokio thread) to wake a parked tokio worker. Every wait has a timeout: a lost wake-up fails
// the test instead of being papered over by a polling interval, as `block_on` above would.

/// The next completion on `e`'s CQ: from `backlog` (completions an earlier wait returned
/// together) or from a `poll_cq_wait` that must resolve within 5 s.
async fn next_wc(
    a: &AsyncDevice,
    e: &End,
    backlog: &mut std::collections::VecDeque<WorkCompletion>,
) -> WorkCompletion {
    if backlog.is_empty() {
        let wcs = tokio::time::timeout(Duration::from_secs(5), a.poll_cq_wait(e.cq, 4))
            .await
            .unwrap_or_else(|_| panic!("poll_cq_wait never woke on {:?}", e.dev))
            .unwrap();
        assert!(!wcs.is_empty(), "poll_cq_wait resolved with nothing");
        backlog.extend(wcs);
    }
    let wc = backlog.pop_front().unwrap();
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    wc
}

/// `ibv_rc_pingpong` over two AsyncDevices: the server (B) echoes every message the client
/// (A) sends, each end a separate tokio task; bytes are checked at both ends.
async fn tokio_rc_pingpong(ipa: IpAddr, ipb: IpAddr, len: usize, iters: u64) {
    let a = AsyncDevice::open(ipa).unwrap();
    let b = AsyncDevice::open(ipb).unwrap();
    let ea = end(a.device().clone(), QpType::Rc, len);
    let eb = end(b.device().clone(), QpType::Rc, len);
    connect_rc(&ea, ipb, eb.qpn, 0x10, 0x20);
    connect_rc(&eb, ipa, ea.qpn, 0x20, 0x10);
    post_recv(&eb, 1000);
    let server = tokio::spawn(async move {
        let mut backlog = Default::default();
        for i in 0..iters {
            let wc = next_wc(&b, &eb, &mut backlog).await;
            assert_eq!((wc.wr_id, wc.byte_len as usize), (1000 + i, len));
            let mut got = vec![0u8; len];
            eb.dev.read_mr(eb.lkey, 0x1000, &mut got).unwrap();
            assert_eq!(got, pattern(len, i as u8), "server, iteration {i}");
            // Re-arm before answering: the client's next message may follow at once.
            post_recv(&eb, 1000 + i + 1);
            send(&eb, 2000 + i, len, None);
            assert_eq!(next_wc(&b, &eb, &mut backlog).await.wr_id, 2000 + i);
        }
        eb.dev.counters()
    });
    let client = tokio::spawn(async move {
        let mut backlog = Default::default();
        for i in 0..iters {
            post_recv(&ea, 3000 + i);
            ea.dev
                .write_mr(ea.lkey, 0x1000, &pattern(len, i as u8))
                .unwrap();
            send(&ea, i, len, None);
            // The send's ACK and the echo race; both must come, in either order.
            let mut ids = [0u64; 2];
            for id in &mut ids {
                *id = next_wc(&a, &ea, &mut backlog).await.wr_id;
            }
            ids.sort_unstable();
            assert_eq!(ids, [i, 3000 + i], "client, iteration {i}");
            let mut back = vec![0u8; len];
            ea.dev.read_mr(ea.lkey, 0x1000, &mut back).unwrap();
            assert_eq!(back, pattern(len, i as u8), "client, echo {i}");
        }
        ea.dev.counters()
    });
    for c in [client.await.unwrap(), server.await.unwrap()] {
        assert_eq!(c.total_drops(), 0, "{c:?}");
    }
}

// Addresses of their own (not 127.0.0.1/2): tests run in parallel, and `softrdma perf` or
// `tests/loopback.rs` may hold 4791 on those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_multi_thread_rc_pingpong() {
    for len in [8, 65536] {
        tokio_rc_pingpong(ip(30, 1), ip(30, 2), len, 50).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn tokio_current_thread_rc_pingpong() {
    for len in [8, 65536] {
        tokio_rc_pingpong(ip(30, 3), ip(30, 4), len, 50).await;
    }
}

#[test]
fn rc_over_ipv6_two_qps_one_device() {
    let v6: IpAddr = "::1".parse().unwrap();
    let d = Device::open(v6).unwrap();
    assert_eq!(d.ip_gid_index(), Some(1));
    let ea = end(d.clone(), QpType::Rc, 8192);
    let eb = end(d, QpType::Rc, 8192);
    connect_rc(&ea, v6, eb.qpn, 10, 20);
    connect_rc(&eb, v6, ea.qpn, 20, 10);
    post_recv(&eb, 7);
    ea.dev.write_mr(ea.lkey, 0x1000, &pattern(5000, 3)).unwrap();
    send(&ea, 1, 5000, None);
    let mut out = Vec::new();
    let n = eb
        .dev
        .wait_cq(eb.cq, &mut out, 4, Some(Duration::from_secs(3)))
        .unwrap();
    assert!(
        n >= 1,
        "counters {:?} driver {:?}",
        eb.dev.counters(),
        eb.dev.driver_counters()
    );
}

/// Timers run in the device loop: an RC send to a peer that never answers ends in
/// RETRY_EXC_ERR after retry_cnt retransmissions, on a background loop and inline.
#[test]
fn dead_peer_retry_exceeded() {
    for (i, cfg) in [
        DeviceConfig::new(ip(10, 20)).background(),
        DeviceConfig::new(ip(10, 21)).busy_poll(),
    ]
    .into_iter()
    .enumerate()
    {
        let e = end(Device::open_with(cfg).unwrap(), QpType::Rc, 64);
        let nobody = ip(10, 99);
        // A short ACK timeout: 4.096 µs × 2^12 ≈ 16.8 ms, 2 retries.
        connect_rc_with(&e, nobody, 0x42, 1, 1, 12, 2);
        let t = Instant::now();
        send(&e, 9, 64, None);
        let mut out = Vec::new();
        let n = e
            .dev
            .wait_cq(e.cq, &mut out, 1, Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(n, 1, "case {i}: no completion");
        assert_eq!(out[0].status, WcStatus::RetryExcErr, "case {i}");
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(45) && took < Duration::from_secs(2),
            "case {i}: {took:?}"
        );
        // 1 send + 2 retransmissions.
        assert_eq!(e.dev.driver_counters().tx_datagrams, 3, "case {i}");
        assert_eq!(e.dev.query_qp(e.qpn).unwrap().qp_state, QpState::Err);
    }
}

/// Multicast over loopback: two devices join 239.23.0.7 and attach a UD QP each; a third
/// sends once to the group's GID (QPN 0xFFFFFF) and both members receive the one datagram;
/// after the leave (and detach) the group is silent for that device, the other still hears it.
#[test]
fn ud_multicast_reaches_every_joined_device() {
    let group = IpAddr::V4(Ipv4Addr::new(239, 23, 0, 7));
    let mgid = Gid::from_ip(group);
    let len = 64;
    let tx = end(Device::open(ip(23, 1)).unwrap(), QpType::Ud, len + 40);
    let r1 = end(Device::open(ip(23, 2)).unwrap(), QpType::Ud, len + 40);
    let r2 = end(Device::open(ip(23, 3)).unwrap(), QpType::Ud, len + 40);
    for e in [&tx, &r1, &r2] {
        connect_ud(e, 0);
    }
    for r in [&r1, &r2] {
        r.dev.join_multicast(group).unwrap();
        r.dev.with_stack(|s| s.attach_mcast(r.qpn, mgid)).unwrap();
        assert_eq!(r.dev.multicast_groups(), vec![group]);
        post_recv(r, 1);
        post_recv(r, 2);
    }
    let data = pattern(len, 9);
    tx.dev.write_mr(tx.lkey, 0x1000 + 40, &data).unwrap();
    let to_group = UdDest {
        av: av(group, tx.dev.ip_gid_index().unwrap()),
        remote_qpn: 0xFF_FFFF,
        remote_qkey: 0x1111_1111,
    };
    send(&tx, 1, len, Some(to_group));
    for r in [&r1, &r2] {
        let wc = wait_one(r);
        assert_eq!((wc.byte_len as usize, wc.src_qp), (len + 40, tx.qpn));
        let mut got = vec![0u8; len];
        r.dev.read_mr(r.lkey, 0x1000 + 40, &mut got).unwrap();
        assert_eq!(got, data);
        // The GRH area's IPv4 destination is the group.
        let mut grh = [0u8; 40];
        r.dev.read_mr(r.lkey, 0x1000, &mut grh).unwrap();
        assert_eq!(&grh[36..40], &[239, 23, 0, 7]);
    }
    r1.dev.leave_multicast(group);
    r1.dev
        .with_stack(|s| s.detach_mcast(r1.qpn, &mgid))
        .unwrap();
    assert!(r1.dev.multicast_groups().is_empty());
    send(&tx, 2, len, Some(to_group));
    wait_one(&r2);
    let mut out = Vec::new();
    let n = r1
        .dev
        .wait_cq(r1.cq, &mut out, 1, Some(Duration::from_millis(300)))
        .unwrap();
    assert_eq!(n, 0, "{out:?}");
    r2.dev.leave_multicast(group);
}

/// A device serving two addresses ([`DeviceConfig::with_more_ips`]): both are RoCEv2 GIDs
/// after the link-local one, in order; a QP whose sgid_index names the second sends from it
/// (the peer sees that source) and receives at it (the peer's replies and ACKs go there), in
/// the device's one loop over its two sockets. A second device asking for an address the
/// first holds leaves it out of its sockets and its GID table.
#[test]
fn a_device_serves_every_address_of_its_gid_table() {
    serves_every_address(22, |c| c.background());
}

/// [`a_device_serves_every_address_of_its_gid_table`] with the two-socket device's loop run
/// by the application's busy-polling waits.
#[test]
fn an_inline_device_serves_every_address_of_its_gid_table() {
    serves_every_address(24, DeviceConfig::busy_poll);
}

fn serves_every_address(net: u8, progress: fn(DeviceConfig) -> DeviceConfig) {
    let (a1, a2, b1) = (ip(net, 1), ip(net, 2), ip(net, 3));
    let a = Device::open_with(progress(DeviceConfig::new(a1).with_more_ips([a2]))).unwrap();
    let table: Vec<Gid> = a.gid_table().iter().map(|e| e.gid).collect();
    assert_eq!(table.len(), 3, "{table:?}");
    assert_eq!(&table[0].0[..2], &[0xfe, 0x80]);
    assert_eq!(table[1], Gid::from_ip(a1));
    assert_eq!(table[2], Gid::from_ip(a2));
    assert_eq!(
        a.local_addrs().iter().map(|s| s.ip()).collect::<Vec<_>>(),
        [a1, a2]
    );
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let b = Device::open_with(DeviceConfig::new(b1).with_rx_drop(move |src, _| {
        s2.lock().unwrap().push(src.ip());
        false
    }))
    .unwrap();
    let ea = end(a.clone(), QpType::Rc, 4096);
    let eb = end(b, QpType::Rc, 4096);
    connect_rc_from(&ea, 2, b1, eb.qpn, 100, 200, 14, 7);
    connect_rc(&eb, a2, ea.qpn, 200, 100);
    for round in 0..3u8 {
        let data = pattern(3000, round);
        post_recv(&eb, 10);
        post_recv(&ea, 20);
        ea.dev.write_mr(ea.lkey, 0x1000, &data).unwrap();
        send(&ea, 1, 3000, None);
        assert_eq!(wait_one(&eb).wr_id, 10);
        send(&eb, 2, 3000, None);
        let mut ids = [wait_one(&ea).wr_id, wait_one(&ea).wr_id];
        ids.sort_unstable();
        assert_eq!(ids, [1, 20]);
        assert_eq!(wait_one(&eb).wr_id, 2);
        let mut back = vec![0u8; 3000];
        ea.dev.read_mr(ea.lkey, 0x1000, &mut back).unwrap();
        assert_eq!(back, data);
    }
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|s| *s == a2),
        "B saw sources other than A's second address: {seen:?}"
    );
    let dc = a.driver_counters();
    assert_eq!(
        dc.tx_wrong_source + dc.tx_errors + dc.tx_dropped,
        0,
        "{dc:?}"
    );
    assert_eq!(a.counters().total_drops(), 0);

    let c = Device::open_with(DeviceConfig::new(ip(net, 4)).with_more_ips([a2])).unwrap();
    assert_eq!(c.local_addrs().len(), 1);
    assert_eq!(c.gid_table().len(), 2, "{:?}", c.gid_table());
}
