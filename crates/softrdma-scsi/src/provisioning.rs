//! Thin provisioning and the offloads that write without a data transfer per block: UNMAP
//! (`sbc_execute_unmap`), WRITE SAME (`sbc_setup_write_same`, FILEIO's
//! `fd_execute_write_same`) and COMPARE AND WRITE (`sbc_compare_and_write` and its
//! callback), run on a LUN's medium — its store, or the bytes the transport holds while the
//! medium is lent ([`crate::Target::lend_medium`]).

use softrdma_wire::field::{read_u16, read_u32, read_u64};

use crate::sense::SenseReason;
use crate::store::{BackingStore, StoreError};

/// Where a command's blocks are: the LUN's store, or its medium lent to the transport.
pub(crate) enum Medium<'a> {
    Store(&'a mut dyn BackingStore),
    Lent(&'a mut [u8]),
}

fn out_of_range(offset: u64, len: usize, size: usize) -> StoreError {
    StoreError::OutOfRange {
        offset,
        len,
        size: size as u64,
    }
}

impl Medium<'_> {
    fn lent_range(m: &[u8], offset: u64, len: usize) -> Result<std::ops::Range<usize>, StoreError> {
        let start = usize::try_from(offset).map_err(|_| out_of_range(offset, len, m.len()))?;
        match start.checked_add(len) {
            Some(end) if end <= m.len() => Ok(start..end),
            _ => Err(out_of_range(offset, len, m.len())),
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        match self {
            Medium::Store(s) => s.read_at(offset, buf),
            Medium::Lent(m) => {
                let r = Self::lent_range(m, offset, buf.len())?;
                buf.copy_from_slice(&m[r]);
                Ok(())
            }
        }
    }

    fn write_at(&mut self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        match self {
            Medium::Store(s) => s.write_at(offset, buf),
            Medium::Lent(m) => {
                let r = Self::lent_range(m, offset, buf.len())?;
                m[r].copy_from_slice(buf);
                Ok(())
            }
        }
    }

    fn unmap(&mut self, offset: u64, len: u64) -> Result<(), StoreError> {
        match self {
            Medium::Store(s) => s.unmap(offset, len),
            Medium::Lent(m) => {
                let n =
                    usize::try_from(len).map_err(|_| out_of_range(offset, usize::MAX, m.len()))?;
                let r = Self::lent_range(m, offset, n)?;
                m[r].fill(0);
                Ok(())
            }
        }
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        match self {
            Medium::Store(s) => s.flush(),
            // Only a memory store lends its medium: no cache.
            Medium::Lent(_) => Ok(()),
        }
    }
}

/// What the operations need to know of the LUN (taken apart from it, since the medium
/// borrows its store).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub blocks: u64,
    pub block_size: u32,
    pub max_unmap_descriptors: u32,
    pub max_unmap_lba_count: u32,
}

/// A store failure, as FILEIO answers it.
fn io(_: StoreError) -> SenseReason {
    SenseReason::LogicalUnitCommunicationFailure
}

/// One UNMAP block descriptor (SBC-4 table 209): `blocks` blocks from `lba`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnmapDescriptor {
    pub lba: u64,
    pub blocks: u32,
}

