//! The transport's hot path without sockets, for instruction counting
//! (`valgrind --tool=callgrind target/release/examples/hotpath write 4096 200`): two stacks
//! on 127.0.0.1 and 127.0.0.2 move `count` 1 MiB RDMA WRITEs (or SENDs, or READs) of
//! `mtu`-byte packets through `poll_transmit_batch` → `handle_datagram`, single-threaded and
//! deterministic. Prints packets moved so instruction counts can be divided per packet.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use softrdma_core::device::{DeviceConfig, Mtu};
use softrdma_core::time::Instant;
use softrdma_core::transport::{Stack, TransmitBatch};
use softrdma_core::verbs::*;
use softrdma_wire::Gid;

const SIZE: usize = 1 << 20;
const IOVA: u64 = 0x1000_0000;

struct End {
    stack: Stack,
    qpn: u32,
    cq: CqId,
    mr: MrKeys,
    ip: IpAddr,
}

fn end(ip: IpAddr, seed: u64) -> End {
    let mut cfg = DeviceConfig::new("hot", vec![ip]);
    cfg.netdev_mtu = 65536;
    let mut stack = Stack::new(cfg, seed);
    stack.set_udp_src_port(Some(4791));
    let pd = stack.verbs.alloc_pd().expect("pd");
    let cq = stack.verbs.create_cq(16384).expect("cq");
    let acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = stack.verbs.reg_mr(pd, SIZE * 4, IOVA, acc).expect("mr");
    let (qpn, _) = stack
        .verbs
        .create_qp(QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 4096,
                max_recv_wr: 4096,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .expect("qp");
    End {
        stack,
        qpn,
        cq,
        mr,
        ip,
    }
}

fn connect(e: &mut End, peer_ip: IpAddr, peer_qpn: u32, mtu: Mtu) {
    let attr = QpAttr {
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        path_mtu: mtu,
        dest_qp_num: peer_qpn,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 1,
        ah_attr: AddressVector {
            dgid: Gid::from(peer_ip),
            ..AddressVector::default()
        },
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 16,
        ..QpAttr::default()
    };
    for (a, mask) in steps_to_rts(QpType::Rc, &attr) {
        e.stack.modify_qp(e.qpn, &a, mask).expect("modify_qp");
    }
}

/// Moves everything `from` has to send into `to`; returns datagrams moved.
fn pump(from: &mut End, to: &mut End, batch: &mut TransmitBatch, now: Instant) -> u64 {
    let mut n = 0;
    loop {
        batch.clear();
        if from.stack.poll_transmit_batch(now, batch) == 0 {
            return n;
        }
        for (t, bytes) in batch.trains() {
            let src = SocketAddr::new(t.src_ip, t.src_port);
            for seg in bytes.chunks(t.segment_size) {
                to.stack.handle_datagram(now, src, to.ip, seg);
                n += 1;
            }
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let op = args.next().unwrap_or_else(|| "write".into());
    let mtu = match args.next().as_deref() {
        Some("1024") => Mtu::Mtu1024,
        Some("2048") => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    };
    let count: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    let ipa = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
    let ipb = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let mut a = end(ipa, 1);
    let mut b = end(ipb, 2);
    let (qa, qb) = (a.qpn, b.qpn);
    connect(&mut a, ipb, qb, mtu);
    connect(&mut b, ipa, qa, mtu);
    let mut batch = TransmitBatch::default();
    let now = Instant::from_millis(1);
    let (mut posted, mut done, mut pkts) = (0u64, 0u64, 0u64);
    let depth = 4;
    while done < count {
        while posted < count && posted - done < depth {
            let k = posted % 4;
            let sge = Sge {
                addr: IOVA + k * SIZE as u64,
                length: SIZE as u32,
                lkey: a.mr.lkey,
            };
            let remote_addr = IOVA + k * SIZE as u64;
            let wr = match op.as_str() {
                "send" => {
                    let rs = Sge {
                        addr: IOVA + k * SIZE as u64,
                        length: SIZE as u32,
                        lkey: b.mr.lkey,
                    };
                    b.stack
                        .post_recv(qb, RecvWr::new(posted, vec![rs]))
                        .expect("recv");
                    SendWr::new(posted, SendOp::Send)
                }
                "read" => SendWr::new(
                    posted,
                    SendOp::RdmaRead {
                        remote_addr,
                        rkey: b.mr.rkey,
                    },
                ),
                _ => SendWr::new(
                    posted,
                    SendOp::RdmaWrite {
                        remote_addr,
                        rkey: b.mr.rkey,
                    },
                ),
            }
            .with_sge(sge);
            a.stack.post_send(qa, wr).expect("post");
            posted += 1;
        }
        pkts += pump(&mut a, &mut b, &mut batch, now);
        pkts += pump(&mut b, &mut a, &mut batch, now);
        while let Ok(Some(wc)) = a.stack.poll_cq(a.cq) {
            assert_eq!(wc.status, WcStatus::Success);
            done += 1;
        }
        while let Ok(Some(_)) = b.stack.poll_cq(b.cq) {}
    }
    println!(
        "{op}: {count} x 1 MiB, {pkts} datagrams ({} data per MiB)",
        SIZE / mtu.bytes() as usize
    );
}
