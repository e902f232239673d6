//! The QP state machine: RESET → INIT → RTR → RTS (⇄ SQD), SQE, ERR, with the attributes each
//! transition requires and allows per QP type.
//!
//! The rules are those of the kernel's `ib_modify_qp_is_ok` (drivers/infiniband/core/verbs.c,
//! `qp_state_table`), which every `ibv_modify_qp` on rxe goes through (`rxe_qp_chk_attr`),
//! restated here as our own table ([`rule`]) for the QP types softrdma has: RC, UC, UD and
//! GSI (QP1). The checks run in the kernel's order:
//!
//! 1. the current state is `attr.cur_qp_state` if the mask has `CUR_STATE`, else the QP's
//!    state; `CUR_STATE` is only legal from RTR, RTS, SQD and SQE (and must name the QP's
//!    actual state — the kernel trusts it; we refuse a mismatch);
//! 2. the next state is `attr.qp_state` if the mask has `STATE`, else the current state;
//! 3. the (current, next) pair must be a transition of the table;
//! 4. every required attribute must be in the mask ([`ModifyQpError::MissingAttribute`]);
//! 5. nothing outside required ∪ optional ∪ {STATE} may be in the mask
//!    ([`ModifyQpError::ForbiddenAttribute`]) — so e.g. `CAP` is refused everywhere, as in
//!    the kernel.
//!
//! Then the values are checked as `rxe_qp_chk_attr` does (port, P_Key index, path MTU ≤ max
//! MTU, RDMA READ depths ≤ device limits, timeout ≤ 31, source GID index) — see
//! [`crate::Stack::modify_qp`].

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

use super::qp::{QpAttr, QpType};

/// `enum ib_qp_state` / `ibv_qp_state`, with their values.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub enum QpState {
    /// `IBV_QPS_RESET` (0): the state a new QP starts in.
    #[default]
    Reset,
    /// `IBV_QPS_INIT` (1): receive WRs may be posted, nothing is processed.
    Init,
    /// `IBV_QPS_RTR` (2): ready to receive.
    Rtr,
    /// `IBV_QPS_RTS` (3): ready to send.
    Rts,
    /// `IBV_QPS_SQD` (4): send queue drained; new send WRs are queued, not started.
    Sqd,
    /// `IBV_QPS_SQE` (5): send queue error (UD/UC only): sends flush, receives continue.
    Sqe,
    /// `IBV_QPS_ERR` (6): everything posted is flushed with `WR_FLUSH_ERR`.
    Err,
}

impl QpState {
    /// All states in enum order.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];

    /// The verbs enum value.
    pub const fn to_verbs(self) -> u8 {
        self as u8
    }

    /// The state from its verbs enum value.
    pub const fn from_verbs(v: u8) -> Option<QpState> {
        match v {
            0 => Some(QpState::Reset),
            1 => Some(QpState::Init),
            2 => Some(QpState::Rtr),
            3 => Some(QpState::Rts),
            4 => Some(QpState::Sqd),
            5 => Some(QpState::Sqe),
            6 => Some(QpState::Err),
            _ => None,
        }
    }

