//! CM tests: two endpoints talking through their MAD agents, or one endpoint against a
//! scripted peer (a bare [`MadAgent`] sending hand-made CM MADs); no sockets, time is a
//! parameter. Golden: the kernel's REQ from h_req_single.pcap against the kernel's REPs.

use std::net::{IpAddr, Ipv4Addr};

use softrdma_wire::cm::{
    CmMessage, DrepRepr, DreqRepr, MraMessage, MraRepr, Path, PathMtu, RejMessage, RejRepr,
    RejectReason, RepRepr, ReqRepr, RtuRepr, SidrReqRepr, SidrStatus, TransportType,
};
use softrdma_wire::mad::{Mad, MadHeader, Method, MgmtClass};
use softrdma_wire::{Gid, Guid};

use super::*;
use crate::mad::{MadAddr, MadAgent, SendParams, SendStatus};
use crate::time::{Duration, Instant};
use crate::verbs::{AccessFlags, QpAttrMask, QpState};

const GUID_A: u64 = 0x5054_00ff_fe77_000b;
const GUID_B: u64 = 0x5054_00ff_fe77_000a;
const SVC: u64 = 0x0000_0000_0106_4e20;

fn gid(n: u8) -> Gid {
    Gid::from(IpAddr::V4(Ipv4Addr::new(10, 77, 0, n)))
}

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn ep(guid: u64, seed: u64) -> SinglePortCm {
    let mut e = SinglePortCm::new(CmConfig {
        node_guid: Guid(guid),
        ca_ack_delay: RXE_CA_ACK_DELAY,
        seed,
        ..CmConfig::default()
    })
    .expect("endpoint");
    e.trace = true;
    e
}

fn events(e: &mut SinglePortCm) -> Vec<CmEvent> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

/// What `e` puts on the wire, parsed.
fn sent(e: &mut SinglePortCm) -> Vec<(Mad, CmMessage)> {
    std::iter::from_fn(|| e.poll_transmit())
        .map(|o| {
            let m = CmMessage::from_mad(&o.mad).expect("cm");
            (*o.mad, m)
        })
        .collect()
}

/// Moves everything `a` sends into `b` (a at gid(1), b at gid(2)) and back until quiet.
fn pump(now: Instant, a: &mut SinglePortCm, b: &mut SinglePortCm) -> Vec<CmMessage> {
    let mut log = Vec::new();
    loop {
        let mut moved = false;
        while let Some(o) = a.poll_transmit() {
            log.push(CmMessage::from_mad(&o.mad).expect("cm"));
            b.handle_receive(now, MadAddr::gsi(gid(1)), &o.mad.to_bytes());
            moved = true;
        }
        while let Some(o) = b.poll_transmit() {
            log.push(CmMessage::from_mad(&o.mad).expect("cm"));
            a.handle_receive(now, MadAddr::gsi(gid(2)), &o.mad.to_bytes());
            moved = true;
        }
        if !moved {
            return log;
        }
    }
}

fn path() -> Path {
    Path {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: gid(1),
        remote_gid: gid(2),
        flow_label: 0x98adf,
        hop_limit: 64,
        ..Path::default()
    }
}

fn req_params(max_cm_retries: u8) -> ReqParams {
    ReqParams {
        primary_path: path(),
        ..ReqParams::new(CmPort::default(), gid(1), gid(2), SVC, 0x11)
            .with_starting_psn(0x123456)
            .with_private_data(vec![0xaa; 36])
            .with_rdma_depths(4, 4)
            .with_max_cm_retries(max_cm_retries)
    }
}

fn rep_params() -> RepParams {
    RepParams {
        qp_num: 0x12,
        starting_psn: 0xabcdef,
        private_data: b"login rsp".to_vec(),
        responder_resources: 4,
        initiator_depth: 4,
        flow_control: true,
        rnr_retry_count: 7,
        ..RepParams::default()
    }
}

/// A (active, gid 1) connected to B (passive, gid 2): returns both endpoints and ids.
fn connect() -> (SinglePortCm, SinglePortCm, CmId, CmId) {
    let (mut a, mut b) = (ep(GUID_A, 1), ep(GUID_B, 2));
    let lid = b.create_id();
    assert_eq!(b.listen(&lid, SVC), Ok(SVC));
    let ia = a.create_id();
    a.send_req(at(0), &ia, &req_params(15)).expect("req");
    assert_eq!(a.state(ia.as_ref()), Some(CmState::ReqSent));
    let log = pump(at(1), &mut a, &mut b);
    assert!(matches!(&log[..], [CmMessage::Req(_)]));
    let ev = events(&mut b);
    let [CmEvent::ReqReceived {
        id: ib,
        listen,
        req,
    }] = <[CmEvent; 1]>::try_from(ev).expect("one")
    else {
        panic!("not a REQ")
    };
    assert_eq!(listen, lid.as_ref());
    assert_eq!(req.req.local_comm_id, ia.local_comm_id());
    assert_eq!(
        req.req.primary_path.local_ack_timeout, 19,
        "cm_ack_timeout(15, 18)"
    );
    assert_eq!(b.state(ib.as_ref()), Some(CmState::ReqRcvd));
    b.send_rep(at(2), &ib, &rep_params()).expect("rep");
    let log = pump(at(3), &mut a, &mut b);
    let [CmMessage::Rep(rep)] = &log[..] else {
        panic!("{log:?}")
    };
    assert_eq!(
        (rep.remote_comm_id, rep.local_comm_id, rep.target_ack_delay),
        (ia.local_comm_id(), ib.local_comm_id(), 15)
    );
    assert!(
        matches!(&events(&mut a)[..], [CmEvent::RepReceived { id, rep, .. }] if *id == ia.as_ref() && rep.local_qpn == 0x12)
    );
    a.send_rtu(at(4), &ia, &[]).expect("rtu");
    let log = pump(at(5), &mut a, &mut b);
    assert!(matches!(&log[..], [CmMessage::Rtu(_)]));
    assert_eq!(
        events(&mut b),
        vec![CmEvent::RtuReceived {
            id: ib.as_ref(),
            private_data: vec![0; 224]
        }]
    );
    assert_eq!(a.state(ia.as_ref()), Some(CmState::Established));
    assert_eq!(b.state(ib.as_ref()), Some(CmState::Established));
    (a, b, ia, ib)
}

#[test]
fn ack_timeout_and_convert() {
    assert_eq!(cm_ack_timeout(15, 18), 19);
    assert_eq!(cm_ack_timeout(15, 14), 16);
    assert_eq!(cm_ack_timeout(20, 10), 20);
    assert_eq!(cm_ack_timeout(31, 31), 31);
    assert_eq!(cm_convert_to_ms(20), Duration::from_millis(4096));
    assert_eq!(cm_convert_to_ms(3), Duration::from_millis(1));
}

#[test]
fn active_passive_connect_and_disconnect() {
    let (mut a, mut b, ia, ib) = connect();
    // Every message of the connection carries the REQ's TID: hi_tid 2 over the swapped ID.
    let tid = 0x0000_0002_0000_0000 | u64::from(ia.local_comm_id().swap_bytes());
    assert_eq!(
        (a.tid(ia.as_ref()), b.tid(ib.as_ref())),
        (Some(tid), Some(tid))
    );
    // QP attributes from the CM state. As in cm.c, a message's starting PSN is where its
    // sender's RQ starts: A (REQ PSN 0x123456) receives from 0x123456 and sends from the
    // REP's 0xabcdef; B the other way round.
    let (rtr, mask) = a.init_qp_attr(&ia, QpState::Rtr).expect("rtr");
    assert_eq!(
        (rtr.dest_qp_num, rtr.rq_psn, rtr.max_dest_rd_atomic),
        (0x12, 0x123456, 4)
    );
    assert_eq!(rtr.ah_attr.dgid, gid(2));
    assert!(mask.contains(QpAttrMask::DEST_QPN | QpAttrMask::RQ_PSN | QpAttrMask::AV));
    let (rts, _) = a.init_qp_attr(&ia, QpState::Rts).expect("rts");
    assert_eq!(
        (rts.sq_psn, rts.timeout, rts.retry_cnt, rts.rnr_retry),
        (0xabcdef, 19, 7, 7)
    );
    let (rtr_b, _) = b.init_qp_attr(&ib, QpState::Rtr).expect("rtr b");
    assert_eq!((rtr_b.dest_qp_num, rtr_b.rq_psn), (0x11, 0xabcdef));
    let (rts_b, _) = b.init_qp_attr(&ib, QpState::Rts).expect("rts b");
    assert_eq!(rts_b.sq_psn, 0x123456);
    assert_eq!(rtr_b.ah_attr.dgid, gid(1));
    let (init, _) = b.init_qp_attr(&ib, QpState::Init).expect("init");
    assert!(init.qp_access_flags.0 & AccessFlags::REMOTE_READ.0 != 0);
    // Disconnect.
    a.send_dreq(at(10), &ia, &[]).expect("dreq");
    let log = pump(at(11), &mut a, &mut b);
    assert!(matches!(&log[..], [CmMessage::Dreq(d)] if d.remote_qpn_eecn == 0x12));
    assert!(
        matches!(&events(&mut b)[..], [CmEvent::DreqReceived { id, .. }] if *id == ib.as_ref())
    );
    b.send_drep(at(12), &ib, &[]).expect("drep");
    let log = pump(at(13), &mut a, &mut b);
    assert!(matches!(&log[..], [CmMessage::Drep(_)]));
    assert_eq!(
        events(&mut a),
        vec![CmEvent::DrepReceived {
            id: ia.as_ref(),
            private_data: vec![0; 224]
        }]
    );
    assert_eq!(a.state(ia.as_ref()), Some(CmState::Timewait));
    assert_eq!(b.state(ib.as_ref()), Some(CmState::Timewait));
    // Timewait = cvt(av.timeout) = cvt(19) = 2048 ms.
    assert_eq!(a.poll_timeout(), Some(at(13 + 2048)));
    a.handle_timeout(at(13 + 2047));
    assert!(events(&mut a).is_empty());
    a.handle_timeout(at(13 + 2048));
    assert_eq!(
        events(&mut a),
        vec![CmEvent::TimewaitExit { id: ia.as_ref() }]
    );
    assert_eq!(a.state(ia.as_ref()), Some(CmState::Idle));
    b.handle_timeout(at(20_000));
    assert_eq!(
        events(&mut b),
        vec![CmEvent::TimewaitExit { id: ib.as_ref() }]
    );
    let c = a.counters();
    assert_eq!(
        (
            c.tx(AttrId::REQ),
            c.rx(AttrId::REP),
            c.tx(AttrId::RTU),
            c.tx(AttrId::DREQ)
        ),
        (1, 1, 1, 1)
    );
    a.destroy(at(20_000), ia);
    b.destroy(at(20_000), ib);
    assert!(sent(&mut a).is_empty() && sent(&mut b).is_empty());
    // Transitions are visible.
    assert!(a
        .transitions
        .iter()
        .any(|t| t.1 == CmState::ReqSent && t.2 == CmState::RepRcvd));
}

