//! Information units on the data path, read and written in place: the parts of SRP a target
//! and an initiator share.
//!
//! The wire crate's `Repr`s (`softrdma_wire::srp`) own their fields (`Vec`s for the CDB and
//! descriptor lists); here an SRP_CMD is read straight out of the receive buffer it landed
//! in ([`CmdIu`]) and responses are written straight into the send buffer ([`write_rsp`],
//! [`write_tsk_mgmt_rsp`]), so an I/O allocates nothing. Every offset is checked against the
//! number of bytes that arrived, not the buffer's size (ib_srpt trusts its ring buffers).

use softrdma_wire::scsi::ScsiStatus;
use softrdma_wire::srp::cmd::field as cmd_field;
use softrdma_wire::srp::rsp::field as rsp_field;
use softrdma_wire::srp::{
    DirectBuf, Opcode, RspCode, RspFlags, DATA_DESC_DIRECT, DATA_DESC_IMM, DATA_DESC_INDIRECT,
    NO_DATA_DESC,
};

/// `sizeof(struct srp_cmd)`: the fixed part of an SRP_CMD, and the smallest immediate data
/// offset ib_srpt accepts at login.
pub const SRP_CMD_LEN: usize = cmd_field::ADD_DATA;
/// `sizeof(struct srp_rsp)`.
pub const SRP_RSP_LEN: usize = rsp_field::DATA;

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn be64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_be_bytes(a)
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}

/// Why an SRP_CMD's data descriptors cannot be used (`srpt_get_desc_tbl` failing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DescError {
    /// The IU is shorter than its own descriptors say.
    Truncated { need: usize, got: usize },
    /// An indirect table with more entries than the IU carries (the initiator wants us to
    /// fetch the table from its memory; ib_srpt refuses these too).
    ExternalTable { entries: u32, in_iu: u32 },
    /// A format code SRP does not define (or immediate data-in).
    UnsupportedFormat { data_out: bool, format: u8 },
    /// Both directions at once (bidirectional commands are not supported).
    Bidirectional,
    /// Immediate data not negotiated at login, placed before its descriptor's end, or
    /// beyond the largest request.
    BadImmediate,
}

/// The direction of an SRP_CMD's data (from the target's side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    #[default]
    None,
    /// Data-in: RDMA WRITE to the initiator.
    In,
    /// Data-out: RDMA READ from the initiator, or immediate data in the IU.
    Out,
}

/// The initiator's memory descriptors of one SRP_CMD, read in place (16 bytes each).
#[derive(Debug, Clone, Copy)]
pub struct DescList<'a> {
    bytes: &'a [u8],
}

impl<'a> DescList<'a> {
    pub fn len(&self) -> usize {
        self.bytes.len() / cmd_field::DIRECT_BUF_LEN
    }
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    pub fn get(&self, i: usize) -> Option<DirectBuf> {
        let off = i.checked_mul(cmd_field::DIRECT_BUF_LEN)?;
        let b = self.bytes.get(off..off + cmd_field::DIRECT_BUF_LEN)?;
        Some(DirectBuf {
            va: be64(b, 0),
            key: be32(b, 8),
            len: be32(b, 12),
        })
    }
    pub fn iter(&self) -> impl Iterator<Item = DirectBuf> + 'a {
        let l = *self;
        (0..l.len()).filter_map(move |i| l.get(i))
    }
}

/// The data phase an SRP_CMD describes.
#[derive(Debug, Clone, Copy)]
pub enum DataPhase<'a> {
    None,
    /// Direct or indirect descriptors: `total` bytes in the initiator's memory.
    Rdma {
        dir: Direction,
        total: u32,
        descs: DescList<'a>,
    },
    /// Data-out carried in the IU itself (SRP-2 immediate data).
    Immediate {
        data: &'a [u8],
    },
}

