//! The target: LUNs, I_T nexuses, unit attentions and the tasks in flight; decoding and
//! executing commands.

use std::collections::BTreeMap;
use std::fmt;

use softrdma_mem::Memory;
use softrdma_wire::field::{read_u16, read_u32, read_u64};

use softrdma_wire::scsi::{
    AscAscq, InquiryRepr, ModeSelectRepr, ModeSenseRepr, ReadCapacity10Repr, ReadCapacity16Repr,
    ReadWriteRepr, ReportLunsRepr, RequestSenseRepr, RwKind, ScsiOpcode, ServiceActionIn16,
    StartStopUnitRepr, SyncCacheRepr, VerifyRepr,
};

use crate::cmd::{Cmd, Data, DataDir, Decoded, ModeSenseReq, Op, Residual, Response, Xfer};
use crate::emulate::{self, Done};
use crate::lun::{LogicalUnit, LunConfig, LunId};
use crate::pr::{Access, ItNexus, PrError};
use crate::provisioning::{self, Geometry, Medium};
use crate::sense::SenseReason;
use crate::tmf::TaskTable;
use crate::ua::UaQueue;

/// What an initiator's LUN number maps to (LIO's mapped LUN, `se_dev_entry`): a logical
/// unit of the target and whether writes through this mapping are refused
/// (`lun_access_ro`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LunMapping {
    pub lun: LunId,
    pub read_only: bool,
}

/// An I_T nexus the target knows, as [`Target::register_nexus`] numbered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NexusId(pub(crate) u32);

impl fmt::Display for NexusId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nexus#{}", self.0)
    }
}

/// The initiator port of a nexus (for SRP, the 128-bit initiator port identifier).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InitiatorId(pub u128);

/// Which I_T nexuses get BUS DEVICE RESET FUNCTION OCCURRED after a LOGICAL UNIT RESET.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LunResetUa {
    /// Every nexus, the issuer included: SAM-5, and LIO since its `target_dev_ua_allocate`
    /// (the 2022 "UA on all luns after reset" change).
    #[default]
    AllNexuses,
    /// Every nexus but the issuer.
    OtherNexuses,
    /// Only the issuer: LIO 6.1's `target_tmr_work`, which calls `target_ua_allocate_lun`
    /// for the issuing session's ACL.
    IssuingNexus,
}

/// Target-wide settings: the port the LUNs are reached through and the UA policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetConfig {
    /// PROTOCOL IDENTIFIER of the transport (4: SRP), for VPD page 0x83 and the transport
    /// version descriptor of the standard INQUIRY data.
    pub protocol_id: u8,
    /// The target port's name, for the SCSI name string designators of VPD page 0x83 (LIO
    /// uses the fabric's `tpg_get_wwn`; `ib_srpt` gives the port GUID or GID).
    pub port_name: String,
    /// TARGET PORTAL GROUP TAG in the port's SCSI name string.
    pub tpgt: u16,
    /// A TARGET PORT GROUP designator (LIO always has ALUA's `default_tg_pt_gp`, id 0; we
    /// have no ALUA, so none by default).
    pub target_port_group: Option<u16>,
    /// A LOGICAL UNIT GROUP designator (LIO's `default_lu_gp`, id 0; none by default).
    pub lu_group: Option<u16>,
    /// Answer LUN 0 when it is not configured, as LIO's `tpg_virt_lun0` does, with this
    /// INQUIRY byte 0 (LIO: 0x3F, peripheral qualifier 001b "not connected", type 1Fh);
    /// `None`: LUN 0 is missing like any other LUN.
    pub virtual_lun0: Option<u8>,
    /// Establish POWER ON, RESET, OR BUS DEVICE RESET OCCURRED for every LUN when a nexus
    /// is registered (and for a new LUN on every nexus): SAM's power-on condition as the
    /// initiator sees it. LIO 6.1 raises none at login.
    pub power_on_ua: bool,
    pub lun_reset_ua: LunResetUa,
    /// ALUA target port groups (SPC-4 §5.16): with any, the standard INQUIRY data says TPGS
    /// 01b (implicit ALUA), VPD page 0x83 names the nexus's target port and its group, and
    /// REPORT TARGET PORT GROUPS lists them. Empty: no ALUA (TPGS 0; REPORT TARGET PORT
    /// GROUPS is an unsupported command).
    pub port_groups: Vec<PortGroup>,
}

/// ASYMMETRIC ACCESS STATE of a target port group (SPC-4 table 176); both take every
/// command, the difference is the path an initiator prefers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AluaState {
    ActiveOptimized,
    ActiveNonOptimized,
}

/// A target port group: its identifier, its state and the relative target port identifiers
/// of its ports (LIO's `tg_pt_gp`; `default_tg_pt_gp` is id 0 with every port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortGroup {
    pub id: u16,
    pub state: AluaState,
    /// PREF: the preferred group.
    pub preferred: bool,
    pub ports: Vec<u16>,
}

impl Default for TargetConfig {
    fn default() -> TargetConfig {
        TargetConfig {
            protocol_id: 4,
            port_name: "softrdma".into(),
            tpgt: 1,
            target_port_group: None,
            lu_group: None,
            virtual_lun0: Some(0x3f),
            power_on_ua: true,
            lun_reset_ua: LunResetUa::AllNexuses,
            port_groups: Vec::new(),
        }
    }
}

/// Misuse of the core's API (as opposed to a SCSI error, which is a [`Response`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// The nexus is not registered (or was unregistered).
    UnknownNexus(NexusId),
    /// A LUN id must be single-level (below 65536).
    BadLunId(LunId),
    LunExists(LunId),
    NoSuchLun(LunId),
    /// The store's size is zero or not a whole number of blocks.
    BadStoreSize {
        size: u64,
        block_size: u32,
    },
    /// A task with this tag is already in flight on the nexus.
    TagInUse {
        nexus: NexusId,
        tag: u64,
    },
    /// The buffer handed to `execute` does not fit the command's data phase.
    DataMismatch {
        dir: DataDir,
        transfer_len: u32,
        got_dir: DataDir,
        got_len: usize,
    },
    /// The LUN's store does not lend its medium (it is not memory, or it is lent already).
    NotLendable(LunId),
    /// The LUN's medium is lent to the transport: it cannot be removed, and its READs and
    /// WRITEs go through [`Target::start_in_place`], not [`Target::execute`].
    MediumLent(LunId),
    /// [`Target::return_medium`] for a LUN whose medium is not lent, or with other bytes.
    NotLent(LunId),
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreError::UnknownNexus(n) => write!(f, "{n} is not registered"),
            CoreError::BadLunId(l) => write!(f, "LUN {l} is not a single-level LUN"),
            CoreError::LunExists(l) => write!(f, "LUN {l} exists already"),
            CoreError::NoSuchLun(l) => write!(f, "no LUN {l}"),
            CoreError::BadStoreSize { size, block_size } => write!(
                f,
                "a {size}-byte store is not a whole number of {block_size}-byte blocks"
            ),
            CoreError::TagInUse { nexus, tag } => {
                write!(f, "tag {tag:#x} is already in flight on {nexus}")
            }
            CoreError::DataMismatch {
                dir,
                transfer_len,
                got_dir,
                got_len,
            } => write!(
                f,
                "the command moves {transfer_len} bytes {dir:?}, the buffer is {got_len} bytes {got_dir:?}"
            ),
            CoreError::NotLendable(l) => write!(f, "LUN {l}'s store cannot lend its medium"),
            CoreError::MediumLent(l) => write!(
                f,
                "LUN {l}'s medium is lent to the transport: its READ and WRITE run in place"
            ),
            CoreError::NotLent(l) => write!(f, "LUN {l}'s medium is not lent, or not this one"),
        }
    }
}