#[test]
fn reject_with_private_data() {
    let (mut a, mut b) = (ep(GUID_A, 1), ep(GUID_B, 2));
    let lid = b.create_id();
    b.listen(&lid, SVC).expect("listen");
    let ia = a.create_id();
    a.send_req(at(0), &ia, &req_params(15)).expect("req");
    pump(at(0), &mut a, &mut b);
    let Some(CmEvent::ReqReceived { id, .. }) = b.poll_event() else {
        panic!("no REQ")
    };
    b.reject(at(1), id, RejectReason::CONSUMER_DEFINED, &[], b"go away")
        .expect("rej");
    let log = pump(at(1), &mut a, &mut b);
    let [CmMessage::Rej(rej)] = &log[..] else {
        panic!("{log:?}")
    };
    assert_eq!(
        (
            rej.reason,
            rej.message_rejected,
            rej.local_comm_id,
            rej.remote_comm_id
        ),
        (
            RejectReason::CONSUMER_DEFINED,
            RejMessage::REQ,
            0,
            ia.local_comm_id()
        )
    );
    let ev = events(&mut a);
    assert!(matches!(&ev[..], [CmEvent::RejReceived { id, rej }]
        if *id == ia.as_ref() && rej.private_data.starts_with(b"go away")));
    assert_eq!(a.state(ia.as_ref()), Some(CmState::Idle));
    assert!(
        a.mad().poll_timeout().is_none(),
        "REQ no longer outstanding"
    );
}

/// The scripted peer: a bare MAD agent at gid(9) with ib_cm's hi_tid.
fn peer() -> (MadAgent, AgentId) {
    let mut m = MadAgent::with_first_hi_tid(2);
    let a = m
        .register_methods(MgmtClass::CM, 2, Some(&[Method::SEND]))
        .expect("cm");
    (m, a)
}

const PEER_ID: u32 = 0x0d67_4df0;

fn peer_tid() -> u64 {
    0x0000_0002_0000_0000 | u64::from(PEER_ID.swap_bytes())
}

fn peer_req(service_id: u64) -> ReqRepr {
    let mut p = path();
    std::mem::swap(&mut p.local_gid, &mut p.remote_gid);
    p.local_gid = gid(9);
    p.local_ack_timeout = 19;
    ReqRepr {
        local_comm_id: PEER_ID,
        vendor_id: 0,
        service_id,
        local_ca_guid: Guid(GUID_A),
        local_qkey: 0,
        local_qpn: 0x33,
        responder_resources: 0,
        local_eecn: 0,
        initiator_depth: 0,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: TransportType::RC,
        end_to_end_flow_control: true,
        starting_psn: 0x777,
        local_cm_response_timeout: 20,
        retry_count: 7,
        partition_key: 0xffff,
        path_mtu: PathMtu::MTU_1024,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: softrdma_wire::cm::ExtendedTransportType::NONE,
        primary_path: p,
        alternate_path: Path::default(),
        sap_supported: false,
        private_data: [0; 92],
    }
}

/// The peer sends `msg` to `e` (as if from gid(9)).
fn from_peer(now: Instant, e: &mut SinglePortCm, msg: CmMessage, tid: u64) {
    let (mut m, a) = peer();
    m.send(
        now,
        a,
        MadAddr::gsi(gid(1)),
        msg.to_mad(tid, 0),
        SendParams::ONCE,
    )
    .expect("send");
    let o = m.poll_transmit().expect("out");
    e.handle_receive(now, MadAddr::gsi(gid(9)), &o.mad.to_bytes());
}

#[test]
fn req_to_no_listener_gets_rej_8() {
    let mut e = ep(GUID_B, 3);
    from_peer(
        at(0),
        &mut e,
        CmMessage::Req(peer_req(0x1_0106_270f)),
        peer_tid(),
    );
    let out = sent(&mut e);
    let [(mad, CmMessage::Rej(rej))] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(mad.header.tid, peer_tid());
    assert_eq!(
        (
            rej.reason,
            rej.local_comm_id,
            rej.remote_comm_id,
            rej.message_rejected,
            rej.reject_info_length
        ),
        (
            RejectReason::INVALID_SERVICE_ID,
            0,
            PEER_ID,
            RejMessage::REQ,
            0
        )
    );
    assert!(events(&mut e).is_empty());
}

#[test]
fn req_retries_exhausted_gives_req_error_and_no_rej() {
    let mut a = ep(GUID_A, 1);
    let ia = a.create_id();
    a.send_req(at(0), &ia, &req_params(2)).expect("req");
    // 2 × 2^(18-8) + 2^(20-8) = 6144 ms per try.
    let mut times = vec![];
    let mut now = at(0);
    for _ in 0..10 {
        for o in std::iter::from_fn(|| a.poll_transmit()) {
            assert!(matches!(CmMessage::from_mad(&o.mad), Ok(CmMessage::Req(_))));
            times.push(now.total_millis());
        }
        let Some(t) = a.poll_timeout() else { break };
        now = t;
        a.handle_timeout(now);
    }
    assert_eq!(times, vec![0, 6144, 12288]);
    let retry = |attempt, next| CmEvent::Retry {
        id: ia.as_ref(),
        msg: AttrId::REQ,
        attempt,
        max: 2,
        next_deadline: at(next),
    };
    assert_eq!(
        events(&mut a),
        vec![
            retry(1, 12288),
            retry(2, 18432),
            CmEvent::ReqError {
                id: ia.as_ref(),
                status: SendStatus::TimedOut
            }
        ]
    );
    assert_eq!(a.state(ia.as_ref()), Some(CmState::Idle));
    assert!(sent(&mut a).is_empty(), "no REJ");
    // cm_send_handler at the completion: 1 + 2 transmissions, 2 retries.
    let c = a.counters();
    assert_eq!((c.tx(AttrId::REQ), c.retries(AttrId::REQ)), (3, 2));
}

/// A listener on `e` that received the peer's REQ; returns the new id.
fn passive_req(e: &mut SinglePortCm) -> (CmId, CmId) {
    let l = e.create_id();
    e.listen(&l, SVC).expect("listen");
    from_peer(at(0), e, CmMessage::Req(peer_req(SVC)), peer_tid());
    let Some(CmEvent::ReqReceived { id, .. }) = e.poll_event() else {
        panic!("no REQ event")
    };
    (l, id)
}

#[test]
fn delayed_mra_on_duplicate_req() {
    let mut e = ep(GUID_B, 4);
    let (_l, id) = passive_req(&mut e);
    // A duplicate while REQ_RCVD: dropped.
    from_peer(at(100), &mut e, CmMessage::Req(peer_req(SVC)), peer_tid());
    assert!(sent(&mut e).is_empty() && events(&mut e).is_empty());
    // rdma_cm's delayed MRA: nothing now...
    e.send_mra(at(200), &id, CMA_CM_MRA_SETTING, true, &[])
        .expect("mra");
    assert!(sent(&mut e).is_empty());
    assert_eq!(e.state(id.as_ref()), Some(CmState::MraReqSent));
    // ...the MRA answers the next duplicate.
    from_peer(at(6300), &mut e, CmMessage::Req(peer_req(SVC)), peer_tid());
    let out = sent(&mut e);
    let [(mad, CmMessage::Mra(mra))] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(mad.header.tid, peer_tid());
    assert_eq!(
        (
            mra.message_mraed,
            mra.service_timeout,
            mra.local_comm_id,
            mra.remote_comm_id
        ),
        (MraMessage::REQ, 24, id.local_comm_id(), PEER_ID)
    );
    assert_eq!(e.counters().dup(AttrId::REQ), 2);
    // The user answers: REP from MRA_REQ_SENT.
    e.send_rep(at(7000), &id, &rep_params()).expect("rep");
    assert!(matches!(&sent(&mut e)[..], [(_, CmMessage::Rep(_))]));
}

