//! Congestion control and pacing for one QP's outgoing data (`docs/congestion-control.md`).
//!
//! A rate-based controller that needs nothing from the switch:
//!
//! - **Delay first** (TIMELY, Mittal et al., SIGCOMM 2015; Swift, Kumar et al., SIGCOMM 2020):
//!   RTT samples from ACKs (a packet that asked for an ACK, to the ACK that covers it) and from
//!   READ responses (a READ request to its first response). The queueing delay is the sample
//!   less the smallest RTT seen (`min_rtt`, re-learned every [`MIN_RTT_WINDOW`]); below
//!   [`TARGET_QDELAY`] the rate grows (multiplicatively in slow start, then additively with
//!   TIMELY's hyper-active increase after quiet rounds), above it the rate falls in proportion
//!   to the excess (Swift's `1 - β·(delay - target)/delay`, at most [`MAX_MD`] a round).
//! - **Loss as a signal**: a sequence NAK, a tail-loss probe that finds a hole, or an ACK
//!   timeout cuts the rate by [`LOSS_MD`] (once per [`LOSS_EPOCH`]) when the delay says
//!   the queue is up (or in the competitive mode), and starts pacing. A loss at an empty
//!   queue is random loss or corruption and cuts nothing.
//! - **Competitive (loss) mode**: against a loss-based flow (TCP) in a tail-drop queue the
//!   queue never drains, so a delay-based sender would back off forever and starve. When
//!   our delay cuts halved the rate and the queue did not shrink ([`COMPETE_RATE_SHARE`],
//!   [`COMPETE_QUEUE_SHARE`]), or no sample in a whole [`COMPETE_WINDOW`] got below the
//!   target, the queue is not ours: the controller stops reacting to delay and behaves like
//!   Reno in rate form (additive increase per round, [`LOSS_MD`] on loss, once per
//!   [`LOSS_EPOCH`]) until a millisecond of samples below the target shows the queue has
//!   drained again (Copa's mode switch, Arun and Balakrishnan, NSDI 2018, on the same
//!   observation).
//! - **ECN** (DCQCN, Zhu et al., SIGCOMM 2015): a CNP cuts the rate by `α/2` and raises `α`;
//!   `α` decays while no CNP comes.
//!
//! The pacer spreads what the controller allows: a QP may send a burst of at most
//! [`Cc::burst_bytes`] (a GSO train's worth at high rates, a couple of packets at low ones)
//! and then waits until the rate has paid for it.

use crate::time::{Duration, Instant};

