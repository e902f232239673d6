//! SRP login: the request in both CM layouts, the checks `srpt_cm_req_recv` makes in its
//! order with its reject reasons, and the SRP_LOGIN_RSP / SRP_LOGIN_REJ it answers with.
//!
//! The checks are split where ib_srpt allocates the channel's resources between them:
//! [`precheck`] (IU length, port enabled, target port identifier), then the caller's
//! resources (QP, rings: [`Refusal::Resources`] on failure), then [`session_check`] (the
//! ACL and the per-initiator channel limit: ib_srpt's `target_setup_session`).

use std::fmt;
use std::net::IpAddr;

use softrdma_wire::srp::login::{MultiChannelAction, MultiChannelResult};
use softrdma_wire::srp::{
    LoginRejReason, LoginRejRepr, LoginReqRdmaRepr, LoginReqRepr, LoginRspRepr, BUF_FORMAT_DIRECT,
    BUF_FORMAT_INDIRECT, IMMED_REQUESTED, LOGIN_RSP_IMMED_SUPP,
};

use crate::iu::SRP_CMD_LEN;

/// `DEFAULT_MAX_REQ_SIZE` of ib_srpt.h: max(48 + 16 + 20 + 128·16, 80 + 4 + 8192) = 8276.
pub const DEFAULT_MAX_REQ_SIZE: u32 = 8276;
/// `MIN_MAX_REQ_SIZE`: the smallest `srp_max_req_size` ib_srpt accepts.
pub const MIN_MAX_REQ_SIZE: u32 = 996;
/// `MAX_SRPT_RQ_SIZE`: receive ring (and initial credit) per channel.
pub const MAX_SRPT_RQ_SIZE: u32 = 128;
/// `DEFAULT_MAX_RSP_SIZE`: the send buffer of a response (220 bytes of sense).
pub const DEFAULT_MAX_RSP_SIZE: u32 = 256;
/// `DEFAULT_MAX_RDMA_SIZE` (`srp_max_rdma_size`, advertised in IOControllerProfile).
pub const DEFAULT_MAX_RDMA_SIZE: u32 = 65536;
/// The smallest REQUESTED MAXIMUM INITIATOR TO TARGET IU LENGTH ib_srpt takes.
pub const MIN_IT_IU_LEN: u32 = 64;
/// The responder resources and initiator depth ib_srpt's REP carries.
pub const SRPT_RDMA_DEPTH: u8 = 4;

/// A login request, whichever CM carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginRequest {
    pub tag: u64,
    pub it_iu_len: u32,
    pub buf_fmt: u16,
    pub req_flags: u8,
    pub imm_data_offset: u16,
    pub initiator_port_id: [u8; 16],
    pub target_port_id: [u8; 16],
}

impl From<LoginReqRepr> for LoginRequest {
    fn from(r: LoginReqRepr) -> LoginRequest {
        LoginRequest {
            tag: r.tag,
            it_iu_len: r.req_it_iu_len,
            buf_fmt: r.req_buf_fmt,
            req_flags: r.req_flags,
            imm_data_offset: r.imm_data_offset,
            initiator_port_id: r.initiator_port_id,
            target_port_id: r.target_port_id,
        }
    }
}

impl From<LoginReqRdmaRepr> for LoginRequest {
    fn from(r: LoginReqRdmaRepr) -> LoginRequest {
        LoginReqRepr::from(r).into()
    }
}

impl LoginRequest {
    pub fn multichannel_action(&self) -> MultiChannelAction {
        MultiChannelAction(self.req_flags & 3)
    }

    /// The immediate data offset the channel uses: the requested one if immediate data was
    /// asked for and the offset lies at or past the SRP_CMD's fixed part, else 0 (none).
    pub fn accepted_imm_data_offset(&self) -> u16 {
        if self.req_flags & IMMED_REQUESTED != 0 && usize::from(self.imm_data_offset) >= SRP_CMD_LEN
        {
            self.imm_data_offset
        } else {
            0
        }
    }

    /// The initiator port identifier as ib_srpt prints it (`0x%016llx%016llx`).
    pub fn initiator_hex(&self) -> String {
        hex_port_id(&self.initiator_port_id)
    }
}