    /// The short name (`RESET`, `INIT`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        }
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// `enum ibv_qp_attr_mask` / `enum ib_qp_attr_mask`: which [`super::QpAttr`] fields a
/// `modify_qp` call sets. Bit values as in the verbs ABI.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpAttrMask(pub u32);

macro_rules! mask_bits {
    ($( $(#[$doc:meta])* $name:ident = $bit:expr, $label:literal; )*) => {
        impl QpAttrMask {
            $( $(#[$doc])* pub const $name: QpAttrMask = QpAttrMask(1 << $bit); )*

            /// Every known bit with its attribute name, in bit order.
            pub const NAMED: &'static [(QpAttrMask, &'static str)] = &[$( (QpAttrMask::$name, $label) ),*];
        }
    };
}

mask_bits! {
    /// `IBV_QP_STATE`: `qp_state`.
    STATE = 0, "qp_state";
    /// `IBV_QP_CUR_STATE`: `cur_qp_state`.
    CUR_STATE = 1, "cur_qp_state";
    /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`: `en_sqd_async_notify`.
    EN_SQD_ASYNC_NOTIFY = 2, "en_sqd_async_notify";
    /// `IBV_QP_ACCESS_FLAGS`: `qp_access_flags`.
    ACCESS_FLAGS = 3, "qp_access_flags";
    /// `IBV_QP_PKEY_INDEX`: `pkey_index`.
    PKEY_INDEX = 4, "pkey_index";
    /// `IBV_QP_PORT`: `port_num`.
    PORT = 5, "port_num";
    /// `IBV_QP_QKEY`: `qkey`.
    QKEY = 6, "qkey";
    /// `IBV_QP_AV`: `ah_attr` (the primary path's address vector).
    AV = 7, "ah_attr";
    /// `IBV_QP_PATH_MTU`: `path_mtu`.
    PATH_MTU = 8, "path_mtu";
    /// `IBV_QP_TIMEOUT`: `timeout` (local ACK timeout exponent).
    TIMEOUT = 9, "timeout";
    /// `IBV_QP_RETRY_CNT`: `retry_cnt`.
    RETRY_CNT = 10, "retry_cnt";
    /// `IBV_QP_RNR_RETRY`: `rnr_retry`.
    RNR_RETRY = 11, "rnr_retry";
    /// `IBV_QP_RQ_PSN`: `rq_psn`.
    RQ_PSN = 12, "rq_psn";
    /// `IBV_QP_MAX_QP_RD_ATOMIC`: `max_rd_atomic` (initiator depth).
    MAX_QP_RD_ATOMIC = 13, "max_rd_atomic";
    /// `IBV_QP_ALT_PATH`: the alternate path (APM; not supported by softrdma).
    ALT_PATH = 14, "alt_path";
    /// `IBV_QP_MIN_RNR_TIMER`: `min_rnr_timer`.
    MIN_RNR_TIMER = 15, "min_rnr_timer";
    /// `IBV_QP_SQ_PSN`: `sq_psn`.
    SQ_PSN = 16, "sq_psn";
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`: `max_dest_rd_atomic` (responder resources).
    MAX_DEST_RD_ATOMIC = 17, "max_dest_rd_atomic";
    /// `IBV_QP_PATH_MIG_STATE`: `path_mig_state` (APM; not supported by softrdma).
    PATH_MIG_STATE = 18, "path_mig_state";
    /// `IBV_QP_CAP`: `cap` (never allowed by the kernel's table).
    CAP = 19, "cap";
    /// `IBV_QP_DEST_QPN`: `dest_qp_num`.
    DEST_QPN = 20, "dest_qp_num";
}

impl QpAttrMask {
    /// No attribute.
    pub const EMPTY: QpAttrMask = QpAttrMask(0);

    /// True if every bit of `other` is set in `self`.
    pub const fn contains(self, other: QpAttrMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if any bit of `other` is set in `self`.
    pub const fn intersects(self, other: QpAttrMask) -> bool {
        self.0 & other.0 != 0
    }

    /// The bits of `self` not in `other`.
    pub const fn minus(self, other: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 & !other.0)
    }

    /// True when no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The attribute names of the set bits, in bit order (unknown bits as `bit<N>`).
    pub fn names(self) -> Vec<String> {
        (0..32)
            .filter(|b| self.0 & (1 << b) != 0)
            .map(
                |b| match QpAttrMask::NAMED.iter().find(|(m, _)| m.0 == 1 << b) {
                    Some((_, n)) => (*n).to_string(),
                    None => format!("bit{b}"),
                },
            )
            .collect()
    }

    /// The name of the lowest set bit (what an error reports).
    pub fn first_name(self) -> &'static str {
        QpAttrMask::NAMED
            .iter()
            .find(|(m, _)| self.intersects(*m))
            .map(|(_, n)| *n)
            .unwrap_or("unknown attribute bit")
    }
}

impl BitOr for QpAttrMask {
    type Output = QpAttrMask;
    fn bitor(self, rhs: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 | rhs.0)
    }
}

impl BitOrAssign for QpAttrMask {
    fn bitor_assign(&mut self, rhs: QpAttrMask) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for QpAttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("0");
        }
        f.write_str(&self.names().join("|"))
    }
}

