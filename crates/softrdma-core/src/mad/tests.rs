//! MAD layer tests: hi_tid allocation, request/response matching, the CM's retry timing,
//! ib_modify_mad, cancel, duplicates, validate_mad drops and the unmatched Get() answer,
//! an end-to-end exchange over two simulated stacks, and the kernel REQ's framing.

use std::net::{IpAddr, Ipv4Addr};

use softrdma_wire::cm::CmMessage;
use softrdma_wire::mad::{Mad, MadHeader, MadStatus, Method, MgmtClass, MAD_LEN};
use softrdma_wire::roce::{Opcode, RoceRepr};
use softrdma_wire::Gid;

use super::gsi::GsiPort;
use super::*;
use crate::rand::Rng;
use crate::sim::{NetConfig, Sim};

fn gid(n: u8) -> Gid {
    Gid::from(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)))
}

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn header(class: MgmtClass, version: u8, method: Method, tid: u64, attr_id: u16) -> MadHeader {
    MadHeader {
        base_version: 1,
        mgmt_class: class,
        class_version: version,
        method,
        status: MadStatus::SUCCESS,
        class_specific: 0,
        tid,
        attr_id,
        reserved: 0,
        attr_mod: 0,
    }
}

fn perf_get(tid: u64) -> Mad {
    Mad::new(
        header(MgmtClass::PERF_MGMT, 1, Method::GET, tid, 0x0012),
        &[0xab; 8],
    )
}

/// The CM's REQ timeout with the rdma_cm defaults on RoCE: 2 × 2^(18-8) ms packet lifetime
/// + 2^(20-8) ms response timeout (cm.c, `cm_convert_to_ms`).
const CM_REQ_TIMEOUT_MS: u64 = 2 * (1 << (18 - 8)) + (1 << (20 - 8));

/// The agent's events, retransmission notices left out (`retransmission_notices` checks them).
fn events(m: &mut MadAgent) -> Vec<MadEvent> {
    std::iter::from_fn(|| m.poll_event())
        .filter(|e| !matches!(e, MadEvent::Retransmitted { .. }))
        .collect()
}

#[test]
fn retransmission_notices_name_the_attempt_and_the_next_deadline() {
    let mut m = MadAgent::with_first_hi_tid(2);
    let cm = m
        .register_methods(MgmtClass::CM, 2, Some(&[Method::SEND]))
        .expect("cm");
    let p = SendParams {
        timeout: ms(16),
        retries: 2,
        expects_response: true,
    };
    let mad = Mad::new(MadHeader::cm_send(0x0010, form_tid(cm, 1)), &[]);
    let id = SendId(7);
    m.apply(
        cm,
        MadOp::Send {
            id,
            at: at(0),
            dest: MadAddr::gsi(gid(2)),
            mad: Box::new(mad),
            params: p,
        },
    )
    .expect("send");
    assert!(m.is_pending_for(cm, id));
    let mut seen = vec![];
    for t in [16, 32, 48] {
        m.handle_timeout(at(t));
        seen.extend(std::iter::from_fn(|| m.poll_event()));
    }
    assert_eq!(
        seen,
        vec![
            MadEvent::Retransmitted {
                agent: cm,
                id,
                attempt: 1,
                retries_left: 1,
                next_deadline: at(32)
            },
            MadEvent::Retransmitted {
                agent: cm,
                id,
                attempt: 2,
                retries_left: 0,
                next_deadline: at(48)
            },
            MadEvent::SendCompleted {
                agent: cm,
                id,
                status: SendStatus::TimedOut
            },
        ]
    );
    // The same id may not be outstanding twice for one agent, but another agent may use it.
    let perf = m.register(MgmtClass::PERF_MGMT, 1).expect("perf");
    let mk = || Box::new(Mad::new(MadHeader::cm_send(0x0010, 9), &[]));
    m.send_as(at(50), cm, id, MadAddr::gsi(gid(2)), mk(), p)
        .expect("free again");
    assert_eq!(
        m.send_as(at(50), cm, id, MadAddr::gsi(gid(2)), mk(), p),
        Err(MadError::SendIdInUse)
    );
    m.send_as(at(50), perf, id, MadAddr::gsi(gid(2)), mk(), p)
        .expect("other agent");
}