#[test]
fn mra_received_extends_req_wait() {
    let mut a = ep(GUID_A, 1);
    let ia = a.create_id();
    a.send_req(at(0), &ia, &req_params(15)).expect("req");
    let _ = sent(&mut a);
    let mra = MraRepr {
        local_comm_id: PEER_ID,
        remote_comm_id: ia.local_comm_id(),
        message_mraed: MraMessage::REQ,
        service_timeout: 24,
        private_data: [0; 222],
    };
    let tid = a.tid(ia.as_ref()).expect("tid");
    from_peer(at(1000), &mut a, CmMessage::Mra(mra), tid);
    assert_eq!(
        events(&mut a),
        vec![CmEvent::MraReceived {
            id: ia.as_ref(),
            service_timeout: 24,
            private_data: vec![0; 222]
        }]
    );
    assert_eq!(a.state(ia.as_ref()), Some(CmState::MraReqRcvd));
    // cvt(24) + cvt(av.timeout 19) = 65536 + 2048 ms from the MRA.
    assert_eq!(a.poll_timeout(), Some(at(1000 + 65536 + 2048)));
}

/// The peer connects to `e` and disconnects; `e`'s id ends in TIMEWAIT. Returns the
/// listener (dropping it would destroy it) and the id.
fn passive_to_timewait(e: &mut SinglePortCm) -> (CmId, CmId) {
    let (l, id) = passive_req(e);
    e.send_rep(at(1), &id, &rep_params()).expect("rep");
    let _ = sent(e);
    let rtu = RtuRepr {
        local_comm_id: PEER_ID,
        remote_comm_id: id.local_comm_id(),
        private_data: [0; 224],
    };
    from_peer(at(2), e, CmMessage::Rtu(rtu), peer_tid());
    assert_eq!(
        events(e),
        vec![CmEvent::RtuReceived {
            id: id.as_ref(),
            private_data: vec![0; 224]
        }]
    );
    from_peer(at(3), e, CmMessage::Dreq(peer_dreq(&id)), 0x2_1111_1111);
    assert!(matches!(&events(e)[..], [CmEvent::DreqReceived { .. }]));
    e.send_drep(at(4), &id, &[]).expect("drep");
    let out = sent(e);
    assert!(matches!(&out[..], [(m, CmMessage::Drep(_))] if m.header.tid == 0x2_1111_1111));
    assert_eq!(e.state(id.as_ref()), Some(CmState::Timewait));
    (l, id)
}

fn peer_dreq(id: &CmId) -> DreqRepr {
    DreqRepr {
        local_comm_id: PEER_ID,
        remote_comm_id: id.local_comm_id(),
        remote_qpn_eecn: 0x12,
        private_data: [0; 220],
    }
}

/// Rule 1 (`cm_enter_timewait` → `cm_cleanup_timewait`): entering TIMEWAIT gives up the
/// remote-ID and remote-QPN entries, so during the timewait a REQ from the same remote QP
/// is a new connection (before: REJ 10), and REJ 10 goes out only for a collision with a
/// live connection.
#[test]
fn timewait_gives_up_remote_entries_so_a_req_is_a_new_connection() {
    let mut e = ep(GUID_B, 5);
    let (_l, id) = passive_to_timewait(&mut e);
    // A duplicate DREQ in TIMEWAIT: the DREP again, formatted from the id.
    from_peer(
        at(5),
        &mut e,
        CmMessage::Dreq(peer_dreq(&id)),
        0x2_1111_1111,
    );
    let out = sent(&mut e);
    assert!(matches!(&out[..], [(_, CmMessage::Drep(d))] if d.local_comm_id == id.local_comm_id()));
    assert_eq!(e.counters().dup(AttrId::DREQ), 1);
    // Another comm ID from the same remote QP: a new connection, not REJ 10.
    let mut other = peer_req(SVC);
    other.local_comm_id = 0x0e67_4df0;
    from_peer(at(6), &mut e, CmMessage::Req(other), 0x2_f04d_670e);
    assert!(sent(&mut e).is_empty(), "no REJ 10 for a QPN in timewait");
    let Some(CmEvent::ReqReceived { id: new, .. }) = e.poll_event() else {
        panic!("a new connection")
    };
    assert_eq!(e.state(new.as_ref()), Some(CmState::ReqRcvd));
    assert_eq!(e.state(id.as_ref()), Some(CmState::Timewait));
    // The old connection's own REQ again: not a duplicate of the id in TIMEWAIT; its QPN
    // now belongs to the live connection, so this one is the stale one: REJ 10.
    from_peer(at(7), &mut e, CmMessage::Req(peer_req(SVC)), peer_tid());
    let out = sent(&mut e);
    let [(mad, CmMessage::Rej(rej))] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(
        (rej.reason, rej.remote_comm_id, mad.header.tid),
        (RejectReason::STALE_CONN, PEER_ID, peer_tid())
    );
    assert_eq!(e.counters().dup(AttrId::REQ), 0);
    assert!(events(&mut e).is_empty());
    // The timewait ends as usual.
    e.handle_timeout(at(10_000));
    assert_eq!(
        events(&mut e),
        vec![CmEvent::TimewaitExit { id: id.as_ref() }]
    );
    e.destroy(at(10_001), new);
}

#[test]
fn dreq_for_unknown_id_gets_contextless_drep() {
    let mut e = ep(GUID_B, 6);
    let dreq = DreqRepr {
        local_comm_id: PEER_ID,
        remote_comm_id: 0x1234_5678,
        remote_qpn_eecn: 0x12,
        private_data: [0; 220],
    };
    from_peer(at(0), &mut e, CmMessage::Dreq(dreq), 0x2_0000_0042);
    let out = sent(&mut e);
    assert!(matches!(&out[..], [(m, CmMessage::Drep(d))]
        if m.header.tid == 0x2_0000_0042 && d.local_comm_id == 0x1234_5678 && d.remote_comm_id == PEER_ID));
}

#[test]
fn remote_qpn_collision_rejects_stale_and_dreqs_the_old_one() {
    let mut e = ep(GUID_B, 7);
    let (_l, id) = passive_req(&mut e);
    e.send_rep(at(1), &id, &rep_params()).expect("rep");
    e.notify_comm_est(&id).expect("comm est");
    assert_eq!(
        events(&mut e),
        vec![CmEvent::UserEstablished { id: id.as_ref() }]
    );
    let _ = sent(&mut e);
    // A new REQ from the same remote QP with another comm ID.
    let mut req = peer_req(SVC);
    req.local_comm_id = 0x0e67_4df0;
    from_peer(at(2), &mut e, CmMessage::Req(req), 0x2_f04d_670e);
    let out = sent(&mut e);
    assert!(
        matches!(&out[..], [(_, CmMessage::Rej(r)), (_, CmMessage::Dreq(d))]
        if r.reason == RejectReason::STALE_CONN && r.remote_comm_id == 0x0e67_4df0
        && d.remote_comm_id == PEER_ID),
        "{out:?}"
    );
    assert_eq!(e.state(id.as_ref()), Some(CmState::DreqSent));
}

#[test]
fn sidr_success_and_unsupported() {
    let (mut a, mut b) = (ep(GUID_A, 1), ep(GUID_B, 2));
    let l = b.create_id();
    b.listen(&l, 0x0111_1c06).expect("listen");
    let ia = a.create_id();
    let p = SidrReqParams {
        port: CmPort::default(),
        peer: MadAddr::gsi(gid(2)),
        service_id: 0x0111_1c06,
        partition_key: 0xffff,
        private_data: vec![1, 2, 3],
        timeout: Duration::from_millis(4096),
        max_cm_retries: 15,
    };
    a.sidr_req(at(0), &ia, &p).expect("sidr req");
    pump(at(0), &mut a, &mut b);
    let Some(CmEvent::SidrReqReceived { id, req, .. }) = b.poll_event() else {
        panic!("no SIDR_REQ")
    };
    assert_eq!(req.request_id, ia.local_comm_id());
    b.sidr_rep(
        at(1),
        &id,
        &SidrRepParams {
            status: SidrStatus::SUCCESS,
            qp_num: 0x11,
            qkey: 0x0123_4567,
            ..SidrRepParams::default()
        },
    )
    .expect("sidr rep");
    let log = pump(at(1), &mut a, &mut b);
    assert!(matches!(&log[..], [CmMessage::SidrRep(r)] if r.request_id == ia.local_comm_id()));
    assert!(
        matches!(&events(&mut a)[..], [CmEvent::SidrRepReceived { rep, .. }]
        if rep.status == SidrStatus::SUCCESS && rep.qpn == 0x11 && rep.qkey == 0x0123_4567)
    );
    assert_eq!(a.state(ia.as_ref()), Some(CmState::Idle));
    // Unsupported: nothing listens on the other port.
    let req = SidrReqRepr {
        request_id: PEER_ID,
        partition_key: 0xffff,
        service_id: 0x0111_1c07,
        private_data: [0; 216],
    };
    from_peer(at(2), &mut b, CmMessage::SidrReq(req.clone()), peer_tid());
    let out = sent(&mut b);
    assert!(matches!(&out[..], [(m, CmMessage::SidrRep(r))]
        if m.header.tid == peer_tid() && r.status == SidrStatus::UNSUPPORTED
        && r.qpn == 0 && r.qkey == 0 && r.request_id == PEER_ID));
    // Destroy in SIDR_REQ_RCVD: status REJECT.
    from_peer(
        at(3),
        &mut b,
        CmMessage::SidrReq(SidrReqRepr {
            service_id: 0x0111_1c06,
            ..req
        }),
        peer_tid(),
    );
    let Some(CmEvent::SidrReqReceived { id, .. }) = b.poll_event() else {
        panic!("no SIDR_REQ")
    };
    b.destroy(at(4), id);
    assert!(
        matches!(&sent(&mut b)[..], [(_, CmMessage::SidrRep(r))] if r.status == SidrStatus::REJECT)
    );
}

