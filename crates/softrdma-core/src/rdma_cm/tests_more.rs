//! More RDMA CM tests (a child of `tests`, whose harness it uses): UD over SIDR, PS_IB
//! with native addressing, options (TOS, REUSEADDR, AFONLY, ACK timeout, min RNR timer),
//! ECE, reject reasons.

use super::*;
use crate::mad::MadAddr;
use crate::verbs::{
    AddressVector, QpCap, QpType, RecvWr, SendOp, SendWr, Sge, UdDest, WcOpcode, WcStatus,
};
use softrdma_wire::cm::SidrStatus;
use softrdma_wire::roce::AckKind;

/// A UD QP (with its CQ and a 4 KiB MR) on stack `s`, in RESET.
fn ud_qp(s: &mut Stack) -> (CqId, u32, MrKeys) {
    let pd = s.verbs.alloc_pd().expect("pd");
    let cq = s.verbs.create_cq(64).expect("cq");
    let (qpn, _) = s
        .verbs
        .create_qp(QpInitAttr {
            qp_type: QpType::Ud,
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
            sq_sig_all: true,
        })
        .expect("qp");
    let mr = s
        .verbs
        .reg_mr(pd, 4096, 0x1000, crate::verbs::AccessFlags::LOCAL_WRITE)
        .expect("mr");
    (cq, qpn, mr)
}

/// The MADs on the wire with their attribute modifiers: (from, message, attr_mod).
fn cm_log_attr(sim: &Sim<Node>) -> Vec<(usize, CmMessage, u32)> {
    sim.tap
        .iter()
        .filter_map(|(from, _, p)| {
            let r = RoceRepr::parse(p).ok()?;
            if r.bth.dest_qp != 1 {
                return None;
            }
            let m = Mad::parse(r.payload).ok()?;
            let a = m.header.attr_mod;
            Some((*from, CmMessage::from_mad(&m).ok()?, a))
        })
        .collect()
}

/// A UD id of node `h` (space `ps`) resolved towards `dst`, its QP made by the CM.
fn ud_dial(
    sim: &mut Sim<Node>,
    h: usize,
    app: &App,
    ps: PortSpace,
    dst: SocketAddr,
    pd: &[u8],
) -> (RdmaCmId, CqId, u32, MrKeys) {
    let k = app.devs[0].stack;
    let id = sim.stacks[h].rdma_mut().create_id_ps(ps);
    assert_eq!(sim.stacks[h].rdma().qp_type(id.name()), Some(QpType::Ud));
    resolve(sim, h, &id, dst, &[]);
    let (cq, qpn, mr) = ud_qp(st(sim, k));
    cmd(sim, k, |_, cm, s| cm.init_qp_for(s, &id, qpn)).expect("create qp");
    cmd(sim, k, |now, cm, s| {
        cm.connect(now, s, &id, Some(qpn), &param(pd))
    })
    .expect("connect");
    (id, cq, qpn, mr)
}

fn post_recv(s: &mut Stack, qpn: u32, mr: &MrKeys, wr_id: u64) {
    s.post_recv(
        qpn,
        RecvWr::new(
            wr_id,
            vec![Sge {
                addr: 0x1000,
                length: 2048,
                lkey: mr.lkey,
            }],
        ),
    )
    .expect("recv");
}

/// The first receive completion on `cq` after running the network.
fn recv_on(sim: &mut Sim<Node>, k: usize, cq: CqId) -> crate::verbs::WorkCompletion {
    for _ in 0..200 {
        while let Some(wc) = st(sim, k).poll_cq(cq).expect("cq") {
            if wc.opcode == WcOpcode::Recv {
                return wc;
            }
        }
        if !sim.step() {
            break;
        }
    }
    panic!("no receive completion");
}

