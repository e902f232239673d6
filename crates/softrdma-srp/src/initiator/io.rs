//! Commands (`srp_queuecommand`, `srp_map_data`): what a caller submits, how its data is
//! described to the target, and what it gets back.

use std::fmt;

use softrdma_core::time::{Duration, Instant};
use softrdma_core::verbs::MrKeys;
use softrdma_core::Stack;
use softrdma_scsi::LunId;
use softrdma_wire::scsi::{ScsiStatus, SenseRepr};
use softrdma_wire::srp::DirectBuf;

use crate::iu::{self, CmdData, SRP_IMM_DATA_OFFSET};

use super::completion::post_send;
use super::{
    wire_tag, Channel, ChannelState, IoError, Req, SessionState, Slot, SrpInitiator, SubmitError,
    SRP_MAX_IMM_SGE, SRP_TSK_MGMT_SQ_SIZE,
};

/// A command's data direction (from the initiator's side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataDir {
    #[default]
    None,
    /// Data from the target (READ): RDMA WRITEs into our buffers.
    FromTarget,
    /// Data to the target (WRITE): RDMA READs from our buffers, or immediate data.
    ToTarget,
}

/// A piece of registered memory (an MR from [`SrpInitiator::alloc_buffer`] or the
/// caller's own, registered with remote read and write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub mr: MrKeys,
    /// The address in the MR's virtual address space.
    pub addr: u64,
    pub len: u32,
}

/// A SCSI command to send.
#[derive(Debug, Clone, Copy)]
pub struct Command<'a> {
    pub lun: u64,
    pub cdb: &'a [u8],
    pub dir: DataDir,
    pub segs: &'a [Segment],
    /// The caller's cookie, handed back in the [`Completion`].
    pub user: u64,
    /// The deadline (default [`InitiatorConfig::cmd_timeout`](super::InitiatorConfig::cmd_timeout)).
    pub timeout: Option<Duration>,
    /// The channel to use (default: the next live one with room).
    pub channel: Option<usize>,
}

impl<'a> Command<'a> {
    pub fn new(lun: u64, cdb: &'a [u8]) -> Command<'a> {
        Command {
            lun,
            cdb,
            dir: DataDir::None,
            segs: &[],
            user: 0,
            timeout: None,
            channel: None,
        }
    }
    pub fn read_into(mut self, segs: &'a [Segment]) -> Self {
        self.dir = DataDir::FromTarget;
        self.segs = segs;
        self
    }
    pub fn write_from(mut self, segs: &'a [Segment]) -> Self {
        self.dir = DataDir::ToTarget;
        self.segs = segs;
        self
    }
    pub fn user(mut self, user: u64) -> Self {
        self.user = user;
        self
    }
}

/// A command's SCSI outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiResult {
    pub status: ScsiStatus,
    /// Sense data (fixed format from Linux targets), if the response had any.
    pub sense: Vec<u8>,
    /// Residual: > 0 underflow (bytes not moved), < 0 overflow.
    pub resid: i64,
}

impl ScsiResult {
    /// Sense key, ASC, ASCQ of fixed-format sense data.
    pub fn sense_key(&self) -> Option<(u8, u8, u8)> {
        (self.sense.len() >= 14).then(|| (self.sense[2] & 0x0f, self.sense[12], self.sense[13]))
    }

    /// The sense data, parsed (fixed or descriptor format); `None` if there is none or it
    /// does not parse.
    pub fn sense_data(&self) -> Option<SenseRepr> {
        if self.sense.is_empty() {
            return None;
        }
        SenseRepr::parse(&self.sense).ok()
    }
}

impl fmt::Display for ScsiResult {
    /// The status, then what the sense data says went wrong and what the residual left.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.status)?;
        if let Some(s) = self.sense_data() {
            write!(f, ": {}, {}", s.sense_key(), s.asc_ascq())?;
        }
        match self.resid {
            0 => Ok(()),
            n if n > 0 => write!(f, " ({n} bytes not moved)"),
            n => write!(f, " ({} bytes more than the buffers held)", -n),
        }
    }
}

