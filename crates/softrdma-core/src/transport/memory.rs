//! Local memory access for the transport: gathering a send WR's bytes and scattering
//! received bytes at an offset into SGEs. Every SGE is checked before any byte is written,
//! so a failure leaves all memory untouched (docs/memory.md).

use super::emit::MrSlice;
use crate::verbs::{AccessFlags, MrError, MrTable, PdId, ScatterError, SendWr, Sge, Verbs};

/// The bytes a SEND/WRITE carries (inline data or the SGEs).
pub fn gather(verbs: &Verbs, pd: PdId, wr: &SendWr) -> Result<Vec<u8>, MrError> {
    match &wr.inline_data {
        Some(d) => Ok(d.clone()),
        None => verbs.gather(pd, &wr.sg_list),
    }
}

/// The local checks [`gather`] makes, without copying: for WRs whose SGEs are written by the
/// response (RDMA READ, atomics). Copying a 1 MiB READ's destination only to drop it cost a
/// memcpy per READ and, worse, mapped the destination's untouched pages to the shared zero
/// page, so the response's first write to each page took a copy-on-write fault with a TLB
/// shootdown across CPUs (about a third of READ bandwidth on 2 vCPUs).
pub fn check_local(verbs: &Verbs, pd: PdId, wr: &SendWr) -> Result<(), MrError> {
    if wr.inline_data.is_some() {
        return Ok(());
    }
    for s in &wr.sg_list {
        let mr = verbs.mr_table().by_lkey(s.lkey)?;
        mr.check_local(pd, s.addr, s.length as usize, AccessFlags::NONE)?;
    }
    Ok(())
}

/// Bytes `offset .. offset + len` of what `sges` name, read when a packet is written out
/// (as rxe's requester copies each packet's payload from the MR when it builds it): borrowed
/// from the MR when one SGE holds them all, else copied into `scratch`. Fails if an SGE's MR
/// is gone or no longer covers it (deregistered while the WR was outstanding).
pub fn gather_range<'a>(
    mrs: &'a MrTable,
    pd: PdId,
    sges: &[Sge],
    offset: u64,
    len: usize,
    scratch: &'a mut Vec<u8>,
) -> Result<&'a [u8], MrError> {
    gather_range_src(mrs, pd, sges, offset, len, scratch).map(|(s, _)| s)
}

/// [`gather_range`], also saying where the bytes lie when they were borrowed from one MR
/// (so a sender may hand them to the socket from there).
pub fn gather_range_src<'a>(
    mrs: &'a MrTable,
    pd: PdId,
    sges: &[Sge],
    offset: u64,
    len: usize,
    scratch: &'a mut Vec<u8>,
) -> Result<(&'a [u8], Option<MrSlice>), MrError> {
    let mut it = pieces(sges, offset, len);
    let Some(first) = it.next() else {
        return Ok((&[], None));
    };
    let slice =
        |(lkey, addr, _, n): (u32, u64, usize, usize)| -> Result<(&'a [u8], MrSlice), MrError> {
            let mr = mrs.by_lkey(lkey)?;
            let r = mr.check_local(pd, addr, n, AccessFlags::NONE)?;
            let at = MrSlice {
                lkey,
                start: r.start,
                len: r.len(),
            };
            Ok((mr.as_slice().get(r).unwrap_or(&[]), at))
        };
    if first.3 == len {
        return slice(first).map(|(s, at)| (s, Some(at)));
    }
    scratch.clear();
    scratch.extend_from_slice(slice(first)?.0);
    for p in it {
        scratch.extend_from_slice(slice(p)?.0);
    }
    Ok((scratch, None))
}

/// Writes `data` into the SGEs starting `offset` bytes into them (needs LOCAL_WRITE).
pub fn scatter_at(
    verbs: &mut Verbs,
    pd: PdId,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), ScatterError> {
    let room = sges
        .iter()
        .fold(0u64, |a, s| a.saturating_add(u64::from(s.length)));
    let need = offset.saturating_add(data.len() as u64);
    if need > room {
        return Err(ScatterError::TooLong { len: need, room });
    }
    // Two passes over the same walk: check every piece, then write. (No plan vector: this
    // runs for every received SEND packet.)
    for (lkey, addr, _, n) in pieces(sges, offset, data.len()) {
        let mr = verbs.mr_table().by_lkey(lkey).map_err(ScatterError::Mr)?;
        mr.check_local(pd, addr, n, AccessFlags::LOCAL_WRITE)
            .map_err(ScatterError::Mr)?;
    }
    for (lkey, addr, off, n) in pieces(sges, offset, data.len()) {
        let chunk = data.get(off..off + n).unwrap_or(&[]);
        verbs
            .mr_table_mut()
            .by_lkey_mut(lkey)
            .and_then(|mr| mr.write(addr, chunk))
            .map_err(ScatterError::Mr)?;
    }
    Ok(())
}

/// The pieces (lkey, address, offset in the data, length) that `len` bytes written `offset`
/// bytes into `sges` fall into.
fn pieces(
    sges: &[Sge],
    offset: u64,
    len: usize,
) -> impl Iterator<Item = (u32, u64, usize, usize)> + '_ {
    let mut skip = offset;
    let mut left = len;
    let mut off = 0usize;
    sges.iter().filter_map(move |s| {
        if left == 0 {
            return None;
        }
        let slen = u64::from(s.length);
        if skip >= slen {
            skip -= slen;
            return None;
        }
        let n = left.min((slen - skip) as usize);
        let piece = (s.lkey, s.addr.saturating_add(skip), off, n);
        left -= n;
        off += n;
        skip = 0;
        Some(piece)
    })
}
