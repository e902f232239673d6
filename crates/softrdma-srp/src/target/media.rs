//! LUN media lent to the port's device: READ and WRITE run in place, without a bounce
//! buffer.

use std::fmt;

use softrdma_core::verbs::{AccessFlags, MrKeys, VerbsError};
use softrdma_core::Stack;
use softrdma_scsi::{Cmd, Data, InPlace, LunId, Response, Target};

use crate::iu::Direction;

use super::io::{internal, DataAt, IoState, Reply, RspKind};
use super::{SrpTarget, TargetPort};

/// A LUN's medium, lent by the SCSI core and registered as an MR of a port's PD.
#[derive(Debug, Clone, Copy)]
pub(super) struct Medium {
    pub(super) lun: LunId,
    pub(super) port: usize,
    pub(super) keys: MrKeys,
}

/// Why [`SrpTarget::lend_media`] refused.
#[derive(Debug)]
pub enum MediaError {
    /// The media can live in one device only; a target with several ports copies.
    OnePortOnly { ports: usize },
    /// Registering a medium as an MR failed.
    Verbs(VerbsError),
}

impl fmt::Display for MediaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MediaError::OnePortOnly { ports } => write!(
                f,
                "LUN media can be lent to a target with one port; this one has {ports}"
            ),
            MediaError::Verbs(e) => write!(f, "registering a LUN medium: {e}"),
        }
    }
}

impl std::error::Error for MediaError {}

impl SrpTarget {
    /// Moves every memory LUN's medium into the port's device, registered as an MR, so
    /// that READ data leaves for the initiator straight from the medium and WRITE data
    /// lands in it (see [`Target::lend_medium`](softrdma_scsi::Target::lend_medium)): the copy between a bounce buffer and the
    /// LUN disappears. For a target with one port (the media live in one device), before
    /// any login; LUNs whose store is not memory keep copying. Returns how many were lent.
    pub fn lend_media(&mut self, stack: &mut Stack, port: TargetPort) -> Result<usize, MediaError> {
        if self.ports.len() != 1 || port.0 != 0 {
            return Err(MediaError::OnePortOnly {
                ports: self.ports.len(),
            });
        }
        let pd = self.ports[0].pd;
        let luns: Vec<LunId> = self.scsi.lun_ids().collect();
        let mut n = 0;
        for lun in luns {
            if self.media.iter().any(|m| m.lun == lun) {
                continue;
            }
            let Ok(bytes) = self.scsi.lend_medium(lun) else {
                continue;
            };
            match stack
                .verbs
                .reg_mr_or_return(pd, bytes, 0, AccessFlags::LOCAL_WRITE)
            {
                Ok(keys) => {
                    self.media.push(Medium { lun, port: 0, keys });
                    n += 1;
                }
                Err((e, bytes)) => {
                    let _ = self.scsi.return_medium(lun, bytes);
                    return Err(MediaError::Verbs(e));
                }
            }
        }
        Ok(n)
    }

    /// Gives every lent medium back to its LUN (deregistering its MR), e.g. before the
    /// target's device goes away while the SCSI core lives on. Media whose MR is still in
    /// use by a posted work request are not affected: call it with no channel open.
    pub fn return_media(&mut self, stack: &mut Stack) {
        for m in std::mem::take(&mut self.media) {
            if let Ok(bytes) = stack.verbs.dereg_mr(m.keys.lkey) {
                let _ = self.scsi.return_medium(m.lun, bytes);
            }
        }
    }

    /// An I/O on a LUN whose medium is lent to its port: its data lies in the medium
    /// (`start_in_place`), so it needs no buffer; a data-in's status is known at once. False
    /// when the command does not run in place (not a READ or WRITE): it takes a buffer.
    pub(super) fn place_io(&mut self, ch: u32, i: u32, m: Medium) -> bool {
        let Some(c) = self.channels.get_mut(&ch) else {
            return true;
        };
        let x = &mut c.ios[i as usize];
        let IoState::NeedBuf { cmd } = std::mem::take(&mut x.state) else {
            x.respond(internal());
            return true;
        };
        let (r, data) = match self.scsi.start_in_place(&cmd) {
            Ok(InPlace::No) => {
                x.state = IoState::NeedBuf { cmd };
                return false;
            }
            Ok(InPlace::Go(p)) => {
                let data = DataAt::Medium {
                    lkey: m.keys.lkey,
                    offset: p.offset,
                };
                if x.dir == Direction::Out {
                    x.state = IoState::NeedRead { cmd, data };
                    return true;
                }
                // Data-in: sent from the medium as the RDMA WRITEs go out.
                let r = self
                    .scsi
                    .finish_in_place(&cmd)
                    .unwrap_or_else(|_| internal());
                (r, Some(data))
            }
            Ok(InPlace::Done(r)) => (r, None),
            Err(_) => (internal(), None),
        };
        x.state = IoState::NeedRsp(Reply {
            rsp: RspKind::Scsi(r),
            data,
            write_len: r.data_len,
            logout_after: false,
        });
        true
    }
}

/// Runs a command that works on a lent medium outside a READ's or WRITE's data phase
/// (UNMAP, WRITE SAME, COMPARE AND WRITE: [`Target::needs_medium`]) on the medium's MR. Its
/// data-out (a parameter list, one or two blocks) comes as a copy: it lies in another MR of
/// the same table.
pub(super) fn execute_on_medium(
    scsi: &mut Target,
    stack: &mut Stack,
    cmd: &Cmd,
    m: Medium,
    data_out: Option<Vec<u8>>,
) -> Response {
    let Ok(mr) = stack.verbs.mr_mut(m.keys.lkey) else {
        return internal();
    };
    let data = match &data_out {
        Some(d) => Data::Out(d),
        None => Data::None,
    };
    scsi.execute_on_medium(cmd, data, mr.as_mut_slice())
        .unwrap_or_else(|_| internal())
}

/// The lent medium of `lun` on `port`, if any (a free function: callers hold a channel).
pub(super) fn medium_of(media: &[Medium], port: usize, lun: LunId) -> Option<Medium> {
    media
        .iter()
        .find(|m| m.port == port && m.lun == lun)
        .copied()
}
