//! Memory regions and the memory model.
//!
//! # The memory model (see also `docs/memory.md`)
//!
//! **An MR owns its bytes.** Registering memory moves a `Vec<u8>` into the device's MR table
//! ([`super::Verbs::reg_mr_with`]) or allocates a zeroed one ([`super::Verbs::reg_mr`]);
//! deregistering gives the `Vec` back. Nothing outside the table holds a reference to those
//! bytes while the MR exists, so there is no pointer to alias.
//!
//! **Every access goes through the table, by key, with a bounds check.** Local access uses
//! the lkey, remote access the rkey, both with an address (iova) and a length, exactly as
//! verbs SGEs `(lkey, addr, length)` and RETHs `(va, rkey, dma_len)` name memory. The check
//! ([`Mr::range`]) computes `addr - iova` and `addr + len` with checked arithmetic and only
//! then slices the MR's own `Vec`: a bad key finds no MR, a bad range is an error, and no
//! arithmetic can produce an index into anything but this MR's bytes. A violation can never
//! touch memory outside the MR — there is no other memory reachable from it.
//!
//! **Aliasing is settled by the borrow checker, not by locks or `unsafe`.** The core is
//! single-threaded and sans-IO: a remote RDMA WRITE is applied inside
//! `handle_datagram(&mut self, ..)`, which holds `&mut` on the table; the owner reads with
//! [`super::Verbs::mr`] / [`Mr::read`] (a `&` borrow) or copies out with
//! [`super::Verbs::local_read`]. The two can never overlap in time. A driver that shares a
//! device between threads puts it behind one `Mutex` (or runs it on one event-loop thread
//! and exchanges messages), which keeps the same guarantee.
//!
//! As with real RDMA, *when* to look at the bytes is the application's business (after the
//! completion that says the peer's WRITE or our RECV landed); the model only guarantees
//! that every look is memory-safe and sees whole, bounds-checked bytes.
//!
//! Posted work requests never hold buffers: they carry SGEs, which are resolved against the
//! table when the transport processes them (a stale or wrong lkey then completes the WR
//! with `LOC_PROT_ERR`, as on hardware).
//!
//! # Keys
//!
//! As rxe (`rxe_mr_init`): `lkey = index << 8 | key_byte`, with the index from the MR pool
//! (starting at 1) and a random key byte; `rkey = lkey` if the MR allows any remote access,
//! else 0 (which no lookup ever matches).
//!
//! # Invalidation (SEND with Invalidate)
//!
//! As in rxe (`rxe_mr.c`), an MR has a type and a state. [`MrType::User`] is what
//! `reg_mr` makes; [`MrType::MemReg`] is a fast-registration MR (`ib_alloc_mr` +
//! `IB_WR_REG_MR`), made here by [`MrTable::register_fast`] in the valid state. Only a
//! `MemReg` MR can be invalidated ([`MrTable::invalidate`], rxe `rxe_invalidate_mr`): by a
//! peer's SEND with Invalidate naming its rkey, or locally. An invalidated MR is
//! [`MrState::Free`]: every device access through its keys fails as an unknown key would
//! (a remote access gets a remote access NAK, an SGE `LOC_PROT_ERR`), until
//! [`MrTable::reregister_fast`] (rxe `rxe_reg_fast_mr`) makes it valid again under a new
//! key byte. The owner's own access to its bytes ([`MrTable::owned`]) and deregistration
//! do not depend on the state.

use core::fmt;
use core::ops::{BitOr, Range};
use std::collections::BTreeMap;

use super::PdId;
use crate::rand::Rng;
pub use softrdma_mem::Memory;

/// `enum ib_access_flags` / `ibv_access_flags` (values as in the verbs ABI).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(pub u32);

