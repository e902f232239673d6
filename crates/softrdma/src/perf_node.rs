//! A minimal device event loop for `softrdma perf`: one [`Stack`] driven over one
//! [`UdpEndpoint`] on one thread — receive everything queued (`recvmmsg`, GRO trains split
//! into their datagrams), run due timers, then send what the stack has as GSO trains
//! ([`Stack::poll_transmit_batch`]). Busy-polls, or sleeps in epoll until input or the next
//! timer (`-e`).

use std::io::{self, IoSliceMut};
use std::net::IpAddr;
use std::time::Duration as StdDuration;

use softrdma_core::device::{DeviceConfig, Mtu};
use softrdma_core::time::Instant;
use softrdma_core::transport::{Stack, TransmitBatch};
use softrdma_core::verbs::{
    steps_to_rts, AccessFlags, AddressVector, CqId, MrKeys, QpAttr, QpCap, QpInitAttr, QpType,
    WorkCompletion,
};
use softrdma_driver::udp::{RecvDatagram, RECV_BATCH};
use softrdma_driver::{Clock, EndpointConfig, Transmit, UdpEndpoint, ROCEV2_PORT};
use softrdma_wire::Gid;

/// Bytes of one receive buffer: a whole GSO train arrives in one on loopback (≤ 64 KiB).
const RX_BUF: usize = 1 << 16;

/// Where a node's QP and buffer are, for its peer.
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    pub ip: IpAddr,
    pub qpn: u32,
    pub rkey: u32,
    pub addr: u64,
}

/// Base address (iova) of every node's buffer.
pub const BUF_IOVA: u64 = 0x1000_0000;

/// One device: stack, socket, clock, buffers.
pub struct Node {
    pub stack: Stack,
    pub ep: UdpEndpoint,
    pub clock: Clock,
    pub ip: IpAddr,
    pub cq: CqId,
    pub qpn: u32,
    pub mr: MrKeys,
    pub busy: bool,
    batch: TransmitBatch,
    rx: Vec<u8>,
    metas: Vec<RecvDatagram>,
    /// Send errors other than would-block (counted, the datagrams are lost: RC retransmits).
    pub send_errors: u64,
    /// The last `recvmmsg` found the socket empty and epoll has not reported it readable since:
    /// in event mode a receive now would be a wasted syscall (epoll is edge-triggered, so
    /// anything arriving after that `recvmmsg` ends the next sleep at once).
    rx_drained: bool,
    /// Syscall accounting for `-v`: recvmmsg calls, epoll sleeps, sendmsg calls.
    pub stats: LoopStats,
}

/// What one node's loop did (for `-v`: syscalls and wake-ups per round trip).
#[derive(Clone, Copy, Debug, Default)]
pub struct LoopStats {
    pub recv_calls: u64,
    pub recv_empty: u64,
    pub sleeps: u64,
    pub send_calls: u64,
}

impl Node {
    /// A device on `ip:4791` with a `buf_len`-byte MR and one RC QP (RESET).
    pub fn new(ip: IpAddr, buf_len: usize, busy: bool, gso: bool, seed: u64) -> io::Result<Node> {
        let mut cfg = DeviceConfig::new(format!("perf{seed}"), vec![ip]);
        cfg.netdev_mtu = 65536; // loopback
        let mut stack = Stack::new(cfg, seed);
        // Everything leaves from the one socket on <ip>:4791: seal for that source port.
        stack.set_udp_src_port(Some(ROCEV2_PORT));
        let ep_cfg = EndpointConfig {
            gso,
            ..EndpointConfig::default()
        };
        let ep = UdpEndpoint::bind_with(std::net::SocketAddr::new(ip, ROCEV2_PORT), &ep_cfg)?;
        let err = |e: softrdma_core::verbs::VerbsError| io::Error::other(format!("{e:?}"));
        let pd = stack.verbs.alloc_pd().map_err(err)?;
        let cq = stack.verbs.create_cq(16384).map_err(err)?;
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mr = stack
            .verbs
            .reg_mr(pd, buf_len, BUF_IOVA, access)
            .map_err(err)?;
        // Fault every page in now, as perftest does by initialising its buffers: a page's
        // first write in the measurement would cost a page fault (and, after a read had
        // mapped the zero page, a TLB shootdown IPI to the other CPU).
        let ones = vec![0xa5u8; 1 << 20];
        let mut at = 0usize;
        while at < buf_len {
            let n = (buf_len - at).min(ones.len());
            let _ = stack.verbs.local_write(
                mr.lkey,
                BUF_IOVA + at as u64,
                ones.get(..n).unwrap_or_default(),
            );
            at += n;
        }
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
            .map_err(err)?;
        let max_seg = ep.max_gso_segments();
        let max_train = if ip.is_ipv4() { 65_507 } else { 65_527 };
        Ok(Node {
            stack,
            ep,
            clock: Clock::new(),
            ip,
            cq,
            qpn,
            mr,
            busy,
            batch: TransmitBatch::new(max_seg, max_train),
            rx: vec![0; RX_BUF * RECV_BATCH],
            metas: Vec::with_capacity(RECV_BATCH),
            send_errors: 0,
            rx_drained: false,
            stats: LoopStats::default(),
        })
    }

