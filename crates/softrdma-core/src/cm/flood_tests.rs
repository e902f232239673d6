//! Floods: one IB CM (with its MAD layer) against a hostile peer writing its own CM MADs,
//! on a virtual clock. Every flood gets what cm.c gives it — a silent drop, a REJ, a
//! context-free DREP, a resent MRA/RTU/DREP — is counted, and leaves the CM's tables and the
//! MAD layer's outstanding sends bounded; nothing panics.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};

use softrdma_wire::cm::{
    AttrId, CmMessage, DrepRepr, DreqRepr, ExtendedTransportType, MraMessage, MraRepr, Path,
    PathMtu, RejMessage, RejRepr, RejectReason, RepRepr, ReqRepr, RtuRepr, SidrRepRepr,
    TransportType,
};
use softrdma_wire::mad::{Method, MgmtClass};
use softrdma_wire::{Gid, Guid};

use super::*;
use crate::mad::MadAddr;
use crate::time::{Duration, Instant};

const SVC: u64 = 0x0106_4e20;
const ATTACKER_GUID: u64 = 0x0bad_0bad_0bad_0bad;

fn gid(n: u8) -> Gid {
    Gid::from(IpAddr::V4(Ipv4Addr::new(10, 66, 0, n)))
}

/// The server (gid 2) and where the others are: the client gid 1, the attacker gid 9.
fn server(limit: Option<usize>) -> (SinglePortCm, CmId) {
    let mut cfg = CmConfig::new(Guid(0xb), RXE_CA_ACK_DELAY, 2);
    if let Some(l) = limit {
        cfg.half_open_limit = l;
    }
    let mut b = SinglePortCm::new(cfg).expect("server");
    let l = b.create_id();
    b.listen(&l, SVC).expect("listen");
    (b, l)
}

/// A REQ as an RDMA CM client would send it, with the attacker's comm ID, QPN and
/// timeouts: the REP wait is `cvt(rep_timeout)` ms with `retries` retries.
fn flood_req(comm_id: u32, qpn: u32, rep_timeout: u8, retries: u8) -> ReqRepr {
    ReqRepr {
        local_comm_id: comm_id,
        service_id: SVC,
        local_ca_guid: Guid(ATTACKER_GUID),
        local_qpn: qpn & 0x00ff_ffff,
        remote_cm_response_timeout: 20,
        transport_service_type: TransportType::RC,
        end_to_end_flow_control: true,
        starting_psn: qpn & 0x00ff_ffff,
        local_cm_response_timeout: rep_timeout,
        retry_count: 7,
        partition_key: 0xffff,
        path_mtu: PathMtu::MTU_1024,
        rnr_retry_count: 7,
        max_cm_retries: retries,
        extended_transport_type: ExtendedTransportType::NONE,
        primary_path: Path {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: gid(9),
            remote_gid: gid(2),
            hop_limit: 64,
            local_ack_timeout: 19,
            ..Path::default()
        },
        ..ReqRepr::default()
    }
}

/// The attacker's bytes for `msg` (TID from its own hi_tid 2 and `low`).
fn wire(msg: CmMessage, low: u32) -> Vec<u8> {
    msg.to_mad(0x0000_0002_0000_0000 | u64::from(low), 0)
        .to_bytes()
        .to_vec()
}

fn hostile(now: Instant, b: &mut SinglePortCm, bytes: &[u8]) {
    b.handle_receive(now, MadAddr::gsi(gid(9)), bytes);
}

/// What the server sends: to the client (returned) or to the attacker (counted, dropped).
fn server_out(b: &mut SinglePortCm, to_attacker: &mut BTreeMap<AttrId, u64>) -> Vec<Vec<u8>> {
    let mut to_client = Vec::new();
    while let Some(o) = b.poll_transmit() {
        if o.dest.gid == gid(1) {
            to_client.push(o.mad.to_bytes().to_vec());
        } else {
            *to_attacker.entry(AttrId(o.mad.header.attr_id)).or_default() += 1;
        }
    }
    to_client
}