/// A 16-byte port identifier as `0x` and 32 hex digits.
pub fn hex_port_id(id: &[u8; 16]) -> String {
    let mut s = String::with_capacity(34);
    s.push_str("0x");
    for b in id {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Who may log in, as the target's configuration says (LIO's node ACLs): an initiator port
/// identifier, or the initiator's source address (RDMA CM; the IB CM source is the GID's
/// address). ib_srpt 6.1 names an RDMA CM session after `route.addr.src_addr` of the
/// passive id — the *target's* address — so an IP ACL there matches every initiator; here
/// the address is the initiator's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AclEntry {
    PortId([u8; 16]),
    /// The initiator's GUID, whatever its `initiator_ext`: the low 8 bytes of the port
    /// identifier (ib_srpt's `aaaa:bbbb:cccc:dddd` node ACL names).
    Guid(u64),
    Addr(IpAddr),
}

/// The target's login policy and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginPolicy {
    /// `srpt_service_guid`: both halves of the target port identifier must equal it.
    pub guid: u64,
    /// Whether the target port is enabled (`sport->enabled`).
    pub enabled: bool,
    /// `srp_max_req_size`: the largest IU the initiator may send.
    pub max_req_size: u32,
    /// Receive ring per channel, and the initial credit.
    pub rq_size: u32,
    /// The send buffer of one response.
    pub max_rsp_size: u32,
    /// `None`: any initiator (LIO's demo mode); else only these (an empty list refuses
    /// everyone: LIO with no node ACL).
    pub acl: Option<Vec<AclEntry>>,
    /// Channels one I_T nexus may have at once (`None`: no limit, as ib_srpt).
    pub channels_per_initiator: Option<u32>,
}

impl LoginPolicy {
    pub fn new(guid: u64) -> LoginPolicy {
        LoginPolicy {
            guid,
            enabled: true,
            max_req_size: DEFAULT_MAX_REQ_SIZE,
            rq_size: MAX_SRPT_RQ_SIZE,
            max_rsp_size: DEFAULT_MAX_RSP_SIZE,
            acl: None,
            channels_per_initiator: None,
        }
    }
}

/// Why a login was refused, in `srpt_cm_req_recv`'s terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `it_iu_len > srp_max_req_size || it_iu_len < 64`.
    ItIuLength { len: u32, max: u32 },
    /// The target port is not enabled.
    PortDisabled,
    /// A half of the target port identifier is not the target's GUID.
    TargetPortId { got: [u8; 16] },
    /// Allocating the channel (QP, rings, buffers) failed, or the CM refused to accept.
    Resources(String),
    /// No ACL entry matches the initiator.
    NotInAcl,
    /// The nexus has its allowed number of channels already.
    ChannelLimit { limit: u32 },
}

impl Refusal {
    /// The SRP_LOGIN_REJ reason ib_srpt sends for it.
    pub fn reason(&self) -> LoginRejReason {
        match self {
            Refusal::ItIuLength { .. } => LoginRejReason::REQ_IT_IU_LENGTH_TOO_LARGE,
            Refusal::PortDisabled | Refusal::Resources(_) => LoginRejReason::INSUFFICIENT_RESOURCES,
            Refusal::TargetPortId { .. } => LoginRejReason::UNABLE_ASSOCIATE_CHANNEL,
            Refusal::NotInAcl | Refusal::ChannelLimit { .. } => {
                LoginRejReason::CHANNEL_LIMIT_REACHED
            }
        }
    }

    /// The SRP_LOGIN_REJ for request `req`.
    pub fn login_rej(&self, req: &LoginRequest) -> LoginRejRepr {
        LoginRejRepr {
            reason: self.reason(),
            tag: req.tag,
            buf_fmt: BUF_FORMAT_DIRECT | BUF_FORMAT_INDIRECT,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::ItIuLength { len, max } => write!(
                f,
                "its length ({len} bytes) is out of range ({MIN_IT_IU_LEN} .. {max})"
            ),
            Refusal::PortDisabled => f.write_str("the target port has not been enabled"),
            Refusal::TargetPortId { got } => write!(
                f,
                "it has an invalid target port identifier ({})",
                hex_port_id(got)
            ),
            Refusal::Resources(why) => write!(f, "creating the channel failed: {why}"),
            Refusal::NotInAcl => f.write_str("no ACL entry matches the initiator"),
            Refusal::ChannelLimit { limit } => {
                write!(f, "the initiator has {limit} channel(s) already")
            }
        }
    }
}