/// Queueing delay the delay mode aims at.
pub const TARGET_QDELAY: Duration = Duration::from_micros(120);
/// Whether the target follows the RTT's deviation ([`Cc::target`]): off, it made things
/// worse on the loaded 2-core machine measured (`docs/measurements.md`).
pub const ADAPTIVE_TARGET: bool = false;
/// The most the target grows to on a noisy host ([`Cc::target`]).
pub const MAX_TARGET: Duration = Duration::from_micros(800);
/// The starting rate: unpaced ([`MAX_RATE`]). A QP paces only once the path has shown
/// congestion (a loss or a CNP): a path that takes everything sent (loopback, an idle
/// fabric) is never limited by a guess, and pacing there cost a timer wake-up per quantum
/// (issue 21's loopback regression: SRP 1 MiB reads 2.48k -> 87 IOPS with a 1 Gbit/s
/// start and delay-driven cuts on the receiver's own scheduling delay).
pub const INITIAL_RATE: f64 = MAX_RATE;
/// The lowest rate, bytes/s (100 Mbit/s).
pub const MIN_RATE: f64 = 12.5e6;
/// The highest rate, bytes/s (100 Gbit/s): at it the QP is unpaced ([`Cc::paced`]).
pub const MAX_RATE: f64 = 12.5e9;
/// Additive increase per round, bytes/s (TIMELY's δ, 10 Mbit/s).
pub const AI_RATE: f64 = 1.25e6;
/// Rounds without a cut after which the increase becomes hyper-active (TIMELY's HAI, N = 5).
pub const HAI_ROUNDS: u32 = 5;
/// Swift's β.
pub const BETA: f64 = 0.8;
/// The largest delay-driven cut per round (Swift's max_mdf).
pub const MAX_MD: f64 = 0.5;
/// The cut on loss.
pub const LOSS_MD: f64 = 0.7;
/// How long every sample must have been above the target before the delay cuts. RTTs of a
/// userspace stack carry both hosts' scheduling; a queue shows in every sample for as long
/// as it stands, a stall of either thread only in the samples whose ACKs waited for it, and
/// a round of a few tens of µs held one or two samples, so the rate was cut on every stall
/// (1,700 delay cuts in 5 s at load 10; `docs/congestion-control.md`). A round that is
/// above the target for less than this neither cuts nor increases. A queue of the narrow
/// link's size (256 KB at 2 Gbit/s: 1 ms) is still seen in time. (Rounds of at least this
/// length instead also slowed the increase: 84% of the simulated link for READ.)
pub const MIN_DECISION: Duration = Duration::from_millis(1);
/// How long `min_rtt` is kept before it is learned again.
pub const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// A window in which no sample below the target means a standing queue of another flow.
pub const COMPETE_WINDOW: Duration = Duration::from_millis(100);
/// The competitive mode starts earlier when our own cuts have been tried: once the rate is
/// at most this share of what it was when the queue rose ...
pub const COMPETE_RATE_SHARE: f64 = 0.5;
/// ... and the round's smallest queueing delay is still at least this share of what it was
/// then. A queue of our own shrinks when we halve our rate (it drains at the difference);
/// a buffer-filling competitor's (TCP fills a tail-drop queue to overflow whatever we do)
/// or a host's scheduling noise does not, and cutting further only starves us.
pub const COMPETE_QUEUE_SHARE: f64 = 0.8;
/// At most one loss cut in this long. A loss-based competitor overflows a tail-drop queue
/// once per sawtooth (tens of milliseconds for TCP at this link's scale: one cubic/Reno
/// cycle), so one cut per epoch answers every overflow as TCP itself does; random loss at
/// 1% hits every round, and a cut per round (Reno's rule) holds a sender to Mathis et al.'s
/// `1.22 · MSS / (RTT · √p)`, a few percent of the link. What the additive increase gains
/// in an epoch (20 ms / srtt rounds × [`AI_RATE`]) repays a ×0.7 cut at about the link
/// rate of 2 Gbit/s.
pub const LOSS_EPOCH: Duration = Duration::from_millis(20);
/// How long a delivery-rate maximum is kept.
pub const DELIVERY_WINDOW: Duration = Duration::from_millis(20);
/// A delay cut does not go below this share of the delivery rate: a queue above the target
/// is drained at a tenth of the bottleneck's rate, without idling it.
pub const DELIVERY_FLOOR: f64 = 0.9;
/// DCQCN's g.
pub const DCQCN_G: f64 = 1.0 / 16.0;
/// DCQCN's α update period.
pub const DCQCN_ALPHA_PERIOD: Duration = Duration::from_micros(55);
/// Time a held-back sender's next train takes at the current rate.
pub const QUANTUM_TIME_NS: f64 = 100_000.0;
/// The smallest such train, bytes.
pub const MIN_QUANTUM: f64 = 16384.0;
/// Time a burst may take at the current rate (half the target queueing delay: a burst
/// alone must not look like congestion).
pub const BURST_TIME_NS: f64 = 100_000.0;
/// The smallest burst the pacer allows (16 KiB), and the largest (two GSO trains).
pub const MIN_BURST: f64 = 16_384.0;
pub const MAX_BURST: f64 = 131_072.0;

/// The controller's mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Doubling per round until the first congestion signal.
    #[default]
    SlowStart,
    /// Delay-based (TIMELY/Swift).
    Delay,
    /// Loss-based (Reno in rate form) against a standing queue.
    Compete,
}

