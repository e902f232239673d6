//! Fuzz bodies of the core: the receive path here, the IB CM's operation sequences in
//! [`cm_ops`] (target `cm_ops`).
//!
//! Fuzz body for the core's receive path, shared by the cargo-fuzz target `stack`
//! (`fuzz/fuzz_targets/stack.rs`) and the stable test that replays its committed corpus
//! (`tests/fuzz_corpus.rs`), as `softrdma_wire::fuzzing` does for the parsers.
//!
//! [`stack`] builds a [`Stack`] as a peer would find it mid-conversation — an RC QP in RTS with
//! requests of every kind outstanding (SEND, RDMA WRITE, RDMA READ, atomic) and receives posted,
//! a UD QP in RTS with receives posted, a user MR and a fast-registration MR the peer may
//! access and invalidate — makes it the one port of a [`Node`] (so QP1, the MAD layer and
//! the CMs are behind it too), then feeds the node the datagrams the input describes through
//! [`Node::handle_datagram`], with timers run between them ([`Node::handle_timeout`]). Most datagrams get a correct ICRC
//! before they are fed ([`icrc::seal_udp`]; a record flag leaves the ICRC as the fuzzer
//! wrote it), so the fuzzer reaches the transport instead of stopping at the ICRC check.
//!
//! It must never panic, and everything the stack sends in reply must be a well-formed RoCE
//! packet whose ICRC verifies for the flow it leaves on.
//!
//! # Input format
//!
//! Byte 0: setup flags (bit 0: IPv6 addresses instead of IPv4; bit 1: path MTU 1024 instead of
//! 256; the other bits are ignored; each variant's rig is built once per thread and every
//! input runs on a copy of it, [`prepared`]). Then records, each `flags, len_lo, len_hi, bytes[len]` (a short last record takes what
//! is left), at most [`MAX_RECORDS`]:
//!
//! | flag bit | meaning |
//! |----------|---------|
//! | 0 | leave the ICRC as it is (else it is sealed for the flow) |
//! | 1 | from a stranger's address (else from the connected peer) |
//! | 2 | from a UDP source port other than 4791 |
//! | 3 | to an address that is not the device's |
//! | 4–7 | first advance the clock by that many × 4 ms and run the timers |

pub mod cm_ops;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use softrdma_wire::icrc::{self, Flow, Verdict, ROCE_V2_PORT};
use softrdma_wire::roce::RocePacket;
use softrdma_wire::Gid;

use crate::cm::CmPort;
use crate::device::{Counters, DeviceConfig, Mtu};
use crate::node::cm_config;
use crate::time::{Duration, Instant};
use crate::verbs::{
    steps_to_rts, AccessFlags, AddressVector, CqId, QpAttr, QpCap, QpInitAttr, QpType, RecvWr,
    SendOp, SendWr, Sge,
};
use crate::{Node, Stack, Transmit};

/// Most datagrams one input feeds.
pub const MAX_RECORDS: usize = 64;

/// The connected peer's RC QPN (the RC QP's `dest_qp_num`).
pub const PEER_QPN: u32 = 0x12;
/// The UD QP's Q_Key.
pub const QKEY: u32 = 0x1111_1111;
/// Where the user MR starts; the fast MR follows at [`FAST_VA`].
pub const MR_VA: u64 = 0x1000;
/// Where the fast-registration MR starts.
pub const FAST_VA: u64 = 0x10_0000;
const MR_LEN: usize = 8192;

/// QP1 receive buffers of the rig's node (the input feeds one datagram at a time).
const QP1_RECV_DEPTH: u32 = 16;

/// What [`setup`] made: the node and the numbers a valid packet needs.
pub struct Rig {
    /// The node under test: its one port is the stack [`setup`] built.
    pub node: Node,
    /// That port.
    pub port: CmPort,
    /// What a valid packet needs.
    pub at: Numbers,
}

/// The addresses and numbers of the rig (see [`Rig`]).
#[derive(Clone, Copy, Debug)]
pub struct Numbers {
    /// Our address.
    pub me: IpAddr,
    /// The RC peer's address.
    pub peer: IpAddr,
    /// The RC QP (in RTS, connected to `peer`, [`PEER_QPN`], both PSNs 0).
    pub rc_qpn: u32,
    /// The UD QP (in RTS, Q_Key [`QKEY`]).
    pub ud_qpn: u32,
    /// The user MR's rkey (remote write, read, atomic).
    pub rkey: u32,
    /// The fast MR's rkey (invalidatable).
    pub fast_rkey: u32,
    cq: CqId,
}

/// The stack [`setup`] builds, before it becomes a node's port (what the rigs are copied
/// from).
#[derive(Clone)]
struct Prepared {
    stack: Stack,
    at: Numbers,
}

