//! Time: the timewait (`cm_enter_timewait`, `cm_timewait_handler`), going back to idle
//! (`cm_reset_to_idle`), and what the MAD layers report about our sends — completions
//! (`cm_send_handler`: the transmit counters), retransmissions and send errors
//! (`cm_process_send_error`).

use softrdma_wire::cm::AttrId;

use super::conn::State;
use super::counters::CmCounterGroup;
use super::{cm_convert_to_ms, CmEndpoint, CmEvent, CmIdRef, CmState};
use crate::mad::{SendId, SendStatus};
use crate::time::Instant;

impl CmEndpoint {
    /// When [`CmEndpoint::handle_timeout`] wants to run: the earliest timewait end (the
    /// CM's own timers; retransmissions are the MAD layers'), or at once while an id its
    /// owner dropped waits to be destroyed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let tw = self.timewaits.first().map(|&(t, _)| t);
        if self.dropped.is_empty() {
            tw
        } else {
            Some(tw.map_or(self.now, |t| t.min(self.now)))
        }
    }

    /// Runs the timewait exits due by `now` (and destroys dropped ids).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.enter(now);
        let mut due: Vec<u32> = Vec::new();
        for &(until, id) in &self.timewaits {
            if until > now {
                break;
            }
            due.push(id);
        }
        // In id order, as a pass over the ids would find them.
        due.sort_unstable();
        for id in due {
            // cm_timewait_handler: IDLE, then TIMEWAIT_EXIT.
            self.set_state(id, State::Idle);
            self.events
                .push_back(CmEvent::TimewaitExit { id: CmIdRef(id) });
        }
    }

    /// The remote-ID and remote-QPN entries go (`cm_cleanup_timewait`).
    pub(super) fn remove_tables(&mut self, id: u32) {
        let Some((rid, rqpn)) = self.conns.get_mut(&id).and_then(|c| c.tables.take()) else {
            return;
        };
        // Only if the entry is still this id's (a REQ may have taken the key over).
        if self.remote_ids.get(&rid) == Some(&id) {
            self.remote_ids.remove(&rid);
        }
        if self.remote_qpns.get(&rqpn) == Some(&id) {
            self.remote_qpns.remove(&rqpn);
        }
    }

    /// `cm_insert_remote_id` + `cm_insert_remote_qpn`.
    pub(super) fn insert_remote(&mut self, id: u32, rid: (u32, u64), rqpn: (u32, u64)) {
        self.remove_tables(id);
        self.remote_ids.insert(rid, id);
        self.remote_qpns.insert(rqpn, id);
        if let Some(c) = self.conns.get_mut(&id) {
            c.tables = Some((rid, rqpn));
        }
    }

    /// `cm_reset_to_idle`.
    pub(super) fn reset_to_idle(&mut self, id: u32) {
        self.remove_tables(id);
        self.set_state(id, State::Idle);
    }

    /// `cm_enter_timewait`: the remote-ID and remote-QPN entries go *now* (a REQ from the
    /// same peer QP is a new connection from here on), the id waits `cvt(av.timeout)`.
    pub(super) fn enter_timewait(&mut self, now: Instant, id: u32) {
        self.remove_tables(id);
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let until = now + cm_convert_to_ms(c.neg.av_timeout);
        self.set_state(id, State::Timewait { until });
    }

    /// `cm_send_handler`: the send is over. The transmit counters count it now (see
    /// `counters.rs`); a REQ/REP/DREQ/SIDR_REQ whose retries ran out is a send error.
    pub(super) fn send_completed(&mut self, now: Instant, send: SendId, status: SendStatus) {
        let Some(rec) = self.sends.remove(&send) else {
            return;
        };
        if let Some(owner) = rec.owner {
            self.sends_by_owner.remove(&(owner, send));
        }
        let retries = if rec.response && rec.attr != AttrId::REJ {
            1
        } else {
            u64::from(rec.retries)
        };
        self.counters
            .add(CmCounterGroup::TxMsgs, rec.attr, 1 + retries);
        if retries > 0 {
            self.counters
                .add(CmCounterGroup::TxRetries, rec.attr, retries);
        }
        if status == SendStatus::TimedOut {
            if let Some(id) = rec.owner {
                self.send_error(now, id, send, status);
            }
        }
    }

    /// A send's wait ended unanswered and a copy went out again: counted at completion,
    /// told to the user now.
    pub(super) fn retransmitted(
        &mut self,
        send: SendId,
        attempt: u32,
        retries_left: u32,
        next_deadline: Instant,
    ) {
        let Some(rec) = self.sends.get_mut(&send) else {
            return;
        };
        rec.retries = attempt;
        let (owner, msg) = (rec.owner, rec.attr);
        if let Some(id) = owner.filter(|id| self.conns.contains_key(id)) {
            self.events.push_back(CmEvent::Retry {
                id: CmIdRef(id),
                msg,
                attempt,
                max: attempt + retries_left,
                next_deadline,
            });
        }
    }

    /// `cm_process_send_error`: the id's own outstanding message ran out of retries (a
    /// send the state no longer holds is discarded). The event carries the status.
    fn send_error(&mut self, now: Instant, id: u32, send: SendId, status: SendStatus) {
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        if c.state.msg() != Some(send) {
            return;
        }
        let r = CmIdRef(id);
        match c.state.kind() {
            CmState::ReqSent | CmState::MraReqRcvd => {
                self.reset_to_idle(id);
                self.events.push_back(CmEvent::ReqError { id: r, status });
            }
            CmState::RepSent | CmState::MraRepRcvd => {
                self.reset_to_idle(id);
                self.events.push_back(CmEvent::RepError { id: r, status });
            }
            CmState::DreqSent => {
                self.enter_timewait(now, id);
                self.events.push_back(CmEvent::DreqError { id: r, status });
            }
            CmState::SidrReqSent => {
                self.set_state(id, State::Idle);
                self.events
                    .push_back(CmEvent::SidrReqError { id: r, status });
            }
            _ => {}
        }
    }
}