/// One QP's controller and pacer.
#[derive(Clone, Debug)]
pub struct Cc {
    /// Whether signals move the rate at all (`Stack::set_congestion_control`): off, the
    /// rate stays at [`MAX_RATE`] (unpaced) whatever happens; the RTTs are still measured
    /// (the probe timeout uses them).
    pub enabled: bool,
    /// The allowed rate, bytes/s.
    pub rate: f64,
    pub mode: Mode,
    /// Smallest RTT seen in the current window, microseconds.
    pub min_rtt: Option<u64>,
    min_rtt_since: Instant,
    /// Smoothed RTT and its mean deviation, microseconds (RFC 6298: α = 1/8, β = 1/4).
    pub srtt: Option<u64>,
    pub rttvar: u64,
    /// The last RTT sample, microseconds, and when it was taken.
    pub last_rtt: Option<u64>,
    last_sample_at: Option<Instant>,
    /// When the current round (one smoothed RTT) started; decisions are made once a round.
    round_start: Instant,
    /// Samples this round above / below the target.
    round_high: u32,
    round_low: u32,
    /// The smallest queueing delay sampled this round, microseconds (`u64::MAX`: none yet).
    round_min_q: u64,
    /// Rounds without a cut.
    quiet_rounds: u32,
    /// When a sample was last below the target, and above it.
    last_low: Instant,
    last_high: Instant,
    /// Where the current spell of delay cuts began: our rate then and the round's smallest
    /// queueing delay (µs) then (the test of whether our cuts lower the queue).
    high_from: Option<(f64, u64)>,
    /// When a loss last cut the rate (at most once per [`LOSS_EPOCH`]).
    last_loss_cut: Option<Instant>,
    /// When the rate was last cut (cuts at most once a round).
    last_cut: Option<Instant>,
    /// DCQCN's α and when it was last updated.
    pub alpha: f64,
    alpha_at: Option<Instant>,
    /// The pacer: the next send may leave at this time, nanoseconds (virtual clock).
    next_ns: u64,
    /// Delivery rate (BBR's, Cardwell et al., ACM Queue 2016): bytes acknowledged since
    /// `deliv_start`, and the largest rate measured over the last [`DELIVERY_WINDOW`]
    /// (value, when).
    deliv_bytes: f64,
    deliv_start: Option<Instant>,
    pub delivery_max: Option<(f64, Instant)>,
    /// Signals counted (for tests and `-v`).
    pub cuts_delay: u64,
    pub cuts_loss: u64,
    pub cuts_cnp: u64,
    /// Losses that cut nothing (the queue was empty, or within a loss epoch), and switches
    /// to the competitive mode.
    pub losses_ignored: u64,
    pub compete_entries: u64,
}

impl Default for Cc {
    fn default() -> Cc {
        Cc {
            enabled: false,
            rate: INITIAL_RATE,
            mode: Mode::SlowStart,
            min_rtt: None,
            min_rtt_since: Instant::ZERO,
            srtt: None,
            rttvar: 0,
            last_rtt: None,
            last_sample_at: None,
            round_start: Instant::ZERO,
            round_high: 0,
            round_low: 0,
            round_min_q: u64::MAX,
            quiet_rounds: 0,
            last_low: Instant::ZERO,
            last_high: Instant::ZERO,
            high_from: None,
            last_loss_cut: None,
            last_cut: None,
            alpha: 1.0,
            alpha_at: None,
            next_ns: 0,
            deliv_bytes: 0.0,
            deliv_start: None,
            delivery_max: None,
            cuts_delay: 0,
            cuts_loss: 0,
            cuts_cnp: 0,
            losses_ignored: 0,
            compete_entries: 0,
        }
    }
}

fn ns(t: Instant) -> u64 {
    t.total_micros().saturating_mul(1000)
}

impl Cc {
    /// The target queueing delay, microseconds: [`TARGET_QDELAY`], or twice the RTT's mean
    /// deviation if that is more (up to [`MAX_TARGET`]). RTTs measured by a userspace stack
    /// include its hosts' scheduling, which on a busy machine varies by far more than the
    /// target; a target under that noise reads noise as queueing and starves the flow
    /// (Swift separates host from fabric delay with NIC timestamps, which we do not have).
    pub fn target(&self) -> u64 {
        if ADAPTIVE_TARGET {
            (2 * self.rttvar).clamp(TARGET_QDELAY.total_micros(), MAX_TARGET.total_micros())
        } else {
            TARGET_QDELAY.total_micros()
        }
    }

    /// Whether the pacer limits this QP: not at [`MAX_RATE`] (the start, until congestion).
    pub fn paced(&self) -> bool {
        self.rate < MAX_RATE
    }

    /// A round: the smoothed RTT, at least 20 µs, at most 100 ms (before any sample: 1 ms).
    pub fn round(&self) -> Duration {
        Duration::from_micros(self.srtt.unwrap_or(1000).clamp(20, 100_000))
    }

    /// The largest burst the pacer lets out at once, bytes: what the rate sends in
    /// [`BURST_TIME_NS`], within [`MIN_BURST`]..=[`MAX_BURST`].
    pub fn burst_bytes(&self) -> f64 {
        (self.rate * BURST_TIME_NS * 1e-9).clamp(MIN_BURST, MAX_BURST)
    }