/// The checks before any resource is allocated, in ib_srpt's order: the IU length, the
/// port being enabled, then both halves of the target port identifier.
pub fn precheck(p: &LoginPolicy, req: &LoginRequest) -> Result<(), Refusal> {
    if req.it_iu_len > p.max_req_size || req.it_iu_len < MIN_IT_IU_LEN {
        return Err(Refusal::ItIuLength {
            len: req.it_iu_len,
            max: p.max_req_size,
        });
    }
    if !p.enabled {
        return Err(Refusal::PortDisabled);
    }
    let g = p.guid.to_be_bytes();
    if req.target_port_id[..8] != g || req.target_port_id[8..] != g {
        return Err(Refusal::TargetPortId {
            got: req.target_port_id,
        });
    }
    Ok(())
}

/// Whether an ACL (`None`: demo mode, anyone) admits the initiator with this port identifier
/// from this source address.
pub fn admits(acl: Option<&[AclEntry]>, port_id: &[u8; 16], source: Option<IpAddr>) -> bool {
    let Some(acl) = acl else {
        return true;
    };
    acl.iter().any(|e| match e {
        AclEntry::PortId(id) => id == port_id,
        AclEntry::Guid(g) => port_id[8..] == g.to_be_bytes(),
        AclEntry::Addr(a) => Some(*a) == source,
    })
}

/// The session check after the resources: the ACL (by port identifier or source address),
/// then the channel limit of the nexus. `other_channels` is the number of channels the nexus
/// keeps after this login (0 for a SINGLE login, which terminates the others).
pub fn session_check(
    p: &LoginPolicy,
    req: &LoginRequest,
    source: Option<IpAddr>,
    other_channels: usize,
) -> Result<(), Refusal> {
    if !admits(p.acl.as_deref(), &req.initiator_port_id, source) {
        return Err(Refusal::NotInAcl);
    }
    if let Some(limit) = p.channels_per_initiator {
        if other_channels as u64 >= u64::from(limit) {
            return Err(Refusal::ChannelLimit { limit });
        }
    }
    Ok(())
}