impl std::error::Error for CoreError {}

/// Where the data of a command run in place lies: bytes `[offset, offset + len)` of its LUN's
/// lent medium (see [`Target::start_in_place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub lun: LunId,
    pub offset: u64,
    pub len: u32,
}

/// What [`Target::start_in_place`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InPlace {
    /// Not a READ or WRITE on a lent medium: run it on a buffer with [`Target::execute`].
    No,
    /// Move the data between the wire and the medium (data-out: fetch it there now; data-in:
    /// send it from there), then [`Target::finish_in_place`].
    Go(Placement),
    /// Over before any data moves (a unit attention): send this status.
    Done(Response),
}

#[derive(Debug, Clone)]
pub(crate) struct Nexus {
    pub initiator: InitiatorId,
    /// RELATIVE TARGET PORT IDENTIFIER of the port the nexus came through.
    pub port: u16,
}

impl Nexus {
    pub fn it(&self) -> ItNexus {
        ItNexus {
            initiator: self.initiator,
            port: self.port,
        }
    }
}

/// The SCSI target core: LUNs, nexuses, unit attentions, tasks. Sans-IO: the transport
/// feeds it commands and buffers and sends what it answers.
pub struct Target {
    pub(crate) config: TargetConfig,
    pub(crate) luns: BTreeMap<u64, LogicalUnit>,
    pub(crate) nexuses: BTreeMap<NexusId, Nexus>,
    pub(crate) ua: BTreeMap<(NexusId, u64), UaQueue>,
    pub(crate) tasks: TaskTable,
    /// Tasks a PREEMPT AND ABORT aborted, for the transport ([`Target::take_preempted`]).
    preempted: Vec<crate::AbortedTask>,
    /// Per-nexus LUN maps ([`Target::set_lun_map`]); a nexus without one sees every LU at
    /// its own number.
    lun_maps: BTreeMap<NexusId, BTreeMap<u64, LunMapping>>,
    next_nexus: u32,
    virtual_lun0_config: LunConfig,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("config", &self.config)
            .field("luns", &self.luns)
            .field("nexuses", &self.nexuses)
            .field("tasks", &self.tasks)
            .finish()
    }
}

/// RESERVE(10) and RELEASE(10) (SPC-2; not in the wire crate's opcode list).
const RESERVE_10: ScsiOpcode = ScsiOpcode(0x56);
const RELEASE_10: ScsiOpcode = ScsiOpcode(0x57);

/// LBA range check of `sbc_parse_cdb`: `lba + blocks` may reach the end of the medium, not
/// pass it (nor wrap).
fn check_lba(lba: u64, blocks: u64, lu: &LogicalUnit) -> Result<(), SenseReason> {
    match lba.checked_add(blocks) {
        Some(end) if end <= lu.blocks() => Ok(()),
        _ => Err(SenseReason::AddressOutOfRange),
    }
}

/// What `parse` learnt from a CDB.
struct Parsed {
    op: Op,
    /// Direction the CDB implies.
    dir: DataDir,
    /// Bytes the CDB implies (allocation length, parameter list length, blocks × size).
    size: u64,
    /// A READ/WRITE-class command (LIO's `SCF_SCSI_DATA_CDB`).
    data_cdb: bool,
}

impl Parsed {
    fn new(op: Op, dir: DataDir, size: u64) -> Parsed {
        Parsed {
            op,
            dir,
            size,
            data_cdb: false,
        }
    }
}

impl Target {
    pub fn new(config: TargetConfig) -> Target {
        Target {
            config,
            luns: BTreeMap::new(),
            nexuses: BTreeMap::new(),
            ua: BTreeMap::new(),
            tasks: TaskTable::default(),
            preempted: Vec::new(),
            lun_maps: BTreeMap::new(),
            next_nexus: 1,
            virtual_lun0_config: LunConfig {
                product: Some("RAMDISK-MCP".into()),
                ..LunConfig::default()
            },
        }
    }

    pub fn config(&self) -> &TargetConfig {
        &self.config
    }

    // -----------------------------------------------------------------------------------
    // LUNs and nexuses
    // -----------------------------------------------------------------------------------

    /// Adds a LUN. Every nexus gets REPORTED LUNS DATA HAS CHANGED on its other LUNs (LIO's
    /// `target_luns_data_has_changed` from `core_enable_device_list_for_node`) and, with
    /// [`TargetConfig::power_on_ua`], POWER ON on the new one.
    pub fn add_lun(&mut self, id: LunId, lu: LogicalUnit) -> Result<(), CoreError> {
        if !id.is_single_level() {
            return Err(CoreError::BadLunId(id));
        }
        if self.luns.contains_key(&id.0) {
            return Err(CoreError::LunExists(id));
        }
        let (size, block_size) = (lu.store.size(), lu.block_size());
        if size == 0 || size % u64::from(block_size) != 0 {
            return Err(CoreError::BadStoreSize { size, block_size });
        }
        let nexuses: Vec<NexusId> = self.nexuses.keys().copied().collect();
        for n in &nexuses {
            for other in self.luns.keys() {
                self.ua
                    .entry((*n, *other))
                    .or_default()
                    .push(AscAscq::REPORTED_LUNS_DATA_HAS_CHANGED);
            }
            if self.config.power_on_ua {
                self.ua
                    .entry((*n, id.0))
                    .or_default()
                    .push(AscAscq::POWER_ON_RESET);
            }
        }
        self.luns.insert(id.0, lu);
        Ok(())
    }

    /// Removes a LUN, with its unit attentions and the tasks in flight on it (returned: the
    /// transport must drop them silently). The other LUNs of every nexus get REPORTED LUNS
    /// DATA HAS CHANGED (`core_disable_device_list_for_node`).
    pub fn remove_lun(
        &mut self,
        id: LunId,
    ) -> Result<(LogicalUnit, Vec<crate::AbortedTask>), CoreError> {
        if self.luns.get(&id.0).is_some_and(|l| l.lent) {
            return Err(CoreError::MediumLent(id));
        }
        let lu = self.luns.remove(&id.0).ok_or(CoreError::NoSuchLun(id))?;
        self.ua.retain(|(_, l), _| *l != id.0);
        let aborted = self.tasks.abort_where(|_, l| l == id, |_| false);
        for n in self.nexuses.keys() {
            for other in self.luns.keys() {
                self.ua
                    .entry((*n, *other))
                    .or_default()
                    .push(AscAscq::REPORTED_LUNS_DATA_HAS_CHANGED);
            }
        }
        Ok((lu, aborted))
    }

    /// Takes a memory LUN's medium out of its store, for the transport to keep where its
    /// device reaches it (an MR). From then on READ and WRITE on the LUN run in place
    /// ([`Target::start_in_place`]): the data moves between the wire and the medium, with no
    /// copy into or out of a bounce buffer (like SPDK's zero-copy bdev I/O). Every other
    /// command is unaffected. [`Target::return_medium`] ends the loan.
    ///
    /// In place, a WRITE's data lands in the medium before the command is done: one that
    /// fails or is aborted mid-transfer leaves its blocks partly written, as on a disk; and
    /// a READ's data is read when it is sent, so a WRITE to the same blocks running at the
    /// same time may show through (SAM leaves overlapping commands' order to the initiator).
    pub fn lend_medium(&mut self, id: LunId) -> Result<Memory, CoreError> {
        let lu = self.luns.get_mut(&id.0).ok_or(CoreError::NoSuchLun(id))?;
        if lu.lent {
            return Err(CoreError::NotLendable(id));
        }
        let medium = lu.store.lend().ok_or(CoreError::NotLendable(id))?;
        lu.lent = true;
        Ok(medium)
    }