#[test]
fn destroy_in_each_state_sends_what_the_kernel_sends() {
    // REQ_SENT: REJ TIMEOUT, "other", ARI = our GUID, remote comm ID 0 (lab README).
    let mut a = ep(GUID_A, 1);
    let ia = a.create_id();
    let lcid = ia.local_comm_id();
    a.send_req(at(0), &ia, &req_params(15)).expect("req");
    let _ = sent(&mut a);
    a.destroy(at(1), ia);
    let out = sent(&mut a);
    let [(_, CmMessage::Rej(rej))] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(
        (
            rej.reason,
            rej.message_rejected,
            rej.local_comm_id,
            rej.remote_comm_id,
            rej.reject_info_length
        ),
        (RejectReason::TIMEOUT, RejMessage::OTHER, lcid, 0, 8)
    );
    assert_eq!(rej.ari[..8], GUID_A.to_be_bytes());
    assert!(a.poll_timeout().is_none(), "REQ cancelled");

    // REQ_RCVD: REJ 28 with local comm ID 0; the silent flavour sends nothing.
    let mut e = ep(GUID_B, 2);
    let (l, id) = passive_req(&mut e);
    e.destroy(at(1), id);
    assert!(matches!(&sent(&mut e)[..], [(_, CmMessage::Rej(r))]
        if r.reason == RejectReason::CONSUMER_DEFINED && r.local_comm_id == 0 && r.message_rejected == RejMessage::REQ));
    from_peer(at(2), &mut e, CmMessage::Req(peer_req(SVC)), peer_tid());
    let Some(CmEvent::ReqReceived { id, .. }) = e.poll_event() else {
        panic!("the REQ is new again")
    };
    e.destroy_silently(at(3), id);
    assert!(sent(&mut e).is_empty());

    // REP_SENT: REJ 28, msg "other" (cm_format_rej's default), our comm ID; the REJ puts
    // the id in TIMEWAIT, and the destroy ends it at once (cm_free_id).
    from_peer(at(4), &mut e, CmMessage::Req(peer_req(SVC)), peer_tid());
    let Some(CmEvent::ReqReceived { id, .. }) = e.poll_event() else {
        panic!("REQ")
    };
    let lcid = id.local_comm_id();
    e.send_rep(at(5), &id, &rep_params()).expect("rep");
    let _ = sent(&mut e);
    e.destroy(at(6), id);
    assert!(matches!(&sent(&mut e)[..], [(_, CmMessage::Rej(r))]
        if r.reason == RejectReason::CONSUMER_DEFINED && r.local_comm_id == lcid && r.message_rejected == RejMessage::OTHER));
    assert!(e.mad().poll_timeout().is_none(), "REP cancelled");

    assert_eq!(e.state(CmIdRef(lcid)), None, "gone, its timewait too");
    // LISTEN: the listener goes away; REQs now get REJ 8. (The same REQ again is a new
    // connection: the destroyed id's entries went with it.)
    from_peer(at(7), &mut e, CmMessage::Req(peer_req(SVC)), peer_tid());
    let Some(CmEvent::ReqReceived { id, .. }) = e.poll_event() else {
        panic!("REQ")
    };
    e.destroy(at(7), id);
    assert!(
        matches!(&sent(&mut e)[..], [(_, CmMessage::Rej(r))] if r.reason == RejectReason::CONSUMER_DEFINED)
    );
    e.destroy(at(7), l);
    let mut other = peer_req(SVC);
    other.local_comm_id = 0x0f67_4df0;
    other.local_qpn = 0x44;
    from_peer(at(8), &mut e, CmMessage::Req(other), 0x2_f04d_670f);
    assert!(
        matches!(&sent(&mut e)[..], [(_, CmMessage::Rej(r))] if r.reason == RejectReason::INVALID_SERVICE_ID)
    );

    // ESTABLISHED: one DREQ, no retransmission, then timewait.
    let (mut a, mut b, ia, ib) = connect();
    a.destroy(at(10), ia);
    let out = sent(&mut a);
    assert!(matches!(&out[..], [(_, CmMessage::Dreq(_))]), "{out:?}");
    a.handle_timeout(at(100_000));
    assert!(sent(&mut a).is_empty() && events(&mut a).is_empty());
    // DREQ_RCVD: DREP.
    b.handle_receive(at(11), MadAddr::gsi(gid(1)), &out[0].0.to_bytes());
    assert!(matches!(
        &events(&mut b)[..],
        [CmEvent::DreqReceived { .. }]
    ));
    b.destroy(at(12), ib);
    assert!(matches!(&sent(&mut b)[..], [(_, CmMessage::Drep(_))]));
    // TIMEWAIT (after destroy: kept until it ends): nothing on the wire.
    b.handle_timeout(at(100_000));
    assert!(sent(&mut b).is_empty() && events(&mut b).is_empty());
}

/// CM MADs of a pcap (Ethernet/IPv4/UDP 4791/BTH/DETH/MAD).
fn kernel_mads(file: &[u8]) -> Vec<Mad> {
    let (recs, _) = softrdma_wire::pcap::read_all(file).expect("pcap");
    recs.iter()
        .filter_map(|r| {
            let d = &r.data;
            if d.len() < 62 + 256
                || d.get(12..14) != Some(&[8, 0])
                || d.get(36..38) != Some(&[0x12, 0xb7])
            {
                return None;
            }
            let mad = Mad::parse(d.get(62..62 + 256)?).ok()?;
            (mad.header.mgmt_class == MgmtClass::CM).then_some(mad)
        })
        .collect()
}

fn first<T>(mads: &[Mad], f: impl Fn(CmMessage) -> Option<T>) -> (Mad, T) {
    mads.iter()
        .find_map(|m| f(CmMessage::from_mad(m).ok()?).map(|x| (m.clone(), x)))
        .expect("message in capture")
}

#[test]
fn golden_rep_mirrors_the_kernels() {
    let kreq_mads = kernel_mads(include_bytes!(
        "../../../../fixtures/captures/h_req_single.pcap"
    ));
    let (kmad, kreq) = first(&kreq_mads, |m| match m {
        CmMessage::Req(r) => Some(r),
        _ => None,
    });
    let mut e = ep(GUID_B, 9);
    let l = e.create_id();
    e.listen(&l, kreq.service_id).expect("listen");
    e.handle_receive(at(0), MadAddr::gsi(gid(1)), &kmad.to_bytes());
    let Some(CmEvent::ReqReceived { id, req, .. }) = e.poll_event() else {
        panic!("kernel REQ not taken")
    };
    assert_eq!(req.req, kreq);
    e.send_rep(
        at(1),
        &id,
        &RepParams {
            qp_num: 0x12,
            starting_psn: 0x4242,
            responder_resources: kreq.initiator_depth,
            initiator_depth: kreq.responder_resources,
            rnr_retry_count: kreq.rnr_retry_count,
            ..RepParams::default()
        },
    )
    .expect("rep");
    let out = sent(&mut e);
    let [(mad, CmMessage::Rep(rep))] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(mad.header.tid, kmad.header.tid, "the REQ's TID");
    assert_eq!(rep.remote_comm_id, kreq.local_comm_id);
    // The kernel's REPs to the kernel's REQs: the same relations and constants.
    for file in [
        &include_bytes!("../../../../fixtures/captures/a_cmtime.pcap")[..],
        &include_bytes!("../../../../fixtures/captures/b_rping.pcap")[..],
    ] {
        let mads = kernel_mads(file);
        let (qm, q) = first(&mads, |m| match m {
            CmMessage::Req(r) => Some(r),
            _ => None,
        });
        let (pm, p): (Mad, RepRepr) = first(&mads, |m| match m {
            CmMessage::Rep(r) if r.remote_comm_id == q.local_comm_id => Some(r),
            _ => None,
        });
        assert_eq!(pm.header.tid, qm.header.tid);
        assert_eq!(
            (
                rep.target_ack_delay,
                rep.local_qkey,
                rep.local_eecn,
                rep.failover_accepted,
                rep.srq,
                rep.vendor_id
            ),
            (
                p.target_ack_delay,
                p.local_qkey,
                p.local_eecn,
                p.failover_accepted,
                p.srq,
                p.vendor_id
            )
        );
        assert_eq!(pm.header.attr_mod, mad.header.attr_mod);
        assert_eq!(
            (pm.header.class_version, pm.header.method),
            (mad.header.class_version, mad.header.method)
        );
    }
    let _ = MadHeader::cm_send(0x13, 0);
}