impl AccessFlags {
    /// No access beyond local read.
    pub const NONE: AccessFlags = AccessFlags(0);
    /// `IBV_ACCESS_LOCAL_WRITE`: the device may write (receives, READ responses).
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(1);
    /// `IBV_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(2);
    /// `IBV_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: AccessFlags = AccessFlags(4);
    /// `IBV_ACCESS_REMOTE_ATOMIC`.
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(8);
    /// `IBV_ACCESS_MW_BIND`.
    pub const MW_BIND: AccessFlags = AccessFlags(16);
    /// `IBV_ACCESS_ZERO_BASED`.
    pub const ZERO_BASED: AccessFlags = AccessFlags(32);
    /// `IBV_ACCESS_RELAXED_ORDERING` (a hint; accepted and ignored).
    pub const RELAXED_ORDERING: AccessFlags = AccessFlags(1 << 20);

    /// Any remote access (`IB_ACCESS_REMOTE`).
    pub const REMOTE: AccessFlags = AccessFlags(2 | 4 | 8);
    /// Every flag softrdma knows.
    pub const KNOWN: AccessFlags = AccessFlags(1 | 2 | 4 | 8 | 16 | 32 | (1 << 20));

    /// True if every flag of `other` is set.
    pub const fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if any flag of `other` is set.
    pub const fn intersects(self, other: AccessFlags) -> bool {
        self.0 & other.0 != 0
    }
}

impl BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (AccessFlags::LOCAL_WRITE, "LOCAL_WRITE"),
            (AccessFlags::REMOTE_WRITE, "REMOTE_WRITE"),
            (AccessFlags::REMOTE_READ, "REMOTE_READ"),
            (AccessFlags::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
            (AccessFlags::MW_BIND, "MW_BIND"),
            (AccessFlags::ZERO_BASED, "ZERO_BASED"),
            (AccessFlags::RELAXED_ORDERING, "RELAXED_ORDERING"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(fl, _)| self.contains(*fl))
            .map(|(_, n)| *n)
            .collect();
        if set.is_empty() {
            f.write_str("NONE")
        } else {
            f.write_str(&set.join("|"))
        }
    }
}

/// Why an MR access (or registration) was refused. The transport maps these to completion
/// statuses (local: `LOC_PROT_ERR`/`LOC_LEN_ERR`) or NAKs (remote: remote access error).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MrError {
    /// No MR has this key (unknown index, wrong key byte, or rkey 0).
    InvalidKey(u32),
    /// The MR belongs to another PD than the QP using it.
    WrongPd {
        /// The key used.
        key: u32,
    },
    /// The MR does not grant the access needed.
    AccessDenied {
        /// The key used.
        key: u32,
        /// What was needed.
        needed: AccessFlags,
        /// What the MR grants.
        granted: AccessFlags,
    },
    /// `[addr, addr + len)` is not inside `[iova, iova + mr_len)`.
    OutOfBounds {
        /// The key used.
        key: u32,
        /// Start of the access.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// An atomic's address is not 8-byte aligned.
    Misaligned {
        /// The address.
        addr: u64,
    },
    /// Registration flags are inconsistent: remote write or atomic without local write
    /// (`ib_check_mr_access`), or an unknown flag.
    InvalidAccessFlags(AccessFlags),
    /// The device's MR table is full (`max_mr`).
    TooManyMrs,
}

impl fmt::Display for MrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MrError::InvalidKey(k) => write!(f, "no memory region with key {k:#010x}"),
            MrError::WrongPd { key } => {
                write!(f, "memory region {key:#010x} belongs to another PD")
            }
            MrError::AccessDenied {
                key,
                needed,
                granted,
            } => write!(
                f,
                "memory region {key:#010x} grants {granted:?}, access needs {needed:?}"
            ),
            MrError::OutOfBounds { key, addr, len } => write!(
                f,
                "[{addr:#x}, +{len}) is outside memory region {key:#010x}"
            ),
            MrError::Misaligned { addr } => {
                write!(f, "atomic address {addr:#x} not 8-byte aligned")
            }
            MrError::InvalidAccessFlags(a) => write!(f, "invalid access flags {a:?}"),
            MrError::TooManyMrs => f.write_str("memory region table full"),
        }
    }
}

impl std::error::Error for MrError {}

