//! The (state × received message) → action table the handlers in `cm::recv` follow,
//! restated from cm.c's handlers (`cm_req_handler` ... `cm_sidr_rep_handler`). The
//! snapshot `state_table.txt` next to this file is [`table_text`]; the test
//! `cm::table::tests::table_snapshot` keeps the two equal, as `verbs/qp_state_table.txt`
//! is kept for the QP.
//!
//! How a message finds its id comes first (the handlers' docs): by the remote-ID table
//! (REQ; REJ TIMEOUT), by our comm ID with a remote comm ID of 0 (REP, MRA of a REQ, REJ
//! of a REQ, SIDR_REP), or by both comm IDs (the rest). The table then says what happens
//! in the state of the id found; the row `-` is "no id found". A few checks beyond the
//! state stay in the handlers: a DREQ naming another QPN is dropped; a REP whose remote
//! comm ID is known already is dropped, and one from a remote QPN we are connected to is
//! answered REJ 10 (+ DREQ to that connection); a REQ from a known remote QPN is answered
//! REJ 10 (+ DREQ) before a listener is looked for.

use std::fmt::{self, Write as _};

use softrdma_wire::cm::AttrId;

use super::CmState;

/// A received message as the table tells them apart.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RxMsg {
    Req,
    /// An MRA whose "message MRAed" is REQ, REP, or other (LAP).
    MraReq,
    MraRep,
    MraOther,
    /// A REJ, and a REJ with reason STALE_CONN (10).
    Rej,
    RejStale,
    /// A REP that found an id with no remote comm ID yet (`cm_rep_handler`), and one that
    /// found the id whose remote comm ID it carries (`cm_dup_rep_handler`).
    Rep,
    RepKnown,
    Rtu,
    Dreq,
    Drep,
    SidrReq,
    SidrRep,
    Lap,
    Apr,
}

impl RxMsg {
    /// Every kind, in attribute-ID order.
    pub const ALL: [RxMsg; 15] = [
        RxMsg::Req,
        RxMsg::MraReq,
        RxMsg::MraRep,
        RxMsg::MraOther,
        RxMsg::Rej,
        RxMsg::RejStale,
        RxMsg::Rep,
        RxMsg::RepKnown,
        RxMsg::Rtu,
        RxMsg::Dreq,
        RxMsg::Drep,
        RxMsg::SidrReq,
        RxMsg::SidrRep,
        RxMsg::Lap,
        RxMsg::Apr,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            RxMsg::Req => "REQ",
            RxMsg::MraReq => "MRA(REQ)",
            RxMsg::MraRep => "MRA(REP)",
            RxMsg::MraOther => "MRA(other)",
            RxMsg::Rej => "REJ",
            RxMsg::RejStale => "REJ(stale)",
            RxMsg::Rep => "REP",
            RxMsg::RepKnown => "REP(known)",
            RxMsg::Rtu => "RTU",
            RxMsg::Dreq => "DREQ",
            RxMsg::Drep => "DREP",
            RxMsg::SidrReq => "SIDR_REQ",
            RxMsg::SidrRep => "SIDR_REP",
            RxMsg::Lap => "LAP",
            RxMsg::Apr => "APR",
        }
    }

    /// The event a taken message raises (`enum ib_cm_event_type`).
    pub const fn event(self) -> &'static str {
        match self {
            RxMsg::Req => "REQ_RECEIVED",
            RxMsg::MraReq | RxMsg::MraRep | RxMsg::MraOther => "MRA_RECEIVED",
            RxMsg::Rej | RxMsg::RejStale => "REJ_RECEIVED",
            RxMsg::Rep | RxMsg::RepKnown => "REP_RECEIVED",
            RxMsg::Rtu => "RTU_RECEIVED",
            RxMsg::Dreq => "DREQ_RECEIVED",
            RxMsg::Drep => "DREP_RECEIVED",
            RxMsg::SidrReq => "SIDR_REQ_RECEIVED",
            RxMsg::SidrRep => "SIDR_REP_RECEIVED",
            RxMsg::Lap => "LAP_RECEIVED",
            RxMsg::Apr => "APR_RECEIVED",
        }
    }
}