/// Moves every MAD `from` has to send into `to` (which sees it coming from `from_gid`'s
/// QP1); returns them.
fn deliver(now: Instant, from: &mut MadAgent, from_gid: Gid, to: &mut MadAgent) -> Vec<OutMad> {
    let mut v = Vec::new();
    while let Some(o) = from.poll_transmit() {
        to.handle_receive(now, MadAddr::gsi(from_gid), &o.mad.to_bytes());
        v.push(o);
    }
    v
}

#[test]
fn hi_tid_allocation_is_cyclic_from_zero() {
    let mut m = MadAgent::new();
    let a = m.register(MgmtClass::SUBN_ADM, 2).expect("sa");
    let b = m.register(MgmtClass::PERF_MGMT, 1).expect("perf");
    let c = m.register(MgmtClass::CM, 2).expect("cm");
    assert_eq!((a.hi_tid(), b.hi_tid(), c.hi_tid()), (0, 1, 2));
    // The kernel's CM TID: hi_tid 2 over the byte-swapped comm ID (h_req_single.pcap).
    assert_eq!(form_tid(c, 0xf04d670d), 0x0000_0002_f04d_670d);
    assert_eq!(m.register(MgmtClass::CM, 2), Err(MadError::ClassTaken));
    assert_eq!(
        m.register(MgmtClass::CM, MAX_MGMT_VERSION),
        Err(MadError::BadClassVersion)
    );
    // Cyclic: a freed hi_tid is not reused until the counter wraps.
    m.unregister(a).expect("unregister");
    assert_eq!(m.unregister(a), Err(MadError::NoSuchAgent));
    assert_eq!(m.register(MgmtClass::SUBN_ADM, 2).map(|x| x.0), Ok(3));
    let mut k = MadAgent::with_first_hi_tid(MAX_HI_TID);
    assert_eq!(k.register(MgmtClass::CM, 2).map(|x| x.0), Ok(MAX_HI_TID));
    assert_eq!(k.register(MgmtClass::PERF_MGMT, 1).map(|x| x.0), Ok(0));
    let mut cm = MadAgent::with_first_hi_tid(2);
    assert_eq!(cm.register(MgmtClass::CM, 2).map(|x| x.0), Ok(2));
    // Method masks: disjoint sets share a class, overlapping ones do not.
    let mut p = MadAgent::new();
    let g = p
        .register_methods(MgmtClass::PERF_MGMT, 1, Some(&[Method::GET]))
        .expect("get");
    let s = p
        .register_methods(MgmtClass::PERF_MGMT, 1, Some(&[Method::SET, Method::SEND]))
        .expect("set");
    assert_eq!(
        p.register_methods(MgmtClass::PERF_MGMT, 1, Some(&[Method::SEND])),
        Err(MadError::ClassTaken)
    );
    assert_eq!(
        p.register(MgmtClass::PERF_MGMT, 1),
        Err(MadError::ClassTaken)
    );
    let from = MadAddr::gsi(gid(2));
    for (m, who) in [(Method::GET, g), (Method::SET, s)] {
        let mad = Mad::new(header(MgmtClass::PERF_MGMT, 1, m, 1, 0x12), &[]);
        p.handle_receive(at(0), from, &mad.to_bytes());
        assert!(matches!(&events(&mut p)[..], [MadEvent::Received { agent, .. }] if *agent == who));
    }
}

#[test]
fn cm_registered_for_send_only_answers_class_port_info_get_unsupported() {
    // ib_cm registers Send() only: a ClassPortInfo Get() (which validate_mad lets through
    // for the CM class) finds no agent and gets the unmatched GetResp.
    let mut m = MadAgent::with_first_hi_tid(2);
    let cm = m
        .register_methods(MgmtClass::CM, 2, Some(&[Method::SEND]))
        .expect("cm");
    let from = MadAddr::gsi(gid(2));
    let get = Mad::new(header(MgmtClass::CM, 2, Method::GET, 3, 0x0001), &[]);
    m.handle_receive(at(0), from, &get.to_bytes());
    let o = m.poll_transmit().expect("answer");
    assert_eq!(
        (o.mad.header.method, o.mad.header.status.0, o.dest),
        (Method::GET_RESP, 0x000c, from)
    );
    let req = Mad::new(MadHeader::cm_send(0x0010, 3), &[]);
    m.handle_receive(at(0), from, &req.to_bytes());
    assert!(matches!(&events(&mut m)[..], [MadEvent::Received { agent, .. }] if *agent == cm));
}

