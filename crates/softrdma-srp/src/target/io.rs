//! One SCSI command's I/O: its state, its data buffer, the RDMA READs of its data-out,
//! the RDMA WRITEs of its data-in and the response.

use softrdma_core::rdma_cm::RdmaCm;
use softrdma_core::time::Instant;
use softrdma_core::verbs::{AccessFlags, MrKeys, PdId, SendOp, SendWr, Sge};
use softrdma_core::Stack;
use softrdma_scsi::{
    Cmd, CoreError, Data, DataDir, Decoded, InPlace, LunId, Residual, Response, SenseReason, Target,
};
use softrdma_wire::scsi::ScsiStatus;
use softrdma_wire::srp::{DirectBuf, Opcode, RspCode, TLogoutReason};

use crate::channel::ChannelState;
use crate::iu::{self, CmdIu, DataPhase, DescError, Direction, RspResidual};

use super::completion::Arrived;
use super::media::{execute_on_medium, medium_of};
use super::{post_recv_slot, Channel, ChannelId, SrpEvent, SrpTarget};
use crate::wr_id::{WrId, WrKind};

/// Where an I/O is, with what that step needs and nothing else: the command until it has
/// run, the data's place from when it has one until the response's SEND completes.
#[derive(Default)]
pub(super) enum IoState {
    #[default]
    Free,
    /// Waiting for a data buffer (or, on a lent medium, for its place in it).
    NeedBuf { cmd: Cmd },
    /// Has its data's place; the RDMA READs of the data-out wait for send queue room.
    NeedRead { cmd: Cmd, data: DataAt },
    /// RDMA READs in flight.
    Reading {
        cmd: Cmd,
        data: DataAt,
        reads_left: u32,
    },
    /// The response is ready; its RDMA WRITEs and SEND wait for send queue room.
    NeedRsp(Reply),
    /// The SEND is posted; the data's place is held until it completes.
    RspSent {
        data: Option<DataAt>,
        logout_after: bool,
    },
}

impl IoState {
    /// The data's place the I/O holds (a bounce buffer to give back when it ends).
    pub(super) fn data(&self) -> Option<DataAt> {
        match self {
            IoState::Free | IoState::NeedBuf { .. } => None,
            IoState::NeedRead { data, .. } | IoState::Reading { data, .. } => Some(*data),
            IoState::NeedRsp(r) => r.data,
            IoState::RspSent { data, .. } => *data,
        }
    }
}

/// A response waiting to go out.
pub(super) struct Reply {
    pub(super) rsp: RspKind,
    pub(super) data: Option<DataAt>,
    /// Data-in bytes to RDMA WRITE from `data` before the response.
    pub(super) write_len: u32,
    /// Disconnect once this response (a T_LOGOUT) is sent.
    pub(super) logout_after: bool,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum RspKind {
    Scsi(Response),
    Tmf(RspCode),
    TLogout(TLogoutReason),
}

/// How an aborted task ends (`task_aborted_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Aborted {
    /// With TASK ABORTED.
    WithStatus,
    /// Silently: no response; its credit comes back with the next one.
    Silently,
}

#[derive(Default)]
pub(super) struct Io {
    pub(super) state: IoState,
    pub(super) tag: u64,
    pub(super) lun: LunId,
    pub(super) dir: Direction,
    /// The initiator's memory (copied out of the receive buffer, reused across I/Os).
    pub(super) descs: Vec<DirectBuf>,
    /// Recorded with `Target::task_started` and not finished.
    pub(super) task: bool,
    /// Aborted by a task management function, and how it ends.
    pub(super) aborted: Option<Aborted>,
}

impl Io {
    /// The response is ready, with `write_len` bytes of data-in to send first; the data's
    /// place the I/O holds stays with it.
    pub(super) fn reply(&mut self, rsp: RspKind, write_len: u32) {
        let data = self.state.data();
        self.state = IoState::NeedRsp(Reply {
            rsp,
            data,
            write_len,
            logout_after: false,
        });
    }

    /// A response without data-in.
    pub(super) fn respond(&mut self, rsp: Response) {
        self.reply(RspKind::Scsi(rsp), 0);
    }