/// udaddy's exchange over the CM: SIDR REQ with the IP header and consumer data, SIDR REP
/// with QPN and RDMA_UDP_QKEY, ESTABLISHED with the AH; a SEND with immediate each way,
/// the reply AH made from the receive's GRH (ibv_init_ah_from_wc).
#[test]
fn ud_over_sidr_then_datagrams_both_ways() {
    let (mut sim, mut n) = pair();
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    let l = sim.stacks[1]
        .rdma_mut()
        .listen_on_ps(PortSpace::UDP, sa(b, 7174), 0)
        .expect("listen");
    let user = [0x5au8; 180];
    let (ca, cqa, qa, mra) = ud_dial(&mut sim, 0, &n[0], PortSpace::UDP, sa(b, 7174), &user);
    // 181 bytes do not fit.
    let x = sim.stacks[0].rdma_mut().create_id_ps(PortSpace::UDP);
    resolve(&mut sim, 0, &x, sa(b, 7174), &[]);
    let st0 = n[0].devs[0].stack;
    assert_eq!(
        cmd(&mut sim, st0, |now, cm, s| cm.connect(
            now,
            s,
            &x,
            None,
            &param(&[0u8; 181])
        )),
        Err(RdmaCmError::TooLong)
    );
    sim.stacks[0].rdma_mut().destroy(sim.now, x);
    let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    assert_eq!(req.listen_id(), Some(l.name()));
    assert_eq!(req.private_data(), user.to_vec());
    let sb = req.into_new_id().expect("new id");
    assert_eq!(
        sim.stacks[1].rdma_mut().qp_type(sb.name()),
        Some(QpType::Ud)
    );
    assert_eq!(
        sim.stacks[1]
            .rdma_mut()
            .remote_addr(sb.name())
            .map(|r| r.ip()),
        Some(a)
    );
    let (cqb, qb, mrb) = ud_qp(st(&mut sim, 1));
    cmd(&mut sim, 1, |_, cm, s| cm.init_qp_for(s, &sb, qb)).expect("qp");
    post_recv(st(&mut sim, 1), qb, &mrb, 1);
    post_recv(st(&mut sim, 0), qa, &mra, 2);
    cmd(&mut sim, 1, |now, cm, s| {
        cm.accept(now, s, &sb, qb, &param(b"rep"))
    })
    .expect("accept");
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[0],
        RdmaCmEventType::Established
    )));
    assert!(
        !has(&n[1], RdmaCmEventType::Established),
        "no event passively"
    );
    let e = take(&mut n[0], RdmaCmEventType::Established);
    let ud = e.ud().expect("UD parameters");
    assert_eq!((ud.qp_num, ud.qkey), (qb, RDMA_UDP_QKEY));
    assert_eq!(ud.ah.dgid, Gid::from(b));
    assert_eq!(ud.ah.hop_limit, 64);
    assert_eq!(&e.private_data()[..3], b"rep");
    let log = cm_log(&sim);
    assert_eq!(attrs(&log), vec![AttrId::SIDR_REQ, AttrId::SIDR_REP]);
    let (CmMessage::SidrReq(q), CmMessage::SidrRep(r)) = (&log[0].1, &log[1].1) else {
        panic!()
    };
    assert_eq!(q.service_id, 0x0000_0000_0111_1c06);
    let h = IpCmHeader::parse(&q.private_data).expect("hdr");
    assert_eq!(
        (h.ip_version, h.src_ip(), h.dst_ip()),
        (4, Some(a), Some(b))
    );
    assert_eq!(&q.private_data[36..], &user[..]);
    assert_eq!(
        (r.status, r.qpn, r.qkey, r.service_id),
        (SidrStatus::SUCCESS, qb, 0x0123_4567, q.service_id)
    );
    // Client → server: SEND with immediate (the client's QPN), on the ESTABLISHED AH.
    st(&mut sim, 0)
        .post_send(
            qa,
            SendWr::new(7, SendOp::SendWithImm { imm: qa })
                .with_sge(Sge {
                    addr: 0x1000,
                    length: 100,
                    lkey: mra.lkey,
                })
                .with_ud(UdDest {
                    av: ud.ah,
                    remote_qpn: ud.qp_num,
                    remote_qkey: ud.qkey,
                }),
        )
        .expect("send");
    let wc = recv_on(&mut sim, 1, cqb);
    assert_eq!(
        (wc.status, wc.imm_data, wc.src_qp),
        (WcStatus::Success, Some(qa), qa)
    );
    let mut grh = [0u8; 40];
    st(&mut sim, 1)
        .verbs
        .local_read(mrb.lkey, 0x1000, &mut grh)
        .expect("grh");
    let back = init_ah_from_wc(st(&mut sim, 1), &wc, &grh).expect("reply AH");
    assert_eq!(back.dgid, Gid::from(a));
    assert_eq!(
        st(&mut sim, 1)
            .device
            .query_gid(PORT_NUM, back.sgid_index)
            .map(|g| g.gid),
        Ok(Gid::from(b))
    );
    // Server → client on the reply AH, with the server QP's own Q_Key.
    let qkey = st(&mut sim, 1).verbs.qp(qb).expect("qp").attr().qkey;
    assert_eq!(qkey, RDMA_UDP_QKEY);
    st(&mut sim, 1)
        .post_send(
            qb,
            SendWr::new(8, SendOp::Send)
                .with_sge(Sge {
                    addr: 0x1000,
                    length: 100,
                    lkey: mrb.lkey,
                })
                .with_ud(UdDest {
                    av: back,
                    remote_qpn: wc.imm_data.unwrap_or(0),
                    remote_qkey: qkey,
                }),
        )
        .expect("reply");
    let wc = recv_on(&mut sim, 0, cqa);
    assert_eq!((wc.status, wc.src_qp), (WcStatus::Success, qb));
    // A UD id has no disconnect and no ACK timeout.
    assert_eq!(
        sim.stacks[0]
            .rdma_mut()
            .set_option(&ca, RdmaOption::AckTimeout(14)),
        Err(RdmaCmError::Invalid)
    );
    sim.stacks[0].rdma_mut().destroy(sim.now, ca);
    sim.stacks[1].rdma_mut().destroy(sim.now, sb);
    pump(&mut sim, &mut n, |_| false);
    assert_eq!(attrs(&cm_log(&sim)).len(), 2, "nothing to tear down");
}

/// No listener for the service ID: the IB CM answers SIDR REP status 1 and the client
/// sees UNREACHABLE with status 1 (udaddy: `UNREACHABLE, error: 1`); a listener that
/// rejects: status 2 with its private data.
#[test]
fn ud_unreachable_carries_the_sidr_status() {
    let (mut sim, mut n) = pair();
    let b = sim.addrs[1];
    let _ = ud_dial(&mut sim, 0, &n[0], PortSpace::UDP, sa(b, 7174), b"");
    let e = wait(&mut sim, &mut n, 0, RdmaCmEventType::Unreachable);
    assert_eq!(e.status(), 1);
    let _l = sim.stacks[1]
        .rdma_mut()
        .listen_on_ps(PortSpace::UDP, sa(b, 7174), 0)
        .expect("listen");
    let _ = ud_dial(&mut sim, 0, &n[0], PortSpace::UDP, sa(b, 7174), b"");
    let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    let id = req.into_new_id().expect("id");
    assert_eq!(
        sim.stacks[1]
            .rdma_mut()
            .reject_with(sim.now, id, RejectReason(8), b"")
            .map_err(|(id, e)| {
                sim.stacks[1].rdma_mut().destroy(sim.now, id);
                e
            }),
        Err(RdmaCmError::Invalid)
    );
    // (that id is gone; a new request)
    let _ = ud_dial(&mut sim, 0, &n[0], PortSpace::UDP, sa(b, 7174), b"");
    let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    let id = req.into_new_id().expect("id");
    sim.stacks[1]
        .rdma_mut()
        .reject(sim.now, id, b"busy")
        .map_err(|(_, e)| e)
        .expect("reject");
    assert!(pump(&mut sim, &mut n, |n| count(
        &n[0],
        RdmaCmEventType::Unreachable
    ) == 2));
    let statuses: Vec<i32> = n[0]
        .events
        .iter()
        .filter(|e| e.kind() == RdmaCmEventType::Unreachable)
        .map(|e| e.status())
        .collect();
    assert_eq!(statuses, vec![2, 2], "destroyed, then rejected: status 2");
    let last = n[0].events.last().expect("event");
    assert_eq!(&last.private_data()[..4], b"busy");
}