/// What happens to the id's outstanding message when a message is taken.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OnMsg {
    Keep,
    /// `ib_cancel_mad`.
    Cancel,
    /// `ib_modify_mad` to `cvt(service_timeout) + cvt(av.timeout)` (an MRA).
    Extend,
}

/// What the CM does with a received message.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RxAction {
    /// No id in this state holds the message: it is handled as if no id were found.
    NotMatched,
    /// Taken: the id moves to the state, the user gets the message's event.
    Take(CmState, OnMsg),
    /// Counted in `cm_rx_duplicates`; the message named (MRA, RTU, DREP) goes back again.
    Duplicate(Option<AttrId>),
    /// Ignored (counted in our `rx_dropped`).
    Drop,
    /// (no id) A new id for the listener of the service ID (REQ_RCVD / SIDR_REQ_RCVD);
    /// without a listener the answer is the message named (REJ 8 / SIDR_REP status 1).
    Listen(AttrId),
    /// (no id) An answer made from the message alone, counted as a duplicate
    /// (`cm_issue_drep`).
    Answer(AttrId),
}

impl fmt::Display for RxAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RxAction::NotMatched => f.write_str("not matched (as row -)"),
            RxAction::Take(to, on) => {
                write!(f, "-> {to}")?;
                match on {
                    OnMsg::Keep => Ok(()),
                    OnMsg::Cancel => f.write_str(", cancel msg"),
                    OnMsg::Extend => f.write_str(", extend msg wait"),
                }
            }
            RxAction::Duplicate(None) => f.write_str("duplicate"),
            RxAction::Duplicate(Some(a)) => write!(f, "duplicate, {} again", attr_name(*a)),
            RxAction::Drop => f.write_str("drop"),
            RxAction::Listen(a) => write!(
                f,
                "listener: new id; none: {}",
                if *a == AttrId::REJ {
                    "REJ 8"
                } else {
                    "SIDR_REP status 1"
                }
            ),
            RxAction::Answer(a) => write!(f, "duplicate, {} from the message", attr_name(*a)),
        }
    }
}

fn attr_name(a: AttrId) -> &'static str {
    match a {
        AttrId::MRA => "MRA",
        AttrId::RTU => "RTU",
        AttrId::DREP => "DREP",
        AttrId::REJ => "REJ",
        AttrId::SIDR_REP => "SIDR_REP",
        _ => "?",
    }
}

