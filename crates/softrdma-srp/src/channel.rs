//! The life of an RDMA channel (`enum rdma_ch_state` of ib_srpt.h and `srpt_set_ch_state`):
//! CONNECTING → LIVE → DISCONNECTING → DRAINING → DISCONNECTED, only ever forward. A state
//! may be skipped (a channel that never went live is closed from CONNECTING), never revisited.

use std::fmt;

/// A channel's state, in ib_srpt's numeric order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChannelState {
    /// The REP is out; waiting for the RTU (ESTABLISHED). IUs that arrive wait.
    Connecting,
    /// Established: IUs are processed.
    Live,
    /// A DREQ was sent (or answered with a DREP); no new IUs are taken.
    Disconnecting,
    /// The QP is in ERR and its work requests are being flushed.
    Draining,
    /// Flushed: the channel's resources and CM id are released.
    Disconnected,
}

impl ChannelState {
    /// `get_ch_state_name`.
    pub fn name(self) -> &'static str {
        match self {
            ChannelState::Connecting => "connecting",
            ChannelState::Live => "live",
            ChannelState::Disconnecting => "disconnecting",
            ChannelState::Draining => "draining",
            ChannelState::Disconnected => "disconnected",
        }
    }

    /// `srpt_set_ch_state`: moves to `new` if it lies ahead; whether it moved.
    pub fn advance(&mut self, new: ChannelState) -> bool {
        if new > *self {
            *self = new;
            true
        } else {
            false
        }
    }
}

impl fmt::Display for ChannelState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Takes every completion off `cq` in batches of 64 into `buf` (reused between calls, so a
/// poll allocates nothing) and hands each to `f`; returns how many there were. The initiator
/// and the target drain their CQs the same way.
pub(crate) fn drain_cq(
    stack: &mut softrdma_core::Stack,
    cq: softrdma_core::verbs::CqId,
    buf: &mut Vec<softrdma_core::verbs::WorkCompletion>,
    mut f: impl FnMut(&mut softrdma_core::Stack, &softrdma_core::verbs::WorkCompletion),
) -> usize {
    let mut n = 0;
    loop {
        buf.clear();
        if stack.verbs.poll_cq_into(cq, buf, 64).unwrap_or(0) == 0 {
            return n;
        }
        for wc in buf.iter() {
            n += 1;
            f(stack, wc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ChannelState as S;

    #[test]
    fn forward_only() {
        let all = [
            S::Connecting,
            S::Live,
            S::Disconnecting,
            S::Draining,
            S::Disconnected,
        ];
        for (i, from) in all.iter().enumerate() {
            for (j, to) in all.iter().enumerate() {
                let mut s = *from;
                assert_eq!(s.advance(*to), j > i, "{from} -> {to}");
                assert_eq!(s, if j > i { *to } else { *from });
            }
        }
        // Skipping is allowed: a channel closed before it went live.
        let mut s = S::Connecting;
        assert!(s.advance(S::Draining));
        assert!(!s.advance(S::Live));
        assert_eq!(s.to_string(), "draining");
    }
}
