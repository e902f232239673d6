//! The `wr_id` of the engines' work requests: which channel, what for, which slot. Both
//! engines pack it the same way so that a completion names its channel and slot without a
//! lookup table: channel (32 bits) | kind (8) | index (24).

/// What a work request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WrKind {
    /// A receive slot of the channel's ring.
    Recv = 1,
    /// An IU sent (a response, or an initiator's request).
    Send = 2,
    /// An RDMA READ of an I/O's data-out.
    RdmaRead = 3,
    /// An RDMA WRITE of an I/O's data-in.
    RdmaWrite = 4,
    /// The zero-length write whose flushed completion says a closing channel has drained.
    Drain = 5,
}

impl WrKind {
    fn from_bits(b: u64) -> Option<WrKind> {
        Some(match b {
            1 => WrKind::Recv,
            2 => WrKind::Send,
            3 => WrKind::RdmaRead,
            4 => WrKind::RdmaWrite,
            5 => WrKind::Drain,
            _ => return None,
        })
    }
}

/// A work request's identity, packed into its `wr_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WrId {
    pub channel: u32,
    pub kind: WrKind,
    /// The receive slot, send slot or I/O (24 bits: rings are far smaller).
    pub index: u32,
}

impl WrId {
    /// The largest index the packing keeps.
    pub const MAX_INDEX: u32 = 0xff_ffff;

    pub fn new(channel: u32, kind: WrKind, index: u32) -> WrId {
        WrId {
            channel,
            kind,
            index: index & Self::MAX_INDEX,
        }
    }

    pub fn to_u64(self) -> u64 {
        u64::from(self.channel) << 32 | (self.kind as u64) << 24 | u64::from(self.index)
    }

    /// The id a completion carries; `None` for a `wr_id` no engine posted.
    pub fn from_u64(w: u64) -> Option<WrId> {
        Some(WrId {
            channel: (w >> 32) as u32,
            kind: WrKind::from_bits((w >> 24) & 0xff)?,
            index: (w & u64::from(Self::MAX_INDEX)) as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_and_unpacks() {
        for kind in [
            WrKind::Recv,
            WrKind::Send,
            WrKind::RdmaRead,
            WrKind::RdmaWrite,
            WrKind::Drain,
        ] {
            let id = WrId::new(u32::MAX, kind, WrId::MAX_INDEX);
            assert_eq!(WrId::from_u64(id.to_u64()), Some(id));
        }
        assert_eq!(
            WrId::new(7, WrKind::Send, 3).to_u64(),
            7 << 32 | 2 << 24 | 3
        );
        assert_eq!(WrId::from_u64(0), None);
    }
}
