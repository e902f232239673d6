//! Reconnects after a lost channel, as ib_srp and the SRP transport class do
//! (`srp_start_tl_fail_timers`, `srp_reconnect_work`, `rport_fast_io_fail_timedout`,
//! `rport_dev_loss_timedout` in `drivers/scsi/scsi_transport_srp.c`; `srp_rport_reconnect`
//! in `drivers/infiniband/ulp/srp/ib_srp.c`).
//!
//! With any of the three timers set ([`InitiatorConfig::reconnect_delay`],
//! [`InitiatorConfig::fast_io_fail_tmo`], [`InitiatorConfig::dev_loss_tmo`]), a channel that
//! goes down while the session is live (a QP error, a DREQ from the target, a REJ) takes the
//! whole target port down with it, as `srp_handle_qp_err` → `srp_start_tl_fail_timers`
//! does; then, from the moment of the failure:
//!
//! - the session is [`SessionState::Blocked`] (`SRP_RPORT_BLOCKED`): its commands in flight
//!   ended with [`IoError::ChannelDown`](super::IoError::ChannelDown) (ib_srp ends them with
//!   `DID_RESET` and the midlayer retries them: [`SrpInitiator::will_retry`] says the caller
//!   should), and new commands are held ([`SubmitError::Busy`](super::SubmitError::Busy):
//!   `scsi_block_targets`);
//! - every `reconnect_delay` a reconnect is tried: the old channels released, new QPs and CM
//!   ids, the logins again (SINGLE, then MULTI), as `srp_rport_reconnect`; an attempt still
//!   unanswered when the next is due is dropped for it. Success makes the session
//!   [`SessionState::Live`] again (`SRP_RPORT_RUNNING`, "reconnect succeeded");
//! - after `fast_io_fail_tmo` the session is [`SessionState::FailFast`]
//!   (`SRP_RPORT_FAIL_FAST`): commands fail at once
//!   ([`SubmitError::NotLive`](super::SubmitError::NotLive)), reconnects go on;
//! - after `dev_loss_tmo` the device is given up (`SRP_RPORT_LOST`,
//!   `srp_remove_target`): [`SessionState::Failed`] with [`DownReason::DevLossTmo`], every
//!   resource released, no more attempts.
//!
//! A timer that is `None` is "off", as writing `off` to its sysfs file makes it: with
//! `reconnect_delay` off nothing is retried, with `fast_io_fail_tmo` off commands stay
//! held until `dev_loss_tmo`, with `dev_loss_tmo` off the device is never given up.
//! `srp_tmo_valid`'s rules hold too ([`validate_tmo`]).

use softrdma_core::rdma_cm::RdmaCm;
use softrdma_core::time::{Duration, Instant};
use softrdma_core::Stack;

use super::{
    ChannelState, DownReason, InitiatorConfig, InitiatorEvent, LoginError, SessionState,
    SrpInitiator,
};

/// ib_srp's module parameter defaults: `reconnect_delay` 10 s, `fast_io_fail_tmo` 15 s,
/// `dev_loss_tmo` 600 s.
pub const SRP_RECONNECT_DELAY: Duration = Duration::from_secs(10);
pub const SRP_FAST_IO_FAIL_TMO: Duration = Duration::from_secs(15);
pub const SRP_DEV_LOSS_TMO: Duration = Duration::from_secs(600);