/// The attributes a transition requires and allows for one QP type.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Rule {
    /// Must be in the mask.
    pub required: QpAttrMask,
    /// May be in the mask.
    pub optional: QpAttrMask,
}

const fn m(bits: &[QpAttrMask]) -> QpAttrMask {
    let mut v = 0;
    let mut i = 0;
    while i < bits.len() {
        v |= bits[i].0;
        i += 1;
    }
    QpAttrMask(v)
}

const NONE: QpAttrMask = QpAttrMask::EMPTY;

/// The transition table: `Some(rule)` if `from → to` is legal for `ty`.
///
/// Restates the kernel's `qp_state_table` (verbs.c) for RC, UC, UD and GSI. Transitions the
/// kernel marks valid with no attributes for a type (e.g. RTS→RTS for UC) are legal with
/// only the listed optional attributes.
pub const fn rule(from: QpState, to: QpState, ty: QpType) -> Option<Rule> {
    use QpAttrMask as A;
    use QpState::*;
    use QpType::*;
    let (required, optional) = match (from, to) {
        // Any state may go to RESET; any but RESET may go to ERR. RESET→RESET is a no-op.
        (_, Reset) => (NONE, NONE),
        (Reset, Err) => return None,
        (_, Err) => (NONE, NONE),

        (Reset, Init) => match ty {
            Rc | Uc => (m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]), NONE),
            Ud => (m(&[A::PKEY_INDEX, A::PORT, A::QKEY]), NONE),
            // QP1's port is fixed when it is created.
            Gsi => (m(&[A::PKEY_INDEX, A::QKEY]), NONE),
        },
        (Init, Init) => match ty {
            Rc | Uc => (NONE, m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS])),
            Ud => (NONE, m(&[A::PKEY_INDEX, A::PORT, A::QKEY])),
            Gsi => (NONE, m(&[A::PKEY_INDEX, A::QKEY])),
        },
        (Init, Rtr) => match ty {
            Rc => (
                m(&[
                    A::AV,
                    A::PATH_MTU,
                    A::DEST_QPN,
                    A::RQ_PSN,
                    A::MAX_DEST_RD_ATOMIC,
                    A::MIN_RNR_TIMER,
                ]),
                m(&[A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX]),
            ),
            Uc => (
                m(&[A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN]),
                m(&[A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX]),
            ),
            Ud | Gsi => (NONE, m(&[A::PKEY_INDEX, A::QKEY])),
        },
        (Rtr, Rts) => match ty {
            Rc => (
                m(&[
                    A::TIMEOUT,
                    A::RETRY_CNT,
                    A::RNR_RETRY,
                    A::SQ_PSN,
                    A::MAX_QP_RD_ATOMIC,
                ]),
                m(&[
                    A::CUR_STATE,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::MIN_RNR_TIMER,
                    A::PATH_MIG_STATE,
                ]),
            ),
            Uc => (
                A::SQ_PSN,
                m(&[
                    A::CUR_STATE,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::PATH_MIG_STATE,
                ]),
            ),
            Ud | Gsi => (A::SQ_PSN, m(&[A::CUR_STATE, A::QKEY])),
        },
        (Rts, Rts) => match ty {
            Rc => (
                NONE,
                m(&[
                    A::CUR_STATE,
                    A::ACCESS_FLAGS,
                    A::ALT_PATH,
                    A::PATH_MIG_STATE,
                    A::MIN_RNR_TIMER,
                ]),
            ),
            Uc => (
                NONE,
                m(&[
                    A::CUR_STATE,
                    A::ACCESS_FLAGS,
                    A::ALT_PATH,
                    A::PATH_MIG_STATE,
                ]),
            ),
            Ud | Gsi => (NONE, m(&[A::CUR_STATE, A::QKEY])),
        },
        (Rts, Sqd) => (NONE, A::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Rts) => match ty {
            Rc => (
                NONE,
                m(&[
                    A::CUR_STATE,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::MIN_RNR_TIMER,
                    A::PATH_MIG_STATE,
                ]),
            ),
            Uc => (
                NONE,
                m(&[
                    A::CUR_STATE,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::PATH_MIG_STATE,
                ]),
            ),
            Ud | Gsi => (NONE, m(&[A::CUR_STATE, A::QKEY])),
        },
        (Sqd, Sqd) => match ty {
            Rc => (
                NONE,
                m(&[
                    A::PORT,
                    A::AV,
                    A::TIMEOUT,
                    A::RETRY_CNT,
                    A::RNR_RETRY,
                    A::MAX_QP_RD_ATOMIC,
                    A::MAX_DEST_RD_ATOMIC,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::PKEY_INDEX,
                    A::MIN_RNR_TIMER,
                    A::PATH_MIG_STATE,
                ]),
            ),
            Uc => (
                NONE,
                m(&[
                    A::AV,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::PKEY_INDEX,
                    A::PATH_MIG_STATE,
                ]),
            ),
            Ud | Gsi => (NONE, m(&[A::PKEY_INDEX, A::QKEY])),
        },
        // SQE→RTS: the kernel marks it valid for every type but lists attributes only for
        // UD, UC and GSI; an RC QP never enters SQE (its send errors take it to ERR), so for
        // RC the transition is legal with `qp_state` alone, as in the kernel.
        (Sqe, Rts) => match ty {
            Rc => (NONE, NONE),
            Uc => (NONE, m(&[A::CUR_STATE, A::ACCESS_FLAGS])),
            Ud | Gsi => (NONE, m(&[A::CUR_STATE, A::QKEY])),
        },
        _ => return None,
    };
    Some(Rule { required, optional })
}