#[test]
fn listen_assigns_service_ids_and_refuses_duplicates() {
    let mut e = ep(GUID_B, 10);
    let (a, b, c) = (e.create_id(), e.create_id(), e.create_id());
    assert_eq!(e.listen(&a, ASSIGN_SERVICE_ID), Ok(ASSIGN_SERVICE_ID));
    assert_eq!(e.listen(&b, ASSIGN_SERVICE_ID), Ok(ASSIGN_SERVICE_ID + 1));
    assert_eq!(e.listen(&c, ASSIGN_SERVICE_ID + 1), Err(CmError::Busy));
    assert_eq!(
        e.listen(&a, SVC),
        Err(CmError::InvalidState(CmState::Listen))
    );
    // Consecutive comm IDs differ in the top byte (the kernel's byte-swapped counter).
    assert_eq!(
        (a.local_comm_id() ^ b.local_comm_id()) & 0x00ff_ffff,
        0,
        "{:08x} {:08x}",
        a.local_comm_id(),
        b.local_comm_id()
    );
}

#[test]
fn stale_rej_to_req_enters_timewait_and_duplicate_mra_is_dropped() {
    let mut a = ep(GUID_A, 1);
    let ia = a.create_id();
    a.send_req(at(0), &ia, &req_params(15)).expect("req");
    let _ = sent(&mut a);
    let tid = a.tid(ia.as_ref()).expect("tid");
    let mra = MraRepr {
        local_comm_id: PEER_ID,
        remote_comm_id: ia.local_comm_id(),
        message_mraed: MraMessage::REQ,
        service_timeout: 24,
        private_data: [0; 222],
    };
    from_peer(at(10), &mut a, CmMessage::Mra(mra.clone()), tid);
    let deadline = a.poll_timeout();
    from_peer(at(20), &mut a, CmMessage::Mra(mra), tid);
    assert_eq!(
        a.poll_timeout(),
        deadline,
        "a repeated MRA does not extend again"
    );
    assert_eq!(a.counters().dup(AttrId::MRA), 1);
    assert_eq!(events(&mut a).len(), 1);
    let rej = RejRepr {
        local_comm_id: 0,
        remote_comm_id: ia.local_comm_id(),
        message_rejected: RejMessage::REQ,
        reject_info_length: 0,
        reason: RejectReason::STALE_CONN,
        ari: [0; 72],
        private_data: [0; 148],
    };
    from_peer(at(30), &mut a, CmMessage::Rej(rej), tid);
    assert!(
        matches!(&events(&mut a)[..], [CmEvent::RejReceived { rej, .. }] if rej.reason == RejectReason::STALE_CONN)
    );
    assert_eq!(a.state(ia.as_ref()), Some(CmState::Timewait));
    assert!(a.mad().poll_timeout().is_none(), "REQ cancelled");
}

#[test]
fn established_duplicates_and_dreq_checks() {
    let (mut a, mut b, ia, ib) = connect();
    // A duplicate REP in ESTABLISHED: the RTU again.
    let rep = RepRepr {
        local_comm_id: ib.local_comm_id(),
        remote_comm_id: ia.local_comm_id(),
        local_qkey: 0,
        local_qpn: 0x12,
        vendor_id: 0,
        local_eecn: 0,
        starting_psn: 0xabcdef,
        responder_resources: 4,
        initiator_depth: 4,
        target_ack_delay: 15,
        failover_accepted: softrdma_wire::cm::FailoverAccepted::ACCEPTED,
        end_to_end_flow_control: true,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: Guid(GUID_B),
        private_data: [0; 196],
    };
    let tid = a.tid(ia.as_ref()).expect("tid");
    a.handle_receive(
        at(50),
        MadAddr::gsi(gid(2)),
        &CmMessage::Rep(rep).to_mad(tid, 0).to_bytes(),
    );
    let out = sent(&mut a);
    assert!(
        matches!(&out[..], [(m, CmMessage::Rtu(_))] if m.header.tid == tid),
        "{out:?}"
    );
    assert_eq!(a.counters().dup(AttrId::REP), 1);
    // A DREQ naming the wrong QP is dropped.
    let mut dreq = DreqRepr {
        local_comm_id: ia.local_comm_id(),
        remote_comm_id: ib.local_comm_id(),
        remote_qpn_eecn: 0x99,
        private_data: [0; 220],
    };
    b.handle_receive(
        at(51),
        MadAddr::gsi(gid(1)),
        &CmMessage::Dreq(dreq.clone()).to_mad(tid, 0).to_bytes(),
    );
    assert!(sent(&mut b).is_empty() && events(&mut b).is_empty());
    // A REJ in ESTABLISHED: timewait.
    dreq.remote_qpn_eecn = 0x12;
    let rej = RejRepr {
        local_comm_id: ia.local_comm_id(),
        remote_comm_id: ib.local_comm_id(),
        message_rejected: RejMessage::OTHER,
        reject_info_length: 0,
        reason: RejectReason::CONSUMER_DEFINED,
        ari: [0; 72],
        private_data: [0; 148],
    };
    b.handle_receive(
        at(52),
        MadAddr::gsi(gid(1)),
        &CmMessage::Rej(rej).to_mad(tid, 0).to_bytes(),
    );
    assert!(matches!(&events(&mut b)[..], [CmEvent::RejReceived { .. }]));
    assert_eq!(b.state(ib.as_ref()), Some(CmState::Timewait));
    // The DREQ now finds the id in TIMEWAIT: a DREP formatted from the id.
    b.handle_receive(
        at(53),
        MadAddr::gsi(gid(1)),
        &CmMessage::Dreq(dreq).to_mad(tid, 0).to_bytes(),
    );
    let out = sent(&mut b);
    assert!(
        matches!(&out[..], [(m, CmMessage::Drep(d))]
        if m.header.tid == tid && d.local_comm_id == ib.local_comm_id() && d.remote_comm_id == ia.local_comm_id()),
        "{out:?}"
    );
    assert_eq!(b.counters().dup(AttrId::DREQ), 1);
}

#[test]
fn garbage_never_panics() {
    let mut e = ep(GUID_B, 11);
    let l = e.create_id();
    e.listen(&l, SVC).expect("listen");
    let mut rng = crate::rand::Rng::new(7);
    for attr in 0x10u16..=0x1b {
        for _ in 0..50 {
            let mut data = [0u8; 232];
            data.iter_mut().for_each(|b| *b = rng.next_u8());
            let mad = Mad {
                header: MadHeader::cm_send(attr, rng.next_u64()),
                data,
            };
            e.handle_receive(at(0), MadAddr::gsi(gid(9)), &mad.to_bytes());
        }
    }
    // Whatever it answered, it answered with CM MADs, and timers run out cleanly.
    let _ = sent(&mut e);
    e.handle_timeout(at(10_000_000));
    while let Some(ev) = e.poll_event() {
        if let CmEvent::ReqReceived { id, .. } | CmEvent::SidrReqReceived { id, .. } = ev {
            e.destroy(at(10_000_001), id);
        }
    }
    let _ = sent(&mut e);
}

#[test]
fn golden_rej_timeout_on_destroy_mirrors_the_kernels() {
    // h_host_req.pcap: rping's REQ retransmitted, then REJ TIMEOUT when rping dies.
    let mads = kernel_mads(include_bytes!(
        "../../../../fixtures/captures/h_host_req.pcap"
    ));
    let (qm, q) = first(&mads, |m| match m {
        CmMessage::Req(r) => Some(r),
        _ => None,
    });
    let (jm, j) = first(&mads, |m| match m {
        CmMessage::Rej(r) if r.local_comm_id == q.local_comm_id => Some(r),
        _ => None,
    });
    assert_eq!(jm.header.tid, qm.header.tid);
    assert_eq!(j.ari[..8], q.local_ca_guid.0.to_be_bytes());
    // Ours.
    let mut a = ep(GUID_A, 12);
    let ia = a.create_id();
    a.send_req(at(0), &ia, &req_params(15)).expect("req");
    let out = sent(&mut a);
    let (om, _) = &out[0];
    a.destroy(at(1), ia);
    let rej_out = sent(&mut a);
    let [(rm, CmMessage::Rej(r))] = &rej_out[..] else {
        panic!("{rej_out:?}")
    };
    assert_eq!(rm.header.tid, om.header.tid);
    assert_eq!(
        (
            r.reason,
            r.message_rejected,
            r.remote_comm_id,
            r.reject_info_length
        ),
        (
            j.reason,
            j.message_rejected,
            j.remote_comm_id,
            j.reject_info_length
        )
    );
    assert_eq!(r.ari[..8], GUID_A.to_be_bytes());
    assert_eq!(r.ari[8..], j.ari[8..]);
    assert_eq!(r.private_data, j.private_data);
}

#[test]
fn golden_no_listener_answers_equal_the_kernels_bytes() {
    // d_reject.pcap: REQ to port 9999 → REJ 8; SIDR_REQ to 7174 → SIDR_REP status 1.
    let mads = kernel_mads(include_bytes!(
        "../../../../fixtures/captures/d_reject.pcap"
    ));
    let mut e = ep(GUID_B, 13);
    let mut checked = 0;
    for (ask, answer) in [(0x10u16, 0x12u16), (0x17, 0x18)] {
        let q = mads
            .iter()
            .find(|m| m.header.attr_id == ask)
            .expect("request");
        let k = mads
            .iter()
            .find(|m| m.header.attr_id == answer && m.header.tid == q.header.tid)
            .expect("kernel answer");
        e.handle_receive(at(0), MadAddr::gsi(gid(1)), &q.to_bytes());
        let out = sent(&mut e);
        let [(ours, _)] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(ours.to_bytes(), k.to_bytes(), "attr {answer:#x}");
        checked += 1;
    }
    assert_eq!(checked, 2);
}