/// Builds the node the fuzz body feeds (see the module docs); `flags` is input byte 0.
pub fn setup(flags: u8) -> Result<Rig, String> {
    prepare(flags).map(Rig::new)
}

/// The stack of [`setup`], its first requests sent.
fn prepare(flags: u8) -> Result<Prepared, String> {
    let (me, peer) = if flags & 1 != 0 {
        (
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
        )
    } else {
        (
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        )
    };
    let mtu = if flags & 2 != 0 {
        Mtu::Mtu1024
    } else {
        Mtu::Mtu256
    };
    let mut s = Stack::new(DeviceConfig::new("fuzz", vec![me]), 1);
    let remote = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let pd = s
        .verbs
        .alloc_pd()
        .map_err(|e| format!("fuzz setup: {e:?}"))?;
    let cq = s
        .verbs
        .create_cq(1024)
        .map_err(|e| format!("fuzz setup: {e:?}"))?;
    let mr = s
        .verbs
        .reg_mr(pd, MR_LEN, MR_VA, remote)
        .map_err(|e| format!("fuzz setup: {e:?}"))?;
    let fast = s
        .verbs
        .reg_fast_mr(pd, vec![0; MR_LEN], FAST_VA, remote)
        .map_err(|e| format!("fuzz setup: {e:?}"))?;
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 0,
    };
    let mut qp = |ty| {
        s.verbs.create_qp(QpInitAttr {
            qp_type: ty,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            sq_sig_all: true,
        })
    };
    let (rc_qpn, _) = qp(QpType::Rc).map_err(|e| format!("fuzz setup: {e:?}"))?;
    let (ud_qpn, _) = qp(QpType::Ud).map_err(|e| format!("fuzz setup: {e:?}"))?;

    // One attribute set for the three steps (each step's mask picks its fields).
    let rc = QpAttr {
        qp_access_flags: AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC,
        path_mtu: mtu,
        dest_qp_num: PEER_QPN,
        rq_psn: 0,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ah_attr: AddressVector {
            dgid: Gid::from(peer),
            sgid_index: 0,
            ..AddressVector::default()
        },
        timeout: 10,
        retry_cnt: 3,
        rnr_retry: 3,
        sq_psn: 0,
        max_rd_atomic: 4,
        ..QpAttr::default()
    };
    let ud = QpAttr {
        qkey: QKEY,
        ..QpAttr::default()
    };
    for (qpn, ty, attr) in [(rc_qpn, QpType::Rc, rc), (ud_qpn, QpType::Ud, ud)] {
        for (a, mask) in steps_to_rts(ty, &attr) {
            s.modify_qp(qpn, &a, mask)
                .map_err(|e| format!("fuzz setup: {e:?}"))?;
        }
    }

    let sge = |off: u64, len: u32| Sge {
        addr: MR_VA + off,
        length: len,
        lkey: mr.lkey,
    };
    for k in 0..4u64 {
        s.post_recv(rc_qpn, RecvWr::new(100 + k, vec![sge(k * 1024, 1024)]))
            .map_err(|e| format!("fuzz setup: {e:?}"))?;
        s.post_recv(
            ud_qpn,
            RecvWr::new(200 + k, vec![sge(4096 + k * 1024, 1024)]),
        )
        .map_err(|e| format!("fuzz setup: {e:?}"))?;
    }
    // Requests of every kind outstanding, so that ACKs, NAKs, READ responses and atomic
    // ACKs from the input find something to match.
    let ops = [
        SendOp::Send,
        SendOp::RdmaWrite {
            remote_addr: 0x8000,
            rkey: 0x1234,
        },
        SendOp::RdmaRead {
            remote_addr: 0x8000,
            rkey: 0x1234,
        },
        SendOp::AtomicFetchAdd {
            remote_addr: 0x8000,
            add: 1,
            rkey: 0x1234,
        },
        SendOp::SendWithImm { imm: 7 },
    ];
    for (k, op) in ops.into_iter().enumerate() {
        let len = match op {
            SendOp::AtomicFetchAdd { .. } => 8,
            SendOp::RdmaRead { .. } => 600,
            _ => 300,
        };
        let wr = SendWr::new(k as u64, op).with_sge(sge(6144, len));
        s.post_send(rc_qpn, wr)
            .map_err(|e| format!("fuzz setup: {e:?}"))?;
    }
    // The first requests leave before the stack becomes a node's port (the rigs start from
    // here).
    let now = Instant::from_millis(1);
    for _ in 0..4096 {
        let Some(tx) = s.poll_transmit(now) else {
            break;
        };
        check_sent(&tx);
    }
    let at = Numbers {
        me,
        peer,
        rc_qpn,
        ud_qpn,
        rkey: mr.rkey,
        fast_rkey: fast.rkey,
        cq,
    };
    let mut p = Prepared { stack: s, at };
    for _ in 0..4096 {
        if !matches!(p.stack.poll_cq(cq), Ok(Some(_))) {
            break;
        }
    }
    Ok(p)
}

