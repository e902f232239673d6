//! The emulated commands' parameter data (LIO's `spc_emulate_*` and `sbc_emulate_*`).

use softrdma_wire::field::write_u32;
use softrdma_wire::scsi::{AscAscq, ModeHeader10Repr, ModeHeader6Repr, SenseKey};

use crate::cmd::ModeSenseReq;
use crate::lun::{Identity, LogicalUnit, LunId};
use crate::sense::{Sense, SenseReason};
use crate::TargetConfig;

/// How a command completed, for the residual (`target_complete_cmd` vs
/// `target_complete_cmd_with_length`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Done {
    /// No data phase.
    NoData,
    /// The whole transfer length moved.
    Full,
    /// The command produced this many bytes of data-in (fewer is an underflow).
    Len(u32),
}

/// Copies as much of `src` as fits into `dst` (data-in is cut at the allocation length)
/// and completes with the untruncated length.
pub(crate) fn put(dst: &mut [u8], src: &[u8]) -> Done {
    let n = dst.len().min(src.len());
    dst[..n].copy_from_slice(&src[..n]);
    Done::Len(src.len() as u32)
}

/// INQUIRY (`spc_emulate_inquiry`): standard data, or the VPD page asked for; EVPD clear
/// with a page code, or an unknown page, is INVALID FIELD IN CDB.
pub(crate) fn inquiry(
    id: &Identity<'_>,
    lu: Option<&LogicalUnit>,
    target: &TargetConfig,
    evpd: bool,
    page: u8,
    out: &mut [u8],
) -> Result<Done, SenseReason> {
    if !evpd {
        if page != 0 {
            return Err(SenseReason::InvalidCdbField);
        }
        return Ok(put(out, &id.standard_inquiry().to_bytes()));
    }
    let bytes = match (page, lu) {
        (0x00, _) => id.supported_pages().to_bytes(),
        (0x80, _) => id.unit_serial().to_bytes(),
        (0x83, _) => id.device_identification(target).to_bytes(),
        (0xb0, Some(lu)) => lu.block_limits().to_bytes(),
        (0xb1, Some(lu)) => lu.block_characteristics().to_bytes(),
        (0xb2, Some(lu)) => lu.logical_block_provisioning().to_bytes(),
        _ => return Err(SenseReason::InvalidCdbField),
    };
    Ok(put(out, &bytes))
}

/// REPORT LUNS (`spc_emulate_report_luns`): LUN LIST LENGTH for every LUN even when the
/// allocation length cuts the list, the LUNs in `int_to_scsilun` form (ascending; LIO
/// walks its list newest first), LUN 0 alone when there is none.
pub(crate) fn report_luns(luns: impl Iterator<Item = u64>, out: &mut [u8]) -> Done {
    let mut count: u64 = 0;
    let mut off = 8usize;
    let mut emit = |lun: LunId, out: &mut [u8]| {
        count += 1;
        if off < out.len() {
            let w = lun.to_wire();
            let n = (out.len() - off).min(8);
            out[off..off + n].copy_from_slice(&w[..n]);
        }
        off += 8;
    };
    let mut any = false;
    for l in luns {
        any = true;
        emit(LunId(l), out);
    }
    if !any {
        emit(LunId(0), out);
    }
    let list_len = u32::try_from(count * 8).unwrap_or(u32::MAX);
    let mut hdr = [0u8; 8];
    write_u32(&mut hdr, 0, list_len);
    let n = out.len().min(8);
    out[..n].copy_from_slice(&hdr[..n]);
    Done::Len(u32::try_from(8 + count * 8).unwrap_or(u32::MAX))
}