fn timers(now: Instant, e: &mut SinglePortCm) {
    if e.poll_timeout().is_some_and(|t| t <= now) {
        e.handle_timeout(now);
    }
}

fn rep() -> RepParams {
    RepParams {
        qp_num: 0x4242,
        starting_psn: 7,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        ..RepParams::default()
    }
}

/// The legitimate client's REQ: a path whose packet lifetime is 4.096 µs·2^8 (1 ms), so
/// the REQ is retried every 2·1 + cvt(14) = 66 ms, 15 times.
fn client_req() -> ReqParams {
    ReqParams::new(CmPort::default(), gid(1), gid(2), SVC, 0x77)
        .with_packet_life_time(8)
        .with_starting_psn(1)
        .with_cm_response_timeouts(14, 14)
}

/// 100,000 REQs with distinct comm IDs and QPNs from a peer that never answers, 100 per
/// ms for a second, against a listener whose user answers (REP) at most 50 a ms, oldest
/// first, and destroys what ends in REP_ERROR. The half-open limit (256 here) bounds the
/// REQs waiting for the user; what is over it is dropped without a REJ and counted; the
/// REPs to the attacker live `cvt(14)·(1 + 2)` = 192 ms, so the accepted ids are at most
/// 50·192 (+ slack). A legitimate client (its REQ retried every 66 ms) connects within a
/// second while the flood runs (starting 300 ms in, with the limit reached), and
/// afterwards only its connection is left.
#[test]
fn req_flood_half_open_limit_bounds_memory_and_a_client_connects() {
    const LIMIT: usize = 256;
    const ANSWER_PER_MS: usize = 50;
    const REP_LIFE_MS: usize = 64 * 3;
    let (mut b, _listen) = server(Some(LIMIT));
    let mut a = SinglePortCm::new(CmConfig::new(Guid(0xa), RXE_CA_ACK_DELAY, 1)).expect("a");
    let mut to_attacker = BTreeMap::new();
    let mut waiting: VecDeque<CmId> = VecDeque::new();
    let mut answered: BTreeMap<CmIdRef, CmId> = BTreeMap::new();
    let mut legit_passive: Option<CmIdRef> = None;
    let start = Instant::from_millis(10);
    // The client starts 300 ms into the flood, when the half-open ids are at the limit.
    let client_start = start + Duration::from_millis(300);
    let mut client = a.create_id();
    let mut client_up: Option<Instant> = None;
    let mut client_tries = 1;
    let mut sent = 0u32;
    let (mut created, mut client_reqs) = (0u64, 0u64);
    let mut max_ids = 0;
    let mut rng = crate::rand::Rng::new(7);
    // 10 µs steps: a flood REQ, the timers, the wire, the users; the server's user answers
    // one waiting REQ in half of the steps, at random (50 a ms).
    for step in 0..140_000u64 {
        let now = start + Duration::from_micros(step * 10);
        if step < 100_000 {
            // Distinct comm IDs (an odd multiplier is a bijection of u32).
            let id = (sent + 1).wrapping_mul(0x9e37_79b1);
            let bytes = wire(CmMessage::Req(flood_req(id, sent, 14, 2)), id);
            hostile(now, &mut b, &bytes);
            sent += 1;
        }
        if now == client_start {
            assert_eq!(b.half_open(), LIMIT);
            a.send_req(now, &client, &client_req()).expect("req");
        }
        timers(now, &mut a);
        timers(now, &mut b);
        if rng.next_u32() % 2 == 0 {
            if let Some(id) = waiting.pop_front() {
                b.send_rep(now, &id, &rep()).expect("rep");
                answered.insert(id.as_ref(), id);
            }
        }
        // The wire between the client and the server (instant).
        loop {
            let mut moved = false;
            while let Some(o) = a.poll_transmit() {
                client_reqs += u64::from(o.mad.header.attr_id == AttrId::REQ.0);
                b.handle_receive(now, MadAddr::gsi(gid(1)), &o.mad.to_bytes());
                moved = true;
            }
            for m in server_out(&mut b, &mut to_attacker) {
                a.handle_receive(now, MadAddr::gsi(gid(2)), &m);
                moved = true;
            }
            // The server's user.
            while let Some(ev) = b.poll_event() {
                match ev {
                    CmEvent::ReqReceived { id, req, .. } => {
                        created += 1;
                        if req.peer.gid == gid(1) {
                            legit_passive = Some(id.as_ref());
                        }
                        waiting.push_back(id);
                    }
                    CmEvent::RepError { id, .. } => {
                        let id = answered.remove(&id).expect("an answered id");
                        b.destroy(now, id);
                    }
                    CmEvent::RtuReceived { id, .. } => {
                        assert_eq!(Some(id), legit_passive);
                    }
                    CmEvent::Retry { .. } => {}
                    ev => panic!("server: {ev:?}"),
                }
                moved = true;
            }
            // The client.
            while let Some(ev) = a.poll_event() {
                match ev {
                    CmEvent::RepReceived { id, .. } => {
                        assert_eq!(id, client.as_ref());
                        a.send_rtu(now, &client, &[]).expect("rtu");
                        client_up = Some(now);
                    }
                    CmEvent::ReqError { .. } => {
                        // Connect again.
                        let old = std::mem::replace(&mut client, a.create_id());
                        a.destroy(now, old);
                        a.send_req(now, &client, &client_req()).expect("req");
                        client_tries += 1;
                    }
                    CmEvent::Retry { .. } | CmEvent::MraReceived { .. } => {}
                    ev => panic!("client: {ev:?}"),
                }
                moved = true;
            }
            if !moved {
                break;
            }
        }
        // The bounds.
        if step % 100 == 0 {
            let s = b.table_sizes();
            assert!(s.half_open <= LIMIT, "{s:?}");
            assert!(answered.len() <= ANSWER_PER_MS * (REP_LIFE_MS + 3), "{s:?}");
            assert_eq!(s.ids, 1 + waiting.len() + answered.len(), "{s:?}");
            assert!(b.mad().outstanding() <= answered.len(), "{s:?}");
            assert!(s.events == 0 && s.timewaits == 0, "{s:?}");
            max_ids = max_ids.max(s.ids);
        }
    }
    let up = client_up.expect("the client connected");
    assert!(
        up - client_start <= Duration::from_secs(1),
        "{:?}",
        up - client_start
    );
    assert_eq!(a.state(client.as_ref()), Some(CmState::Established));
    let c = b.counters();
    let reqs = u64::from(sent) + client_reqs;
    assert_eq!(c.rx(AttrId::REQ), reqs);
    assert!(c.half_open_drops >= 40_000, "{c:?}");
    // Every REQ made a new id, was dropped at the limit, or was a duplicate of the client's.
    assert_eq!(
        reqs,
        created + c.half_open_drops + c.dup(AttrId::REQ),
        "{c:?}"
    );
    // Nothing was sent to the attacker but REPs (no REJ: a silent drop).
    assert_eq!(
        to_attacker.keys().copied().collect::<Vec<_>>(),
        [AttrId::REP]
    );
    // Afterwards only the listener and the client's connection are left.
    let s = b.table_sizes();
    assert_eq!(
        (s.ids, s.half_open, s.remote_ids, s.remote_qpns),
        (2, 0, 1, 1),
        "{s:?}"
    );
    assert_eq!((s.sends, s.events, s.mad_ops), (0, 0, 0), "{s:?}");
    assert_eq!(b.mad().outstanding(), 0);
    println!(
        "REQ flood: {sent} REQs, {} dropped at the half-open limit, most ids at once {max_ids}, \
         client connected after {:?} ({client_tries} REQ ids)",
        c.half_open_drops,
        up - client_start
    );
}

