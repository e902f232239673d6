//! The CM inside the device runtime: retransmissions run while the application is blocked
//! elsewhere, and QP1 serves other management classes next to the CM.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as StdInstant};

use softrdma_core::cm::{CmEvent, CmId, CmPort, RepParams, ReqParams};
use softrdma_core::mad::{form_tid, AgentId, MadAddr, MadEvent, SendParams};
use softrdma_core::rdma_cm::RdmaCm;
use softrdma_core::verbs::QpInitAttr;
use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::mad::{MadClient, PortCtx};
use softrdma_driver::{Device, DeviceConfig};
use softrdma_wire::cm::AttrId;
use softrdma_wire::mad::{Mad, MadHeader, MadStatus, Method, MgmtClass, BASE_VERSION};
use softrdma_wire::Gid;

fn ip(a: u8, b: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, a, b))
}

/// The MAD inside a RoCEv2 UDP payload to QP1: BTH (12) + DETH (8), then the MAD.
fn qp1_mad(payload: &[u8]) -> Option<&[u8]> {
    let dest_qp = u32::from_be_bytes([0, *payload.get(5)?, *payload.get(6)?, *payload.get(7)?]);
    (dest_qp == 1).then(|| payload.get(20..)).flatten()
}

fn rc_qp(dev: &Device) -> u32 {
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let (qpn, _) = dev.create_qp(QpInitAttr::rc(pd, cq, 4, 4)).unwrap();
    dev.with_stack(|s| RdmaCm::init_qp(s, qpn)).unwrap();
    qpn
}

const SVC: u64 = 0x0000_0000_0106_2000;

fn req_params(port: CmPort, src: IpAddr, dst: IpAddr, qpn: u32) -> ReqParams {
    ReqParams::new(port, Gid::from(src), Gid::from(dst), SVC, qpn)
        // cm_convert_to_ms(8) = 1 ms each way, + cvt(12) = 16 ms: 18 ms per try.
        .with_packet_life_time(8)
        .with_starting_psn(0x1234)
        // The passive side's REP waits cvt(19) = 2 s per try: longer than the active
        // application stays away.
        .with_cm_response_timeouts(12, 19)
        .with_flow_control(false)
        .with_max_cm_retries(5)
}

/// The next IB CM event other than a retry notice.
fn next_ib(cm: &Cm, within: Duration) -> CmEvent {
    loop {
        match cm.wait_event(within) {
            Some(Event::Ib(CmEvent::Retry { .. })) => {}
            Some(Event::Ib(e)) => return e,
            other => panic!("expected an IB CM event, got {other:?}"),
        }
    }
}

