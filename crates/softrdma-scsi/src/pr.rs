//! Reservations (SPC-4 §5.13): persistent reservations — PERSISTENT RESERVE IN and OUT, the
//! registrations, the reservation, the RESERVATION CONFLICT rules — and the SPC-2
//! RESERVE/RELEASE(6/10) a few initiators still send. Modelled on LIO's
//! `target_core_pr.c`; the state of one logical unit is [`PrState`], data only.
//!
//! An I_T nexus here is its identity, [`ItNexus`]: the initiator port (for SRP the 16-byte
//! initiator port identifier, `initiator_ext` included) and the relative target port. A
//! registration outlives the login it was made on: the same initiator port logging in again
//! through the same target port is the same I_T nexus (SPC-4 §5.13.1), as with LIO.

use softrdma_wire::field::{read_u32, read_u64, write_u16, write_u32, write_u64};
use softrdma_wire::scsi::AscAscq;

use crate::sense::SenseReason;
use crate::InitiatorId;

/// RESERVATIONS PREEMPTED (2Ah/03h): a CLEAR removed the registration.
pub const RESERVATIONS_PREEMPTED: AscAscq = AscAscq(0x2a03);
/// RESERVATIONS RELEASED (2Ah/04h): a registrants-only or all-registrants reservation went.
pub const RESERVATIONS_RELEASED: AscAscq = AscAscq(0x2a04);
/// REGISTRATIONS PREEMPTED (2Ah/05h): a PREEMPT removed the registration.
pub const REGISTRATIONS_PREEMPTED: AscAscq = AscAscq(0x2a05);

/// The identity of an I_T nexus: initiator port and relative target port identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ItNexus {
    pub initiator: InitiatorId,
    pub port: u16,
}

/// PERSISTENT RESERVATION TYPE (SPC-4 table 178).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PrType {
    WriteExclusive,
    ExclusiveAccess,
    WriteExclusiveRegistrantsOnly,
    ExclusiveAccessRegistrantsOnly,
    WriteExclusiveAllRegistrants,
    ExclusiveAccessAllRegistrants,
}

impl PrType {
    pub fn from_code(c: u8) -> Option<PrType> {
        Some(match c {
            1 => PrType::WriteExclusive,
            3 => PrType::ExclusiveAccess,
            5 => PrType::WriteExclusiveRegistrantsOnly,
            6 => PrType::ExclusiveAccessRegistrantsOnly,
            7 => PrType::WriteExclusiveAllRegistrants,
            8 => PrType::ExclusiveAccessAllRegistrants,
            _ => return None,
        })
    }

    pub fn code(self) -> u8 {
        match self {
            PrType::WriteExclusive => 1,
            PrType::ExclusiveAccess => 3,
            PrType::WriteExclusiveRegistrantsOnly => 5,
            PrType::ExclusiveAccessRegistrantsOnly => 6,
            PrType::WriteExclusiveAllRegistrants => 7,
            PrType::ExclusiveAccessAllRegistrants => 8,
        }
    }

    /// Every registrant holds the reservation (the "all registrants" types).
    pub fn all_registrants(self) -> bool {
        matches!(
            self,
            PrType::WriteExclusiveAllRegistrants | PrType::ExclusiveAccessAllRegistrants
        )
    }

    /// Registrants other than the holder have the holder's access (registrants only and
    /// all registrants).
    fn registrants_allowed(self) -> bool {
        !matches!(self, PrType::WriteExclusive | PrType::ExclusiveAccess)
    }

    /// Non-registrants may not even read.
    fn exclusive_access(self) -> bool {
        matches!(
            self,
            PrType::ExclusiveAccess
                | PrType::ExclusiveAccessRegistrantsOnly
                | PrType::ExclusiveAccessAllRegistrants
        )
    }
}

/// A registration: an I_T nexus and its reservation key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    pub it: ItNexus,
    pub key: u64,
}

/// The persistent reservation: who holds it (for the all-registrants types, whoever
/// reserved; every registrant is a holder) and its type. The scope is always LU_SCOPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    pub holder: ItNexus,
    pub kind: PrType,
}