/// 100,000 REQs against a listener whose user never answers, with the default limit: the
/// first [`DEFAULT_HALF_OPEN_LIMIT`] make ids, the rest are dropped without a REJ; nothing
/// is sent, nothing else grows.
#[test]
fn req_flood_unanswered_stops_at_the_default_limit() {
    let (mut b, _listen) = server(None);
    let mut held = Vec::new();
    let mut out = BTreeMap::new();
    for n in 0..100_000u32 {
        let now = Instant::from_micros(1_000 + u64::from(n));
        let id = (n + 1).wrapping_mul(0x9e37_79b1);
        hostile(
            now,
            &mut b,
            &wire(CmMessage::Req(flood_req(id, n, 20, 15)), id),
        );
        while let Some(ev) = b.poll_event() {
            let CmEvent::ReqReceived { id, .. } = ev else {
                panic!("{ev:?}")
            };
            held.push(id);
        }
        assert!(server_out(&mut b, &mut out).is_empty());
    }
    assert!(out.is_empty(), "{out:?}");
    let s = b.table_sizes();
    assert_eq!(held.len(), DEFAULT_HALF_OPEN_LIMIT);
    assert_eq!(s.half_open, DEFAULT_HALF_OPEN_LIMIT);
    assert_eq!(s.ids, DEFAULT_HALF_OPEN_LIMIT + 1);
    assert_eq!((s.remote_ids, s.remote_qpns), (held.len(), held.len()));
    assert_eq!((s.sends, s.timewaits, s.events), (0, 0, 0));
    assert_eq!(b.mad().outstanding(), 0);
    let c = b.counters();
    assert_eq!(c.rx(AttrId::REQ), 100_000);
    assert_eq!(c.half_open_drops, 100_000 - DEFAULT_HALF_OPEN_LIMIT as u64);
    // The user answers one: one slot, and the next REQ gets it.
    let id = held.pop().expect("one");
    b.send_rep(Instant::from_millis(1_000), &id, &rep())
        .expect("rep");
    let n = 100_001u32.wrapping_mul(0x9e37_79b1);
    hostile(
        Instant::from_millis(1_000),
        &mut b,
        &wire(CmMessage::Req(flood_req(n, 100_001, 20, 15)), n),
    );
    assert!(matches!(b.poll_event(), Some(CmEvent::ReqReceived { .. })));
    assert_eq!(b.half_open(), DEFAULT_HALF_OPEN_LIMIT);
    drop(held);
}