impl DataPhase<'_> {
    pub fn direction(&self) -> Direction {
        match self {
            DataPhase::None => Direction::None,
            DataPhase::Rdma { dir, .. } => *dir,
            DataPhase::Immediate { .. } => Direction::Out,
        }
    }
    /// The expected data transfer length the descriptors announce.
    pub fn len(&self) -> u32 {
        match self {
            DataPhase::None => 0,
            DataPhase::Rdma { total, .. } => *total,
            DataPhase::Immediate { data } => data.len() as u32,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An SRP_CMD as it arrived: the first `byte_len` bytes of a receive buffer.
#[derive(Debug, Clone, Copy)]
pub struct CmdIu<'a> {
    b: &'a [u8],
}

impl<'a> CmdIu<'a> {
    /// A view of `b` (exactly the received bytes) if it holds an SRP_CMD's fixed part.
    pub fn new(b: &'a [u8]) -> Option<CmdIu<'a>> {
        (b.len() >= SRP_CMD_LEN && b[0] == Opcode::CMD.0).then_some(CmdIu { b })
    }
    pub fn tag(&self) -> u64 {
        be64(self.b, cmd_field::TAG)
    }
    pub fn lun(&self) -> [u8; 8] {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.b[cmd_field::LUN..cmd_field::LUN + 8]);
        a
    }
    pub fn task_attr(&self) -> u8 {
        self.b[cmd_field::TASK_ATTR]
    }
    fn add_cdb_len(&self) -> usize {
        usize::from(self.b[cmd_field::ADD_CDB_LEN] & !3)
    }
    /// The CDB: the 16-byte field and the additional CDB after it (`None` if the IU ends
    /// inside the additional CDB).
    pub fn cdb(&self) -> Option<&'a [u8]> {
        self.b
            .get(cmd_field::CDB..cmd_field::ADD_DATA + self.add_cdb_len())
    }

    /// The data descriptors, as `srpt_get_desc_tbl` reads them, with the checks it lacks.
    /// `imm_data_offset` is the channel's (0 when immediate data was not negotiated),
    /// `max_req_size` the largest IU the target takes.
    pub fn data_phase(
        &self,
        imm_data_offset: u16,
        max_req_size: u32,
    ) -> Result<DataPhase<'a>, DescError> {
        let fmt = self.b[cmd_field::BUF_FMT];
        let (out_fmt, in_fmt) = (fmt >> 4, fmt & 0x0f);
        let (dir, f, data_out) = match (out_fmt, in_fmt) {
            (NO_DATA_DESC, NO_DATA_DESC) => return Ok(DataPhase::None),
            (NO_DATA_DESC, f) => (Direction::In, f, false),
            (f, NO_DATA_DESC) => (Direction::Out, f, true),
            _ => return Err(DescError::Bidirectional),
        };
        let off = cmd_field::ADD_DATA + self.add_cdb_len();
        let need = |n: usize| {
            let end = off + n;
            if self.b.len() < end {
                Err(DescError::Truncated {
                    need: end,
                    got: self.b.len(),
                })
            } else {
                Ok(end)
            }
        };
        match f {
            DATA_DESC_DIRECT => {
                let end = need(cmd_field::DIRECT_BUF_LEN)?;
                let descs = DescList {
                    bytes: &self.b[off..end],
                };
                let total = descs.get(0).map_or(0, |d| d.len);
                Ok(DataPhase::Rdma { dir, total, descs })
            }
            DATA_DESC_INDIRECT => {
                need(cmd_field::INDIRECT_HDR_LEN)?;
                let entries = be32(self.b, off + 12) / cmd_field::DIRECT_BUF_LEN as u32;
                let in_iu = u32::from(self.b[cmd_field::DATA_OUT_DESC_CNT])
                    + u32::from(self.b[cmd_field::DATA_IN_DESC_CNT]);
                if entries > in_iu {
                    return Err(DescError::ExternalTable { entries, in_iu });
                }
                let start = off + cmd_field::INDIRECT_HDR_LEN;
                let end = need(cmd_field::INDIRECT_HDR_LEN + entries as usize * 16)?;
                Ok(DataPhase::Rdma {
                    dir,
                    total: be32(self.b, off + 16),
                    descs: DescList {
                        bytes: &self.b[start..end],
                    },
                })
            }
            DATA_DESC_IMM if data_out => {
                let end = need(cmd_field::IMM_BUF_LEN)?;
                let len = be32(self.b, off) as usize;
                let start = usize::from(imm_data_offset);
                if imm_data_offset == 0 || start < end {
                    return Err(DescError::BadImmediate);
                }
                let stop = start.checked_add(len).ok_or(DescError::BadImmediate)?;
                if stop > max_req_size as usize {
                    return Err(DescError::BadImmediate);
                }
                let data = self.b.get(start..stop).ok_or(DescError::Truncated {
                    need: stop,
                    got: self.b.len(),
                })?;
                Ok(DataPhase::Immediate { data })
            }
            format => Err(DescError::UnsupportedFormat { data_out, format }),
        }
    }
}

