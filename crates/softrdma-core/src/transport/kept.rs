//! Request packets an RC responder keeps after a hole (issue 21).
//!
//! The IBTA responder (and rxe's) drops every request past a missing PSN and NAKs once; the
//! requester then re-sends everything from the hole, into the same full queue that lost it.
//! Ours keeps what arrives past the hole, as copies of the packets in PSN order, and runs
//! them when the hole fills, exactly as if they had arrived in order: nothing a kept packet
//! would change happens before its turn (it is only bytes here).
//!
//! Bounded per QP by [`KEPT_BYTES_MAX`] bytes of packets: an arrival that does not fit is
//! dropped as the IBTA responder drops it (the requester's go-back re-sends it), unless it
//! comes before the highest kept packet, which is then dropped instead (what is nearest the
//! hole runs first and is worth the most).

use std::collections::VecDeque;

use softrdma_wire::roce::Psn;

/// The most bytes of request packets (whole RoCE payloads of the UDP datagrams: headers,
/// payload and ICRC) one QP's responder keeps past a hole: 1 MiB, about 1000 packets at the
/// RoCE path MTU of a plain Ethernet link (1024), 250 at 4096. A window's worth at the
/// 2 Gbit/s of the narrow-link measurements (about 0.6 MB in flight), and a bound on what a
/// peer can make us hold: QPs × 1 MiB at worst.
pub const KEPT_BYTES_MAX: usize = 1 << 20;

/// What [`KeptRequests::keep`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Kept; `evicted`: the highest kept packet was dropped to make room (the bound).
    Kept { evicted: bool },
    /// A packet with this PSN is already kept: this copy is dropped.
    Duplicate,
    /// Dropped: it does not fit in the bound and nothing kept is higher.
    Overflow,
}

/// One kept request packet.
#[derive(Clone, Debug)]
struct KeptPacket {
    psn: Psn,
    bytes: Vec<u8>,
}

/// Request packets that arrived past the expected PSN, in PSN order, no two with one PSN.
#[derive(Clone, Debug, Default)]
pub struct KeptRequests {
    packets: VecDeque<KeptPacket>,
    bytes: usize,
}

impl KeptRequests {
    /// Keeps a copy of `packet` (PSN `psn`, ahead of `epsn` by less than 2^23, as every kept
    /// packet is: their order is their distance from `epsn`).
    pub fn keep(&mut self, epsn: Psn, psn: Psn, packet: &[u8]) -> Keep {
        let ahead = |p: Psn| p.distance(epsn);
        // Packets mostly arrive in order: search from the back.
        let at = self
            .packets
            .iter()
            .rposition(|k| ahead(k.psn) <= ahead(psn))
            .map_or(0, |i| i + 1);
        if at > 0 && self.packets[at - 1].psn == psn {
            return Keep::Duplicate;
        }
        let mut evicted = false;
        while self.bytes + packet.len() > KEPT_BYTES_MAX {
            // Room is made only by dropping packets above this one.
            if self.packets.len() <= at {
                return Keep::Overflow;
            }
            if let Some(k) = self.packets.pop_back() {
                self.bytes -= k.bytes.len();
                evicted = true;
            }
        }
        self.bytes += packet.len();
        self.packets.insert(
            at,
            KeptPacket {
                psn,
                bytes: packet.to_vec(),
            },
        );
        Keep::Kept { evicted }
    }

    /// The kept packet with PSN `epsn`, if there is one, taken out; kept packets before
    /// `epsn` (a copy that arrived in sequence ran instead) are forgotten on the way.
    pub fn take(&mut self, epsn: Psn) -> Option<Vec<u8>> {
        while let Some(front) = self.packets.front() {
            if front.psn.is_after(epsn) {
                return None;
            }
            let k = self.packets.pop_front()?;
            self.bytes -= k.bytes.len();
            if k.psn == epsn {
                return Some(k.bytes);
            }
        }
        None
    }

    /// Whether a packet with PSN `psn` is kept.
    pub fn contains(&self, psn: Psn) -> bool {
        self.packets.iter().any(|k| k.psn == psn)
    }

    /// How many packets are kept.
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// Forgets everything (the QP left service or failed).
    pub fn clear(&mut self) {
        self.packets.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_in_psn_order_and_takes_in_sequence() {
        let mut k = KeptRequests::default();
        let e = Psn::new(0x00ff_fffe);
        assert_eq!(k.keep(e, e.add(3), &[3]), Keep::Kept { evicted: false });
        assert_eq!(k.keep(e, e.add(1), &[1]), Keep::Kept { evicted: false });
        assert_eq!(k.keep(e, e.add(3), &[3]), Keep::Duplicate);
        assert_eq!(k.take(e), None);
        assert_eq!(k.take(e.add(1)), Some(vec![1]));
        assert_eq!(k.take(e.add(2)), None);
        assert_eq!(k.take(e.add(3)), Some(vec![3]));
        assert!(k.is_empty());
    }

    #[test]
    fn the_bound_drops_the_highest_or_the_arrival() {
        let mut k = KeptRequests::default();
        let e = Psn::new(10);
        let big = vec![0u8; KEPT_BYTES_MAX / 2];
        assert_eq!(k.keep(e, e.add(2), &big), Keep::Kept { evicted: false });
        assert_eq!(k.keep(e, e.add(3), &big), Keep::Kept { evicted: false });
        assert_eq!(k.keep(e, e.add(4), &big), Keep::Overflow);
        assert_eq!(k.keep(e, e.add(1), &big), Keep::Kept { evicted: true });
        assert!(k.contains(e.add(1)) && k.contains(e.add(2)) && !k.contains(e.add(3)));
        assert_eq!(k.len(), 2);
    }
}