#[test]
fn request_response_matching_and_duplicates() {
    let (mut a, mut b) = (MadAgent::new(), MadAgent::new());
    let pa = a.register(MgmtClass::PERF_MGMT, 1).expect("a");
    let pb = b.register(MgmtClass::PERF_MGMT, 1).expect("b");
    let tid = form_tid(pa, 77);
    let params = SendParams {
        timeout: ms(100),
        retries: 2,
        expects_response: true,
    };
    let id = a
        .send(at(0), pa, MadAddr::gsi(gid(2)), perf_get(tid), params)
        .expect("send");
    assert_eq!(a.poll_timeout(), Some(at(100)));
    let sent = deliver(at(1), &mut a, gid(1), &mut b);
    assert_eq!(
        (sent.len(), sent[0].send, sent[0].attempt),
        (1, Some((pa, id)), 0)
    );
    assert!(events(&mut a).is_empty(), "still waiting");
    // b: the Get arrives unsolicited; it answers with a GetResp carrying the same TID.
    let ev = events(&mut b);
    let MadEvent::Received {
        agent,
        mad,
        from,
        response_to,
    } = &ev[0]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (*agent, from.gid, from.qpn, *response_to),
        (pb, gid(1), 1, None)
    );
    assert_eq!(mad.header.tid, tid);
    let mut resp = (**mad).clone();
    resp.header.method = Method::GET_RESP;
    resp.data[0] = 0x55;
    // A response from the wrong GID is not a match (rcv_has_same_gid).
    a.handle_receive(at(2), MadAddr::gsi(gid(9)), &resp.to_bytes());
    assert_eq!(a.counters().rx_unmatched_response, 1);
    let rid = b
        .send(at(2), pb, *from, resp.clone(), SendParams::ONCE)
        .expect("resp");
    let _ = deliver(at(2), &mut b, gid(2), &mut a);
    assert_eq!(
        events(&mut b),
        vec![MadEvent::SendCompleted {
            agent: pb,
            id: rid,
            status: SendStatus::Ok
        }]
    );
    // a: the response first, then the send's completion.
    let ev = events(&mut a);
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert!(
        matches!(&ev[0], MadEvent::Received { agent, mad, response_to: Some(r), .. }
        if *agent == pa && *r == id && mad.data[0] == 0x55)
    );
    assert_eq!(
        ev[1],
        MadEvent::SendCompleted {
            agent: pa,
            id,
            status: SendStatus::Ok
        }
    );
    assert_eq!(a.poll_timeout(), None);
    assert!(!a.is_pending(id));
    // The same response again: nothing outstanding matches, dropped and counted.
    a.handle_receive(at(3), MadAddr::gsi(gid(2)), &resp.to_bytes());
    assert!(events(&mut a).is_empty());
    assert_eq!(a.counters().rx_unmatched_response, 2);
    // Nothing was retransmitted.
    a.handle_timeout(at(1000));
    assert!(a.poll_transmit().is_none());
}

#[test]
fn cm_req_retries_with_exact_timing_then_times_out() {
    let mut m = MadAgent::with_first_hi_tid(2);
    let cm = m.register(MgmtClass::CM, 2).expect("cm");
    let tid = form_tid(cm, 0xf04d670d);
    let req = Mad::new(MadHeader::cm_send(0x0010, tid), &[1; 100]);
    let t0 = 5_000;
    let params = SendParams {
        timeout: ms(CM_REQ_TIMEOUT_MS),
        retries: 15, // CMA_MAX_CM_RETRIES
        expects_response: true,
    };
    let id = m
        .send(at(t0), cm, MadAddr::gsi(gid(2)), req.clone(), params)
        .expect("send");
    let mut sent_at = Vec::new();
    let mut now = at(t0);
    loop {
        while let Some(o) = m.poll_transmit() {
            assert_eq!(*o.mad, req, "every copy is the same MAD, same TID");
            assert_eq!(o.attempt as usize, sent_at.len());
            sent_at.push(now.total_millis() - t0);
        }
        let Some(next) = m.poll_timeout() else { break };
        // Nothing happens a millisecond early.
        m.handle_timeout(next - ms(1));
        assert!(m.poll_transmit().is_none() && m.poll_event().is_none());
        now = next;
        m.handle_timeout(now);
        if let Some(ev) = events(&mut m).pop() {
            assert_eq!(
                ev,
                MadEvent::SendCompleted {
                    agent: cm,
                    id,
                    status: SendStatus::TimedOut
                }
            );
            break;
        }
    }
    assert_eq!(CM_REQ_TIMEOUT_MS, 6144);
    let want: Vec<u64> = (0..16).map(|k| k * CM_REQ_TIMEOUT_MS).collect();
    assert_eq!(sent_at, want, "1 + 15 transmissions, 6144 ms apart");
    assert_eq!(now, at(t0 + 16 * CM_REQ_TIMEOUT_MS));
    let c = m.counters();
    assert_eq!((c.tx, c.retransmits, c.timeouts), (16, 15, 1));
    assert_eq!(m.poll_timeout(), None);
    assert_eq!(m.cancel(id), Err(MadError::NoSuchSend));
}