impl Rule {
    /// `STATE` plus the required attributes: the mask of a `modify_qp` call that sets exactly
    /// what the transition demands.
    pub const fn mask(self) -> QpAttrMask {
        QpAttrMask(self.required.0 | QpAttrMask::STATE.0)
    }
}

/// The mask of a `modify_qp` call taking a `ty` QP from `from` to `to` with the attributes the
/// transition requires and nothing else: [`rule`]'s `required` plus `STATE`. Add bits of the
/// rule's `optional` set to change more. For a pair the table does not have, `STATE` alone
/// (`modify_qp` then refuses the call as an invalid transition, naming the pair).
pub const fn required_mask(from: QpState, to: QpState, ty: QpType) -> QpAttrMask {
    match rule(from, to, ty) {
        Some(r) => r.mask(),
        None => QpAttrMask::STATE,
    }
}

/// The three `modify_qp` calls that take a new `ty` QP from RESET through INIT and RTR to RTS:
/// each is `attr` with `qp_state` set to the step's state, and the step's [`required_mask`].
/// One `attr` holds the values of all three steps (each mask picks the fields of its step),
/// so a caller fills in what its QP needs (for RC: port, access flags, path MTU, peer QPN and
/// PSNs, AV, RDMA READ depths, RNR timer, timeout and retries) and applies the steps in order.
pub fn steps_to_rts(ty: QpType, attr: &QpAttr) -> [(QpAttr, QpAttrMask); 3] {
    use QpState::{Init, Reset, Rtr, Rts};
    let step = |from: QpState, to: QpState| {
        let a = QpAttr {
            qp_state: to,
            ..*attr
        };
        (a, required_mask(from, to, ty))
    };
    [step(Reset, Init), step(Init, Rtr), step(Rtr, Rts)]
}