    pub(super) fn is_free(&self) -> bool {
        matches!(self.state, IoState::Free)
    }
}

/// Where an I/O's data lies in the port's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DataAt {
    /// One of the channel's bounce buffers (an index into `bufs`), from its start.
    Buf(usize),
    /// In place in a LUN's lent medium: the MR's lkey and the byte offset in it.
    Medium { lkey: u32, offset: u64 },
}

impl DataAt {
    /// The lkey and the address of the data's first byte, for SGEs.
    pub(super) fn sge_base(self, bufs: &[DataBuf]) -> Option<(u32, u64)> {
        match self {
            DataAt::Buf(b) => bufs.get(b).map(|d| (d.keys.lkey, 0)),
            DataAt::Medium { lkey, offset } => Some((lkey, offset)),
        }
    }
}

pub(super) struct DataBuf {
    pub(super) keys: MrKeys,
    pub(super) len: usize,
    pub(super) busy: bool,
}

impl SrpTarget {
    pub(super) fn handle_cmd(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        iu: Arrived,
        io: u32,
    ) {
        let Arrived { ch, slot, len } = iu;
        let Some(c) = self.channels.get_mut(&ch) else {
            return;
        };
        let addr = u64::from(slot) * u64::from(c.max_req);
        let mut cdb = [0u8; 272];
        let mut cdb_len = 0;
        let mut imm: Option<(u64, u32)> = None;
        let parsed: Result<(u64, [u8; 8], Direction, u32), DescError> = (|| {
            let mr = stack
                .verbs
                .mr(c.recv.lkey)
                .map_err(|_| DescError::BadImmediate)?;
            let b = mr
                .slice(addr, len as usize)
                .map_err(|_| DescError::BadImmediate)?;
            let iu = CmdIu::new(b).ok_or(DescError::Truncated {
                need: iu::SRP_CMD_LEN,
                got: b.len(),
            })?;
            let x = &mut c.ios[io as usize];
            x.tag = iu.tag();
            let cd = iu.cdb().ok_or(DescError::Truncated {
                need: iu::SRP_CMD_LEN,
                got: b.len(),
            })?;
            cdb_len = cd.len().min(cdb.len());
            cdb[..cdb_len].copy_from_slice(&cd[..cdb_len]);
            let phase = iu.data_phase(c.imm_data_offset, c.max_req)?;
            x.descs.clear();
            match phase {
                DataPhase::None => {}
                DataPhase::Rdma { descs, .. } => x.descs.extend(descs.iter()),
                DataPhase::Immediate { data } => {
                    let off = data.as_ptr() as usize - b.as_ptr() as usize;
                    imm = Some((addr + off as u64, data.len() as u32));
                }
            }
            Ok((iu.tag(), iu.lun(), phase.direction(), phase.len()))
        })();
        let _ = &mut cdb_len;
        let (tag, lun, dir, total) = match parsed {
            Ok(p) => p,
            Err(DescError::UnsupportedFormat { data_out, format }) => {
                let _ = post_recv_slot(stack, c.qpn, ch, c.recv, c.max_req, slot);
                self.events.push_back(SrpEvent::Warning {
                    channel: Some(ChannelId(ch)),
                    what: format!("SRP_CMD with unsupported descriptor format {format}"),
                });
                let why = if data_out {
                    TLogoutReason::UNSUPPORTED_DATA_OUT_FORMAT
                } else {
                    TLogoutReason::UNSUPPORTED_DATA_IN_FORMAT
                };
                self.t_logout(now, rdma, stack, ch, io, why);
                return;
            }
            Err(e) => {
                let _ = post_recv_slot(stack, c.qpn, ch, c.recv, c.max_req, slot);
                self.events.push_back(SrpEvent::Warning {
                    channel: Some(ChannelId(ch)),
                    what: format!("parsing the SRP descriptor table failed: {e:?}"),
                });
                let x = &mut c.ios[io as usize];
                x.dir = Direction::None;
                x.respond(check(SenseReason::InvalidFieldInCommandIu));
                self.advance(now, rdma, stack, ch, io);
                return;
            }
        };
        let lun = LunId::from_wire(lun);
        let nexus = c.nexus;
        let x = &mut c.ios[io as usize];
        x.tag = tag;
        x.lun = lun;
        x.dir = dir;
        x.aborted = None;
        let scsi_dir = match dir {
            Direction::None => DataDir::None,
            Direction::In => DataDir::In,
            Direction::Out => DataDir::Out,
        };
        match self.scsi.task_started(nexus, lun, tag) {
            Ok(()) => x.task = true,
            Err(CoreError::TagInUse { .. }) => {
                let _ = post_recv_slot(stack, c.qpn, ch, c.recv, c.max_req, slot);
                x.respond(Response {
                    status: ScsiStatus::BUSY,
                    sense: None,
                    data_len: 0,
                    residual: Residual::None,
                });
                self.advance(now, rdma, stack, ch, io);
                return;
            }
            Err(_) => {}
        }
        let decoded = self
            .scsi
            .decode(nexus, lun, &cdb[..cdb_len], scsi_dir, total);
        // The lent medium of the logical unit the LUN reaches (through the nexus's map).
        let medium = self
            .scsi
            .resolve_lun(nexus, lun)
            .and_then(|(l, _)| medium_of(&self.media, c.port, l));
        let (qpn, recv, max_req) = (c.qpn, c.recv, c.max_req);
        match decoded {
            Ok(Decoded::Done(rsp)) => x.respond(rsp),
            Ok(Decoded::Ready(cmd)) => {
                let n = cmd.transfer_len();
                match (cmd.data_dir(), imm) {
                    (DataDir::None, _) => {
                        let r = match medium {
                            Some(m) if self.scsi.needs_medium(&cmd) => {
                                execute_on_medium(&mut self.scsi, stack, &cmd, m, None)
                            }
                            _ => self
                                .scsi
                                .execute(&cmd, Data::None)
                                .unwrap_or_else(|_| internal()),
                        };
                        x.respond(r);
                    }
                    (DataDir::Out, Some((a, _))) => {
                        let started = match medium {
                            Some(_) => self.scsi.start_in_place(&cmd),
                            None => Ok(InPlace::No),
                        };
                        let r = match started {
                            // Immediate data into a lent medium: one copy, receive buffer
                            // to medium, after the checks that precede data movement.
                            Ok(InPlace::Go(p)) => {
                                let m = medium.map_or(0, |m| m.keys.lkey);
                                match stack
                                    .verbs
                                    .mr_table_mut()
                                    .copy_between(recv.lkey, a, m, p.offset, n as usize)
                                {
                                    Ok(()) => self.scsi.finish_in_place(&cmd),
                                    Err(_) => Ok(internal()),
                                }
                            }
                            Ok(InPlace::Done(r)) => Ok(r),
                            Err(e) => Err(e),
                            Ok(InPlace::No) => match stack
                                .verbs
                                .mr(recv.lkey)
                                .and_then(|m| Ok(m.slice(a, n as usize)?))
                            {
                                Ok(b) => match medium {
                                    Some(m) if self.scsi.needs_medium(&cmd) => {
                                        let d = b.to_vec();
                                        Ok(execute_on_medium(
                                            &mut self.scsi,
                                            stack,
                                            &cmd,
                                            m,
                                            Some(d),
                                        ))
                                    }
                                    _ => self.scsi.execute(&cmd, Data::Out(b)),
                                },
                                Err(_) => Ok(internal()),
                            },
                        };
                        x.respond(r.unwrap_or_else(|_| internal()));
                    }
                    _ if desc_total(&x.descs) < u64::from(n) => {
                        // The descriptors hold less than the data phase: a malformed IU.
                        x.respond(check(SenseReason::InvalidFieldInCommandIu));
                    }
                    _ => x.state = IoState::NeedBuf { cmd },
                }
            }
            Err(_) => x.respond(internal()),
        }
        let _ = post_recv_slot(stack, qpn, ch, recv, max_req, slot);
        self.advance(now, rdma, stack, ch, io);
    }

