//! Named drop and error counters, the software twin of rxe's hw counters
//! (`rdma statistic show`, drivers/infiniband/sw/rxe/rxe_hw_counters.c) plus one counter per
//! reason the receive path drops a packet, so that a hostile or broken peer's traffic is
//! visible: every drop increments exactly one of the `drop_*` counters.

use core::fmt;

macro_rules! counters {
    ($( $(#[$doc:meta])* $field:ident ),* $(,)?) => {
        /// The device's counters. Field names are the names [`Counters::get`] and
        /// [`Counters::iter`] use.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct Counters {
            $( $(#[$doc])* pub $field: u64, )*
        }

        impl Counters {
            /// Every counter name, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$( stringify!($field) ),*];

            /// The counter called `name`; `None` for an unknown name.
            pub fn get(&self, name: &str) -> Option<u64> {
                match name {
                    $( stringify!($field) => Some(self.$field), )*
                    _ => None,
                }
            }

            /// All counters as (name, value), in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$( (stringify!($field), self.$field) ),*].into_iter()
            }
        }
    };
}

counters! {
    /// Packets handed to the driver for sending (rxe `sent_pkts`).
    sent_pkts,
    /// Packets received and accepted by a QP (rxe `rcvd_pkts`).
    rcvd_pkts,
    /// Duplicate RC requests the responder saw (rxe `duplicate_request`).
    duplicate_request,
    /// RC requests with a PSN ahead of the expected one (rxe `out_of_seq_request`).
    out_of_seq_request,
    /// Of those, kept by the responder until the hole before them filled (issue 21;
    /// `transport::kept`), instead of dropped as rxe drops them.
    kept_requests,
    /// Out-of-sequence requests the responder could not keep (its per-QP bound was full):
    /// dropped as rxe drops them, or a higher kept one dropped to make room.
    kept_overflow,
    /// RNR NAKs received (rxe `rcvd_rnr_err`).
    rcvd_rnr_err,
    /// RNR NAKs sent (rxe `send_rnr_err`).
    send_rnr_err,
    /// PSN sequence error NAKs received (rxe `rcvd_seq_err`).
    rcvd_seq_err,
    /// Transport retries exhausted (rxe `retry_exceeded_err`).
    retry_exceeded_err,
    /// RNR retries exhausted (rxe `retry_rnr_exceeded_err`).
    retry_rnr_exceeded_err,
    /// Sends that failed locally (rxe `send_err`).
    send_err,
    /// Local ACK timeouts that fired with packets outstanding (each a go-back-N retry).
    ack_timeouts,
    /// Tail-loss probes sent (a quiet requester with packets outstanding re-sends its
    /// oldest unacknowledged packet asking for an ACK, well before the ACK timeout).
    tail_probes,
    /// Go-back-N retransmissions started by a probe's answer (the packets after the
    /// acknowledged point were lost) rather than by a NAK or the timeout.
    fast_retransmits,
    /// Request packets sent again (any retransmission).
    retransmitted_pkts,
    /// Request packets a go-back-N did not send again because an ACK (or READ response)
    /// that came during it covered them: the responder had kept them.
    skipped_resends,
    /// Times the pacer held a requester back (its next packet was not yet due).
    paced_waits,
    /// Request packets that arrived marked CE (congestion control on; `transport::ecn`).
    rcvd_ce,
    /// CNPs sent in answer to CE marks (at most one per QP per 50 µs).
    sent_cnp,
    /// CNPs taken to a QP's congestion controller (DCQCN's reaction).
    rcvd_cnp,
    /// Dropped: a CNP for a QP that never sent ECT (congestion control off, not RC, not
    /// sending) — or whose P_Key matches nothing.
    drop_cnp,
    /// Dropped: the ICRC did not match (rxe drops these silently after counting).
    drop_bad_icrc,
    /// Dropped: the ICRC could not be verified (no IP header available and no IPv4 ID
    /// solves it).
    drop_unverified_icrc,
    /// Dropped: too short or malformed headers (BTH/DETH/RETH/... did not parse).
    drop_malformed,
    /// Dropped: BTH transport header version not 0.
    drop_bad_tver,
    /// Dropped: opcode unknown or not valid for the destination QP's type.
    drop_bad_opcode,
    /// Dropped: destination QPN names no QP (rxe `hdr_check`: "no qp matches qpn").
    drop_unknown_qpn,
    /// Dropped: the destination QP is in a state that does not receive (RESET/INIT/ERR).
    drop_qp_state,
    /// Dropped: the P_Key matches no P_Key table entry (port `bad_pkey_cntr`).
    drop_bad_pkey,
    /// Dropped: the DETH Q_Key differs from the QP's (GSI: 0x80010000; port
    /// `qkey_viol_cntr`).
    drop_bad_qkey,
    /// Dropped: PSN outside the window the QP accepts.
    drop_psn_out_of_window,
    /// Dropped: payload larger than the path MTU / the receive buffer allows.
    drop_oversized_payload,
    /// Dropped: the destination GID is not one of this port's GIDs.
    drop_bad_dgid,
    /// Dropped: a UD packet with no posted receive WR (UD drops silently; RC sends RNR).
    drop_no_recv_wqe,
}

impl Counters {
    /// The sum of all `drop_*` counters.
    pub fn total_drops(&self) -> u64 {
        self.iter()
            .filter(|(n, _)| n.starts_with("drop_"))
            .map(|(_, v)| v)
            .sum()
    }
}

impl fmt::Display for Counters {
    /// `name value` per line, like `rdma statistic show` with one counter per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_name_value_lines(f, self.iter())
    }
}

/// Writes counters as `name value`, one a line: the text form every counter set shares (the
/// device's and the CM's), so that one parser reads them all.
pub(crate) fn write_name_value_lines<N: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    counters: impl IntoIterator<Item = (N, u64)>,
) -> fmt::Result {
    for (n, v) in counters {
        writeln!(f, "{n} {v}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_by_name() {
        let mut c = Counters::default();
        c.drop_bad_icrc += 3;
        c.drop_bad_qkey += 1;
        c.drop_unknown_qpn += 2;
        assert_eq!(c.get("drop_bad_icrc"), Some(3));
        assert_eq!(c.get("drop_bad_qkey"), Some(1));
        assert_eq!(c.get("sent_pkts"), Some(0));
        assert_eq!(c.get("nonsense"), None);
        assert_eq!(c.total_drops(), 6);
        assert_eq!(c.iter().count(), Counters::NAMES.len());
        assert!(c.to_string().contains("drop_unknown_qpn 2\n"));
    }

    #[test]
    fn names_are_unique() {
        let mut n = Counters::NAMES.to_vec();
        n.sort_unstable();
        n.dedup();
        assert_eq!(n.len(), Counters::NAMES.len());
    }
}
