//! Backing stores: where a logical unit's blocks live.
//!
//! The core never owns an I/O buffer. A READ's data-in is read straight into the buffer the
//! transport hands [`crate::Target::execute`] (the one it will RDMA-WRITE to the initiator),
//! and a WRITE's data-out is written straight from the buffer the transport filled (by RDMA
//! READ), so a store sees exactly one copy per I/O: the one into or out of its medium.
//!
//! Two stores come with the crate, after LIO's two common backends: [`MemStore`] (like
//! `target_core_rd.c`'s `rd_mcp`, memory that lives as long as the process) and [`FileStore`]
//! (like `target_core_file.c`'s FILEIO in buffered mode: `pread`/`pwrite` through the page
//! cache, `fdatasync` on flush, hence a volatile write cache the initiator is told about).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub use softrdma_mem::Memory;

/// The logical block sizes a store may have. LIO accepts 512, 1024, 2048 and 4096; we take
/// the two that matter (512-byte sectors and 4Kn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockSize {
    B512,
    B4096,
}

impl BlockSize {
    /// The size in bytes.
    pub fn bytes(self) -> u32 {
        match self {
            BlockSize::B512 => 512,
            BlockSize::B4096 => 4096,
        }
    }

    /// The block size of `n` bytes, if it is one we support.
    pub fn from_bytes(n: u32) -> Option<BlockSize> {
        match n {
            512 => Some(BlockSize::B512),
            4096 => Some(BlockSize::B4096),
            _ => None,
        }
    }
}

/// Why a store could not do what it was asked.
#[derive(Debug)]
pub enum StoreError {
    /// The size is zero or not a whole number of blocks.
    BadSize { size: u64, block_size: u32 },
    /// The access runs past the end of the store (a core bug: the core checks LBA ranges
    /// before it calls the store).
    OutOfRange { offset: u64, len: usize, size: u64 },
    /// A write to a store opened read-only.
    ReadOnly,
    /// The medium is lent to the transport ([`BackingStore::lend`]): the store holds no bytes
    /// until it is given back.
    Lent,
    /// The operating system said no.
    Io(io::Error),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::BadSize { size, block_size } => write!(
                f,
                "store size {size} is not a non-zero multiple of the {block_size}-byte block"
            ),
            StoreError::OutOfRange { offset, len, size } => {
                write!(
                    f,
                    "access of {len} bytes at {offset} runs past the {size}-byte store"
                )
            }
            StoreError::ReadOnly => f.write_str("the store is read-only"),
            StoreError::Lent => f.write_str("the store's medium is lent to the transport"),
            StoreError::Io(e) => write!(f, "store I/O: {e}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for StoreError {
    fn from(e: io::Error) -> StoreError {
        StoreError::Io(e)
    }
}

/// A logical unit's medium: a byte array of `size()` bytes in blocks of `block_size()`.
///
/// Offsets and lengths the core passes are always within `size()` and whole blocks for
/// READ/WRITE (the residual rules can make a transfer end mid-block, as in LIO, so a store
/// must accept any byte range inside the medium).
pub trait BackingStore {
    /// Size in bytes: a non-zero multiple of the block size.
    fn size(&self) -> u64;
    fn block_size(&self) -> BlockSize;
    /// Writes are refused (WRITE PROTECTED to the initiator; the WP bit in MODE SENSE).
    fn read_only(&self) -> bool;
    /// Whether completed writes may sit in a volatile cache until [`BackingStore::flush`]:
    /// reported as WCE in the caching mode page, and it makes the LUN honour FUA (DPOFUA),
    /// as LIO does when `emulate_write_cache` is on (`target_check_wce`, `target_check_fua`).
    fn write_cache(&self) -> bool;
    /// Whether the medium is solid state (MEDIUM ROTATION RATE 1 in VPD page 0xB1).
    fn non_rotational(&self) -> bool;
    /// The product identification LIO shows for this kind of backend.
    fn product(&self) -> &str;
    /// Fills `buf` from `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StoreError>;
    /// Writes `buf` at `offset`.
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> Result<(), StoreError>;
    /// Makes every completed write durable.
    fn flush(&mut self) -> Result<(), StoreError>;
    /// Deallocates `len` bytes at `offset` (UNMAP, WRITE SAME with UNMAP): afterwards they
    /// read as zeroes (the LBPRZ the core reports). The default writes zeroes; a store
    /// that can free the space (a file's holes) does that instead.
    fn unmap(&mut self, offset: u64, len: u64) -> Result<(), StoreError> {
        write_zeroes(self, offset, len)
    }
    /// Whether the store keeps persistent reservations across a restart (PTPL_C: APTPL
    /// registrations are accepted). The default: no.
    fn keeps_reservations(&self) -> bool {
        false
    }
    /// The reservation state kept with the store (what [`BackingStore::save_reservations`]
    /// wrote), if any.
    fn load_reservations(&self) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
    /// Keeps the reservation state (empty: nothing to keep, forget it).
    fn save_reservations(&mut self, _text: &str) -> Result<(), StoreError> {
        Err(StoreError::Io(io::Error::from(io::ErrorKind::Unsupported)))
    }
    /// A store whose medium is plain memory hands its bytes over, so that the transport can
    /// keep them where its device reaches them (an MR) and move READ and WRITE data straight
    /// between them and the wire: the copy into or out of a bounce buffer disappears. Until
    /// [`BackingStore::give_back`], `read_at` and `write_at` fail with [`StoreError::Lent`];
    /// [`crate::Target::lend_medium`] is the way in, and it routes READ and WRITE around them.
    /// `None` (the default) for a store whose medium is not memory.
    fn lend(&mut self) -> Option<Memory> {
        None
    }
    /// Takes back what [`BackingStore::lend`] gave: the same length, or the store refuses it.
    fn give_back(&mut self, medium: Memory) -> Result<(), StoreError> {
        Err(StoreError::BadSize {
            size: medium.len() as u64,
            block_size: self.block_size().bytes(),
        })
    }
}

/// Writes `len` zero bytes at `offset` through [`BackingStore::write_at`], a block of zeroes
/// at a time (no buffer the size of the range).
pub(crate) fn write_zeroes<S: BackingStore + ?Sized>(
    store: &mut S,
    offset: u64,
    len: u64,
) -> Result<(), StoreError> {
    const CHUNK: u64 = 64 * 1024;
    let zeroes = vec![0u8; CHUNK.min(len) as usize];
    let mut done = 0;
    while done < len {
        let n = CHUNK.min(len - done) as usize;
        store.write_at(offset + done, &zeroes[..n])?;
        done += n as u64;
    }
    Ok(())
}

fn check_size(size: u64, block_size: BlockSize) -> Result<(), StoreError> {
    if size == 0 || size % u64::from(block_size.bytes()) != 0 {
        return Err(StoreError::BadSize {
            size,
            block_size: block_size.bytes(),
        });
    }
    Ok(())
}

fn check_range(offset: u64, len: usize, size: u64) -> Result<(), StoreError> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(StoreError::OutOfRange { offset, len, size }),
    }
}

