//! Responder resources (`max_dest_rd_atomic`): what the responder remembers about the READs
//! and atomics it executed, so that a duplicate request is answered again without
//! re-executing it (IBTA 9.7.5.1.3 / C9-108..C9-112; rxe's `resp_res` ring).

use softrdma_wire::roce::Psn;

/// One remembered READ or atomic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// An RDMA READ: its PSN range and the memory it read.
    Read {
        /// First response PSN (the request's PSN).
        first_psn: Psn,
        /// Response packets.
        npkts: u32,
        /// Remote address of the whole READ.
        va: u64,
        /// Its rkey.
        rkey: u32,
        /// Its length.
        len: u32,
    },
    /// An atomic: its PSN and the value it returned.
    Atomic {
        /// The request's PSN.
        psn: Psn,
        /// The original remote value.
        orig: u64,
    },
}

impl Resource {
    /// Whether `psn` belongs to this resource.
    pub fn covers(&self, psn: Psn) -> bool {
        match *self {
            Resource::Read {
                first_psn, npkts, ..
            } => psn.in_window(first_psn, npkts),
            Resource::Atomic { psn: p, .. } => p == psn,
        }
    }
}

/// A ring of at most `max_dest_rd_atomic` resources; a new one replaces the oldest.
#[derive(Clone, Debug, Default)]
pub struct Resources {
    ring: std::collections::VecDeque<Resource>,
    cap: usize,
}

impl Resources {
    /// A ring of `cap` entries (at least one, so the latest READ/atomic can be replayed).
    pub fn new(cap: u8) -> Resources {
        Resources {
            ring: std::collections::VecDeque::new(),
            cap: usize::from(cap.max(1)),
        }
    }

    /// Remembers a resource, forgetting the oldest if full.
    pub fn push(&mut self, r: Resource) {
        if self.ring.len() >= self.cap {
            self.ring.pop_front();
        }
        self.ring.push_back(r);
    }

    /// The resource a duplicate request with `psn` refers to (newest first).
    pub fn find(&self, psn: Psn) -> Option<Resource> {
        self.ring.iter().rev().find(|r| r.covers(psn)).copied()
    }

    /// Forgets everything (QP reset / error).
    pub fn clear(&mut self) {
        self.ring.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_replaces_oldest_and_finds_by_psn() {
        let mut r = Resources::new(2);
        r.push(Resource::Atomic {
            psn: Psn::new(5),
            orig: 1,
        });
        r.push(Resource::Read {
            first_psn: Psn::new(0xffffff),
            npkts: 3,
            va: 0,
            rkey: 1,
            len: 3000,
        });
        assert!(r.find(Psn::new(1)).is_some());
        assert!(r.find(Psn::new(5)).is_some());
        r.push(Resource::Atomic {
            psn: Psn::new(9),
            orig: 2,
        });
        assert!(r.find(Psn::new(5)).is_none());
        assert!(r.find(Psn::new(2)).is_none());
    }
}