// ---- ownership, and the kernel's rules where we differed (the tracker issue) ----------

/// A REP from the scripted peer (comm ID PEER_ID, QPN 0x33) for `to`.
fn peer_rep(to: &CmId, rnr_retry_count: u8) -> RepRepr {
    RepRepr {
        local_comm_id: PEER_ID,
        remote_comm_id: to.local_comm_id(),
        local_qkey: 0,
        local_qpn: 0x33,
        vendor_id: 0,
        local_eecn: 0,
        starting_psn: 0x777,
        responder_resources: 2,
        initiator_depth: 2,
        target_ack_delay: 15,
        failover_accepted: softrdma_wire::cm::FailoverAccepted::ACCEPTED,
        end_to_end_flow_control: true,
        rnr_retry_count,
        srq: false,
        local_ca_guid: Guid(GUID_B),
        private_data: [0; 196],
    }
}

fn peer_rtu(to: &CmId, pd: &[u8]) -> RtuRepr {
    RtuRepr {
        local_comm_id: PEER_ID,
        remote_comm_id: to.local_comm_id(),
        private_data: softrdma_wire::cm::pad(pd),
    }
}

/// A passive id ESTABLISHED with the scripted peer (REQ, REP, RTU). Returns the listener
/// and the id.
fn passive_established(e: &mut SinglePortCm) -> (CmId, CmId) {
    let (l, id) = passive_req(e);
    e.send_rep(at(1), &id, &rep_params()).expect("rep");
    let _ = sent(e);
    from_peer(at(2), e, CmMessage::Rtu(peer_rtu(&id, &[])), peer_tid());
    assert!(matches!(&events(e)[..], [CmEvent::RtuReceived { .. }]));
    (l, id)
}

#[test]
fn states_print_their_ibta_names() {
    assert_eq!(CmState::MraRepRcvd.to_string(), "MRA_REP_RCVD");
    assert_eq!(CmState::Timewait.kernel_name(), "IB_CM_TIMEWAIT");
    assert_eq!(format!("{:<13}|", CmState::Idle), "IDLE         |");
}

/// Dropping the event that owns a new id destroys the id, like the kernel's non-zero
/// return from the handler: REJ 28 (REQ_RCVD) or SIDR_REP status 2 (SIDR_REQ_RCVD) at the
/// CM's next call, and no state left. (Before: the id stayed, nothing was answered.)
#[test]
fn dropping_an_event_that_owns_an_id_destroys_the_id() {
    let mut e = ep(GUID_B, 20);
    let l = e.create_id();
    e.listen(&l, SVC).expect("listen");
    from_peer(at(0), &mut e, CmMessage::Req(peer_req(SVC)), peer_tid());
    let ev = e.poll_event().expect("REQ");
    let id = ev.id();
    assert_eq!(e.state(id), Some(CmState::ReqRcvd));
    assert_eq!(CmEndpoint::poll_timeout(&e), None);
    drop(ev);
    assert_eq!(
        CmEndpoint::poll_timeout(&e),
        Some(at(0)),
        "the CM asks to run at once"
    );
    let out = sent(&mut e);
    assert!(
        matches!(&out[..], [(m, CmMessage::Rej(r))] if r.reason == RejectReason::CONSUMER_DEFINED
        && r.local_comm_id == 0 && r.remote_comm_id == PEER_ID && m.header.tid == peer_tid()),
        "{out:?}"
    );
    assert_eq!(e.state(id), None);
    assert_eq!(e.id_count(), 1, "only the listener");
    // The same for a SIDR_REQ: status 2 (REJECT).
    let req = SidrReqRepr {
        request_id: PEER_ID,
        partition_key: 0xffff,
        service_id: SVC,
        private_data: [0; 216],
    };
    from_peer(at(1), &mut e, CmMessage::SidrReq(req), peer_tid());
    let ev = e.poll_event().expect("SIDR_REQ");
    assert!(matches!(ev, CmEvent::SidrReqReceived { .. }));
    drop(ev);
    e.handle_timeout(at(1));
    let out = sent(&mut e);
    assert!(
        matches!(&out[..], [(_, CmMessage::SidrRep(r))] if r.status == SidrStatus::REJECT
        && r.request_id == PEER_ID),
        "{out:?}"
    );
    assert_eq!(e.id_count(), 1);
    // A dropped listener stops listening.
    drop(l);
    e.handle_timeout(at(2));
    assert_eq!(e.id_count(), 0);
}

/// A command that consumes the id and fails hands it back with the error: a `reject` with
/// private data too long leaves the id in MRA_REQ_SENT and the user's (before: the id was
/// lost, and the connection kept answering the peer's REQs with MRAs).
#[test]
fn a_refused_reject_hands_the_id_back() {
    let mut e = ep(GUID_B, 21);
    let (_l, id) = passive_req(&mut e);
    e.send_mra(at(1), &id, CMA_CM_MRA_SETTING, true, &[])
        .expect("mra");
    let lcid = id.local_comm_id();
    let err = e
        .reject(at(2), id, RejectReason::CONSUMER_DEFINED, &[], &[7; 149])
        .expect_err("149 bytes do not fit");
    assert_eq!(err.error, CmError::TooLong);
    let id = err.id;
    assert_eq!(id.local_comm_id(), lcid);
    assert_eq!(e.state(id.as_ref()), Some(CmState::MraReqSent));
    let err = e
        .reject(at(2), id, RejectReason::CONSUMER_DEFINED, &[0; 73], &[])
        .expect_err("ARI too long");
    let id = err.id;
    assert!(sent(&mut e).is_empty());
    // Still the user's, and the REJ it sends is MRA_REQ_SENT's.
    e.reject(at(3), id, RejectReason::CONSUMER_DEFINED, &[], b"no")
        .expect("rej");
    let out = sent(&mut e);
    assert!(
        matches!(&out[..], [(_, CmMessage::Rej(r))] if r.local_comm_id == lcid
        && r.message_rejected == RejMessage::REQ && r.private_data.starts_with(b"no")),
        "{out:?}"
    );
    assert_eq!(e.state(CmIdRef(lcid)), None);
}

/// No event is delivered for an id after its destroy: a queued RTU_RECEIVED (before: still
/// delivered), and a listener's queued REQ (whose new id is destroyed in turn: REJ 28).
#[test]
fn no_event_for_an_id_after_its_destroy() {
    let mut e = ep(GUID_B, 22);
    let (l, id) = passive_req(&mut e);
    e.send_rep(at(1), &id, &rep_params()).expect("rep");
    let _ = sent(&mut e);
    from_peer(
        at(2),
        &mut e,
        CmMessage::Rtu(peer_rtu(&id, &[])),
        peer_tid(),
    );
    e.destroy(at(3), id);
    assert_eq!(e.poll_event(), None, "the RTU's event went with the id");
    assert!(matches!(&sent(&mut e)[..], [(_, CmMessage::Dreq(_))]));
    let mut other = peer_req(SVC);
    other.local_comm_id = 0x0f67_4df0;
    other.local_qpn = 0x44;
    from_peer(at(4), &mut e, CmMessage::Req(other), 0x2_f04d_670f);
    e.destroy(at(5), l);
    assert_eq!(e.poll_event(), None, "the listener's REQ went with it");
    let out = sent(&mut e);
    assert!(
        matches!(&out[..], [(_, CmMessage::Rej(r))] if r.reason == RejectReason::CONSUMER_DEFINED
        && r.remote_comm_id == 0x0f67_4df0),
        "{out:?}"
    );
    assert_eq!(e.id_count(), 0);
}

/// Rule 2 (`cm_rep_handler`, `cm_req_handler`, `cm_init_qp_rts_attr`): the active side's
/// RNR retry count is the REP's, the passive side's the REQ's (before: swapped).
#[test]
fn rnr_retry_in_rts_is_the_reps_on_the_active_side_and_the_reqs_on_the_passive() {
    let (mut a, mut b) = (ep(GUID_A, 1), ep(GUID_B, 2));
    let l = b.create_id();
    b.listen(&l, SVC).expect("listen");
    let ia = a.create_id();
    let mut p = req_params(15);
    p.rnr_retry_count = 3;
    a.send_req(at(0), &ia, &p).expect("req");
    pump(at(1), &mut a, &mut b);
    let Some(CmEvent::ReqReceived { id: ib, .. }) = b.poll_event() else {
        panic!("REQ")
    };
    let rep = RepParams {
        rnr_retry_count: 5,
        ..rep_params()
    };
    b.send_rep(at(2), &ib, &rep).expect("rep");
    pump(at(3), &mut a, &mut b);
    assert!(matches!(&events(&mut a)[..], [CmEvent::RepReceived { .. }]));
    let (rts_a, mask) = a.init_qp_attr(&ia, QpState::Rts).expect("rts a");
    let (rts_b, _) = b.init_qp_attr(&ib, QpState::Rts).expect("rts b");
    assert_eq!((rts_a.rnr_retry, rts_b.rnr_retry), (5, 3));
    assert!(mask.contains(QpAttrMask::RNR_RETRY | QpAttrMask::TIMEOUT));
}

