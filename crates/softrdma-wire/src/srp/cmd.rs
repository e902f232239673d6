//! SRP_CMD (SRP r16a §6.8 and SRP-2 immediate data; `struct srp_cmd` and the descriptors
//! `srp_direct_buf`, `srp_indirect_buf`, `srp_imm_buf` in `include/scsi/srp.h`).
//!
//! The 48-byte fixed part is followed by the additional CDB (ADDITIONAL CDB LENGTH, whose low
//! two bits are reserved: the length in bytes is `add_cdb_len & !3`, as `srpt_get_desc_buf`
//! computes it), then the DATA-OUT buffer descriptor, then the DATA-IN buffer descriptor, each
//! in the format the BUFFER FORMATS nibbles name (high nibble data-out, low nibble data-in):
//! none, direct (16 bytes), indirect (20 bytes + a partial list of COUNT direct descriptors),
//! or, for data-out only, immediate (4 bytes: the data length; the data itself sits at the
//! channel's `imm_data_offset` from the login, 68 for ib_srp).
//!
//! Linux's ib_srp fills only one direction and leaves the descriptor counts at 0 for direct
//! descriptors; bytes between the descriptors and the immediate data are stale buffer contents
//! (seen in the capture), kept in [`Repr::trailing`] so that re-emitting is exact.

use super::{dissect_tag, Opcode};
use crate::dissect::{Dissect, Tree};
use crate::field::{read_u32, read_u64, write_u32, write_u64};
use crate::{Error, Result};

/// Buffer format nibble: no descriptor.
pub const NO_DATA_DESC: u8 = 0;
/// Buffer format nibble: one direct descriptor.
pub const DATA_DESC_DIRECT: u8 = 1;
/// Buffer format nibble: an indirect descriptor table.
pub const DATA_DESC_INDIRECT: u8 = 2;
/// Buffer format nibble (SRP-2, data-out only): immediate data.
pub const DATA_DESC_IMM: u8 = 3;

code_point! {
    /// TASK ATTRIBUTE (SRP r16a table 22; `SRP_CMD_*_Q` in ib_srpt.h).
    pub struct TaskAttr(u8) {
        SIMPLE = 0 => "SIMPLE",
        HEAD_OF_QUEUE = 1 => "HEAD OF QUEUE",
        ORDERED = 2 => "ORDERED",
        ACA = 4 => "ACA",
    }
}

/// Field offsets of `struct srp_cmd`.
pub mod field {
    pub const OPCODE: usize = 0;
    pub const SOL_NOT: usize = 1;
    pub const BUF_FMT: usize = 5;
    pub const DATA_OUT_DESC_CNT: usize = 6;
    pub const DATA_IN_DESC_CNT: usize = 7;
    pub const TAG: usize = 8;
    pub const LUN: usize = 20;
    pub const TASK_ATTR: usize = 29;
    pub const ADD_CDB_LEN: usize = 31;
    pub const CDB: usize = 32;
    /// Additional CDB, then the descriptors.
    pub const ADD_DATA: usize = 48;
    /// `struct srp_direct_buf`: va (8), key (4), len (4).
    pub const DIRECT_BUF_LEN: usize = 16;
    /// `struct srp_indirect_buf` without its descriptor list: table descriptor + total length.
    pub const INDIRECT_HDR_LEN: usize = 20;
    /// `struct srp_imm_buf`: len (4).
    pub const IMM_BUF_LEN: usize = 4;
}

min_view!(
    /// A view of an SRP_CMD.
    Packet,
    field::ADD_DATA,
    "srp.cmd"
);

