//! The RoCEv2 transport, sans-IO (`docs/architecture.md`): a [`Stack`] owns one [`Device`] and its
//! [`Verbs`] objects and turns posted work requests into datagrams and datagrams into
//! completions.
//!
//! - [`Stack::handle_datagram`]: a UDP payload that arrived on port 4791. Checked in rxe's
//!   order (`rxe_recv.c`): headers parse, ICRC ([`icrc::verify_udp`]), BTH version,
//!   destination GID, destination QP, opcode for the QP type, P_Key, QP state, Q_Key (UD,
//!   GSI), payload size vs MTU. Every failure is dropped and counted in
//!   [`Device::counters`] — never a panic.
//! - [`Stack::poll_transmit`]: the next datagram to send ([`Transmit`], ICRC sealed for an
//!   unconnected DF socket: IPv4 ID 0).
//! - [`Stack::poll_transmit_batch`]: everything there is to send now, written into a
//!   [`TransmitBatch`] as GSO trains (each segment sealed for the IPv4 ID it gets in its
//!   train) — the fast path: one `sendmsg` per train.
//! - [`Stack::set_udp_src_port`]: seal every packet for one fixed UDP source port (the
//!   port the driver's socket is bound to) instead of rxe's per-QP flow-label port.
//! - [`Stack::handle_timeout`] / [`Stack::poll_timeout`]: local ACK timeouts, RNR waits,
//!   tail-loss probes, and the pacer's next send ([`cc`]): a requester the pacer holds back
//!   leaves the sending index and waits in the deadline index, so the runtime wakes for it.
//!
//! A loop turn costs what the QPs with work cost, not what all QPs cost: the stack keeps
//! two indexes in step with every requester it touches — the deadlines (`(deadline, QPN)`,
//! the earlier of the ACK timer and the RNR wait) and the QPNs with a packet to send
//! ([`Requester::wants_to_send`]) — so [`Stack::poll_timeout`] is the index's first
//! entry, [`Stack::handle_timeout`] visits the due QPs only, and the transmit calls visit
//! only QPs that want to send, round robin from a cursor as before. 100,000 idle QPs cost
//! a turn nothing ([`Stack::qp_visits`] counts what the turns examined).
//! - Verbs calls that the transport must see go through the stack ([`Stack::post_send`],
//!   [`Stack::post_recv`], [`Stack::modify_qp`], [`Stack::poll_cq`]); the rest are on
//!   [`Stack::verbs`].
//!
//! Submodules: [`cc`] (congestion control and pacing, `docs/congestion-control.md`),
//! [`emit`] (UDP source port rule, packet building), [`segment`] (MTU
//! segmentation and opcodes), [`rc_requester`], [`rc_responder`], [`resources`] (responder
//! resources for duplicate READs/atomics), [`ud`], [`memory`] (gather/scatter).
//!
//! Retry semantics: `retry_cnt` is finite for every value 0..=7 (IBTA C9-141: 7 is not
//! "infinite" for the transport retry counter; rxe treats 7 as infinite — we do not, so a
//! dead peer always ends in `RETRY_EXC_ERR`); `rnr_retry` 7 is infinite. Local ACK timeout
//! exponent 0 disables the timer.

pub mod cc;
pub mod ecn;
pub mod emit;
pub mod kept;
pub mod mcast;
pub mod memory;
pub mod rc_requester;
pub mod rc_responder;
pub mod resources;
pub mod response;
pub mod segment;
pub mod ud;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};

use softrdma_wire::icrc::{self, Flow, Verdict, ROCE_V2_PORT};
use softrdma_wire::roce::{Opcode, Psn, RocePacket, Transport};
use softrdma_wire::Gid;

pub use emit::{Train, Transmit, TransmitBatch};

use crate::device::{Counters, Device, DeviceConfig, GidType, Pkey, PORT_NUM};
use crate::time::{Duration, Instant};
use crate::verbs::{
    AccessFlags, CqId, PdId, QpAttr, QpAttrMask, QpState, QpType, RecvWr, SendWr, Verbs,
    VerbsError, WcStatus, WorkCompletion, GSI_QKEY,
};

use rc_requester::{Requester, Wqe};
use rc_responder::Responder;
use response::Responses;

/// What the transport needs to know about a QP for one step (a snapshot of its attributes).
#[derive(Clone, Copy, Debug)]
pub struct QpInfo {
    pub qpn: u32,
    pub qp_type: QpType,
    pub pd: PdId,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    pub sq_sig_all: bool,
    /// Path MTU (RC) or port MTU (UD) in bytes.
    pub mtu: u32,
    pub pkey: u16,
    pub qkey: u32,
    pub dest_qpn: u32,
    pub local_ip: IpAddr,
    pub peer_ip: IpAddr,
    pub src_port: u16,
    pub max_rd_atomic: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub ack_timeout: Option<Duration>,
    pub access: AccessFlags,
    /// The IP TOS of a connected QP's packets: its address vector's traffic class.
    pub tos: u8,
}