/// 50,000 SIDR REQs with distinct request IDs against a listener whose user never answers:
/// a SIDR REQ holds an id in SIDR_REQ_RCVD until the user answers, like a REQ, so the
/// half-open limit bounds them too (before, every SIDR REQ made an id: 50,000 ids). Over the
/// limit they are dropped without an answer and counted; an answer frees a slot.
#[test]
fn sidr_req_flood_unanswered_stops_at_the_half_open_limit() {
    use softrdma_wire::cm::SidrReqRepr;
    const LIMIT: usize = 256;
    let (mut b, _listen) = server(Some(LIMIT));
    let mut held = Vec::new();
    let mut out = BTreeMap::new();
    for n in 0..50_000u32 {
        let now = Instant::from_micros(1_000 + u64::from(n));
        let rid = (n + 1).wrapping_mul(0x9e37_79b1);
        let req = SidrReqRepr {
            request_id: rid,
            partition_key: 0xffff,
            service_id: SVC,
            private_data: [0; 216],
        };
        hostile(now, &mut b, &wire(CmMessage::SidrReq(req), rid));
        while let Some(ev) = b.poll_event() {
            let CmEvent::SidrReqReceived { id, .. } = ev else {
                panic!("{ev:?}")
            };
            held.push(id);
        }
        assert!(server_out(&mut b, &mut out).is_empty());
    }
    assert!(out.is_empty(), "{out:?}");
    let s = b.table_sizes();
    assert_eq!(held.len(), LIMIT);
    assert_eq!(
        (s.half_open, s.ids, s.remote_sidr),
        (LIMIT, LIMIT + 1, LIMIT)
    );
    assert_eq!((s.sends, s.timewaits, s.events), (0, 0, 0));
    let c = b.counters();
    assert_eq!(c.rx(AttrId::SIDR_REQ), 50_000);
    assert_eq!(c.half_open_drops, 50_000 - LIMIT as u64);
    // The user answers one (SIDR_REP REJECT by destroying it): a slot for the next.
    let id = held.pop().expect("one");
    b.destroy(Instant::from_millis(1_000), id);
    assert_eq!(b.half_open(), LIMIT - 1);
    let rid = 50_001u32.wrapping_mul(0x9e37_79b1);
    let req = SidrReqRepr {
        request_id: rid,
        partition_key: 0xffff,
        service_id: SVC,
        private_data: [0; 216],
    };
    hostile(
        Instant::from_millis(1_000),
        &mut b,
        &wire(CmMessage::SidrReq(req), rid),
    );
    assert!(matches!(
        b.poll_event(),
        Some(CmEvent::SidrReqReceived { .. })
    ));
    assert_eq!(b.half_open(), LIMIT);
    drop(held);
}

