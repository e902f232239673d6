//! The RDMA CM's event queue: its own events ([`RdmaCmEvent`], ucma's list) and the IB CM
//! events that are not its own (ids and listeners made on the IB CM directly, and every
//! id's retransmission notices), each stamped with its place in one order so that a
//! runtime delivering both ([`super::RdmaCm::poll_next`]) keeps the order they happened in.
//! The bound on it is [`crate::cm::CmConfig::event_queue_limit`].

use std::collections::{HashMap, VecDeque};

use super::RdmaCmEvent;
use crate::cm::CmEvent;

/// One event of either queue, in the order they were queued ([`super::RdmaCm::poll_next`]).
#[derive(Debug)]
#[must_use = "a CONNECT_REQUEST or REQ_RECEIVED carries a new id"]
pub enum AnyEvent {
    /// An RDMA CM event ([`super::RdmaCm::poll_event`]).
    Rdma(RdmaCmEvent),
    /// An IB CM event that is not the RDMA CM's ([`super::RdmaCm::poll_ib_event`]).
    Ib(CmEvent),
}

#[derive(Debug, Default)]
pub(super) struct Events {
    rdma: VecDeque<(u64, RdmaCmEvent)>,
    ib: VecDeque<(u64, CmEvent)>,
    next: u64,
    /// How many queued RDMA CM events name each id, as theirs or as their listener
    /// ([`Events::names`]): a destroyed id with none (the common case) costs no scan of the
    /// queue, which a server destroying each id on its DISCONNECTED, with a thousand more
    /// queued behind it, made quadratic (3 % of `perf cm`'s samples).
    named: HashMap<u32, u32>,
}

/// The ids an event names: its own, and a CONNECT_REQUEST's listener.
fn names(e: &RdmaCmEvent) -> impl Iterator<Item = u32> {
    let own = e.id().0;
    std::iter::once(own).chain(e.listen_id().map(|l| l.0).filter(|&l| l != own))
}

impl Events {
    fn stamp(&mut self) -> u64 {
        let n = self.next;
        self.next += 1;
        n
    }

    /// Queues an RDMA CM event.
    pub(super) fn push_back(&mut self, e: RdmaCmEvent) {
        let n = self.stamp();
        for id in names(&e) {
            *self.named.entry(id).or_default() += 1;
        }
        self.rdma.push_back((n, e));
    }

    /// An event leaves the queue.
    fn unname(&mut self, e: &RdmaCmEvent) {
        for id in names(e) {
            if let std::collections::hash_map::Entry::Occupied(mut o) = self.named.entry(id) {
                *o.get_mut() -= 1;
                if *o.get() == 0 {
                    o.remove();
                }
            }
        }
    }

    /// Whether a queued RDMA CM event names `id`, as its own or as its listener.
    pub(super) fn names(&self, id: u32) -> bool {
        self.named.contains_key(&id)
    }

    /// Queues an IB CM event.
    pub(super) fn push_ib(&mut self, e: CmEvent) {
        let n = self.stamp();
        self.ib.push_back((n, e));
    }

    pub(super) fn pop_front(&mut self) -> Option<RdmaCmEvent> {
        let (_, e) = self.rdma.pop_front()?;
        self.unname(&e);
        Some(e)
    }

    /// Takes the first RDMA CM event for which `f` holds (a scan: the queue is bounded).
    pub(super) fn take_first(
        &mut self,
        mut f: impl FnMut(&RdmaCmEvent) -> bool,
    ) -> Option<RdmaCmEvent> {
        let i = self.rdma.iter().position(|(_, e)| f(e))?;
        let (_, e) = self.rdma.remove(i)?;
        self.unname(&e);
        Some(e)
    }

    pub(super) fn pop_ib(&mut self) -> Option<CmEvent> {
        self.ib.pop_front().map(|(_, e)| e)
    }

    /// Whether the next event in queueing order is an IB CM one (`None`: both are empty).
    pub(super) fn ib_first(&self) -> Option<bool> {
        match (self.rdma.front(), self.ib.front()) {
            (None, None) => None,
            (Some(_), None) => Some(false),
            (None, Some(_)) => Some(true),
            (Some((r, _)), Some((i, _))) => Some(i < r),
        }
    }

