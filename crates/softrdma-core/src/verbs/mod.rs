//! Verbs objects: protection domains, memory regions, completion queues, shared receive
//! queues and queue pairs, with the checks `ibv_*` calls get from rxe and ib_core.
//!
//! All objects live in one [`Verbs`] table per device and are named by plain handles
//! ([`PdId`], [`CqId`], [`SrqId`], QP numbers, MR keys), never by references, so the table
//! can be mutated by the transport while the application holds handles. See [`mr`] for the
//! memory model (how MR bytes are owned and accessed).

mod cq;
mod error;
pub mod mr;
mod qp;
pub mod qp_state;
mod srq;
mod wr;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub use cq::{rxe_queue_depth, Cq, WcOpcode, WcStatus, WorkCompletion};
pub use error::VerbsError;
pub use mr::{AccessFlags, Mr, MrError, MrKeys, MrState, MrTable, MrType};
pub use qp::{Qp, QpAttr, QpCap, QpInitAttr, QpType, GSI_QKEY, GSI_QPN};
pub use qp_state::{required_mask, steps_to_rts, ModifyQpError, QpAttrMask, QpState};
pub use srq::{Srq, SrqAttr};
pub use wr::{AddressVector, RecvWr, SendOp, SendWr, Sge, UdDest};

use crate::device::{Device, DeviceAttr, PORT_NUM};
use crate::rand::Rng;
pub use softrdma_mem::Memory;

/// A protection domain handle.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct PdId(pub u32);

/// A completion queue handle.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct CqId(pub u32);

/// A shared receive queue handle.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct SrqId(pub u32);

/// Asynchronous events (`ibv_get_async_event`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AsyncEvent {
    /// `IBV_EVENT_QP_FATAL`: the transport moved the QP to ERR.
    QpFatal(u32),
    /// `IBV_EVENT_SQ_DRAINED`: RTS→SQD finished draining (with `en_sqd_async_notify`).
    SqDrained(u32),
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP attached to an SRQ entered ERR.
    LastWqeReached(u32),
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: the SRQ fell below its armed limit.
    SrqLimitReached(SrqId),
    /// `IBV_EVENT_CQ_ERR`: a completion was lost because the CQ was full.
    CqErr(CqId),
}

/// Why scattering received data into receive SGEs failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ScatterError {
    /// The data is longer than the SGEs (`LOC_LEN_ERR`).
    TooLong {
        /// Bytes to place.
        len: u64,
        /// Room in the SGEs.
        room: u64,
    },
    /// An SGE failed the MR checks (`LOC_PROT_ERR`).
    Mr(MrError),
}

/// `RXE_MIN_QP_INDEX`: the first QP pool index (the GSI QP takes one but is numbered 1).
const MIN_QP_INDEX: u32 = 16;
/// `RXE_MAX_QP_INDEX`: the last QP pool index of a device with rxe's QP limit; a device
/// configured for more QPs gets twice its limit ([`Verbs::max_qp_index`]).
const MAX_QP_INDEX: u32 = 0x0002_0000;
/// `RXE_PORT_MAX_MSG_SZ`: the longest message.
pub const MAX_MSG_SZ: u64 = 0x80_0000;

#[derive(Clone, Debug, Default)]
struct Pd {
    users: u32,
}

/// The verbs objects of one device.
#[derive(Clone, Debug)]
pub struct Verbs {
    attr: DeviceAttr,
    pds: BTreeMap<u32, Pd>,
    next_pd: u32,
    mrs: MrTable,
    cqs: BTreeMap<u32, Cq>,
    next_cq: u32,
    srqs: BTreeMap<u32, Srq>,
    next_srq: u32,
    qps: BTreeMap<u32, Qp>,
    qp_indices: BTreeSet<u32>,
    next_qp_index: u32,
    gsi_index: Option<u32>,
    events: VecDeque<AsyncEvent>,
}

fn limit(what: &'static str, requested: u64, max: u64) -> VerbsError {
    VerbsError::Limit {
        what,
        requested,
        max,
    }
}

/// `requested` is within the device's `max` for `what`.
fn at_most(
    what: &'static str,
    requested: impl Into<u64>,
    max: impl Into<u64>,
) -> Result<(), VerbsError> {
    let (requested, max) = (requested.into(), max.into());
    if requested > max {
        return Err(limit(what, requested, max));
    }
    Ok(())
}

/// One more object fits beside the `held` ones under the device's `max` for `what`.
fn room_for_one(what: &'static str, held: usize, max: u32) -> Result<(), VerbsError> {
    let held = held as u64;
    if held >= u64::from(max) {
        return Err(limit(what, held + 1, max.into()));
    }
    Ok(())
}

