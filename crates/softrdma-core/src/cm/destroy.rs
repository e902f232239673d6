//! Destroying ids: `ib_destroy_cm_id` (`cm_destroy_id`), for ids given back by value and
//! for ids their owners dropped.

use softrdma_wire::cm::{RejectReason, SidrStatus};

use super::conn::State;
use super::{CmEndpoint, CmId, CmState, SidrRepParams};
use crate::time::Instant;

impl CmEndpoint {
    /// `ib_destroy_cm_id` (`cm_destroy_id`). What goes on the wire depends on the state:
    /// LISTEN stops listening; SIDR_REQ_SENT cancels; SIDR_REQ_RCVD answers SIDR_REP
    /// status 2 (REJECT); REQ_SENT/MRA_REQ_RCVD cancel and send REJ 4 (TIMEOUT, our GUID
    /// in the ARI); REQ_RCVD, MRA_REQ_SENT, REP_RCVD, MRA_REP_SENT, REP_SENT and
    /// MRA_REP_RCVD send REJ 28; ESTABLISHED sends a DREQ (once); DREQ_SENT cancels;
    /// DREQ_RCVD sends the DREP. The id is gone at once — its timewait too — and no event
    /// of it (or, for a listener, of its REQs) is delivered after this.
    pub fn destroy(&mut self, now: Instant, id: CmId) {
        self.enter(now);
        let raw = id.into_raw();
        self.destroy_raw(now, raw, false);
        self.reap(now);
    }

    /// The kernel's REQ handler returning `-ENOMEM`: in REQ_RCVD the id is dropped with no
    /// REJ (the peer's REQ retransmission will be treated as new). Elsewhere = destroy.
    pub fn destroy_silently(&mut self, now: Instant, id: CmId) {
        self.enter(now);
        let raw = id.into_raw();
        self.destroy_raw(now, raw, true);
        self.reap(now);
    }

    /// Destroys the ids their owners dropped (the kernel's non-zero handler return).
    pub(super) fn reap(&mut self, now: Instant) {
        loop {
            let ids = self.dropped.take();
            if ids.is_empty() {
                return;
            }
            for id in ids {
                self.destroy_raw(now, id, false);
            }
        }
    }

    fn destroy_raw(&mut self, now: Instant, id: u32, silent: bool) {
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let guid = self.port_guid(c.port).0.to_be_bytes();
        match c.state.kind() {
            CmState::Listen => {}
            CmState::SidrReqSent => {
                self.cancel_sends(id);
                self.set_state(id, State::Idle);
            }
            CmState::SidrReqRcvd => {
                let p = SidrRepParams {
                    status: SidrStatus::REJECT,
                    ..SidrRepParams::default()
                };
                self.sidr_rep_locked(now, id, &p);
            }
            CmState::ReqSent | CmState::MraReqRcvd => {
                self.cancel_sends(id);
                self.rej_locked(now, id, RejectReason::TIMEOUT, &guid, &[]);
            }
            CmState::ReqRcvd if silent => self.reset_to_idle(id),
            CmState::RepSent | CmState::MraRepRcvd => {
                self.cancel_sends(id);
                self.rej_locked(now, id, RejectReason::CONSUMER_DEFINED, &[], &[]);
            }
            CmState::ReqRcvd | CmState::MraReqSent | CmState::RepRcvd | CmState::MraRepSent => {
                self.rej_locked(now, id, RejectReason::CONSUMER_DEFINED, &[], &[]);
            }
            CmState::Established => {
                // ib_send_cm_dreq, then the DREQ_SENT case: cancel + timewait. The
                // kernel's DREQ is posted when it is cancelled, so it goes out once; here
                // the MAD layer would withdraw an unsent copy, so it is sent once.
                self.issue_dreq(now, id, &[], false);
                self.enter_timewait(now, id);
            }
            CmState::DreqSent => {
                self.cancel_sends(id);
                self.enter_timewait(now, id);
            }
            CmState::DreqRcvd => self.drep_locked(now, id, &[]),
            CmState::Timewait | CmState::Idle => {}
        }
        // cm_free_id and the cleanup after it: the id, its table entries and whatever it
        // still had running (the kernel waits for that instead) are gone.
        self.cancel_sends(id);
        self.remove_conn(id);
        self.withdraw_events(id);
    }

    /// No event for a destroyed id (or from a destroyed listener) is delivered. Withdrawn
    /// events that own a new id drop it, which destroys that id in turn ([`Self::reap`]).
    fn withdraw_events(&mut self, id: u32) {
        drop(self.events.withdraw(id));
    }
}