/// REQUEST SENSE (`spc_emulate_request_sense`): DESC is INVALID FIELD IN CDB; the
/// pending unit attention (already taken and cleared by the caller) or NO SENSE, in fixed
/// format, the rest of the allocation zero, the whole allocation length sent (LIO uses
/// `target_complete_cmd`, so no underflow is reported).
pub(crate) fn request_sense(
    desc: bool,
    ua: Option<AscAscq>,
    out: &mut [u8],
) -> Result<Done, SenseReason> {
    if desc {
        return Err(SenseReason::InvalidCdbField);
    }
    let sense = match ua {
        Some(a) => Sense::new(SenseKey::UNIT_ATTENTION, a),
        None => Sense::new(SenseKey::NO_SENSE, AscAscq::NO_ADDITIONAL_SENSE),
    };
    let b = sense.to_fixed();
    out.fill(0);
    let n = out.len().min(b.len());
    out[..n].copy_from_slice(&b[..n]);
    Ok(Done::Full)
}

/// The mode pages of page code 3Fh, in LIO's `modesense_handlers` order.
const MODE_PAGES: [u8; 4] = [0x01, 0x08, 0x0a, 0x1c];

/// LIO's `SE_MODE_PAGE_BUF`.
const MODE_BUF: usize = 512;

/// MODE SENSE(6)/(10) (`spc_emulate_modesense`): the header (WP for a read-only LUN,
/// DPOFUA with a write cache), a block descriptor unless DBD (the long one for LLBAA when
/// the block count needs 64 bits), then the page asked for, or all of them for 3Fh
/// (subpage 00h or FFh only). Page control is honoured only for changeable values (all
/// zero); default and saved values are the current ones, as in LIO.
pub(crate) fn mode_sense(
    lu: &LogicalUnit,
    wp: bool,
    req: ModeSenseReq,
    out: &mut [u8],
) -> Result<Done, SenseReason> {
    let ModeSenseReq {
        ten,
        dbd,
        llbaa,
        changeable,
        page,
        subpage,
    } = req;
    let mut buf = [0u8; MODE_BUF];
    let hdr = if ten { 8 } else { 4 };
    let mut len = hdr;
    let mut bdl = 0usize;
    let mut longlba = false;
    if !dbd {
        if ten && llbaa && lu.blocks() > u64::from(u32::MAX) {
            buf[len..len + 16].copy_from_slice(&lu.long_block_descriptor());
            bdl = 16;
            longlba = true;
        } else {
            buf[len..len + 8].copy_from_slice(&lu.short_block_descriptor());
            bdl = 8;
        }
        len += bdl;
    }
    if page == 0x3f {
        if subpage != 0x00 && subpage != 0xff {
            return Err(SenseReason::InvalidCdbField);
        }
        for p in MODE_PAGES {
            let mut tmp = [0u8; 64];
            let n = lu.mode_page(p, changeable, &mut tmp).unwrap_or(0);
            if !ten && len + n >= 255 {
                break;
            }
            buf[len..len + n].copy_from_slice(&tmp[..n]);
            len += n;
        }
    } else {
        if subpage != 0 {
            return Err(SenseReason::UnknownModePage);
        }
        let n = lu
            .mode_page(page, changeable, &mut buf[len..])
            .ok_or(SenseReason::UnknownModePage)?;
        len += n;
    }
    let mut device_specific = 0u8;
    if wp {
        device_specific |= 0x80; // WP: the LU, or the nexus's mapping of it, is read-only
    }
    if lu.dpofua() {
        device_specific |= 0x10; // DPOFUA
    }
    if ten {
        ModeHeader10Repr {
            mode_data_length: (len - 2) as u16,
            medium_type: 0,
            device_specific,
            longlba,
            block_descriptor_length: bdl as u16,
        }
        .emit(&mut buf[..8]);
    } else {
        ModeHeader6Repr {
            mode_data_length: (len - 1) as u8,
            medium_type: 0,
            device_specific,
            block_descriptor_length: bdl as u8,
        }
        .emit(&mut buf[..4]);
    }
    Ok(put(out, &buf[..len]))
}