    /// Takes every RDMA CM event for which `f` holds, in order; the others stay queued.
    /// Called for every destroyed id, mostly with nothing to take: that case is one scan and
    /// no allocation (rebuilding the queue each time was 4 % of `perf cm`'s profile).
    pub(super) fn remove_where(
        &mut self,
        mut f: impl FnMut(&RdmaCmEvent) -> bool,
    ) -> Vec<RdmaCmEvent> {
        let Some(first) = self.rdma.iter().position(|(_, e)| f(e)) else {
            return Vec::new();
        };
        let mut gone = Vec::new();
        let mut kept = self.rdma.split_off(first);
        std::mem::swap(&mut kept, &mut self.rdma);
        // `kept` now holds the head (none taken); `self.rdma` the tail from the first match.
        for (n, e) in std::mem::take(&mut self.rdma) {
            if f(&e) {
                gone.push(e);
            } else {
                kept.push_back((n, e));
            }
        }
        self.rdma = kept;
        for e in &gone {
            self.unname(e);
        }
        gone
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &RdmaCmEvent> + '_ {
        self.rdma.iter().map(|(_, e)| e)
    }

    pub(super) fn ib_iter(&self) -> impl Iterator<Item = &CmEvent> + '_ {
        self.ib.iter().map(|(_, e)| e)
    }

    pub(super) fn rdma_len(&self) -> usize {
        self.rdma.len()
    }

    /// Both queues together (what the limit bounds).
    pub(super) fn len(&self) -> usize {
        self.rdma.len() + self.ib.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::{CmConfig, CmEndpoint};
    use crate::rdma_cm::RdmaId;

    #[test]
    fn both_kinds_come_out_in_the_order_they_were_queued() {
        let mut cm = CmEndpoint::new(CmConfig::default()).expect("cm");
        let (a, b) = (cm.create_id(), cm.create_id());
        let label = |id| if id == a.as_ref() { 1 } else { 2 };
        let mut q = Events::default();
        assert_eq!(q.ib_first(), None);
        q.push_ib(CmEvent::TimewaitExit { id: a.as_ref() });
        q.push_back(RdmaCmEvent::TimewaitExit { id: RdmaId(7) });
        q.push_ib(CmEvent::TimewaitExit { id: b.as_ref() });
        q.push_back(RdmaCmEvent::Disconnected {
            id: RdmaId(7),
            status: 0,
        });
        assert_eq!(q.len(), 4);
        let mut order = Vec::new();
        while let Some(ib) = q.ib_first() {
            if ib {
                let Some(CmEvent::TimewaitExit { id }) = q.pop_ib() else {
                    panic!("an IB CM event")
                };
                order.push(format!("ib{}", label(id)));
            } else {
                let e = q.pop_front().expect("an RDMA CM event");
                order.push(format!("{:?}", e.kind()));
            }
        }
        assert_eq!(order, ["ib1", "TimewaitExit", "ib2", "Disconnected"]);
        assert_eq!((q.len(), q.rdma_len()), (0, 0));
        drop((a, b));
    }

    #[test]
    fn remove_where_takes_the_matching_events_in_order_and_keeps_the_rest() {
        let ev = |id, status| RdmaCmEvent::Disconnected {
            id: RdmaId(id),
            status,
        };
        let mut q = Events::default();
        for (id, status) in [(2, 0), (1, 1), (2, 2), (1, 3), (3, 4)] {
            q.push_back(ev(id, status));
        }
        assert!(q.remove_where(|e| e.id() == RdmaId(9)).is_empty());
        assert_eq!(q.rdma_len(), 5);
        assert!(q.names(1) && q.names(2) && q.names(3) && !q.names(9));
        let gone = q.remove_where(|e| e.id() == RdmaId(1));
        assert_eq!(gone, [ev(1, 1), ev(1, 3)]);
        assert!(!q.names(1) && q.names(2));
        let left: Vec<i32> = q.iter().map(|e| e.status()).collect();
        assert_eq!(left, [0, 2, 4]);
        // Taken one by one, or the first that matches: an id is named while one is queued.
        assert_eq!(q.take_first(|e| e.status() == 2), Some(ev(2, 2)));
        assert!(q.names(2));
        assert_eq!(q.pop_front(), Some(ev(2, 0)));
        assert!(!q.names(2) && q.names(3));
        assert_eq!(q.pop_front(), Some(ev(3, 4)));
        assert!(!q.names(3) && q.named.is_empty());
    }
}