/// PERSISTENT RESERVE OUT service actions (SPC-4 table 180).
pub mod out_sa {
    pub const REGISTER: u8 = 0x00;
    pub const RESERVE: u8 = 0x01;
    pub const RELEASE: u8 = 0x02;
    pub const CLEAR: u8 = 0x03;
    pub const PREEMPT: u8 = 0x04;
    pub const PREEMPT_AND_ABORT: u8 = 0x05;
    pub const REGISTER_AND_IGNORE: u8 = 0x06;
    pub const REGISTER_AND_MOVE: u8 = 0x07;
}

/// PERSISTENT RESERVE IN service actions (SPC-4 table 170).
pub mod in_sa {
    pub const READ_KEYS: u8 = 0x00;
    pub const READ_RESERVATION: u8 = 0x01;
    pub const REPORT_CAPABILITIES: u8 = 0x02;
    pub const READ_FULL_STATUS: u8 = 0x03;
}

/// How a command relates to a reservation (SPC-4 table 64, LIO's
/// `core_scsi3_pr_seq_non_holder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Allowed whatever the reservation (INQUIRY, REPORT LUNS, TEST UNIT READY, READ
    /// CAPACITY, PERSISTENT RESERVE IN/OUT, ...).
    Always,
    /// A read of the medium or its parameters: allowed under the write-exclusive types.
    Read,
    /// Anything that changes the medium or the LU's state.
    Write,
}

/// Why a PERSISTENT RESERVE OUT failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PrError {
    /// RESERVATION CONFLICT status, no sense data.
    Conflict,
    Sense(SenseReason),
}

impl From<SenseReason> for PrError {
    fn from(r: SenseReason) -> PrError {
        PrError::Sense(r)
    }
}

/// What a successful PERSISTENT RESERVE OUT did that the target acts on.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct PrEffects {
    /// Unit attentions for these I_T nexuses (on this LU).
    pub ua: Vec<(ItNexus, AscAscq)>,
    /// PREEMPT AND ABORT: the tasks of these I_T nexuses on the LU are aborted.
    pub abort: Vec<ItNexus>,
}

/// The parameter list of PERSISTENT RESERVE OUT (SPC-4 §6.16.3), the 24 bytes every
/// service action but REGISTER AND MOVE uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrOutParams {
    pub key: u64,
    pub sa_key: u64,
    pub spec_i_pt: bool,
    pub all_tg_pt: bool,
    pub aptpl: bool,
}

impl PrOutParams {
    pub const LEN: usize = 24;

    /// `core_scsi3_emulate_pr_out`'s checks of the list: shorter than 24 bytes is PARAMETER
    /// LIST LENGTH ERROR, and (without SPEC_I_PT) so is any other length.
    pub fn parse(b: &[u8]) -> Result<PrOutParams, SenseReason> {
        if b.len() < Self::LEN {
            return Err(SenseReason::ParameterListLengthError);
        }
        let p = PrOutParams {
            key: read_u64(b, 0),
            sa_key: read_u64(b, 8),
            spec_i_pt: b[20] & 0x08 != 0,
            all_tg_pt: b[20] & 0x04 != 0,
            aptpl: b[20] & 0x01 != 0,
        };
        if !p.spec_i_pt && b.len() != Self::LEN {
            return Err(SenseReason::ParameterListLengthError);
        }
        Ok(p)
    }
}

/// One logical unit's reservations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrState {
    /// PRGENERATION: bumped by every REGISTER, REGISTER AND IGNORE EXISTING KEY, CLEAR,
    /// PREEMPT and PREEMPT AND ABORT that succeeds (not by RESERVE or RELEASE).
    pub generation: u32,
    /// In registration order (READ KEYS lists them so).
    pub registrations: Vec<Registration>,
    pub reservation: Option<Reservation>,
    /// Activate persist through power loss: the APTPL bit of the latest successful
    /// REGISTER; the state is kept across a restart while it is set.
    pub aptpl: bool,
    /// The SPC-2 reservation (RESERVE(6)/(10)), if any: its holder.
    pub spc2: Option<ItNexus>,
}

impl PrState {
    fn key_of(&self, it: ItNexus) -> Option<u64> {
        self.registrations
            .iter()
            .find(|r| r.it == it)
            .map(|r| r.key)
    }