/// The IB CM's REQ retransmission runs on the runtime's timers: the passive side's device
/// drops the first two REQs while the active application sits in `wait_cq` on a CQ that
/// never completes; the third REQ arrives one REQ timeout after the second, the REP comes
/// back, and all of it happened before the application looked at the CM.
#[test]
fn req_retransmitted_on_time_while_the_application_waits_elsewhere() {
    let (a_ip, b_ip) = (ip(31, 1), ip(31, 2));
    let a = Device::open(a_ip).unwrap();
    let dropped = Arc::new(AtomicU32::new(0));
    let arrivals = Arc::new(Mutex::new(Vec::<StdInstant>::new()));
    let (d, t) = (dropped.clone(), arrivals.clone());
    let b = Device::open_with(DeviceConfig::new(b_ip).with_rx_drop(move |_, payload| {
        let is_req = qp1_mad(payload)
            .is_some_and(|m| m.get(1) == Some(&0x07) && m.get(16..18) == Some(&[0x00, 0x10]));
        if !is_req {
            return false;
        }
        t.lock().unwrap().push(StdInstant::now());
        d.fetch_add(1, Ordering::SeqCst) < 2
    }))
    .unwrap();
    let (cm_a, cm_b) = (Cm::new(1), Cm::new(2));
    let pa = cm_a.add_device(&a).unwrap();
    let pb = cm_b.add_device(&b).unwrap();

    // B: an IB CM listener; a thread answers the REQ with a REP (the passive application).
    let listener: CmId = cm_b
        .with(pb, |rdma, _, _| {
            let id = rdma.cm_mut().create_id();
            rdma.cm_mut().listen(&id, SVC).map(|_| id)
        })
        .unwrap()
        .unwrap();
    let qb = rc_qp(&b);
    let cmb = cm_b.clone();
    let passive = std::thread::spawn(move || {
        let CmEvent::ReqReceived { id, .. } = next_ib(&cmb, Duration::from_secs(5)) else {
            panic!("no REQ_RECEIVED")
        };
        let rep = RepParams {
            qp_num: qb,
            starting_psn: 0x4321,
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            ..RepParams::default()
        };
        cmb.with(pb, |rdma, _, now| rdma.cm_mut().send_rep(now, &id, &rep))
            .unwrap()
            .unwrap();
        let ev = next_ib(&cmb, Duration::from_secs(5));
        assert!(matches!(ev, CmEvent::RtuReceived { .. }), "{ev:?}");
        (id, ev)
    });

    // A: the REQ, then the application blocks on a CQ nothing will complete.
    let qa = rc_qp(&a);
    let t0 = StdInstant::now();
    let id_a: CmId = cm_a
        .with(pa, |rdma, _, now| {
            let id = rdma.cm_mut().create_id();
            rdma.cm_mut()
                .send_req(now, &id, &req_params(pa, a_ip, b_ip, qa))
                .map(|_| id)
        })
        .unwrap()
        .unwrap();
    let idle_cq = a.create_cq(1).unwrap();
    let mut wcs = Vec::new();
    assert_eq!(
        a.wait_cq(idle_cq, &mut wcs, 1, Some(Duration::from_millis(1000)))
            .unwrap(),
        0
    );
    assert!(t0.elapsed() >= Duration::from_millis(1000));

    // Everything happened while the application was away: the REQ and its two dropped
    // tries, and more tries after the third when the passive thread, not scheduled within
    // one 18 ms timeout on a loaded machine, had not sent its REP yet (seen at load 12 on 2
    // cores: 4 arrivals). Retransmitting then is the CM doing its job, not a fault.
    let times = arrivals.lock().unwrap().clone();
    assert!(
        times.len() >= 3,
        "REQ, 2 retransmissions at least: {times:?}"
    );
    // Never early: the k-th retransmission leaves k timeouts after the REQ, which left
    // after t0. Late only by scheduling delay (2 loaded cores in CI). Arrival gaps alone
    // are not a measure: the first arrival can be the late one.
    let since: Vec<Duration> = times.iter().map(|t| t.duration_since(t0)).collect();
    for (k, at) in since.iter().enumerate().skip(1) {
        assert!(
            *at >= Duration::from_millis(17 * k as u64),
            "REQ retransmission {k} arrived {at:?} after t0 (timeout 18 ms): {since:?}"
        );
    }
    for w in times.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap < Duration::from_millis(300),
            "REQ retransmitted {gap:?} after the previous one (timeout 18 ms): {since:?}"
        );
    }
    let mut seen = Vec::new();
    while let Some(Event::Ib(e)) = cm_a.poll_event() {
        seen.push(e);
    }
    let retries: Vec<u32> = seen
        .iter()
        .filter_map(|e| match e {
            CmEvent::Retry { msg, attempt, .. } if *msg == AttrId::REQ => Some(*attempt),
            _ => None,
        })
        .collect();
    // One notice a retransmission, numbered from 1 (at least the two dropped).
    assert!(retries.len() >= 2, "{seen:?}");
    assert_eq!(
        retries,
        (1..=retries.len() as u32).collect::<Vec<_>>(),
        "{seen:?}"
    );
    assert!(
        matches!(seen.last(), Some(CmEvent::RepReceived { .. })),
        "{seen:?}"
    );
    cm_a.with(pa, |rdma, _, now| rdma.cm_mut().send_rtu(now, &id_a, &[]))
        .unwrap()
        .unwrap();
    let (id_b, _) = passive.join().unwrap();
    assert_eq!(cm_a.counters().retries(AttrId::REQ), retries.len() as u64);
    assert_eq!(b.driver_counters().rx_filtered, 2);
    cm_a.with(pa, |rdma, _, now| rdma.cm_mut().destroy(now, id_a))
        .unwrap();
    cm_b.with(pb, |rdma, _, now| {
        rdma.cm_mut().destroy(now, id_b);
        rdma.cm_mut().destroy(now, listener);
    })
    .unwrap();
}

