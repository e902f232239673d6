//! Why a command ends in CHECK CONDITION, and the sense data that says so.
//!
//! [`SenseReason`] is the typed form of LIO's `sense_reason_t` (the `TCM_*` values a
//! `parse_cdb`/`execute_cmd` function returns), restricted to the ones this core raises;
//! [`SenseReason::sense`] is LIO's `sense_detail_table` lookup (in
//! `target_core_transport.c`, used by `transport_send_check_condition_and_sense`), so every
//! key/ASC/ASCQ below is the one LIO sends for the same condition.

use softrdma_wire::scsi::{AscAscq, FixedSense, SenseKey, SenseRepr};

/// Sense data: key, ASC/ASCQ. Sent as 18 bytes of fixed-format, current sense data
/// (response code 0x70), as LIO does with the control mode page's D_SENSE bit clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sense {
    pub key: SenseKey,
    pub asc_ascq: AscAscq,
    /// The INFORMATION field, with VALID set (a MISCOMPARE's offset of the first byte that
    /// differs); `None`: VALID clear, INFORMATION zero.
    pub information: Option<u32>,
}

impl Sense {
    /// Length of the fixed-format sense data LIO builds (`scsi_build_sense_buffer`).
    pub const FIXED_LEN: usize = 18;

    pub const fn new(key: SenseKey, asc_ascq: AscAscq) -> Sense {
        Sense {
            key,
            asc_ascq,
            information: None,
        }
    }

    /// The fixed-format sense data: 0x70, key, ADDITIONAL SENSE LENGTH 10, ASC, ASCQ.
    /// With [`Sense::information`], VALID and the INFORMATION field.
    pub fn to_fixed(&self) -> [u8; Sense::FIXED_LEN] {
        let mut b = [0u8; Sense::FIXED_LEN];
        self.to_repr().emit(&mut b);
        b
    }

    /// The same as the wire crate's representation (for dissection and tests).
    pub fn to_repr(&self) -> SenseRepr {
        match self.information {
            None => SenseRepr::fixed(self.key, self.asc_ascq),
            Some(info) => SenseRepr::Fixed(FixedSense {
                valid: true,
                information: info,
                sense_key: self.key,
                asc_ascq: self.asc_ascq,
                ..FixedSense::default()
            }),
        }
    }
}

