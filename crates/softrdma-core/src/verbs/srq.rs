//! Shared receive queues.

use std::collections::VecDeque;

use super::wr::RecvWr;
use super::PdId;

/// `struct ibv_srq_attr`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SrqAttr {
    /// Max outstanding receive WRs (rounded up as rxe does when created).
    pub max_wr: u32,
    /// Max SGEs per WR.
    pub max_sge: u32,
    /// The limit: when the number of posted WRs falls below it, an `SRQ_LIMIT_REACHED`
    /// event fires once and the limit disarms (0 = disarmed).
    pub srq_limit: u32,
}

/// A shared receive queue.
#[derive(Clone, Debug)]
pub struct Srq {
    pub(crate) pd: PdId,
    pub(crate) attr: SrqAttr,
    pub(crate) queue: VecDeque<RecvWr>,
    pub(crate) users: u32,
}

impl Srq {
    /// Its attributes (`ibv_query_srq`).
    pub fn attr(&self) -> SrqAttr {
        self.attr
    }

    /// The PD.
    pub fn pd(&self) -> PdId {
        self.pd
    }

    /// Receive WRs waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when no receive WR is posted.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Takes the next receive WR; returns it and whether the limit event fires (the count
    /// dropped below an armed limit, which then disarms).
    pub(crate) fn take(&mut self) -> Option<(RecvWr, bool)> {
        let wr = self.queue.pop_front()?;
        let fire = self.attr.srq_limit != 0 && (self.queue.len() as u32) < self.attr.srq_limit;
        if fire {
            self.attr.srq_limit = 0;
        }
        Some((wr, fire))
    }
}
