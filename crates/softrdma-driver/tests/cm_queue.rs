//! The process CM's event queue: it is the RDMA CM's own (so ucma's backlog and the
//! withdrawal of a destroyed id's events hold for the application), and it is bounded
//! (`CmConfig::event_queue_limit`): over the limit a new id is refused as a backlog drop
//! and a retry notice is dropped, both counted. Judged by counters, not by timing: every
//! wait is "until this counter says so", with a generous deadline.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant as StdInstant};

use softrdma_core::cm::{CmConfig, CmEvent, CmId, CmPort, ReqParams, RXE_CA_ACK_DELAY};
use softrdma_core::rdma_cm::{ConnParam, RdmaCm, RdmaCmEventType as T, RdmaCmId};
use softrdma_core::verbs::QpInitAttr;
use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::{Device, DeviceConfig};
use softrdma_wire::cm::AttrId;
use softrdma_wire::{Gid, Guid};

fn ip(a: u8, b: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, a, b))
}

fn cm_with(seed: u64, f: impl FnOnce(&mut CmConfig)) -> Cm {
    let mut cfg = CmConfig::new(Guid(0), RXE_CA_ACK_DELAY, seed);
    f(&mut cfg);
    Cm::with_config(cfg)
}

fn rc_qp(dev: &Device) -> u32 {
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let (qpn, _) = dev.create_qp(QpInitAttr::rc(pd, cq, 4, 4)).unwrap();
    dev.with_stack(|s| RdmaCm::init_qp(s, qpn)).unwrap();
    qpn
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = StdInstant::now() + Duration::from_secs(10);
    while !f() {
        assert!(StdInstant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `n` RDMA CM ids of `cm` (on `dev`) connecting to `dst`, each with its QP: returns once
/// every REQ is sent.
fn connect_all(cm: &Cm, dev: &Device, dst: SocketAddr, n: usize) -> Vec<RdmaCmId> {
    let src = dev.local_addr().ip();
    let ids: Vec<RdmaCmId> = (0..n).map(|_| cm.with_cm(|r| r.create_id())).collect();
    for id in &ids {
        cm.resolve_addr(id, Some(src), dst).unwrap();
    }
    let mut connecting = 0;
    while connecting < n {
        let Some(Event::Rdma(e)) = cm.wait_event(Duration::from_secs(5)) else {
            panic!("client: no event");
        };
        let id = ids.iter().find(|i| **i == e.id()).unwrap();
        match e.kind() {
            T::AddrResolved => cm.with_cm(|r| r.resolve_route(id)).unwrap(),
            T::RouteResolved => {
                let qpn = rc_qp(dev);
                cm.with_id(id.name(), |r, s, now| {
                    r.connect(now, s, id, Some(qpn), &ConnParam::default())
                })
                .unwrap()
                .unwrap();
                connecting += 1;
            }
            other => panic!("client: {other:?}"),
        }
    }
    ids
}

/// The CONNECT_REQUESTs the server application can take now.
fn take_requests(cm: &Cm) -> Vec<RdmaCmId> {
    let mut got = Vec::new();
    while let Some(e) = cm.poll_event() {
        match e {
            Event::Rdma(e) if e.kind() == T::ConnectRequest => got.push(e.into_new_id().unwrap()),
            other => panic!("server: {other:?}"),
        }
    }
    got
}

/// ucma's backlog holds in the runtime: CONNECT_REQUESTs the application has not taken
/// fill the listener's backlog, and a REQ beyond it is dropped without a REJ and counted.
/// (The runtime used to move every event out of the RDMA CM at once, which freed the
/// backlog slot before the application saw the request: 5 CONNECT_REQUESTs were queued
/// against a backlog of 2, and nothing was counted.)
#[test]
fn rdma_cm_backlog_holds_until_the_application_takes_the_request() {
    let (a_ip, b_ip) = (ip(41, 1), ip(41, 2));
    let (a, b) = (Device::open(a_ip).unwrap(), Device::open(b_ip).unwrap());
    let (cm_a, cm_b) = (Cm::new(41), Cm::new(42));
    cm_a.add_device(&a).unwrap();
    cm_b.add_device(&b).unwrap();
    let dst = SocketAddr::new(b_ip, 7641);
    let listener = cm_b.with_cm(|r| r.listen_on(dst, 2)).unwrap();
    let ids = connect_all(&cm_a, &a, dst, 5);
    wait_for("5 REQs at the server", || {
        cm_b.counters().rx(AttrId::REQ) >= 5
    });
    let c = cm_b.rdma_counters();
    assert_eq!(c.backlog_drops, 3, "{c:?}");
    assert_eq!(cm_b.counters().tx(AttrId::REJ), 0);
    assert_eq!(cm_b.queued_events(), 2);
    let got = take_requests(&cm_b);
    assert_eq!(got.len(), 2);
    assert_eq!(cm_b.table_sizes().half_open, 2);
    cm_b.with_cm(|r| {
        for id in got {
            r.destroy(b.now(), id);
        }
        r.destroy(b.now(), listener);
    });
    cm_a.with_cm(|r| {
        for id in ids {
            r.destroy(a.now(), id);
        }
    });
}

/// Destroying a listener withdraws its queued CONNECT_REQUESTs and destroys their new ids
/// (REJ 28 to the client), as ucma's `ucma_cleanup_ctx_events` does: the application never
/// gets an id of a listener it destroyed. (It used to: the runtime's own copy of the queue
/// kept the event.)
#[test]
fn destroying_a_listener_withdraws_its_queued_connect_requests() {
    let (a_ip, b_ip) = (ip(42, 1), ip(42, 2));
    let (a, b) = (Device::open(a_ip).unwrap(), Device::open(b_ip).unwrap());
    let (cm_a, cm_b) = (Cm::new(43), Cm::new(44));
    cm_a.add_device(&a).unwrap();
    cm_b.add_device(&b).unwrap();
    let dst = SocketAddr::new(b_ip, 7642);
    let listener = cm_b.with_cm(|r| r.listen_on(dst, 0)).unwrap();
    let ids = connect_all(&cm_a, &a, dst, 1);
    wait_for("the CONNECT_REQUEST", || cm_b.has_event());
    cm_b.with_cm(|r| r.destroy(b.now(), listener));
    assert!(cm_b.poll_event().is_none());
    assert_eq!(cm_b.queued_events(), 0);
    assert_eq!(cm_b.id_count(), 0);
    let s = cm_b.table_sizes();
    assert_eq!((s.ids, s.half_open, s.remote_ids), (0, 0, 0), "{s:?}");
    // The client is told: REJECTED, consumer defined (the kernel's destroy in
    // MRA_REQ_SENT).
    let Some(Event::Rdma(e)) = cm_a.wait_event(Duration::from_secs(5)) else {
        panic!("client: no event")
    };
    assert_eq!(e.kind(), T::Rejected, "{e:?}");
    assert!(e.is_consumer_reject());
    wait_for("the REJ counted", || cm_b.counters().tx(AttrId::REJ) == 1);
    cm_a.with_cm(|r| {
        for id in ids {
            r.destroy(a.now(), id);
        }
    });
}

/// A full queue refuses CONNECT_REQUESTs as a backlog drop: the listener's backlog (1024)
/// has room, but the queue limit (3) is reached; the REQs beyond it get no REJ and are
/// counted in `queue_full_drops`. The application then takes what is queued.
#[test]
fn full_event_queue_refuses_connect_requests_without_a_rej() {
    let (a_ip, b_ip) = (ip(43, 1), ip(43, 2));
    let (a, b) = (Device::open(a_ip).unwrap(), Device::open(b_ip).unwrap());
    let cm_a = Cm::new(45);
    let cm_b = cm_with(46, |c| c.event_queue_limit = 3);
    cm_a.add_device(&a).unwrap();
    cm_b.add_device(&b).unwrap();
    let dst = SocketAddr::new(b_ip, 7643);
    let listener = cm_b.with_cm(|r| r.listen_on(dst, 0)).unwrap();
    let ids = connect_all(&cm_a, &a, dst, 6);
    wait_for("6 REQs at the server", || {
        cm_b.counters().rx(AttrId::REQ) >= 6
    });
    let c = cm_b.rdma_counters();
    assert_eq!((c.queue_full_drops, c.backlog_drops), (3, 0), "{c:?}");
    assert_eq!(cm_b.counters().tx(AttrId::REJ), 0);
    assert_eq!(cm_b.queued_events(), 3);
    // Only the queued ones exist: the refused REQs left nothing behind.
    let s = cm_b.table_sizes();
    assert_eq!((s.half_open, s.remote_ids), (3, 3), "{s:?}");
    let got = take_requests(&cm_b);
    assert_eq!(got.len(), 3);
    cm_b.with_cm(|r| {
        for id in got {
            r.destroy(b.now(), id);
        }
        r.destroy(b.now(), listener);
    });
    cm_a.with_cm(|r| {
        for id in ids {
            r.destroy(a.now(), id);
        }
    });
}

const SVC: u64 = 0x0000_0000_0106_4400;

/// An IB CM REQ whose tries are 18 ms apart (PLT 8: 2·1 ms + cvt(12) = 16 ms).
fn req_params(port: CmPort, src: IpAddr, dst: IpAddr, qpn: u32, retries: u8) -> ReqParams {
    ReqParams::new(port, Gid::from(src), Gid::from(dst), SVC, qpn)
        .with_packet_life_time(8)
        .with_starting_psn(0x1234)
        .with_cm_response_timeouts(12, 12)
        .with_flow_control(false)
        .with_max_cm_retries(retries)
}

/// IB CM REQs sent by `cm` on `port` to `dst` (each its own id and QP).
fn ib_reqs(cm: &Cm, dev: &Device, port: CmPort, dst: IpAddr, n: usize, retries: u8) -> Vec<CmId> {
    let src = dev.local_addr().ip();
    (0..n)
        .map(|_| {
            let qpn = rc_qp(dev);
            cm.with(port, |rdma, _, now| {
                let id = rdma.cm_mut().create_id();
                rdma.cm_mut()
                    .send_req(now, &id, &req_params(port, src, dst, qpn, retries))
                    .map(|_| id)
            })
            .unwrap()
            .unwrap()
        })
        .collect()
}

/// A full queue refuses the IB CM's REQ_RECEIVED for an IB CM listener the same way (no
/// REJ): the client's REQ retransmissions get in once the application has taken what was
/// queued, so every client is served in the end.
#[test]
fn full_event_queue_refuses_ib_cm_requests_until_the_application_catches_up() {
    let (a_ip, b_ip) = (ip(44, 1), ip(44, 2));
    let (a, b) = (Device::open(a_ip).unwrap(), Device::open(b_ip).unwrap());
    let cm_a = Cm::new(47);
    let cm_b = cm_with(48, |c| c.event_queue_limit = 2);
    let pa = cm_a.add_device(&a).unwrap();
    let pb = cm_b.add_device(&b).unwrap();
    let listener: CmId = cm_b
        .with(pb, |rdma, _, _| {
            let id = rdma.cm_mut().create_id();
            rdma.cm_mut().listen(&id, SVC).map(|_| id)
        })
        .unwrap()
        .unwrap();
    // 15 retries: the refused REQs keep coming for 16 × 18 ms.
    let ids = ib_reqs(&cm_a, &a, pa, b_ip, 5, 15);
    wait_for("5 REQs at the server", || {
        cm_b.counters().rx(AttrId::REQ) >= 5
    });
    let dropped = cm_b.rdma_counters().queue_full_drops;
    assert!(dropped >= 3, "{dropped}");
    assert_eq!(cm_b.queued_events(), 2);
    assert_eq!(cm_b.table_sizes().half_open, 2);
    // The application takes and rejects what comes; the retransmitted REQs get in.
    let mut served = 0;
    let end = StdInstant::now() + Duration::from_secs(10);
    while served < 5 {
        assert!(StdInstant::now() < end, "served {served} of 5");
        match cm_b.wait_event(Duration::from_millis(100)) {
            Some(Event::Ib(CmEvent::ReqReceived { id, .. })) => {
                cm_b.with(pb, |rdma, _, now| {
                    rdma.cm_mut()
                        .reject(
                            now,
                            id,
                            softrdma_wire::cm::RejectReason::CONSUMER_DEFINED,
                            &[],
                            &[],
                        )
                        .map_err(|e| e.error)
                })
                .unwrap()
                .unwrap();
                served += 1;
            }
            None => {}
            other => panic!("server: {other:?}"),
        }
    }
    assert!(cm_b.rdma_counters().queue_full_drops >= 3);
    // Each of the 5 clients is rejected once (counted when the send completes).
    wait_for("5 REJs", || cm_b.counters().tx(AttrId::REJ) >= 5);
    let mut rejected = 0;
    while rejected < 5 {
        match cm_a.wait_event(Duration::from_secs(5)) {
            Some(Event::Ib(CmEvent::RejReceived { .. })) => rejected += 1,
            Some(Event::Ib(CmEvent::Retry { .. })) => {}
            other => panic!("client: {other:?}"),
        }
    }
    assert_eq!(cm_b.counters().tx(AttrId::REJ), 5);
    cm_b.with(pb, |rdma, _, now| rdma.cm_mut().destroy(now, listener))
        .unwrap();
    cm_a.with(pa, |rdma, _, now| {
        for id in ids {
            rdma.cm_mut().destroy(now, id);
        }
    })
    .unwrap();
}

/// Retry notices are dropped and counted once the queue is full, and the events of ids the
/// application holds are still queued past the limit: 10 REQs to a device that drops
/// them, 5 retries each (50 notices) against a limit of 4, then 10 REQ_ERRORs.
#[test]
fn full_event_queue_drops_retry_notices_but_keeps_the_events_of_held_ids() {
    let (a_ip, b_ip) = (ip(45, 1), ip(45, 2));
    let a = Device::open(a_ip).unwrap();
    // The peer's device drops everything (the REQs are counted as filtered).
    let b = Device::open_with(DeviceConfig::new(b_ip).with_rx_drop(|_, _| true)).unwrap();
    let cm_a = cm_with(49, |c| c.event_queue_limit = 4);
    let pa = cm_a.add_device(&a).unwrap();
    let ids = ib_reqs(&cm_a, &a, pa, b_ip, 10, 5);
    wait_for("10 × 6 REQs at the peer", || {
        b.driver_counters().rx_filtered >= 60
    });
    wait_for("the REQ errors", || cm_a.queued_events() >= 14);
    assert_eq!(cm_a.counters().retries(AttrId::REQ), 50);
    let c = cm_a.rdma_counters();
    assert_eq!((c.retry_notice_drops, c.queue_full_drops), (46, 0), "{c:?}");
    assert_eq!(cm_a.queued_events(), 14);
    let mut got = Vec::new();
    while let Some(Event::Ib(e)) = cm_a.poll_event() {
        got.push(e);
    }
    assert_eq!(got.len(), 14);
    assert!(got[..4]
        .iter()
        .all(|e| matches!(e, CmEvent::Retry { msg, .. } if *msg == AttrId::REQ)));
    assert!(got[4..]
        .iter()
        .all(|e| matches!(e, CmEvent::ReqError { .. })));
    cm_a.with(pa, |rdma, _, now| {
        for id in ids {
            rdma.cm_mut().destroy(now, id);
        }
    })
    .unwrap();
    drop(b);
}

/// Two devices of one `Cm` are two ports of one node: a QP made on a device before it was
/// added survives the move into the CM's node, a connection from one device to the other
/// goes through the one RDMA CM (both its ends' events in the one queue), and a device of
/// one CM cannot be added to another (it would leave its ids behind).
#[test]
fn two_devices_of_one_cm_are_ports_of_one_node() {
    let (a_ip, b_ip) = (ip(49, 1), ip(49, 2));
    let (a, b) = (Device::open(a_ip).unwrap(), Device::open(b_ip).unwrap());
    let early = rc_qp(&a);
    let cm = Cm::new(49);
    let pa = cm.add_device(&a).unwrap();
    let pb = cm.add_device(&b).unwrap();
    assert_ne!(pa, pb);
    assert_eq!(
        cm.add_device(&a).unwrap(),
        pa,
        "adding again names the same port"
    );
    assert!(
        a.query_qp(early).is_ok(),
        "the QP moved with its device into the CM's node"
    );
    let other = Cm::new(50);
    assert!(matches!(
        other.add_device(&b),
        Err(softrdma_driver::cm::Error::OtherCm)
    ));
    let dst = SocketAddr::new(b_ip, 7649);
    let listener = cm.with_cm(|r| r.listen_on(dst, 4)).unwrap();
    let ids = connect_all(&cm, &a, dst, 1);
    let end = StdInstant::now() + Duration::from_secs(10);
    let (mut established, mut server_id) = (0, None);
    while established < 2 {
        assert!(StdInstant::now() < end, "no connection between the ports");
        let Some(Event::Rdma(e)) = cm.wait_event(Duration::from_millis(200)) else {
            continue;
        };
        match e.kind() {
            T::ConnectRequest => {
                let id = e.into_new_id().unwrap();
                let qpn = rc_qp(&b);
                cm.with(pb, |r, s, now| {
                    r.accept(now, s, &id, qpn, &ConnParam::default())
                })
                .unwrap()
                .unwrap();
                server_id = Some(id);
            }
            T::Established => established += 1,
            other => panic!("{other:?}"),
        }
    }
    cm.with_cm(|r| {
        for id in ids.into_iter().chain(server_id) {
            r.destroy(a.now(), id);
        }
        r.destroy(a.now(), listener);
    });
}