/// A SIDR REQ lost, then its SIDR REP lost, every datagram duplicated: the client
/// retransmits every 4.096 s; duplicates of a request still being answered are dropped;
/// a retransmission after the answer went out is a new request (the kernel's rule), so
/// the server answers twice; the client is ESTABLISHED exactly once.
#[test]
fn ud_sidr_survives_loss_and_duplicates() {
    let (mut sim, mut n) = pair();
    sim.net.dup_permille = 1000;
    let b = sim.addrs[1];
    let _l = sim.stacks[1]
        .rdma_mut()
        .listen_on_ps(PortSpace::UDP, sa(b, 7174), 0)
        .expect("listen");
    let t0 = sim.now;
    // The first SIDR REQ is lost: the server is down.
    sim.down[1] = true;
    let (_ca, _, _, _) = ud_dial(&mut sim, 0, &n[0], PortSpace::UDP, sa(b, 7174), b"x");
    pump(&mut sim, &mut n, |_| false);
    sim.down[1] = false;
    let (_, qb, _) = ud_qp(st(&mut sim, 1));
    let mut answered = 0;
    let mut lose_rep = true;
    for _ in 0..20 {
        if has(&n[0], RdmaCmEventType::Established) {
            break;
        }
        if let Some(i) = n[1]
            .events
            .iter()
            .position(|e| e.kind() == RdmaCmEventType::ConnectRequest)
        {
            let req = n[1].events.remove(i);
            let id = req.into_new_id().expect("id");
            sim.stacks[1]
                .rdma_mut()
                .accept_ud(sim.now, &id, qb, 0, b"")
                .expect("accept");
            answered += 1;
            if lose_rep {
                // ... and the first answer is lost: the client is down.
                sim.down[0] = true;
                pump(&mut sim, &mut n, |_| false);
                sim.down[0] = false;
                lose_rep = false;
            }
            sim.stacks[1].rdma_mut().destroy(sim.now, id);
            pump(&mut sim, &mut n, |_| false);
            continue;
        }
        run_timers(&mut sim, &mut n);
    }
    assert_eq!(count(&n[0], RdmaCmEventType::Established), 1);
    assert_eq!(
        answered, 2,
        "one request per SIDR REQ the server saw after answering"
    );
    let log = attrs(&cm_log(&sim));
    // Delivered: 2 copies of each of the 2 REQs the server received, 2 copies of the
    // second REP (the first REP was lost).
    assert_eq!(log.iter().filter(|a| **a == AttrId::SIDR_REQ).count(), 4);
    assert_eq!(log.iter().filter(|a| **a == AttrId::SIDR_REP).count(), 2);
    assert!(
        sim.stacks[1]
            .rdma_mut()
            .cm()
            .counters()
            .dup(AttrId::SIDR_REQ)
            >= 2
    );
    // Two retransmissions, 4.096 s apart.
    let took = sim.now.saturating_duration_since(t0).total_micros();
    assert!((2 * SIDR_TIMEOUT_MS * 1000..3 * SIDR_TIMEOUT_MS * 1000).contains(&took));
}

/// A SIDR REP with a Q_Key other than the id's: ADDR_ERROR -EINVAL (cma_set_qkey).
#[test]
fn ud_sidr_rep_with_another_qkey_is_addr_error() {
    let (mut sim, mut n) = pair();
    let b = sim.addrs[1];
    let _l = sim.stacks[1]
        .rdma_mut()
        .listen_on_ps(PortSpace::UDP, sa(b, 7174), 0)
        .expect("listen");
    let _ = ud_dial(&mut sim, 0, &n[0], PortSpace::UDP, sa(b, 7174), b"");
    let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    let id = req.into_new_id().expect("id");
    sim.stacks[1]
        .rdma_mut()
        .accept_ud(sim.now, &id, 0x99, 0x1111, b"")
        .expect("accept");
    assert_eq!(sim.stacks[1].rdma_mut().qkey(id.name()), Some(0x1111));
    let e = wait(&mut sim, &mut n, 0, RdmaCmEventType::AddrError);
    assert_eq!(e.status(), EINVAL);
}

/// IPoIB ids cannot use a RoCE device, as in the kernel: bind to an address -EINVAL,
/// address resolution ADDR_ERROR -EINVAL, a SIDR REQ to a wildcard IPoIB listener status 2.
#[test]
fn ipoib_space_is_refused_on_roce() {
    let (mut sim, mut n) = pair();
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    let id = sim.stacks[1].rdma_mut().create_id_ps(PortSpace::IPOIB);
    assert_eq!(
        sim.stacks[1].rdma_mut().bind_addr(&id, sa(b, 7174)),
        Err(RdmaCmError::Invalid)
    );
    let any: IpAddr = "0.0.0.0".parse().expect("ip");
    sim.stacks[1]
        .rdma_mut()
        .bind_addr(&id, sa(any, 7174))
        .expect("wildcard");
    sim.stacks[1].rdma_mut().listen(&id, 0).expect("listen");
    let c = sim.stacks[0].rdma_mut().create_id_ps(PortSpace::IPOIB);
    sim.stacks[0]
        .rdma_mut()
        .resolve_addr(&c, Some(a), sa(b, 7174))
        .expect("queued");
    let e = sim.stacks[0].poll_rdma_event().expect("event");
    assert_eq!((e.kind(), e.status()), (RdmaCmEventType::AddrError, EINVAL));
    // A raw SIDR REQ for service ID 0x21c06 with a proper IP header.
    let p = crate::cm::SidrReqParams {
        port: n[0].devs[0].port,
        peer: MadAddr::gsi(Gid::from(b)),
        service_id: 0x0002_1c06,
        partition_key: 0xffff,
        private_data: IpCmHeader::new(a, 40000, b).to_bytes(),
        timeout: crate::time::Duration::from_millis(4096),
        max_cm_retries: 15,
    };
    let cm = sim.stacks[0].rdma_mut().cm_mut();
    let raw = cm.create_id();
    cm.sidr_req(sim.now, &raw, &p).expect("sidr");
    pump(&mut sim, &mut n, |_| false);
    let log = cm_log(&sim);
    let CmMessage::SidrRep(r) = &log[1].1 else {
        panic!("{:?}", attrs(&log))
    };
    assert_eq!(r.status, SidrStatus::REJECT);
    assert!(!has(&n[1], RdmaCmEventType::ConnectRequest));
    sim.stacks[0].rdma_mut().cm_mut().destroy(sim.now, raw);
}