impl Verbs {
    /// An empty table for a device with attributes `attr`; MR key bytes come from a
    /// generator seeded with `seed`.
    pub fn new(attr: &DeviceAttr, seed: u64) -> Verbs {
        Verbs {
            attr: attr.clone(),
            pds: BTreeMap::new(),
            next_pd: 1,
            mrs: MrTable::new(attr.max_mr, Rng::new(seed)),
            cqs: BTreeMap::new(),
            next_cq: 1,
            srqs: BTreeMap::new(),
            next_srq: 1,
            qps: BTreeMap::new(),
            qp_indices: BTreeSet::new(),
            next_qp_index: MIN_QP_INDEX,
            gsi_index: None,
            events: VecDeque::new(),
        }
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    // ----- protection domains -----

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> Result<PdId, VerbsError> {
        room_for_one("max_pd", self.pds.len(), self.attr.max_pd)?;
        let id = self.next_pd;
        self.next_pd = self.next_pd.wrapping_add(1).max(1);
        self.pds.insert(id, Pd::default());
        Ok(PdId(id))
    }

    /// `ibv_dealloc_pd`: refused while MRs, QPs or SRQs use it.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), VerbsError> {
        let p = self.pds.get(&pd.0).ok_or(VerbsError::InvalidPd(pd))?;
        let users = p.users + self.mrs.count_in_pd(pd) as u32;
        if users > 0 {
            return Err(VerbsError::Busy { what: "PD", users });
        }
        self.pds.remove(&pd.0);
        Ok(())
    }

    fn check_pd(&self, pd: PdId) -> Result<(), VerbsError> {
        if self.pds.contains_key(&pd.0) {
            Ok(())
        } else {
            Err(VerbsError::InvalidPd(pd))
        }
    }

    // ----- memory regions -----

    /// `ibv_reg_mr` of `len` zeroed bytes at `iova`.
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, VerbsError> {
        self.reg_mr_with(pd, vec![0; len], iova, access)
    }