    /// Whether `it` holds the persistent reservation (any registrant for the
    /// all-registrants types).
    pub fn is_holder(&self, it: ItNexus) -> bool {
        match self.reservation {
            Some(r) if r.kind.all_registrants() => self.key_of(it).is_some(),
            Some(r) => r.holder == it,
            None => false,
        }
    }

    /// The RESERVATION CONFLICT check of a command from `it` (`target_check_reservation`):
    /// an SPC-2 reservation of another I_T nexus refuses everything not always allowed; a
    /// persistent reservation refuses a non-holder's writes, and reads too under the
    /// exclusive-access types, unless the type lets registrants in and `it` is one.
    pub(crate) fn conflicts(&self, it: ItNexus, access: Access) -> bool {
        if let Some(h) = self.spc2 {
            return h != it && access != Access::Always;
        }
        let Some(r) = self.reservation else {
            return false;
        };
        if access == Access::Always || self.is_holder(it) {
            return false;
        }
        if r.kind.registrants_allowed() && self.key_of(it).is_some() {
            return false;
        }
        match access {
            Access::Always => false,
            Access::Read => r.kind.exclusive_access(),
            Access::Write => true,
        }
    }

    /// The other registrants' I_T nexuses (for unit attentions).
    fn others(&self, it: ItNexus) -> Vec<ItNexus> {
        self.registrations
            .iter()
            .filter(|r| r.it != it)
            .map(|r| r.it)
            .collect()
    }

    /// The reservation goes (released or cleared by its holder). The registrants-only and
    /// all-registrants types tell the other registrants (RESERVATIONS RELEASED, SPC-4
    /// §5.13.11.2.2), as LIO's `__core_scsi3_complete_pro_release` does.
    fn drop_reservation(&mut self, it: ItNexus, fx: &mut PrEffects) {
        if let Some(r) = self.reservation.take() {
            if r.kind.registrants_allowed() {
                for o in self.others(it) {
                    fx.ua.push((o, RESERVATIONS_RELEASED));
                }
            }
        }
    }

    /// Removes `it`'s registration; a holder's reservation goes with it unless other
    /// registrants hold an all-registrants one.
    fn unregister(&mut self, it: ItNexus, fx: &mut PrEffects) {
        self.registrations.retain(|r| r.it != it);
        let Some(r) = self.reservation else {
            return;
        };
        if r.kind.all_registrants() {
            if self.registrations.is_empty() {
                self.reservation = None;
            } else if r.holder == it {
                // Someone still holds it; keep a registered holder on record.
                self.reservation = Some(Reservation {
                    holder: self.registrations[0].it,
                    kind: r.kind,
                });
            }
        } else if r.holder == it {
            self.drop_reservation(it, fx);
        }
    }