/// A connection A (gid 1, active) – B (gid 2, passive), ESTABLISHED.
fn established() -> (SinglePortCm, SinglePortCm, CmId, CmId, CmId) {
    let (mut b, listen) = server(None);
    let mut a = SinglePortCm::new(CmConfig::new(Guid(0xa), RXE_CA_ACK_DELAY, 1)).expect("a");
    let ia = a.create_id();
    let now = Instant::from_millis(1);
    a.send_req(now, &ia, &client_req()).expect("req");
    let mut ib = None;
    for _ in 0..4 {
        while let Some(o) = a.poll_transmit() {
            b.handle_receive(now, MadAddr::gsi(gid(1)), &o.mad.to_bytes());
        }
        while let Some(o) = b.poll_transmit() {
            a.handle_receive(now, MadAddr::gsi(gid(2)), &o.mad.to_bytes());
        }
        while let Some(ev) = b.poll_event() {
            if let CmEvent::ReqReceived { id, .. } = ev {
                b.send_rep(now, &id, &rep()).expect("rep");
                ib = Some(id);
            }
        }
        while let Some(ev) = a.poll_event() {
            if let CmEvent::RepReceived { .. } = ev {
                a.send_rtu(now, &ia, &[]).expect("rtu");
            }
        }
    }
    let ib = ib.expect("passive id");
    assert_eq!(a.state(ia.as_ref()), Some(CmState::Established));
    assert_eq!(b.state(ib.as_ref()), Some(CmState::Established));
    (a, b, listen, ia, ib)
}