    /// All RDMA READs of an I/O are in: execute it on the buffer.
    pub(super) fn data_out_done(&mut self, stack: &mut Stack, ch: u32, i: u32) {
        let Some(c) = self.channels.get_mut(&ch) else {
            return;
        };
        let x = &mut c.ios[i as usize];
        if x.aborted.is_some() {
            if x.aborted == Some(Aborted::Silently) {
                c.req_lim_delta += 1;
                if let Some(DataAt::Buf(b)) = x.state.data() {
                    c.bufs[b].busy = false;
                }
                *x = Io {
                    descs: std::mem::take(&mut x.descs),
                    ..Io::default()
                };
                c.free_io.push(i);
            } else {
                x.respond(Response {
                    status: ScsiStatus::TASK_ABORTED,
                    sense: None,
                    data_len: 0,
                    residual: Residual::None,
                });
            }
            return;
        }
        let (cmd, at) = match std::mem::take(&mut x.state) {
            IoState::Reading { cmd, data, .. } => (cmd, data),
            other => {
                x.state = other;
                x.respond(internal());
                return;
            }
        };
        let n = cmd.transfer_len() as usize;
        let r = match at {
            // The data landed in the medium: only the status is left.
            DataAt::Medium { .. } => self
                .scsi
                .finish_in_place(&cmd)
                .unwrap_or_else(|_| internal()),
            DataAt::Buf(b) => {
                let lkey = c.bufs[b].keys.lkey;
                let lent = medium_of(&self.media, c.port, cmd.lun());
                match stack.verbs.mr(lkey).and_then(|m| Ok(m.slice(0, n)?)) {
                    Ok(d) => match lent {
                        Some(m) if self.scsi.needs_medium(&cmd) => {
                            let d = d.to_vec();
                            execute_on_medium(&mut self.scsi, stack, &cmd, m, Some(d))
                        }
                        _ => self
                            .scsi
                            .execute(&cmd, Data::Out(d))
                            .unwrap_or_else(|_| internal()),
                    },
                    Err(_) => internal(),
                }
            }
        };
        x.state = IoState::NeedRsp(Reply {
            rsp: RspKind::Scsi(r),
            data: Some(at),
            write_len: 0,
            logout_after: false,
        });
    }