/// A datagram the rig sent: a well-formed RoCE packet whose ICRC verifies for its flow.
fn check_sent(tx: &Transmit) {
    let flow = Flow {
        src: tx.src_ip,
        dst: tx.dst.ip(),
        src_port: tx.src_port,
        dst_port: tx.dst.port(),
    };
    assert!(
        RocePacket::new_checked(&tx.payload[..]).is_ok(),
        "the stack sent a malformed packet: {:02x?}",
        tx.payload
    );
    assert!(
        matches!(
            icrc::verify_udp(&flow, &tx.payload),
            Ok(Verdict::Verified { .. })
        ),
        "the stack sent a packet with a wrong ICRC"
    );
}

impl Rig {
    /// A node whose one port is the prepared stack.
    fn new(p: Prepared) -> Rig {
        let made = Node::new(cm_config(softrdma_wire::Guid(0x0f0f), 1)).and_then(|mut node| {
            let port = node.add_port(p.stack, QP1_RECV_DEPTH)?;
            Ok((node, port))
        });
        match made {
            Ok((node, port)) => Rig {
                node,
                port,
                at: p.at,
            },
            Err(e) => panic!("fuzz setup: {e}"),
        }
    }

    /// Sends what the node has queued and reaps the stack's completions; checks every
    /// datagram.
    fn drain(&mut self, now: Instant) {
        for _ in 0..4096 {
            let Some(tx) = self.node.poll_transmit(now, self.port) else {
                break;
            };
            check_sent(&tx);
        }
        let Some(s) = self.node.stack_mut(self.port) else {
            return;
        };
        for _ in 0..4096 {
            if !matches!(s.poll_cq(self.at.cq), Ok(Some(_))) {
                break;
            }
        }
    }

    /// Feeds one datagram as a record's flags describe it.
    pub fn feed(&mut self, now: Instant, flags: u8, bytes: &[u8]) {
        let mut buf = bytes.to_vec();
        let stranger = match self.at.peer {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 9)),
        };
        let src_ip = if flags & 2 != 0 {
            stranger
        } else {
            self.at.peer
        };
        let src_port = if flags & 4 != 0 { 0xc123 } else { ROCE_V2_PORT };
        let dst = if flags & 8 != 0 { stranger } else { self.at.me };
        if flags & 1 == 0 {
            let flow = Flow {
                src: src_ip,
                dst,
                src_port,
                dst_port: ROCE_V2_PORT,
            };
            // Fails (and leaves the bytes alone) on input too short to carry an ICRC.
            let _ = icrc::seal_udp(&flow, &mut buf);
        }
        let src = SocketAddr::new(src_ip, src_port);
        self.node.handle_datagram(now, self.port, src, dst, &buf);
        self.drain(now);
    }
}

/// The fuzz body: see the module docs for the input format.
pub fn stack(data: &[u8]) {
    run(data);
}

thread_local! {
    /// The rigs [`setup`] made, one per setup variant: each input starts from a copy
    /// (building one costs more than the input does).
    static PREPARED: std::cell::RefCell<[Option<Prepared>; 4]> = const {
        std::cell::RefCell::new([None, None, None, None])
    };
}

/// A rig on a fresh copy of the prepared stack for `flags` (prepared on first use).
pub fn prepared(flags: u8) -> Rig {
    PREPARED.with(|p| {
        let mut p = p.borrow_mut();
        let slot = &mut p[usize::from(flags & 3)];
        if slot.is_none() {
            *slot = Some(match prepare(flags & 3) {
                Ok(rig) => rig,
                Err(e) => panic!("{e}"),
            });
        }
        match slot {
            Some(p) => Rig::new(p.clone()),
            None => unreachable!("prepared above"),
        }
    })
}

/// [`stack`], returning the device's counters at the end (`None` for empty input).
pub fn run(data: &[u8]) -> Option<Counters> {
    let (&setup_flags, mut rest) = data.split_first()?;
    let mut rig = prepared(setup_flags);
    let mut now = Instant::from_millis(1);
    for _ in 0..MAX_RECORDS {
        let Some((&flags, tail)) = rest.split_first() else {
            break;
        };
        let (len, tail) = match tail {
            [lo, hi, t @ ..] => (usize::from(u16::from_le_bytes([*lo, *hi])), t),
            t => (t.len(), &[][..]),
        };
        let (bytes, tail) = tail.split_at(len.min(tail.len()));
        rest = tail;
        let wait = u64::from(flags >> 4);
        if wait > 0 {
            now += Duration::from_millis(4 * wait);
            rig.node.handle_timeout(now);
            rig.drain(now);
        }
        rig.feed(now, flags, bytes);
    }
    // Let every timer that is due within a second run out (retransmissions, RNR waits).
    for _ in 0..64 {
        match rig.node.poll_timeout() {
            Some(t) if t <= now + Duration::from_secs(1) => {
                now = now.max(t);
                rig.node.handle_timeout(now);
                rig.drain(now);
            }
            _ => break,
        }
    }
    rig.node.stack(rig.port).map(|s| s.counters().clone())
}