/// Floods of messages naming ids that do not exist — DREQ, RTU, REJ, MRA, DREP, REP,
/// SIDR_REP — and REQs for a service nobody listens on, 20,000 of each, at a server with one
/// established connection: DREQ gets cm_issue_drep's context-free DREP (counted as a
/// duplicate DREQ), the REQ cm_issue_rej's REJ 8, everything else is dropped (counted);
/// the connection is untouched and nothing grows.
#[test]
fn unknown_id_flood_of_every_message() {
    const N: u32 = 20_000;
    let (_a, mut b, _listen, _ia, ib) = established();
    let before = b.table_sizes();
    let c0 = b.counters();
    let mut out = BTreeMap::new();
    for n in 0..N {
        let now = Instant::from_millis(10) + Duration::from_micros(u64::from(n));
        // Comm IDs that are none of ours (ours are in `before`; a collision would be a
        // 1-in-2^32 chance per message, and the checks below would show it).
        let (l, r) = (
            (n + 1).wrapping_mul(0x9e37_79b1),
            n.wrapping_mul(0x85eb_ca6b) | 1,
        );
        let msgs = [
            CmMessage::Dreq(DreqRepr {
                local_comm_id: l,
                remote_comm_id: r,
                remote_qpn_eecn: 0x4242,
                ..DreqRepr::default()
            }),
            CmMessage::Rtu(RtuRepr {
                local_comm_id: l,
                remote_comm_id: r,
                ..RtuRepr::default()
            }),
            CmMessage::Rej(RejRepr {
                local_comm_id: l,
                remote_comm_id: r,
                message_rejected: RejMessage::REP,
                reason: RejectReason::CONSUMER_DEFINED,
                ..RejRepr::default()
            }),
            CmMessage::Rej(RejRepr {
                local_comm_id: l,
                remote_comm_id: r,
                message_rejected: RejMessage::REQ,
                reason: RejectReason::TIMEOUT,
                ..RejRepr::default()
            }),
            CmMessage::Mra(MraRepr {
                local_comm_id: l,
                remote_comm_id: r,
                message_mraed: MraMessage::REQ,
                service_timeout: 20,
                ..MraRepr::default()
            }),
            CmMessage::Drep(DrepRepr {
                local_comm_id: l,
                remote_comm_id: r,
                ..DrepRepr::default()
            }),
            CmMessage::Rep(RepRepr {
                local_comm_id: l,
                remote_comm_id: r,
                local_qpn: 0x55,
                local_ca_guid: Guid(ATTACKER_GUID),
                ..RepRepr::default()
            }),
            CmMessage::SidrRep(SidrRepRepr {
                request_id: r,
                ..SidrRepRepr::default()
            }),
            CmMessage::Req(ReqRepr {
                service_id: 0xdead,
                ..flood_req(l, n, 20, 15)
            }),
        ];
        for m in msgs {
            hostile(now, &mut b, &wire(m, l));
        }
        assert!(server_out(&mut b, &mut out).is_empty());
        if let Some(ev) = b.poll_event() {
            panic!("{ev:?}");
        }
    }
    let n = u64::from(N);
    assert_eq!(
        out,
        BTreeMap::from([(AttrId::REJ, n), (AttrId::DREP, n)]),
        "a DREP per DREQ, a REJ per REQ, nothing else"
    );
    let c = b.counters();
    for (a, k) in [
        (AttrId::DREQ, 1),
        (AttrId::RTU, 1),
        (AttrId::REJ, 2),
        (AttrId::MRA, 1),
        (AttrId::DREP, 1),
        (AttrId::REP, 1),
        (AttrId::SIDR_REP, 1),
    ] {
        assert_eq!(c.rx(a) - c0.rx(a), k * n, "{a:?}");
    }
    assert_eq!(
        c.dup(AttrId::DREQ),
        n,
        "cm_issue_drep counts a duplicate DREQ"
    );
    assert_eq!(
        c.rx_dropped - c0.rx_dropped,
        7 * n,
        "RTU, 2 REJ, MRA, DREP, REP, SIDR_REP"
    );
    assert_eq!(b.table_sizes(), before);
    assert_eq!(b.mad().outstanding(), 0);
    assert_eq!(b.state(ib.as_ref()), Some(CmState::Established));
}