    pub(super) fn free_io(&mut self, ch: u32, i: u32) {
        let Some(c) = self.channels.get_mut(&ch) else {
            return;
        };
        let x = &mut c.ios[i as usize];
        if let Some(DataAt::Buf(b)) = x.state.data() {
            c.bufs[b].busy = false;
        }
        if x.task {
            self.scsi.task_finished(c.nexus, x.tag);
        }
        *x = Io {
            descs: std::mem::take(&mut x.descs),
            ..Io::default()
        };
        c.free_io.push(i);
    }

    /// Moves an I/O as far as buffers and the send queue allow.
    pub(super) fn advance(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        ch: u32,
        i: u32,
    ) {
        // A PREEMPT AND ABORT executed since the last turn: its victims' tasks stop as a
        // task management function's do (no response, the credit back).
        for a in self.scsi.take_preempted() {
            self.abort_task(now, rdma, stack, a.nexus, a.tag, a.task_aborted_status);
        }
        loop {
            let Some(c) = self.channels.get_mut(&ch) else {
                return;
            };
            if c.state >= ChannelState::Disconnecting {
                return;
            }
            match c.ios[i as usize].state {
                IoState::NeedBuf { ref cmd } => {
                    let (lun, port) = (cmd.lun(), c.port);
                    if let Some(m) = medium_of(&self.media, port, lun) {
                        if self.place_io(ch, i, m) {
                            continue;
                        }
                    }
                    let Some(c) = self.channels.get_mut(&ch) else {
                        return;
                    };
                    let need = match &c.ios[i as usize].state {
                        IoState::NeedBuf { cmd } => cmd.transfer_len() as usize,
                        _ => 0,
                    };
                    let Some(b) = alloc_buf(c, stack, self.ports[c.port].pd, need, self.max_io)
                    else {
                        c.blocked.push_back(i);
                        return;
                    };
                    let x = &mut c.ios[i as usize];
                    let IoState::NeedBuf { cmd } = std::mem::take(&mut x.state) else {
                        return;
                    };
                    let data = DataAt::Buf(b);
                    if x.dir == Direction::Out {
                        x.state = IoState::NeedRead { cmd, data };
                    } else {
                        // Data-in: the store reads into the buffer now.
                        let lkey = c.bufs[b].keys.lkey;
                        let r = match stack.verbs.mr_mut(lkey) {
                            Ok(m) => {
                                let d = &mut m.as_mut_slice()[..need];
                                self.scsi
                                    .execute(&cmd, Data::In(d))
                                    .unwrap_or_else(|_| internal())
                            }
                            Err(_) => internal(),
                        };
                        x.state = IoState::NeedRsp(Reply {
                            rsp: RspKind::Scsi(r),
                            data: Some(data),
                            write_len: r.data_len,
                            logout_after: false,
                        });
                    }
                }
                IoState::NeedRead { ref cmd, data } => {
                    let x = &c.ios[i as usize];
                    let n = cmd.transfer_len();
                    let wrs = count_wrs(&x.descs, n);
                    if c.sq_avail < wrs {
                        c.blocked.push_back(i);
                        return;
                    }
                    let Some((lkey, base)) = data.sge_base(&c.bufs) else {
                        return;
                    };
                    let id = WrId::new(ch, WrKind::RdmaRead, i);
                    let posted = post_rdma(stack, c.qpn, id, &x.descs, n, (lkey, base));
                    c.sq_avail -= posted;
                    let x = &mut c.ios[i as usize];
                    if let IoState::NeedRead { cmd, data } = std::mem::take(&mut x.state) {
                        x.state = IoState::Reading {
                            cmd,
                            data,
                            reads_left: posted,
                        };
                    }
                    if posted == 0 {
                        self.data_out_done(stack, ch, i);
                        continue;
                    }
                    return;
                }
                IoState::NeedRsp(ref reply) => {
                    let x = &c.ios[i as usize];
                    if x.aborted == Some(Aborted::Silently) {
                        c.req_lim_delta += 1;
                        self.free_io(ch, i);
                        return;
                    }
                    let writes = if reply.write_len > 0 && x.dir == Direction::In {
                        count_wrs(&x.descs, reply.write_len)
                    } else {
                        0
                    };
                    if c.sq_avail < writes + 1 {
                        c.blocked.push_back(i);
                        return;
                    }
                    post_response(c, &mut self.scsi, stack, ch, i, writes);
                    return;
                }
                IoState::Free | IoState::Reading { .. } | IoState::RspSent { .. } => return,
            }
        }
    }
}