/// The keys `reg_mr` returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MrKeys {
    /// Local key (SGEs).
    pub lkey: u32,
    /// Remote key (RETH/AtomicETH); 0 when the MR allows no remote access.
    pub rkey: u32,
}

/// What kind of MR (rxe's `ibmr.type`): decides whether it can be invalidated.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MrType {
    /// `IB_MR_TYPE_USER`: `ibv_reg_mr`. Never invalidated; an IETH naming it fails.
    User,
    /// `IB_MR_TYPE_MEM_REG`: a fast-registration MR, invalidated by SEND with Invalidate
    /// or a local invalidate, made valid again by a fast re-registration.
    MemReg,
}

/// An MR's state (rxe's `enum rxe_mr_state`, without its pre-registration INVALID).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MrState {
    /// `RXE_MR_STATE_VALID`: its keys reach it.
    Valid,
    /// `RXE_MR_STATE_FREE`: invalidated; no key reaches it until it is re-registered.
    Free,
}

/// A registered memory region: its bytes and how they may be reached.
#[derive(Clone, PartialEq, Eq)]
pub struct Mr {
    pd: PdId,
    keys: MrKeys,
    iova: u64,
    access: AccessFlags,
    ty: MrType,
    state: MrState,
    bytes: Memory,
}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("pd", &self.pd)
            .field("lkey", &format_args!("{:#010x}", self.keys.lkey))
            .field("rkey", &format_args!("{:#010x}", self.keys.rkey))
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.bytes.len())
            .field("access", &self.access)
            .field("type", &self.ty)
            .field("state", &self.state)
            .finish()
    }
}

impl Mr {
    /// The PD.
    pub fn pd(&self) -> PdId {
        self.pd
    }

    /// The keys.
    pub fn keys(&self) -> MrKeys {
        self.keys
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.keys.lkey
    }

    /// The remote key (0 without remote access).
    pub fn rkey(&self) -> u32 {
        self.keys.rkey
    }

    /// The address the MR starts at (the `addr` given at registration; 0 for zero-based).
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The MR's length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True for a zero-length MR.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The access it grants.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// User or fast-registration MR.
    pub fn mr_type(&self) -> MrType {
        self.ty
    }

    /// Valid, or invalidated.
    pub fn state(&self) -> MrState {
        self.state
    }

    /// The index range of `[addr, addr + len)` in this MR's bytes; the only place an
    /// address becomes an index.
    pub fn range(&self, addr: u64, len: usize) -> Result<Range<usize>, MrError> {
        let oob = MrError::OutOfBounds {
            key: self.keys.lkey,
            addr,
            len: len as u64,
        };
        let off = addr.checked_sub(self.iova).ok_or(oob)?;
        let off = usize::try_from(off).map_err(|_| oob)?;
        let end = off.checked_add(len).ok_or(oob)?;
        if end > self.bytes.len() {
            return Err(oob);
        }
        Ok(off..end)
    }

    /// The bytes at `[addr, addr + len)`.
    pub fn slice(&self, addr: u64, len: usize) -> Result<&[u8], MrError> {
        let r = self.range(addr, len)?;
        self.bytes.get(r).ok_or(MrError::OutOfBounds {
            key: self.keys.lkey,
            addr,
            len: len as u64,
        })
    }

    /// The bytes at `[addr, addr + len)`, mutably.
    pub fn slice_mut(&mut self, addr: u64, len: usize) -> Result<&mut [u8], MrError> {
        let key = self.keys.lkey;
        let r = self.range(addr, len)?;
        self.bytes.get_mut(r).ok_or(MrError::OutOfBounds {
            key,
            addr,
            len: len as u64,
        })
    }

    /// Copies `out.len()` bytes from `addr` into `out`.
    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MrError> {
        out.copy_from_slice(self.slice(addr, out.len())?);
        Ok(())
    }