    /// PERSISTENT RESERVE OUT from `it` (`core_scsi3_emulate_pr_out`): service action
    /// `sa`, SCOPE and TYPE byte `scope_type`, the parameter list. `persist` says whether
    /// the LU can keep the state across a restart (PTPL_C).
    pub(crate) fn out(
        &mut self,
        it: ItNexus,
        sa: u8,
        scope_type: u8,
        params: &[u8],
        persist: bool,
    ) -> Result<PrEffects, PrError> {
        // An SPC-2 reservation of another nexus refuses PERSISTENT RESERVE OUT (LIO:
        // `core_scsi2_reservation_seq_non_holder`).
        if self.spc2.is_some_and(|h| h != it) {
            return Err(PrError::Conflict);
        }
        if sa >= out_sa::REGISTER_AND_MOVE {
            return Err(SenseReason::InvalidCdbField.into());
        }
        let p = PrOutParams::parse(params)?;
        // We report SIP_C = 0 and ATP_C = 0 (SPC-4 §6.16.3).
        if p.spec_i_pt || p.all_tg_pt {
            return Err(SenseReason::InvalidParameterList.into());
        }
        // APTPL is only for REGISTER; PTPL_C = 0 refuses it.
        let register = sa == out_sa::REGISTER || sa == out_sa::REGISTER_AND_IGNORE;
        if p.aptpl && (!register || !persist) {
            return Err(SenseReason::InvalidParameterList.into());
        }
        let kind = if matches!(
            sa,
            out_sa::RESERVE | out_sa::RELEASE | out_sa::PREEMPT | out_sa::PREEMPT_AND_ABORT
        ) {
            // Only LU_SCOPE, and a type we know.
            if scope_type >> 4 != 0 {
                return Err(SenseReason::InvalidCdbField.into());
            }
            Some(PrType::from_code(scope_type & 0x0f).ok_or(SenseReason::InvalidCdbField)?)
        } else {
            None
        };
        let mine = self.key_of(it);
        let mut fx = PrEffects::default();
        if register {
            match mine {
                None => {
                    if sa == out_sa::REGISTER && p.key != 0 {
                        return Err(PrError::Conflict);
                    }
                    if p.sa_key != 0 {
                        self.registrations.push(Registration { it, key: p.sa_key });
                    }
                }
                Some(k) => {
                    if sa == out_sa::REGISTER && p.key != k {
                        return Err(PrError::Conflict);
                    }
                    if p.sa_key == 0 {
                        self.unregister(it, &mut fx);
                    } else if let Some(r) = self.registrations.iter_mut().find(|r| r.it == it) {
                        r.key = p.sa_key;
                    }
                }
            }
            // Unregistering the last registration drops APTPL with it (nothing to keep).
            self.aptpl = p.aptpl && !self.registrations.is_empty();
            self.generation = self.generation.wrapping_add(1);
            return Ok(fx);
        }
        // Every other service action: a registered I_T nexus with its key.
        match mine {
            Some(k) if k == p.key => {}
            _ => return Err(PrError::Conflict),
        }
        match (sa, kind) {
            (out_sa::RESERVE, Some(kind)) => match self.reservation {
                Some(r) if self.is_holder(it) => {
                    if r.kind != kind {
                        return Err(PrError::Conflict);
                    }
                }
                Some(_) => return Err(PrError::Conflict),
                None => self.reservation = Some(Reservation { holder: it, kind }),
            },
            (out_sa::RELEASE, Some(kind)) => {
                if let Some(r) = self.reservation {
                    if self.is_holder(it) {
                        if r.kind != kind {
                            return Err(SenseReason::InvalidReleaseOfPersistentReservation.into());
                        }
                        self.drop_reservation(it, &mut fx);
                    }
                }
            }
            (out_sa::CLEAR, _) => {
                for o in self.others(it) {
                    fx.ua.push((o, RESERVATIONS_PREEMPTED));
                }
                self.registrations.clear();
                self.reservation = None;
                self.aptpl = false;
                self.generation = self.generation.wrapping_add(1);
            }
            (out_sa::PREEMPT | out_sa::PREEMPT_AND_ABORT, Some(kind)) => {
                self.preempt(it, p.sa_key, kind, &mut fx)?;
                if sa == out_sa::PREEMPT_AND_ABORT {
                    fx.abort = fx
                        .ua
                        .iter()
                        .filter(|(_, a)| *a == REGISTRATIONS_PREEMPTED)
                        .map(|(o, _)| *o)
                        .collect();
                }
                self.generation = self.generation.wrapping_add(1);
            }
            _ => return Err(SenseReason::InvalidCdbField.into()),
        }
        Ok(fx)
    }

    /// PREEMPT (SPC-4 §5.13.11.4, LIO's `core_scsi3_pro_preempt`).
    fn preempt(
        &mut self,
        it: ItNexus,
        sa_key: u64,
        kind: PrType,
        fx: &mut PrEffects,
    ) -> Result<(), PrError> {
        let remove = |s: &mut PrState, pick: &dyn Fn(&Registration) -> bool, fx: &mut PrEffects| {
            let mut n = 0;
            s.registrations.retain(|r| {
                if r.it != it && pick(r) {
                    fx.ua.push((r.it, REGISTRATIONS_PREEMPTED));
                    n += 1;
                    false
                } else {
                    true
                }
            });
            n
        };
        match self.reservation {
            // An all-registrants reservation and SERVICE ACTION RESERVATION KEY 0: every
            // other registration goes, the issuer holds a new reservation.
            Some(r) if r.kind.all_registrants() && sa_key == 0 => {
                remove(self, &|_| true, fx);
                self.reservation = Some(Reservation { holder: it, kind });
            }
            // A reservation held by the key preempted: its holder's registrations go and the
            // issuer takes it, with the new type (the others told when the type changed).
            Some(r) if !r.kind.all_registrants() && self.key_of(r.holder) == Some(sa_key) => {
                remove(self, &|x| x.key == sa_key, fx);
                if r.kind != kind {
                    for o in self.others(it) {
                        if !fx.ua.iter().any(|(u, _)| *u == o) {
                            fx.ua.push((o, RESERVATIONS_RELEASED));
                        }
                    }
                }
                self.reservation = Some(Reservation { holder: it, kind });
            }
            // No reservation affected: only registrations go; key 0 is INVALID FIELD IN
            // PARAMETER LIST, preempting nobody is RESERVATION CONFLICT.
            _ => {
                if sa_key == 0 {
                    return Err(SenseReason::InvalidParameterList.into());
                }
                if remove(self, &|x| x.key == sa_key, fx) == 0 {
                    return Err(PrError::Conflict);
                }
                // An all-registrants reservation whose last other holder went stays the
                // issuer's; a holder preempted by its own key (not possible here).
            }
        }
        Ok(())
    }