pub(super) fn desc_total(descs: &[DirectBuf]) -> u64 {
    descs.iter().map(|d| u64::from(d.len)).sum()
}

/// The pieces of the first `n` bytes as the descriptors split them: each descriptor, the
/// offset of its piece in the data and the piece's length (empty ones skipped).
fn pieces(descs: &[DirectBuf], n: u32) -> impl Iterator<Item = (&DirectBuf, u32, u32)> {
    let mut off = 0u32;
    descs
        .iter()
        .map_while(move |d| {
            (off < n).then(|| {
                let chunk = d.len.min(n - off);
                let at = off;
                off += chunk;
                (d, at, chunk)
            })
        })
        .filter(|&(_, _, chunk)| chunk > 0)
}

/// The RDMA READs or WRITEs (per `id`'s kind) moving the first `n` bytes between the
/// initiator's descriptors and `(lkey, base)`. Returns how many were posted.
fn post_rdma(
    stack: &mut Stack,
    qpn: u32,
    id: WrId,
    descs: &[DirectBuf],
    n: u32,
    (lkey, base): (u32, u64),
) -> u32 {
    let mut posted = 0;
    for (d, off, chunk) in pieces(descs, n) {
        let (remote_addr, rkey) = (d.va, d.key);
        let op = match id.kind {
            WrKind::RdmaRead => SendOp::RdmaRead { remote_addr, rkey },
            _ => SendOp::RdmaWrite { remote_addr, rkey },
        };
        let wr = SendWr::new(id.to_u64(), op).with_sge(Sge {
            addr: base + u64::from(off),
            length: chunk,
            lkey,
        });
        if stack.post_send(qpn, wr).is_ok() {
            posted += 1;
        }
    }
    posted
}

pub(super) fn count_wrs(descs: &[DirectBuf], n: u32) -> u32 {
    pieces(descs, n).count() as u32
}