    /// What a held-back sender waits to have paid for before it sends again, bytes: what the
    /// rate sends in [`QUANTUM_TIME_NS`], within [`MIN_QUANTUM`]..=64 KiB (a GSO train).
    /// One wake-up then sends a train of that much, not one packet.
    pub fn quantum_bytes(&self) -> f64 {
        (self.rate * QUANTUM_TIME_NS * 1e-9).clamp(MIN_QUANTUM, 65_536.0)
    }

    /// Whether a packet may leave at `now`; if not, when the next train may (a quantum
    /// later than the pacer's clock).
    pub fn may_send(&self, now: Instant) -> Result<(), Instant> {
        if self.rate >= MAX_RATE {
            return Ok(());
        }
        let t = ns(now);
        if self.next_ns <= t {
            Ok(())
        } else {
            let q = (self.quantum_bytes() / self.rate * 1e9) as u64;
            Err(Instant::from_micros((self.next_ns + q).div_ceil(1000)))
        }
    }

    /// `bytes` left at `now`: the pacer moves on by their time at the current rate. A burst
    /// of up to [`Cc::burst_bytes`] may leave back to back: the clock lags `now` by up to
    /// that much time.
    pub fn on_sent(&mut self, now: Instant, bytes: usize) {
        if self.rate >= MAX_RATE {
            return;
        }
        let t = ns(now);
        let burst_ns = (self.burst_bytes() / self.rate * 1e9) as u64;
        let base = self.next_ns.max(t.saturating_sub(burst_ns));
        self.next_ns = base + (bytes as f64 / self.rate * 1e9) as u64;
    }

    /// `bytes` were acknowledged (or arrived as READ responses) at `now`.
    pub fn on_delivered(&mut self, now: Instant, bytes: u64) {
        let Some(start) = self.deliv_start else {
            self.deliv_start = Some(now);
            self.deliv_bytes = 0.0;
            return;
        };
        self.deliv_bytes += bytes as f64;
        let span = now.saturating_duration_since(start);
        let min_span = self.round().total_micros().max(200);
        if span.total_micros() < min_span {
            return;
        }
        let rate = self.deliv_bytes / (span.total_micros() as f64 * 1e-6);
        let keep = self
            .delivery_max
            .is_some_and(|(m, at)| m >= rate && now < at + DELIVERY_WINDOW);
        if !keep {
            self.delivery_max = Some((rate, now));
        }
        self.deliv_start = Some(now);
        self.deliv_bytes = 0.0;
    }

    /// The delivery rate the path has shown: the recent maximum, or the rate of what was
    /// delivered since the current measurement began if none is complete yet (a first burst
    /// that overflowed a queue is cut from what came through it, not from a guess).
    fn delivery_estimate(&self, now: Instant) -> Option<f64> {
        if let Some((m, _)) = self.delivery_max.filter(|(m, _)| *m > 0.0) {
            return Some(m);
        }
        let span = now
            .saturating_duration_since(self.deliv_start?)
            .total_micros();
        (span >= 20 && self.deliv_bytes > 0.0).then(|| self.deliv_bytes / (span as f64 * 1e-6))
    }

    /// The delay cut's floor: [`DELIVERY_FLOOR`] of the recent delivery rate.
    fn floor(&self, now: Instant) -> f64 {
        match self.delivery_max {
            Some((m, at)) if now < at + DELIVERY_WINDOW => m * DELIVERY_FLOOR,
            _ => MIN_RATE,
        }
    }

    /// Lets the next packet leave at `now` (a retransmission after a timeout or a NAK).
    pub fn restart_pacer(&mut self, now: Instant) {
        self.next_ns = self.next_ns.min(ns(now));
    }

    fn set_rate(&mut self, r: f64) {
        self.rate = r.clamp(MIN_RATE, MAX_RATE);
    }

    /// Cuts by `factor` unless a cut happened within the last round.
    fn cut(&mut self, now: Instant, factor: f64) -> bool {
        if !self.enabled {
            return false;
        }
        if self.last_cut.is_some_and(|t| now < t + self.round()) {
            return false;
        }
        self.last_cut = Some(now);
        self.quiet_rounds = 0;
        let r = if self.rate >= MAX_RATE {
            // Unpaced until now: start from the delivery rate the path has shown (the
            // bottleneck's, when a queue overflowed), or a quarter of the maximum.
            self.delivery_estimate(now).unwrap_or(MAX_RATE / 4.0)
        } else {
            self.rate
        };
        self.set_rate(r * factor);
        true
    }