/// `SCSI_DEVICE_BLOCK_MAX_TIMEOUT`: the longest a SCSI device may stay blocked.
pub const SCSI_DEVICE_BLOCK_MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// `srp_tmo_valid`'s rules: `reconnect_delay` not 0; `fast_io_fail_tmo` at most
/// `SCSI_DEVICE_BLOCK_MAX_TIMEOUT` (commands are held that long at most); with
/// `fast_io_fail_tmo` off, `dev_loss_tmo` at most that too; `fast_io_fail_tmo` below
/// `dev_loss_tmo` when both are on. Where the kernel refuses all three off, we take it to
/// mean no transport timers (the engine's default: a lost target fails the session).
pub fn validate_tmo(
    reconnect_delay: Option<Duration>,
    fast_io_fail_tmo: Option<Duration>,
    dev_loss_tmo: Option<Duration>,
) -> Result<(), String> {
    let secs = |d: Duration| d.total_millis() as f64 / 1e3;
    let max = SCSI_DEVICE_BLOCK_MAX_TIMEOUT;
    if reconnect_delay == Some(Duration::from_secs(0)) {
        return Err("reconnect_delay must be above 0 (or off)".into());
    }
    if let Some(f) = fast_io_fail_tmo.filter(|f| *f > max) {
        return Err(format!(
            "fast_io_fail_tmo ({} s) must be at most {} s (SCSI_DEVICE_BLOCK_MAX_TIMEOUT)",
            secs(f),
            secs(max)
        ));
    }
    if let (None, Some(d)) = (fast_io_fail_tmo, dev_loss_tmo) {
        if d > max {
            return Err(format!(
                "with fast_io_fail_tmo off, dev_loss_tmo ({} s) must be at most {} s: \
                 commands would be held longer than a SCSI device may be blocked",
                secs(d),
                secs(max)
            ));
        }
    }
    if let (Some(f), Some(d)) = (fast_io_fail_tmo, dev_loss_tmo) {
        if f >= d {
            return Err(format!(
                "fast_io_fail_tmo ({} s) must be below dev_loss_tmo ({} s)",
                secs(f),
                secs(d)
            ));
        }
    }
    Ok(())
}

/// The transport layer's state after a failure (`struct srp_rport`'s timers).
#[derive(Debug, Clone)]
pub(super) struct Tl {
    pub why: DownReason,
    pub since: Instant,
    pub next_reconnect: Option<Instant>,
    pub fast_io_fail_at: Option<Instant>,
    pub dev_loss_at: Option<Instant>,
    pub failed_fast: bool,
    /// Reconnect attempts so far (`rport->failed_reconnects` + the one under way).
    pub attempts: u32,
    /// An attempt's logins are under way.
    pub attempting: bool,
}

impl InitiatorConfig {
    /// Whether a lost channel is reconnected or failed as ib_srp does (any timer on).
    pub fn transport_timers(&self) -> bool {
        self.reconnect_delay.is_some()
            || self.fast_io_fail_tmo.is_some()
            || self.dev_loss_tmo.is_some()
    }
}

impl SrpInitiator {
    /// Whether a command that ended with [`IoError::ChannelDown`](super::IoError::ChannelDown)
    /// should be submitted again (the midlayer's retry of a `DID_RESET`): the session is
    /// blocked, reconnecting, and has not failed fast.
    pub fn will_retry(&self) -> bool {
        self.tl.as_ref().is_some_and(|t| !t.failed_fast)
    }

    /// Reconnect attempts since the last failure (0 when live).
    pub fn reconnect_attempts(&self) -> u32 {
        self.tl.as_ref().map_or(0, |t| t.attempts)
    }