/// A device-management client on QP1: answers every DM Get with a GetResp echoing the
/// attribute, and records what it saw.
struct DmAgent {
    agent: Mutex<Option<AgentId>>,
    seen: Mutex<Vec<MadEvent>>,
    answer: bool,
}

impl MadClient for DmAgent {
    fn owns(&self, agent: AgentId) -> bool {
        *self.agent.lock().unwrap() == Some(agent)
    }
    fn handle_mad(&self, ctx: &mut PortCtx<'_>, ev: MadEvent) {
        if let (
            true,
            MadEvent::Received {
                agent, mad, from, ..
            },
        ) = (self.answer, &ev)
        {
            if mad.header.method == Method::GET {
                let mut r = (**mad).clone();
                r.header.method = Method::GET_RESP;
                ctx.mad
                    .send(ctx.now, *agent, *from, r, SendParams::ONCE)
                    .unwrap();
            }
        }
        self.seen.lock().unwrap().push(ev);
    }
}

fn dm_agent(dev: &Device, class: MgmtClass, answer: bool) -> Arc<DmAgent> {
    dev.attach_mad_client(|mad, _| {
        let agent = mad.register(class, 1)?;
        Ok::<_, softrdma_core::mad::MadError>(Arc::new(DmAgent {
            agent: Mutex::new(Some(agent)),
            seen: Mutex::new(Vec::new()),
            answer,
        }))
    })
    .unwrap()
}