/// The residual fields of an SRP_RSP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RspResidual {
    pub flags: u8,
    pub data_out: u32,
    pub data_in: u32,
}

impl RspResidual {
    /// `srpt_build_cmd_rsp`: an underflow or overflow in the command's direction.
    pub fn new(dir: Direction, under: bool, over: bool, count: u32) -> RspResidual {
        let mut r = RspResidual::default();
        match (dir, under, over) {
            (Direction::Out, true, _) => {
                r.flags = RspFlags::DOUNDER;
                r.data_out = count;
            }
            (Direction::In, true, _) => {
                r.flags = RspFlags::DIUNDER;
                r.data_in = count;
            }
            (Direction::Out, false, true) => {
                r.flags = RspFlags::DOOVER;
                r.data_out = count;
            }
            (Direction::In, false, true) => {
                r.flags = RspFlags::DIOVER;
                r.data_in = count;
            }
            _ => {}
        }
        r
    }
}

/// Writes an SRP_RSP for a SCSI command into `buf` (`srpt_build_cmd_rsp`): status, residual,
/// sense data cut to `max_ti_iu_len`. Returns its length, or `None` if `buf` is too small.
pub fn write_rsp(
    buf: &mut [u8],
    tag: u64,
    req_lim_delta: u32,
    status: ScsiStatus,
    residual: RspResidual,
    sense: &[u8],
    max_ti_iu_len: u32,
) -> Option<usize> {
    let room = (max_ti_iu_len as usize).saturating_sub(SRP_RSP_LEN);
    let sense = &sense[..sense.len().min(room)];
    let len = SRP_RSP_LEN + sense.len();
    let b = buf.get_mut(..len)?;
    b[..SRP_RSP_LEN].fill(0);
    b[rsp_field::OPCODE] = Opcode::RSP.0;
    put32(b, rsp_field::REQ_LIM_DELTA, req_lim_delta);
    put64(b, rsp_field::TAG, tag);
    b[rsp_field::STATUS] = status.0;
    let mut flags = residual.flags;
    put32(b, rsp_field::DATA_OUT_RES_CNT, residual.data_out);
    put32(b, rsp_field::DATA_IN_RES_CNT, residual.data_in);
    if !sense.is_empty() {
        flags |= RspFlags::SNSVALID;
        put32(b, rsp_field::SENSE_DATA_LEN, sense.len() as u32);
        b[SRP_RSP_LEN..].copy_from_slice(sense);
    }
    b[rsp_field::FLAGS] = flags;
    Some(len)
}

/// Writes the SRP_RSP of a task management request (`srpt_build_tskmgmt_rsp`: RSPVALID and
/// four bytes of response data with the RSP_CODE last). Returns its length.
pub fn write_tsk_mgmt_rsp(
    buf: &mut [u8],
    tag: u64,
    req_lim_delta: u32,
    code: RspCode,
) -> Option<usize> {
    let len = SRP_RSP_LEN + 4;
    let b = buf.get_mut(..len)?;
    b.fill(0);
    b[rsp_field::OPCODE] = Opcode::RSP.0;
    put32(b, rsp_field::REQ_LIM_DELTA, req_lim_delta);
    put64(b, rsp_field::TAG, tag);
    b[rsp_field::FLAGS] = RspFlags::RSPVALID;
    put32(b, rsp_field::RESP_DATA_LEN, 4);
    b[SRP_RSP_LEN + 3] = code.0;
    Some(len)
}

/// Writes a 16-byte IU that is an opcode, a reason or credit word at byte 4 and a tag
/// (SRP_T_LOGOUT, SRP_CRED_REQ, SRP_I_LOGOUT...). Returns 16.
pub fn write_short_iu(buf: &mut [u8], opcode: Opcode, word: u32, tag: u64) -> Option<usize> {
    let b = buf.get_mut(..16)?;
    b.fill(0);
    b[0] = opcode.0;
    put32(b, 4, word);
    put64(b, 8, tag);
    Some(16)
}

/// `SRP_IMM_DATA_OFFSET` of ib_srp.h: where an initiator puts immediate data, chosen so that
/// a 32-byte CDB still fits before it (48 + 16 + 4 = 68).
pub const SRP_IMM_DATA_OFFSET: usize = SRP_CMD_LEN + 16 + cmd_field::IMM_BUF_LEN;