/// PS_IB with native addressing (cmatose `-P ib -f gid`): service ID 0x13f1d2f, no IP
/// header (the REQ's private data is all the consumer's), hop limit 1; the passive id is
/// AF_IB too; then PS_IB with IP addresses (`-P ib` alone) carries the header. As in the
/// kernel (`cma_save_ip_info` runs on every request), AF_IB consumer data must not start
/// with a non-zero byte: that reads as a CM header of another version (REJ 28).
#[test]
fn ps_ib_connects_with_gids_and_with_ip_addresses() {
    let (mut sim, mut n) = pair();
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    let l = sim.stacks[1].rdma_mut().create_id_ps(PortSpace::IB);
    sim.stacks[1]
        .rdma_mut()
        .bind_ib(&l, IbAddr::new(Gid::from(b), 7471))
        .expect("bind");
    sim.stacks[1].rdma_mut().listen(&l, 0).expect("listen");
    let c = sim.stacks[0].rdma_mut().create_id_ps(PortSpace::IB);
    assert_eq!(sim.stacks[0].rdma_mut().qp_type(c.name()), Some(QpType::Rc));
    sim.stacks[0]
        .rdma_mut()
        .resolve_addr_ib(&c, None, IbAddr::new(Gid::from(b), 7471))
        .expect("addr");
    assert_eq!(
        sim.stacks[0].poll_rdma_event().map(|e| e.kind()),
        Some(RdmaCmEventType::AddrResolved)
    );
    assert_eq!(
        sim.stacks[0].rdma_mut().local_ib(c.name()).map(|x| x.gid),
        Some(Gid::from(a)),
        "the port with the destination's subnet prefix"
    );
    sim.stacks[0].rdma_mut().resolve_route(&c).expect("route");
    let _ = sim.stacks[0].poll_rdma_event();
    let qa = n[0].devs[0].qpn;
    cmd(&mut sim, 0, |now, cm, s| {
        cm.connect(now, s, &c, Some(qa), &param(b"\0\0ib"))
    })
    .expect("connect");
    let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    assert_eq!(&req.private_data()[..4], b"\0\0ib");
    assert_eq!(req.private_data().len(), 92);
    let sb = req.into_new_id().expect("id");
    assert!(sim.stacks[1].rdma_mut().is_af_ib(sb.name()));
    assert_eq!(
        sim.stacks[1].rdma_mut().local_ib(sb.name()),
        Some(IbAddr::new(Gid::from(b), 7471))
    );
    assert_eq!(
        sim.stacks[1].rdma_mut().remote_ib(sb.name()).map(|x| x.gid),
        Some(Gid::from(a))
    );
    accept(&mut sim, 1, &n[1], &sb);
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[0],
        RdmaCmEventType::Established
    ) && has(
        &n[1],
        RdmaCmEventType::Established
    )));
    let log = cm_log(&sim);
    let CmMessage::Req(q) = &log[0].1 else {
        panic!()
    };
    assert_eq!(q.service_id, 0x0000_0000_013f_1d2f);
    assert_eq!(&q.private_data[..4], b"\0\0ib");
    assert_eq!(q.primary_path.hop_limit, 1);
    // Consumer data starting with a non-zero byte: refused.
    sim.tap.clear();
    let (_, q1, _) = rc_qp(st(&mut sim, 0));
    let c1 = sim.stacks[0].rdma_mut().create_id_ps(PortSpace::IB);
    sim.stacks[0]
        .rdma_mut()
        .resolve_addr_ib(&c1, Some(Gid::from(a)), IbAddr::new(Gid::from(b), 7471))
        .expect("addr");
    sim.stacks[0].rdma_mut().resolve_route(&c1).expect("route");
    let _ = (
        sim.stacks[0].poll_rdma_event(),
        sim.stacks[0].poll_rdma_event(),
    );
    cmd(&mut sim, 0, |now, cm, s| {
        cm.connect(now, s, &c1, Some(q1), &param(b"gid!"))
    })
    .expect("connect");
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[0],
        RdmaCmEventType::Rejected
    )));
    assert_eq!(take(&mut n[0], RdmaCmEventType::Rejected).status(), 28);
    // IP-addressed PS_IB: same service ID space, the IP header, hop limit 64.
    sim.tap.clear();
    let _l2 = sim.stacks[1]
        .rdma_mut()
        .listen_on_ps(PortSpace::IB, sa(b, 7472), 0)
        .expect("listen");
    let (_, q2, _) = rc_qp(st(&mut sim, 0));
    n[0].devs[0].qpn = q2;
    let id = sim.stacks[0].rdma_mut().create_id_ps(PortSpace::IB);
    resolve(&mut sim, 0, &id, sa(b, 7472), &[]);
    cmd(&mut sim, 0, |now, cm, s| {
        cm.connect(now, s, &id, Some(q2), &param(b""))
    })
    .expect("connect");
    let e = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    let sb2 = e.into_new_id().expect("id");
    assert!(!sim.stacks[1].rdma_mut().is_af_ib(sb2.name()));
    let log = cm_log(&sim);
    let CmMessage::Req(q) = &log[0].1 else {
        panic!()
    };
    assert_eq!(q.service_id, 0x0000_0000_013f_1d30);
    assert_eq!(
        IpCmHeader::parse(&q.private_data).map(|h| h.ip_version),
        Ok(4)
    );
    sim.stacks[1].rdma_mut().destroy(sim.now, sb2);
}

/// ECE: the REQ carries the vendor ID and options (attribute modifier); the server sees
/// them, accepts with its own: the REP echoes the vendor with the options both have; a
/// plain accept echoes the vendor with none.
#[test]
fn ece_is_offered_and_accepted() {
    let (mut sim, mut n) = pair();
    let b = sim.addrs[1];
    let _l = listen(&mut sim, 1, sa(b, 7174), 0);
    for (offer, answer, want) in [(0b0111, Some(0b0101), 0b0101), (0b0011, None, 0)] {
        sim.tap.clear();
        let (_, q, _) = rc_qp(st(&mut sim, 0));
        n[0].devs[0].qpn = q;
        let id = sim.stacks[0].rdma_mut().create_id();
        resolve(&mut sim, 0, &id, sa(b, 7174), &[]);
        let ece = Ece {
            vendor_id: 0x00ab_cdef,
            attr_mod: offer,
        };
        cmd(&mut sim, 0, |now, cm, s| {
            cm.connect_ece(now, s, &id, Some(q), &param(b""), ece)
        })
        .expect("connect");
        let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
        assert_eq!(req.ece(), ece);
        let sb = req.into_new_id().expect("id");
        assert_eq!(sim.stacks[1].rdma_mut().remote_ece(sb.name()), Some(ece));
        let (_, qb, _) = rc_qp(st(&mut sim, 1));
        match answer {
            Some(opts) => cmd(&mut sim, 1, |now, cm, s| {
                cm.accept_ece(
                    now,
                    s,
                    &sb,
                    qb,
                    &param(b""),
                    Ece {
                        vendor_id: 0x00ab_cdef,
                        attr_mod: opts,
                    },
                )
            }),
            None => cmd(&mut sim, 1, |now, cm, s| {
                cm.accept(now, s, &sb, qb, &param(b""))
            }),
        }
        .expect("accept");
        let ok = pump(&mut sim, &mut n, |n| {
            has(&n[0], RdmaCmEventType::Established) && has(&n[1], RdmaCmEventType::Established)
        });
        assert!(ok, "{:?} {:?}", attrs(&cm_log(&sim)), n[0].events);
        let e = take(&mut n[0], RdmaCmEventType::Established);
        assert_eq!(e.ece().vendor_id, 0x00ab_cdef);
        // The active side learns what was agreed (the REP's attribute modifier).
        assert_eq!(e.ece().attr_mod, want);
        let log = cm_log_attr(&sim);
        let (CmMessage::Req(q), CmMessage::Rep(r)) = (&log[0].1, &log[1].1) else {
            panic!()
        };
        assert_eq!((q.vendor_id, log[0].2), (0x00ab_cdef, offer));
        assert_eq!((r.vendor_id, log[1].2), (0x00ab_cdef, want));
        let _ = take(&mut n[1], RdmaCmEventType::Established);
    }
    // A vendor ID of 0 or wider than 24 bits is no ECE.
    let id = sim.stacks[0].rdma_mut().create_id();
    for v in [0, 0x0100_0000] {
        assert_eq!(
            sim.stacks[0].rdma_mut().set_local_ece(
                &id,
                Ece {
                    vendor_id: v,
                    attr_mod: 1
                }
            ),
            Err(RdmaCmError::Invalid)
        );
    }
}