    /// An RTT sample of `rtt` at `now`; `fresh`: of a packet's first copy (only those teach
    /// the base RTT: a re-sent copy's answer may be the first copy's).
    pub fn on_rtt(&mut self, now: Instant, rtt: Duration, fresh: bool) {
        let us = rtt.total_micros().max(1);
        self.last_rtt = Some(us);
        self.srtt = Some(match self.srtt {
            None => {
                self.rttvar = us / 2;
                us
            }
            Some(s) => {
                self.rttvar = (self.rttvar * 3 + s.abs_diff(us)) / 4;
                (s * 7 + us) / 8
            }
        });
        if now.saturating_duration_since(self.min_rtt_since) > MIN_RTT_WINDOW {
            // Re-learn the base RTT (a route change, or a queue that was never empty).
            self.min_rtt = None;
            self.min_rtt_since = now;
        }
        if fresh || self.min_rtt.is_none() {
            self.min_rtt = Some(self.min_rtt.map_or(us, |m| m.min(us)));
        }
        let min = self.min_rtt.unwrap_or(us);
        let qdelay = us.saturating_sub(min);
        self.last_sample_at = Some(now);
        if !self.paced() {
            // Unpaced, delay alone does not start pacing: on a host path the "queue" is the
            // receiver's socket buffer and scheduling, which only costs when it overflows
            // (a loss, which does start pacing). The samples still teach the RTTs.
            if qdelay < self.target() {
                self.last_low = now;
            }
            self.round_start = now;
            return;
        }
        if qdelay < self.target() {
            self.round_low += 1;
            self.last_low = now;
            if self.mode == Mode::Compete
                && now.saturating_duration_since(self.last_high) >= MIN_DECISION
            {
                // The standing queue drained (every sample for a while below the target,
                // not one lucky sample between stalls): back to delay.
                self.mode = Mode::Delay;
                self.high_from = None;
            }
        } else {
            self.round_high += 1;
            self.last_high = now;
            if self.mode == Mode::SlowStart {
                // The queue is up: slow start overshot (it doubles per round); halve back
                // to the rate before the last doubling and go on by delay (HyStart's
                // delay-increase exit, Ha and Rhee, 2011).
                self.mode = Mode::Delay;
                self.last_cut = Some(now);
                let r = self.rate / 2.0;
                self.set_rate(r);
            }
        }
        self.round_min_q = self.round_min_q.min(qdelay);
        if now < self.round_start + self.round() {
            return;
        }
        self.end_round(now);
    }

    fn end_round(&mut self, now: Instant) {
        let target = self.target();
        let high = self.round_high > 0 && self.round_low == 0;
        let persistent = now.saturating_duration_since(self.last_low) >= MIN_DECISION;
        let congested = high && persistent;
        match self.mode {
            Mode::Delay if high && !persistent => {
                // Above the target, but not for long enough to tell a queue from a stall:
                // hold the rate.
            }
            Mode::SlowStart if !congested => {
                let r = self.rate * 2.0;
                self.set_rate(r);
            }
            Mode::SlowStart | Mode::Delay if congested => {
                // The round's smallest queueing delay: a queue shows in every sample of a
                // round, a scheduling stall of either host only in some (the ACKs that
                // waited for it), so the minimum is the queue and the mean is queue plus
                // noise — cutting by the mean cut a userspace sender on a busy host far
                // below the link.
                let q = self.round_min_q.max(1) as f64;
                let f = (1.0 - BETA * (q - target as f64) / q).max(1.0 - MAX_MD);
                let before = self.rate;
                let (rate0, q0) = *self.high_from.get_or_insert((before, self.round_min_q));
                // Our cuts did not lower the queue: it is not ours (a buffer-filling
                // competitor, or the hosts' scheduling), and delay is no signal we can act
                // on. Copa's mode switch (Arun and Balakrishnan, NSDI 2018) on the
                // observation Swift and Copa both make: a delay-based sender against
                // loss-based TCP in a tail-drop queue backs off until it starves.
                let futile = before <= rate0 * COMPETE_RATE_SHARE
                    && (self.round_min_q as f64) >= q0 as f64 * COMPETE_QUEUE_SHARE;
                let standing = now.saturating_duration_since(self.last_low) > COMPETE_WINDOW;
                if futile || standing {
                    self.mode = Mode::Compete;
                    self.compete_entries += 1;
                    self.high_from = None;
                } else {
                    if self.cut(now, f) {
                        self.cuts_delay += 1;
                        let floor = self.floor(now).min(before);
                        if self.rate < floor {
                            self.set_rate(floor);
                        }
                    }
                    self.mode = Mode::Delay;
                }
            }
            Mode::Compete => {
                // Reno in rate form: one AI_RATE a round, about TCP's one segment per RTT
                // at this link's RTTs (no hyper-active increase: 5× TCP's would take the
                // link from it). (Twice the increase with a ×0.85 loss cut, an increase per
                // round of elapsed time, and a 4× longer burst were each tried on the
                // narrow link against TCP: more of ours dropped and re-sent, no more
                // goodput; `docs/congestion-control.md`.)
                if self.rate < MAX_RATE {
                    let r = self.rate + AI_RATE;
                    self.set_rate(r);
                }
            }
            _ => {
                if !high {
                    // A round below the target ends a spell of delay cuts.
                    self.high_from = None;
                }
                // Additive increase; hyper-active after quiet rounds (TIMELY's HAI). (A
                // multiplicative probe, BBR's 1.25 gain, was tried so that a path cut by a
                // stray loss climbs back to unpaced sooner: through the narrow link it
                // overshot the queue more often and cost the 1%-loss run about 4% of the
                // link; measured in the simulation, `docs/congestion-control.md`.)
                self.quiet_rounds = self.quiet_rounds.saturating_add(1);
                let r = if self.quiet_rounds > HAI_ROUNDS {
                    self.rate + AI_RATE * 5.0
                } else {
                    self.rate + AI_RATE
                };
                if self.rate < MAX_RATE {
                    self.set_rate(r);
                }
            }
        }
        self.round_start = now;
        self.round_high = 0;
        self.round_low = 0;
        self.round_min_q = u64::MAX;
    }