/// A command that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// Its tag (host order: `channel << 16 | slot`).
    pub tag: u64,
    pub user: u64,
    pub lun: u64,
    pub channel: usize,
    pub result: Result<ScsiResult, IoError>,
}

impl SrpInitiator {
    pub(super) fn pick_channel(&mut self, want: Option<usize>) -> Result<usize, SubmitError> {
        let ok = |c: &Channel| {
            c.state == ChannelState::Live
                && !c.free_slots.is_empty()
                && c.rings.as_ref().is_some_and(|r| !r.free_tx.is_empty())
                && c.req_lim > i64::from(SRP_TSK_MGMT_SQ_SIZE)
                && c.sq_avail > 0
        };
        if let Some(k) = want {
            return match self.channels.get(k) {
                Some(c) if ok(c) => Ok(k),
                Some(c) if c.state == ChannelState::Live => Err(SubmitError::Busy),
                _ => Err(SubmitError::NotLive),
            };
        }
        let n = self.channels.len();
        if !self.channels.iter().any(|c| c.state == ChannelState::Live) {
            return Err(SubmitError::NotLive);
        }
        for i in 0..n {
            let k = (self.next_channel + i) % n;
            if ok(&self.channels[k]) {
                self.next_channel = (k + 1) % n;
                return Ok(k);
            }
        }
        Err(SubmitError::Busy)
    }

