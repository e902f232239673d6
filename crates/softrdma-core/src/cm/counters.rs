//! The CM's counters: cm.c's four counter groups per message type, as the kernel shows them
//! in sysfs (`/sys/class/infiniband/<dev>/ports/<n>/cm_tx_msgs/req`, ...), plus two of ours.
//!
//! Counting rules (cm.c):
//! - `cm_rx_msgs`: every received MAD with a CM message's attribute ID, before anything
//!   looks at it (`cm_recv_handler`).
//! - `cm_tx_msgs` / `cm_tx_retries`: at the send's completion, not when it is posted
//!   (`cm_send_handler`): `1 + retries` transmissions and `retries` retransmissions of that
//!   send; a REQ answered by a REP is counted when the REP cancels it. A message sent in
//!   answer to a received one with no id behind the send (`cm_alloc_response_msg`: the MRA
//!   or RTU resent for a duplicate, the DREP for a DREQ) other than a REJ counts as if it
//!   had been retransmitted once: 2 transmissions, 1 retry.
//! - `cm_rx_duplicates`: where a handler recognises a duplicate (see the state table).

use std::fmt;

use softrdma_wire::cm::AttrId;

/// cm.c's counter groups.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CmCounterGroup {
    TxMsgs,
    TxRetries,
    RxMsgs,
    RxDuplicates,
}

impl CmCounterGroup {
    pub const ALL: [CmCounterGroup; 4] = [
        CmCounterGroup::TxMsgs,
        CmCounterGroup::TxRetries,
        CmCounterGroup::RxMsgs,
        CmCounterGroup::RxDuplicates,
    ];

    /// `counter_group_names`.
    pub const fn name(self) -> &'static str {
        match self {
            CmCounterGroup::TxMsgs => "cm_tx_msgs",
            CmCounterGroup::TxRetries => "cm_tx_retries",
            CmCounterGroup::RxMsgs => "cm_rx_msgs",
            CmCounterGroup::RxDuplicates => "cm_rx_duplicates",
        }
    }
}

/// The per-message counter names (`cm_counter_default_attrs`), in attribute-ID order
/// 0x10..=0x1a.
pub const CM_COUNTER_ATTRS: [&str; 11] = [
    "req", "mra", "rej", "rep", "rtu", "dreq", "drep", "sidr_req", "sidr_rep", "lap", "apr",
];

/// The counters of one CM (all its ports together).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct CmCounters {
    groups: [[u64; 11]; 4],
    /// Received messages that no id in a state that takes them wanted (ours).
    pub rx_dropped: u64,
    /// CM MADs that did not parse (ours).
    pub rx_malformed: u64,
    /// REQs (and SIDR REQs) dropped without an answer because
    /// [`super::CmConfig::half_open_limit`] ids were waiting for the user's answer (ours).
    pub half_open_drops: u64,
}

impl CmCounters {
    fn idx(a: AttrId) -> Option<usize> {
        (0x10..=0x1a)
            .contains(&a.0)
            .then(|| usize::from(a.0 - 0x10))
    }

    /// One counter.
    pub fn group(&self, g: CmCounterGroup, a: AttrId) -> u64 {
        Self::idx(a)
            .and_then(|i| self.groups[g as usize].get(i))
            .copied()
            .unwrap_or(0)
    }

    pub(super) fn add(&mut self, g: CmCounterGroup, a: AttrId, n: u64) {
        if let Some(x) = Self::idx(a).and_then(|i| self.groups[g as usize].get_mut(i)) {
            *x += n;
        }
    }

    /// `cm_tx_msgs`: transmissions of this message, retransmissions included.
    pub fn tx(&self, a: AttrId) -> u64 {
        self.group(CmCounterGroup::TxMsgs, a)
    }
    /// `cm_tx_retries`.
    pub fn retries(&self, a: AttrId) -> u64 {
        self.group(CmCounterGroup::TxRetries, a)
    }
    /// `cm_rx_msgs`.
    pub fn rx(&self, a: AttrId) -> u64 {
        self.group(CmCounterGroup::RxMsgs, a)
    }
    /// `cm_rx_duplicates`.
    pub fn dup(&self, a: AttrId) -> u64 {
        self.group(CmCounterGroup::RxDuplicates, a)
    }
    /// The sum of `cm_tx_retries` over all messages.
    pub fn total_retries(&self) -> u64 {
        self.groups[CmCounterGroup::TxRetries as usize].iter().sum()
    }

    /// The counter called `name`: `"cm_tx_msgs/req"` style (group/message, as in sysfs),
    /// or `"rx_dropped"` / `"rx_malformed"` / `"half_open_drops"`. `None` for an unknown name.
    pub fn get(&self, name: &str) -> Option<u64> {
        match name {
            "rx_dropped" => return Some(self.rx_dropped),
            "rx_malformed" => return Some(self.rx_malformed),
            "half_open_drops" => return Some(self.half_open_drops),
            _ => {}
        }
        let (g, a) = name.split_once('/')?;
        let g = CmCounterGroup::ALL.into_iter().find(|x| x.name() == g)?;
        let i = CM_COUNTER_ATTRS.iter().position(|x| *x == a)?;
        Some(self.groups[g as usize][i])
    }

    /// Every counter as (name, value): the groups in order, each message in attribute-ID
    /// order, then ours.
    pub fn iter(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        CmCounterGroup::ALL
            .into_iter()
            .flat_map(move |g| {
                CM_COUNTER_ATTRS
                    .iter()
                    .enumerate()
                    .map(move |(i, a)| (format!("{}/{a}", g.name()), self.groups[g as usize][i]))
            })
            .chain([
                ("rx_dropped".to_string(), self.rx_dropped),
                ("rx_malformed".to_string(), self.rx_malformed),
                ("half_open_drops".to_string(), self.half_open_drops),
            ])
    }
}

impl fmt::Display for CmCounters {
    /// `name value` per line, like the device counters.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::device::write_name_value_lines(f, self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_by_name() {
        let mut c = CmCounters::default();
        c.add(CmCounterGroup::TxRetries, AttrId::REQ, 2);
        c.add(CmCounterGroup::RxDuplicates, AttrId::DREQ, 1);
        c.rx_dropped = 3;
        assert_eq!(c.get("cm_tx_retries/req"), Some(2));
        assert_eq!(c.get("cm_rx_duplicates/dreq"), Some(1));
        assert_eq!(c.get("cm_rx_msgs/apr"), Some(0));
        assert_eq!(c.get("rx_dropped"), Some(3));
        assert_eq!(c.get("cm_tx_msgs/nonsense"), None);
        assert_eq!(c.get("nonsense"), None);
        assert_eq!(c.iter().count(), 4 * 11 + 3);
        assert!(c.to_string().contains("cm_tx_retries/req 2\n"));
        assert_eq!(c.total_retries(), 2);
        c.add(CmCounterGroup::TxMsgs, AttrId::CLASS_PORT_INFO, 1);
        assert_eq!(c.tx(AttrId::CLASS_PORT_INFO), 0);
    }
}