/// Duplicate storms, 20,000 copies each: the REQ of a connection in REQ_RCVD (dropped), in
/// MRA_REQ_SENT (the MRA again, each time), the REP of an ESTABLISHED active id (the RTU
/// again), the DREQ of an id in TIMEWAIT (the DREP again) and the RTU of an ESTABLISHED
/// passive id (dropped). Each is counted as a duplicate; no id, table entry or send stays.
#[test]
fn duplicate_storm_flood() {
    const N: u64 = 20_000;
    let (mut a, mut b, _listen, ia, ib) = established();
    let mut out = BTreeMap::new();
    let t = Instant::from_millis(10);
    // Two REQs from the attacker: one left in REQ_RCVD, one put in MRA_REQ_SENT.
    let (r1, r2) = (0x1111_1111u32, 0x2222_2222u32);
    let req1 = wire(CmMessage::Req(flood_req(r1, 0x501, 20, 15)), r1);
    let req2 = wire(CmMessage::Req(flood_req(r2, 0x502, 20, 15)), r2);
    hostile(t, &mut b, &req1);
    hostile(t, &mut b, &req2);
    let mut ids = Vec::new();
    while let Some(ev) = b.poll_event() {
        let CmEvent::ReqReceived { id, .. } = ev else {
            panic!("{ev:?}")
        };
        ids.push(id);
    }
    b.send_mra(t, &ids[1], 24, true, &[]).expect("mra");
    // The REP B sent A, captured from a fresh exchange is not needed: A's REP duplicate is
    // built from the connection's ids.
    let rep_dup = wire(
        CmMessage::Rep(RepRepr {
            local_comm_id: ib.local_comm_id(),
            remote_comm_id: ia.local_comm_id(),
            local_qpn: 0x4242,
            local_ca_guid: Guid(0xb),
            ..RepRepr::default()
        }),
        ia.local_comm_id().swap_bytes(),
    );
    let rtu_dup = wire(
        CmMessage::Rtu(RtuRepr {
            local_comm_id: ia.local_comm_id(),
            remote_comm_id: ib.local_comm_id(),
            ..RtuRepr::default()
        }),
        ia.local_comm_id().swap_bytes(),
    );
    for n in 0..N {
        let now = t + Duration::from_micros(n);
        hostile(now, &mut b, &req1);
        hostile(now, &mut b, &req2);
        hostile(now, &mut b, &rtu_dup);
        a.handle_receive(now, MadAddr::gsi(gid(2)), &rep_dup);
        server_out(&mut b, &mut out);
        while let Some(o) = a.poll_transmit() {
            assert_eq!(o.mad.header.attr_id, AttrId::RTU.0);
        }
        assert!(b.poll_event().is_none() && a.poll_event().is_none());
    }
    assert_eq!(
        out,
        BTreeMap::from([(AttrId::MRA, N)]),
        "an MRA per duplicate"
    );
    let cb = b.counters();
    assert_eq!(cb.dup(AttrId::REQ), 2 * N);
    assert_eq!(cb.dup(AttrId::RTU), N);
    assert_eq!(a.counters().dup(AttrId::REP), N);
    assert_eq!(
        a.counters().tx(AttrId::RTU),
        1 + 2 * N,
        "resent RTUs count twice"
    );
    assert_eq!(b.table_sizes().ids, 4);
    assert_eq!(b.table_sizes().sends, 0);
    assert_eq!((a.mad().outstanding(), b.mad().outstanding()), (0, 0));
    // A DREQ storm at an id in TIMEWAIT: the DREP again for each.
    let now = t + Duration::from_millis(100);
    b.send_dreq(now, &ib, &[]).expect("dreq");
    let dreq = b.poll_transmit().expect("dreq").mad.to_bytes();
    a.handle_receive(now, MadAddr::gsi(gid(2)), &dreq);
    let Some(CmEvent::DreqReceived { .. }) = a.poll_event() else {
        panic!("no DREQ")
    };
    a.send_drep(now, &ia, &[]).expect("drep");
    assert_eq!(a.state(ia.as_ref()), Some(CmState::Timewait));
    while a.poll_transmit().is_some() {}
    for n in 0..N {
        a.handle_receive(now + Duration::from_micros(n), MadAddr::gsi(gid(2)), &dreq);
        let o = a.poll_transmit().expect("the DREP again");
        assert_eq!(o.mad.header.attr_id, AttrId::DREP.0);
        assert!(a.poll_transmit().is_none() && a.poll_event().is_none());
    }
    assert_eq!(a.counters().dup(AttrId::DREQ), N);
    let s = a.table_sizes();
    assert_eq!(
        (s.ids, s.timewaits, s.sends, s.remote_ids),
        (1, 1, 0, 0),
        "{s:?}"
    );
    drop(ids);
}