#[test]
fn modify_timeout_restarts_the_wait_like_an_mra() {
    let mut m = MadAgent::new();
    let cm = m.register(MgmtClass::CM, 2).expect("cm");
    let req = Mad::new(MadHeader::cm_send(0x0010, form_tid(cm, 1)), &[]);
    let params = SendParams {
        timeout: ms(6144),
        retries: 2,
        expects_response: true,
    };
    let id = m
        .send(at(0), cm, MadAddr::gsi(gid(2)), req, params)
        .expect("send");
    assert!(m.poll_transmit().is_some());
    // An MRA at 3 s: service timeout 2^(24-8) ms + av timeout 2^(19-8) ms.
    let mra = ms((1 << 16) + (1 << 11));
    m.modify_timeout(at(3000), id, mra).expect("modify");
    assert_eq!(m.poll_timeout(), Some(at(3000) + mra));
    m.handle_timeout(at(6144));
    assert!(m.poll_transmit().is_none(), "the old deadline is gone");
    m.handle_timeout(at(3000) + mra);
    assert_eq!(m.poll_transmit().map(|o| o.attempt), Some(1));
    // The remaining retries wait the new timeout too; the retry count was not reset.
    assert_eq!(m.poll_timeout(), Some(at(3000) + mra + mra));
    m.handle_timeout(at(3000) + mra + mra);
    assert_eq!(m.poll_transmit().map(|o| o.attempt), Some(2));
    m.handle_timeout(at(3000) + mra + mra + mra);
    assert!(m.poll_transmit().is_none());
    assert_eq!(
        events(&mut m),
        vec![MadEvent::SendCompleted {
            agent: cm,
            id,
            status: SendStatus::TimedOut
        }]
    );
    assert_eq!(
        m.modify_timeout(at(0), id, ms(1)),
        Err(MadError::NoSuchSend)
    );
}

#[test]
fn cancel_and_unregister_end_sends_canceled() {
    let mut m = MadAgent::new();
    let cm = m.register(MgmtClass::CM, 2).expect("cm");
    let p = SendParams {
        timeout: ms(100),
        retries: 5,
        expects_response: true,
    };
    let mk = |low| Mad::new(MadHeader::cm_send(0x0010, form_tid(cm, low)), &[]);
    let a = m
        .send(at(0), cm, MadAddr::gsi(gid(2)), mk(1), p)
        .expect("a");
    let b = m
        .send(at(0), cm, MadAddr::gsi(gid(2)), mk(2), p)
        .expect("b");
    let c = m
        .send(at(0), cm, MadAddr::gsi(gid(2)), mk(3), p)
        .expect("c");
    assert_eq!(m.poll_transmit().map(|o| o.send), Some(Some((cm, a))));
    // a was sent, b and c are still queued: cancelling withdraws the queued copy.
    m.cancel(a).expect("cancel a");
    m.cancel(b).expect("cancel b");
    assert_eq!(m.cancel(b), Err(MadError::NoSuchSend));
    // A zero timeout is a cancel too (ib_modify_mad(.., 0)).
    m.modify_timeout(at(1), c, Duration::ZERO).expect("zero");
    assert!(m.poll_transmit().is_none());
    assert_eq!(m.poll_timeout(), None);
    let st: Vec<_> = events(&mut m)
        .into_iter()
        .map(|e| match e {
            MadEvent::SendCompleted { id, status, .. } => (id, status),
            e => panic!("{e:?}"),
        })
        .collect();
    assert_eq!(
        st,
        vec![
            (a, SendStatus::Canceled),
            (b, SendStatus::Canceled),
            (c, SendStatus::Canceled)
        ]
    );
    m.handle_timeout(at(10_000));
    assert!(m.poll_transmit().is_none());
    let d = m
        .send(at(0), cm, MadAddr::gsi(gid(2)), mk(4), p)
        .expect("d");
    m.unregister(cm).expect("unregister");
    assert_eq!(
        events(&mut m),
        vec![MadEvent::SendCompleted {
            agent: cm,
            id: d,
            status: SendStatus::Canceled
        }]
    );
    assert_eq!(
        m.send(at(0), cm, MadAddr::gsi(gid(2)), mk(5), p),
        Err(MadError::NoSuchAgent)
    );
}