be_fields!(Packet {
    opcode, set_opcode: u8 @ field::OPCODE;
    sol_not, set_sol_not: u8 @ field::SOL_NOT;
    buf_fmt, set_buf_fmt: u8 @ field::BUF_FMT;
    data_out_desc_cnt, set_data_out_desc_cnt: u8 @ field::DATA_OUT_DESC_CNT;
    data_in_desc_cnt, set_data_in_desc_cnt: u8 @ field::DATA_IN_DESC_CNT;
    tag, set_tag: u64 @ field::TAG;
    lun, set_lun: u64 @ field::LUN;
    task_attr_raw, set_task_attr_raw: u8 @ field::TASK_ATTR;
    add_cdb_len, set_add_cdb_len: u8 @ field::ADD_CDB_LEN;
    cdb, set_cdb: [u8; 16] @ field::CDB;
});

iu_view!(Packet, Opcode::CMD, field::OPCODE, "srp.cmd");

impl<T: AsRef<[u8]>> Packet<T> {
    /// DATA-OUT BUFFER DESCRIPTOR FORMAT (high nibble).
    pub fn data_out_format(&self) -> u8 {
        self.buf_fmt() >> 4
    }

    /// DATA-IN BUFFER DESCRIPTOR FORMAT (low nibble).
    pub fn data_in_format(&self) -> u8 {
        self.buf_fmt() & 0x0f
    }

    /// The additional CDB's length in bytes (`add_cdb_len & !3`).
    pub fn additional_cdb_len(&self) -> usize {
        usize::from(self.add_cdb_len() & !3)
    }

    /// Where the descriptors start.
    pub fn descriptors_offset(&self) -> usize {
        field::ADD_DATA + self.additional_cdb_len()
    }
}

/// A direct data buffer descriptor: one remote memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct DirectBuf {
    pub va: u64,
    /// The remote key (R_Key) of the region.
    pub key: u32,
    pub len: u32,
}

impl DirectBuf {
    fn parse(b: &[u8], off: usize, what: &'static str) -> Result<DirectBuf> {
        let end = off.saturating_add(field::DIRECT_BUF_LEN);
        if b.len() < end {
            return Err(Error::Truncated {
                what,
                need: end,
                got: b.len(),
            });
        }
        Ok(DirectBuf {
            va: read_u64(b, off),
            key: read_u32(b, off + 8),
            len: read_u32(b, off + 12),
        })
    }

    fn emit(&self, b: &mut [u8], off: usize) {
        write_u64(b, off, self.va);
        write_u32(b, off + 8, self.key);
        write_u32(b, off + 12, self.len);
    }
}

/// An indirect data buffer descriptor: where the full descriptor table lives, the total
/// transfer length, and the part of the table carried in the IU.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct IndirectBuf {
    /// The descriptor table in initiator memory (`len` = 16 × number of entries).
    pub table: DirectBuf,
    /// TOTAL LENGTH of the transfer.
    pub total_len: u32,
    /// The partial memory descriptor list in the IU (its length is the descriptor count;
    /// at most 255 are emitted).
    pub descs: Vec<DirectBuf>,
}

/// The SRP-2 immediate data descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct ImmBuf {
    pub len: u32,
}

/// One data buffer descriptor, in the format its BUFFER FORMAT nibble names.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub enum DataDescriptor {
    #[default]
    None,
    Direct(DirectBuf),
    Indirect(IndirectBuf),
    Immediate(ImmBuf),
}

impl DataDescriptor {
    /// The format nibble.
    pub fn format(&self) -> u8 {
        match self {
            DataDescriptor::None => NO_DATA_DESC,
            DataDescriptor::Direct(_) => DATA_DESC_DIRECT,
            DataDescriptor::Indirect(_) => DATA_DESC_INDIRECT,
            DataDescriptor::Immediate(_) => DATA_DESC_IMM,
        }
    }

    /// The value of the descriptor count field (the partial list's length for indirect).
    pub fn count(&self) -> u8 {
        match self {
            DataDescriptor::Indirect(i) => u8::try_from(i.descs.len()).unwrap_or(u8::MAX),
            _ => 0,
        }
    }