/// `rdma_reject_ece`: REJ reason 35; the client sees REJECTED with status 35, which is
/// not a consumer reject (no consumer data), and the IB CM's text for it.
#[test]
fn ece_reject_is_reason_35() {
    let (mut sim, mut n) = pair();
    let b = sim.addrs[1];
    let _l = listen(&mut sim, 1, sa(b, 7174), 0);
    let _c = dial(&mut sim, 0, &n[0], sa(b, 7174), b"");
    let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    let id = req.into_new_id().expect("id");
    let (id, e) = sim.stacks[1]
        .rdma_mut()
        .reject_with(sim.now, id, RejectReason::INVALID_SERVICE_ID, b"")
        .expect_err("only 28 and 35");
    assert_eq!(e, RdmaCmError::Invalid);
    sim.stacks[1]
        .rdma_mut()
        .reject_ece(sim.now, id, b"no such option")
        .map_err(|(_, e)| e)
        .expect("reject");
    let e = wait(&mut sim, &mut n, 0, RdmaCmEventType::Rejected);
    assert_eq!(e.status(), 35);
    assert!(!e.is_consumer_reject());
    assert_eq!(e.consumer_reject_data(), None);
    assert_eq!(e.reject_msg(), "vendor option is not supported");
    assert_eq!(&e.private_data()[..14], b"no such option");
    let log = cm_log(&sim);
    let CmMessage::Rej(r) = &log[1].1 else {
        panic!()
    };
    assert_eq!(r.reason, RejectReason::VENDOR_OPTION_NOT_SUPPORTED);
}

/// AFONLY (`cma_check_port`, `cma_match_private_data`): an IPv4 bind is AF-only, an IPv6
/// one is not, so `[::]:7000` conflicts with `0.0.0.0:7000` unless it sets AFONLY; a
/// non-AF-only IPv6 wildcard listener takes IPv4 requests (the new id is IPv4), an AF-only
/// one does not (REJ 28).
#[test]
fn afonly_decides_port_sharing_and_which_requests_a_listener_takes() {
    let (mut sim, mut n) = pair();
    let (a, b) = (sim.addrs[0], sim.addrs[1]);
    let any4: IpAddr = "0.0.0.0".parse().expect("ip");
    let any6: IpAddr = "::".parse().expect("ip");
    let cm = sim.stacks[1].rdma_mut();
    let v4 = cm.create_id();
    cm.bind_addr(&v4, sa(any4, 7000)).expect("v4");
    let v6 = cm.create_id();
    assert_eq!(
        cm.bind_addr(&v6, sa(any6, 7000)),
        Err(RdmaCmError::AddrInUse)
    );
    cm.set_option(&v6, RdmaOption::AfOnly(true))
        .expect("afonly");
    cm.bind_addr(&v6, sa(any6, 7000)).expect("both AF-only");
    cm.destroy(sim.now, v4);
    cm.destroy(sim.now, v6);
    // A dual-stack listener takes an IPv4 request.
    let l = cm.create_id();
    cm.bind_addr(&l, sa(any6, 7001)).expect("bind");
    cm.listen(&l, 0).expect("listen");
    let _c = dial(&mut sim, 0, &n[0], sa(b, 7001), b"");
    let e = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    let sb = e.into_new_id().expect("id");
    assert_eq!(
        sim.stacks[1].rdma_mut().local_addr(sb.name()),
        Some(sa(b, 7001))
    );
    assert_eq!(
        sim.stacks[1]
            .rdma_mut()
            .remote_addr(sb.name())
            .map(|r| r.ip()),
        Some(a)
    );
    sim.stacks[1].rdma_mut().destroy(sim.now, sb);
    pump(&mut sim, &mut n, |_| false);
    // An AF-only IPv6 listener does not.
    let l6 = sim.stacks[1].rdma_mut().create_id();
    sim.stacks[1]
        .rdma_mut()
        .set_option(&l6, RdmaOption::AfOnly(true))
        .expect("afonly");
    sim.stacks[1]
        .rdma_mut()
        .bind_addr(&l6, sa(any6, 7002))
        .expect("bind");
    sim.stacks[1].rdma_mut().listen(&l6, 0).expect("listen");
    assert_eq!(
        sim.stacks[1]
            .rdma_mut()
            .set_option(&l6, RdmaOption::AfOnly(false)),
        Err(RdmaCmError::InvalidState),
        "AFONLY only before listening"
    );
    sim.tap.clear();
    let (_, q, _) = rc_qp(st(&mut sim, 0));
    n[0].devs[0].qpn = q;
    let _c = dial(&mut sim, 0, &n[0], sa(b, 7002), b"");
    pump(&mut sim, &mut n, |_| false);
    assert_eq!(attrs(&cm_log(&sim)), vec![AttrId::REQ, AttrId::REJ]);
    assert!(!has(&n[1], RdmaCmEventType::ConnectRequest));
    sim.stacks[1].rdma_mut().destroy(sim.now, l);
}

/// REUSEADDR: ids that all set it share a port; listening makes the port the listener's
/// alone (it fails while another holds it) and clears the option; it cannot be set on a
/// listener.
#[test]
fn reuseaddr_shares_a_port_until_listen() {
    let (mut sim, _) = pair();
    let b = sim.addrs[1];
    let cm = sim.stacks[1].rdma_mut();
    let x = cm.create_id();
    let y = cm.create_id();
    cm.bind_addr(&x, sa(b, 7100)).expect("x");
    assert_eq!(cm.bind_addr(&y, sa(b, 7100)), Err(RdmaCmError::AddrInUse));
    let x2 = cm.create_id();
    cm.set_option(&x2, RdmaOption::ReuseAddr(true)).expect("x2");
    cm.set_option(&y, RdmaOption::ReuseAddr(true)).expect("y");
    cm.destroy(sim.now, x);
    cm.bind_addr(&x2, sa(b, 7100)).expect("x2 bound");
    cm.bind_addr(&y, sa(b, 7100)).expect("both reuse");
    assert_eq!(cm.listen(&y, 0), Err(RdmaCmError::AddrInUse));
    cm.destroy(sim.now, x2);
    cm.listen(&y, 0).expect("alone now");
    assert_eq!(
        cm.set_option(&y, RdmaOption::ReuseAddr(true)),
        Err(RdmaCmError::InvalidState)
    );
    let z = cm.create_id();
    cm.set_option(&z, RdmaOption::ReuseAddr(true)).expect("z");
    assert_eq!(
        cm.bind_addr(&z, sa(b, 7100)),
        Err(RdmaCmError::AddrInUse),
        "the listener gave up REUSEADDR"
    );
}