fn get(class: MgmtClass, version: u8, tid: u64, attr: u16) -> Mad {
    Mad::new(
        MadHeader {
            base_version: BASE_VERSION,
            mgmt_class: class,
            class_version: version,
            method: Method::GET,
            status: MadStatus::SUCCESS,
            class_specific: 0,
            tid,
            attr_id: attr,
            reserved: 0,
            attr_mod: 0,
        },
        &[0x5a; 16],
    )
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = StdInstant::now() + Duration::from_secs(5);
    while !f() {
        assert!(StdInstant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// QP1 serves every class: a DM Get reaches B's DM client (and its answer A's) while a CM
/// connection is set up on the same QP1s, and a Get of a class nobody registered (Perf) is
/// answered by the MAD layer with status 0x000C as mad.c does.
#[test]
fn dm_client_and_cm_share_qp1_and_unclaimed_classes_get_unsupported() {
    let (a_ip, b_ip) = (ip(32, 1), ip(32, 2));
    let (a, b) = (Device::open(a_ip).unwrap(), Device::open(b_ip).unwrap());
    let (cm_a, cm_b) = (Cm::new(3), Cm::new(4));
    let pa = cm_a.add_device(&a).unwrap();
    let pb = cm_b.add_device(&b).unwrap();
    let dm_a = dm_agent(&a, MgmtClass::DEVICE_MGMT, false);
    let dm_b = dm_agent(&b, MgmtClass::DEVICE_MGMT, true);
    let perf_a = dm_agent(&a, MgmtClass::PERF_MGMT, false);
    // A second client for the same class and version is refused (mad.c: -EINVAL).
    assert!(b
        .attach_mad_client(
            |mad, _| mad
                .register(MgmtClass::DEVICE_MGMT, 1)
                .map(|_| Arc::new(DmAgent {
                    agent: Mutex::new(None),
                    seen: Mutex::new(Vec::new()),
                    answer: false,
                }))
        )
        .is_err());

    // CM traffic: B listens, A connects; B accepts at the IB CM level from another thread.
    let listener = cm_b
        .with(pb, |rdma, _, _| {
            let id = rdma.cm_mut().create_id();
            rdma.cm_mut().listen(&id, SVC).map(|_| id)
        })
        .unwrap()
        .unwrap();
    let (qa, qb) = (rc_qp(&a), rc_qp(&b));
    let cmb = cm_b.clone();
    let passive = std::thread::spawn(move || {
        let CmEvent::ReqReceived { id, .. } = next_ib(&cmb, Duration::from_secs(5)) else {
            panic!("no REQ_RECEIVED")
        };
        let rep = RepParams {
            qp_num: qb,
            starting_psn: 7,
            responder_resources: 1,
            initiator_depth: 1,
            ..RepParams::default()
        };
        cmb.with(pb, |rdma, _, now| rdma.cm_mut().send_rep(now, &id, &rep))
            .unwrap()
            .unwrap();
        id
    });
    let id_a = cm_a
        .with(pa, |rdma, _, now| {
            let id = rdma.cm_mut().create_id();
            rdma.cm_mut()
                .send_req(now, &id, &req_params(pa, a_ip, b_ip, qa))
                .map(|_| id)
        })
        .unwrap()
        .unwrap();

    // Meanwhile, the DM Get and the Perf Get from A.
    let agent_a = dm_a.agent.lock().unwrap().unwrap();
    let to_b = MadAddr::gsi(Gid::from(b_ip));
    let expect = SendParams {
        timeout: softrdma_core::time::Duration::from_millis(500),
        retries: 3,
        expects_response: true,
    };
    // A Perf client on A (so the answer has somewhere to go), none on B.
    let perf = perf_a.agent.lock().unwrap().unwrap();
    a.with_mad(|ctx| {
        let dm = get(MgmtClass::DEVICE_MGMT, 1, form_tid(agent_a, 1), 0x0010);
        ctx.mad.send(ctx.now, agent_a, to_b, dm, expect).unwrap();
        let pm = get(MgmtClass::PERF_MGMT, 1, form_tid(perf, 2), 0x0012);
        ctx.mad.send(ctx.now, perf, to_b, pm, expect).unwrap();
    });
    let id_b = passive.join().unwrap();
    let ev = next_ib(&cm_a, Duration::from_secs(5));
    assert!(matches!(ev, CmEvent::RepReceived { .. }), "{ev:?}");

    wait_for("the DM GetResp on A", || {
        dm_a.seen.lock().unwrap().iter().any(|e| {
            matches!(e, MadEvent::Received { mad, response_to: Some(_), .. }
                if mad.header.method == Method::GET_RESP && mad.header.status == MadStatus::SUCCESS)
        })
    });
    let b_saw = dm_b.seen.lock().unwrap().clone();
    assert!(b_saw.iter().any(|e| matches!(e,
        MadEvent::Received { mad, response_to: None, .. }
            if mad.header.mgmt_class == MgmtClass::DEVICE_MGMT && mad.header.attr_id == 0x0010)));
    // B's layer answered the Perf Get itself, with status 0x000C.
    wait_for("the unsupported answer", || {
        perf_a.seen.lock().unwrap().iter().any(|e| {
            matches!(e, MadEvent::Received { mad, response_to: Some(_), .. }
                if mad.header.method == Method::GET_RESP && mad.header.status == MadStatus(0x000c))
        })
    });
    let (cb, _, orphaned) = b.mad_counters();
    assert_eq!((cb.unsupported_replies, orphaned), (1, 0));
    assert!(dm_b
        .seen
        .lock()
        .unwrap()
        .iter()
        .all(|e| !matches!(e, MadEvent::Received { mad, .. } if mad.header.mgmt_class == MgmtClass::PERF_MGMT)));
    cm_a.with(pa, |rdma, _, now| rdma.cm_mut().destroy(now, id_a))
        .unwrap();
    cm_b.with(pb, |rdma, _, now| {
        rdma.cm_mut().destroy(now, id_b);
        rdma.cm_mut().destroy(now, listener);
    })
    .unwrap();
}

/// The CM's events as a future: an RDMA CM connection set up between two devices with both
/// sides awaiting `Cm::next_event` under tokio (threaded devices: nobody polls).
#[test]
fn rdma_cm_events_arrive_as_futures_under_tokio() {
    use softrdma_core::rdma_cm::{ConnParam, RdmaCmEventType as T};
    use std::net::SocketAddr;
    let (a_ip, b_ip) = (ip(33, 1), ip(33, 2));
    let (a, b) = (Device::open(a_ip).unwrap(), Device::open(b_ip).unwrap());
    let (cm_a, cm_b) = (Cm::new(5), Cm::new(6));
    cm_a.add_device(&a).unwrap();
    cm_b.add_device(&b).unwrap();
    let (qa, qb) = (rc_qp(&a), rc_qp(&b));
    let dst = SocketAddr::new(b_ip, 7600);
    let listener = cm_b.with_cm(|r| r.listen_on(dst, 0)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let rdma = |e: Event| match e {
            Event::Rdma(e) => Some(e),
            Event::Ib(_) => None,
        };
        let next = |cm: &Cm| {
            let cm = cm.clone();
            async move {
                loop {
                    let e = tokio::time::timeout(Duration::from_secs(5), cm.next_event())
                        .await
                        .expect("event within 5 s");
                    if let Some(e) = rdma(e) {
                        return e;
                    }
                }
            }
        };
        let id = cm_a.with_cm(|r| r.create_id());
        cm_a.resolve_addr(&id, Some(a_ip), dst).unwrap();
        assert_eq!(next(&cm_a).await.kind(), T::AddrResolved);
        cm_a.with_cm(|r| r.resolve_route(&id)).unwrap();
        assert_eq!(next(&cm_a).await.kind(), T::RouteResolved);
        cm_a.with_id(id.name(), |r, s, now| {
            r.connect(now, s, &id, Some(qa), &ConnParam::default())
        })
        .unwrap()
        .unwrap();
        let req = next(&cm_b).await;
        assert_eq!(req.kind(), T::ConnectRequest);
        let sid = req.into_new_id().unwrap();
        cm_b.with_id(sid.name(), |r, s, now| {
            r.accept(now, s, &sid, qb, &ConnParam::default())
        })
        .unwrap()
        .unwrap();
        assert_eq!(next(&cm_a).await.kind(), T::Established);
        assert_eq!(next(&cm_b).await.kind(), T::Established);
        cm_a.with_id(id.name(), |r, s, now| r.disconnect(now, s, &id))
            .unwrap()
            .unwrap();
        assert_eq!(next(&cm_b).await.kind(), T::Disconnected);
        cm_a.with_cm(|r| r.destroy(a.now(), id));
        cm_b.with_cm(|r| {
            r.destroy(b.now(), sid);
            r.destroy(b.now(), listener);
        });
    });
}

/// A burst of MADs larger than QP1's receive queue (512 buffers) that arrives within one loop
/// turn is served whole: the turn reposts QP1's buffers between received batches instead of
/// dropping what it has no buffer for (a thousand DREQs at once lost a hundred of them, each
/// then retried after the CM's timeout).
#[test]
fn a_mad_burst_larger_than_qp1s_receive_queue_is_not_dropped() {
    let (a_ip, b_ip) = (ip(34, 1), ip(34, 2));
    let a = Device::open(a_ip).unwrap();
    // B's loop runs only when this thread turns it: the whole burst is queued first.
    let b = Device::open_with(DeviceConfig::new(b_ip).busy_poll()).unwrap();
    let perf_a = dm_agent(&a, MgmtClass::PERF_MGMT, false);
    let agent = perf_a.agent.lock().unwrap().unwrap();
    const N: u64 = 1500;
    a.with_mad(|ctx| {
        for k in 0..N {
            let m = get(
                MgmtClass::PERF_MGMT,
                1,
                form_tid(agent, k as u32 + 1),
                0x0012,
            );
            let once = SendParams {
                expects_response: false,
                ..SendParams::ONCE
            };
            ctx.mad
                .send(ctx.now, agent, MadAddr::gsi(Gid::from(b_ip)), m, once)
                .unwrap();
        }
    });
    wait_for("the burst to leave A", || {
        a.driver_counters().tx_datagrams >= N
    });
    std::thread::sleep(Duration::from_millis(100));
    let end = StdInstant::now() + Duration::from_secs(5);
    while b.mad_counters().0.unsupported_replies < N && StdInstant::now() < end {
        b.progress_for(Duration::from_millis(20)).unwrap();
    }
    assert_eq!(b.counters().drop_no_recv_wqe, 0, "{}", b.counters());
    // Nobody on B claims Perf: every Get is answered 0x000C.
    assert_eq!(b.mad_counters().0.unsupported_replies, N);
}