/// The mutable world a transport step works on.
pub struct Ctx<'a> {
    pub verbs: &'a mut Verbs,
    pub counters: &'a mut Counters,
    pub out: &'a mut Responses,
    pub now: Instant,
    /// QPs the step found fatally broken (moved to ERR after the step).
    pub fatal: Vec<u32>,
}

#[derive(Clone, Debug, Default)]
struct QpTransport {
    req: Requester,
    resp: Responder,
    /// When this QP last answered a CE mark with a CNP.
    np: ecn::NotificationPoint,
    ud_psn: Psn,
    /// The deadline this QP has in [`Stack::deadlines`] (what `req.poll_timeout()` was at
    /// the last [`Stack::sync`]).
    indexed_deadline: Option<Instant>,
    /// Whether this QP is in [`Stack::sending`].
    indexed_sending: bool,
}

/// [`Stack::qp_visits`]'s counter (cloned with the stack).
#[derive(Debug, Default)]
struct Visits(AtomicU64);

impl Clone for Visits {
    fn clone(&self) -> Visits {
        Visits(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

/// One software RDMA device with its transport. `Clone` copies the whole device (memory,
/// queues, transport state): a prepared device can be reused from a copy (the fuzz rigs).
#[derive(Clone)]
pub struct Stack {
    /// The device model (counters, GIDs, P_Keys).
    pub device: Device,
    /// The verbs objects (PDs, MRs, CQs, QPs); create objects here directly. What the
    /// transport must see — posting sends, moving or destroying a QP — is the stack's own
    /// ([`Stack::post_send`], [`Stack::modify_qp`], [`Stack::destroy_qp`]); `Verbs` keeps
    /// those to the crate, so a caller cannot skip the transport:
    ///
    /// ```compile_fail
    /// # use softrdma_core::{DeviceConfig, Stack};
    /// # use softrdma_core::verbs::{SendOp, SendWr};
    /// let mut s = Stack::new(DeviceConfig::new("d", vec![]), 1);
    /// s.verbs.post_send(1, SendWr::new(1, SendOp::Send)); // only `s.post_send` exists
    /// ```
    pub verbs: Verbs,
    qps: BTreeMap<u32, QpTransport>,
    /// Every requester's earliest deadline, `(deadline, qpn)`.
    deadlines: BTreeSet<(Instant, u32)>,
    /// The QPNs whose requester has a packet to send ([`Requester::wants_to_send`]).
    sending: BTreeSet<u32>,
    /// QP entries examined by the per-turn calls ([`Stack::qp_visits`]).
    visits: Visits,
    out: Responses,
    rr: u32,
    src_port: Option<u16>,
    /// The masked headers' CRC register of the last packet received (a train's segments
    /// share it).
    rx_crc_memo: icrc::HeaderMemo,
    /// Whether requesters pace and react to congestion ([`Stack::set_congestion_control`]).
    congestion_control: bool,
    /// Multicast groups and their attached UD QPs ([`Stack::attach_mcast`]).
    groups: mcast::Groups,
}

impl Stack {
    /// A device built from `config`; `seed` fixes its keys.
    pub fn new(config: DeviceConfig, seed: u64) -> Stack {
        let device = Device::new(config);
        let verbs = Verbs::new(device.query_device(), seed);
        Stack {
            device,
            verbs,
            qps: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            sending: BTreeSet::new(),
            visits: Visits::default(),
            out: Responses::default(),
            rr: 0,
            src_port: None,
            rx_crc_memo: icrc::HeaderMemo::default(),
            congestion_control: false,
            groups: mcast::Groups::default(),
        }
    }

    /// Turns congestion control and pacing on or off for every RC requester, the QPs this
    /// stack has now and those it will have (`docs/congestion-control.md`). Off (the
    /// default), a requester never paces: it sends as before issue 21, with the tail-loss
    /// probes and RTT samples only. On, a QP still starts unpaced and paces from its first
    /// congestion signal. Off by default because on a loaded host (CPU starved, busy
    /// polling) the signals also come from the host's own scheduling — a READ requester's
    /// probes fire, RTTs jump by milliseconds — and the controller then paces a loopback
    /// path that has no bottleneck (measured: `perf read bw` at 16 MB/s under load 9);
    /// a stack that talks across a real network turns it on (`perf --link` does).
    pub fn set_congestion_control(&mut self, on: bool) {
        self.congestion_control = on;
        for t in self.qps.values_mut() {
            t.req.cc.enabled = on;
        }
    }

    /// Whether congestion control is on ([`Stack::set_congestion_control`]).
    pub fn congestion_control(&self) -> bool {
        self.congestion_control
    }

    /// How many QP entries [`Stack::poll_timeout`], [`Stack::handle_timeout`],
    /// [`Stack::poll_transmit`] and [`Stack::poll_transmit_batch`] have examined so far (a
    /// cost counter: it grows with the QPs that have a due timer or a packet to send, not
    /// with the QPs the device holds).
    pub fn qp_visits(&self) -> u64 {
        self.visits.0.load(Ordering::Relaxed)
    }

    fn visit(&self, n: u64) {
        // A statistic: a load and a store (no locked instruction); `poll_timeout` takes
        // `&self`, and the stack stays `Sync`.
        let v = &self.visits.0;
        v.store(v.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// Puts `qpn`'s entries in the deadline and sending indexes in step with its requester
    /// (after anything that may have changed it). A QP the stack no longer has leaves both.
    fn sync(&mut self, qpn: u32) {
        self.sync_with(qpn, false)
    }

    /// [`Stack::sync`]; `exact` re-indexes a deadline that moved later too. Otherwise an
    /// earlier index entry stays where it is: the requester's timer restarts on every
    /// response packet (256 a 1 MiB READ), and moving the entry cost two B-tree operations
    /// each. The stale entry's wake-up finds nothing due, and `handle_timeout` re-indexes
    /// exactly.
    fn sync_with(&mut self, qpn: u32, exact: bool) {
        let Some(t) = self.qps.get_mut(&qpn) else {
            return;
        };
        let deadline = t.req.poll_timeout();
        let later = matches!((t.indexed_deadline, deadline), (Some(old), Some(new)) if old < new);
        if deadline != t.indexed_deadline && (exact || !later) {
            if let Some(old) = t.indexed_deadline {
                self.deadlines.remove(&(old, qpn));
            }
            if let Some(new) = deadline {
                self.deadlines.insert((new, qpn));
            }
            t.indexed_deadline = deadline;
        }
        let wants = t.req.wants_to_send();
        if wants != t.indexed_sending {
            if wants {
                self.sending.insert(qpn);
            } else {
                self.sending.remove(&qpn);
            }
            t.indexed_sending = wants;
        }
    }

    /// Forgets `qpn`'s transport state, and its index entries with it.
    fn remove_transport(&mut self, qpn: u32) {
        if let Some(t) = self.qps.remove(&qpn) {
            if let Some(d) = t.indexed_deadline {
                self.deadlines.remove(&(d, qpn));
            }
            if t.indexed_sending {
                self.sending.remove(&qpn);
            }
        }
    }

    /// Seals every packet for UDP source port `port` (`None`: rxe's rule, a port derived from
    /// the QP's flow label, see [`emit::rc_src_port`]). A driver that sends everything from
    /// its one socket bound to `<ip>:4791` sets `Some(4791)` (`docs/wire-facts.md`: any source port is
    /// legal; the ICRC must match the one actually used).
    pub fn set_udp_src_port(&mut self, port: Option<u16>) {
        self.src_port = port;
    }

    /// QP `qpn`'s congestion controller (its rate, RTTs, mode), if the QP has transport
    /// state.
    pub fn cc(&self, qpn: u32) -> Option<&cc::Cc> {
        self.qps.get(&qpn).map(|t| &t.req.cc)
    }

    /// The counters (`rdma statistic show`).
    pub fn counters(&self) -> &Counters {
        self.device.counters()
    }

    fn gid_ip(&self, index: u16) -> IpAddr {
        self.device
            .query_gid(PORT_NUM, index)
            .or_else(|_| self.device.query_gid(PORT_NUM, 0))
            .map(|e| e.gid.to_ip())
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    fn info(&self, qpn: u32) -> Option<QpInfo> {
        let qp = self.verbs.qp(qpn).ok()?;
        let a = qp.attr();
        let port_mtu = self
            .device
            .port(PORT_NUM)
            .map(|p| p.mtu_cap())
            .unwrap_or(1024);
        let pkey = self
            .device
            .query_pkey(PORT_NUM, a.pkey_index)
            .unwrap_or(Pkey::DEFAULT_FULL)
            .0;
        let ty = qp.qp_type();
        let (mtu, src_port, qkey) = match ty {
            QpType::Rc | QpType::Uc => (
                a.path_mtu.bytes(),
                emit::rc_src_port(a.ah_attr.flow_label, qpn, a.dest_qp_num),
                a.qkey,
            ),
            QpType::Ud => (port_mtu, emit::datagram_src_port(qpn), a.qkey),
            QpType::Gsi => (port_mtu, emit::datagram_src_port(qpn), GSI_QKEY),
        };
        Some(QpInfo {
            qpn,
            qp_type: ty,
            pd: qp.pd(),
            send_cq: qp.send_cq(),
            recv_cq: qp.recv_cq(),
            sq_sig_all: qp.sq_sig_all(),
            mtu,
            src_port: self.src_port.unwrap_or(src_port),
            pkey: if ty == QpType::Gsi { 0xffff } else { pkey },
            qkey,
            dest_qpn: a.dest_qp_num,
            local_ip: self.gid_ip(a.ah_attr.sgid_index),
            peer_ip: a.ah_attr.dgid.to_ip(),
            max_rd_atomic: a.max_rd_atomic,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            min_rnr_timer: a.min_rnr_timer,
            ack_timeout: (a.timeout != 0).then(|| Duration::from_ib_timeout_exp(a.timeout)),
            access: a.qp_access_flags,
            // With congestion control on, an RC QP's packets are ECT(0) (`ecn.rs`); off,
            // the traffic class as rxe sends it.
            tos: if ty.is_datagram() {
                0
            } else if self.congestion_control && ty == QpType::Rc {
                ecn::with_ect(a.ah_attr.traffic_class)
            } else {
                a.ah_attr.traffic_class
            },
        })
    }

    // ----- verbs that the transport must see -----

    /// `ibv_modify_qp`, keeping the transport state in step (RTR starts the responder at
    /// `rq_psn`, RTS the requester at `sq_psn`, ERR flushes, RESET forgets).
    pub fn modify_qp(
        &mut self,
        qpn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), VerbsError> {
        let from = self.verbs.qp(qpn)?.state();
        if mask.contains(QpAttrMask::STATE) && attr.qp_state == QpState::Err {
            self.flush_transport(qpn, Instant::ZERO);
        }
        self.verbs.modify_qp(&self.device, qpn, attr, mask)?;
        let qp = self.verbs.qp(qpn)?;
        let to = qp.state();
        let a = *qp.attr();
        let t = self.qps.entry(qpn).or_default();
        match to {
            QpState::Reset => {
                t.req = Requester::default();
                t.resp = Responder::default();
                t.ud_psn = Psn::default();
            }
            QpState::Rtr if from != QpState::Rtr => t.resp.start(a.rq_psn, a.max_dest_rd_atomic),
            QpState::Rts if from == QpState::Rtr => {
                t.req.start(a.sq_psn, a.retry_cnt, a.rnr_retry);
                t.req.cc.enabled = self.congestion_control;
                t.ud_psn = Psn::new(a.sq_psn);
            }
            _ => {}
        }
        self.sync(qpn);
        Ok(())
    }

    fn flush_transport(&mut self, qpn: u32, now: Instant) {
        let Some(info) = self.info(qpn) else { return };
        let Some(t) = self.qps.get_mut(&qpn) else {
            return;
        };
        let mut ctx = Ctx {
            verbs: &mut self.verbs,
            counters: &mut self.device.counters,
            out: &mut self.out,
            now,
            fatal: Vec::new(),
        };
        t.req.flush(&mut ctx, &info);
        t.resp.flush(&mut ctx, &info);
        self.sync(qpn);
    }

    /// A WR's payload could not be read as it went out (its MR was deregistered while the
    /// WR was outstanding): the WR completes with a local protection error and the QP goes
    /// to ERR, as a post with that SGE would have.
    fn fail_local(&mut self, qpn: u32, info: &QpInfo, now: Instant) {
        let Some(t) = self.qps.get_mut(&qpn) else {
            return;
        };
        self.device.counters.send_err += 1;
        let mut ctx = Ctx {
            verbs: &mut self.verbs,
            counters: &mut self.device.counters,
            out: &mut self.out,
            now,
            fatal: Vec::new(),
        };
        t.req.fail(&mut ctx, info, WcStatus::LocProtErr);
        t.resp.flush(&mut ctx, info);
        self.sync(qpn);
    }

    /// `ibv_destroy_qp`.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        self.verbs.destroy_qp(qpn)?;
        self.remove_transport(qpn);
        self.groups.detach_all(qpn);
        Ok(())
    }

    /// `ibv_attach_mcast`: UD QP `qpn` hears the multicast group `gid` ([`mcast`]).
    pub fn attach_mcast(&mut self, qpn: u32, gid: Gid) -> Result<(), mcast::McastError> {
        match self.verbs.qp(qpn).map(|q| q.qp_type()) {
            Ok(QpType::Ud) => self.groups.attach(gid, qpn),
            _ => Err(mcast::McastError::NotUd),
        }
    }

    /// `ibv_detach_mcast`.
    pub fn detach_mcast(&mut self, qpn: u32, gid: &Gid) -> Result<(), mcast::McastError> {
        self.groups.detach(gid, qpn)
    }

    /// The QPs attached to multicast group `gid`.
    pub fn mcast_members(&self, gid: &Gid) -> Vec<u32> {
        self.groups.members(gid)
    }

    /// `ibv_post_send`. UD sends leave at once (queued for [`Stack::poll_transmit`]); RC
    /// WRs join the requester's queue.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        self.verbs.post_send(qpn, wr)?;
        self.pull_send_queue(qpn);
        self.sync(qpn);
        Ok(())
    }

    /// Posts `wrs` on `qpn` all or nothing, as `ibv_wr_complete` does on rxe and mlx5
    /// (their `wr_complete` rolls the send queue back to where `wr_start` found it when a
    /// builder failed): every WR is checked first, against the QP's state, type and caps
    /// and against the room left in the send queue with the batch's earlier WRs counted,
    /// and only when all pass are they posted, in order. On a refusal nothing was posted;
    /// the error is the first WR's that failed, with its index in the batch.
    pub fn post_send_batch(
        &mut self,
        qpn: u32,
        wrs: Vec<SendWr>,
    ) -> Result<(), (usize, VerbsError)> {
        for (i, wr) in wrs.iter().enumerate() {
            self.verbs.check_send(qpn, wr, i).map_err(|e| (i, e))?;
        }
        for (i, wr) in wrs.into_iter().enumerate() {
            // Cannot be refused after the checks above (the same checks, nothing changed in
            // between but the queue growing by the WRs counted there); kept as an error all
            // the same rather than trusted.
            self.verbs.post_send(qpn, wr).map_err(|e| (i, e))?;
        }
        self.pull_send_queue(qpn);
        self.sync(qpn);
        Ok(())
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        self.verbs.post_recv(qpn, wr)
    }

    /// `ibv_poll_cq` for one completion.
    pub fn poll_cq(&mut self, cq: CqId) -> Result<Option<WorkCompletion>, VerbsError> {
        self.verbs.poll_cq(cq)
    }

    fn pull_send_queue(&mut self, qpn: u32) {
        let Some(info) = self.info(qpn) else { return };
        while let Some(wr) = self.verbs.take_send_wr(qpn) {
            let responds_into =
                wr.op.is_atomic() || matches!(wr.op, crate::verbs::SendOp::RdmaRead { .. });
            // RC payloads are read from the MRs packet by packet as they go out (no copy of
            // the whole message at post time); the SGEs are checked here all the same, so a
            // bad one fails the post's WR as before. UD sends are built now.
            let rc = !info.qp_type.is_datagram();
            let gathered = if responds_into || (rc && wr.inline_data.is_none()) {
                memory::check_local(&self.verbs, info.pd, &wr).map(|()| Vec::new())
            } else {
                memory::gather(&self.verbs, info.pd, &wr)
            };
            let data = match gathered {
                Ok(d) => d,
                Err(_) => {
                    // A local protection error: the WR completes in error, the QP goes to ERR.
                    self.device.counters.send_err += 1;
                    let wc =
                        WorkCompletion::new(wr.wr_id, qpn, wr.op.wc_opcode(), WcStatus::LocProtErr);
                    self.flush_transport(qpn, Instant::ZERO);
                    self.verbs.complete(info.send_cq, wc);
                    self.verbs.set_qp_error(qpn);
                    return;
                }
            };
            let local_ip = wr
                .ud
                .map(|u| self.gid_ip(u.av.sgid_index))
                .unwrap_or(info.local_ip);
            let t = self.qps.entry(qpn).or_default();
            match info.qp_type {
                QpType::Ud | QpType::Gsi => {
                    let ui = QpInfo { local_ip, ..info };
                    let psn = t.ud_psn;
                    t.ud_psn = psn.next();
                    let port_mtu = info.mtu;
                    let status = match ud::build_send(&ui, &wr, &data, psn, port_mtu) {
                        Ok(tx) => {
                            self.out.push_sealed(tx);
                            self.device.counters.sent_pkts += 1;
                            WcStatus::Success
                        }
                        Err(st) => st,
                    };
                    if status != WcStatus::Success || wr.signaled || info.sq_sig_all {
                        let mut wc = WorkCompletion::new(wr.wr_id, qpn, wr.op.wc_opcode(), status);
                        wc.byte_len = data.len() as u32;
                        self.verbs.complete(info.send_cq, wc);
                    }
                }
                _ => {
                    let inline = wr.inline_data.is_some().then_some(data);
                    t.req.wqes.push_back(Wqe::new(wr, inline, info.mtu));
                }
            }
        }
    }

    // ----- the sans-IO interface -----

    /// A UDP datagram arrived from `src` at our address `dst_ip` (port 4791).
    pub fn handle_datagram(&mut self, now: Instant, src: SocketAddr, dst_ip: IpAddr, data: &[u8]) {
        self.handle_datagram_ecn(now, src, dst_ip, data, ecn::NOT_ECT);
    }

    /// [`Stack::handle_datagram`] with the ECN field the datagram's IP header carried (the
    /// driver reads it when congestion control is on): a CE-marked request draws a CNP
    /// (`ecn.rs`).
    pub fn handle_datagram_ecn(
        &mut self,
        now: Instant,
        src: SocketAddr,
        dst_ip: IpAddr,
        data: &[u8],
        ecn_field: u8,
    ) {
        let c = &mut self.device.counters;
        let Ok(pkt) = RocePacket::new_checked(data) else {
            c.drop_malformed += 1;
            return;
        };
        let flow = Flow {
            src: src.ip(),
            dst: dst_ip,
            src_port: src.port(),
            dst_port: ROCE_V2_PORT,
        };
        let ident = match self.rx_crc_memo.verify_udp(&flow, data) {
            Ok(Verdict::Verified { ipv4 }) => ipv4,
            _ => {
                c.drop_bad_icrc += 1;
                return;
            }
        };
        let bth = pkt.bth();
        if bth.tver() != 0 {
            c.drop_bad_tver += 1;
            return;
        }
        let qpn = bth.dest_qp();
        let dgid = Gid::from(dst_ip);
        if qpn == mcast::MULTICAST_QPN && mcast::is_multicast_gid(&dgid) {
            // rxe_rcv_mcast_pkt: every attached QP gets its copy through the per-QP
            // checks; a group nobody here attached is dropped as a foreign DGID.
            let members = self.groups.members(&dgid);
            if members.is_empty() {
                self.device.counters.drop_bad_dgid += 1;
                return;
            }
            for m in members {
                self.receive_on(now, m, &pkt, src, dst_ip, ident, data.len(), ecn_field);
            }
            return;
        }
        if self
            .device
            .find_gid(PORT_NUM, &dgid, GidType::RoceV2)
            .is_err()
        {
            self.device.counters.drop_bad_dgid += 1;
            return;
        }
        self.receive_on(now, qpn, &pkt, src, dst_ip, ident, data.len(), ecn_field);
    }

    /// The per-QP half of [`Stack::handle_datagram`]: the checks of QP `qpn` (type, P_Key,
    /// state, Q_Key, size) and the delivery.
    #[allow(clippy::too_many_arguments)]
    fn receive_on(
        &mut self,
        now: Instant,
        qpn: u32,
        pkt: &RocePacket<&[u8]>,
        src: SocketAddr,
        dst_ip: IpAddr,
        ident: Option<icrc::Ipv4Ident>,
        udp_len: usize,
        ecn_field: u8,
    ) {
        let bth = pkt.bth();
        let Some(info) = self.info(qpn) else {
            self.device.counters.drop_unknown_qpn += 1;
            return;
        };
        let opcode = pkt.opcode();
        if opcode == Opcode::CNP {
            self.on_cnp(now, qpn, &info);
            return;
        }
        let op_ok = match info.qp_type {
            QpType::Rc => opcode.transport() == Transport::Rc && opcode.is_defined(),
            QpType::Ud | QpType::Gsi => matches!(
                opcode,
                Opcode::UD_SEND_ONLY | Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
            ),
            QpType::Uc => false,
        };
        if !op_ok {
            self.device.counters.drop_bad_opcode += 1;
            return;
        }
        if self
            .device
            .port(PORT_NUM)
            .ok()
            .and_then(|p| p.pkeys.find_match(Pkey(bth.pkey())))
            .is_none()
        {
            self.device.count_bad_pkey();
            return;
        }
        let state = self
            .verbs
            .qp(qpn)
            .map(|q| q.state())
            .unwrap_or(QpState::Reset);
        let is_response = opcode.is_response();
        let state_ok = if is_response {
            matches!(state, QpState::Rts | QpState::Sqd)
        } else {
            matches!(state, QpState::Rtr | QpState::Rts | QpState::Sqd)
        };
        if !state_ok {
            self.device.counters.drop_qp_state += 1;
            return;
        }
        if info.qp_type.is_datagram() {
            let qkey = pkt.deth().map(|d| d.q_key());
            if qkey != Some(info.qkey) {
                self.device.count_bad_qkey();
                return;
            }
        }
        if pkt.payload().len() as u64 > u64::from(info.mtu) {
            self.device.counters.drop_oversized_payload += 1;
            return;
        }
        self.device.counters.rcvd_pkts += 1;
        let t = self.qps.entry(qpn).or_default();
        let mut ctx = Ctx {
            verbs: &mut self.verbs,
            counters: &mut self.device.counters,
            out: &mut self.out,
            now,
            fatal: Vec::new(),
        };
        match info.qp_type {
            QpType::Ud | QpType::Gsi => {
                ud::on_receive(&mut ctx, &info, pkt, src.ip(), dst_ip, ident, udp_len);
            }
            _ if is_response => {
                let syndrome = pkt.aeth().map(|a| a.syndrome());
                let orig = pkt.atomic_ack_eth().map(|a| a.orig_remote_data());
                t.req.on_response(
                    &mut ctx,
                    &info,
                    opcode,
                    bth.psn(),
                    syndrome,
                    orig,
                    pkt.payload(),
                );
            }
            _ => {
                let info = QpInfo {
                    local_ip: dst_ip,
                    ..info
                };
                if ecn::is_ce(ecn_field) && self.congestion_control {
                    // The notification point: a marked request draws a CNP, at most one per
                    // interval. CE is only ever set on ECT, so the peer understands ECN.
                    ctx.counters.rcvd_ce += 1;
                    if t.np.on_ce(now) {
                        ctx.out.push_sealed(ecn::cnp(
                            info.pkey,
                            info.dest_qpn,
                            info.local_ip,
                            info.src_port,
                            info.peer_ip,
                            info.tos,
                        ));
                        ctx.counters.sent_cnp += 1;
                    }
                }
                t.resp.on_request(&mut ctx, &info, pkt);
            }
        }
        let fatal = std::mem::take(&mut ctx.fatal);
        for q in fatal {
            self.flush_transport(q, now);
            self.verbs.set_qp_error(q);
        }
        self.sync(qpn);
    }

    /// A CNP (BTH opcode 0x81) for `qpn`: DCQCN's reaction on an RC QP whose packets we
    /// marked ECT (congestion control on); dropped and counted otherwise (a peer has no
    /// business sending one then: we never sent it ECT).
    fn on_cnp(&mut self, now: Instant, qpn: u32, info: &QpInfo) {
        let port_pkey_ok = self
            .device
            .port(PORT_NUM)
            .ok()
            .and_then(|p| p.pkeys.find_match(Pkey(info.pkey)))
            .is_some();
        let state_ok = self
            .verbs
            .qp(qpn)
            .is_ok_and(|q| matches!(q.state(), QpState::Rts | QpState::Sqd));
        if !(self.congestion_control && info.qp_type == QpType::Rc && port_pkey_ok && state_ok) {
            self.device.counters.drop_cnp += 1;
            return;
        }
        self.device.counters.rcvd_cnp += 1;
        let t = self.qps.entry(qpn).or_default();
        t.req.cc.on_cnp(now);
        self.sync(qpn);
    }

    /// Timers that are due.
    pub fn handle_timeout(&mut self, now: Instant) {
        // The due QPs from the deadline index, handled in QPN order (as a walk over all QPs
        // would: completions of QPs sharing a CQ keep their order).
        let mut qpns: Vec<u32> = self
            .deadlines
            .range(..=(now, u32::MAX))
            .map(|&(_, q)| q)
            .collect();
        self.visit(qpns.len() as u64);
        qpns.sort_unstable();
        for qpn in qpns {
            let Some(info) = self.info(qpn) else { continue };
            let Some(t) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let mut ctx = Ctx {
                verbs: &mut self.verbs,
                counters: &mut self.device.counters,
                out: &mut self.out,
                now,
                fatal: Vec::new(),
            };
            t.req.handle_timeout(&mut ctx, &info);
            self.sync_with(qpn, true);
        }
    }

    /// The earliest timer deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let first = self.deadlines.first().map(|&(d, _)| d);
        self.visit(u64::from(first.is_some()));
        first
    }

    /// The first QPN at or after `from` (and before `below`, if given) whose requester
    /// wants to send.
    fn next_sending(&self, from: u32, below: Option<u32>) -> Option<u32> {
        let q = match below {
            Some(b) if from >= b => None,
            Some(b) => self.sending.range(from..b).next().copied(),
            None => self.sending.range(from..).next().copied(),
        };
        self.visit(u64::from(q.is_some()));
        q
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if let Some(tx) = self.out.pop_transmit(self.verbs.mr_table()) {
            return Some(tx);
        }
        // Round robin over RC QPs with something to send: from the cursor on, then from 0
        // up to the cursor.
        let start = self.rr;
        let mut cursor = start;
        let mut wrapped = false;
        loop {
            let next = self.next_sending(cursor, wrapped.then_some(start));
            let Some(qpn) = next else {
                if wrapped || start == 0 {
                    return None;
                }
                wrapped = true;
                cursor = 0;
                continue;
            };
            let last = qpn == u32::MAX;
            cursor = qpn.wrapping_add(1);
            let sendable = matches!(
                self.verbs.qp(qpn).map(|q| q.state()),
                Ok(QpState::Rts | QpState::Sqd)
            );
            if let Some(info) = self.info(qpn).filter(|_| sendable) {
                if let Some(t) = self.qps.get_mut(&qpn) {
                    let tx = t.req.poll_transmit(&info, self.verbs.mr_table(), now);
                    count_requester_stats(&mut self.device.counters, t.req.take_stats());
                    if t.req.take_fault() {
                        self.fail_local(qpn, &info, now);
                    } else {
                        self.sync(qpn);
                        if let Some(tx) = tx {
                            self.rr = qpn.wrapping_add(1);
                            self.device.counters.sent_pkts += 1;
                            return Some(tx);
                        }
                    }
                }
            }
            if last {
                if wrapped || start == 0 {
                    return None;
                }
                wrapped = true;
                cursor = 0;
            }
        }
    }

    /// Everything there is to send now (up to `batch.max_bytes`), appended to `batch` as GSO
    /// trains: first the RC requesters' packets, round robin over the QPs, each QP's packets
    /// back to back so a message's segments share trains, then the queued responses (ACKs,
    /// READ responses, UD sends). Packets are written straight into the batch's buffer
    /// and sealed for their IPv4 ID in the train. Returns the datagrams added.
    ///
    /// The driver sends each train with one GSO `sendmsg` (segment size
    /// [`Train::gso_segment_size`]), in order, and must not split a train; a train it cannot
    /// send is best dropped (RC retransmits). [`Stack::poll_transmit`] still works, and the two
    /// may be mixed.
    pub fn poll_transmit_batch(&mut self, now: Instant, batch: &mut TransmitBatch) -> usize {
        let before = batch.datagrams();
        // Round robin without allocating: visit QPs from the cursor on, then wrap once.
        let start = self.rr;
        let mut cursor = start;
        let mut wrapped = false;
        while !batch.is_full() {
            let next = if wrapped {
                if cursor >= start {
                    break;
                }
                self.next_sending(cursor, Some(start))
            } else {
                self.next_sending(cursor, None)
            };
            let Some(qpn) = next else {
                if wrapped || start == 0 {
                    break;
                }
                wrapped = true;
                cursor = 0;
                continue;
            };
            cursor = qpn.wrapping_add(1);
            let sendable = matches!(
                self.verbs.qp(qpn).map(|q| q.state()),
                Ok(QpState::Rts | QpState::Sqd)
            );
            let Some(info) = self.info(qpn).filter(|_| sendable) else {
                if qpn == u32::MAX {
                    break;
                }
                continue;
            };
            let Some(t) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let mut sent = 0u64;
            let mrs = self.verbs.mr_table();
            while !batch.is_full() {
                let pushed = t.req.poll_emit(&info, mrs, now, |repr, src| {
                    batch.push_repr_from(
                        repr,
                        src,
                        info.local_ip,
                        info.src_port,
                        info.peer_ip,
                        info.tos,
                    )
                });
                if pushed.is_none() {
                    break;
                }
                sent += 1;
            }
            count_requester_stats(&mut self.device.counters, t.req.take_stats());
            if t.req.take_fault() {
                self.fail_local(qpn, &info, now);
            }
            self.device.counters.sent_pkts += sent;
            self.sync(qpn);
            if sent > 0 {
                self.rr = qpn.wrapping_add(1);
            }
            if qpn == u32::MAX {
                break;
            }
        }
        // Queued responses last: an ACK is shorter than a request, so it may end the
        // request's train as its short last segment (one GSO send carries a ping-pong's
        // request and the ACK of the previous answer). Requests and responses use separate
        // PSN spaces; their relative order does not matter.
        self.out.drain_into(self.verbs.mr_table(), batch);
        batch.datagrams() - before
    }
}

/// Re-exported for tests and the driver.
pub fn qp_src_port(qp_type: QpType, qpn: u32, flow_label: u32, dest_qpn: u32) -> u16 {
    match qp_type {
        QpType::Rc | QpType::Uc => emit::rc_src_port(flow_label, qpn, dest_qpn),
        _ => emit::datagram_src_port(qpn),
    }
}

/// Adds what a requester counted to the device's counters.
fn count_requester_stats(c: &mut Counters, s: rc_requester::RequesterStats) {
    c.retransmitted_pkts += s.retransmitted;
    c.paced_waits += s.paced;
    c.skipped_resends += s.skipped;
}