/// Rule 3 (`cm_init_qp_init_attr`): INIT gets remote write, and remote read + atomic with
/// responder resources — no local write (before: LOCAL_WRITE too).
#[test]
fn init_access_flags_are_cm_init_qp_init_attr() {
    let mut a = ep(GUID_A, 23);
    let ia = a.create_id();
    let p = ReqParams {
        responder_resources: 0,
        ..req_params(15)
    };
    a.send_req(at(0), &ia, &p).expect("req");
    let (init, mask) = a.init_qp_attr(&ia, QpState::Init).expect("init");
    assert_eq!(init.qp_access_flags, AccessFlags::REMOTE_WRITE);
    assert_eq!(
        mask,
        QpAttrMask::STATE | QpAttrMask::ACCESS_FLAGS | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT
    );
    let (_, b, _, ib) = connect();
    let (init, _) = b.init_qp_attr(&ib, QpState::Init).expect("init");
    assert_eq!(
        init.qp_access_flags,
        AccessFlags(
            AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_ATOMIC.0
        )
    );
    // RTR needs the REP on the active side.
    assert_eq!(
        a.init_qp_attr(&ia, QpState::Rtr).map(|_| ()),
        Err(CmError::InvalidState(CmState::ReqSent))
    );
}

/// Runs `e`'s timers until `done` says stop; returns the events seen (Retry notices left
/// out).
fn run_timers(e: &mut SinglePortCm, done: impl Fn(&CmEvent) -> bool) -> Vec<CmEvent> {
    let mut seen = Vec::new();
    for _ in 0..64 {
        let Some(t) = e.poll_timeout() else { break };
        e.handle_timeout(t);
        let _ = sent(e);
        let evs: Vec<CmEvent> = events(e)
            .into_iter()
            .filter(|x| !matches!(x, CmEvent::Retry { .. }))
            .collect();
        let stop = evs.iter().any(&done);
        seen.extend(evs);
        if stop {
            break;
        }
    }
    seen
}

/// Rule 5 (`cm_process_send_error`: `cm_event.param.send_status = wc_status`): REP_ERROR,
/// DREQ_ERROR and SIDR_REQ_ERROR carry the send status.
#[test]
fn error_events_carry_the_send_status() {
    let timed_out = SendStatus::TimedOut;
    // REP_SENT: the REP runs out of the REQ's retries.
    let mut e = ep(GUID_B, 24);
    let l = e.create_id();
    e.listen(&l, SVC).expect("listen");
    let mut req = peer_req(SVC);
    req.max_cm_retries = 1;
    from_peer(at(0), &mut e, CmMessage::Req(req), peer_tid());
    let Some(CmEvent::ReqReceived { id, .. }) = e.poll_event() else {
        panic!("REQ")
    };
    e.send_rep(at(1), &id, &rep_params()).expect("rep");
    let seen = run_timers(&mut e, |x| matches!(x, CmEvent::RepError { .. }));
    assert_eq!(
        seen,
        vec![CmEvent::RepError {
            id: id.as_ref(),
            status: timed_out
        }]
    );
    assert_eq!(e.state(id.as_ref()), Some(CmState::Idle));
    // DREQ_SENT: DREQ_ERROR, then TIMEWAIT.
    let mut e = ep(GUID_B, 25);
    let (_l, id) = passive_established(&mut e);
    e.send_dreq(at(3), &id, &[]).expect("dreq");
    let seen = run_timers(&mut e, |x| matches!(x, CmEvent::DreqError { .. }));
    assert_eq!(
        seen,
        vec![CmEvent::DreqError {
            id: id.as_ref(),
            status: timed_out
        }]
    );
    assert_eq!(e.state(id.as_ref()), Some(CmState::Timewait));
    // SIDR_REQ_SENT.
    let mut a = ep(GUID_A, 26);
    let ia = a.create_id();
    let p = SidrReqParams {
        port: CmPort::default(),
        peer: MadAddr::gsi(gid(2)),
        service_id: SVC,
        partition_key: 0xffff,
        private_data: vec![],
        timeout: Duration::from_millis(100),
        max_cm_retries: 0,
    };
    a.sidr_req(at(0), &ia, &p).expect("sidr");
    let seen = run_timers(&mut a, |x| matches!(x, CmEvent::SidrReqError { .. }));
    assert_eq!(
        seen,
        vec![CmEvent::SidrReqError {
            id: ia.as_ref(),
            status: timed_out
        }]
    );
}

/// Rule 5 (`cm_rtu_handler`, `cm_drep_handler`, `cm_mra_handler` set
/// `work->cm_event.private_data`): the RTU's, DREP's and MRA's private data reach the user.
#[test]
fn rtu_drep_and_mra_private_data_reach_the_user() {
    // MRA to our REQ.
    let mut a = ep(GUID_A, 27);
    let ia = a.create_id();
    a.send_req(at(0), &ia, &req_params(15)).expect("req");
    let _ = sent(&mut a);
    let tid = a.tid(ia.as_ref()).expect("tid");
    let mra = MraRepr {
        local_comm_id: PEER_ID,
        remote_comm_id: ia.local_comm_id(),
        message_mraed: MraMessage::REQ,
        service_timeout: 20,
        private_data: softrdma_wire::cm::pad(b"busy"),
    };
    from_peer(at(1), &mut a, CmMessage::Mra(mra), tid);
    let ev = events(&mut a);
    assert!(
        matches!(&ev[..], [CmEvent::MraReceived { private_data, service_timeout: 20, .. }]
        if private_data.starts_with(b"busy") && private_data.len() == 222),
        "{ev:?}"
    );
    // RTU to our REP.
    let mut e = ep(GUID_B, 28);
    let (_l, id) = passive_req(&mut e);
    e.send_rep(at(1), &id, &rep_params()).expect("rep");
    let _ = sent(&mut e);
    from_peer(
        at(2),
        &mut e,
        CmMessage::Rtu(peer_rtu(&id, b"ready")),
        peer_tid(),
    );
    let ev = events(&mut e);
    assert!(
        matches!(&ev[..], [CmEvent::RtuReceived { private_data, .. }]
        if private_data.starts_with(b"ready") && private_data.len() == 224),
        "{ev:?}"
    );
    // DREP to our DREQ.
    e.send_dreq(at(3), &id, &[]).expect("dreq");
    let _ = sent(&mut e);
    let drep = DrepRepr {
        local_comm_id: PEER_ID,
        remote_comm_id: id.local_comm_id(),
        private_data: softrdma_wire::cm::pad(b"bye"),
    };
    from_peer(at(4), &mut e, CmMessage::Drep(drep), 0x2_1234_5678);
    let ev = events(&mut e);
    assert!(
        matches!(&ev[..], [CmEvent::DrepReceived { private_data, .. }]
        if private_data.starts_with(b"bye")),
        "{ev:?}"
    );
}

/// Rule 5 (`cm_establish`): COMM_EST on an ESTABLISHED id is `-EISCONN` (before: Ok).
#[test]
fn comm_est_on_an_established_id_is_an_error() {
    let mut e = ep(GUID_B, 29);
    let (_l, id) = passive_established(&mut e);
    assert_eq!(e.notify_comm_est(&id), Err(CmError::IsConnected));
    let (_l2, id2) = {
        let mut f = ep(GUID_B, 30);
        let r = passive_req(&mut f);
        assert_eq!(
            f.notify_comm_est(&r.1),
            Err(CmError::InvalidState(CmState::ReqRcvd))
        );
        r
    };
    let _ = id2;
}

/// Rule 6 (`cm_issue_rej`): the REJ 10 for a REQ from a remote QPN we are connected to is
/// made from the received REQ read as a REJ: the REQ's word 1 (reserved byte + ECE vendor
/// ID) becomes the local comm ID, its comm ID the remote one, its TID the TID; no ARI, no
/// private data, attribute modifier 0. (Before: local comm ID 0.) REJ 8 is made the same
/// way.
#[test]
fn stale_rej_for_a_remote_qpn_collision_carries_the_kernels_fields() {
    let mut e = ep(GUID_B, 31);
    let (_l, id) = passive_established(&mut e);
    let mut req = peer_req(SVC);
    req.local_comm_id = 0x0e67_4df0;
    req.vendor_id = 0x0002c9;
    let tid = 0x2_f04d_670e;
    from_peer(at(5), &mut e, CmMessage::Req(req.clone()), tid);
    let out = sent(&mut e);
    let want = CmMessage::Rej(RejRepr {
        local_comm_id: 0x0000_02c9,
        remote_comm_id: 0x0e67_4df0,
        message_rejected: RejMessage::REQ,
        reject_info_length: 0,
        reason: RejectReason::STALE_CONN,
        ari: [0; 72],
        private_data: [0; 148],
    })
    .to_mad(tid, 0);
    let [(rej, _), (_, CmMessage::Dreq(d))] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(rej.to_bytes(), want.to_bytes());
    assert_eq!(
        d.remote_comm_id, PEER_ID,
        "and a DREQ to the old connection"
    );
    assert_eq!(e.state(id.as_ref()), Some(CmState::DreqSent));
    // REJ 8 (no listener): the same construction.
    req.service_id = SVC + 1;
    req.local_qpn = 0x55;
    from_peer(at(6), &mut e, CmMessage::Req(req), tid);
    let out = sent(&mut e);
    assert!(
        matches!(&out[..], [(_, CmMessage::Rej(r))] if r.reason == RejectReason::INVALID_SERVICE_ID
        && r.local_comm_id == 0x0000_02c9),
        "{out:?}"
    );
}