    /// A loss was detected at `now` (a sequence NAK, a probe that found a hole, the ACK
    /// timeout). It cuts at most once per [`LOSS_EPOCH`]. A loss is taken as congestion when the queue is up (the last sample's
    /// queueing delay at least the target) or in the competitive mode (where loss is the
    /// only signal); a timeout counts like any loss (on a host starved of CPU — a loaded
    /// machine, busy polling — ACK timeouts fire with no queue anywhere, and cutting on
    /// each drove a loopback QP to the lowest rate, which made the next timeout likelier);
    /// a loss at an empty queue is corruption or
    /// a random drop, which a cut would not cure (Swift, §3.4: it reacts to delay, and to loss
    /// only when retransmissions pile up).
    pub fn on_loss(&mut self, now: Instant) {
        // The queueing delay of the last sample, if it is recent (four rounds).
        let round = self.round();
        let recent = self
            .last_sample_at
            .is_some_and(|t| now < t + round + round + round + round);
        let qdelay = match (self.last_rtt, self.min_rtt) {
            (Some(r), Some(m)) if recent => r.saturating_sub(m),
            _ => 0,
        };
        let congestive = self.mode == Mode::Compete || qdelay >= self.target();
        if !congestive || self.last_loss_cut.is_some_and(|t| now < t + LOSS_EPOCH) {
            self.losses_ignored += u64::from(self.enabled);
            return;
        }
        if self.mode == Mode::SlowStart {
            self.mode = Mode::Delay;
        }
        if self.cut(now, LOSS_MD) {
            self.cuts_loss += 1;
            self.last_loss_cut = Some(now);
        }
    }

    /// The tail of a READ's response burst was lost (a probe had to ask again): unpaced,
    /// this is the overflow that starts pacing (a READ requester has no other sign of it:
    /// its RTT samples end at a burst's first response, before the queue builds); paced,
    /// it is a loss like any other.
    pub fn on_tail_loss(&mut self, now: Instant) {
        if self.paced() {
            self.on_loss(now);
            return;
        }
        self.mode = Mode::Delay;
        if self.cut(now, LOSS_MD) {
            self.cuts_loss += 1;
            self.last_loss_cut = Some(now);
        }
    }

    /// A CNP arrived (DCQCN's reaction point): cut by α/2, raise α.
    pub fn on_cnp(&mut self, now: Instant) {
        self.decay_alpha(now);
        self.alpha = (1.0 - DCQCN_G) * self.alpha + DCQCN_G;
        if self.mode == Mode::SlowStart {
            self.mode = Mode::Delay;
        }
        let f = 1.0 - self.alpha / 2.0;
        if self.cut(now, f) {
            self.cuts_cnp += 1;
        }
    }