/// Why a command failed: each variant is a LIO `TCM_*` sense reason (named in its doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SenseReason {
    /// `TCM_NON_EXISTENT_LUN`: ILLEGAL REQUEST, LOGICAL UNIT NOT SUPPORTED (25h/00h).
    NonExistentLun,
    /// `TCM_UNSUPPORTED_SCSI_OPCODE`: ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE
    /// (20h/00h).
    UnsupportedOpcode,
    /// `TCM_INVALID_CDB_FIELD`: ILLEGAL REQUEST, INVALID FIELD IN CDB (24h/00h).
    InvalidCdbField,
    /// `TCM_UNKNOWN_MODE_PAGE`: LIO sends ILLEGAL REQUEST, INVALID FIELD IN CDB (24h/00h)
    /// for a mode page it does not have, in MODE SENSE and MODE SELECT alike.
    UnknownModePage,
    /// `TCM_INVALID_PARAMETER_LIST`: ILLEGAL REQUEST, INVALID FIELD IN PARAMETER LIST
    /// (26h/00h).
    InvalidParameterList,
    /// `TCM_PARAMETER_LIST_LENGTH_ERROR`: ILLEGAL REQUEST, PARAMETER LIST LENGTH ERROR
    /// (1Ah/00h).
    ParameterListLengthError,
    /// `TCM_INVALID_FIELD_IN_COMMAND_IU`: ILLEGAL REQUEST, INVALID FIELD IN COMMAND
    /// INFORMATION UNIT (0Eh/03h): what `target_cmd_size_check` answers to a WRITE whose
    /// expected data transfer length is not the CDB's.
    InvalidFieldInCommandIu,
    /// `TCM_WRITE_PROTECTED`: DATA PROTECT, WRITE PROTECTED (27h/00h).
    WriteProtected,
    /// `TCM_ADDRESS_OUT_OF_RANGE`: ILLEGAL REQUEST, LOGICAL BLOCK ADDRESS OUT OF RANGE
    /// (21h/00h).
    AddressOutOfRange,
    /// `TCM_LOGICAL_UNIT_COMMUNICATION_FAILURE`: NOT READY, LOGICAL UNIT COMMUNICATION
    /// FAILURE (08h/00h), what LIO's FILEIO answers when the file read or write fails (NOT
    /// READY rather than an error key, so initiators retry).
    LogicalUnitCommunicationFailure,
    /// `TCM_INVALID_PARAMETER_LIST` as `core_scsi3_emulate_pro_release` answers a RELEASE
    /// whose type differs from the reservation's: ILLEGAL REQUEST, INVALID RELEASE OF
    /// PERSISTENT RESERVATION (26h/04h, SPC-4 §5.13.11.2.2).
    InvalidReleaseOfPersistentReservation,
    /// `TCM_RESERVATION_CONFLICT`: not sense data but the status RESERVATION CONFLICT
    /// (the response carries no sense; [`SenseReason::sense`] gives NO SENSE for it).
    ReservationConflict,
    /// `TCM_MISCOMPARE_VERIFY`: MISCOMPARE, MISCOMPARE DURING VERIFY OPERATION (1Dh/00h),
    /// with the offset of the first byte that differs in the INFORMATION field (SBC-4
    /// §5.3: COMPARE AND WRITE; LIO since 5.x sets `sense_info` to it).
    Miscompare { offset: u32 },
    /// `TCM_CHECK_CONDITION_UNIT_ATTENTION`: UNIT ATTENTION with the ASC/ASCQ of the
    /// condition reported (`core_scsi3_ua_for_check_condition`).
    UnitAttention(AscAscq),
}

impl SenseReason {
    /// LIO's `sense_detail_table` entry for the reason.
    pub fn sense(self) -> Sense {
        use SenseReason::*;
        let (key, asc) = match self {
            NonExistentLun => (
                SenseKey::ILLEGAL_REQUEST,
                AscAscq::LOGICAL_UNIT_NOT_SUPPORTED,
            ),
            UnsupportedOpcode => (
                SenseKey::ILLEGAL_REQUEST,
                AscAscq::INVALID_COMMAND_OPERATION_CODE,
            ),
            InvalidCdbField | UnknownModePage => {
                (SenseKey::ILLEGAL_REQUEST, AscAscq::INVALID_FIELD_IN_CDB)
            }
            InvalidParameterList => (
                SenseKey::ILLEGAL_REQUEST,
                AscAscq::INVALID_FIELD_IN_PARAMETER_LIST,
            ),
            ParameterListLengthError => (
                SenseKey::ILLEGAL_REQUEST,
                AscAscq::PARAMETER_LIST_LENGTH_ERROR,
            ),
            InvalidFieldInCommandIu => (
                SenseKey::ILLEGAL_REQUEST,
                AscAscq::INVALID_FIELD_IN_COMMAND_IU,
            ),
            WriteProtected => (SenseKey::DATA_PROTECT, AscAscq::WRITE_PROTECTED),
            AddressOutOfRange => (SenseKey::ILLEGAL_REQUEST, AscAscq::LBA_OUT_OF_RANGE),
            LogicalUnitCommunicationFailure => {
                (SenseKey::NOT_READY, AscAscq::LUN_COMMUNICATION_FAILURE)
            }
            UnitAttention(a) => (SenseKey::UNIT_ATTENTION, a),
            ReservationConflict => (SenseKey::NO_SENSE, AscAscq::NO_ADDITIONAL_SENSE),
            InvalidReleaseOfPersistentReservation => (SenseKey::ILLEGAL_REQUEST, AscAscq(0x2604)),
            Miscompare { offset } => {
                return Sense {
                    information: Some(offset),
                    ..Sense::new(SenseKey::MISCOMPARE, AscAscq::MISCOMPARE_DURING_VERIFY)
                }
            }
        };
        Sense::new(key, asc)
    }
}