#[test]
fn cm_sends_are_delivered_unsolicited_and_fire_and_forget_completes_on_send() {
    let (mut a, mut b) = (
        MadAgent::with_first_hi_tid(2),
        MadAgent::with_first_hi_tid(2),
    );
    let ca = a.register(MgmtClass::CM, 2).expect("a");
    let cb = b.register(MgmtClass::CM, 2).expect("b");
    let tid = form_tid(ca, 0x1234);
    let p = SendParams {
        timeout: ms(6144),
        retries: 15,
        expects_response: true,
    };
    let req = Mad::new(MadHeader::cm_send(0x0010, tid), &[7; 10]);
    let id = a
        .send(at(0), ca, MadAddr::gsi(gid(2)), req, p)
        .expect("req");
    deliver(at(0), &mut a, gid(1), &mut b);
    assert!(
        matches!(&events(&mut b)[..], [MadEvent::Received { agent, response_to: None, .. }] if *agent == cb)
    );
    // The REP is a Send() too, carrying the REQ's TID: the MAD layer does not match it (the
    // CM does, by comm IDs), so the REQ stays outstanding until the CM cancels it.
    let rep = Mad::new(MadHeader::cm_send(0x0013, tid), &[8; 10]);
    let rid = b
        .send(at(1), cb, MadAddr::gsi(gid(1)), rep, SendParams::ONCE)
        .expect("rep");
    assert!(b.is_pending(rid));
    deliver(at(1), &mut b, gid(2), &mut a);
    assert!(!b.is_pending(rid));
    assert_eq!(
        events(&mut b),
        vec![MadEvent::SendCompleted {
            agent: cb,
            id: rid,
            status: SendStatus::Ok
        }]
    );
    let ev = events(&mut a);
    assert!(
        matches!(&ev[..], [MadEvent::Received { agent, response_to: None, mad, .. }]
        if *agent == ca && mad.header.attr_id == 0x0013)
    );
    assert!(a.is_pending(id));
    a.cancel(id).expect("cancel");
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn malformed_and_unclaimed_mads_are_dropped_counted_or_answered() {
    let mut m = MadAgent::new();
    let cm = m.register(MgmtClass::CM, 2).expect("cm");
    let from = MadAddr::gsi(gid(2));
    let now = at(0);
    // Short.
    m.handle_receive(now, from, &[1, 7, 2, 3]);
    m.handle_receive(now, from, &[0; MAD_LEN - 1]);
    assert_eq!(m.counters().rx_malformed, 2);
    // Bad base version.
    let mut bad = Mad::new(MadHeader::cm_send(0x0010, 1), &[]);
    bad.header.base_version = 0x80;
    m.handle_receive(now, from, &bad.to_bytes());
    assert_eq!(m.counters().rx_bad_base_version, 1);
    // SMP classes belong to QP0; CM messages other than ClassPortInfo must be Send().
    let smp = Mad::new(
        header(MgmtClass::SUBN_DIRECTED_ROUTE, 1, Method::GET, 1, 0x15),
        &[],
    );
    m.handle_receive(now, from, &smp.to_bytes());
    let cm_get = Mad::new(header(MgmtClass::CM, 2, Method::GET, 1, 0x0010), &[]);
    m.handle_receive(now, from, &cm_get.to_bytes());
    assert_eq!(m.counters().rx_invalid, 2);
    // CM ClassPortInfo Get() passes validation and reaches the CM agent.
    let cpi = Mad::new(header(MgmtClass::CM, 2, Method::GET, 1, 0x0001), &[]);
    m.handle_receive(now, from, &cpi.to_bytes());
    assert!(matches!(&events(&mut m)[..], [MadEvent::Received { agent, .. }] if *agent == cm));
    // Wrong class version: no agent. A Send() is dropped silently...
    let v1 = Mad::new(header(MgmtClass::CM, 1, Method::SEND, 1, 0x0010), &[]);
    m.handle_receive(now, from, &v1.to_bytes());
    assert!(m.poll_transmit().is_none());
    // ...a Get() to an unclaimed class is answered GetResp, status 0x000C, same TID and
    // attribute, back to the sender (generate_unmatched_resp + agent_send_response).
    let get = Mad::new(
        header(MgmtClass(0x30), 1, Method::GET, 0xdead, 0x99),
        &[5; 20],
    );
    m.handle_receive(now, from, &get.to_bytes());
    let o = m.poll_transmit().expect("GetResp");
    assert_eq!((o.dest, o.send), (from, None));
    let mut want = get.clone();
    want.header.method = Method::GET_RESP;
    want.header.status = MadStatus(STATUS_UNSUPPORTED_METHOD_ATTRIB);
    assert_eq!(*o.mad, want);
    let set = Mad::new(header(MgmtClass::PERF_MGMT, 1, Method::SET, 2, 0x99), &[]);
    m.handle_receive(now, from, &set.to_bytes());
    assert_eq!(
        m.poll_transmit().map(|o| o.mad.header.method),
        Some(Method::GET_RESP)
    );
    // A response for a hi_tid nobody has is dropped, not answered.
    let resp = Mad::new(
        header(MgmtClass::PERF_MGMT, 1, Method::GET_RESP, 9 << 32, 0x99),
        &[],
    );
    m.handle_receive(now, from, &resp.to_bytes());
    assert!(m.poll_transmit().is_none());
    let c = *m.counters();
    assert_eq!((c.rx_no_agent, c.unsupported_replies), (4, 2));
    assert!(events(&mut m).is_empty());
    // Garbage of every length and content: never a panic, never an event for nobody.
    let mut rng = Rng::new(42);
    for i in 0..2000usize {
        let len = (rng.next_u32() as usize) % (MAD_LEN + 40);
        let mut b: Vec<u8> = (0..len).map(|_| rng.next_u8()).collect();
        if i % 2 == 0 && len > 3 {
            b[0] = 1; // mostly-valid headers too
        }
        m.handle_receive(now, from, &b);
    }
    while m.poll_transmit().is_some() {}
    for e in events(&mut m) {
        assert!(matches!(e, MadEvent::Received { agent, .. } if agent == cm));
    }
}

// ----- over the simulated network, through Stack and QP1 -----

struct Node {
    port: GsiPort,
    mad: MadAgent,
}

fn sim_pair() -> (Sim, Vec<Node>) {
    let mut sim = Sim::new(2, NetConfig::PERFECT, 7);
    let mut nodes = Vec::new();
    for s in &mut sim.stacks {
        let port = GsiPort::open(s, 16).expect("qp1");
        nodes.push(Node {
            port,
            mad: MadAgent::with_first_hi_tid(2),
        });
    }
    (sim, nodes)
}

/// Runs the network and both MAD layers until `done` or nothing is left to do.
fn pump(sim: &mut Sim, nodes: &mut [Node], mut done: impl FnMut(&mut [Node]) -> bool) -> bool {
    for _ in 0..10_000 {
        let now = sim.now;
        for (i, n) in nodes.iter_mut().enumerate() {
            n.port.poll(now, &mut sim.stacks[i], &mut n.mad);
            n.port.flush(&mut sim.stacks[i], &mut n.mad);
        }
        if done(nodes) {
            return true;
        }
        if !sim.step() {
            let now = sim.now;
            for (i, n) in nodes.iter_mut().enumerate() {
                n.port.poll(now, &mut sim.stacks[i], &mut n.mad);
            }
            return done(nodes);
        }
    }
    false
}

#[test]
fn get_and_response_over_qp1_and_psn_counts_retransmissions() {
    let (mut sim, mut nodes) = sim_pair();
    sim.record = true;
    let pa = nodes[0].mad.register(MgmtClass::PERF_MGMT, 1).expect("a");
    let pb = nodes[1].mad.register(MgmtClass::PERF_MGMT, 1).expect("b");
    let tid = form_tid(pa, 5);
    let p = SendParams {
        timeout: ms(50),
        retries: 3,
        expects_response: true,
    };
    let id = nodes[0]
        .mad
        .send(sim.now, pa, MadAddr::gsi(gid(2)), perf_get(tid), p)
        .expect("send");
    // b's application leaves the first two copies unanswered: a retransmits on each
    // timeout; b answers the third.
    let mut got = Vec::new();
    assert!(pump(&mut sim, &mut nodes, |n| {
        got.extend(events(&mut n[1].mad));
        !got.is_empty()
    }));
    for k in 1..=2u64 {
        let t = nodes[0].mad.poll_timeout().expect("waiting");
        assert_eq!(t, at(1) + ms(50 * k));
        sim.now = t;
        nodes[0].mad.handle_timeout(t);
        let before = got.len();
        assert!(pump(&mut sim, &mut nodes, |n| {
            got.extend(events(&mut n[1].mad));
            got.len() > before
        }));
    }
    assert_eq!(got.len(), 3, "b saw the first send and two retransmissions");
    let MadEvent::Received { mad, from, .. } = &got[2] else {
        panic!("{got:?}")
    };
    assert_eq!((from.gid, from.qpn, mad.header.tid), (gid(1), 1, tid));
    let mut resp = (**mad).clone();
    resp.header.method = Method::GET_RESP;
    let from = *from;
    nodes[1]
        .mad
        .send(sim.now, pb, from, resp, SendParams::ONCE)
        .expect("resp");
    let mut ev_a = Vec::new();
    assert!(pump(&mut sim, &mut nodes, |n| {
        ev_a.extend(events(&mut n[0].mad));
        ev_a.len() >= 2
    }));
    assert!(matches!(&ev_a[0], MadEvent::Received { response_to: Some(r), .. } if *r == id));
    assert_eq!(
        ev_a[1],
        MadEvent::SendCompleted {
            agent: pa,
            id,
            status: SendStatus::Ok
        }
    );
    // On the wire: a's three copies carry PSN 0, 1, 2 and the same TID; b's answer PSN 0.
    let pkts: Vec<(usize, u32, u64)> = sim
        .tap
        .iter()
        .map(|(from, _, p)| {
            let r = RoceRepr::parse(p).expect("roce");
            let m = Mad::parse(r.payload).expect("mad");
            (*from, r.bth.psn.value(), m.header.tid)
        })
        .collect();
    assert_eq!(
        pkts,
        vec![(0, 0, tid), (0, 1, tid), (0, 2, tid), (1, 0, tid)]
    );
    assert_eq!(nodes[0].port.send_errors + nodes[1].port.recv_errors, 0);
}

/// The kernel's REQ (h_req_single.pcap frame 1: Ethernet + IPv4 + UDP, then BTH...).
fn kernel_req_udp_payload() -> Vec<u8> {
    let file = include_bytes!("../../../../fixtures/captures/h_req_single.pcap");
    let (recs, _) = softrdma_wire::pcap::read_all(file).expect("pcap");
    recs[0].data[14 + 20 + 8..].to_vec()
}

#[test]
fn golden_cm_req_framing_equals_the_kernels() {
    let kernel = kernel_req_udp_payload();
    assert_eq!(kernel.len(), 12 + 8 + MAD_LEN + 4);
    let k = RoceRepr::parse(&kernel).expect("kernel roce");
    let kmad = Mad::parse(k.payload).expect("kernel mad");
    // The CM layer's view: parse the REQ and rebuild its MAD with our agent's TID.
    let msg = CmMessage::from_mad(&kmad).expect("req");
    assert!(matches!(msg, CmMessage::Req(_)));
    let (mut sim, mut nodes) = sim_pair();
    let cm = nodes[0].mad.register(MgmtClass::CM, 2).expect("cm");
    let tid = form_tid(cm, (kmad.header.tid & 0xffff_ffff) as u32);
    assert_eq!(tid, kmad.header.tid, "hi_tid 2 as the kernel's ib_cm");
    let mad = msg.to_mad(tid, kmad.header.attr_mod);
    assert_eq!(mad, kmad);
    let p = SendParams {
        timeout: ms(CM_REQ_TIMEOUT_MS),
        retries: 15,
        expects_response: true,
    };
    nodes[0]
        .mad
        .send(sim.now, cm, MadAddr::gsi(gid(2)), mad, p)
        .expect("send");
    let n0 = &mut nodes[0];
    n0.port.flush(&mut sim.stacks[0], &mut n0.mad);
    let tx = sim.stacks[0].poll_transmit(sim.now).expect("a packet");
    // QP1's UDP source port: 55410 on every kernel guest (lab README), and here.
    assert_eq!(tx.src_port, 0xd872);
    let ours = tx.payload;
    assert_eq!(ours.len(), kernel.len(), "IP length 308 like the kernel's");
    let o = RoceRepr::parse(&ours).expect("our roce");
    // BTH: opcode 0x64 UD SEND only, P_Key 0xffff, dest QP 1, AckReq; PSN 0 (first MAD).
    assert_eq!(o.bth.opcode, Opcode::UD_SEND_ONLY);
    assert_eq!(
        (o.bth.pkey, o.bth.dest_qp, o.bth.ack_req),
        (0xffff, 1, true)
    );
    assert_eq!(
        o.bth, k.bth,
        "the whole BTH, PSN included (both first on QP1)"
    );
    // DETH: Q_Key 0x80010000, source QP 1.
    assert_eq!(o.deth.map(|d| (d.q_key, d.src_qp)), Some((0x8001_0000, 1)));
    assert_eq!(o.deth, k.deth);
    // BTH + DETH + MAD byte for byte; only the ICRC (over the IP addresses) may differ.
    assert_eq!(ours[..ours.len() - 4], kernel[..kernel.len() - 4]);
    // The retransmission is the same packet with the next PSN.
    let t = nodes[0].mad.poll_timeout().expect("timer");
    assert_eq!(t, sim.now + ms(6144));
    nodes[0].mad.handle_timeout(t);
    let n0 = &mut nodes[0];
    n0.port.flush(&mut sim.stacks[0], &mut n0.mad);
    let re = sim.stacks[0]
        .poll_transmit(t)
        .expect("retransmission")
        .payload;
    let r = RoceRepr::parse(&re).expect("re");
    assert_eq!(r.bth.psn.value(), 1);
    assert_eq!(re[12..re.len() - 4], ours[12..ours.len() - 4]);
    assert_eq!(re[..8], ours[..8]);
}

/// QP1's CQ holds a completion per posted receive; if every MAD send completed into it too,
/// a burst of sends posted between two polls (a server accepting a thousand connections in
/// a row) would fill it, and the receive completions behind them would be lost with their
/// MADs and their buffers. The sends are unsignaled, as nothing waits on their completion.
#[test]
fn a_send_burst_between_polls_does_not_cost_received_mads() {
    let (mut sim, mut nodes) = sim_pair();
    let pa = nodes[0].mad.register(MgmtClass::PERF_MGMT, 1).expect("a");
    let pb = nodes[1].mad.register(MgmtClass::PERF_MGMT, 1).expect("b");
    let once = SendParams {
        expects_response: false,
        ..SendParams::ONCE
    };
    // More sends than QP1's CQ has entries (16 receives + 128 sends).
    for k in 0..400u32 {
        nodes[0]
            .mad
            .send(
                sim.now,
                pa,
                MadAddr::gsi(gid(2)),
                perf_get(form_tid(pa, k)),
                once,
            )
            .expect("send");
    }
    let a = &mut nodes[0];
    assert_eq!(a.port.flush(&mut sim.stacks[0], &mut a.mad), 400);
    nodes[1]
        .mad
        .send(
            sim.now,
            pb,
            MadAddr::gsi(gid(1)),
            perf_get(form_tid(pb, 1)),
            once,
        )
        .expect("send");
    let b = &mut nodes[1];
    b.port.flush(&mut sim.stacks[1], &mut b.mad);
    while sim.step() {}
    let now = sim.now;
    let a = &mut nodes[0];
    a.port.poll(now, &mut sim.stacks[0], &mut a.mad);
    let got = events(&mut a.mad);
    let received = got
        .iter()
        .filter(|e| matches!(e, MadEvent::Received { .. }))
        .count();
    assert_eq!(received, 1, "the MAD received behind the burst was lost");
    assert_eq!(nodes[0].port.send_errors + nodes[0].port.recv_errors, 0);
}
