//! What the driver's device tests share: an RC QP with a CQ and a 4 KiB MR on a device
//! (`End`), connecting two of them, and SEND ping-pongs waited for.

#![allow(dead_code, clippy::unwrap_used)] // each test binary uses its own part of this

use std::net::IpAddr;
use std::time::{Duration, Instant};

use softrdma_core::device::Mtu;
use softrdma_core::verbs::{
    steps_to_rts, AccessFlags, AddressVector, CqId, QpAttr, QpCap, QpInitAttr, QpType, RecvWr,
    SendOp, SendWr, Sge, WcStatus,
};
use softrdma_driver::Device;
use softrdma_wire::Gid;

pub struct End {
    pub dev: Device,
    pub cq: CqId,
    pub qpn: u32,
    pub lkey: u32,
}

pub fn end(dev: &Device) -> End {
    end_with_access(dev, AccessFlags::LOCAL_WRITE).0
}

/// [`end`] whose MR grants `access` (the peer's RDMA WRITE, READ, atomics); returns its
/// rkey too.
pub fn end_with_access(dev: &Device, access: AccessFlags) -> (End, u32) {
    let pd = dev.alloc_pd().unwrap();
    let keys = dev.reg_mr(pd, vec![0u8; 4096], 0x1000, access).unwrap();
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
    let end = End {
        dev: dev.clone(),
        cq,
        qpn,
        lkey: keys.lkey,
    };
    (end, keys.rkey)
}

/// Connects `e` to `peer` at `peer_ip`, sending from `e`'s GID `sgid_index`.
pub fn connect(e: &End, sgid_index: u16, peer: &End, peer_ip: IpAddr) {
    connect_with_access(e, sgid_index, peer, peer_ip, AccessFlags::NONE);
}

/// [`connect`], `e`'s responder granting the peer `access` (RDMA WRITE, READ, atomics).
pub fn connect_with_access(
    e: &End,
    sgid_index: u16,
    peer: &End,
    peer_ip: IpAddr,
    access: AccessFlags,
) {
    let attr = QpAttr {
        qp_access_flags: access,
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

pub fn completions(e: &End, n: usize) {
    let mut got = 0;
    let mut out = Vec::new();
    while got < n {
        out.clear();
        let k = if e.dev.app_turns() {
            // Busy-polling, as a verbs application does (its polls turn the device).
            let start = Instant::now();
            loop {
                let k = e.dev.poll_cq_into(e.cq, &mut out, n - got).unwrap();
                if k > 0 || start.elapsed() > Duration::from_secs(5) {
                    break k;
                }
            }
        } else {
            e.dev
                .wait_cq(e.cq, &mut out, n - got, Some(Duration::from_secs(5)))
                .unwrap()
        };
        assert!(k > 0, "{got} of {n} completions within 5 s on {:?}", e.dev);
        assert!(out.iter().all(|w| w.status == WcStatus::Success), "{out:?}");
        got += k;
    }
}

/// `rounds` SENDs A → B and back, each waited for.
pub fn ping_pong(a: &End, b: &End, rounds: u64) {
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