    /// The transport layer's next timer.
    pub(super) fn tl_timeout(&self) -> Option<Instant> {
        let t = self.tl.as_ref()?;
        [
            t.next_reconnect,
            if t.failed_fast {
                None
            } else {
                t.fast_io_fail_at
            },
            t.dev_loss_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// `srp_start_tl_fail_timers`: a channel of a live session went down. Every other
    /// channel goes down too (their commands end for the caller to retry), DREQs out.
    pub(super) fn start_tl_fail_timers(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        why: DownReason,
    ) {
        self.live_channels_down(now, rdma, stack, &why);
        let c = &self.cfg;
        self.tl = Some(Tl {
            why: why.clone(),
            since: now,
            next_reconnect: c.reconnect_delay.map(|d| now + d),
            fast_io_fail_at: c.fast_io_fail_tmo.map(|d| now + d),
            dev_loss_at: c.dev_loss_tmo.map(|d| now + d),
            failed_fast: false,
            attempts: 0,
            attempting: false,
        });
        self.state = SessionState::Blocked(why.clone());
        self.events.push_back(InitiatorEvent::TransportFailed {
            why,
            reconnect_delay: c.reconnect_delay,
            fast_io_fail_tmo: c.fast_io_fail_tmo,
            dev_loss_tmo: c.dev_loss_tmo,
        });
    }

    /// The transport layer's timers: the device lost, fail-fast, the next reconnect.
    pub(super) fn handle_tl_timeout(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack) {
        let Some(t) = self.tl.clone() else {
            return;
        };
        if t.dev_loss_at.is_some_and(|d| d <= now) {
            // rport_dev_loss_timedout → srp_remove_target.
            self.release_channels(now, rdma, stack);
            self.release_all(stack);
            self.tl = None;
            let after = self.cfg.dev_loss_tmo.unwrap_or_default();
            self.events.push_back(InitiatorEvent::DeviceLost {
                after,
                attempts: t.attempts,
            });
            let why = DownReason::DevLossTmo {
                after_secs: after.total_micros() / 1_000_000,
                first: Box::new(t.why),
            };
            self.last_down = Some(why.clone());
            self.state = SessionState::Failed(why);
            return;
        }
        if !t.failed_fast && t.fast_io_fail_at.is_some_and(|f| f <= now) {
            // rport_fast_io_fail_timedout: SRP_RPORT_FAIL_FAST, I/O fails at once.
            if let Some(tl) = &mut self.tl {
                tl.failed_fast = true;
            }
            self.state = SessionState::FailFast(t.why.clone());
            self.events.push_back(InitiatorEvent::FastIoFail {
                after: self.cfg.fast_io_fail_tmo.unwrap_or_default(),
            });
        }
        if t.next_reconnect.is_some_and(|r| r <= now) {
            if t.attempting {
                // The last attempt's REQ is still unanswered: a fresh one goes now.
                let millis = self.cfg.reconnect_delay.unwrap_or_default().total_millis();
                self.reconnect_failed(now, rdma, stack, LoginError::UnansweredWithin { millis });
            }
            self.start_reconnect(now, rdma, stack);
        }
    }

    /// `srp_rport_reconnect`: the old channels released, new ones logged in from channel 0.
    fn start_reconnect(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack) {
        let delay = self.cfg.reconnect_delay;
        let Some(tl) = &mut self.tl else {
            return;
        };
        tl.attempts += 1;
        tl.attempting = true;
        tl.next_reconnect = delay.map(|d| now + d);
        let attempt = tl.attempts;
        self.release_channels(now, rdma, stack);
        self.channels.clear();
        self.next_channel = 0;
        self.events
            .push_back(InitiatorEvent::ReconnectAttempt { attempt });
        // A synchronous failure (no QP, no CM id) comes back through fail_login.
        let _ = self.connect_channel(now, rdma, stack, 0);
        self.after_change(now, rdma, stack);
    }

    /// An attempt failed (a channel's login failed, or it went unanswered): its channels
    /// go; the next attempt comes at `next_reconnect`.
    pub(super) fn reconnect_failed(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        error: LoginError,
    ) {
        let Some(tl) = &mut self.tl else {
            return;
        };
        if !tl.attempting {
            return;
        }
        tl.attempting = false;
        let attempt = tl.attempts;
        self.events
            .push_back(InitiatorEvent::ReconnectFailed { attempt, error });
        self.release_channels(now, rdma, stack);
    }

    /// Every channel released, whatever its state (a DREQ still unanswered included).
    fn release_channels(&mut self, now: Instant, rdma: &mut RdmaCm, stack: &mut Stack) {
        for k in 0..self.channels.len() {
            if self.channels[k].state != ChannelState::Closed || self.channels[k].conn.is_some() {
                self.release_channel(now, rdma, stack, k);
            }
        }
    }

    /// After a change during an attempt: every channel live is success.
    pub(super) fn reconnect_progress(&mut self, _now: Instant) {
        let Some(tl) = &self.tl else {
            return;
        };
        if !tl.attempting {
            return;
        }
        let live = self
            .channels
            .iter()
            .filter(|c| c.state == ChannelState::Live)
            .count();
        if live == self.ch_count && self.channels.len() == self.ch_count {
            let attempt = tl.attempts;
            let down_for = _now.saturating_duration_since(tl.since);
            self.tl = None;
            self.state = SessionState::Live;
            self.events
                .push_back(InitiatorEvent::Reconnected { attempt, down_for });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_are_checked_as_srp_tmo_valid_does() {
        let s = |n| Some(Duration::from_secs(n));
        // ib_srp's defaults, and all off.
        assert!(validate_tmo(s(10), s(15), s(600)).is_ok());
        assert!(validate_tmo(None, None, None).is_ok());
        assert!(validate_tmo(s(0), s(15), s(600)).is_err());
        assert!(validate_tmo(s(10), s(601), None).is_err());
        assert!(validate_tmo(s(10), None, s(601)).is_err());
        assert!(validate_tmo(s(10), None, s(600)).is_ok());
        assert!(validate_tmo(s(10), s(15), s(15)).is_err());
        assert!(validate_tmo(s(10), s(15), None).is_ok());
    }
}