    /// Ends [`Target::lend_medium`]'s loan: READ and WRITE copy through buffers again.
    pub fn return_medium(&mut self, id: LunId, medium: impl Into<Memory>) -> Result<(), CoreError> {
        let lu = self.luns.get_mut(&id.0).ok_or(CoreError::NoSuchLun(id))?;
        if !lu.lent {
            return Err(CoreError::NotLent(id));
        }
        lu.store
            .give_back(medium.into())
            .map_err(|_| CoreError::NotLent(id))?;
        lu.lent = false;
        Ok(())
    }

    /// Flushes every LUN's store (a file store's `fdatasync`), e.g. at shutdown; the LUNs
    /// whose flush failed, with the error.
    pub fn flush_luns(&mut self) -> Vec<(LunId, crate::StoreError)> {
        let mut failed = Vec::new();
        for (id, lu) in self.luns.iter_mut() {
            if let Err(e) = lu.store.flush() {
                failed.push((LunId(*id), e));
            }
        }
        failed
    }

    pub fn lun(&self, id: LunId) -> Option<&LogicalUnit> {
        self.luns.get(&id.0)
    }

    /// The configured LUNs, ascending.
    pub fn lun_ids(&self) -> impl Iterator<Item = LunId> + '_ {
        self.luns.keys().map(|l| LunId(*l))
    }

    /// Registers an I_T nexus (an SRP login). With [`TargetConfig::power_on_ua`] every LUN
    /// holds POWER ON, RESET, OR BUS DEVICE RESET OCCURRED for it.
    pub fn register_nexus(&mut self, initiator: InitiatorId) -> NexusId {
        self.register_nexus_on(initiator, 1)
    }

    /// [`Target::register_nexus`] through the target port of RELATIVE TARGET PORT
    /// IDENTIFIER `port`: the I_T nexus of persistent reservations is (initiator port,
    /// target port), so the same initiator through two ports is two I_T nexuses.
    pub fn register_nexus_on(&mut self, initiator: InitiatorId, port: u16) -> NexusId {
        let id = NexusId(self.next_nexus);
        self.next_nexus = self.next_nexus.wrapping_add(1);
        self.nexuses.insert(id, Nexus { initiator, port });
        if self.config.power_on_ua {
            for l in self.luns.keys() {
                self.ua
                    .entry((id, *l))
                    .or_default()
                    .push(AscAscq::POWER_ON_RESET);
            }
        }
        id
    }

    /// Forgets a nexus (logout, channel loss): its unit attentions and tasks go; the tasks
    /// are returned for the transport to drop.
    pub fn unregister_nexus(&mut self, id: NexusId) -> Result<Vec<crate::AbortedTask>, CoreError> {
        let gone = self
            .nexuses
            .remove(&id)
            .ok_or(CoreError::UnknownNexus(id))?
            .it();
        self.ua.retain(|(n, _), _| *n != id);
        self.lun_maps.remove(&id);
        // I_T nexus loss releases an SPC-2 reservation (LIO: on session shutdown) when no
        // other login is the same I_T nexus; persistent reservations stay.
        if !self.nexuses.values().any(|n| n.it() == gone) {
            for lu in self.luns.values_mut() {
                lu.pr.release_spc2(gone);
            }
        }
        Ok(self.tasks.abort_where(|n, _| n == id, |_| false))
    }

    pub fn initiator(&self, id: NexusId) -> Option<InitiatorId> {
        self.nexuses.get(&id).map(|n| n.initiator)
    }

    /// The I_T nexus identity (initiator port, relative target port) of a nexus.
    pub fn it_nexus(&self, id: NexusId) -> Option<ItNexus> {
        self.nexuses.get(&id).map(Nexus::it)
    }

    /// Gives a nexus its own LUN numbers (LIO's mapped LUNs of a node ACL): initiator LUN →
    /// [`LunMapping`]. The nexus then sees only these (REPORT LUNS lists them; others are
    /// LOGICAL UNIT NOT SUPPORTED), and a read-only mapping refuses writes as a read-only LU
    /// does (WRITE PROTECTED, WP in MODE SENSE). `None`: every LU at its own number. Each
    /// mapped LU gets REPORTED LUNS DATA HAS CHANGED on the nexus.
    pub fn set_lun_map(
        &mut self,
        nexus: NexusId,
        map: Option<BTreeMap<LunId, LunMapping>>,
    ) -> Result<(), CoreError> {
        if !self.nexuses.contains_key(&nexus) {
            return Err(CoreError::UnknownNexus(nexus));
        }
        let Some(map) = map else {
            self.lun_maps.remove(&nexus);
            return Ok(());
        };
        for (mapped, m) in &map {
            if !mapped.is_single_level() {
                return Err(CoreError::BadLunId(*mapped));
            }
            if !self.luns.contains_key(&m.lun.0) {
                return Err(CoreError::NoSuchLun(m.lun));
            }
        }
        for m in map.values() {
            self.ua
                .entry((nexus, m.lun.0))
                .or_default()
                .push(AscAscq::REPORTED_LUNS_DATA_HAS_CHANGED);
        }
        self.lun_maps
            .insert(nexus, map.into_iter().map(|(k, v)| (k.0, v)).collect());
        Ok(())
    }

    /// The logical unit an initiator's LUN number reaches on a nexus, and whether the
    /// mapping is read-only; `None` when it reaches none.
    pub fn resolve_lun(&self, nexus: NexusId, lun: LunId) -> Option<(LunId, bool)> {
        match self.lun_maps.get(&nexus) {
            Some(map) => map.get(&lun.0).map(|m| (m.lun, m.read_only)),
            None => self.luns.contains_key(&lun.0).then_some((lun, false)),
        }
    }

    /// The LUN numbers a nexus sees, ascending.
    fn visible_luns(&self, nexus: NexusId) -> Vec<u64> {
        match self.lun_maps.get(&nexus) {
            Some(map) => map.keys().copied().collect(),
            None => self.luns.keys().copied().collect(),
        }
    }

    /// Whether a mapping makes the command's LU read-only for its nexus.
    fn mapped_read_only(&self, cmd: &Cmd) -> bool {
        self.lun_maps
            .get(&cmd.nexus)
            .and_then(|m| m.get(&cmd.mapped.0))
            .is_some_and(|m| m.read_only)
    }

    /// The tasks PREEMPT AND ABORT commands aborted since the last call: the transport
    /// stops them as it stops a task management function's (without a response).
    pub fn take_preempted(&mut self) -> Vec<crate::AbortedTask> {
        std::mem::take(&mut self.preempted)
    }

    /// The unit attentions pending for a nexus on a LUN, highest precedence first.
    pub fn pending_unit_attentions(&self, nexus: NexusId, lun: LunId) -> Vec<AscAscq> {
        self.ua
            .get(&(nexus, lun.0))
            .map(|q| q.pending().to_vec())
            .unwrap_or_default()
    }

    /// Establishes a unit attention for a nexus on a LUN (e.g. MODE PARAMETERS CHANGED
    /// from a management action).
    pub fn raise_unit_attention(
        &mut self,
        nexus: NexusId,
        lun: LunId,
        asc: AscAscq,
    ) -> Result<(), CoreError> {
        if !self.nexuses.contains_key(&nexus) {
            return Err(CoreError::UnknownNexus(nexus));
        }
        if !self.luns.contains_key(&lun.0) {
            return Err(CoreError::NoSuchLun(lun));
        }
        self.ua.entry((nexus, lun.0)).or_default().push(asc);
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // Decode
    // -----------------------------------------------------------------------------------

    /// Decodes a command that arrived on `nexus` for `lun`: the CDB, the direction of the
    /// data buffers the initiator described and the total length it expects (for SRP, the
    /// data-out or data-in descriptors of the SRP_CMD).
    ///
    /// In LIO's order: the LUN lookup (`transport_lookup_cmd_lun`: LOGICAL UNIT NOT
    /// SUPPORTED for a missing LUN, WRITE PROTECTED for data-out to a read-only one), the
    /// CDB (`sbc_parse_cdb`/`spc_parse_cdb`: unsupported opcode, invalid fields, LBA range),
    /// then the transfer length (`target_cmd_size_check`). Unit attentions are checked by
    /// [`Target::execute`], after the data phase, as LIO's `target_scsi3_ua_check` runs in
    /// `__target_execute_cmd`.
    pub fn decode(
        &self,
        nexus: NexusId,
        lun: LunId,
        cdb: &[u8],
        dir: DataDir,
        expected_len: u32,
    ) -> Result<Decoded, CoreError> {
        if !self.nexuses.contains_key(&nexus) {
            return Err(CoreError::UnknownNexus(nexus));
        }
        let expected = if dir == DataDir::None {
            0
        } else {
            expected_len
        };
        let fail = |r: SenseReason| Ok(Decoded::Done(Response::check(r, Residual::None)));
        let mapped = lun;
        let resolved = self.resolve_lun(nexus, mapped);
        let (lun, mapped_ro) = resolved.unwrap_or((mapped, false));
        let lu = resolved.and_then(|(l, _)| self.luns.get(&l.0));
        let virtual_lun0 = lu.is_none() && mapped.0 == 0 && self.config.virtual_lun0.is_some();
        if lu.is_none() && !virtual_lun0 {
            return fail(SenseReason::NonExistentLun);
        }
        let read_only = lu.is_none_or(|l| l.read_only() || mapped_ro);
        // transport_lookup_cmd_lun: a data-out to a read-only mapping, or to the virtual
        // LUN 0, is WRITE PROTECTED whatever the CDB.
        if dir == DataDir::Out && read_only {
            return fail(SenseReason::WriteProtected);
        }
        let parsed = match lu {
            Some(lu) => Self::parse(cdb, lu, read_only, self.config.port_groups.is_empty()),
            None => Self::parse_virtual(cdb),
        };
        let p = match parsed {
            Ok(p) => p,
            Err(r) => return fail(r),
        };
        // target_check_reservation, at setup, before the data phase (and before the unit
        // attention check in execute).
        if let (Some(lu), Some(n)) = (lu, self.nexuses.get(&nexus)) {
            if lu.pr.conflicts(n.it(), Self::access(cdb)) {
                return Ok(Decoded::Done(Response::conflict(Residual::None)));
            }
        }
        // Opposite directions (a READ with data-out buffers): LIO would move data the way
        // the transport says; we refuse.
        if dir != DataDir::None && p.dir != DataDir::None && dir != p.dir {
            return fail(SenseReason::InvalidFieldInCommandIu);
        }
        let Ok(size) = u32::try_from(p.size) else {
            return fail(SenseReason::InvalidCdbField);
        };
        let xfer = match Xfer::size_check(size, expected, dir, p.data_cdb) {
            Ok(x) => x,
            Err((r, residual)) => return Ok(Decoded::Done(Response::check(r, residual))),
        };
        Ok(Decoded::Ready(Cmd {
            nexus,
            lun,
            mapped,
            opcode: ScsiOpcode(cdb[0]),
            dir,
            xfer,
            op: p.op,
            virtual_lun0,
        }))
    }

    /// How a command stands to a reservation (SPC-4 table 64; LIO's
    /// `core_scsi3_pr_seq_non_holder`): what finds and describes the LU and the
    /// reservation commands themselves are always allowed, reads of the medium or its mode
    /// pages are allowed under the write-exclusive types, the rest are writes.
    fn access(cdb: &[u8]) -> Access {
        match cdb.first().map(|b| ScsiOpcode(*b)) {
            Some(
                ScsiOpcode::INQUIRY
                | ScsiOpcode::REPORT_LUNS
                | ScsiOpcode::REQUEST_SENSE
                | ScsiOpcode::TEST_UNIT_READY
                | ScsiOpcode::READ_CAPACITY_10
                | ScsiOpcode::SERVICE_ACTION_IN_16
                | ScsiOpcode::PERSISTENT_RESERVE_IN
                | ScsiOpcode::PERSISTENT_RESERVE_OUT
                | ScsiOpcode::MAINTENANCE_IN
                | ScsiOpcode::RELEASE_6
                | RELEASE_10,
            ) => Access::Always,
            Some(
                ScsiOpcode::READ_6
                | ScsiOpcode::READ_10
                | ScsiOpcode::READ_12
                | ScsiOpcode::READ_16
                | ScsiOpcode::VERIFY_10
                | ScsiOpcode::VERIFY_16
                | ScsiOpcode::MODE_SENSE_6
                | ScsiOpcode::MODE_SENSE_10
                | ScsiOpcode::SEEK_6
                | ScsiOpcode::SEEK_10
                | ScsiOpcode::REZERO_UNIT,
            ) => Access::Read,
            _ => Access::Write,
        }
    }

    /// The virtual LUN 0 answers what lets an initiator find the real LUNs.
    fn parse_virtual(cdb: &[u8]) -> Result<Parsed, SenseReason> {
        match cdb.first().map(|b| ScsiOpcode(*b)) {
            Some(
                ScsiOpcode::INQUIRY
                | ScsiOpcode::REPORT_LUNS
                | ScsiOpcode::REQUEST_SENSE
                | ScsiOpcode::TEST_UNIT_READY,
            ) => Self::parse_spc(cdb),
            _ => Err(SenseReason::NonExistentLun),
        }
    }

    /// The primary commands (`spc_parse_cdb`) a LUN and the virtual LUN 0 share.
    fn parse_spc(cdb: &[u8]) -> Result<Parsed, SenseReason> {
        let bad = |_| SenseReason::InvalidCdbField;
        Ok(match ScsiOpcode(cdb[0]) {
            ScsiOpcode::TEST_UNIT_READY => Parsed::new(Op::TestUnitReady, DataDir::None, 0),
            ScsiOpcode::REQUEST_SENSE => {
                let r = RequestSenseRepr::parse(cdb).map_err(bad)?;
                Parsed::new(
                    Op::RequestSense { desc: r.desc },
                    DataDir::In,
                    u64::from(r.alloc_len),
                )
            }
            ScsiOpcode::INQUIRY => {
                let r = InquiryRepr::parse(cdb).map_err(bad)?;
                Parsed::new(
                    Op::Inquiry {
                        evpd: r.evpd,
                        page: r.page_code,
                    },
                    DataDir::In,
                    u64::from(r.alloc_len),
                )
            }
            ScsiOpcode::REPORT_LUNS => {
                // LIO ignores SELECT REPORT and a short ALLOCATION LENGTH.
                let r = ReportLunsRepr::parse(cdb).map_err(bad)?;
                Parsed::new(Op::ReportLuns, DataDir::In, u64::from(r.alloc_len))
            }
            _ => return Err(SenseReason::UnsupportedOpcode),
        })
    }

    /// `sbc_parse_cdb` (with `spc_parse_cdb` behind it) for a real LUN.
    fn parse(
        cdb: &[u8],
        lu: &LogicalUnit,
        read_only: bool,
        port_groups_empty: bool,
    ) -> Result<Parsed, SenseReason> {
        let Some(&op0) = cdb.first() else {
            return Err(SenseReason::InvalidCdbField);
        };
        let opcode = ScsiOpcode(op0);
        if opcode.cdb_len().is_some_and(|n| cdb.len() < n) {
            return Err(SenseReason::InvalidCdbField);
        }
        let bad = |_| SenseReason::InvalidCdbField;
        let bs = u64::from(lu.block_size());
        Ok(match opcode {
            ScsiOpcode::TEST_UNIT_READY
            | ScsiOpcode::REQUEST_SENSE
            | ScsiOpcode::INQUIRY
            | ScsiOpcode::REPORT_LUNS => Self::parse_spc(cdb)?,
            ScsiOpcode::REZERO_UNIT | ScsiOpcode::SEEK_6 | ScsiOpcode::SEEK_10 => {
                Parsed::new(Op::Noop, DataDir::None, 0)
            }
            ScsiOpcode::MODE_SENSE_6 | ScsiOpcode::MODE_SENSE_10 => {
                let r = ModeSenseRepr::parse(cdb).map_err(bad)?;
                Parsed::new(
                    Op::ModeSense(ModeSenseReq {
                        ten: r.ten,
                        dbd: r.dbd,
                        llbaa: r.llbaa,
                        changeable: r.pc.0 == 1,
                        page: r.page_code,
                        subpage: r.subpage_code,
                    }),
                    DataDir::In,
                    u64::from(r.alloc_len),
                )
            }
            ScsiOpcode::MODE_SELECT_6 | ScsiOpcode::MODE_SELECT_10 => {
                let r = ModeSelectRepr::parse(cdb).map_err(bad)?;
                Parsed::new(
                    Op::ModeSelect {
                        ten: r.ten,
                        pf: r.pf,
                    },
                    DataDir::Out,
                    u64::from(r.param_len),
                )
            }
            ScsiOpcode::READ_CAPACITY_10 => {
                let r = ReadCapacity10Repr::parse(cdb).map_err(bad)?;
                Parsed::new(
                    Op::ReadCapacity10 {
                        pmi: r.pmi,
                        lba: r.lba,
                    },
                    DataDir::In,
                    8,
                )
            }
            ScsiOpcode::SERVICE_ACTION_IN_16 => {
                if cdb[1] & 0x1f != ServiceActionIn16::READ_CAPACITY_16.0 {
                    return Err(SenseReason::InvalidCdbField);
                }
                let r = ReadCapacity16Repr::parse(cdb).map_err(bad)?;
                Parsed::new(Op::ReadCapacity16, DataDir::In, u64::from(r.alloc_len))
            }
            op if RwKind::from_opcode(op).is_some() => {
                let r = ReadWriteRepr::parse(cdb).map_err(bad)?;
                let write = r.kind.is_write();
                if write && read_only {
                    return Err(SenseReason::WriteProtected);
                }
                if r.kind.cdb_len() > 6 {
                    Self::check_dpofua(cdb[1], lu)?;
                    // sbc_check_prot: RDPROTECT/WRPROTECT without protection information.
                    if r.protect() != 0 {
                        return Err(SenseReason::InvalidCdbField);
                    }
                }
                let blocks = u64::from(r.blocks());
                Self::check_transfer(r.lba, blocks, lu)?;
                let op = if write {
                    Op::Write {
                        lba: r.lba,
                        sync: r.fua() && lu.write_cache(),
                    }
                } else {
                    Op::Read { lba: r.lba }
                };
                Parsed {
                    op,
                    dir: if write { DataDir::Out } else { DataDir::In },
                    size: blocks * bs,
                    data_cdb: true,
                }
            }
            ScsiOpcode::WRITE_AND_VERIFY_10 | ScsiOpcode::WRITE_AND_VERIFY_16 => {
                // LIO treats WRITE AND VERIFY as WRITE (BYTCHK ignored, no verify).
                let r = VerifyRepr::parse(cdb).map_err(bad)?;
                if read_only {
                    return Err(SenseReason::WriteProtected);
                }
                Self::check_dpofua(cdb[1], lu)?;
                if r.protect != 0 {
                    return Err(SenseReason::InvalidCdbField);
                }
                let blocks = u64::from(r.blocks);
                Self::check_transfer(r.lba, blocks, lu)?;
                Parsed {
                    // The verify promises the data is on the medium: flush a write cache.
                    op: Op::Write {
                        lba: r.lba,
                        sync: lu.write_cache(),
                    },
                    dir: DataDir::Out,
                    size: blocks * bs,
                    data_cdb: true,
                }
            }
            ScsiOpcode::VERIFY_10 | ScsiOpcode::VERIFY_16 => {
                // LIO: an LBA range check and GOOD (sbc_emulate_noop); any data-out is
                // taken and not compared.
                let r = VerifyRepr::parse(cdb).map_err(bad)?;
                let blocks = u64::from(r.blocks);
                check_lba(r.lba, blocks, lu)?;
                let size = match r.bytchk {
                    0 => 0,
                    1 => blocks * bs,
                    3 if blocks > 0 => bs,
                    3 => 0,
                    _ => return Err(SenseReason::InvalidCdbField),
                };
                if size / bs > u64::from(lu.max_transfer_blocks()) {
                    return Err(SenseReason::InvalidCdbField);
                }
                let dir = if size > 0 {
                    DataDir::Out
                } else {
                    DataDir::None
                };
                Parsed::new(Op::Verify, dir, size)
            }
            ScsiOpcode::UNMAP => {
                // LIO: without emulate_tpu UNMAP is an unsupported opcode.
                if !lu.config.thin_provisioning {
                    return Err(SenseReason::UnsupportedOpcode);
                }
                if read_only {
                    return Err(SenseReason::WriteProtected);
                }
                Parsed::new(
                    Op::Unmap { byte1: cdb[1] },
                    DataDir::Out,
                    u64::from(read_u16(cdb, 7)),
                )
            }
            ScsiOpcode::WRITE_SAME_10 | ScsiOpcode::WRITE_SAME_16 => {
                let (lba, blocks) = if opcode == ScsiOpcode::WRITE_SAME_10 {
                    (u64::from(read_u32(cdb, 2)), u64::from(read_u16(cdb, 7)))
                } else {
                    (read_u64(cdb, 2), u64::from(read_u32(cdb, 10)))
                };
                Self::parse_write_same(lu, read_only, cdb[1], lba, blocks)?
            }
            ScsiOpcode::COMPARE_AND_WRITE => {
                if read_only {
                    return Err(SenseReason::WriteProtected);
                }
                // LIO (and our VPD page 0xB0) take one block at a time.
                let blocks = u64::from(cdb[13]);
                if blocks > 1 {
                    return Err(SenseReason::InvalidCdbField);
                }
                Self::check_dpofua(cdb[1], lu)?;
                let lba = read_u64(cdb, 2);
                check_lba(lba, blocks, lu)?;
                Parsed {
                    op: Op::CompareAndWrite {
                        lba,
                        blocks,
                        sync: cdb[1] & ReadWriteRepr::FUA != 0 && lu.write_cache(),
                    },
                    dir: DataDir::Out,
                    // The blocks to compare, then the blocks to write.
                    size: 2 * blocks * bs,
                    data_cdb: true,
                }
            }
            ScsiOpcode::MAINTENANCE_IN if cdb[1] & 0x1f == 0x0a => {
                // REPORT TARGET PORT GROUPS; PARAMETER DATA FORMAT 001b is the extended
                // header.
                if port_groups_empty {
                    return Err(SenseReason::UnsupportedOpcode);
                }
                Parsed::new(
                    Op::ReportTargetPortGroups {
                        extended: cdb[1] >> 5 == 1,
                    },
                    DataDir::In,
                    u64::from(read_u32(cdb, 6)),
                )
            }
            ScsiOpcode::PERSISTENT_RESERVE_IN => Parsed::new(
                Op::PrIn { sa: cdb[1] & 0x1f },
                DataDir::In,
                u64::from(read_u16(cdb, 7)),
            ),
            ScsiOpcode::PERSISTENT_RESERVE_OUT => Parsed::new(
                Op::PrOut {
                    sa: cdb[1] & 0x1f,
                    scope_type: cdb[2],
                },
                DataDir::Out,
                u64::from(read_u32(cdb, 5)),
            ),
            ScsiOpcode::RESERVE_6 | ScsiOpcode::RELEASE_6 | RESERVE_10 | RELEASE_10 => {
                // RESERVE/RELEASE(10) with 3RDPTY (a third party's reservation): LIO
                // refuses them too.
                if matches!(opcode, RESERVE_10 | RELEASE_10) && cdb[1] & 0x10 != 0 {
                    return Err(SenseReason::InvalidCdbField);
                }
                let op = if matches!(opcode, ScsiOpcode::RESERVE_6 | RESERVE_10) {
                    Op::Reserve
                } else {
                    Op::Release
                };
                Parsed::new(op, DataDir::None, 0)
            }
            ScsiOpcode::SYNCHRONIZE_CACHE_10 | ScsiOpcode::SYNCHRONIZE_CACHE_16 => {
                let r = SyncCacheRepr::parse(cdb).map_err(bad)?;
                check_lba(r.lba, u64::from(r.blocks), lu)?;
                Parsed::new(Op::SyncCache, DataDir::None, 0)
            }
            ScsiOpcode::START_STOP_UNIT => {
                let _ = StartStopUnitRepr::parse(cdb).map_err(bad)?;
                let mut b = [0u8; 5];
                b.copy_from_slice(&cdb[..5]);
                Parsed::new(Op::StartStop { cdb: b }, DataDir::None, 0)
            }
            _ => return Err(SenseReason::UnsupportedOpcode),
        })
    }

    /// WRITE SAME(10)/(16) (`sbc_setup_write_same`), in LIO's order: NUMBER OF LOGICAL
    /// BLOCKS 0 is INVALID FIELD IN CDB (WSNZ: we never mean "to the end"); PBDATA or LBDATA
    /// is an unsupported opcode; more than MAXIMUM WRITE SAME LENGTH blocks is INVALID FIELD
    /// IN CDB; the LBA range; ANCHOR is INVALID FIELD IN CDB (no ANC_SUP); UNMAP without
    /// thin provisioning is an unsupported opcode; WRPROTECT is INVALID FIELD IN CDB. The
    /// data-out is one block.
    fn parse_write_same(
        lu: &LogicalUnit,
        read_only: bool,
        flags: u8,
        lba: u64,
        blocks: u64,
    ) -> Result<Parsed, SenseReason> {
        if read_only {
            return Err(SenseReason::WriteProtected);
        }
        if blocks == 0 {
            return Err(SenseReason::InvalidCdbField);
        }
        if flags & 0x06 != 0 {
            return Err(SenseReason::UnsupportedOpcode);
        }
        if blocks > u64::from(lu.config.max_write_same_len) {
            return Err(SenseReason::InvalidCdbField);
        }
        check_lba(lba, blocks, lu)?;
        if flags & 0x10 != 0 {
            return Err(SenseReason::InvalidCdbField);
        }
        let unmap = flags & 0x08 != 0;
        if unmap && !lu.thin_provisioning() {
            return Err(SenseReason::UnsupportedOpcode);
        }
        if !unmap && flags >> 5 != 0 {
            return Err(SenseReason::InvalidCdbField);
        }
        Ok(Parsed::new(
            Op::WriteSame { lba, blocks, unmap },
            DataDir::Out,
            u64::from(lu.block_size()),
        ))
    }

    /// `sbc_check_dpofua`: DPO (bit 4) or FUA (bit 3) on a LUN that does not advertise
    /// DPOFUA is INVALID FIELD IN CDB.
    fn check_dpofua(byte1: u8, lu: &LogicalUnit) -> Result<(), SenseReason> {
        if byte1 & (ReadWriteRepr::DPO | ReadWriteRepr::FUA) != 0 && !lu.dpofua() {
            return Err(SenseReason::InvalidCdbField);
        }
        Ok(())
    }

    /// The LBA range, then MAXIMUM TRANSFER LENGTH (SBC-4 §6.6.4: INVALID FIELD IN CDB;
    /// LIO 6.1 does not check).
    fn check_transfer(lba: u64, blocks: u64, lu: &LogicalUnit) -> Result<(), SenseReason> {
        check_lba(lba, blocks, lu)?;
        if blocks > u64::from(lu.max_transfer_blocks()) {
            return Err(SenseReason::InvalidCdbField);
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // Execute
    // -----------------------------------------------------------------------------------

    /// Executes a decoded command on its buffer: the data-out the transport fetched, or the
    /// data-in buffer to fill (at least [`Cmd::transfer_len`] bytes; [`Response::data_len`]
    /// of them are to be sent).
    ///
    /// First the unit attention check (`target_scsi3_ua_check`): a pending UA fails any
    /// command but INQUIRY, REPORT LUNS and REQUEST SENSE with CHECK CONDITION, UNIT
    /// ATTENTION and the highest-precedence ASC/ASCQ, and all pending UAs of the nexus on
    /// the LUN are cleared (`core_scsi3_ua_for_check_condition`).
    pub fn execute(&mut self, cmd: &Cmd, data: Data<'_>) -> Result<Response, CoreError> {
        if self.needs_medium(cmd) {
            return Err(CoreError::MediumLent(cmd.lun));
        }
        self.run(cmd, data, None)
    }

    /// UNMAP, WRITE SAME and COMPARE AND WRITE: commands that touch the medium other than
    /// through a READ's or WRITE's data phase.
    fn medium_op(cmd: &Cmd) -> bool {
        !cmd.virtual_lun0
            && matches!(
                cmd.op,
                Op::Unmap { .. } | Op::WriteSame { .. } | Op::CompareAndWrite { .. }
            )
    }

    /// Whether the command works on its LUN's medium while the medium is lent (UNMAP, WRITE
    /// SAME, COMPARE AND WRITE on a LUN after [`Target::lend_medium`]): then the transport
    /// runs it with [`Target::execute_on_medium`], handing over the medium's bytes.
    pub fn needs_medium(&self, cmd: &Cmd) -> bool {
        Self::medium_op(cmd) && self.luns.get(&cmd.lun.0).is_some_and(|l| l.lent)
    }

    /// [`Target::execute`] for a command that [`Target::needs_medium`]: `medium` is the LUN's
    /// lent medium (what [`Target::lend_medium`] gave, as the transport holds it).
    pub fn execute_on_medium(
        &mut self,
        cmd: &Cmd,
        data: Data<'_>,
        medium: &mut [u8],
    ) -> Result<Response, CoreError> {
        if !self.needs_medium(cmd) {
            return Err(CoreError::NotLent(cmd.lun));
        }
        self.run(cmd, data, Some(medium))
    }

    fn run(
        &mut self,
        cmd: &Cmd,
        data: Data<'_>,
        lent: Option<&mut [u8]>,
    ) -> Result<Response, CoreError> {
        if !self.nexuses.contains_key(&cmd.nexus) {
            return Err(CoreError::UnknownNexus(cmd.nexus));
        }
        let len = cmd.xfer.data_len as usize;
        let mismatch = |got_dir, got_len| CoreError::DataMismatch {
            dir: cmd.data_dir(),
            transfer_len: cmd.xfer.data_len,
            got_dir,
            got_len,
        };
        let mut none: [u8; 0] = [];
        let (inb, outb): (&mut [u8], &[u8]) = match data {
            Data::None if len == 0 => (&mut none, &[]),
            Data::None => return Err(mismatch(DataDir::None, 0)),
            Data::In(b) if cmd.data_dir() != DataDir::Out && b.len() >= len => (&mut b[..len], &[]),
            Data::In(b) => return Err(mismatch(DataDir::In, b.len())),
            Data::Out(b) if cmd.data_dir() != DataDir::In && b.len() >= len => {
                (&mut none, &b[..len])
            }
            Data::Out(b) => return Err(mismatch(DataDir::Out, b.len())),
        };
        if Self::in_place_op(cmd) && self.luns.get(&cmd.lun.0).is_some_and(|l| l.lent) {
            return Err(CoreError::MediumLent(cmd.lun));
        }
        let mut xfer = cmd.xfer;
        let result = if cmd.virtual_lun0 {
            self.execute_virtual(cmd, inb)
        } else if !self.luns.contains_key(&cmd.lun.0) {
            // Removed since decode.
            Err(SenseReason::NonExistentLun)
        } else if let Some(asc) = self.take_ua_for(cmd) {
            Err(SenseReason::UnitAttention(asc))
        } else {
            self.execute_lun(cmd, inb, outb, lent)
        };
        Ok(match result {
            Ok(done) => {
                let data_len = match done {
                    Done::NoData => 0,
                    Done::Full => {
                        if cmd.data_dir() == DataDir::In {
                            xfer.data_len
                        } else {
                            0
                        }
                    }
                    Done::Len(n) => {
                        xfer.complete_with_length(n);
                        xfer.data_len
                    }
                };
                Response::good(data_len, xfer.residual())
            }
            Err(r) => Response::check(r, xfer.residual()),
        })
    }

    /// READ and WRITE with a data phase: what runs in place on a lent medium.
    fn in_place_op(cmd: &Cmd) -> bool {
        !cmd.virtual_lun0
            && cmd.xfer.data_len > 0
            && matches!(cmd.op, Op::Read { .. } | Op::Write { .. })
    }

    /// The first half of [`Target::execute`] for a command whose data moves in place (see
    /// [`Target::lend_medium`]): the checks `execute` makes before touching the medium,
    /// made before any data moves, since a data-out lands in the medium itself. A command
    /// that is not a READ or WRITE on a lent medium gets [`InPlace::No`].
    pub fn start_in_place(&mut self, cmd: &Cmd) -> Result<InPlace, CoreError> {
        if !self.nexuses.contains_key(&cmd.nexus) {
            return Err(CoreError::UnknownNexus(cmd.nexus));
        }
        if !Self::in_place_op(cmd) {
            return Ok(InPlace::No);
        }
        let Some(lu) = self.luns.get(&cmd.lun.0) else {
            return Ok(InPlace::Done(Response::check(
                SenseReason::NonExistentLun,
                cmd.xfer.residual(),
            )));
        };
        if !lu.lent {
            return Ok(InPlace::No);
        }
        let bs = u64::from(lu.block_size());
        let lba = match cmd.op {
            Op::Read { lba } | Op::Write { lba, .. } => lba,
            _ => return Ok(InPlace::No),
        };
        if let Some(asc) = self.take_ua_for(cmd) {
            return Ok(InPlace::Done(Response::check(
                SenseReason::UnitAttention(asc),
                cmd.xfer.residual(),
            )));
        }
        Ok(InPlace::Go(Placement {
            lun: cmd.lun,
            offset: lba * bs,
            len: cmd.xfer.data_len,
        }))
    }

    /// The second half, once the data has moved (data-out: landed in the medium; data-in:
    /// about to be sent from it): a WRITE's FUA flush, and the status.
    pub fn finish_in_place(&mut self, cmd: &Cmd) -> Result<Response, CoreError> {
        let lu = self
            .luns
            .get_mut(&cmd.lun.0)
            .ok_or(CoreError::NoSuchLun(cmd.lun))?;
        if !lu.lent || !Self::in_place_op(cmd) {
            return Err(CoreError::NotLent(cmd.lun));
        }
        let xfer = cmd.xfer;
        Ok(match cmd.op {
            Op::Write { sync: true, .. } => match lu.store.flush() {
                Ok(()) => Response::good(0, xfer.residual()),
                Err(_) => Response::check(
                    SenseReason::LogicalUnitCommunicationFailure,
                    xfer.residual(),
                ),
            },
            Op::Read { .. } => Response::good(xfer.data_len, xfer.residual()),
            _ => Response::good(0, xfer.residual()),
        })
    }

    /// `target_scsi3_ua_check` + `core_scsi3_ua_for_check_condition`.
    fn take_ua_for(&mut self, cmd: &Cmd) -> Option<AscAscq> {
        if matches!(
            cmd.opcode,
            ScsiOpcode::INQUIRY | ScsiOpcode::REPORT_LUNS | ScsiOpcode::REQUEST_SENSE
        ) {
            return None;
        }
        self.ua.get_mut(&(cmd.nexus, cmd.lun.0))?.take()
    }

    fn execute_virtual(&mut self, cmd: &Cmd, inb: &mut [u8]) -> Result<Done, SenseReason> {
        let mut id = crate::lun::Identity {
            peripheral: self.config.virtual_lun0.unwrap_or(0x3f),
            vendor: &self.virtual_lun0_config.vendor,
            product: self
                .virtual_lun0_config
                .product
                .as_deref()
                .unwrap_or("RAMDISK-MCP"),
            revision: &self.virtual_lun0_config.revision,
            serial: None,
            company_id: self.virtual_lun0_config.company_id,
            rtpi: self.virtual_lun0_config.relative_port_id,
            protocol_id: self.config.protocol_id,
            disk: false,
            tpgs: false,
        };
        match cmd.op {
            Op::Inquiry { evpd, page } => {
                id.disk = false;
                emulate::inquiry(&id, None, &self.config, evpd, page, inb)
            }
            Op::ReportLuns => Ok(emulate::report_luns(
                self.visible_luns(cmd.nexus).into_iter(),
                inb,
            )),
            // No unit attentions on the virtual LUN (LIO keeps none without a mapping).
            Op::RequestSense { desc } => emulate::request_sense(desc, None, inb),
            Op::TestUnitReady => Ok(Done::NoData),
            _ => Err(SenseReason::NonExistentLun),
        }
    }

    /// PERSISTENT RESERVE OUT, RESERVE, RELEASE: the LU's reservation state changes; unit
    /// attentions go to every login of the I_T nexuses concerned, PREEMPT AND ABORT's tasks
    /// are aborted, and a store that keeps the state (APTPL) is told the new one.
    fn reservation_out(&mut self, cmd: &Cmd, outb: &[u8]) -> Result<Done, SenseReason> {
        let it = self
            .nexuses
            .get(&cmd.nexus)
            .map(Nexus::it)
            .ok_or(SenseReason::NonExistentLun)?;
        let lu = self
            .luns
            .get_mut(&cmd.lun.0)
            .ok_or(SenseReason::NonExistentLun)?;
        let conflict = |e: PrError| match e {
            PrError::Conflict => SenseReason::ReservationConflict,
            PrError::Sense(r) => r,
        };
        let fx = match cmd.op {
            Op::Reserve => {
                lu.pr.reserve_spc2(it).map_err(conflict)?;
                return Ok(Done::NoData);
            }
            Op::Release => {
                lu.pr.release_spc2(it);
                return Ok(Done::NoData);
            }
            Op::PrOut { sa, scope_type } => {
                let persist = lu.store.keeps_reservations();
                let was_kept = lu.pr.aptpl;
                let fx = lu
                    .pr
                    .out(it, sa, scope_type, outb, persist)
                    .map_err(conflict)?;
                if persist && (was_kept || lu.pr.aptpl) {
                    // The state changed in memory; a failure to keep it is reported (LIO
                    // only logs it).
                    lu.store
                        .save_reservations(&lu.pr.to_aptpl_text())
                        .map_err(|_| SenseReason::LogicalUnitCommunicationFailure)?;
                }
                fx
            }
            _ => return Ok(Done::NoData),
        };
        let lun = cmd.lun;
        for (who, asc) in fx.ua {
            for (n, x) in &self.nexuses {
                if x.it() == who {
                    self.ua.entry((*n, lun.0)).or_default().push(asc);
                }
            }
        }
        if !fx.abort.is_empty() {
            let nexuses = &self.nexuses;
            let aborted = self.tasks.abort_where(
                |n, l| {
                    l == lun
                        && n != cmd.nexus
                        && nexuses.get(&n).is_some_and(|x| fx.abort.contains(&x.it()))
                },
                |_| false,
            );
            self.preempted.extend(aborted);
        }
        Ok(Done::NoData)
    }

    fn execute_lun(
        &mut self,
        cmd: &Cmd,
        inb: &mut [u8],
        outb: &[u8],
        lent: Option<&mut [u8]>,
    ) -> Result<Done, SenseReason> {
        match cmd.op {
            Op::PrOut { .. } | Op::Reserve | Op::Release => {
                return self.reservation_out(cmd, outb);
            }
            Op::ReportLuns => {
                return Ok(emulate::report_luns(
                    self.visible_luns(cmd.nexus).into_iter(),
                    inb,
                ))
            }
            Op::RequestSense { desc } => {
                if desc {
                    return Err(SenseReason::InvalidCdbField);
                }
                let ua = self
                    .ua
                    .get_mut(&(cmd.nexus, cmd.lun.0))
                    .and_then(UaQueue::take);
                return emulate::request_sense(desc, ua, inb);
            }
            _ => {}
        }
        let mapped_ro = self.mapped_read_only(cmd);
        // With ALUA the relative target port VPD page 0x83 names is the nexus's.
        let nexus_port = if self.config.port_groups.is_empty() {
            None
        } else {
            self.nexuses.get(&cmd.nexus).map(|n| n.port)
        };
        let Some(lu) = self.luns.get_mut(&cmd.lun.0) else {
            return Err(SenseReason::NonExistentLun);
        };
        let io = |_| SenseReason::LogicalUnitCommunicationFailure;
        let bs = u64::from(lu.block_size());
        let geometry = Geometry {
            blocks: lu.blocks(),
            block_size: lu.block_size(),
            max_unmap_descriptors: lu.config.max_unmap_block_descriptors,
            max_unmap_lba_count: lu.config.max_unmap_lba_count,
        };
        if Self::medium_op(cmd) {
            let mut medium = match lent {
                Some(m) => Medium::Lent(m),
                None => Medium::Store(lu.store.as_mut()),
            };
            match cmd.op {
                Op::Unmap { byte1 } => provisioning::unmap(geometry, &mut medium, byte1, outb)?,
                Op::WriteSame { lba, blocks, unmap } => {
                    provisioning::write_same(geometry, &mut medium, lba, blocks, unmap, outb)?
                }
                Op::CompareAndWrite { lba, blocks, sync } => {
                    provisioning::compare_and_write(geometry, &mut medium, lba, blocks, sync, outb)?
                }
                _ => {}
            }
            return Ok(Done::NoData);
        }
        match cmd.op {
            Op::TestUnitReady | Op::Noop | Op::Verify => Ok(Done::NoData),
            Op::Inquiry { evpd, page } => {
                let mut id = lu.identity(&self.config);
                let Some(port) = nexus_port else {
                    return emulate::inquiry(&id, Some(lu), &self.config, evpd, page, inb);
                };
                // ALUA: the nexus's port and its group in VPD page 0x83.
                id.rtpi = port;
                let mut config = self.config.clone();
                config.target_port_group = self
                    .config
                    .port_groups
                    .iter()
                    .find(|g| g.ports.contains(&port))
                    .map(|g| g.id);
                emulate::inquiry(&id, Some(lu), &config, evpd, page, inb)
            }
            Op::ReadCapacity10 { pmi, lba } => {
                // SBC-2: PMI clear with a non-zero LBA is INVALID FIELD IN CDB.
                if !pmi && lba != 0 {
                    return Err(SenseReason::InvalidCdbField);
                }
                Ok(emulate::put(inb, &lu.read_capacity10()))
            }
            Op::ReadCapacity16 => Ok(emulate::put(inb, &lu.read_capacity16())),
            Op::ReportTargetPortGroups { extended } => Ok(emulate::put(
                inb,
                &emulate::report_target_port_groups(&self.config.port_groups, extended),
            )),
            Op::PrIn { sa } => {
                let persist = lu.store.keeps_reservations();
                let data = lu.pr.read(sa, persist, self.config.protocol_id)?;
                Ok(emulate::put(inb, &data))
            }
            Op::ModeSense(req) => {
                let wp = lu.read_only() || mapped_ro;
                emulate::mode_sense(lu, wp, req, inb)
            }
            Op::ModeSelect { ten, pf } => emulate::mode_select(lu, ten, pf, outb),
            Op::Read { lba } => {
                lu.store.read_at(lba * bs, inb).map_err(io)?;
                Ok(Done::Full)
            }
            Op::Write { lba, sync } => {
                lu.store.write_at(lba * bs, outb).map_err(io)?;
                if sync {
                    lu.store.flush().map_err(io)?;
                }
                Ok(Done::Full)
            }
            Op::SyncCache => {
                lu.store.flush().map_err(io)?;
                Ok(Done::NoData)
            }
            Op::StartStop { cdb } => {
                emulate::start_stop(&cdb)?;
                Ok(Done::NoData)
            }
            Op::ReportLuns
            | Op::RequestSense { .. }
            | Op::PrOut { .. }
            | Op::Reserve
            | Op::Release
            | Op::Unmap { .. }
            | Op::WriteSame { .. }
            | Op::CompareAndWrite { .. } => Ok(Done::NoData),
        }
    }
}