/// A store in memory (LIO's `rd_mcp`): no cache to flush, gone with the process.
#[derive(Clone)]
pub struct MemStore {
    /// Empty while lent: `size` stays the medium's. A large medium is memory advised for
    /// huge pages ([`Memory::zeroed`]): the transport places every 4 KiB packet of a lent
    /// medium's I/O into it.
    data: Memory,
    size: u64,
    lent: bool,
    block_size: BlockSize,
    read_only: bool,
}

impl fmt::Debug for MemStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemStore")
            .field("size", &self.size)
            .field("lent", &self.lent)
            .field("block_size", &self.block_size)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl MemStore {
    /// A zero-filled store of `size` bytes.
    pub fn new(size: u64, block_size: BlockSize) -> Result<MemStore, StoreError> {
        check_size(size, block_size)?;
        let len = usize::try_from(size).map_err(|_| StoreError::BadSize {
            size,
            block_size: block_size.bytes(),
        })?;
        Ok(MemStore {
            data: Memory::zeroed(len),
            size,
            lent: false,
            block_size,
            read_only: false,
        })
    }

    /// A store holding `data` (its length a multiple of the block size).
    pub fn from_vec(data: Vec<u8>, block_size: BlockSize) -> Result<MemStore, StoreError> {
        check_size(data.len() as u64, block_size)?;
        Ok(MemStore {
            size: data.len() as u64,
            data: Memory::from(data),
            lent: false,
            block_size,
            read_only: false,
        })
    }

    /// The same store, refusing writes.
    pub fn into_read_only(mut self) -> MemStore {
        self.read_only = true;
        self
    }

    /// The medium's bytes (none while lent).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }
}

