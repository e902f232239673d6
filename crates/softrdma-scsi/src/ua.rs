//! Unit attention conditions of one I_T nexus on one LUN (LIO keeps them on the
//! `se_dev_entry`, `target_core_ua.c`).

use softrdma_wire::scsi::AscAscq;

/// Pending unit attentions, highest precedence first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct UaQueue {
    pending: Vec<AscAscq>,
}

/// SAM-5 §5.14 precedence, the list LIO's `core_scsi3_ua_allocate` quotes: the 29h family
/// (POWER ON, RESET, OR BUS DEVICE RESET OCCURRED first, then in ASCQ order: POWER ON, SCSI
/// BUS RESET, BUS DEVICE RESET FUNCTION, DEVICE INTERNAL RESET, ..., I_T NEXUS LOSS) before
/// all others, which keep their arrival order.
fn rank(a: AscAscq) -> (u8, u8) {
    if a.asc() == 0x29 {
        (0, a.ascq())
    } else {
        (1, 0)
    }
}

impl UaQueue {
    /// Establishes a condition; one already pending is not queued twice (as LIO).
    pub fn push(&mut self, a: AscAscq) {
        if self.pending.contains(&a) {
            return;
        }
        let r = rank(a);
        let at = self
            .pending
            .iter()
            .position(|p| rank(*p) > r)
            .unwrap_or(self.pending.len());
        self.pending.insert(at, a);
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Reports the highest-precedence condition and clears them all: what LIO does with
    /// UA_INTLCK_CTRL 00b in both `core_scsi3_ua_for_check_condition` and
    /// `core_scsi3_ua_clear_for_request_sense` (the loop frees every entry, reporting the
    /// head).
    pub fn take(&mut self) -> Option<AscAscq> {
        let head = self.pending.first().copied();
        self.pending.clear();
        head
    }

    pub fn pending(&self) -> &[AscAscq] {
        &self.pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_and_dedup() {
        let mut q = UaQueue::default();
        q.push(AscAscq::REPORTED_LUNS_DATA_HAS_CHANGED);
        q.push(AscAscq::new(0x29, 0x03));
        q.push(AscAscq::MODE_PARAMETERS_CHANGED);
        q.push(AscAscq::POWER_ON_RESET);
        q.push(AscAscq::new(0x29, 0x03));
        assert_eq!(
            q.pending(),
            &[
                AscAscq::POWER_ON_RESET,
                AscAscq::new(0x29, 0x03),
                AscAscq::REPORTED_LUNS_DATA_HAS_CHANGED,
                AscAscq::MODE_PARAMETERS_CHANGED,
            ]
        );
        assert_eq!(q.take(), Some(AscAscq::POWER_ON_RESET));
        assert!(q.is_empty());
        assert_eq!(q.take(), None);
    }
}