/// The UNMAP parameter list (SBC-4 §5.30.2), checked as `sbc_execute_unmap` checks it: an
/// empty list is nothing to do; one shorter than its 8-byte header is PARAMETER LIST
/// LENGTH ERROR; BLOCK DESCRIPTOR DATA LENGTH beyond the list is ignored for the list's own
/// length (LIO warns and does the same); more descriptors than MAXIMUM UNMAP BLOCK
/// DESCRIPTOR COUNT, or one naming more than MAXIMUM UNMAP LBA COUNT blocks, is INVALID
/// FIELD IN PARAMETER LIST; one past the last block (or wrapping) is LOGICAL BLOCK ADDRESS
/// OUT OF RANGE. A trailing partial descriptor is ignored.
///
/// Unlike LIO, which unmaps each descriptor as it checks it (so a bad third descriptor
/// leaves the first two unmapped), the whole list is checked before anything is unmapped.
pub fn parse_unmap_list(
    params: &[u8],
    total_blocks: u64,
    max_descriptors: u32,
    max_lba_count: u32,
) -> Result<Vec<UnmapDescriptor>, SenseReason> {
    if params.is_empty() {
        return Ok(Vec::new());
    }
    if params.len() < 8 {
        return Err(SenseReason::ParameterListLengthError);
    }
    let bd_len = usize::from(read_u16(params, 2));
    let size = bd_len.min(params.len() - 8);
    let count = size / 16;
    if count as u64 > u64::from(max_descriptors) {
        return Err(SenseReason::InvalidParameterList);
    }
    let mut out = Vec::with_capacity(count);
    for d in params[8..8 + count * 16].chunks_exact(16) {
        let lba = read_u64(d, 0);
        let blocks = read_u32(d, 8);
        if blocks > max_lba_count {
            return Err(SenseReason::InvalidParameterList);
        }
        match lba.checked_add(u64::from(blocks)) {
            Some(end) if end <= total_blocks => {}
            _ => return Err(SenseReason::AddressOutOfRange),
        }
        out.push(UnmapDescriptor { lba, blocks });
    }
    Ok(out)
}

/// UNMAP (`sbc_execute_unmap`): ANCHOR (any bit of CDB byte 1) is INVALID FIELD IN CDB (we
/// have no ANC_SUP), then the parameter list, then each descriptor's blocks deallocated.
pub(crate) fn unmap(
    g: Geometry,
    medium: &mut Medium<'_>,
    byte1: u8,
    params: &[u8],
) -> Result<(), SenseReason> {
    if byte1 != 0 {
        return Err(SenseReason::InvalidCdbField);
    }
    let list = parse_unmap_list(
        params,
        g.blocks,
        g.max_unmap_descriptors,
        g.max_unmap_lba_count,
    )?;
    let bs = u64::from(g.block_size);
    for d in list {
        if d.blocks > 0 {
            medium
                .unmap(d.lba * bs, u64::from(d.blocks) * bs)
                .map_err(io)?;
        }
    }
    Ok(())
}

/// Bytes of repeated blocks WRITE SAME writes per store call.
const WRITE_SAME_CHUNK: usize = 64 * 1024;

/// WRITE SAME (FILEIO's `fd_execute_write_same`, `sbc_execute_write_same_unmap`): the one
/// block of data-out written to every block of the range, or with UNMAP the range
/// deallocated. The data-out must be exactly one block (LIO: INVALID FIELD IN CDB), except
/// with UNMAP, where LIO does not look at it. With UNMAP and a block that is not all zeroes
/// the blocks are written instead (SBC-4 §4.7.3.4.2: with LBPRZ set, an unmapped block
/// reads as zeroes, so only a zero block may be unmapped); LIO deallocates whatever the
/// block holds.
pub(crate) fn write_same(
    g: Geometry,
    medium: &mut Medium<'_>,
    lba: u64,
    blocks: u64,
    unmap: bool,
    data: &[u8],
) -> Result<(), SenseReason> {
    let bs = g.block_size as usize;
    let offset = lba * bs as u64;
    let len = blocks * bs as u64;
    if unmap && data.iter().all(|b| *b == 0) {
        return medium.unmap(offset, len).map_err(io);
    }
    if data.len() != bs {
        return Err(SenseReason::InvalidCdbField);
    }
    let per_chunk = (WRITE_SAME_CHUNK / bs).max(1);
    let chunk: Vec<u8> = data
        .iter()
        .copied()
        .cycle()
        .take(per_chunk.min(blocks as usize).max(1) * bs)
        .collect();
    let mut done = 0u64;
    while done < blocks {
        let n = (blocks - done).min(per_chunk as u64) as usize;
        medium
            .write_at(offset + done * bs as u64, &chunk[..n * bs])
            .map_err(io)?;
        done += n as u64;
    }
    Ok(())
}

