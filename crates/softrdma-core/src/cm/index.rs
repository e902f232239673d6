//! What keeps every per-event operation of the CM at O(log n) with n ids: the event queue
//! with a count of the events naming each id (a destroy withdraws events without a scan
//! when there are none), and the bookkeeping `set_state` does for the state-keyed indexes
//! (the timewait timers, the half-open count, the SIDR table).

use std::collections::{BTreeMap, VecDeque};

use super::conn::State;
use super::{CmEndpoint, CmEvent, CmState};

/// The CM's event queue.
#[derive(Debug, Default)]
pub(super) struct EventQueue {
    q: VecDeque<CmEvent>,
    /// How many queued events name each id (as the event's id or as its listener).
    per_id: BTreeMap<u32, u32>,
}

fn names(e: &CmEvent) -> (u32, Option<u32>) {
    let id = e.id().0;
    (id, e.listen_id().map(|l| l.0).filter(|&l| l != id))
}

impl EventQueue {
    fn count(&mut self, e: &CmEvent, up: bool) {
        let (a, b) = names(e);
        for id in std::iter::once(a).chain(b) {
            if up {
                *self.per_id.entry(id).or_default() += 1;
            } else if let Some(n) = self.per_id.get_mut(&id) {
                *n -= 1;
                if *n == 0 {
                    self.per_id.remove(&id);
                }
            }
        }
    }

    pub(super) fn push_back(&mut self, e: CmEvent) {
        self.count(&e, true);
        self.q.push_back(e);
    }

    pub(super) fn pop_front(&mut self) -> Option<CmEvent> {
        let e = self.q.pop_front()?;
        self.count(&e, false);
        Some(e)
    }

    pub(super) fn len(&self) -> usize {
        self.q.len()
    }

    /// Takes out the events that name `id` (as their id or their listener).
    pub(super) fn withdraw(&mut self, id: u32) -> Vec<CmEvent> {
        if !self.per_id.contains_key(&id) {
            return Vec::new();
        }
        let mut keep = VecDeque::with_capacity(self.q.len());
        let mut gone = Vec::new();
        for e in self.q.drain(..) {
            if e.id().0 == id || e.listen_id().is_some_and(|l| l.0 == id) {
                gone.push(e);
            } else {
                keep.push_back(e);
            }
        }
        self.q = keep;
        for e in &gone {
            self.count(e, false);
        }
        gone
    }
}

/// The sizes of the CM's tables (for tests and diagnostics: a flood must leave them
/// bounded, a finished run empty).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmTableSizes {
    /// Ids (listeners included).
    pub ids: usize,
    pub listeners: usize,
    /// `remote_id_table`, `remote_qp_table`, `remote_sidr_table`.
    pub remote_ids: usize,
    pub remote_qpns: usize,
    pub remote_sidr: usize,
    /// Sends handed to a MAD layer and not completed yet.
    pub sends: usize,
    /// Ids in TIMEWAIT (each one timer).
    pub timewaits: usize,
    /// Passive ids the user has not answered (REQ_RCVD, MRA_REQ_SENT, SIDR_REQ_RCVD).
    pub half_open: usize,
    /// Queued events.
    pub events: usize,
    /// Queued MAD operations.
    pub mad_ops: usize,
}

/// The states of a passive id the user has not answered yet.
pub(super) fn is_half_open(s: CmState) -> bool {
    matches!(
        s,
        CmState::ReqRcvd | CmState::MraReqSent | CmState::SidrReqRcvd
    )
}

impl CmEndpoint {
    /// The indexes an id in state `st` is in: it leaves them.
    pub(super) fn index_leave(&mut self, id: u32, st: State) {
        match st {
            State::Timewait { until } => {
                self.timewaits.remove(&(until, id));
            }
            State::SidrReqRcvd { key } if self.remote_sidr.get(&key) == Some(&id) => {
                self.remote_sidr.remove(&key);
            }
            _ => {}
        }
        if is_half_open(st.kind()) {
            self.half_open -= 1;
        }
    }

    /// ... and enters them.
    pub(super) fn index_enter(&mut self, id: u32, st: State) {
        if let State::Timewait { until } = st {
            self.timewaits.insert((until, id));
        }
        if is_half_open(st.kind()) {
            self.half_open += 1;
        }
    }

    /// The sizes of the tables.
    pub fn table_sizes(&self) -> CmTableSizes {
        CmTableSizes {
            ids: self.conns.len(),
            listeners: self.listeners.len(),
            remote_ids: self.remote_ids.len(),
            remote_qpns: self.remote_qpns.len(),
            remote_sidr: self.remote_sidr.len(),
            sends: self.sends.len(),
            timewaits: self.timewaits.len(),
            half_open: self.half_open,
            events: self.events.len(),
            mad_ops: self.out.len(),
        }
    }

    /// Passive ids the user has not answered (REQ_RCVD, MRA_REQ_SENT, SIDR_REQ_RCVD): what
    /// [`super::CmConfig::half_open_limit`] bounds.
    pub fn half_open(&self) -> usize {
        self.half_open
    }
}