/// ACK_TIMEOUT before the route: the RoCE packet lifetime is timeout − 1, so the REQ's
/// local ACK timeout is cm_ack_timeout(15, timeout − 1) and the QP's RTS timeout is the
/// option; on the passive side (set before accept) only its QP's timeout changes. 0 leaves
/// the lifetime at 18.
#[test]
fn ack_timeout_sets_the_packet_lifetime_and_the_qp_timeout() {
    for (t, req_ack, passive_t) in [(14u8, 16u8, 12u8), (0, 19, 19)] {
        let (mut sim, mut n) = pair();
        let b = sim.addrs[1];
        let _l = listen(&mut sim, 1, sa(b, 7174), 0);
        let id = sim.stacks[0].rdma_mut().create_id();
        resolve(&mut sim, 0, &id, sa(b, 7174), &[RdmaOption::AckTimeout(t)]);
        let qa = n[0].devs[0].qpn;
        cmd(&mut sim, 0, |now, cm, s| {
            cm.connect(now, s, &id, Some(qa), &param(b""))
        })
        .expect("connect");
        let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
        let sb = req.into_new_id().expect("id");
        if t != 0 {
            sim.stacks[1]
                .rdma_mut()
                .set_option(&sb, RdmaOption::AckTimeout(passive_t))
                .expect("passive option");
        }
        accept(&mut sim, 1, &n[1], &sb);
        assert!(pump(&mut sim, &mut n, |n| has(
            &n[0],
            RdmaCmEventType::Established
        )));
        let log = cm_log(&sim);
        let CmMessage::Req(q) = &log[0].1 else {
            panic!()
        };
        assert_eq!(q.primary_path.local_ack_timeout, req_ack, "timeout {t}");
        assert_eq!(crate::cm::cm_ack_timeout(RXE_CA_ACK_DELAY, 13), 16);
        let timeout = |s: &Stack, q: u32| s.verbs.qp(q).expect("qp").attr().timeout;
        assert_eq!(
            timeout(st(&mut sim, 0), qa),
            if t == 0 { 0 } else { t },
            "active QP"
        );
        assert_eq!(
            timeout(st(&mut sim, 1), n[1].devs[0].qpn),
            passive_t,
            "passive QP"
        );
    }
}

/// `rdma_set_min_rnr_timer` on the passive id: its QP's RTR min_rnr_timer, and the RNR NAK
/// it sends when a SEND finds no receive carries that timer on the wire.
#[test]
fn min_rnr_timer_is_on_the_wire() {
    let (mut sim, mut n) = pair();
    let b = sim.addrs[1];
    let _l = listen(&mut sim, 1, sa(b, 7174), 0);
    let _c = dial(&mut sim, 0, &n[0], sa(b, 7174), b"");
    let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    let sb = req.into_new_id().expect("id");
    assert_eq!(
        sim.stacks[1].rdma_mut().set_min_rnr_timer(&sb, 32),
        Err(RdmaCmError::Invalid),
        "five bits"
    );
    sim.stacks[1]
        .rdma_mut()
        .set_min_rnr_timer(&sb, 12)
        .expect("timer");
    accept(&mut sim, 1, &n[1], &sb);
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[0],
        RdmaCmEventType::Established
    )));
    let qb = n[1].devs[0].qpn;
    assert_eq!(
        st(&mut sim, 1)
            .verbs
            .qp(qb)
            .expect("qp")
            .attr()
            .min_rnr_timer,
        12
    );
    sim.tap.clear();
    let qa = n[0].devs[0].qpn;
    st(&mut sim, 0)
        .post_send(
            qa,
            SendWr::new(1, SendOp::Send).with_sge(Sge {
                addr: 0x1000,
                length: 8,
                lkey: n[0].devs[0].mr.lkey,
            }),
        )
        .expect("send");
    for _ in 0..20 {
        if !sim.step() {
            break;
        }
    }
    let timers: Vec<AckKind> = sim
        .tap
        .iter()
        .filter(|(from, _, _)| *from == 1)
        .filter_map(|(_, _, p)| RoceRepr::parse(p).ok()?.aeth.map(|a| a.syndrome.kind()))
        .collect();
    assert!(
        matches!(timers.first(), Some(AckKind::RnrNak { timer }) if timer.0 == 12),
        "{timers:?}"
    );
}