    /// PERSISTENT RESERVE IN (`core_scsi3_emulate_pr_in`): the parameter data of service
    /// action `sa`; `persist` is PTPL_C; `protocol_id` the TransportID's PROTOCOL
    /// IDENTIFIER (4: SRP, whose TransportID is the 16-byte initiator port identifier).
    pub(crate) fn read(
        &self,
        sa: u8,
        persist: bool,
        protocol_id: u8,
    ) -> Result<Vec<u8>, SenseReason> {
        let mut out = vec![0u8; 8];
        write_u32(&mut out, 0, self.generation);
        match sa {
            in_sa::READ_KEYS => {
                for r in &self.registrations {
                    out.extend_from_slice(&r.key.to_be_bytes());
                }
            }
            in_sa::READ_RESERVATION => {
                if let Some(r) = self.reservation {
                    let mut d = [0u8; 16];
                    // The all-registrants types report key 0 (SPC-4 §6.15.3.3).
                    let key = if r.kind.all_registrants() {
                        0
                    } else {
                        self.key_of(r.holder).unwrap_or(0)
                    };
                    write_u64(&mut d, 0, key);
                    d[13] = r.kind.code();
                    out.extend_from_slice(&d);
                }
            }
            in_sa::REPORT_CAPABILITIES => {
                let mut d = [0u8; 8];
                write_u16(&mut d, 0, 8);
                // CRH (RESERVE/RELEASE(6/10) handled as SPC-4 §5.13.3 says); PTPL_C.
                d[2] = 0x10 | u8::from(persist);
                // TMV, ALLOW COMMANDS 001b, PTPL_A.
                d[3] = 0x80 | 0x10 | u8::from(self.aptpl);
                // Type mask: WR_EX_AR, EX_AC_RO, WR_EX_RO, EX_AC, WR_EX; EX_AC_AR.
                d[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02;
                d[5] = 0x01;
                return Ok(d.to_vec());
            }
            in_sa::READ_FULL_STATUS => {
                for r in &self.registrations {
                    let mut d = [0u8; 48];
                    write_u64(&mut d, 0, r.key);
                    if self.is_holder(r.it) {
                        if let Some(res) = self.reservation {
                            d[12] = 0x01; // R_HOLDER
                            d[13] = res.kind.code();
                        }
                    }
                    write_u16(&mut d, 18, r.it.port);
                    write_u32(&mut d, 20, 24);
                    // The SRP TransportID (SPC-4 §7.6.4.5): format 0, the port identifier.
                    d[24] = protocol_id & 0x0f;
                    d[32..48].copy_from_slice(&r.it.initiator.0.to_be_bytes());
                    out.extend_from_slice(&d);
                }
            }
            _ => return Err(SenseReason::InvalidCdbField),
        }
        let add = u32::try_from(out.len() - 8).unwrap_or(u32::MAX);
        write_u32(&mut out, 4, add);
        Ok(out)
    }

    /// RESERVE(6)/(10) (`target_scsi2_reservation_reserve`): refused with RESERVATION
    /// CONFLICT while persistent reservations are in use (registrations exist) or another
    /// I_T nexus holds it; taken (again) otherwise.
    pub(crate) fn reserve_spc2(&mut self, it: ItNexus) -> Result<(), PrError> {
        if !self.registrations.is_empty() || self.reservation.is_some() {
            return Err(PrError::Conflict);
        }
        if self.spc2.is_some_and(|h| h != it) {
            return Err(PrError::Conflict);
        }
        self.spc2 = Some(it);
        Ok(())
    }

    /// RELEASE(6)/(10) (`target_scsi2_reservation_release`): the holder's releases it; anyone
    /// else's is GOOD and changes nothing.
    pub(crate) fn release_spc2(&mut self, it: ItNexus) {
        if self.spc2 == Some(it) {
            self.spc2 = None;
        }
    }

    // -----------------------------------------------------------------------------------
    // APTPL: the state kept across a restart
    // -----------------------------------------------------------------------------------

    /// The state as the small text file kept beside a file LU while APTPL is set: a header,
    /// the generation, one line per registration, the reservation. Empty when APTPL is
    /// clear (nothing is kept).
    pub fn to_aptpl_text(&self) -> String {
        if !self.aptpl {
            return String::new();
        }
        let mut s = String::from("softrdma-pr 1\n");
        s.push_str(&format!("generation {}\n", self.generation));
        for r in &self.registrations {
            s.push_str(&format!(
                "register {:032x} {} {:016x}\n",
                r.it.initiator.0, r.it.port, r.key
            ));
        }
        if let Some(r) = self.reservation {
            s.push_str(&format!(
                "reserve {:032x} {} {}\n",
                r.holder.initiator.0,
                r.holder.port,
                r.kind.code()
            ));
        }
        s
    }

    /// Reads [`PrState::to_aptpl_text`]'s form back. Anything malformed is an error (the
    /// caller starts with no reservations and says why); a reservation whose holder is not
    /// registered is refused too.
    pub fn from_aptpl_text(text: &str) -> Result<PrState, AptplError> {
        let mut lines = text.lines().enumerate();
        let mut st = PrState::default();
        if text.trim().is_empty() {
            return Ok(st);
        }
        match lines.next() {
            Some((_, "softrdma-pr 1")) => {}
            _ => return Err(AptplError { line: 1 }),
        }
        let it = |a: &str, b: &str| -> Option<ItNexus> {
            if a.len() != 32 {
                return None;
            }
            Some(ItNexus {
                initiator: InitiatorId(u128::from_str_radix(a, 16).ok()?),
                port: b.parse().ok()?,
            })
        };
        for (i, line) in lines {
            let bad = AptplError { line: i + 1 };
            let f: Vec<&str> = line.split_ascii_whitespace().collect();
            match f.as_slice() {
                [] => {}
                ["generation", g] => st.generation = g.parse().map_err(|_| bad)?,
                ["register", a, b, k] => {
                    let it = it(a, b).ok_or(bad)?;
                    let key = u64::from_str_radix(k, 16).map_err(|_| bad)?;
                    if key == 0 || k.len() != 16 || st.key_of(it).is_some() {
                        return Err(bad);
                    }
                    st.registrations.push(Registration { it, key });
                }
                ["reserve", a, b, t] => {
                    let holder = it(a, b).ok_or(bad)?;
                    let kind = t
                        .parse::<u8>()
                        .ok()
                        .and_then(PrType::from_code)
                        .ok_or(bad)?;
                    if st.key_of(holder).is_none() || st.reservation.is_some() {
                        return Err(bad);
                    }
                    st.reservation = Some(Reservation { holder, kind });
                }
                _ => return Err(bad),
            }
        }
        st.aptpl = !st.registrations.is_empty();
        Ok(st)
    }
}

/// A malformed APTPL state file: the line (1-based) that is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AptplError {
    pub line: usize,
}