impl BackingStore for MemStore {
    fn size(&self) -> u64 {
        self.size
    }
    fn block_size(&self) -> BlockSize {
        self.block_size
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn write_cache(&self) -> bool {
        false
    }
    fn non_rotational(&self) -> bool {
        true
    }
    fn product(&self) -> &str {
        "RAMDISK-MCP"
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        if self.lent {
            return Err(StoreError::Lent);
        }
        check_range(offset, buf.len(), self.size())?;
        let o = offset as usize;
        buf.copy_from_slice(&self.data[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        if self.lent {
            return Err(StoreError::Lent);
        }
        check_range(offset, buf.len(), self.size())?;
        let o = offset as usize;
        self.data[o..o + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    fn unmap(&mut self, offset: u64, len: u64) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        if self.lent {
            return Err(StoreError::Lent);
        }
        let n = usize::try_from(len).map_err(|_| StoreError::OutOfRange {
            offset,
            len: usize::MAX,
            size: self.size,
        })?;
        check_range(offset, n, self.size)?;
        let o = offset as usize;
        self.data[o..o + n].fill(0);
        Ok(())
    }
    fn lend(&mut self) -> Option<Memory> {
        if self.lent {
            return None;
        }
        self.lent = true;
        Some(std::mem::take(&mut self.data))
    }
    fn give_back(&mut self, medium: Memory) -> Result<(), StoreError> {
        if !self.lent || medium.len() as u64 != self.size {
            return Err(StoreError::BadSize {
                size: medium.len() as u64,
                block_size: self.block_size.bytes(),
            });
        }
        self.data = medium;
        self.lent = false;
        Ok(())
    }
}

/// A store in a regular file (LIO's FILEIO, buffered): positional reads and writes through
/// the page cache, `File::sync_data` (fdatasync) on flush.
#[derive(Debug)]
pub struct FileStore {
    file: File,
    /// The backing file's path: the reservation state lives beside it.
    path: PathBuf,
    size: u64,
    block_size: BlockSize,
    read_only: bool,
}

impl FileStore {
    /// Opens an existing file; the store is its length rounded down to whole blocks (a
    /// file shorter than one block is an error).
    pub fn open(
        path: impl AsRef<Path>,
        block_size: BlockSize,
        read_only: bool,
    ) -> Result<FileStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .open(&path)?;
        let len = file.metadata()?.len();
        let size = len - len % u64::from(block_size.bytes());
        check_size(size, block_size)?;
        Ok(FileStore {
            file,
            path,
            size,
            block_size,
            read_only,
        })
    }

    /// Creates (or truncates) the file at `path` to `size` bytes of zeroes.
    pub fn create(
        path: impl AsRef<Path>,
        size: u64,
        block_size: BlockSize,
    ) -> Result<FileStore, StoreError> {
        check_size(size, block_size)?;
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        file.set_len(size)?;
        Ok(FileStore {
            file,
            path,
            size,
            block_size,
            read_only: false,
        })
    }
}

impl FileStore {
    /// Where the persistent reservations of an APTPL registration are kept: beside the
    /// backing file, its name with `.pr` appended (`lun.img` → `lun.img.pr`).
    pub fn reservations_path(&self) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(".pr");
        PathBuf::from(name)
    }
}

impl BackingStore for FileStore {
    fn keeps_reservations(&self) -> bool {
        !self.read_only
    }
    fn load_reservations(&self) -> Result<Option<String>, StoreError> {
        match std::fs::read_to_string(self.reservations_path()) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
    /// Written to a temporary file, synced and renamed over the state file, so a crash
    /// leaves the old state or the new one; empty text removes the file.
    fn save_reservations(&mut self, text: &str) -> Result<(), StoreError> {
        let path = self.reservations_path();
        if text.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            };
        }
        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        {
            let mut f = File::create(&tmp)?;
            io::Write::write_all(&mut f, text.as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        Ok(())
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn block_size(&self) -> BlockSize {
        self.block_size
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn write_cache(&self) -> bool {
        // Writes land in the page cache; only flush makes them durable.
        !self.read_only
    }
    fn non_rotational(&self) -> bool {
        false
    }
    fn product(&self) -> &str {
        "FILEIO"
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        check_range(offset, buf.len(), self.size)?;
        self.file.read_exact_at(buf, offset)?;
        Ok(())
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        check_range(offset, buf.len(), self.size)?;
        self.file.write_all_at(buf, offset)?;
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        if self.read_only {
            return Ok(());
        }
        self.file.sync_data()?;
        Ok(())
    }
    /// Punches a hole (`fallocate(PUNCH_HOLE | KEEP_SIZE)`, what LIO's FILEIO does for a
    /// file on a filesystem, `fd_execute_unmap`): the blocks are freed and read back as
    /// zeroes, the file keeps its length. A filesystem that cannot punch holes gets zeroes
    /// written instead, so the range reads as zeroes either way.
    fn unmap(&mut self, offset: u64, len: u64) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        let n = usize::try_from(len).unwrap_or(usize::MAX);
        check_range(offset, n, self.size)?;
        if len == 0 {
            return Ok(());
        }
        let mode = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
        match rustix::fs::fallocate(&self.file, mode, offset, len) {
            Ok(()) => Ok(()),
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {
                write_zeroes(self, offset, len)
            }
            Err(e) => Err(StoreError::Io(e.into())),
        }
    }
}