/// Why `modify_qp` refused a call. Every variant names the state pair and the attribute.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ModifyQpError {
    /// `from → to` is not a transition of the table for this QP type.
    InvalidTransition {
        /// QP type.
        qp_type: QpType,
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// The transition requires an attribute the mask lacks.
    MissingAttribute {
        /// QP type.
        qp_type: QpType,
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// The first missing attribute (verbs field name).
        attr: &'static str,
    },
    /// The mask has an attribute the transition does not allow.
    ForbiddenAttribute {
        /// QP type.
        qp_type: QpType,
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// The first forbidden attribute (verbs field name).
        attr: &'static str,
    },
    /// `cur_qp_state` was given but is not the QP's state.
    CurStateMismatch {
        /// What the caller said.
        given: QpState,
        /// What the QP is in.
        actual: QpState,
    },
    /// An attribute has a value the device does not accept.
    InvalidValue {
        /// Verbs field name.
        attr: &'static str,
        /// The value given.
        value: u64,
        /// Why it is refused.
        reason: &'static str,
    },
    /// An attribute softrdma does not implement (alternate paths / APM).
    Unsupported {
        /// Verbs field name.
        attr: &'static str,
    },
}

impl fmt::Display for ModifyQpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModifyQpError::InvalidTransition { qp_type, from, to } => {
                write!(f, "{qp_type} QP: {from} -> {to} is not a valid transition")
            }
            ModifyQpError::MissingAttribute {
                qp_type,
                from,
                to,
                attr,
            } => write!(f, "{qp_type} QP: {from} -> {to} requires {attr}"),
            ModifyQpError::ForbiddenAttribute {
                qp_type,
                from,
                to,
                attr,
            } => write!(f, "{qp_type} QP: {from} -> {to} does not allow {attr}"),
            ModifyQpError::CurStateMismatch { given, actual } => {
                write!(f, "cur_qp_state {given} given but the QP is in {actual}")
            }
            ModifyQpError::InvalidValue {
                attr,
                value,
                reason,
            } => write!(f, "{attr} = {value}: {reason}"),
            ModifyQpError::Unsupported { attr } => write!(f, "{attr} is not supported"),
        }
    }
}

impl std::error::Error for ModifyQpError {}

/// The mask check of `ib_modify_qp_is_ok` plus the `cur_qp_state` rule; returns the state
/// the QP moves to.
pub fn check_transition(
    ty: QpType,
    actual: QpState,
    cur_state_attr: QpState,
    next_state_attr: QpState,
    mask: QpAttrMask,
) -> Result<QpState, ModifyQpError> {
    let from = if mask.contains(QpAttrMask::CUR_STATE) {
        if !matches!(
            cur_state_attr,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            // ib_modify_qp_is_ok: CUR_STATE only from RTR/RTS/SQD/SQE.
            return Err(ModifyQpError::ForbiddenAttribute {
                qp_type: ty,
                from: cur_state_attr,
                to: if mask.contains(QpAttrMask::STATE) {
                    next_state_attr
                } else {
                    cur_state_attr
                },
                attr: "cur_qp_state",
            });
        }
        if cur_state_attr != actual {
            return Err(ModifyQpError::CurStateMismatch {
                given: cur_state_attr,
                actual,
            });
        }
        cur_state_attr
    } else {
        actual
    };
    let to = if mask.contains(QpAttrMask::STATE) {
        next_state_attr
    } else {
        from
    };
    let Some(r) = rule(from, to, ty) else {
        return Err(ModifyQpError::InvalidTransition {
            qp_type: ty,
            from,
            to,
        });
    };
    let missing = r.required.minus(mask);
    if !missing.is_empty() {
        return Err(ModifyQpError::MissingAttribute {
            qp_type: ty,
            from,
            to,
            attr: missing.first_name(),
        });
    }
    let extra = mask.minus(r.required | r.optional | QpAttrMask::STATE);
    if !extra.is_empty() {
        return Err(ModifyQpError::ForbiddenAttribute {
            qp_type: ty,
            from,
            to,
            attr: extra.first_name(),
        });
    }
    Ok(to)
}