/// The SRP_LOGIN_RSP ib_srpt sends: our largest IU, the initiator's own IU length as the
/// largest target-to-initiator IU, direct and indirect descriptors, the receive ring as the
/// initial credit, the multi-channel result and IMMED_SUPP if immediate data is taken.
pub fn login_rsp(p: &LoginPolicy, req: &LoginRequest, mc: MultiChannelResult) -> LoginRspRepr {
    let mut flags = mc.0;
    if req.accepted_imm_data_offset() != 0 {
        flags |= LOGIN_RSP_IMMED_SUPP;
    }
    LoginRspRepr {
        req_lim_delta: p.rq_size,
        tag: req.tag,
        max_it_iu_len: p.max_req_size,
        max_ti_iu_len: req.it_iu_len,
        buf_fmt: BUF_FORMAT_DIRECT | BUF_FORMAT_INDIRECT,
        rsp_flags: flags,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUID: u64 = 0x5054_00ff_fe77_0001;

    fn req() -> LoginRequest {
        let mut t = [0u8; 16];
        t[..8].copy_from_slice(&GUID.to_be_bytes());
        t[8..].copy_from_slice(&GUID.to_be_bytes());
        LoginRequest {
            tag: 0,
            it_iu_len: 8260,
            buf_fmt: BUF_FORMAT_DIRECT | BUF_FORMAT_INDIRECT,
            req_flags: IMMED_REQUESTED,
            imm_data_offset: 68,
            initiator_port_id: [0x11; 16],
            target_port_id: t,
        }
    }

    /// Every check fails at once; fixing them one by one shows the order.
    #[test]
    fn checks_in_ib_srpt_order() {
        let mut p = LoginPolicy::new(GUID);
        p.enabled = false;
        p.acl = Some(vec![AclEntry::PortId([0x22; 16])]);
        p.channels_per_initiator = Some(1);
        let mut r = req();
        r.it_iu_len = 9000;
        r.target_port_id[15] ^= 1;
        let first = |p: &LoginPolicy, r: &LoginRequest| {
            precheck(p, r).and_then(|_| session_check(p, r, None, 1))
        };
        let e = first(&p, &r).unwrap_err();
        assert_eq!(e.reason(), LoginRejReason::REQ_IT_IU_LENGTH_TOO_LARGE);
        r.it_iu_len = 32;
        assert!(matches!(
            first(&p, &r),
            Err(Refusal::ItIuLength { len: 32, .. })
        ));
        r.it_iu_len = 8260;
        assert_eq!(first(&p, &r), Err(Refusal::PortDisabled));
        assert_eq!(
            Refusal::PortDisabled.reason(),
            LoginRejReason::INSUFFICIENT_RESOURCES
        );
        p.enabled = true;
        let e = first(&p, &r).unwrap_err();
        assert_eq!(e.reason(), LoginRejReason::UNABLE_ASSOCIATE_CHANNEL);
        // The first half alone matters too.
        r.target_port_id = req().target_port_id;
        r.target_port_id[0] ^= 1;
        assert!(matches!(first(&p, &r), Err(Refusal::TargetPortId { .. })));
        r.target_port_id = req().target_port_id;
        assert_eq!(first(&p, &r), Err(Refusal::NotInAcl));
        assert_eq!(
            Refusal::NotInAcl.reason(),
            LoginRejReason::CHANNEL_LIMIT_REACHED
        );
        p.acl = Some(vec![AclEntry::Addr("10.0.0.2".parse().unwrap())]);
        assert_eq!(
            session_check(&p, &r, Some("10.0.0.2".parse().unwrap()), 1),
            Err(Refusal::ChannelLimit { limit: 1 })
        );
        assert_eq!(
            session_check(&p, &r, Some("10.0.0.2".parse().unwrap()), 0),
            Ok(())
        );
        assert!(session_check(&p, &r, Some("10.0.0.3".parse().unwrap()), 0).is_err());
        // The GUID form matches the low half of the port identifier, any initiator_ext.
        p.acl = Some(vec![AclEntry::Guid(0x1111_1111_1111_1111)]);
        assert_eq!(session_check(&p, &r, None, 0), Ok(()));
        r.initiator_port_id[0] = 0x99;
        assert_eq!(session_check(&p, &r, None, 0), Ok(()));
        r.initiator_port_id[15] = 0x99;
        assert_eq!(session_check(&p, &r, None, 0), Err(Refusal::NotInAcl));
        // An empty ACL refuses everyone (closed, as LIO without node ACLs); none: anyone.
        p.acl = Some(Vec::new());
        assert_eq!(session_check(&p, &r, None, 0), Err(Refusal::NotInAcl));
        p.acl = None;
        assert_eq!(session_check(&p, &r, None, 0), Ok(()));
    }

    #[test]
    fn response_fields() {
        let p = LoginPolicy::new(GUID);
        let r = req();
        let rsp = login_rsp(&p, &r, MultiChannelResult::MAINTAINED);
        assert_eq!(rsp.req_lim_delta, 128);
        assert_eq!(rsp.max_it_iu_len, 8276);
        assert_eq!(rsp.max_ti_iu_len, 8260);
        assert_eq!(rsp.buf_fmt, 6);
        assert_eq!(rsp.rsp_flags, 0x82);
        let mut r2 = r;
        r2.imm_data_offset = 40;
        assert_eq!(r2.accepted_imm_data_offset(), 0);
        assert_eq!(login_rsp(&p, &r2, MultiChannelResult::NO_CHAN).rsp_flags, 0);
        let rej = Refusal::NotInAcl.login_rej(&r);
        assert_eq!(rej.buf_fmt, 6);
        assert_eq!(rej.reason.0, 0x0001_0006);
    }
}