    /// Bytes the descriptor occupies in the IU.
    pub fn wire_len(&self) -> usize {
        match self {
            DataDescriptor::None => 0,
            DataDescriptor::Direct(_) => field::DIRECT_BUF_LEN,
            DataDescriptor::Indirect(_) => {
                field::INDIRECT_HDR_LEN + usize::from(self.count()) * field::DIRECT_BUF_LEN
            }
            DataDescriptor::Immediate(_) => field::IMM_BUF_LEN,
        }
    }

    /// The data length the descriptor announces (as `srpt_get_desc_tbl` computes it).
    pub fn data_len(&self) -> u64 {
        match self {
            DataDescriptor::None => 0,
            DataDescriptor::Direct(d) => u64::from(d.len),
            DataDescriptor::Indirect(i) => u64::from(i.total_len),
            DataDescriptor::Immediate(m) => u64::from(m.len),
        }
    }

    fn parse(
        b: &[u8],
        off: usize,
        fmt: u8,
        count: u8,
        data_out: bool,
    ) -> Result<(DataDescriptor, usize)> {
        let (what, fmt_field) = if data_out {
            ("srp.cmd.data_out_desc", "srp.cmd.data_out_format")
        } else {
            ("srp.cmd.data_in_desc", "srp.cmd.data_in_format")
        };
        match fmt {
            NO_DATA_DESC => Ok((DataDescriptor::None, 0)),
            DATA_DESC_DIRECT => Ok((
                DataDescriptor::Direct(DirectBuf::parse(b, off, what)?),
                field::DIRECT_BUF_LEN,
            )),
            DATA_DESC_INDIRECT => {
                let len = field::INDIRECT_HDR_LEN + usize::from(count) * field::DIRECT_BUF_LEN;
                let end = off.saturating_add(len);
                if b.len() < end {
                    // A descriptor count that runs past the IU.
                    return Err(Error::Truncated {
                        what,
                        need: end,
                        got: b.len(),
                    });
                }
                let table = DirectBuf::parse(b, off, what)?;
                let total_len = read_u32(b, off + 16);
                let descs = (0..usize::from(count))
                    .map(|i| {
                        DirectBuf::parse(
                            b,
                            off + field::INDIRECT_HDR_LEN + i * field::DIRECT_BUF_LEN,
                            what,
                        )
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok((
                    DataDescriptor::Indirect(IndirectBuf {
                        table,
                        total_len,
                        descs,
                    }),
                    len,
                ))
            }
            DATA_DESC_IMM if data_out => {
                let end = off.saturating_add(field::IMM_BUF_LEN);
                if b.len() < end {
                    return Err(Error::Truncated {
                        what,
                        need: end,
                        got: b.len(),
                    });
                }
                Ok((
                    DataDescriptor::Immediate(ImmBuf {
                        len: read_u32(b, off),
                    }),
                    field::IMM_BUF_LEN,
                ))
            }
            // An unknown format (or immediate data-in) leaves the descriptor's length, and so
            // everything after it, undefined: the target logs the channel out (T_LOGOUT 6/7).
            other => Err(Error::BadValue {
                field: fmt_field,
                value: u64::from(other),
            }),
        }
    }

    fn emit(&self, b: &mut [u8], off: usize) {
        match self {
            DataDescriptor::None => {}
            DataDescriptor::Direct(d) => d.emit(b, off),
            DataDescriptor::Indirect(i) => {
                i.table.emit(b, off);
                write_u32(b, off + 16, i.total_len);
                for (n, d) in i.descs.iter().take(usize::from(self.count())).enumerate() {
                    d.emit(b, off + field::INDIRECT_HDR_LEN + n * field::DIRECT_BUF_LEN);
                }
            }
            DataDescriptor::Immediate(m) => write_u32(b, off, m.len),
        }
    }
}

/// A SCSI command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Repr {
    pub sol_not: u8,
    pub tag: u64,
    /// The 8-byte SAM LUN, read big-endian (LUN 0 is 0).
    pub lun: u64,
    pub task_attr: TaskAttr,
    /// The first 16 CDB bytes (shorter CDBs are zero-padded).
    pub cdb: [u8; 16],
    /// CDB bytes beyond 16, a multiple of 4 long (at most 252).
    pub additional_cdb: Vec<u8>,
    pub data_out: DataDescriptor,
    pub data_in: DataDescriptor,
    /// Everything after the descriptors: for immediate data, padding up to the channel's
    /// immediate data offset and then the data.
    pub trailing: Vec<u8>,
}

impl Repr {
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        let p = Packet::parse_iu(buf)?;
        let add = p.additional_cdb_len();
        let mut off = p.descriptors_offset();
        let additional_cdb = buf
            .get(field::ADD_DATA..off)
            .ok_or(Error::Truncated {
                what: "srp.cmd.additional_cdb",
                need: field::ADD_DATA + add,
                got: buf.len(),
            })?
            .to_vec();
        let (data_out, n) =
            DataDescriptor::parse(buf, off, p.data_out_format(), p.data_out_desc_cnt(), true)?;
        off += n;
        let (data_in, n) =
            DataDescriptor::parse(buf, off, p.data_in_format(), p.data_in_desc_cnt(), false)?;
        off += n;
        Ok(Repr {
            sol_not: p.sol_not(),
            tag: p.tag(),
            lun: p.lun(),
            task_attr: TaskAttr(p.task_attr_raw()),
            cdb: p.cdb(),
            additional_cdb,
            data_out,
            data_in,
            trailing: buf.get(off..).unwrap_or(&[]).to_vec(),
        })
    }