pub(super) fn alloc_buf(
    c: &mut Channel,
    stack: &mut Stack,
    pd: PdId,
    need: usize,
    max_io: u32,
) -> Option<usize> {
    if need > max_io as usize {
        return None;
    }
    if let Some(i) = c.bufs.iter().position(|b| !b.busy && b.len >= need) {
        c.bufs[i].busy = true;
        return Some(i);
    }
    let size = need.next_power_of_two().max(64 << 10);
    let grow = c.bufs.iter().position(|b| !b.busy);
    if grow.is_none() && c.bufs.len() >= c.ios.len() {
        return None;
    }
    let keys = stack
        .verbs
        .reg_mr_with(pd, vec![0; size], 0, AccessFlags::LOCAL_WRITE)
        .ok()?;
    let b = DataBuf {
        keys,
        len: size,
        busy: true,
    };
    match grow {
        Some(i) => {
            let _ = stack.verbs.dereg_mr(c.bufs[i].keys.lkey);
            c.bufs[i] = b;
            Some(i)
        }
        None => {
            c.bufs.push(b);
            Some(c.bufs.len() - 1)
        }
    }
}

/// The RDMA WRITEs of the data-in (as the descriptors split it), then the SRP_RSP.
pub(super) fn post_response(
    c: &mut Channel,
    scsi: &mut Target,
    stack: &mut Stack,
    ch: u32,
    i: u32,
    writes: u32,
) {
    let x = &mut c.ios[i as usize];
    let IoState::NeedRsp(reply) = &x.state else {
        return;
    };
    if writes > 0 {
        if let Some(at) = reply.data.and_then(|d| d.sge_base(&c.bufs)) {
            let id = WrId::new(ch, WrKind::RdmaWrite, i);
            c.sq_avail -= post_rdma(stack, c.qpn, id, &x.descs, reply.write_len, at);
        }
    }
    let delta = 1 + std::mem::take(&mut c.req_lim_delta);
    let addr = u64::from(i) * u64::from(c.max_rsp);
    let len = match stack
        .verbs
        .mr_mut(c.send.lkey)
        .and_then(|m| Ok(m.slice_mut(addr, c.max_rsp as usize)?))
    {
        Ok(b) => match reply.rsp {
            RspKind::Scsi(r) => {
                let (under, over, n) = match r.residual {
                    Residual::None => (false, false, 0),
                    Residual::Underflow(n) => (true, false, n),
                    Residual::Overflow(n) => (false, true, n),
                };
                let sense = r.sense.map(|s| s.to_fixed());
                iu::write_rsp(
                    b,
                    x.tag,
                    delta,
                    r.status,
                    RspResidual::new(x.dir, under, over, n),
                    sense.as_ref().map_or(&[][..], |s| &s[..]),
                    c.max_ti_iu_len,
                )
            }
            RspKind::Tmf(code) => iu::write_tsk_mgmt_rsp(b, x.tag, delta, code),
            RspKind::TLogout(why) => iu::write_short_iu(b, Opcode::T_LOGOUT, why.0, 0),
        },
        Err(_) => None,
    };
    let Some(len) = len else {
        return;
    };
    let wr = SendWr::new(WrId::new(ch, WrKind::Send, i).to_u64(), SendOp::Send).with_sge(Sge {
        addr,
        length: len as u32,
        lkey: c.send.lkey,
    });
    if stack.post_send(c.qpn, wr).is_ok() {
        c.sq_avail -= 1;
    }
    let sent = IoState::RspSent {
        data: reply.data,
        logout_after: reply.logout_after,
    };
    if x.task {
        scsi.task_finished(c.nexus, x.tag);
        x.task = false;
    }
    x.state = sent;
}

/// CHECK CONDITION with LIO's sense for `r`.
pub(super) fn check(r: SenseReason) -> Response {
    Response {
        status: ScsiStatus::CHECK_CONDITION,
        sense: Some(r.sense()),
        data_len: 0,
        residual: Residual::None,
    }
}

/// A failure of our own (a buffer that could not be reached): LOGICAL UNIT COMMUNICATION
/// FAILURE, as LIO answers a backend error.
pub(super) fn internal() -> Response {
    check(SenseReason::LogicalUnitCommunicationFailure)
}