/// MODE SELECT(6)/(10) (`spc_emulate_modeselect`): what LIO accepts is a page equal to its
/// current values (nothing is changeable). An empty parameter list is GOOD; one shorter
/// than the header and two page bytes, or than the page, is PARAMETER LIST LENGTH ERROR;
/// PF clear is INVALID FIELD IN CDB; a page we lack is INVALID FIELD IN CDB
/// (`TCM_UNKNOWN_MODE_PAGE`); a page that differs is INVALID FIELD IN PARAMETER LIST. We
/// skip the block descriptors the header announces (LIO reads the page right after the
/// header whatever BLOCK DESCRIPTOR LENGTH says).
pub(crate) fn mode_select(
    lu: &LogicalUnit,
    ten: bool,
    pf: bool,
    data: &[u8],
) -> Result<Done, SenseReason> {
    if data.is_empty() {
        return Ok(Done::NoData);
    }
    let hdr = if ten { 8 } else { 4 };
    if data.len() < hdr + 2 {
        return Err(SenseReason::ParameterListLengthError);
    }
    if !pf {
        return Err(SenseReason::InvalidCdbField);
    }
    let bdl = if ten {
        usize::from(u16::from_be_bytes([data[6], data[7]]))
    } else {
        usize::from(data[3])
    };
    let off = hdr + bdl;
    if data.len() < off + 2 {
        return Err(SenseReason::ParameterListLengthError);
    }
    let page = data[off] & 0x3f;
    let subpage = if data[off] & 0x40 != 0 {
        data[off + 1]
    } else {
        0
    };
    let mut cur = [0u8; 64];
    let n = if subpage == 0 {
        lu.mode_page(page, false, &mut cur)
    } else {
        None
    }
    .ok_or(SenseReason::UnknownModePage)?;
    let got = data
        .get(off..off + n)
        .ok_or(SenseReason::ParameterListLengthError)?;
    if got != &cur[..n] {
        return Err(SenseReason::InvalidParameterList);
    }
    Ok(Done::NoData)
}

/// START STOP UNIT (`sbc_emulate_startstop`): only IMMED=1, POWER CONDITION MODIFIER 0,
/// POWER CONDITION 0 (START_VALID), LOEJ=0, NO_FLUSH=0 and START=1 — "we are ready" — is
/// GOOD; anything else (a stop, an eject, a power condition) is INVALID FIELD IN CDB.
pub(crate) fn start_stop(cdb: &[u8; 5]) -> Result<(), SenseReason> {
    if cdb[1] & 1 == 0 || cdb[2] != 0 || cdb[3] != 0 {
        return Err(SenseReason::InvalidCdbField);
    }
    if cdb[4] >> 4 != 0 {
        return Err(SenseReason::InvalidCdbField);
    }
    if cdb[4] & 1 == 0 || cdb[4] & 0x06 != 0 {
        return Err(SenseReason::InvalidCdbField);
    }
    Ok(())
}

/// REPORT TARGET PORT GROUPS (`core_emulate_report_target_port_groups`, SPC-4 §6.37):
/// RETURN DATA LENGTH (and with the extended header FORMAT TYPE 1 and IMPLICIT TRANSITION
/// TIME 0), then per group: PREF and ASYMMETRIC ACCESS STATE, the supported states (AO and
/// AN: we have no others), the group id, STATUS CODE 0, the port count and each port's
/// RELATIVE TARGET PORT IDENTIFIER.
pub(crate) fn report_target_port_groups(groups: &[crate::PortGroup], extended: bool) -> Vec<u8> {
    let hdr = if extended { 8 } else { 4 };
    let mut out = vec![0u8; hdr];
    for g in groups {
        let state = match g.state {
            crate::AluaState::ActiveOptimized => 0,
            crate::AluaState::ActiveNonOptimized => 1,
        };
        out.push(if g.preferred { 0x80 } else { 0 } | state);
        out.push(0x02 | 0x01); // AN_SUP, AO_SUP
        out.extend_from_slice(&g.id.to_be_bytes());
        out.push(0);
        out.push(0); // STATUS CODE: no status available
        out.push(0);
        out.push(u8::try_from(g.ports.len()).unwrap_or(u8::MAX));
        for p in g.ports.iter().take(255) {
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&p.to_be_bytes());
        }
    }
    let len = u32::try_from(out.len() - 4).unwrap_or(u32::MAX);
    write_u32(&mut out, 0, len);
    if extended {
        out[4] = 0x10; // FORMAT TYPE 001b
        out[5] = 0; // IMPLICIT TRANSITION TIME
    }
    out
}