impl std::fmt::Display for AptplError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "persistent reservation state: line {} is malformed",
            self.line
        )
    }
}

impl std::error::Error for AptplError {}

/// The key field of a PERSISTENT RESERVE OUT parameter list, for tests and tools.
pub fn pr_out_params(key: u64, sa_key: u64, aptpl: bool) -> [u8; 24] {
    let mut b = [0u8; 24];
    write_u64(&mut b, 0, key);
    write_u64(&mut b, 8, sa_key);
    b[20] = u8::from(aptpl);
    b
}

/// READ KEYS data's keys (tests and tools).
pub fn read_keys(data: &[u8]) -> Vec<u64> {
    if data.len() < 8 {
        return Vec::new();
    }
    let n = (read_u32(data, 4) as usize / 8).min((data.len() - 8) / 8);
    (0..n).map(|i| read_u64(data, 8 + 8 * i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn it(i: u128, port: u16) -> ItNexus {
        ItNexus {
            initiator: InitiatorId(i),
            port,
        }
    }

    fn out(
        s: &mut PrState,
        who: ItNexus,
        sa: u8,
        st: u8,
        k: u64,
        sk: u64,
    ) -> Result<PrEffects, PrError> {
        s.out(who, sa, st, &pr_out_params(k, sk, false), true)
    }

    #[test]
    fn register_reserve_release() {
        let (a, b) = (it(0xa, 1), it(0xb, 1));
        let mut s = PrState::default();
        // REGISTER with a non-zero key while unregistered: conflict.
        assert_eq!(out(&mut s, a, 0, 0, 5, 1), Err(PrError::Conflict));
        assert!(out(&mut s, a, 0, 0, 0, 0xaa).is_ok());
        assert!(out(&mut s, b, 6, 0, 999, 0xbb).is_ok());
        assert_eq!(s.generation, 2);
        // Wrong key: conflict; right key: reserved (WE).
        assert_eq!(out(&mut s, a, 1, 1, 0xbb, 0), Err(PrError::Conflict));
        assert!(out(&mut s, a, 1, 1, 0xaa, 0).is_ok());
        assert_eq!(s.generation, 2);
        // b reads, does not write.
        assert!(!s.conflicts(b, Access::Read));
        assert!(s.conflicts(b, Access::Write));
        assert!(!s.conflicts(a, Access::Write));
        // b cannot reserve; a again with another type: conflict; same type: GOOD.
        assert_eq!(out(&mut s, b, 1, 1, 0xbb, 0), Err(PrError::Conflict));
        assert_eq!(out(&mut s, a, 1, 3, 0xaa, 0), Err(PrError::Conflict));
        assert!(out(&mut s, a, 1, 1, 0xaa, 0).is_ok());
        // RELEASE with the wrong type: INVALID RELEASE; by b: nothing.
        assert_eq!(
            out(&mut s, a, 2, 3, 0xaa, 0),
            Err(PrError::Sense(
                SenseReason::InvalidReleaseOfPersistentReservation
            ))
        );
        assert!(out(&mut s, b, 2, 1, 0xbb, 0).is_ok());
        assert!(s.reservation.is_some());
        assert!(out(&mut s, a, 2, 1, 0xaa, 0).is_ok());
        assert!(s.reservation.is_none());
        // Scope other than LU, an unknown type: INVALID FIELD IN CDB.
        assert_eq!(
            out(&mut s, a, 1, 0x11, 0xaa, 0),
            Err(PrError::Sense(SenseReason::InvalidCdbField))
        );
        assert_eq!(
            out(&mut s, a, 1, 2, 0xaa, 0),
            Err(PrError::Sense(SenseReason::InvalidCdbField))
        );
    }

    #[test]
    fn registrants_only_and_all_registrants() {
        let (a, b, c) = (it(0xa, 1), it(0xb, 1), it(0xc, 2));
        let mut s = PrState::default();
        for (x, k) in [(a, 1), (b, 2)] {
            out(&mut s, x, 0, 0, 0, k).unwrap();
        }
        out(&mut s, a, 1, 6, 1, 0).unwrap(); // EA registrants only
        assert!(!s.conflicts(b, Access::Write));
        assert!(s.conflicts(c, Access::Read));
        assert!(!s.conflicts(c, Access::Always));
        // a unregisters: the reservation goes, b is told.
        let fx = out(&mut s, a, 0, 0, 1, 0).unwrap();
        assert_eq!(fx.ua, vec![(b, RESERVATIONS_RELEASED)]);
        assert!(s.reservation.is_none());
        // All registrants: READ RESERVATION reports key 0; it survives its reserver.
        out(&mut s, a, 0, 0, 0, 1).unwrap();
        out(&mut s, b, 1, 7, 2, 0).unwrap();
        let d = s.read(in_sa::READ_RESERVATION, true, 4).unwrap();
        assert_eq!(d.len(), 24);
        assert_eq!((&d[8..16], d[21]), (&[0u8; 8][..], 7));
        assert!(s.is_holder(a));
        out(&mut s, b, 0, 0, 2, 0).unwrap();
        assert!(s.reservation.is_some() && s.is_holder(a));
    }

    #[test]
    fn preempt_clear_and_abort() {
        let (a, b, c) = (it(0xa, 1), it(0xb, 1), it(0xc, 1));
        let mut s = PrState::default();
        for (x, k) in [(a, 1), (b, 2), (c, 2)] {
            out(&mut s, x, 0, 0, 0, k).unwrap();
        }
        out(&mut s, b, 1, 3, 2, 0).unwrap();
        // a preempts key 2 (the holder's): b and c go, a holds WE now.
        let g = s.generation;
        let fx = out(&mut s, a, 5, 1, 1, 2).unwrap();
        assert_eq!(fx.abort, vec![b, c]);
        assert_eq!(
            s.reservation,
            Some(Reservation {
                holder: a,
                kind: PrType::WriteExclusive
            })
        );
        assert_eq!(s.generation, g + 1);
        assert_eq!(read_keys(&s.read(0, true, 4).unwrap()), vec![1]);
        // Preempting a key nobody has: conflict; key 0 without an AR reservation: invalid.
        assert_eq!(out(&mut s, a, 4, 1, 1, 9), Err(PrError::Conflict));
        assert_eq!(
            out(&mut s, a, 4, 1, 1, 0),
            Err(PrError::Sense(SenseReason::InvalidParameterList))
        );
        // CLEAR: everything goes, the others told.
        out(&mut s, b, 0, 0, 0, 5).unwrap();
        let fx = out(&mut s, a, 3, 0, 1, 0).unwrap();
        assert_eq!(fx.ua, vec![(b, RESERVATIONS_PREEMPTED)]);
        assert!(s.registrations.is_empty() && s.reservation.is_none());
    }

    #[test]
    fn spc2_and_pr_exclude_each_other() {
        let (a, b) = (it(0xa, 1), it(0xb, 1));
        let mut s = PrState::default();
        s.reserve_spc2(a).unwrap();
        assert!(s.conflicts(b, Access::Read));
        assert!(!s.conflicts(b, Access::Always));
        assert_eq!(s.reserve_spc2(b), Err(PrError::Conflict));
        assert_eq!(out(&mut s, b, 0, 0, 0, 1), Err(PrError::Conflict));
        s.release_spc2(b);
        assert!(s.spc2.is_some());
        s.release_spc2(a);
        out(&mut s, b, 0, 0, 0, 1).unwrap();
        assert_eq!(s.reserve_spc2(a), Err(PrError::Conflict));
    }

    #[test]
    fn aptpl_text_round_trip() {
        let (a, b) = (it(0x1234_5678_9abc_def0_0011_2233_4455_6677, 1), it(0xb, 2));
        let mut s = PrState::default();
        s.out(a, 0, 0, &pr_out_params(0, 0x1111, true), true)
            .unwrap();
        out(&mut s, b, 0, 0, 0, 0x2222).unwrap();
        // The later REGISTER without APTPL clears it; register again with it.
        assert!(!s.aptpl);
        assert_eq!(s.to_aptpl_text(), "");
        s.out(b, 0, 0, &pr_out_params(0x2222, 0x2223, true), true)
            .unwrap();
        out(&mut s, a, 1, 5, 0x1111, 0).unwrap();
        let text = s.to_aptpl_text();
        let back = PrState::from_aptpl_text(&text).unwrap();
        assert_eq!(back, s);
        // PTPL_C = 0: APTPL is INVALID FIELD IN PARAMETER LIST.
        assert_eq!(
            s.out(a, 0, 0, &pr_out_params(0x1111, 0x1111, true), false),
            Err(PrError::Sense(SenseReason::InvalidParameterList))
        );
        for bad in [
            "nonsense",
            "softrdma-pr 1\nregister 12 1 0000000000000001\n",
            "softrdma-pr 1\nregister 000000000000000000000000000000aa 1 0000000000000000\n",
            "softrdma-pr 1\nreserve 000000000000000000000000000000aa 1 1\n",
            "softrdma-pr 1\ngeneration x\n",
        ] {
            assert!(PrState::from_aptpl_text(bad).is_err(), "{bad}");
        }
    }
}