/// TOS: the path's traffic class — in the REQ's primary path, and in both QPs' address
/// vectors (hence the data packets' IP TOS); a UD id's ESTABLISHED AH carries it too.
#[test]
fn tos_is_the_paths_traffic_class() {
    let (mut sim, mut n) = pair();
    let b = sim.addrs[1];
    let _l = listen(&mut sim, 1, sa(b, 7174), 0);
    let id = sim.stacks[0].rdma_mut().create_id();
    resolve(&mut sim, 0, &id, sa(b, 7174), &[RdmaOption::Tos(0x60)]);
    assert_eq!(
        sim.stacks[0].rdma_mut().traffic_class(id.name()),
        Some(0x60)
    );
    let qa = n[0].devs[0].qpn;
    cmd(&mut sim, 0, |now, cm, s| {
        cm.connect(now, s, &id, Some(qa), &param(b""))
    })
    .expect("connect");
    let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    let sb = req.into_new_id().expect("id");
    accept(&mut sim, 1, &n[1], &sb);
    let _ = wait(&mut sim, &mut n, 0, RdmaCmEventType::Established);
    let log = cm_log(&sim);
    let CmMessage::Req(q) = &log[0].1 else {
        panic!()
    };
    assert_eq!(q.primary_path.traffic_class, 0x60);
    let tc = |s: &Stack, q: u32| -> AddressVector { s.verbs.qp(q).expect("qp").attr().ah_attr };
    assert_eq!(tc(st(&mut sim, 0), qa).traffic_class, 0x60);
    assert_eq!(tc(st(&mut sim, 1), n[1].devs[0].qpn).traffic_class, 0x60);
    // The transport sends the QP's packets with that TOS (rxe's IP header).
    st(&mut sim, 0)
        .post_send(
            qa,
            SendWr::new(1, SendOp::Send).with_sge(Sge {
                addr: 0x1000,
                length: 8,
                lkey: n[0].devs[0].mr.lkey,
            }),
        )
        .expect("send");
    let mut batch = crate::transport::TransmitBatch::default();
    let now = sim.now;
    assert!(st(&mut sim, 0).poll_transmit_batch(now, &mut batch) > 0);
    let tos: Vec<(u8, u32)> = batch
        .trains()
        .map(|(t, b)| {
            (
                t.tos,
                RoceRepr::parse(b).map(|r| r.bth.dest_qp).unwrap_or(0),
            )
        })
        .collect();
    // (and the active side's MADs too, as the kernel's AH from the path)
    assert!(tos.iter().all(|(t, _)| *t == 0x60), "{tos:?}");
    assert!(tos.iter().any(|(t, q)| *t == 0x60 && *q != 1), "{tos:?}");
    // UD: the AH of ESTABLISHED.
    let _u = sim.stacks[1]
        .rdma_mut()
        .listen_on_ps(PortSpace::UDP, sa(b, 7174), 0)
        .expect("udp listen");
    let c = sim.stacks[0].rdma_mut().create_id_ps(PortSpace::UDP);
    resolve(&mut sim, 0, &c, sa(b, 7174), &[RdmaOption::Tos(0x20)]);
    cmd(&mut sim, 0, |now, cm, s| {
        cm.connect(now, s, &c, None, &param(b""))
    })
    .expect("sidr");
    let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    let u = req.into_new_id().expect("id");
    sim.stacks[1]
        .rdma_mut()
        .accept_ud(sim.now, &u, 0x42, 0, b"")
        .expect("accept");
    let e = wait(&mut sim, &mut n, 0, RdmaCmEventType::Established);
    assert_eq!(
        e.ud().map(|u| (u.ah.traffic_class, u.qp_num)),
        Some((0x20, 0x42))
    );
}

/// librdmacm's check of the REP (`ucma_process_conn_resp_ece`): a REP naming another ECE
/// vendor than the one the REQ offered fails the connection — CONNECT_ERROR -EINVAL, the QP
/// to ERR, a REJ — and a REP without ECE (vendor 0) to an ECE REQ connects without options.
#[test]
fn ece_rep_of_another_vendor_is_connect_error() {
    use crate::cm::{CmEvent, RepParams};
    for (rep_vendor, ok) in [(0x0000_1111u32, false), (0, true)] {
        let (mut sim, mut n) = pair();
        let b = sim.addrs[1];
        // The passive side is a bare IB CM listener that answers with its own vendor.
        let cm = sim.stacks[1].rdma_mut().cm_mut();
        let l = cm.create_id();
        cm.listen(&l, service_id(PortSpace::TCP, 7174))
            .expect("listen");
        let id = sim.stacks[0].rdma_mut().create_id();
        resolve(&mut sim, 0, &id, sa(b, 7174), &[]);
        let qa = n[0].devs[0].qpn;
        let ece = Ece {
            vendor_id: 0x00ab_cdef,
            attr_mod: 1,
        };
        cmd(&mut sim, 0, |now, cm, s| {
            cm.connect_ece(now, s, &id, Some(qa), &param(b""), ece)
        })
        .expect("connect");
        let mut req = None;
        for _ in 0..100 {
            pump(&mut sim, &mut n, |_| false);
            if let Some(CmEvent::ReqReceived { id, .. }) = sim.stacks[1].poll_ib_event() {
                req = Some(id);
                break;
            }
        }
        let rid = req.expect("REQ");
        let qb = n[1].devs[0].qpn;
        let rep = RepParams {
            qp_num: qb,
            starting_psn: 7,
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            ece_vendor_id: rep_vendor,
            ..RepParams::default()
        };
        sim.stacks[1]
            .rdma_mut()
            .cm_mut()
            .send_rep(sim.now, &rid, &rep)
            .expect("rep");
        let want = if ok {
            RdmaCmEventType::Established
        } else {
            RdmaCmEventType::ConnectError
        };
        assert!(
            pump(&mut sim, &mut n, |n| has(&n[0], want)),
            "{:?}",
            n[0].events
        );
        let e = take(&mut n[0], want);
        pump(&mut sim, &mut n, |_| false);
        if ok {
            assert_eq!(e.ece(), Ece::default());
            assert_eq!(
                attrs(&cm_log(&sim)),
                vec![AttrId::REQ, AttrId::REP, AttrId::RTU]
            );
        } else {
            assert_eq!(e.status(), EINVAL);
            assert_eq!(
                st(&mut sim, 0).verbs.qp(qa).expect("qp").state(),
                QpState::Err
            );
            assert_eq!(
                attrs(&cm_log(&sim)),
                vec![AttrId::REQ, AttrId::REP, AttrId::REJ]
            );
        }
        sim.stacks[1].rdma_mut().cm_mut().destroy(sim.now, rid);
        sim.stacks[1].rdma_mut().cm_mut().destroy(sim.now, l);
    }
}