    /// What the peer needs to know.
    pub fn remote(&self) -> Remote {
        Remote {
            ip: self.ip,
            qpn: self.qpn,
            rkey: self.mr.rkey,
            addr: BUF_IOVA,
        }
    }

    /// RESET → INIT → RTR → RTS towards `peer`.
    pub fn connect(&mut self, peer: &Remote, mtu: Mtu) -> io::Result<()> {
        let attr = QpAttr {
            qp_access_flags: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            path_mtu: mtu,
            dest_qp_num: peer.qpn,
            rq_psn: 0,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 1,
            ah_attr: AddressVector {
                dgid: Gid::from(peer.ip),
                sgid_index: 0,
                ..AddressVector::default()
            },
            timeout: 14, // 4.096 µs × 2^14 ≈ 67 ms
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: 0,
            max_rd_atomic: 16,
            ..QpAttr::default()
        };
        for (a, mask) in steps_to_rts(QpType::Rc, &attr) {
            self.stack
                .modify_qp(self.qpn, &a, mask)
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        Ok(())
    }

    pub fn now(&self) -> Instant {
        Instant::from_micros(self.clock.now())
    }

    /// One turn of the loop: receive what is queued, timers, transmit. Returns whether any
    /// datagram came in or went out.
    pub fn turn(&mut self) -> bool {
        let did = self.receive();
        self.transmit() | did
    }

    /// Receives what is queued and runs due timers; returns whether anything came in. The
    /// application's reaction (completions polled, new WRs posted) before the next
    /// [`Node::transmit`] leaves with the ACKs of what came in, in one GSO send where sizes
    /// allow.
    pub fn receive(&mut self) -> bool {
        let mut did = false;
        // Receive a few batches before transmitting, so ACKs are seen before the window is
        // judged.
        let batches = if !self.busy && self.rx_drained { 0 } else { 4 };
        for _ in 0..batches {
            let n = self.recv_once();
            if n == 0 {
                break;
            }
            did = true;
            if n < RECV_BATCH {
                // recvmmsg stops at the first would-block: the queue was empty then. One more
                // call would be a wasted syscall per wake-up.
                break;
            }
        }
        let now = self.now();
        if self.stack.poll_timeout().is_some_and(|t| t <= now) {
            self.stack.handle_timeout(now);
        }
        did
    }

    fn recv_once(&mut self) -> usize {
        self.metas.clear();
        let got = {
            let mut chunks = self.rx.chunks_mut(RX_BUF);
            let mut slices: [IoSliceMut<'_>; RECV_BATCH] =
                std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
            self.ep.recv_batch_into(&mut slices, &mut self.metas)
        };
        let n = got.unwrap_or(0);
        self.stats.recv_calls += 1;
        self.rx_drained = n < RECV_BATCH;
        if n == 0 {
            self.stats.recv_empty += 1;
            return 0;
        }
        let now = self.now();
        for (i, m) in self.metas.iter().enumerate() {
            let Some(buf) = self.rx.get(i * RX_BUF..(i + 1) * RX_BUF) else {
                continue;
            };
            let dst = m.dst_ip.unwrap_or(self.ip);
            for seg in m.segments(buf) {
                self.stack.handle_datagram(now, m.src, dst, seg);
            }
        }
        n
    }

    /// Sends everything the stack has now, train by train; waits for socket space rather
    /// than dropping. Returns whether anything went out.
    pub fn transmit(&mut self) -> bool {
        let mut any = false;
        loop {
            self.batch.clear();
            let now = self.now();
            if self.stack.poll_transmit_batch(now, &mut self.batch) == 0 {
                return any;
            }
            any = true;
            for (t, bytes) in self.batch.trains() {
                let tx = Transmit {
                    destination: t.dst,
                    contents: bytes,
                    segment_size: t.gso_segment_size(),
                };
                loop {
                    self.stats.send_calls += 1;
                    match self.ep.send(&tx) {
                        Ok(()) => break,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            let _ = self.ep.wait_writable(Some(StdDuration::from_millis(5)));
                        }
                        Err(_) => {
                            self.send_errors += 1;
                            break;
                        }
                    }
                }
            }
            if !self.batch.is_full() {
                // A poll stops early only when the batch is full: nothing more to send now.
                return any;
            }
        }
    }

    /// Waits for something to do: returns at once when busy-polling, else sleeps in epoll
    /// until input, the stack's next timer, or the endpoint's notifier. The timer is the
    /// endpoint's lazy `timerfd`, so a sleep costs no hrtimer arm/cancel (see
    /// `softrdma_driver::udp`).
    pub fn idle(&mut self) {
        if self.busy {
            std::hint::spin_loop();
            return;
        }
        self.sleep();
    }

    /// Sleeps in epoll until input, the stack's next timer, or the notifier (busy or not).
    pub fn sleep(&mut self) {
        let deadline = self
            .stack
            .poll_timeout()
            .map(|t| self.clock.to_std(t.total_micros()));
        self.stats.sleeps += 1;
        let _ = self.ep.wait_readable_until(deadline);
        self.rx_drained = false;
    }

    /// Polls one completion.
    pub fn poll_cq(&mut self) -> Option<WorkCompletion> {
        self.stack.poll_cq(self.cq).ok().flatten()
    }
}