    /// `ibv_reg_mr` of the caller's bytes: the `Vec` moves into the MR table until
    /// [`Verbs::dereg_mr`] gives it back.
    pub fn reg_mr_with(
        &mut self,
        pd: PdId,
        bytes: impl Into<Memory>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, VerbsError> {
        self.check_pd(pd)?;
        Ok(self.mrs.register(pd, bytes, iova, access)?)
    }

    /// [`Verbs::reg_mr_with`] that hands the bytes back when it refuses them (for bytes
    /// that must not be lost, such as a LUN's medium).
    pub fn reg_mr_or_return(
        &mut self,
        pd: PdId,
        bytes: impl Into<Memory>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, (VerbsError, Memory)> {
        let bytes = bytes.into();
        if let Err(e) = self.check_pd(pd) {
            return Err((e, bytes));
        }
        self.mrs
            .register_or_return(pd, bytes, iova, access)
            .map_err(|(e, b)| (e.into(), b))
    }

    /// A fast-registration MR of the caller's bytes, valid at once (`ib_alloc_mr` +
    /// a completed `IB_WR_REG_MR`): the kind of MR a peer's SEND with Invalidate (or
    /// [`Verbs::invalidate_mr`]) can revoke. See [`mr`]'s docs.
    pub fn reg_fast_mr(
        &mut self,
        pd: PdId,
        bytes: impl Into<Memory>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, VerbsError> {
        self.check_pd(pd)?;
        Ok(self.mrs.register_fast(pd, bytes, iova, access)?)
    }

    /// A local invalidate (`IB_WR_LOCAL_INV`, executed at once rather than in send-queue
    /// order): the fast-registration MR with this key stops answering to it.
    pub fn invalidate_mr(&mut self, key: u32) -> Result<(), VerbsError> {
        Ok(self.mrs.invalidate(key)?)
    }

    /// Re-registers an invalidated fast-registration MR under a new key byte
    /// (`IB_WR_REG_MR`, executed at once); returns its new keys.
    pub fn rereg_fast_mr(
        &mut self,
        lkey: u32,
        key_byte: u8,
        access: AccessFlags,
    ) -> Result<MrKeys, VerbsError> {
        Ok(self.mrs.reregister_fast(lkey, key_byte, access)?)
    }

    /// `ibv_dereg_mr`: returns the MR's bytes.
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<Memory, VerbsError> {
        Ok(self.mrs.deregister(lkey)?)
    }

    /// The MR with this lkey (read its bytes with [`Mr::read`] / [`Mr::slice`]); owner
    /// access, so an invalidated MR is found too.
    pub fn mr(&self, lkey: u32) -> Result<&Mr, VerbsError> {
        Ok(self.mrs.owned(lkey)?)
    }

    /// The MR with this lkey, mutably (fill a buffer before posting it).
    pub fn mr_mut(&mut self, lkey: u32) -> Result<&mut Mr, VerbsError> {
        Ok(self.mrs.owned_mut(lkey)?)
    }

    /// Copies bytes out of an MR (owner access; no access flag or valid state needed).
    pub fn local_read(&self, lkey: u32, addr: u64, out: &mut [u8]) -> Result<(), VerbsError> {
        Ok(self.mrs.owned(lkey)?.read(addr, out)?)
    }

    /// Copies bytes into an MR (owner access; no access flag needed: the owner's CPU
    /// writes its own memory, LOCAL_WRITE is about the device writing).
    pub fn local_write(&mut self, lkey: u32, addr: u64, data: &[u8]) -> Result<(), VerbsError> {
        Ok(self.mrs.owned_mut(lkey)?.write(addr, data)?)
    }

    /// The MR table (the transport resolves rkeys and SGEs through it).
    pub fn mr_table(&self) -> &MrTable {
        &self.mrs
    }

    /// The MR table, mutably.
    pub fn mr_table_mut(&mut self) -> &mut MrTable {
        &mut self.mrs
    }

    /// Gathers the bytes named by send SGEs of a QP in `pd` (local read: no flag needed).
    pub fn gather(&self, pd: PdId, sges: &[Sge]) -> Result<Vec<u8>, MrError> {
        let mut out = Vec::new();
        for s in sges {
            let mr = self.mrs.by_lkey(s.lkey)?;
            let r = mr.check_local(pd, s.addr, s.length as usize, AccessFlags::NONE)?;
            out.extend_from_slice(mr.as_slice().get(r).unwrap_or(&[]));
        }
        Ok(out)
    }

    /// Scatters `data` into receive SGEs of a QP in `pd` (needs LOCAL_WRITE). Checks every
    /// SGE before writing any byte, so a failure leaves memory untouched.
    pub fn scatter(&mut self, pd: PdId, sges: &[Sge], data: &[u8]) -> Result<(), ScatterError> {
        let room = sges
            .iter()
            .fold(0u64, |a, s| a.saturating_add(u64::from(s.length)));
        if data.len() as u64 > room {
            return Err(ScatterError::TooLong {
                len: data.len() as u64,
                room,
            });
        }
        let mut plan = Vec::with_capacity(sges.len());
        let mut left = data.len();
        for s in sges {
            if left == 0 {
                break;
            }
            let n = left.min(s.length as usize);
            let mr = self.mrs.by_lkey(s.lkey).map_err(ScatterError::Mr)?;
            mr.check_local(pd, s.addr, n, AccessFlags::LOCAL_WRITE)
                .map_err(ScatterError::Mr)?;
            plan.push((s.lkey, s.addr, n));
            left -= n;
        }
        let mut off = 0;
        for (lkey, addr, n) in plan {
            let chunk = data.get(off..off + n).unwrap_or(&[]);
            self.mrs
                .by_lkey_mut(lkey)
                .and_then(|mr| mr.write(addr, chunk))
                .map_err(ScatterError::Mr)?;
            off += n;
        }
        Ok(())
    }

    // ----- completion queues -----

    /// `ibv_create_cq`: `cqe` in 1..=max_cqe, rounded up as rxe does (see [`Cq::cqe`]).
    pub fn create_cq(&mut self, cqe: u32) -> Result<CqId, VerbsError> {
        if cqe == 0 || cqe > self.attr.max_cqe {
            return Err(limit("cqe", cqe.into(), self.attr.max_cqe.into()));
        }
        room_for_one("max_cq", self.cqs.len(), self.attr.max_cq)?;
        let id = self.next_cq;
        self.next_cq = self.next_cq.wrapping_add(1).max(1);
        self.cqs
            .insert(id, Cq::new(rxe_queue_depth(cqe).min(self.attr.max_cqe)));
        Ok(CqId(id))
    }

    /// `ibv_resize_cq`: the CQ's depth becomes `rxe_queue_depth(cqe)` (returned), checked
    /// as rxe checks it (`rxe_cq_chk_attr`): 1..=max_cqe, and not below the completions the
    /// CQ holds now (those stay, in order).
    pub fn resize_cq(&mut self, cq: CqId, cqe: u32) -> Result<u32, VerbsError> {
        let max = self.attr.max_cqe;
        let c = self.cqs.get_mut(&cq.0).ok_or(VerbsError::InvalidCq(cq))?;
        if cqe == 0 || cqe > max {
            return Err(limit("cqe", cqe.into(), max.into()));
        }
        if (cqe as usize) < c.len() {
            return Err(VerbsError::Busy {
                what: "CQ (holding more completions than the new depth)",
                users: u32::try_from(c.len()).unwrap_or(u32::MAX),
            });
        }
        let depth = rxe_queue_depth(cqe).min(max);
        c.set_depth(depth);
        Ok(depth)
    }

    /// `ibv_destroy_cq`: refused while QPs use it.
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<(), VerbsError> {
        let c = self.cqs.get(&cq.0).ok_or(VerbsError::InvalidCq(cq))?;
        if c.users > 0 {
            return Err(VerbsError::Busy {
                what: "CQ",
                users: c.users,
            });
        }
        self.cqs.remove(&cq.0);
        Ok(())
    }

    /// The CQ.
    pub fn cq(&self, cq: CqId) -> Result<&Cq, VerbsError> {
        self.cqs.get(&cq.0).ok_or(VerbsError::InvalidCq(cq))
    }

    /// `ibv_poll_cq` for one completion.
    pub fn poll_cq(&mut self, cq: CqId) -> Result<Option<WorkCompletion>, VerbsError> {
        Ok(self
            .cqs
            .get_mut(&cq.0)
            .ok_or(VerbsError::InvalidCq(cq))?
            .poll())
    }

    /// `ibv_poll_cq` for up to `max` completions, appended to `out`.
    pub fn poll_cq_into(
        &mut self,
        cq: CqId,
        out: &mut Vec<WorkCompletion>,
        max: usize,
    ) -> Result<usize, VerbsError> {
        Ok(self
            .cqs
            .get_mut(&cq.0)
            .ok_or(VerbsError::InvalidCq(cq))?
            .poll_into(out, max))
    }

    /// Posts a completion; a full CQ loses it and raises `CqErr` (as rxe's `rxe_cq_post`).
    pub(crate) fn complete(&mut self, cq: CqId, wc: WorkCompletion) -> bool {
        complete_into(&mut self.cqs, &mut self.events, cq, wc)
    }

    // ----- shared receive queues -----

    /// `ibv_create_srq`.
    pub fn create_srq(&mut self, pd: PdId, attr: SrqAttr) -> Result<(SrqId, SrqAttr), VerbsError> {
        self.check_pd(pd)?;
        if attr.max_wr == 0 || attr.max_wr > self.attr.max_srq_wr {
            return Err(limit(
                "max_wr",
                attr.max_wr.into(),
                self.attr.max_srq_wr.into(),
            ));
        }
        if attr.max_sge == 0 || attr.max_sge > self.attr.max_srq_sge {
            return Err(limit(
                "max_sge",
                attr.max_sge.into(),
                self.attr.max_srq_sge.into(),
            ));
        }
        room_for_one("max_srq", self.srqs.len(), self.attr.max_srq)?;
        let max_wr = rxe_queue_depth(attr.max_wr);
        at_most("srq_limit", attr.srq_limit, max_wr)?;
        let actual = SrqAttr {
            max_wr,
            max_sge: attr.max_sge,
            srq_limit: attr.srq_limit,
        };
        let id = self.next_srq;
        self.next_srq = self.next_srq.wrapping_add(1).max(1);
        self.srqs.insert(
            id,
            Srq {
                pd,
                attr: actual,
                queue: VecDeque::new(),
                users: 0,
            },
        );
        if let Some(p) = self.pds.get_mut(&pd.0) {
            p.users += 1;
        }
        Ok((SrqId(id), actual))
    }

    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`: arms the limit event.
    pub fn arm_srq_limit(&mut self, srq: SrqId, srq_limit: u32) -> Result<(), VerbsError> {
        let s = self
            .srqs
            .get_mut(&srq.0)
            .ok_or(VerbsError::InvalidSrq(srq))?;
        at_most("srq_limit", srq_limit, s.attr.max_wr)?;
        s.attr.srq_limit = srq_limit;
        Ok(())
    }

    /// `ibv_destroy_srq`: refused while QPs use it.
    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<(), VerbsError> {
        let s = self.srqs.get(&srq.0).ok_or(VerbsError::InvalidSrq(srq))?;
        if s.users > 0 {
            return Err(VerbsError::Busy {
                what: "SRQ",
                users: s.users,
            });
        }
        let pd = s.pd;
        self.srqs.remove(&srq.0);
        if let Some(p) = self.pds.get_mut(&pd.0) {
            p.users = p.users.saturating_sub(1);
        }
        Ok(())
    }

    /// The SRQ.
    pub fn srq(&self, srq: SrqId) -> Result<&Srq, VerbsError> {
        self.srqs.get(&srq.0).ok_or(VerbsError::InvalidSrq(srq))
    }

    /// `ibv_post_srq_recv`.
    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> Result<(), VerbsError> {
        let s = self
            .srqs
            .get_mut(&srq.0)
            .ok_or(VerbsError::InvalidSrq(srq))?;
        at_most("num_sge", wr.sg_list.len() as u64, s.attr.max_sge)?;
        if s.queue.len() as u64 >= u64::from(s.attr.max_wr) {
            return Err(VerbsError::QueueFull {
                what: "SRQ",
                depth: s.attr.max_wr,
            });
        }
        s.queue.push_back(wr);
        Ok(())
    }

    /// Takes the next receive WR of a QP (from its SRQ if it has one), raising the SRQ
    /// limit event when due. The transport calls this when a request needs a receive WR.
    pub(crate) fn take_recv_wr(&mut self, qpn: u32) -> Option<RecvWr> {
        let qp = self.qps.get_mut(&qpn)?;
        match qp.srq {
            None => qp.rq.pop_front(),
            Some(id) => {
                let (wr, fire) = self.srqs.get_mut(&id.0)?.take()?;
                if fire {
                    self.events.push_back(AsyncEvent::SrqLimitReached(id));
                }
                Some(wr)
            }
        }
    }

    // ----- queue pairs -----

    /// `ibv_create_qp` (GSI: the port's QP1). Returns the QP number and the capabilities
    /// actually granted (rounded as rxe rounds them).
    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<(u32, QpCap), VerbsError> {
        self.check_pd(init.pd)?;
        for cq in [init.send_cq, init.recv_cq] {
            if !self.cqs.contains_key(&cq.0) {
                return Err(VerbsError::InvalidCq(cq));
            }
        }
        if let Some(srq) = init.srq {
            if !self.srqs.contains_key(&srq.0) {
                return Err(VerbsError::InvalidSrq(srq));
            }
        }
        if init.qp_type == QpType::Gsi && self.gsi_index.is_some() {
            return Err(VerbsError::GsiExists);
        }
        // rxe_qp_chk_cap.
        let c = init.cap;
        let a = &self.attr;
        at_most("max_send_wr", c.max_send_wr, a.max_qp_wr)?;
        at_most("max_send_sge", c.max_send_sge, a.max_sge)?;
        if init.srq.is_none() {
            at_most("max_recv_wr", c.max_recv_wr, a.max_qp_wr)?;
            at_most("max_recv_sge", c.max_recv_sge, a.max_sge)?;
        }
        at_most("max_inline_data", c.max_inline_data, a.max_inline_data)?;
        room_for_one("max_qp", self.qps.len(), a.max_qp)?;
        // rxe_qp_init_req: the send WQE holds max(sge * 16, inline) bytes, and both caps
        // are reported from it; queue depths are rounded (rxe_queue_init).
        let wqe = (c.max_send_sge * 16).max(c.max_inline_data);
        let cap = QpCap {
            max_send_wr: rxe_queue_depth(c.max_send_wr).min(a.max_qp_wr),
            max_send_sge: wqe / 16,
            max_inline_data: wqe,
            max_recv_wr: if init.srq.is_some() {
                0
            } else {
                rxe_queue_depth(c.max_recv_wr).min(a.max_qp_wr)
            },
            max_recv_sge: if init.srq.is_some() {
                0
            } else {
                c.max_recv_sge
            },
        };
        let index = self.alloc_qp_index()?;
        let qpn = if init.qp_type == QpType::Gsi {
            self.gsi_index = Some(index);
            GSI_QPN
        } else {
            index
        };
        if let Some(p) = self.pds.get_mut(&init.pd.0) {
            p.users += 1;
        }
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(c) = self.cqs.get_mut(&cq.0) {
                c.users += 1;
            }
        }
        if let Some(srq) = init.srq {
            if let Some(s) = self.srqs.get_mut(&srq.0) {
                s.users += 1;
            }
        }
        let attr = QpAttr {
            cap,
            port_num: PORT_NUM,
            ..QpAttr::default()
        };
        self.qps.insert(
            qpn,
            Qp {
                qpn,
                qp_type: init.qp_type,
                pd: init.pd,
                send_cq: init.send_cq,
                recv_cq: init.recv_cq,
                srq: init.srq,
                sq_sig_all: init.sq_sig_all,
                attr,
                sq: VecDeque::new(),
                rq: VecDeque::new(),
            },
        );
        Ok((qpn, cap))
    }

    /// The last QP pool index: rxe's `RXE_MAX_QP_INDEX` (twice `RXE_MAX_QP`), or twice a
    /// larger configured `max_qp` (below the 24-bit QPN space).
    fn max_qp_index(&self) -> u32 {
        MAX_QP_INDEX
            .max(self.attr.max_qp.saturating_mul(2))
            .min(0x00FF_FFFE)
    }

    fn alloc_qp_index(&mut self) -> Result<u32, VerbsError> {
        let max_index = self.max_qp_index();
        let span = max_index - MIN_QP_INDEX + 1;
        let mut idx = self.next_qp_index;
        for _ in 0..span {
            if !self.qp_indices.contains(&idx) {
                self.qp_indices.insert(idx);
                self.next_qp_index = if idx >= max_index {
                    MIN_QP_INDEX
                } else {
                    idx + 1
                };
                return Ok(idx);
            }
            idx = if idx >= max_index {
                MIN_QP_INDEX
            } else {
                idx + 1
            };
        }
        Err(limit("max_qp", u64::from(span) + 1, span.into()))
    }

    /// `ibv_destroy_qp`: posted WRs are discarded without completions.
    pub(crate) fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        let qp = self.qps.remove(&qpn).ok_or(VerbsError::InvalidQp(qpn))?;
        let index = if qp.qp_type == QpType::Gsi {
            self.gsi_index.take().unwrap_or(0)
        } else {
            qpn
        };
        self.qp_indices.remove(&index);
        if let Some(p) = self.pds.get_mut(&qp.pd.0) {
            p.users = p.users.saturating_sub(1);
        }
        for cq in [qp.send_cq, qp.recv_cq] {
            if let Some(c) = self.cqs.get_mut(&cq.0) {
                c.users = c.users.saturating_sub(1);
            }
        }
        if let Some(srq) = qp.srq {
            if let Some(s) = self.srqs.get_mut(&srq.0) {
                s.users = s.users.saturating_sub(1);
            }
        }
        Ok(())
    }

    /// The QP (`ibv_query_qp` through [`Qp::attr`]).
    pub fn qp(&self, qpn: u32) -> Result<&Qp, VerbsError> {
        self.qps.get(&qpn).ok_or(VerbsError::InvalidQp(qpn))
    }

    /// All QP numbers, ascending.
    pub fn qp_numbers(&self) -> impl Iterator<Item = u32> + '_ {
        self.qps.keys().copied()
    }

    /// `ibv_modify_qp`: the transition and mask rules of [`qp_state`], then rxe's value
    /// checks (`rxe_qp_chk_attr`), then the attributes are applied. Moving to ERR flushes
    /// every posted WR with `WR_FLUSH_ERR`; moving to RESET discards them silently.
    pub(crate) fn modify_qp(
        &mut self,
        dev: &Device,
        qpn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), VerbsError> {
        let qp = self.qps.get(&qpn).ok_or(VerbsError::InvalidQp(qpn))?;
        let to = qp_state::check_transition(
            qp.qp_type,
            qp.attr.qp_state,
            attr.cur_qp_state,
            attr.qp_state,
            mask,
        )?;
        check_values(dev, &self.attr, attr, mask)?;
        let from = qp.attr.qp_state;
        let has_srq = qp.srq.is_some();
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::InvalidQp(qpn))?;
        apply(&mut qp.attr, attr, mask);
        qp.attr.qp_state = to;
        qp.attr.cur_qp_state = to;
        match to {
            QpState::Reset => {
                qp.sq.clear();
                qp.rq.clear();
                qp.attr.sq_draining = false;
            }
            QpState::Err if from != QpState::Err => {
                self.flush(qpn);
                if has_srq {
                    self.events.push_back(AsyncEvent::LastWqeReached(qpn));
                }
            }
            // Nothing is in flight at this layer: the SQ is drained at once.
            QpState::Sqd if from == QpState::Rts && qp.attr.en_sqd_async_notify => {
                self.events.push_back(AsyncEvent::SqDrained(qpn));
            }
            _ => {}
        }
        Ok(())
    }

    /// Moves a QP to ERR from inside the transport (fatal error): flushes and raises
    /// `QpFatal`.
    pub(crate) fn set_qp_error(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            if qp.attr.qp_state == QpState::Err {
                return;
            }
            qp.attr.qp_state = QpState::Err;
            qp.attr.cur_qp_state = QpState::Err;
            let has_srq = qp.srq.is_some();
            self.flush(qpn);
            self.events.push_back(AsyncEvent::QpFatal(qpn));
            if has_srq {
                self.events.push_back(AsyncEvent::LastWqeReached(qpn));
            }
        }
    }

    fn flush(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let sq: Vec<SendWr> = qp.sq.drain(..).collect();
        let rq: Vec<RecvWr> = qp.rq.drain(..).collect();
        let (scq, rcq) = (qp.send_cq, qp.recv_cq);
        for wr in sq {
            let wc = WorkCompletion::new(wr.wr_id, qpn, wr.op.wc_opcode(), WcStatus::WrFlushErr);
            complete_into(&mut self.cqs, &mut self.events, scq, wc);
        }
        for wr in rq {
            let wc = WorkCompletion::new(wr.wr_id, qpn, WcOpcode::Recv, WcStatus::WrFlushErr);
            complete_into(&mut self.cqs, &mut self.events, rcq, wc);
        }
    }

    /// `ibv_post_send`: checks the WR against the QP's type, state and caps and queues it
    /// for the transport. On a QP in ERR (or SQE) the WR completes at once with
    /// `WR_FLUSH_ERR`, as rxe does.
    pub(crate) fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        self.check_send(qpn, &wr, 0)?;
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::InvalidQp(qpn))?;
        let state = qp.attr.qp_state;
        if matches!(state, QpState::Err | QpState::Sqe) {
            let scq = qp.send_cq;
            let wc = WorkCompletion::new(wr.wr_id, qpn, wr.op.wc_opcode(), WcStatus::WrFlushErr);
            complete_into(&mut self.cqs, &mut self.events, scq, wc);
            return Ok(());
        }
        qp.sq.push_back(wr);
        Ok(())
    }

    /// Whether [`Verbs::post_send`] would accept `wr` on `qpn` with `ahead` more WRs
    /// queued before it than the send queue holds now (a batch's earlier WRs: see
    /// [`crate::Stack::post_send_batch`]). Changes nothing.
    pub(crate) fn check_send(&self, qpn: u32, wr: &SendWr, ahead: usize) -> Result<(), VerbsError> {
        let max_inline = self.attr.max_inline_data;
        let qp = self.qps.get(&qpn).ok_or(VerbsError::InvalidQp(qpn))?;
        let state = qp.attr.qp_state;
        if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(VerbsError::QpState {
                qpn,
                state,
                op: "post a send WR",
            });
        }
        let ty = qp.qp_type;
        let op_ok = match ty {
            QpType::Ud | QpType::Gsi => wr.op.is_send(),
            QpType::Uc => matches!(
                wr.op,
                SendOp::Send
                    | SendOp::SendWithImm { .. }
                    | SendOp::RdmaWrite { .. }
                    | SendOp::RdmaWriteWithImm { .. }
            ),
            QpType::Rc => true,
        };
        if !op_ok {
            return Err(VerbsError::WrongQpType {
                qp_type: ty,
                op: wr.op.name(),
            });
        }
        if ty.is_datagram() != wr.ud.is_some() {
            return Err(VerbsError::WrongQpType {
                qp_type: ty,
                op: if wr.ud.is_some() {
                    "a send WR with a UD destination"
                } else {
                    "a send WR without a UD destination"
                },
            });
        }
        let cap = qp.attr.cap;
        at_most("num_sge", wr.sg_list.len() as u64, cap.max_send_sge)?;
        if let Some(d) = &wr.inline_data {
            let max = cap.max_inline_data.min(max_inline);
            at_most("inline data", d.len() as u64, max)?;
        }
        let len = wr.length();
        if len > MAX_MSG_SZ {
            return Err(limit("message length", len, MAX_MSG_SZ));
        }
        match wr.op {
            SendOp::AtomicCmpSwp { remote_addr, .. }
            | SendOp::AtomicFetchAdd { remote_addr, .. } => {
                if len != 8 || wr.inline_data.is_some() {
                    return Err(VerbsError::InvalidWr {
                        reason: "an atomic needs exactly one 8-byte local buffer",
                    });
                }
                if remote_addr & 7 != 0 {
                    return Err(VerbsError::InvalidWr {
                        reason: "atomic remote address not 8-byte aligned",
                    });
                }
            }
            SendOp::RdmaRead { .. } if wr.inline_data.is_some() => {
                return Err(VerbsError::InvalidWr {
                    reason: "an RDMA READ cannot be inline",
                });
            }
            _ => {}
        }
        if (qp.sq.len() as u64).saturating_add(ahead as u64) >= u64::from(cap.max_send_wr) {
            return Err(VerbsError::QueueFull {
                what: "send queue",
                depth: cap.max_send_wr,
            });
        }
        Ok(())
    }

    /// `ibv_post_recv`: refused in RESET and on a QP with an SRQ; flushed at once in ERR.
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::InvalidQp(qpn))?;
        if qp.srq.is_some() {
            return Err(VerbsError::WrongQpType {
                qp_type: qp.qp_type,
                op: "post_recv on a QP attached to an SRQ",
            });
        }
        let state = qp.attr.qp_state;
        if state == QpState::Reset {
            return Err(VerbsError::QpState {
                qpn,
                state,
                op: "post a receive WR",
            });
        }
        let cap = qp.attr.cap;
        at_most("num_sge", wr.sg_list.len() as u64, cap.max_recv_sge)?;
        if qp.rq.len() as u64 >= u64::from(cap.max_recv_wr) {
            return Err(VerbsError::QueueFull {
                what: "receive queue",
                depth: cap.max_recv_wr,
            });
        }
        if state == QpState::Err {
            let rcq = qp.recv_cq;
            let wc = WorkCompletion::new(wr.wr_id, qpn, WcOpcode::Recv, WcStatus::WrFlushErr);
            complete_into(&mut self.cqs, &mut self.events, rcq, wc);
            return Ok(());
        }
        qp.rq.push_back(wr);
        Ok(())
    }

    /// Takes the oldest send WR of a QP (the transport's requester).
    pub(crate) fn take_send_wr(&mut self, qpn: u32) -> Option<SendWr> {
        let qp = self.qps.get_mut(&qpn)?;
        if qp.attr.qp_state != QpState::Rts {
            return None;
        }
        qp.sq.pop_front()
    }
}

fn complete_into(
    cqs: &mut BTreeMap<u32, Cq>,
    events: &mut VecDeque<AsyncEvent>,
    cq: CqId,
    wc: WorkCompletion,
) -> bool {
    match cqs.get_mut(&cq.0) {
        Some(c) => {
            let was = c.overflowed();
            let ok = c.push(wc);
            if !ok && !was {
                events.push_back(AsyncEvent::CqErr(cq));
            }
            ok
        }
        None => false,
    }
}

fn invalid(attr: &'static str, value: u64, reason: &'static str) -> VerbsError {
    VerbsError::ModifyQp(ModifyQpError::InvalidValue {
        attr,
        value,
        reason,
    })
}

/// rxe's `rxe_qp_chk_attr` value checks, plus range checks on the small fields.
fn check_values(
    dev: &Device,
    dattr: &DeviceAttr,
    attr: &QpAttr,
    mask: QpAttrMask,
) -> Result<(), VerbsError> {
    if mask.intersects(QpAttrMask::ALT_PATH) {
        return Err(ModifyQpError::Unsupported { attr: "alt_path" }.into());
    }
    if mask.intersects(QpAttrMask::PATH_MIG_STATE) {
        return Err(ModifyQpError::Unsupported {
            attr: "path_mig_state",
        }
        .into());
    }
    if mask.contains(QpAttrMask::PORT) && attr.port_num != PORT_NUM {
        return Err(invalid(
            "port_num",
            attr.port_num.into(),
            "only port 1 exists",
        ));
    }
    let port = dev
        .port(PORT_NUM)
        .map_err(|_| invalid("port_num", PORT_NUM.into(), "device has no port 1"))?;
    if mask.contains(QpAttrMask::PKEY_INDEX) && attr.pkey_index >= port.pkeys.len() {
        return Err(invalid(
            "pkey_index",
            attr.pkey_index.into(),
            "beyond the P_Key table",
        ));
    }
    if mask.contains(QpAttrMask::PATH_MTU) && attr.path_mtu > port.attr.max_mtu {
        return Err(invalid(
            "path_mtu",
            attr.path_mtu.bytes().into(),
            "above the port's max MTU",
        ));
    }
    // Upper bounds of the small fields, checked in this order (the first failure is reported):
    // (mask bit, attribute, value, largest allowed, what the range is).
    let rd_atom = u64::from(dattr.max_qp_rd_atom);
    const U24: u64 = 0x00ff_ffff;
    #[rustfmt::skip]
    let ranges: [(QpAttrMask, &'static str, u64, u64, &'static str); 9] = [
        (QpAttrMask::MAX_QP_RD_ATOMIC, "max_rd_atomic", attr.max_rd_atomic.into(), rd_atom, "above max_qp_rd_atom"),
        (QpAttrMask::MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic", attr.max_dest_rd_atomic.into(), rd_atom, "above max_qp_rd_atom"),
        (QpAttrMask::TIMEOUT, "timeout", attr.timeout.into(), 31, "a 5-bit exponent (0..=31)"),
        (QpAttrMask::MIN_RNR_TIMER, "min_rnr_timer", attr.min_rnr_timer.into(), 31, "a 5-bit code (0..=31)"),
        (QpAttrMask::RETRY_CNT, "retry_cnt", attr.retry_cnt.into(), 7, "3 bits (0..=7)"),
        (QpAttrMask::RNR_RETRY, "rnr_retry", attr.rnr_retry.into(), 7, "3 bits (0..=7)"),
        (QpAttrMask::RQ_PSN, "rq_psn", attr.rq_psn.into(), U24, "a 24-bit value"),
        (QpAttrMask::SQ_PSN, "sq_psn", attr.sq_psn.into(), U24, "a 24-bit value"),
        (QpAttrMask::DEST_QPN, "dest_qp_num", attr.dest_qp_num.into(), U24, "a 24-bit value"),
    ];
    for (bit, name, value, max, reason) in ranges {
        if mask.contains(bit) && value > max {
            return Err(invalid(name, value, reason));
        }
    }
    if mask.contains(QpAttrMask::ACCESS_FLAGS) && !AccessFlags::KNOWN.contains(attr.qp_access_flags)
    {
        return Err(invalid(
            "qp_access_flags",
            attr.qp_access_flags.0.into(),
            "unknown access flag",
        ));
    }
    if mask.contains(QpAttrMask::AV) {
        let av = &attr.ah_attr;
        if av.port_num != PORT_NUM {
            return Err(invalid(
                "ah_attr.port_num",
                av.port_num.into(),
                "only port 1 exists",
            ));
        }
        if port.gids.get(av.sgid_index).is_none() {
            return Err(invalid(
                "ah_attr.grh.sgid_index",
                av.sgid_index.into(),
                "no GID at this index",
            ));
        }
        if av.flow_label > 0x000f_ffff {
            return Err(invalid(
                "ah_attr.grh.flow_label",
                av.flow_label.into(),
                "20 bits",
            ));
        }
    }
    Ok(())
}

fn apply(cur: &mut QpAttr, attr: &QpAttr, mask: QpAttrMask) {
    let has = |b| mask.contains(b);
    if has(QpAttrMask::EN_SQD_ASYNC_NOTIFY) {
        cur.en_sqd_async_notify = attr.en_sqd_async_notify;
    }
    if has(QpAttrMask::ACCESS_FLAGS) {
        cur.qp_access_flags = attr.qp_access_flags;
    }
    if has(QpAttrMask::PKEY_INDEX) {
        cur.pkey_index = attr.pkey_index;
    }
    if has(QpAttrMask::PORT) {
        cur.port_num = attr.port_num;
    }
    if has(QpAttrMask::QKEY) {
        cur.qkey = attr.qkey;
    }
    if has(QpAttrMask::AV) {
        cur.ah_attr = attr.ah_attr;
    }
    if has(QpAttrMask::PATH_MTU) {
        cur.path_mtu = attr.path_mtu;
    }
    if has(QpAttrMask::TIMEOUT) {
        cur.timeout = attr.timeout;
    }
    if has(QpAttrMask::RETRY_CNT) {
        cur.retry_cnt = attr.retry_cnt;
    }
    if has(QpAttrMask::RNR_RETRY) {
        cur.rnr_retry = attr.rnr_retry;
    }
    if has(QpAttrMask::RQ_PSN) {
        cur.rq_psn = attr.rq_psn;
    }
    if has(QpAttrMask::MAX_QP_RD_ATOMIC) {
        cur.max_rd_atomic = attr.max_rd_atomic;
    }
    if has(QpAttrMask::MIN_RNR_TIMER) {
        cur.min_rnr_timer = attr.min_rnr_timer;
    }
    if has(QpAttrMask::SQ_PSN) {
        cur.sq_psn = attr.sq_psn;
    }
    if has(QpAttrMask::MAX_DEST_RD_ATOMIC) {
        cur.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    }
    if has(QpAttrMask::DEST_QPN) {
        cur.dest_qp_num = attr.dest_qp_num;
    }
}

#[cfg(test)]
mod tests;