/// The whole table as text: one line per legal (type, from, to) with its required and
/// optional attributes. Tests snapshot it; `softrdma` can print it.
pub fn table_text() -> String {
    let mut s = String::new();
    for ty in QpType::ALL {
        for from in QpState::ALL {
            for to in QpState::ALL {
                if let Some(r) = rule(from, to, ty) {
                    s.push_str(&format!(
                        "{ty:<3} {from:<5} -> {to:<5} req={:?} opt={:?}\n",
                        r.required, r.optional
                    ));
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every bit a mask can have.
    fn all_bits() -> impl Iterator<Item = QpAttrMask> {
        QpAttrMask::NAMED.iter().map(|(m, _)| *m)
    }

    fn legal() -> Vec<(QpType, QpState, QpState, Rule)> {
        let mut v = Vec::new();
        for ty in QpType::ALL {
            for from in QpState::ALL {
                for to in QpState::ALL {
                    if let Some(r) = rule(from, to, ty) {
                        v.push((ty, from, to, r));
                    }
                }
            }
        }
        v
    }

    /// `check_transition` as `modify_qp` calls it, with `cur_qp_state` = the actual state.
    fn check(
        ty: QpType,
        from: QpState,
        to: QpState,
        mask: QpAttrMask,
    ) -> Result<QpState, ModifyQpError> {
        check_transition(ty, from, from, to, mask | QpAttrMask::STATE)
    }

    #[test]
    fn every_legal_transition_accepts_required_and_optional() {
        for (ty, from, to, r) in legal() {
            assert_eq!(
                check(ty, from, to, r.required),
                Ok(to),
                "{ty} {from}->{to} required only"
            );
            assert_eq!(
                check(ty, from, to, r.required | r.optional),
                Ok(to),
                "{ty} {from}->{to} required+optional"
            );
            for opt in all_bits().filter(|b| r.optional.contains(*b)) {
                assert_eq!(
                    check(ty, from, to, r.required | opt),
                    Ok(to),
                    "{ty} {from}->{to} +{opt:?}"
                );
            }
        }
    }

    #[test]
    fn required_mask_is_the_rule_plus_state() {
        for (ty, from, to, r) in legal() {
            let m = required_mask(from, to, ty);
            assert_eq!(m, r.required | QpAttrMask::STATE, "{ty} {from}->{to}");
            assert_eq!(check(ty, from, to, m), Ok(to), "{ty} {from}->{to}");
        }
        assert_eq!(
            required_mask(QpState::Reset, QpState::Rts, QpType::Rc),
            QpAttrMask::STATE
        );
        // The hand-written masks the tools used before, for the record.
        use QpAttrMask as A;
        assert_eq!(
            required_mask(QpState::Init, QpState::Rtr, QpType::Rc),
            A::STATE
                | A::AV
                | A::PATH_MTU
                | A::DEST_QPN
                | A::RQ_PSN
                | A::MAX_DEST_RD_ATOMIC
                | A::MIN_RNR_TIMER
        );
        assert_eq!(
            required_mask(QpState::Rtr, QpState::Rts, QpType::Rc),
            A::STATE | A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::SQ_PSN | A::MAX_QP_RD_ATOMIC
        );
        assert_eq!(
            required_mask(QpState::Reset, QpState::Init, QpType::Ud),
            A::STATE | A::PKEY_INDEX | A::PORT | A::QKEY
        );
    }

    #[test]
    fn steps_to_rts_are_legal_in_order() {
        for ty in QpType::ALL {
            let attr = QpAttr {
                qp_state: QpState::Sqd, // overwritten by every step
                ..QpAttr::default()
            };
            let steps = steps_to_rts(ty, &attr);
            let mut state = QpState::Reset;
            for (a, m) in steps {
                assert_eq!(
                    check_transition(ty, state, state, a.qp_state, m),
                    Ok(a.qp_state)
                );
                state = a.qp_state;
            }
            assert_eq!(state, QpState::Rts, "{ty}");
        }
    }

    #[test]
    fn every_missing_required_attribute_is_named() {
        for (ty, from, to, r) in legal() {
            for req in all_bits().filter(|b| r.required.contains(*b)) {
                let mask = r.required.minus(req);
                let want = QpAttrMask::NAMED
                    .iter()
                    .find(|(m, _)| *m == req)
                    .map(|(_, n)| *n)
                    .unwrap_or("?");
                // The error names the lowest missing bit: here exactly `req`.
                assert_eq!(
                    check(ty, from, to, mask),
                    Err(ModifyQpError::MissingAttribute {
                        qp_type: ty,
                        from,
                        to,
                        attr: want
                    }),
                    "{ty} {from}->{to} without {want}"
                );
            }
        }
    }

    #[test]
    fn every_forbidden_attribute_is_named() {
        for (ty, from, to, r) in legal() {
            let allowed = r.required | r.optional | QpAttrMask::STATE;
            for extra in all_bits().filter(|b| !allowed.contains(*b)) {
                let got = check(ty, from, to, r.required | extra);
                match got {
                    Err(ModifyQpError::ForbiddenAttribute { attr, .. }) => {
                        assert_eq!(attr, extra.first_name(), "{ty} {from}->{to} +{extra:?}")
                    }
                    other => panic!("{ty} {from}->{to} +{extra:?}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn every_illegal_transition_is_refused() {
        let mut illegal = 0;
        for ty in QpType::ALL {
            for from in QpState::ALL {
                for to in QpState::ALL {
                    if rule(from, to, ty).is_none() {
                        illegal += 1;
                        assert_eq!(
                            check(ty, from, to, QpAttrMask::EMPTY),
                            Err(ModifyQpError::InvalidTransition {
                                qp_type: ty,
                                from,
                                to
                            }),
                            "{ty} {from}->{to}"
                        );
                    }
                }
            }
        }
        // 49 pairs per type, 22 legal for every type: 7 into RESET, 6 into ERR (not from
        // RESET), and RESET→INIT, INIT→INIT, INIT→RTR, RTR→RTS, RTS→RTS, RTS→SQD,
        // SQD→RTS, SQD→SQD, SQE→RTS.
        assert_eq!(illegal + legal().len(), 4 * 49);
        assert_eq!(legal().len(), 4 * 22);
    }

    #[test]
    fn sample_of_illegal_transitions() {
        use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
        for (from, to) in [
            (Reset, Rtr),
            (Reset, Rts),
            (Reset, QpState::Err),
            (Reset, Sqd),
            (Init, Rts),
            (Init, Sqd),
            (Rtr, Init),
            (Rtr, Sqd),
            (Rts, Init),
            (Rts, Rtr),
            (Rts, Sqe),
            (Sqd, Init),
            (Sqd, Sqe),
            (QpState::Err, Init),
            (QpState::Err, Rts),
            (Sqe, Sqd),
        ] {
            for ty in QpType::ALL {
                assert!(
                    matches!(
                        check(ty, from, to, QpAttrMask::EMPTY),
                        Err(ModifyQpError::InvalidTransition { .. })
                    ),
                    "{ty} {from}->{to}"
                );
            }
        }
    }

    #[test]
    fn kernel_table_spot_checks() {
        use QpAttrMask as A;
        use QpState::{Init, Reset, Rtr, Rts, Sqd};
        // ibv_rc_pingpong's INIT→RTR mask.
        let rc_rtr = A::AV
            | A::PATH_MTU
            | A::DEST_QPN
            | A::RQ_PSN
            | A::MAX_DEST_RD_ATOMIC
            | A::MIN_RNR_TIMER;
        assert_eq!(
            rule(Init, Rtr, QpType::Rc).map(|r| r.required),
            Some(rc_rtr)
        );
        // ... and RTR→RTS.
        let rc_rts = A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::SQ_PSN | A::MAX_QP_RD_ATOMIC;
        assert_eq!(rule(Rtr, Rts, QpType::Rc).map(|r| r.required), Some(rc_rts));
        // UD needs a port at RESET→INIT, GSI may not name one.
        assert_eq!(
            check(QpType::Gsi, Reset, Init, A::PKEY_INDEX | A::QKEY | A::PORT),
            Err(ModifyQpError::ForbiddenAttribute {
                qp_type: QpType::Gsi,
                from: Reset,
                to: Init,
                attr: "port_num"
            })
        );
        assert_eq!(
            check(QpType::Ud, Reset, Init, A::PKEY_INDEX | A::QKEY),
            Err(ModifyQpError::MissingAttribute {
                qp_type: QpType::Ud,
                from: Reset,
                to: Init,
                attr: "port_num"
            })
        );
        // UD INIT→RTR needs nothing; RTR→RTS needs only the SQ PSN.
        assert_eq!(check(QpType::Ud, Init, Rtr, A::EMPTY), Ok(Rtr));
        assert_eq!(
            rule(Rtr, Rts, QpType::Ud).map(|r| r.required),
            Some(A::SQ_PSN)
        );
        // CAP is never allowed.
        for (ty, from, to, r) in legal() {
            assert!(
                !(r.required | r.optional).intersects(A::CAP),
                "{ty} {from}->{to}"
            );
        }
        // SQD→SQD lets an RC QP change its path and timers.
        assert!(rule(Sqd, Sqd, QpType::Rc).is_some_and(|r| r.optional.contains(A::AV | A::TIMEOUT)));
    }

    #[test]
    fn cur_state_rules() {
        use QpAttrMask as A;
        use QpState::{Init, Reset, Rtr, Rts};
        // Allowed from RTR/RTS/SQD/SQE where the table lists it.
        assert_eq!(
            check_transition(QpType::Rc, Rts, Rts, Rts, A::STATE | A::CUR_STATE),
            Ok(Rts)
        );
        // Must name the actual state.
        assert_eq!(
            check_transition(QpType::Rc, Rtr, Rts, Rts, A::STATE | A::CUR_STATE),
            Err(ModifyQpError::CurStateMismatch {
                given: Rts,
                actual: Rtr
            })
        );
        // Never from INIT.
        assert!(matches!(
            check_transition(QpType::Rc, Init, Init, Init, A::STATE | A::CUR_STATE),
            Err(ModifyQpError::ForbiddenAttribute {
                attr: "cur_qp_state",
                ..
            })
        ));
        // Without STATE the QP stays where it is (e.g. RTS→RTS to change the RNR timer).
        assert_eq!(
            check_transition(QpType::Rc, Rts, Reset, Reset, A::MIN_RNR_TIMER),
            Ok(Rts)
        );
    }

    #[test]
    fn mask_names() {
        use QpAttrMask as A;
        assert_eq!(
            format!("{:?}", A::STATE | A::AV | A::DEST_QPN),
            "qp_state|ah_attr|dest_qp_num"
        );
        assert_eq!(format!("{:?}", A::EMPTY), "0");
        assert_eq!(QpAttrMask(1 << 25).names(), vec!["bit25".to_string()]);
        assert_eq!(A::STATE.0, 1);
        assert_eq!(A::DEST_QPN.0, 1 << 20);
        assert_eq!(A::MAX_DEST_RD_ATOMIC.0, 1 << 17);
        for s in QpState::ALL {
            assert_eq!(QpState::from_verbs(s.to_verbs()), Some(s));
        }
    }

    #[test]
    fn table_snapshot() {
        let want = include_str!("qp_state_table.txt");
        let got = table_text();
        if got != want {
            // Print the new table so a deliberate change can be pasted into the snapshot.
            println!("{got}");
        }
        assert_eq!(got, want);
    }
}