/// Malformed and hostile MADs, 100,000 of them: valid CM messages with random bytes
/// overwritten, truncated ones, wrong base or class versions, methods and attributes,
/// SMP classes on QP1. Dropped by the MAD layer or the CM (counted), or handled as what
/// they parse to; nothing panics, and with nobody answering, nothing grows past the
/// half-open limit.
#[test]
fn malformed_mad_flood() {
    let (mut a, mut b, _listen, ia, _ib) = established();
    let mut rng = crate::rand::Rng::new(0x5eed);
    let bases: Vec<Vec<u8>> = vec![
        wire(CmMessage::Req(flood_req(0x3333_0000, 0x600, 20, 15)), 1),
        wire(
            CmMessage::Dreq(DreqRepr {
                local_comm_id: 0x1,
                remote_comm_id: ia.local_comm_id(),
                ..DreqRepr::default()
            }),
            2,
        ),
        wire(CmMessage::Rej(RejRepr::default()), 3),
        wire(CmMessage::Mra(MraRepr::default()), 4),
        wire(CmMessage::Rtu(RtuRepr::default()), 5),
    ];
    let mut out = BTreeMap::new();
    let mut held = Vec::new();
    for n in 0..100_000u64 {
        let now = Instant::from_millis(10) + Duration::from_micros(n);
        let mut m = bases[(rng.next_u32() % bases.len() as u32) as usize].clone();
        match rng.next_u32() % 8 {
            // Random bytes anywhere.
            0..=2 => {
                for _ in 0..1 + rng.next_u32() % 8 {
                    let i = (rng.next_u32() as usize) % m.len();
                    m[i] = rng.next_u32() as u8;
                }
            }
            // Truncated.
            3 => m.truncate((rng.next_u32() as usize) % m.len()),
            // Header fields: base version, class, class version, method, attribute.
            4 => m[0] = rng.next_u32() as u8,
            5 => {
                m[1] = [
                    MgmtClass::SUBN_LID_ROUTED.0,
                    MgmtClass::CM.0,
                    rng.next_u32() as u8,
                ][(rng.next_u32() % 3) as usize]
            }
            6 => {
                m[3] = [
                    Method::GET.0,
                    Method::SET.0,
                    Method::GET_RESP.0,
                    rng.next_u32() as u8,
                ][(rng.next_u32() % 4) as usize]
            }
            // Attributes, and CM ClassPortInfo Get()s (answered "unsupported": ib_cm
            // registers Send() only).
            _ => {
                let attr = (0x0f + rng.next_u32() % 0x10) as u16;
                m[16..18].copy_from_slice(&attr.to_be_bytes());
                if rng.next_u32() % 4 == 0 {
                    m[3] = Method::GET.0;
                    m[16..18].copy_from_slice(&1u16.to_be_bytes());
                }
            }
        }
        // The comm IDs of the REQ vary so that some make ids.
        if m.len() > 28 && rng.next_u32() % 2 == 0 {
            m[24..28].copy_from_slice(&rng.next_u32().to_be_bytes());
        }
        b.handle_receive(now, MadAddr::gsi(gid(9)), &m);
        while let Some(ev) = b.poll_event() {
            if let CmEvent::ReqReceived { id, .. } = ev {
                held.push(id);
            }
        }
        server_out(&mut b, &mut out);
        if n % 1000 == 0 {
            if b.poll_timeout().is_some_and(|t| t <= now) {
                b.handle_timeout(now);
            }
            let s = b.table_sizes();
            assert!(s.half_open <= DEFAULT_HALF_OPEN_LIMIT, "{s:?}");
            assert!(s.ids <= 3 + DEFAULT_HALF_OPEN_LIMIT, "{s:?}");
            assert!(b.mad().outstanding() <= 2, "{s:?}");
        }
    }
    let mc = *b.mad().counters();
    let cc = b.counters();
    assert!(mc.rx_malformed > 0 && mc.rx_bad_base_version > 0 && mc.rx_invalid > 0);
    assert!(mc.rx_no_agent > 0 && mc.unsupported_replies > 0, "{mc:?}");
    assert!(cc.rx_malformed + cc.rx_dropped > 0, "{cc:?}");
    // The connection may have been torn down by a lucky DREQ: then it is in TIMEWAIT or
    // further, never in a state it could not reach.
    let _ = a.poll_event();
    drop(held);
}