/// The table. `state` is the state of the id the message found (`None`: none found).
pub const fn rx_action(state: Option<CmState>, msg: RxMsg) -> RxAction {
    use CmState as S;
    use OnMsg::{Cancel, Extend, Keep};
    use RxAction::*;
    let Some(s) = state else {
        return match msg {
            // cm_req_handler → cm_match_req / cm_issue_rej
            RxMsg::Req => Listen(AttrId::REJ),
            // cm_sidr_req_handler → cm_reject_sidr_req(UNSUPPORTED)
            RxMsg::SidrReq => Listen(AttrId::SIDR_REP),
            // cm_dreq_handler → cm_issue_drep
            RxMsg::Dreq => Answer(AttrId::DREP),
            _ => Drop,
        };
    };
    match msg {
        // cm_match_req: only ids with a remote-ID entry match (TIMEWAIT has given its
        // up, cm_enter_timewait); cm_dup_req_handler.
        RxMsg::Req => match s {
            S::ReqRcvd => Duplicate(None),
            S::MraReqSent => Duplicate(Some(AttrId::MRA)),
            S::RepSent
            | S::MraRepRcvd
            | S::RepRcvd
            | S::MraRepSent
            | S::Established
            | S::DreqSent
            | S::DreqRcvd => Duplicate(None),
            _ => NotMatched,
        },
        // cm_mra_handler
        RxMsg::MraReq => match s {
            S::ReqSent => Take(S::MraReqRcvd, Extend),
            S::MraReqRcvd | S::MraRepRcvd => Duplicate(None),
            _ => Drop,
        },
        RxMsg::MraRep => match s {
            S::RepSent => Take(S::MraRepRcvd, Extend),
            S::MraReqRcvd | S::MraRepRcvd => Duplicate(None),
            _ => Drop,
        },
        RxMsg::MraOther => match s {
            S::MraReqRcvd | S::MraRepRcvd => Duplicate(None),
            _ => Drop,
        },
        // cm_rej_handler
        RxMsg::Rej | RxMsg::RejStale => {
            let stale = matches!(msg, RxMsg::RejStale);
            match s {
                S::ReqSent | S::MraReqRcvd | S::RepSent | S::MraRepRcvd => {
                    Take(if stale { S::Timewait } else { S::Idle }, Cancel)
                }
                S::ReqRcvd | S::MraReqSent => Take(if stale { S::Timewait } else { S::Idle }, Keep),
                S::DreqSent => Take(S::Timewait, Cancel),
                S::RepRcvd | S::MraRepSent | S::Established => Take(S::Timewait, Keep),
                _ => Drop,
            }
        }
        // cm_rep_handler
        RxMsg::Rep => match s {
            S::ReqSent | S::MraReqRcvd => Take(S::RepRcvd, Cancel),
            _ => Drop,
        },
        // cm_dup_rep_handler
        RxMsg::RepKnown => match s {
            S::Established => Duplicate(Some(AttrId::RTU)),
            S::MraRepSent => Duplicate(Some(AttrId::MRA)),
            _ => Duplicate(None),
        },
        // cm_rtu_handler
        RxMsg::Rtu => match s {
            S::RepSent | S::MraRepRcvd => Take(S::Established, Cancel),
            _ => Duplicate(None),
        },
        // cm_dreq_handler (MRA_REP_RCVD leaves the REP running)
        RxMsg::Dreq => match s {
            S::RepSent | S::DreqSent => Take(S::DreqRcvd, Cancel),
            S::Established | S::MraRepRcvd => Take(S::DreqRcvd, Keep),
            S::Timewait => Duplicate(Some(AttrId::DREP)),
            S::DreqRcvd => Duplicate(None),
            _ => Drop,
        },
        // cm_drep_handler
        RxMsg::Drep => match s {
            S::DreqSent | S::DreqRcvd => Take(S::Timewait, Cancel),
            _ => Drop,
        },
        // cm_sidr_req_handler: the remote SIDR table holds ids in SIDR_REQ_RCVD only.
        RxMsg::SidrReq => match s {
            S::SidrReqRcvd => Duplicate(None),
            _ => NotMatched,
        },
        // cm_sidr_rep_handler
        RxMsg::SidrRep => match s {
            S::SidrReqSent => Take(S::Idle, Cancel),
            _ => Drop,
        },
        // cm_lap_handler / cm_apr_handler: "not supported for RoCE link layer".
        RxMsg::Lap | RxMsg::Apr => Drop,
    }
}

/// The table as text: one line per (state, message), the row `-` (no id) first.
pub fn table_text() -> String {
    let mut out = String::new();
    let rows = std::iter::once(None).chain(CmState::ALL.iter().map(|s| Some(*s)));
    for state in rows {
        let name = state.map_or("-", CmState::name);
        for msg in RxMsg::ALL {
            let _ = writeln!(
                out,
                "{name:<13} {:<10} {}",
                msg.name(),
                rx_action(state, msg)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_snapshot() {
        let want = include_str!("state_table.txt");
        let got = table_text();
        if got != want {
            // Print the new table so a deliberate change can be pasted into the snapshot.
            println!("{got}");
        }
        assert_eq!(got, want);
    }

    #[test]
    fn taken_messages_name_their_events() {
        // Every Take lands in a state the message can lead to, and no-id rows only answer.
        for s in CmState::ALL {
            for m in RxMsg::ALL {
                if let RxAction::Listen(_) | RxAction::Answer(_) = rx_action(Some(s), m) {
                    panic!("{s} {m:?}: no-id action for an id");
                }
            }
        }
        assert_eq!(rx_action(None, RxMsg::Rtu), RxAction::Drop);
    }
}