/// Seed inputs for the corpus (`tests/fuzz_corpus.rs` writes them with `FUZZ_SEED_CORPUS=1`):
/// well-formed packets the setup's QPs accept, so the fuzzer starts inside the transport.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    use softrdma_wire::roce::{
        AethRepr, AtomicEthRepr, BthRepr, DethRepr, IethRepr, ImmDtRepr, Opcode, Psn, RethRepr,
        RoceRepr, Syndrome,
    };
    let rig = match prepare(0) {
        Ok(p) => p.at,
        Err(e) => panic!("{e}"),
    };
    let req = |opcode, psn: u32| {
        RoceRepr::new(BthRepr {
            opcode,
            pkey: 0xffff,
            dest_qp: rig.rc_qpn,
            psn: Psn::new(psn),
            ack_req: true,
            ..BthRepr::default()
        })
    };
    let mut out: Vec<(&'static str, Vec<RoceRepr>)> = Vec::new();
    let mut p = req(Opcode::RC_SEND_ONLY, 0);
    p.set_payload(b"hello, fuzz");
    out.push(("rc-send-only", vec![p]));
    let mut first = req(Opcode::RC_SEND_FIRST, 0);
    first.set_payload(&[0x11; 256]);
    let mut last = req(Opcode::RC_SEND_LAST_WITH_INVALIDATE, 1);
    last.ieth = Some(IethRepr {
        r_key: rig.fast_rkey,
    });
    last.set_payload(&[0x22; 10]);
    out.push(("rc-send-first-last-inv", vec![first, last]));
    let mut w = req(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 0);
    w.reth = Some(RethRepr {
        va: MR_VA,
        r_key: rig.rkey,
        dma_len: 16,
    });
    w.immdt = Some(ImmDtRepr { imm_data: 9 });
    w.set_payload(&[0x33; 16]);
    out.push(("rc-write-imm", vec![w]));
    let mut r = req(Opcode::RC_RDMA_READ_REQUEST, 0);
    r.reth = Some(RethRepr {
        va: MR_VA,
        r_key: rig.rkey,
        dma_len: 700,
    });
    out.push(("rc-read", vec![r]));
    let mut a = req(Opcode::RC_COMPARE_SWAP, 0);
    a.atomic_eth = Some(AtomicEthRepr {
        va: MR_VA,
        r_key: rig.rkey,
        swap_add: 5,
        compare: 0,
    });
    out.push(("rc-cmp-swap", vec![a]));
    // Responses to the setup's outstanding requests (PSNs 0.. in posting order: SEND 0-1,
    // WRITE 2-3, READ 4-6, atomic 7, SEND with immediate 8-9 at MTU 256).
    let ack = |psn: u32, syndrome: u8| {
        let mut a = req(Opcode::RC_ACKNOWLEDGE, psn);
        a.bth.ack_req = false;
        a.aeth = Some(AethRepr {
            syndrome: Syndrome(syndrome),
            msn: 1,
        });
        a
    };
    out.push(("rc-ack", vec![ack(3, 0x1f)]));
    out.push(("rc-nak-seq", vec![ack(0, 0x60)]));
    out.push(("rc-rnr-nak", vec![ack(0, 0x21)]));
    let mut rr = req(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 4);
    rr.bth.ack_req = false;
    rr.aeth = Some(AethRepr {
        syndrome: Syndrome(0x1f),
        msn: 2,
    });
    rr.set_payload(&[0x44; 256]);
    out.push(("rc-ack-then-read-response", vec![ack(3, 0x1f), rr]));
    let mut ud = RoceRepr::new(BthRepr {
        opcode: Opcode::UD_SEND_ONLY,
        pkey: 0xffff,
        dest_qp: rig.ud_qpn,
        psn: Psn::new(5),
        ..BthRepr::default()
    });
    ud.deth = Some(DethRepr {
        q_key: QKEY,
        reserved: 0,
        src_qp: 0x99,
    });
    ud.set_payload(&[0x55; 100]);
    out.push(("ud-send", vec![ud]));
    out.into_iter()
        .map(|(name, pkts)| {
            let mut input = vec![0u8];
            for (k, p) in pkts.iter().enumerate() {
                let bytes = p.to_bytes();
                // The second packet of a pair a little later (runs the timers once).
                input.push(if k == 0 { 0 } else { 0x10 });
                input.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
                input.extend_from_slice(&bytes);
            }
            (name, input)
        })
        .collect()
}
