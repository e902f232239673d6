//! What decoding a CDB yields, and what executing it returns.

use softrdma_wire::scsi::{ScsiOpcode, ScsiStatus};

use crate::lun::LunId;
use crate::sense::{Sense, SenseReason};
use crate::NexusId;

/// Direction of a command's data phase, from the target's point of view of SAM: data-in
/// goes to the initiator (READ, INQUIRY), data-out comes from it (WRITE, MODE SELECT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DataDir {
    #[default]
    None,
    In,
    Out,
}

/// The residual the transport reports (SRP_RSP's DIUNDER/DIOVER/DOUNDER/DOOVER and RESIDUAL
/// COUNT): how the data actually moved differs from the initiator's expected data transfer
/// length. The direction is the command's (the transport's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Residual {
    #[default]
    None,
    /// Fewer bytes moved than expected, by this many.
    Underflow(u32),
    /// The command had this many more bytes than the initiator expected.
    Overflow(u32),
}

/// LIO's residual bookkeeping (`SCF_UNDERFLOW_BIT`, `SCF_OVERFLOW_BIT`, `residual_count`
/// and `data_length` of a `se_cmd`), set by `target_cmd_size_check` and adjusted by
/// `target_complete_cmd_with_length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Xfer {
    /// Bytes the data phase moves.
    pub data_len: u32,
    pub under: bool,
    pub over: bool,
    pub residual: u32,
}

impl Xfer {
    /// `target_cmd_size_check`: the CDB says `size` bytes, the initiator expects
    /// `expected`. An overflow keeps the expected length; an underflow moves only `size`.
    /// A data-out mismatch is refused for READ/WRITE-class CDBs (INVALID FIELD IN COMMAND
    /// IU) and for an overflow (INVALID FIELD IN CDB), after the flags are set (so the
    /// CHECK CONDITION carries the residual, as LIO's does).
    pub fn size_check(
        size: u32,
        expected: u32,
        dir: DataDir,
        data_cdb: bool,
    ) -> Result<Xfer, (SenseReason, Residual)> {
        let mut x = Xfer {
            data_len: expected,
            ..Xfer::default()
        };
        if size != expected {
            if size > expected {
                x.over = true;
                x.residual = size - expected;
            } else {
                x.under = true;
                x.residual = expected - size;
                // LIO keeps the whole expected length of a data-out (it pulls the excess
                // and drops it); we do not fetch what we would drop.
                x.data_len = size;
            }
            if dir == DataDir::Out {
                if data_cdb {
                    return Err((SenseReason::InvalidFieldInCommandIu, x.residual()));
                }
                if size > expected {
                    return Err((SenseReason::InvalidCdbField, x.residual()));
                }
            }
        }
        Ok(x)
    }

    /// `target_complete_cmd_with_length`: the command produced `len` bytes of data-in.
    pub fn complete_with_length(&mut self, len: u32) {
        if len < self.data_len {
            if self.under {
                self.residual += self.data_len - len;
            } else {
                self.under = true;
                self.residual = self.data_len - len;
            }
            self.data_len = len;
        }
    }

    /// What the transport reports; an underflow wins over an overflow, as in `ib_srpt`'s
    /// `srpt_build_cmd_rsp`.
    pub fn residual(&self) -> Residual {
        if self.under {
            Residual::Underflow(self.residual)
        } else if self.over {
            Residual::Overflow(self.residual)
        } else {
            Residual::None
        }
    }
}

/// What a MODE SENSE(6)/(10) asks for: the CDB's fields its answer depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ModeSenseReq {
    /// MODE SENSE(10) (an 8-byte header), not (6).
    pub ten: bool,
    /// DBD: no block descriptor.
    pub dbd: bool,
    /// LLBAA: a long block descriptor is allowed.
    pub llbaa: bool,
    /// Page control 01b: the changeable values.
    pub changeable: bool,
    pub page: u8,
    pub subpage: u8,
}

