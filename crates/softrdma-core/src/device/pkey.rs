//! Partition keys and the port's P_Key table.
//!
//! A P_Key is 16 bits: bit 15 is the membership type (1 = full, 0 = limited), bits 0..14
//! the partition. Two keys match (IBTA 10.9.3, rxe's `pkey_match` in rxe_recv.c) when their
//! partitions are equal and non-zero and at least one of them is a full member. rxe (6.1)
//! has a one-entry table holding the default key 0xFFFF (`RXE_PORT_PKEY_TBL_LEN` = 1).

use core::fmt;

/// A partition key.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pkey(pub u16);

impl Pkey {
    /// The default partition, full member (`IB_DEFAULT_PKEY_FULL`).
    pub const DEFAULT_FULL: Pkey = Pkey(0xffff);
    /// The default partition, limited member.
    pub const DEFAULT_LIMITED: Pkey = Pkey(0x7fff);
    /// The invalid key that fills unused table slots.
    pub const INVALID: Pkey = Pkey(0);

    /// Bit 15: the membership bit.
    pub const FULL_MEMBER_BIT: u16 = 0x8000;

    /// The partition (low 15 bits).
    pub const fn base(self) -> u16 {
        self.0 & 0x7fff
    }

    /// True for a full member.
    pub const fn is_full_member(self) -> bool {
        self.0 & Self::FULL_MEMBER_BIT != 0
    }

    /// True unless the partition is 0 (an invalid key).
    pub const fn is_valid(self) -> bool {
        self.base() != 0
    }

    /// Whether a packet carrying `self` may be accepted by a port holding `other`.
    pub const fn matches(self, other: Pkey) -> bool {
        self.is_valid()
            && self.base() == other.base()
            && (self.is_full_member() || other.is_full_member())
    }
}

impl fmt::Debug for Pkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pkey({:#06x})", self.0)
    }
}

impl fmt::Display for Pkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#06x}", self.0)
    }
}

/// `RXE_PORT_PKEY_TBL_LEN` in Linux 6.1.
pub const RXE_PKEY_TABLE_LEN: u16 = 1;

/// A port's P_Key table: a fixed number of slots, slot 0 = 0xFFFF, the others invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PkeyTable {
    slots: Vec<Pkey>,
}

impl Default for PkeyTable {
    fn default() -> PkeyTable {
        PkeyTable::new(RXE_PKEY_TABLE_LEN)
    }
}

impl PkeyTable {
    /// A table of `len` slots (at least 1), slot 0 holding the default key.
    pub fn new(len: u16) -> PkeyTable {
        let mut slots = vec![Pkey::INVALID; usize::from(len.max(1))];
        if let Some(first) = slots.first_mut() {
            *first = Pkey::DEFAULT_FULL;
        }
        PkeyTable { slots }
    }

    /// The number of slots (`pkey_tbl_len`).
    pub fn len(&self) -> u16 {
        self.slots.len() as u16
    }

    /// Always false: a table has at least one slot.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The key in a slot (`ibv_query_pkey`); `None` outside the table.
    pub fn get(&self, index: u16) -> Option<Pkey> {
        self.slots.get(usize::from(index)).copied()
    }

    /// Sets a slot (what a subnet manager would do); false outside the table.
    pub fn set(&mut self, index: u16, pkey: Pkey) -> bool {
        match self.slots.get_mut(usize::from(index)) {
            Some(s) => {
                *s = pkey;
                true
            }
            None => false,
        }
    }

    /// The first slot holding exactly `pkey` (`ib_find_pkey`, which prefers a full-member
    /// entry when asked for a full key).
    pub fn find_exact(&self, pkey: Pkey) -> Option<u16> {
        self.slots.iter().position(|&p| p == pkey).map(|i| i as u16)
    }

    /// The first slot a packet carrying `pkey` matches; `None` means "drop, count bad P_Key".
    pub fn find_match(&self, pkey: Pkey) -> Option<u16> {
        self.slots
            .iter()
            .position(|&p| pkey.matches(p))
            .map(|i| i as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_rules() {
        let full = Pkey(0xffff);
        let limited = Pkey(0x7fff);
        assert!(full.matches(full));
        assert!(full.matches(limited));
        assert!(limited.matches(full));
        // Two limited members of one partition may not talk.
        assert!(!limited.matches(limited));
        // Different partitions never match.
        assert!(!Pkey(0x8001).matches(Pkey(0x8002)));
        // Partition 0 is invalid even with the full bit.
        assert!(!Pkey(0x8000).matches(Pkey(0x8000)));
        assert!(!Pkey::INVALID.is_valid());
        assert_eq!(Pkey(0x8123).base(), 0x0123);
    }

    #[test]
    fn default_table() {
        let t = PkeyTable::default();
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(0), Some(Pkey::DEFAULT_FULL));
        assert_eq!(t.get(1), None);
        assert_eq!(t.find_match(Pkey(0xffff)), Some(0));
        assert_eq!(t.find_match(Pkey(0x7fff)), Some(0));
        assert_eq!(t.find_match(Pkey(0x8001)), None);
        assert_eq!(t.find_exact(Pkey(0x7fff)), None);
    }

    #[test]
    fn larger_table() {
        let mut t = PkeyTable::new(64);
        assert_eq!(t.len(), 64);
        assert_eq!(t.get(63), Some(Pkey::INVALID));
        assert!(t.set(5, Pkey(0x8005)));
        assert!(!t.set(64, Pkey(0x8006)));
        assert_eq!(t.find_match(Pkey(0x0005)), Some(5));
        // An invalid key in the packet never matches the invalid (empty) slots.
        assert_eq!(t.find_match(Pkey(0)), None);
        assert_eq!(format!("{:?}", Pkey(0xffff)), "Pkey(0xffff)");
    }
}