    /// Copies `data` to `addr`.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MrError> {
        self.slice_mut(addr, data.len())?.copy_from_slice(data);
        Ok(())
    }

    /// All bytes of the MR.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes
    }

    /// All bytes of the MR, mutably (the owner filling its buffer).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// The checks of a remote access (rxe `check_rkey`): PD, access flags, bounds.
    pub fn check_remote(
        &self,
        pd: PdId,
        addr: u64,
        len: usize,
        needed: AccessFlags,
    ) -> Result<Range<usize>, MrError> {
        self.check(self.keys.rkey, pd, addr, len, needed)
    }

    /// The checks of a local access through an SGE (rxe `lookup_mr` + `mr_check_range`).
    pub fn check_local(
        &self,
        pd: PdId,
        addr: u64,
        len: usize,
        needed: AccessFlags,
    ) -> Result<Range<usize>, MrError> {
        self.check(self.keys.lkey, pd, addr, len, needed)
    }

    fn check(
        &self,
        key: u32,
        pd: PdId,
        addr: u64,
        len: usize,
        needed: AccessFlags,
    ) -> Result<Range<usize>, MrError> {
        if self.pd != pd {
            return Err(MrError::WrongPd { key });
        }
        if !self.access.contains(needed) {
            return Err(MrError::AccessDenied {
                key,
                needed,
                granted: self.access,
            });
        }
        self.range(addr, len).map_err(|_| MrError::OutOfBounds {
            key,
            addr,
            len: len as u64,
        })
    }
}

/// `RXE_MAX_MR_INDEX`: MR indices run 1..=0x40000.
const MAX_MR_INDEX: u32 = 0x0004_0000;

/// The device's MR table, keyed by MR index (`key >> 8`).
#[derive(Clone, Debug)]
pub struct MrTable {
    mrs: BTreeMap<u32, Mr>,
    next_index: u32,
    max_mr: u32,
    rng: Rng,
}

impl MrTable {
    /// How many MRs are registered.
    pub fn count(&self) -> usize {
        self.mrs.len()
    }

    /// An empty table for at most `max_mr` MRs, key bytes drawn from `rng`.
    pub fn new(max_mr: u32, rng: Rng) -> MrTable {
        MrTable {
            mrs: BTreeMap::new(),
            next_index: 1,
            max_mr: max_mr.min(MAX_MR_INDEX),
            rng,
        }
    }

