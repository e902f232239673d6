//! The bytes of a registered memory region.
//!
//! An MR's bytes are a heap vector, except for large zero-filled regions (a memory LUN's
//! medium, 256 MiB in `softrdma perf srp`): those are an anonymous mapping advised for
//! transparent huge pages. In 4 KiB pages, every 4 KiB packet placed into such a region
//! touched a page the TLB had not seen, and under a hypervisor's nested paging each miss is
//! a two-dimensional page walk: with huge pages the SRP target's copy of 1 MiB writes into
//! the medium took half the time (`docs/measurements.md`, session 6).
//!
//! Linux's default THP policy ("madvise") backs only regions that ask; without THP, or
//! where the mapping is refused, the region is a heap vector as before.
//!
//! An MR may also sit on memory it does not own ([`Memory::external`]): the application's own
//! buffer behind a C ABI (`softrdma-verbs`' `ibv_reg_mr`), reached through an
//! [`ExternalMemory`] window that the owner of that memory implements. This crate and the
//! core stay free of `unsafe`; the window's implementation carries it.

#![forbid(unsafe_code)]

use std::fmt;
use std::ops::{Deref, DerefMut};

use memmap2::{Advice, MmapMut};

/// The size of a huge page on x86-64 and arm64 (4 KiB base pages): regions below this gain
/// nothing from a mapping of their own.
pub const HUGE_PAGE: usize = 2 << 20;

/// An MR's bytes.
pub struct Memory(Inner);

enum Inner {
    Heap(Vec<u8>),
    Mapped(MmapMut),
    External(Box<dyn ExternalMemory>),
}

/// Bytes an MR reaches but does not own: a bounds-checked window on memory someone else
/// holds (an application's buffer registered through the C ABI). Each call hands out the
/// whole window for the duration of one access; the device copies into or out of it and lets
/// go, as a NIC's DMA engine touches registered memory only while it moves data.
pub trait ExternalMemory: Send + Sync {
    /// The window's bytes.
    fn bytes(&self) -> &[u8];
    /// The window's bytes, mutably.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl Memory {
    /// `len` zero bytes: a mapping advised for huge pages from [`HUGE_PAGE`] on, else (or
    /// when the mapping is refused) a heap vector.
    pub fn zeroed(len: usize) -> Memory {
        if len >= HUGE_PAGE {
            if let Ok(m) = MmapMut::map_anon(len) {
                // Advice only: a kernel without THP refuses it, and the mapping still works.
                let _ = m.advise(Advice::HugePage);
                return Memory(Inner::Mapped(m));
            }
        }
        Memory(Inner::Heap(vec![0; len]))
    }

    /// An MR on memory it does not own (see [`ExternalMemory`]).
    pub fn external(window: Box<dyn ExternalMemory>) -> Memory {
        Memory(Inner::External(window))
    }

    /// Whether the bytes are an [`ExternalMemory`] window.
    pub fn is_external(&self) -> bool {
        matches!(self.0, Inner::External(_))
    }

    /// Whether the bytes are a mapping advised for huge pages.
    pub fn is_mapped(&self) -> bool {
        matches!(self.0, Inner::Mapped(_))
    }

    /// The bytes as a vector (a copy for a mapping).
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Inner::Heap(v) => v,
            Inner::Mapped(m) => m.to_vec(),
            Inner::External(w) => w.bytes().to_vec(),
        }
    }
}

impl From<Vec<u8>> for Memory {
    fn from(v: Vec<u8>) -> Memory {
        Memory(Inner::Heap(v))
    }
}

impl Default for Memory {
    fn default() -> Memory {
        Memory(Inner::Heap(Vec::new()))
    }
}

impl Deref for Memory {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Inner::Heap(v) => v,
            Inner::Mapped(m) => m,
            Inner::External(w) => w.bytes(),
        }
    }
}

impl DerefMut for Memory {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Inner::Heap(v) => v,
            Inner::Mapped(m) => m,
            Inner::External(w) => w.bytes_mut(),
        }
    }
}

impl Clone for Memory {
    /// The same bytes in memory of the same kind; a copy of an [`ExternalMemory`] window is
    /// owned memory holding its bytes (a snapshot: the copy no longer reaches the original).
    fn clone(&self) -> Memory {
        match &self.0 {
            Inner::Heap(v) => Memory(Inner::Heap(v.clone())),
            Inner::External(w) => Memory(Inner::Heap(w.bytes().to_vec())),
            Inner::Mapped(_) => {
                let mut m = Memory::zeroed(self.len());
                m.copy_from_slice(self);
                m
            }
        }
    }
}

impl PartialEq for Memory {
    fn eq(&self, other: &Memory) -> bool {
        **self == **other
    }
}

impl Eq for Memory {}

impl PartialEq<[u8]> for Memory {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl PartialEq<Vec<u8>> for Memory {
    fn eq(&self, other: &Vec<u8>) -> bool {
        **self == **other
    }
}

impl fmt::Debug for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memory")
            .field("len", &self.len())
            .field("mapped", &self.is_mapped())
            .field("external", &self.is_external())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_regions_stay_on_the_heap_and_large_ones_are_mapped_zeroed() {
        let small = Memory::zeroed(4096);
        assert!(!small.is_mapped());
        assert_eq!(small.len(), 4096);
        let mut big = Memory::zeroed(2 * HUGE_PAGE + 4096);
        assert!(
            big.is_mapped(),
            "an anonymous mapping is refused only without memory"
        );
        assert_eq!(big.len(), 2 * HUGE_PAGE + 4096);
        assert!(big.iter().all(|&b| b == 0));
        big[HUGE_PAGE + 7] = 0xa5;
        let c = big.clone();
        assert!(c.is_mapped());
        assert_eq!(c, big);
        let v = big.into_vec();
        assert_eq!(v[HUGE_PAGE + 7], 0xa5);
        assert_eq!(Memory::from(v.clone()), v);
        assert!(Memory::default().is_empty());
    }

    /// A window over bytes held elsewhere (here a vector standing in for an application's
    /// buffer).
    struct Window(Vec<u8>);

    impl ExternalMemory for Window {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
        fn bytes_mut(&mut self) -> &mut [u8] {
            &mut self.0
        }
    }

    #[test]
    fn external_windows_are_read_and_written_in_place_and_clone_to_owned_bytes() {
        let mut m = Memory::external(Box::new(Window(vec![1, 2, 3, 4])));
        assert!(m.is_external() && !m.is_mapped());
        assert_eq!(m.len(), 4);
        m[2] = 9;
        assert_eq!(&m[..], &[1, 2, 9, 4]);
        let c = m.clone();
        assert!(!c.is_external());
        assert_eq!(c, m);
        m[0] = 7;
        assert_ne!(c, m, "a clone is a snapshot, not the window");
        assert_eq!(m.into_vec(), vec![7, 2, 9, 4]);
    }
}