/// The data descriptor an initiator puts in an SRP_CMD (`srp_map_data`).
#[derive(Debug, Clone, Copy)]
pub enum CmdData<'a> {
    /// No data phase.
    None,
    /// One buffer; `out` is data-out (WRITE).
    Direct { out: bool, desc: DirectBuf },
    /// Several buffers: the whole list is also in initiator memory at `table` (ib_srp's
    /// `indirect_desc`), `descs` is the part carried in the IU.
    Indirect {
        out: bool,
        table: DirectBuf,
        total: u32,
        descs: &'a [DirectBuf],
    },
    /// Data-out carried in the IU at [`SRP_IMM_DATA_OFFSET`] (`len` bytes).
    Immediate { len: u32 },
}

/// Writes an SRP_CMD into `buf` as `srp_queuecommand` + `srp_map_data` build it: the fixed part,
/// the CDB (more than 16 bytes go to the additional CDB, rounded up to 4), then the
/// descriptor. `tag` and `lun` are the wire bytes. Returns the IU's length without immediate
/// data (for [`CmdData::Immediate`]: [`SRP_IMM_DATA_OFFSET`]; the caller writes the data
/// there), or `None` if `buf` is too small or the CDB longer than 32 bytes.
pub fn write_cmd(
    buf: &mut [u8],
    tag: u64,
    lun: [u8; 8],
    task_attr: u8,
    cdb: &[u8],
    data: &CmdData<'_>,
) -> Option<usize> {
    if cdb.len() > 32 {
        return None;
    }
    let add = cdb.len().saturating_sub(16).div_ceil(4) * 4;
    let off = SRP_CMD_LEN + add;
    let (fmt, out, desc_len, count) = match data {
        CmdData::None => (0u8, false, 0, 0u8),
        CmdData::Direct { out, .. } => (DATA_DESC_DIRECT, *out, cmd_field::DIRECT_BUF_LEN, 0),
        CmdData::Indirect { out, descs, .. } => (
            DATA_DESC_INDIRECT,
            *out,
            cmd_field::INDIRECT_HDR_LEN + descs.len() * cmd_field::DIRECT_BUF_LEN,
            u8::try_from(descs.len()).ok()?,
        ),
        CmdData::Immediate { .. } => (DATA_DESC_IMM, true, cmd_field::IMM_BUF_LEN, 0),
    };
    let len = match data {
        CmdData::Immediate { .. } => SRP_IMM_DATA_OFFSET,
        _ => off + desc_len,
    };
    let b = buf.get_mut(..len)?;
    b.fill(0);
    b[cmd_field::OPCODE] = Opcode::CMD.0;
    b[cmd_field::BUF_FMT] = if out { fmt << 4 } else { fmt };
    if out {
        b[cmd_field::DATA_OUT_DESC_CNT] = count;
    } else {
        b[cmd_field::DATA_IN_DESC_CNT] = count;
    }
    put64(b, cmd_field::TAG, tag);
    b[cmd_field::LUN..cmd_field::LUN + 8].copy_from_slice(&lun);
    b[cmd_field::TASK_ATTR] = task_attr;
    b[cmd_field::ADD_CDB_LEN] = add as u8;
    b[cmd_field::CDB..cmd_field::CDB + cdb.len()].copy_from_slice(cdb);
    let put_desc = |b: &mut [u8], at: usize, d: &DirectBuf| {
        put64(b, at, d.va);
        put32(b, at + 8, d.key);
        put32(b, at + 12, d.len);
    };
    match data {
        CmdData::None => {}
        CmdData::Direct { desc, .. } => put_desc(b, off, desc),
        CmdData::Indirect {
            table,
            total,
            descs,
            ..
        } => {
            put_desc(b, off, table);
            put32(b, off + 16, *total);
            for (i, d) in descs.iter().enumerate() {
                put_desc(b, off + cmd_field::INDIRECT_HDR_LEN + 16 * i, d);
            }
        }
        CmdData::Immediate { len } => put32(b, off, *len),
    }
    Some(len)
}