    /// Registers `bytes` at `iova` in `pd` with `access` (a user MR, `ibv_reg_mr`).
    pub fn register(
        &mut self,
        pd: PdId,
        bytes: impl Into<Memory>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, MrError> {
        self.insert(pd, bytes.into(), iova, access, MrType::User)
            .map_err(|(e, _)| e)
    }

    /// [`MrTable::register`] that hands the bytes back when it refuses them.
    pub fn register_or_return(
        &mut self,
        pd: PdId,
        bytes: impl Into<Memory>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, (MrError, Memory)> {
        self.insert(pd, bytes.into(), iova, access, MrType::User)
    }

    /// Registers a fast-registration MR (`IB_MR_TYPE_MEM_REG`), valid at once: what
    /// `ib_alloc_mr` followed by a completed `IB_WR_REG_MR` leaves. Its rkey is its lkey (rxe
    /// `rxe_reg_fast_mr` sets both to the WR's key), and a peer's SEND with Invalidate or
    /// [`MrTable::invalidate`] can revoke it.
    pub fn register_fast(
        &mut self,
        pd: PdId,
        bytes: impl Into<Memory>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, MrError> {
        self.insert(pd, bytes.into(), iova, access, MrType::MemReg)
            .map_err(|(e, _)| e)
    }

    fn insert(
        &mut self,
        pd: PdId,
        bytes: Memory,
        iova: u64,
        access: AccessFlags,
        ty: MrType,
    ) -> Result<MrKeys, (MrError, Memory)> {
        // ib_check_mr_access: remote write/atomic need local write.
        if !AccessFlags::KNOWN.contains(access)
            || (access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
                && !access.contains(AccessFlags::LOCAL_WRITE))
        {
            return Err((MrError::InvalidAccessFlags(access), bytes));
        }
        // The MR's address range must not wrap.
        if iova.checked_add(bytes.len() as u64).is_none() {
            let len = bytes.len() as u64;
            let e = MrError::OutOfBounds {
                key: 0,
                addr: iova,
                len,
            };
            return Err((e, bytes));
        }
        if self.mrs.len() as u32 >= self.max_mr {
            return Err((MrError::TooManyMrs, bytes));
        }
        // Cyclic index allocation, as the rxe pool's xa_alloc_cyclic.
        let mut index = self.next_index;
        while self.mrs.contains_key(&index) {
            index = if index >= MAX_MR_INDEX { 1 } else { index + 1 };
        }
        self.next_index = if index >= MAX_MR_INDEX { 1 } else { index + 1 };
        let lkey = (index << 8) | u32::from(self.rng.next_u8());
        let rkey = if access.intersects(AccessFlags::REMOTE) || ty == MrType::MemReg {
            lkey
        } else {
            0
        };
        let keys = MrKeys { lkey, rkey };
        self.mrs.insert(
            index,
            Mr {
                pd,
                keys,
                iova,
                access,
                ty,
                state: MrState::Valid,
                bytes,
            },
        );
        Ok(keys)
    }

    /// Removes the MR with this lkey and returns its bytes (valid or invalidated).
    pub fn deregister(&mut self, lkey: u32) -> Result<Memory, MrError> {
        self.owned(lkey)?;
        self.mrs
            .remove(&(lkey >> 8))
            .map(|mr| mr.bytes)
            .ok_or(MrError::InvalidKey(lkey))
    }

    /// `rxe_invalidate_mr`: the SEND with Invalidate responder and a local invalidate.
    /// The MR at `key`'s index must carry `key` as its rkey (its lkey if it grants no
    /// remote access) and be a fast-registration MR; it becomes [`MrState::Free`].
    /// As in rxe, neither the PD nor the current state is checked (invalidating a free MR
    /// again succeeds). A user MR, or a key that names nothing, is an error — the caller's
    /// to turn into a completion status.
    pub fn invalidate(&mut self, key: u32) -> Result<(), MrError> {
        let mr = self
            .mrs
            .get_mut(&(key >> 8))
            .ok_or(MrError::InvalidKey(key))?;
        let own = if mr.access.intersects(AccessFlags::REMOTE) {
            mr.keys.rkey
        } else {
            mr.keys.lkey
        };
        if own != key || mr.ty != MrType::MemReg {
            return Err(MrError::InvalidKey(key));
        }
        mr.state = MrState::Free;
        Ok(())
    }

    /// `rxe_reg_fast_mr` (an `IB_WR_REG_MR`): makes an invalidated fast-registration MR
    /// valid again with a new key byte (only the low 8 bits of a key may change) and
    /// access. The MR must be free; returns the new keys (lkey = rkey).
    pub fn reregister_fast(
        &mut self,
        lkey: u32,
        key_byte: u8,
        access: AccessFlags,
    ) -> Result<MrKeys, MrError> {
        if !AccessFlags::KNOWN.contains(access) {
            return Err(MrError::InvalidAccessFlags(access));
        }
        let mr = self.owned_mut(lkey)?;
        if mr.ty != MrType::MemReg || mr.state != MrState::Free {
            return Err(MrError::InvalidKey(lkey));
        }
        let key = (lkey & !0xff) | u32::from(key_byte);
        mr.keys = MrKeys {
            lkey: key,
            rkey: key,
        };
        mr.access = access;
        mr.state = MrState::Valid;
        Ok(mr.keys)
    }

    /// The MR with this lkey whatever its state: the owner's access to its own bytes
    /// (reading what a peer wrote before it invalidated the MR, deregistering).
    pub fn owned(&self, lkey: u32) -> Result<&Mr, MrError> {
        match self.mrs.get(&(lkey >> 8)) {
            Some(mr) if mr.keys.lkey == lkey => Ok(mr),
            _ => Err(MrError::InvalidKey(lkey)),
        }
    }

    /// [`MrTable::owned`], mutably.
    pub fn owned_mut(&mut self, lkey: u32) -> Result<&mut Mr, MrError> {
        match self.mrs.get_mut(&(lkey >> 8)) {
            Some(mr) if mr.keys.lkey == lkey => Ok(mr),
            _ => Err(MrError::InvalidKey(lkey)),
        }
    }

    /// Owner access to two MRs at once: copies `len` bytes at `src_addr` of the MR with
    /// lkey `src` to `dst_addr` of the MR with lkey `dst` (addresses as in [`Mr::slice`]),
    /// in one copy. The same MR on both sides copies within it.
    pub fn copy_between(
        &mut self,
        src: u32,
        src_addr: u64,
        dst: u32,
        dst_addr: u64,
        len: usize,
    ) -> Result<(), MrError> {
        let from = self.owned(src)?.range(src_addr, len)?;
        let to = self.owned(dst)?.range(dst_addr, len)?;
        if src == dst {
            let mr = self.owned_mut(dst)?;
            mr.bytes.copy_within(from, to.start);
            return Ok(());
        }
        // Two entries of one map: the two ends of the range between them borrow apart.
        let (si, di) = (src >> 8, dst >> 8);
        let (lo, hi) = (si.min(di), si.max(di));
        let mut both = self.mrs.range_mut(lo..=hi);
        let l = both.next().map(|(_, m)| m);
        let h = both.next_back().map(|(_, m)| m);
        let (Some(h), Some(l)) = (h, l) else {
            return Err(MrError::InvalidKey(dst));
        };
        let (s, d) = if si < di { (l, h) } else { (h, l) };
        let (Some(from), Some(to)) = (s.bytes.get(from), d.bytes.get_mut(to)) else {
            return Err(MrError::OutOfBounds {
                key: dst,
                addr: dst_addr,
                len: len as u64,
            });
        };
        to.copy_from_slice(from);
        Ok(())
    }

    /// The valid MR with this lkey (device access through an SGE; rxe `lookup_mr` checks
    /// `RXE_MR_STATE_VALID`).
    pub fn by_lkey(&self, lkey: u32) -> Result<&Mr, MrError> {
        match self.mrs.get(&(lkey >> 8)) {
            Some(mr) if mr.keys.lkey == lkey && mr.state == MrState::Valid => Ok(mr),
            _ => Err(MrError::InvalidKey(lkey)),
        }
    }

    /// The valid MR with this lkey, mutably.
    pub fn by_lkey_mut(&mut self, lkey: u32) -> Result<&mut Mr, MrError> {
        match self.mrs.get_mut(&(lkey >> 8)) {
            Some(mr) if mr.keys.lkey == lkey && mr.state == MrState::Valid => Ok(mr),
            _ => Err(MrError::InvalidKey(lkey)),
        }
    }

    /// The valid MR with this rkey (rkey 0 never matches; an invalidated MR neither).
    pub fn by_rkey(&self, rkey: u32) -> Result<&Mr, MrError> {
        match self.mrs.get(&(rkey >> 8)) {
            Some(mr) if mr.keys.rkey == rkey && rkey != 0 && mr.state == MrState::Valid => Ok(mr),
            _ => Err(MrError::InvalidKey(rkey)),
        }
    }

    /// The valid MR with this rkey, mutably.
    pub fn by_rkey_mut(&mut self, rkey: u32) -> Result<&mut Mr, MrError> {
        match self.mrs.get_mut(&(rkey >> 8)) {
            Some(mr) if mr.keys.rkey == rkey && rkey != 0 && mr.state == MrState::Valid => Ok(mr),
            _ => Err(MrError::InvalidKey(rkey)),
        }
    }

    /// How many MRs of `pd` exist.
    pub fn count_in_pd(&self, pd: PdId) -> usize {
        self.mrs.values().filter(|m| m.pd == pd).count()
    }

    /// The number of MRs.
    pub fn len(&self) -> usize {
        self.mrs.len()
    }

    /// True when no MR is registered.
    pub fn is_empty(&self) -> bool {
        self.mrs.is_empty()
    }
}