/// mckey's join on RoCEv2: a UDP id resolved towards the group joins it; MULTICAST_JOIN
/// carries the AH to `::ffff:239.1.2.3` (hop limit 64, the id's source GID), QPN 0xFFFFFF
/// and RDMA_UDP_QKEY; TCP ids, unresolved ids, IPv6 groups and double joins are refused;
/// leaving forgets the membership.
#[test]
fn multicast_join_and_leave_as_cma_iboe_join_multicast() {
    use super::multicast::{JoinError, JoinFlags};
    let (mut sim, _n) = pair();
    let group: IpAddr = "239.1.2.3".parse().expect("ip");
    let st0 = 0;
    let id = sim.stacks[0].rdma_mut().create_id_ps(PortSpace::UDP);
    let join = |sim: &mut Sim<Node>, id: &RdmaCmId, addr: IpAddr, f: JoinFlags| {
        cmd(sim, st0, |_, cm, s| cm.join_multicast(Some(s), id, addr, f))
    };
    assert_eq!(
        join(&mut sim, &id, group, JoinFlags::FullMember),
        Err(JoinError::Rdma(RdmaCmError::InvalidState))
    );
    let src = sim.addrs[0];
    sim.stacks[0]
        .rdma_mut()
        .resolve_addr(&id, Some(src), sa(group, 0))
        .expect("resolve_addr");
    assert_eq!(
        sim.stacks[0].poll_rdma_event().map(|e| e.kind()),
        Some(RdmaCmEventType::AddrResolved)
    );
    let m = join(&mut sim, &id, group, JoinFlags::FullMember).expect("join");
    assert!(m.joins_interface());
    assert_eq!(m.mgid.0[..12], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    assert_eq!(m.mgid.0[12..], [239, 1, 2, 3]);
    let e = sim.stacks[0].poll_rdma_event().expect("an event");
    assert_eq!(e.kind(), RdmaCmEventType::MulticastJoin);
    assert_eq!(e.status(), 0);
    let ud = e.ud().cloned().expect("param.ud");
    assert_eq!((ud.qp_num, ud.qkey), (0xFF_FFFF, RDMA_UDP_QKEY));
    assert_eq!((ud.ah.dgid, ud.ah.hop_limit, ud.ah.sl), (m.mgid, 64, 0));
    let sgid = st(&mut sim, 0)
        .device
        .query_gid(PORT_NUM, ud.ah.sgid_index)
        .map(|g| g.gid);
    assert_eq!(sgid, Ok(Gid::from(sim.addrs[0])));
    assert_eq!(
        sim.stacks[0].rdma_mut().qkey(id.name()),
        Some(RDMA_UDP_QKEY)
    );
    assert_eq!(
        join(&mut sim, &id, group, JoinFlags::FullMember),
        Err(JoinError::Rdma(RdmaCmError::AddrInUse))
    );
    let other: IpAddr = "239.9.9.9".parse().expect("ip");
    let so = join(&mut sim, &id, other, JoinFlags::SendOnlyFullMember).expect("join");
    assert!(!so.joins_interface());
    assert_eq!(
        sim.stacks[0].poll_rdma_event().map(|e| e.kind()),
        Some(RdmaCmEventType::MulticastJoin)
    );
    assert!(sim.stacks[0].rdma_mut().group_in_use(group));
    assert!(!sim.stacks[0].rdma_mut().group_in_use(other));
    assert_eq!(
        join(
            &mut sim,
            &id,
            "ff0e::1".parse().expect("ip"),
            JoinFlags::FullMember
        ),
        Err(JoinError::NotSupported)
    );
    assert_eq!(sim.stacks[0].rdma_mut().memberships(&id).len(), 2);
    assert_eq!(
        sim.stacks[0]
            .rdma_mut()
            .leave_multicast(&id, group)
            .map(|m| m.addr),
        Ok(group)
    );
    assert_eq!(
        sim.stacks[0].rdma_mut().leave_multicast(&id, group),
        Err(JoinError::NotJoined)
    );
    let tcp = sim.stacks[0].rdma_mut().create_id_ps(PortSpace::TCP);
    sim.stacks[0]
        .rdma_mut()
        .resolve_addr(&tcp, Some(src), sa(group, 0))
        .expect("resolve_addr");
    assert_eq!(
        sim.stacks[0].poll_rdma_event().map(|e| e.kind()),
        Some(RdmaCmEventType::AddrResolved)
    );
    let routed = sim.stacks[0].rdma_mut().create_id_ps(PortSpace::UDP);
    resolve(&mut sim, 0, &routed, sa(group, 0), &[]);
    assert_eq!(
        join(&mut sim, &routed, group, JoinFlags::FullMember),
        Err(JoinError::Rdma(RdmaCmError::InvalidState))
    );
    assert_eq!(
        join(&mut sim, &tcp, group, JoinFlags::FullMember),
        Err(JoinError::Rdma(RdmaCmError::Invalid))
    );
    let now = sim.now;
    sim.stacks[0].rdma_mut().destroy(now, id);
    sim.stacks[0].rdma_mut().destroy(now, tcp);
    sim.stacks[0].rdma_mut().destroy(now, routed);
    assert!(!sim.stacks[0].rdma_mut().group_in_use(group));
}

/// `rdma_notify(IB_EVENT_COMM_EST)` on the passive side after its REP (data before the RTU):
/// ESTABLISHED at once (the RTU that follows changes nothing); again: `-EISCONN`; PATH_MIG
/// on an established connection is a no-op (no alternate path on RoCE); other events and
/// ids without a connection: `-EINVAL`.
#[test]
fn notify_comm_est_establishes_the_passive_side_before_the_rtu() {
    use crate::cm::CmError;
    let (mut sim, mut n) = pair();
    let b = sim.addrs[1];
    let _l = listen(&mut sim, 1, sa(b, 7174), 0);
    let _ca = dial(&mut sim, 0, &n[0], sa(b, 7174), b"x");
    let req = wait(&mut sim, &mut n, 1, RdmaCmEventType::ConnectRequest);
    let sb = req.into_new_id().expect("new id");
    assert_eq!(
        sim.stacks[1].rdma_mut().notify(&sb, EVENT_COMM_EST),
        Err(RdmaCmError::Cm(CmError::InvalidState(CmState::MraReqSent)))
    );
    accept(&mut sim, 1, &n[1], &sb);
    // The REP reaches the active side, whose RTU is still on its way.
    assert!(pump(&mut sim, &mut n, |n| has(
        &n[0],
        RdmaCmEventType::Established
    )));
    assert_eq!(
        sim.stacks[1].rdma_mut().cm_state(sb.name()),
        Some(CmState::RepSent)
    );
    // Through the node, which hands the IB CM's event to the RDMA CM (as the driver does).
    cmd(&mut sim, 1, |_, cm, _| cm.notify(&sb, EVENT_COMM_EST)).expect("comm est");
    assert_eq!(
        sim.stacks[1].rdma_mut().cm_state(sb.name()),
        Some(CmState::Established)
    );
    let e = sim.stacks[1].poll_rdma_event().map(|e| (e.kind(), e.id()));
    assert_eq!(e, Some((RdmaCmEventType::Established, sb.name())));
    // The RTU arrives: nothing more.
    pump(&mut sim, &mut n, |_| false);
    assert_eq!(count(&n[1], RdmaCmEventType::Established), 0);
    assert_eq!(
        sim.stacks[1].rdma_mut().notify(&sb, EVENT_COMM_EST),
        Err(RdmaCmError::Cm(CmError::IsConnected))
    );
    assert_eq!(sim.stacks[1].rdma_mut().notify(&sb, EVENT_PATH_MIG), Ok(()));
    assert_eq!(
        sim.stacks[1].rdma_mut().notify(&sb, 1),
        Err(RdmaCmError::Invalid)
    );
    let fresh = sim.stacks[0].rdma_mut().create_id();
    assert_eq!(
        sim.stacks[0].rdma_mut().notify(&fresh, EVENT_COMM_EST),
        Err(RdmaCmError::Invalid)
    );
    let now = sim.now;
    sim.stacks[0].rdma_mut().destroy(now, fresh);
}