/// COMPARE AND WRITE (`sbc_compare_and_write`, `compare_and_write_callback`): the blocks
/// are read and compared with the first half of the data-out; on a difference MISCOMPARE
/// with the offset of the first differing byte (SBC-4 §5.3), nothing written; else the
/// second half is written (and flushed for FUA). The core runs one command at a time, so
/// the read, compare and write are atomic to every other command, as LIO's `caw_sem`
/// makes them. A zero-length one does nothing (LIO: "zero is not an error").
pub(crate) fn compare_and_write(
    g: Geometry,
    medium: &mut Medium<'_>,
    lba: u64,
    blocks: u64,
    sync: bool,
    data: &[u8],
) -> Result<(), SenseReason> {
    let n = (blocks * u64::from(g.block_size)) as usize;
    if n == 0 {
        return Ok(());
    }
    let (verify, write) = match (data.get(..n), data.get(n..2 * n)) {
        (Some(v), Some(w)) => (v, w),
        // The size check gives the whole data-out of a data CDB; a core bug otherwise.
        _ => return Err(SenseReason::InvalidFieldInCommandIu),
    };
    let offset = lba * u64::from(g.block_size);
    let mut current = vec![0u8; n];
    medium.read_at(offset, &mut current).map_err(io)?;
    if let Some(i) = current.iter().zip(verify).position(|(a, b)| a != b) {
        return Err(SenseReason::Miscompare { offset: i as u32 });
    }
    medium.write_at(offset, write).map_err(io)?;
    if sync {
        medium.flush().map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(descs: &[(u64, u32)], bd_len: Option<u16>) -> Vec<u8> {
        let mut v = vec![0u8; 8];
        let bd = bd_len.unwrap_or((descs.len() * 16) as u16);
        v[0..2].copy_from_slice(&(bd + 6).to_be_bytes());
        v[2..4].copy_from_slice(&bd.to_be_bytes());
        for (lba, n) in descs {
            v.extend_from_slice(&lba.to_be_bytes());
            v.extend_from_slice(&n.to_be_bytes());
            v.extend_from_slice(&[0; 4]);
        }
        v
    }

    #[test]
    fn unmap_list_as_lio_checks_it() {
        assert_eq!(parse_unmap_list(&[], 100, 1, 8), Ok(Vec::new()));
        assert_eq!(
            parse_unmap_list(&[0; 7], 100, 1, 8),
            Err(SenseReason::ParameterListLengthError)
        );
        // A header alone: no descriptor.
        assert_eq!(parse_unmap_list(&list(&[], None), 100, 1, 8), Ok(vec![]));
        assert_eq!(
            parse_unmap_list(&list(&[(92, 8)], None), 100, 1, 8),
            Ok(vec![UnmapDescriptor { lba: 92, blocks: 8 }])
        );
        // Past the end, or wrapping.
        assert_eq!(
            parse_unmap_list(&list(&[(93, 8)], None), 100, 1, 8),
            Err(SenseReason::AddressOutOfRange)
        );
        assert_eq!(
            parse_unmap_list(&list(&[(u64::MAX, 1)], None), 100, 1, 8),
            Err(SenseReason::AddressOutOfRange)
        );
        // More blocks than MAXIMUM UNMAP LBA COUNT, more descriptors than allowed.
        assert_eq!(
            parse_unmap_list(&list(&[(0, 9)], None), 100, 1, 8),
            Err(SenseReason::InvalidParameterList)
        );
        assert_eq!(
            parse_unmap_list(&list(&[(0, 1), (2, 1)], None), 100, 1, 8),
            Err(SenseReason::InvalidParameterList)
        );
        assert_eq!(
            parse_unmap_list(&list(&[(0, 1), (2, 1)], None), 100, 2, 8).map(|l| l.len()),
            Ok(2)
        );
        // BLOCK DESCRIPTOR DATA LENGTH beyond the list: the list's length counts.
        assert_eq!(
            parse_unmap_list(&list(&[(4, 4)], Some(64)), 100, 1, 8).map(|l| l.len()),
            Ok(1)
        );
        // ... and shorter than the list: only what it announces.
        assert_eq!(
            parse_unmap_list(&list(&[(4, 4), (9, 9)], Some(16)), 100, 1, 8).map(|l| l.len()),
            Ok(1)
        );
        // Every descriptor is checked before any is used.
        assert_eq!(
            parse_unmap_list(&list(&[(0, 1), (200, 1)], None), 100, 2, 8),
            Err(SenseReason::AddressOutOfRange)
        );
    }
}