/// Writes an SRP_TSK_MGMT (`srp_send_tsk_mgmt`, 48 bytes): `tag` and `task_tag` as wire
/// bytes. Returns 48.
pub fn write_tsk_mgmt(
    buf: &mut [u8],
    tag: u64,
    lun: [u8; 8],
    function: u8,
    task_tag: u64,
) -> Option<usize> {
    use softrdma_wire::srp::tsk_mgmt::field as t;
    let b = buf.get_mut(..t::LEN)?;
    b.fill(0);
    b[t::OPCODE] = Opcode::TSK_MGMT.0;
    put64(b, t::TAG, tag);
    b[t::LUN..t::LUN + 8].copy_from_slice(&lun);
    b[t::TSK_MGMT_FUNC] = function;
    put64(b, t::TASK_TAG, task_tag);
    Some(t::LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_wire::srp::{CmdRepr, DataDescriptor, IndirectBuf, RspRepr};

    fn cmd(data_out: DataDescriptor, data_in: DataDescriptor) -> CmdRepr {
        CmdRepr {
            tag: 0x2a,
            lun: 0x0001_0000_0000_0000,
            cdb: [0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0],
            data_out,
            data_in,
            ..CmdRepr::default()
        }
    }

    #[test]
    fn direct_indirect_immediate() {
        let d = DirectBuf {
            va: 0x1000,
            key: 7,
            len: 4096,
        };
        let b = cmd(DataDescriptor::None, DataDescriptor::Direct(d)).to_bytes();
        let c = CmdIu::new(&b).expect("cmd");
        assert_eq!(c.tag(), 0x2a);
        assert_eq!(c.cdb().expect("cdb").len(), 16);
        let DataPhase::Rdma { dir, total, descs } = c.data_phase(0, 8276).expect("phase") else {
            panic!()
        };
        assert_eq!((dir, total, descs.len()), (Direction::In, 4096, 1));
        assert_eq!(descs.get(0), Some(d));

        let list = vec![d, DirectBuf { va: 0x9000, ..d }];
        let ind = IndirectBuf {
            table: DirectBuf {
                va: 0x5000,
                key: 1,
                len: 32,
            },
            total_len: 8192,
            descs: list.clone(),
        };
        let b = cmd(DataDescriptor::Indirect(ind.clone()), DataDescriptor::None).to_bytes();
        let c = CmdIu::new(&b).expect("cmd");
        let DataPhase::Rdma { dir, total, descs } = c.data_phase(0, 8276).expect("phase") else {
            panic!()
        };
        assert_eq!((dir, total), (Direction::Out, 8192));
        assert_eq!(descs.iter().collect::<Vec<_>>(), list);
        // A table bigger than the partial list: refused, as ib_srpt does.
        let mut big = ind;
        big.table.len = 48;
        let b = cmd(DataDescriptor::Indirect(big), DataDescriptor::None).to_bytes();
        assert_eq!(
            CmdIu::new(&b)
                .expect("cmd")
                .data_phase(0, 8276)
                .unwrap_err(),
            DescError::ExternalTable {
                entries: 3,
                in_iu: 2
            }
        );

        let mut r = cmd(DataDescriptor::None, DataDescriptor::None);
        r.set_immediate_data(68, b"hello");
        let b = r.to_bytes();
        let c = CmdIu::new(&b).expect("cmd");
        let DataPhase::Immediate { data } = c.data_phase(68, 8276).expect("phase") else {
            panic!()
        };
        assert_eq!(data, b"hello");
        // Not negotiated, or running past the IU.
        assert_eq!(c.data_phase(0, 8276).unwrap_err(), DescError::BadImmediate);
        assert!(CmdIu::new(&b[..70])
            .expect("cmd")
            .data_phase(68, 8276)
            .is_err());
    }

    #[test]
    fn responses_parse_back() {
        let mut buf = [0u8; 256];
        let n = write_rsp(
            &mut buf,
            0x2a,
            1,
            ScsiStatus::CHECK_CONDITION,
            RspResidual::new(Direction::In, true, false, 512),
            &[0x70; 40],
            64,
        )
        .expect("fits");
        assert_eq!(n, 64);
        let r = RspRepr::parse(&buf[..n]).expect("rsp");
        assert_eq!(r.tag, 0x2a);
        assert!(r.flags.snsvalid() && r.flags.diunder());
        assert_eq!(r.data_in_res_cnt, 512);
        assert_eq!(r.sense_data.len(), 28, "cut to max_ti_iu_len");
        let n = write_tsk_mgmt_rsp(&mut buf, 9, 2, RspCode::NOT_SUPPORTED).expect("fits");
        let r = RspRepr::parse(&buf[..n]).expect("rsp");
        assert_eq!(r.rsp_code(), Some(RspCode::NOT_SUPPORTED));
        assert_eq!(r.req_lim_delta, 2);
    }
}