    fn add_cdb_len(&self) -> usize {
        self.additional_cdb.len().min(252) & !3
    }

    /// Where the descriptors end (and the trailing bytes begin).
    pub fn header_len(&self) -> usize {
        field::ADD_DATA + self.add_cdb_len() + self.data_out.wire_len() + self.data_in.wire_len()
    }

    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.trailing.len()
    }

    pub fn emit(&self, buf: &mut [u8]) {
        let add = self.add_cdb_len();
        let mut p = Packet::emit_iu(&mut *buf, self.buffer_len());
        p.set_sol_not(self.sol_not);
        p.set_buf_fmt((self.data_out.format() << 4) | (self.data_in.format() & 0x0f));
        p.set_data_out_desc_cnt(self.data_out.count());
        p.set_data_in_desc_cnt(self.data_in.count());
        p.set_tag(self.tag);
        p.set_lun(self.lun);
        p.set_task_attr_raw(self.task_attr.0);
        p.set_add_cdb_len(add as u8);
        p.set_cdb(self.cdb);
        buf[field::ADD_DATA..field::ADD_DATA + add].copy_from_slice(&self.additional_cdb[..add]);
        let mut off = field::ADD_DATA + add;
        self.data_out.emit(buf, off);
        off += self.data_out.wire_len();
        self.data_in.emit(buf, off);
        off += self.data_in.wire_len();
        buf[off..].copy_from_slice(&self.trailing);
    }

    to_bytes!();

    /// The CDB bytes: the 16-byte field followed by the additional CDB.
    pub fn full_cdb(&self) -> Vec<u8> {
        let mut v = self.cdb.to_vec();
        v.extend_from_slice(&self.additional_cdb);
        v
    }

    /// The transfer direction's data length, as ib_srpt derives it (data-in takes precedence,
    /// as in `srpt_get_desc_tbl`).
    pub fn data_len(&self) -> u64 {
        if self.data_in != DataDescriptor::None {
            self.data_in.data_len()
        } else {
            self.data_out.data_len()
        }
    }

    /// The immediate data, given the channel's immediate data offset (from the login request).
    /// Fails as ib_srpt does if the data would start before the descriptor ends or run past
    /// the IU.
    pub fn immediate_data(&self, imm_data_offset: u16) -> Result<&[u8]> {
        let len = match &self.data_out {
            DataDescriptor::Immediate(m) => m.len as usize,
            other => {
                return Err(Error::BadValue {
                    field: "srp.cmd.data_out_format",
                    value: u64::from(other.format()),
                })
            }
        };
        let start = usize::from(imm_data_offset)
            .checked_sub(self.header_len())
            .ok_or(Error::BadValue {
                field: "srp.cmd.imm_data_offset",
                value: u64::from(imm_data_offset),
            })?;
        let end = start.saturating_add(len);
        self.trailing.get(start..end).ok_or(Error::Truncated {
            what: "srp.cmd.immediate_data",
            need: self.header_len().saturating_add(end),
            got: self.buffer_len(),
        })
    }

    /// Makes this a data-out command carrying `data` as immediate data at `imm_data_offset`
    /// (zero padding between the descriptor and the data). The offset must lie at or after
    /// the end of the descriptors; if it does not, the data follows them directly.
    pub fn set_immediate_data(&mut self, imm_data_offset: u16, data: &[u8]) {
        self.data_out = DataDescriptor::Immediate(ImmBuf {
            len: data.len() as u32,
        });
        let pad = usize::from(imm_data_offset).saturating_sub(self.header_len());
        self.trailing = vec![0u8; pad];
        self.trailing.extend_from_slice(data);
    }
}