/// Rule 7 (`cm_send_handler`, `cm_recv_handler`, the handlers' duplicate counts): sends are
/// counted at their completion, `1 + retries` of them; an answer with no id behind it other
/// than a REJ counts as 2 transmissions and 1 retry; received messages are counted before
/// they are looked at. (Before: counted when posted, retries apart.)
#[test]
fn counters_follow_cm_send_handler() {
    let mut a = ep(GUID_A, 32);
    let ia = a.create_id();
    a.send_req(at(0), &ia, &req_params(15)).expect("req");
    let _ = sent(&mut a);
    assert_eq!(a.counters().tx(AttrId::REQ), 0, "counted at completion");
    let t = a.poll_timeout().expect("REQ timer");
    a.handle_timeout(t);
    assert!(matches!(&sent(&mut a)[..], [(_, CmMessage::Req(_))]));
    let tid = a.tid(ia.as_ref()).expect("tid");
    from_peer(t, &mut a, CmMessage::Rep(peer_rep(&ia, 7)), tid);
    let _ = sent(&mut a);
    let c = a.counters();
    assert_eq!(
        (c.tx(AttrId::REQ), c.retries(AttrId::REQ), c.rx(AttrId::REP)),
        (2, 1, 1)
    );
    a.send_rtu(t, &ia, &[]).expect("rtu");
    let _ = sent(&mut a);
    assert_eq!(
        (
            a.counters().tx(AttrId::RTU),
            a.counters().retries(AttrId::RTU)
        ),
        (1, 0)
    );
    // A duplicate REP: the RTU again, an answer with no id behind it.
    from_peer(t, &mut a, CmMessage::Rep(peer_rep(&ia, 7)), tid);
    assert!(matches!(&sent(&mut a)[..], [(_, CmMessage::Rtu(_))]));
    let c = a.counters();
    assert_eq!(
        (
            c.tx(AttrId::RTU),
            c.retries(AttrId::RTU),
            c.rx(AttrId::REP),
            c.dup(AttrId::REP)
        ),
        (3, 1, 2, 1)
    );
    assert_eq!(c.get("cm_tx_msgs/req"), Some(2));
    assert_eq!(c.get("cm_tx_retries/rtu"), Some(1));
    assert_eq!(c.get("cm_rx_duplicates/rep"), Some(1));
    // Passive: REJ 8 is an answer but a REJ (1, 0); a DREQ for nobody gets a DREP (2, 1);
    // a LAP is counted and dropped.
    let mut e = ep(GUID_B, 33);
    from_peer(at(0), &mut e, CmMessage::Req(peer_req(SVC)), peer_tid());
    let _ = sent(&mut e);
    from_peer(at(0), &mut e, CmMessage::Dreq(peer_dreq(&ia)), peer_tid());
    let _ = sent(&mut e);
    let lap = Mad {
        header: MadHeader::cm_send(AttrId::LAP.0, 1),
        data: [0; 232],
    };
    e.handle_receive(at(0), MadAddr::gsi(gid(9)), &lap.to_bytes());
    let c = e.counters();
    assert_eq!(
        (
            c.tx(AttrId::REJ),
            c.retries(AttrId::REJ),
            c.tx(AttrId::DREP),
            c.retries(AttrId::DREP),
            c.dup(AttrId::DREQ),
            c.rx(AttrId::LAP),
            c.rx_dropped
        ),
        (1, 0, 2, 1, 1, 1, 1)
    );
    assert!(c.to_string().contains("cm_tx_msgs/drep 2\n"));
}

/// `cm_format_dreq` forms the DREQ's TID from our comm ID without making it the id's: on
/// the passive side (whose TID is the peer's REQ's) a DREP resent in TIMEWAIT after our
/// DREQ carries the connection's TID, not the DREQ's.
#[test]
fn our_dreq_does_not_become_the_ids_tid() {
    let (mut a, mut b, ia, ib) = connect();
    let tid = b.tid(ib.as_ref()).expect("tid");
    b.send_dreq(at(10), &ib, &[]).expect("dreq");
    let log = pump(at(11), &mut a, &mut b);
    assert!(matches!(&log[..], [CmMessage::Dreq(_)]));
    let _ = events(&mut a);
    a.send_drep(at(12), &ia, &[]).expect("drep");
    pump(at(13), &mut a, &mut b);
    assert_eq!(b.state(ib.as_ref()), Some(CmState::Timewait));
    assert_eq!(b.tid(ib.as_ref()), Some(tid));
    // The peer's own DREQ, late, finds us in TIMEWAIT: the DREP again, the REQ's TID.
    let dreq = DreqRepr {
        local_comm_id: ia.local_comm_id(),
        remote_comm_id: ib.local_comm_id(),
        remote_qpn_eecn: 0x12,
        private_data: [0; 220],
    };
    from_peer(at(14), &mut b, CmMessage::Dreq(dreq), 0x2_0bad_0bad);
    let out = sent(&mut b);
    assert!(
        matches!(&out[..], [(m, CmMessage::Drep(_))] if m.header.tid == tid),
        "{out:?}"
    );
}

/// `cm_dreq_handler` cancels nothing in MRA_REP_RCVD: the REP keeps being retransmitted
/// (the kernel's behaviour) until the DREP-side cancel or a destroy.
#[test]
fn dreq_in_mra_rep_rcvd_leaves_the_rep_running() {
    let mut e = ep(GUID_B, 34);
    let (_l, id) = passive_req(&mut e);
    e.send_rep(at(1), &id, &rep_params()).expect("rep");
    let _ = sent(&mut e);
    let mra = MraRepr {
        local_comm_id: PEER_ID,
        remote_comm_id: id.local_comm_id(),
        message_mraed: MraMessage::REP,
        service_timeout: 8,
        private_data: [0; 222],
    };
    from_peer(at(2), &mut e, CmMessage::Mra(mra), peer_tid());
    assert_eq!(e.state(id.as_ref()), Some(CmState::MraRepRcvd));
    from_peer(
        at(3),
        &mut e,
        CmMessage::Dreq(peer_dreq(&id)),
        0x2_1111_1111,
    );
    assert!(matches!(
        &events(&mut e)[..],
        [CmEvent::MraReceived { .. }, CmEvent::DreqReceived { .. }]
    ));
    assert_eq!(e.mad().outstanding(), 1, "the REP still runs");
    let t = e.poll_timeout().expect("REP timer");
    e.handle_timeout(t);
    assert!(matches!(&sent(&mut e)[..], [(_, CmMessage::Rep(_))]));
    e.destroy(t, id);
    assert!(matches!(&sent(&mut e)[..], [(_, CmMessage::Drep(_))]));
    assert_eq!(e.mad().outstanding(), 0, "the destroy cancelled the REP");
}

/// `ib_send_cm_rej` does not cancel the outstanding REQ (only a destroy does): it keeps
/// running, and its end is no REQ_ERROR (the id is no longer in REQ_SENT).
#[test]
fn send_rej_leaves_the_req_running() {
    let mut a = ep(GUID_A, 35);
    let ia = a.create_id();
    a.send_req(at(0), &ia, &req_params(0)).expect("req");
    let _ = sent(&mut a);
    a.send_rej(at(1), &ia, RejectReason::CONSUMER_DEFINED, &[], &[])
        .expect("rej");
    assert!(
        matches!(&sent(&mut a)[..], [(_, CmMessage::Rej(r))] if r.message_rejected == RejMessage::OTHER)
    );
    assert_eq!(a.state(ia.as_ref()), Some(CmState::Idle));
    assert_eq!(a.mad().outstanding(), 1);
    let seen = run_timers(&mut a, |_| false);
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(a.state(ia.as_ref()), Some(CmState::Idle));
}

/// `cm_format_sidr_rep` copies the additional information but leaves its length 0.
#[test]
fn sidr_rep_info_length_stays_zero() {
    let mut e = ep(GUID_B, 36);
    let l = e.create_id();
    e.listen(&l, SVC).expect("listen");
    let req = SidrReqRepr {
        request_id: PEER_ID,
        partition_key: 0xffff,
        service_id: SVC,
        private_data: [0; 216],
    };
    from_peer(at(0), &mut e, CmMessage::SidrReq(req), peer_tid());
    let Some(CmEvent::SidrReqReceived { id, .. }) = e.poll_event() else {
        panic!("SIDR_REQ")
    };
    let p = SidrRepParams {
        status: SidrStatus::SUCCESS,
        qp_num: 0x42,
        qkey: 0x1111_2222,
        info: vec![1, 2, 3],
        private_data: vec![],
    };
    e.sidr_rep(at(1), &id, &p).expect("sidr rep");
    let out = sent(&mut e);
    let [(_, CmMessage::SidrRep(r))] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(
        (r.additional_info_length, &r.additional_info[..3]),
        (0, &[1u8, 2, 3][..])
    );
}