/// The operation a decoded command performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    TestUnitReady,
    /// SEEK(6), SEEK(10), REZERO UNIT: GOOD, nothing done (`sbc_emulate_noop`).
    Noop,
    RequestSense {
        desc: bool,
    },
    Inquiry {
        evpd: bool,
        page: u8,
    },
    ReportLuns,
    ReadCapacity10 {
        pmi: bool,
        lba: u32,
    },
    ReadCapacity16,
    ModeSense(ModeSenseReq),
    ModeSelect {
        ten: bool,
        pf: bool,
    },
    Read {
        lba: u64,
    },
    Write {
        lba: u64,
        /// Flush after the write: FUA, or WRITE AND VERIFY, with a write cache.
        sync: bool,
    },
    Verify,
    /// UNMAP: the parameter list is the data-out; byte 1 of the CDB (ANCHOR) must be zero.
    Unmap {
        byte1: u8,
    },
    /// WRITE SAME(10)/(16): the data-out block written to `blocks` blocks from `lba`, or
    /// with `unmap` those blocks deallocated.
    WriteSame {
        lba: u64,
        blocks: u64,
        unmap: bool,
    },
    /// COMPARE AND WRITE: the data-out is `blocks` blocks to compare, then as many to write.
    CompareAndWrite {
        lba: u64,
        blocks: u64,
        sync: bool,
    },
    SyncCache,
    /// REPORT TARGET PORT GROUPS (MAINTENANCE IN, service action 0Ah).
    ReportTargetPortGroups {
        extended: bool,
    },
    /// PERSISTENT RESERVE IN: the service action.
    PrIn {
        sa: u8,
    },
    /// PERSISTENT RESERVE OUT: service action, SCOPE and TYPE.
    PrOut {
        sa: u8,
        scope_type: u8,
    },
    /// RESERVE(6)/(10).
    Reserve,
    /// RELEASE(6)/(10).
    Release,
    StartStop {
        cdb: [u8; 5],
    },
}

/// A decoded command, ready for its data phase and [`crate::Target::execute`].
///
/// The transport moves [`Cmd::transfer_len`] bytes in direction [`Cmd::data_dir`] (RDMA
/// READ of the initiator's data-out before executing, RDMA WRITE of the data-in after),
/// then hands the same buffer to `execute`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd {
    pub(crate) nexus: NexusId,
    /// The logical unit (after the nexus's LUN map).
    pub(crate) lun: LunId,
    /// The LUN number the initiator addressed.
    pub(crate) mapped: LunId,
    pub(crate) opcode: ScsiOpcode,
    pub(crate) dir: DataDir,
    pub(crate) xfer: Xfer,
    pub(crate) op: Op,
    /// Addressed to the virtual LUN 0 (LUN 0 not configured).
    pub(crate) virtual_lun0: bool,
}

impl Cmd {
    pub fn nexus(&self) -> NexusId {
        self.nexus
    }
    /// The logical unit the command reaches (its number in the target, after the nexus's
    /// LUN map: what [`crate::Target::lend_medium`] and [`crate::Placement`] name).
    pub fn lun(&self) -> LunId {
        self.lun
    }
    /// The LUN number the initiator addressed.
    pub fn mapped_lun(&self) -> LunId {
        self.mapped
    }
    pub fn opcode(&self) -> ScsiOpcode {
        self.opcode
    }
    /// Direction of the data phase; `None` when nothing moves.
    pub fn data_dir(&self) -> DataDir {
        if self.xfer.data_len == 0 {
            DataDir::None
        } else {
            self.dir
        }
    }
    /// Bytes the data phase moves: data-out to fetch before `execute`, or the size of the
    /// data-in buffer `execute` fills (of which [`Response::data_len`] are sent).
    pub fn transfer_len(&self) -> u32 {
        self.xfer.data_len
    }
}

/// The result of [`crate::Target::decode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// Run the data phase (if any), then [`crate::Target::execute`].
    Ready(Cmd),
    /// The command is over already (CHECK CONDITION at decode): send this status.
    Done(Response),
}

/// The buffer [`crate::Target::execute`] works on.
#[derive(Debug)]
pub enum Data<'a> {
    /// No data phase.
    None,
    /// Data-in: `execute` fills the first [`Cmd::transfer_len`] bytes.
    In(&'a mut [u8]),
    /// Data-out as the initiator sent it: the first [`Cmd::transfer_len`] bytes are used.
    Out(&'a [u8]),
}

/// A command's outcome, for the transport's status IU (SRP_RSP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: ScsiStatus,
    /// Sense data for CHECK CONDITION (send [`Sense::to_fixed`]).
    pub sense: Option<Sense>,
    /// Bytes at the front of the data-in buffer to send to the initiator.
    pub data_len: u32,
    pub residual: Residual,
}

impl Response {
    pub(crate) fn good(data_len: u32, residual: Residual) -> Response {
        Response {
            status: ScsiStatus::GOOD,
            sense: None,
            data_len,
            residual,
        }
    }

    pub(crate) fn check(reason: SenseReason, residual: Residual) -> Response {
        if reason == SenseReason::ReservationConflict {
            return Response::conflict(residual);
        }
        Response {
            status: ScsiStatus::CHECK_CONDITION,
            sense: Some(reason.sense()),
            data_len: 0,
            residual,
        }
    }

    /// RESERVATION CONFLICT: no sense data (SPC-4 §5.13.1).
    pub(crate) fn conflict(residual: Residual) -> Response {
        Response {
            status: ScsiStatus::RESERVATION_CONFLICT,
            sense: None,
            data_len: 0,
            residual,
        }
    }

    pub fn is_good(&self) -> bool {
        self.status == ScsiStatus::GOOD
    }
}