    /// α decays by `1 - g` every [`DCQCN_ALPHA_PERIOD`] without a CNP (from the first CNP on).
    fn decay_alpha(&mut self, now: Instant) {
        let Some(since) = self.alpha_at else {
            self.alpha_at = Some(now);
            return;
        };
        let periods = now.saturating_duration_since(since).total_micros()
            / DCQCN_ALPHA_PERIOD.total_micros().max(1);
        for _ in 0..periods.min(64) {
            self.alpha *= 1.0 - DCQCN_G;
        }
        if periods > 0 {
            self.alpha_at = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> Instant {
        Instant::from_micros(us)
    }

    /// The pacer lets a burst out, then spaces packets at the rate.
    #[test]
    fn the_pacer_spaces_sends_at_the_rate() {
        let mut cc = Cc {
            rate: 250e6, // 2 Gbit/s
            ..Cc::default()
        };
        let now = at(1_000_000);
        let mut sent = 0usize;
        while cc.may_send(now).is_ok() {
            cc.on_sent(now, 1024);
            sent += 1;
            assert!(sent < 1000, "the pacer never stops");
        }
        // A burst of 100 µs at 250 MB/s is 25 kB: 25 packets.
        assert!((22..=27).contains(&sent), "{sent}");
        // Over one more millisecond: 250 kB at the rate.
        let mut more = 0;
        for us in 1..=1000 {
            while cc.may_send(at(1_000_000 + us)).is_ok() {
                cc.on_sent(at(1_000_000 + us), 1024);
                more += 1;
            }
        }
        let bytes = more * 1024;
        assert!((240_000..=262_000).contains(&bytes), "{bytes}");
    }

    /// A QP starts unpaced and delay alone does not pace it (a host path's "queue" is its
    /// receiver's scheduling); a loss with the queue up starts pacing at the delivery rate
    /// the path showed; then a queue above the target cuts, a standing queue that never
    /// drains switches to the competitive mode, and a low sample switches back.
    #[test]
    fn delay_signals_move_the_rate_and_the_mode() {
        let mut cc = Cc {
            enabled: true,
            ..Cc::default()
        };
        assert!(!cc.paced());
        assert!(cc.may_send(at(0)).is_ok());
        let mut t = 0;
        cc.on_rtt(at(t), Duration::from_micros(100), true);
        cc.on_delivered(at(t), 0);
        for _ in 0..20 {
            t += 100;
            // 250 MB/s delivered: 25 kB every 100 µs.
            cc.on_delivered(at(t), 25_000);
            cc.on_rtt(at(t), Duration::from_micros(900), true);
        }
        assert!(!cc.paced(), "delay alone paced an unpaced QP: {}", cc.rate);
        cc.on_loss(at(t));
        assert!(cc.paced());
        assert!(
            (0.6 * 250e6..=0.8 * 250e6).contains(&cc.rate),
            "the first cut is from the delivery rate: {}",
            cc.rate
        );
        assert_eq!(cc.mode, Mode::Delay);
        let before = cc.rate;
        // Past the delivery rate's window (whose 0.9 floors a delay cut).
        for _ in 0..30 {
            t += 1000;
            cc.on_rtt(at(t), Duration::from_micros(900), true);
        }
        assert!(cc.rate < before, "{} {before}", cc.rate);
        // The rate halved and the queue stayed: not ours. The competitive mode starts well
        // before the compete window's 100 ms.
        assert_eq!(cc.mode, Mode::Compete, "after {} ms", t / 1000);
        assert!(t < 60_000, "{t}");
        assert_eq!(cc.compete_entries, 1);
        let r = cc.rate;
        t += 1000;
        cc.on_rtt(at(t), Duration::from_micros(900), true);
        assert!(cc.rate >= r, "no delay cuts in the competitive mode");
        // One sample near the base RTT between high ones (a lucky ACK beside a standing
        // queue) does not end it ...
        t += 100;
        cc.on_rtt(at(t), Duration::from_micros(110), true);
        assert_eq!(cc.mode, Mode::Compete);
        t += 100;
        cc.on_rtt(at(t), Duration::from_micros(900), true);
        // ... a millisecond of low samples does.
        for _ in 0..11 {
            t += 100;
            cc.on_rtt(at(t), Duration::from_micros(110), true);
        }
        assert_eq!(cc.mode, Mode::Delay);
    }

    /// A queue of our own shrinks when we cut: the controller stays delay-based.
    #[test]
    fn cuts_that_drain_our_own_queue_stay_delay_based() {
        let mut cc = Cc {
            enabled: true,
            rate: 300e6,
            mode: Mode::Delay,
            srtt: Some(1000),
            min_rtt: Some(100),
            ..Cc::default()
        };
        let mut t = 10_000;
        // A 250 MB/s bottleneck with 1.1 ms queued: it fills at what we send over its rate
        // and drains at what we send under it.
        let link = 250e6;
        let mut queued = 1.1e-3 * link;
        for _ in 0..2000 {
            t += 100;
            queued = (queued + (cc.rate - link) * 100e-6).clamp(0.0, 262_144.0);
            let q = (queued / link * 1e6) as u64;
            cc.on_rtt(at(t), Duration::from_micros(100 + q), true);
        }
        assert_eq!(cc.mode, Mode::Delay, "{}", cc.rate);
        assert_eq!(cc.compete_entries, 0);
        assert!(cc.cuts_delay > 0);
    }

    /// Random loss: at an empty queue a loss cuts nothing; where loss is the signal (the
    /// competitive mode) a loss in every round cuts once per loss epoch, and the additive
    /// increase in between holds the rate.
    #[test]
    fn random_loss_costs_at_most_a_cut_per_epoch() {
        let mut cc = Cc {
            enabled: true,
            rate: 200e6,
            mode: Mode::Delay,
            srtt: Some(300),
            min_rtt: Some(100),
            ..Cc::default()
        };
        let mut t = 1_000_000;
        for _ in 0..1000 {
            t += 300;
            cc.on_rtt(at(t), Duration::from_micros(150), true);
            cc.on_loss(at(t + 10));
        }
        assert_eq!(cc.cuts_loss, 0);
        assert!(cc.rate >= 200e6, "{}", cc.rate);
        assert_eq!(cc.losses_ignored, 1000);
        cc.mode = Mode::Compete;
        cc.rate = 200e6;
        let start = t;
        // A userspace hop's jitter: every sample 260 µs over the base (the relay's, measured
        // srtt 360 µs), no queue of ours.
        for _ in 0..2778 {
            t += 360;
            cc.on_rtt(at(t), Duration::from_micros(360), true);
            cc.on_loss(at(t + 10));
        }
        // One second: one cut per 20 ms at most.
        let secs = (t - start) as f64 * 1e-6;
        assert!(
            cc.cuts_loss as f64 <= secs / 0.020 + 1.0,
            "{}",
            cc.cuts_loss
        );
        assert!(cc.cuts_loss >= 40, "{}", cc.cuts_loss);
        assert!(
            cc.rate >= 125e6,
            "below half the 2 Gbit/s link: {}",
            cc.rate
        );
    }

    /// Off (the stack's default), no signal moves the rate: the QP stays unpaced.
    #[test]
    fn a_disabled_controller_never_paces() {
        let mut cc = Cc::default();
        assert!(!cc.enabled);
        cc.on_rtt(at(100), Duration::from_micros(50), true);
        cc.on_delivered(at(100), 0);
        cc.on_delivered(at(400), 100_000);
        cc.on_rtt(at(500), Duration::from_micros(900), true);
        cc.on_loss(at(600));
        cc.on_tail_loss(at(700));
        cc.on_cnp(at(800));
        assert!(!cc.paced(), "{}", cc.rate);
        assert!(cc.may_send(at(800)).is_ok());
        assert_eq!((cc.cuts_loss, cc.cuts_delay, cc.cuts_cnp), (0, 0, 0));
    }

    /// Loss and CNPs cut at most once a round.
    #[test]
    fn loss_and_cnp_cut_once_a_round() {
        let mut cc = Cc {
            enabled: true,
            rate: 1e9,
            mode: Mode::Delay,
            srtt: Some(100),
            min_rtt: Some(100),
            last_rtt: Some(100),
            last_sample_at: Some(at(900)),
            ..Cc::default()
        };
        // A loss (or a timeout) at an empty queue is no congestion.
        cc.on_loss(at(950));
        assert_eq!(cc.cuts_loss, 0);
        cc.last_rtt = Some(400);
        cc.on_loss(at(1000));
        assert!((cc.rate - 0.7e9).abs() < 1.0);
        cc.on_loss(at(1050));
        assert!((cc.rate - 0.7e9).abs() < 1.0, "second cut in one round");
        cc.on_cnp(at(1200));
        assert!(cc.rate < 0.7e9 * 0.6, "{}", cc.rate);
        assert_eq!((cc.cuts_loss, cc.cuts_cnp), (1, 1));
    }
}