    /// Sends a SCSI command (`srp_queuecommand`). Returns its tag; its end comes from
    /// [`SrpInitiator::poll_completion`].
    pub fn submit(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        cmd: &Command<'_>,
    ) -> Result<u64, SubmitError> {
        if cmd.cdb.len() > 32 || cmd.cdb.is_empty() {
            return Err(SubmitError::CdbLength { len: cmd.cdb.len() });
        }
        if cmd.dir != DataDir::None && cmd.segs.is_empty() {
            return Err(SubmitError::NoBuffers);
        }
        match self.state {
            SessionState::Live => {}
            // Reconnecting: the command waits (scsi_block_targets), as a busy host's would.
            SessionState::Blocked(_) => return Err(SubmitError::Busy),
            _ => return Err(SubmitError::NotLive),
        }
        let k = self.pick_channel(cmd.channel)?;
        let max_sg = self.cmd_sg_cnt as usize;
        let c = &self.channels[k];
        let total: u64 = cmd.segs.iter().map(|s| u64::from(s.len)).sum();
        let imm = cmd.dir == DataDir::ToTarget
            && c.use_imm
            && cmd.segs.len() <= SRP_IMM_DATA_SGE_LIMIT
            && SRP_IMM_DATA_OFFSET as u64 + total <= u64::from(c.max_it_iu_len);
        if !imm && cmd.segs.len() > max_sg {
            return Err(SubmitError::TooManySegments {
                got: cmd.segs.len(),
                max: max_sg,
            });
        }
        let (Some(tx), Some(idb)) = (c.rings.as_ref().map(|r| r.tx), c.idb) else {
            return Err(SubmitError::NotLive);
        };
        let c = &mut self.channels[k];
        let slot = c.free_slots.pop().ok_or(SubmitError::Busy)?;
        let Some((_, ti)) = c.take_tx() else {
            c.free_slots.push(slot);
            return Err(SubmitError::Busy);
        };
        let host_tag = (k as u64) << 16 | u64::from(slot);
        let lun = LunId(cmd.lun).to_wire();
        let out = cmd.dir == DataDir::ToTarget;
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.resize(c.max_it_iu_len as usize, 0);
        self.descs.clear();
        let data = if cmd.dir == DataDir::None {
            CmdData::None
        } else if imm {
            CmdData::Immediate { len: total as u32 }
        } else if cmd.segs.len() == 1 {
            let s = cmd.segs[0];
            CmdData::Direct {
                out,
                desc: DirectBuf {
                    va: s.addr,
                    key: s.mr.rkey,
                    len: s.len,
                },
            }
        } else {
            self.descs.extend(cmd.segs.iter().map(|s| DirectBuf {
                va: s.addr,
                key: s.mr.rkey,
                len: s.len,
            }));
            // The whole table in our memory too (req->indirect_desc).
            let table_len = self.descs.len() * 16;
            let at = u64::from(ti) * u64::from(self.cmd_sg_cnt) * 16;
            let mut t = vec![0u8; table_len];
            for (i, d) in self.descs.iter().enumerate() {
                t[16 * i..16 * i + 8].copy_from_slice(&d.va.to_be_bytes());
                t[16 * i + 8..16 * i + 12].copy_from_slice(&d.key.to_be_bytes());
                t[16 * i + 12..16 * i + 16].copy_from_slice(&d.len.to_be_bytes());
            }
            let _ = stack.verbs.local_write(idb.lkey, at, &t);
            CmdData::Indirect {
                out,
                table: DirectBuf {
                    va: at,
                    key: idb.rkey,
                    len: table_len as u32,
                },
                total: total as u32,
                descs: &self.descs,
            }
        };
        let Some(mut len) = iu::write_cmd(&mut buf, wire_tag(host_tag), lun, 0, cmd.cdb, &data)
        else {
            let c = &mut self.channels[k];
            c.free_slots.push(slot);
            c.free_tx(ti);
            self.scratch = buf;
            return Err(SubmitError::IuTooLong {
                max_it_iu_len: c.max_it_iu_len,
            });
        };
        if imm {
            let mut at = SRP_IMM_DATA_OFFSET;
            for s in cmd.segs {
                let n = s.len as usize;
                if let Err(e) = stack
                    .verbs
                    .local_read(s.mr.lkey, s.addr, &mut buf[at..at + n])
                {
                    let c = &mut self.channels[k];
                    c.free_slots.push(slot);
                    c.free_tx(ti);
                    self.scratch = buf;
                    return Err(SubmitError::ImmediateData(e));
                }
                at += n;
            }
            len = at;
        }
        let c = &mut self.channels[k];
        let addr = u64::from(ti) * u64::from(c.max_it_iu_len);
        let _ = stack.verbs.local_write(tx.lkey, addr, &buf[..len]);
        self.scratch = buf;
        if let Err(e) = post_send(stack, c.qpn, k, tx, addr, len as u32, ti) {
            c.free_slots.push(slot);
            c.free_tx(ti);
            return Err(SubmitError::Send(e));
        }
        c.sq_avail -= 1;
        c.req_lim -= 1;
        c.slots[slot as usize] = Slot::InFlight(Req {
            user: cmd.user,
            lun: cmd.lun,
            deadline: now + cmd.timeout.unwrap_or(self.cfg.cmd_timeout),
        });
        Ok(host_tag)
    }
}

/// `SRP_MAX_IMM_SGE`.
pub(super) const SRP_IMM_DATA_SGE_LIMIT: usize = SRP_MAX_IMM_SGE;

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_wire::scsi::{AscAscq, SenseKey};

    #[test]
    fn a_result_says_what_went_wrong() {
        let sense = SenseRepr::fixed(SenseKey::ILLEGAL_REQUEST, AscAscq::new(0x24, 0));
        let r = ScsiResult {
            status: ScsiStatus::CHECK_CONDITION,
            sense: sense.to_bytes(),
            resid: 512,
        };
        assert_eq!(r.sense_key(), Some((5, 0x24, 0)));
        assert_eq!(r.sense_data(), Some(sense));
        let text = r.to_string();
        assert!(text.contains("ILLEGAL REQUEST"), "{text}");
        assert!(text.ends_with("(512 bytes not moved)"), "{text}");
        let good = ScsiResult {
            status: ScsiStatus::GOOD,
            sense: Vec::new(),
            resid: 0,
        };
        assert_eq!(good.sense_data(), None);
    }
}