fn dissect_desc(t: &mut Tree, key: &'static str, label: &str, d: &DataDescriptor) {
    let direct = |t: &mut Tree, d: &DirectBuf| {
        t.hex("va", "Virtual Address", d.va, 16);
        t.hex("key", "Memory Handle", d.key, 8);
        t.dec("len", "Data Length", d.len);
    };
    match d {
        DataDescriptor::None => {}
        DataDescriptor::Direct(b) => t.subtree(key, format!("{label} (direct)"), |t| direct(t, b)),
        DataDescriptor::Indirect(i) => t.subtree(key, format!("{label} (indirect)"), |t| {
            t.subtree("table", "Indirect Table Descriptor", |t| {
                direct(t, &i.table)
            });
            t.dec("total_len", "Total Length", i.total_len);
            t.list("descs", "Partial Memory Descriptors", |t| {
                for (n, b) in i.descs.iter().enumerate() {
                    t.subtree("desc", format!("Partial Memory Descriptor {n}"), |t| {
                        direct(t, b)
                    });
                }
            });
        }),
        DataDescriptor::Immediate(m) => t.subtree(key, format!("{label} (immediate)"), |t| {
            t.dec("len", "Data Length", m.len);
        }),
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("srp_cmd", "SRP_CMD", |t| {
            t.code_hex("opcode", "Opcode", Opcode::CMD.0, 2, Opcode::CMD);
            t.hex("sol_not", "Solicited Notification", self.sol_not, 2);
            let fmt = (self.data_out.format() << 4) | self.data_in.format();
            t.hex("buf_fmt", "Buffer Formats", fmt, 2);
            t.dec(
                "data_out_desc_cnt",
                "Data-Out Buffer Descriptor Count",
                self.data_out.count(),
            );
            t.dec(
                "data_in_desc_cnt",
                "Data-In Buffer Descriptor Count",
                self.data_in.count(),
            );
            dissect_tag(t, self.tag);
            t.hex("lun", "Logical Unit Number", self.lun, 16);
            t.code(
                "task_attr",
                "Task Attribute",
                self.task_attr.0,
                self.task_attr,
            );
            t.dec(
                "add_cdb_len",
                "Additional CDB Length",
                self.add_cdb_len() as u8,
            );
            t.bytes("cdb", "CDB", &self.cdb);
            if let Ok(c) = crate::scsi::Cdb::parse(&self.cdb) {
                c.dissect(t);
            }
            if !self.additional_cdb.is_empty() {
                t.bytes("additional_cdb", "Additional CDB", &self.additional_cdb);
            }
            dissect_desc(t, "data_out", "Data-Out Buffer Descriptor", &self.data_out);
            dissect_desc(t, "data_in", "Data-In Buffer Descriptor", &self.data_in);
            if !self.trailing.is_empty() {
                t.bytes("trailing", "Following Data", &self.trailing);
            }
        });
    }
}
