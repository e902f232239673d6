//! Changes while sessions run (what `softrdma srpt ctl` asks for): the ACL, LUNs added and
//! removed. LIO's equivalents are configfs writes: a node ACL removed ends its sessions
//! (`core_tpg_del_initiator_node_acl`), a LUN added or removed raises REPORTED LUNS DATA HAS
//! CHANGED on the sessions (`core_enable/disable_device_list_for_node`).

use std::collections::BTreeMap;
use std::fmt;

use softrdma_core::rdma_cm::RdmaCm;
use softrdma_core::time::Instant;
use softrdma_core::Stack;
use softrdma_scsi::{CoreError, LogicalUnit, LunId, LunMapping};

use crate::channel::ChannelState;
use crate::login::{admits, AclEntry};

use super::io::DataAt;
use super::{ChannelId, LogoutBy, SrpEvent, SrpTarget, TargetPort};

/// Why a management change was refused.
#[derive(Debug)]
pub enum ManageError {
    Core(CoreError),
    /// The LUN's medium lives in the device and an I/O is using it right now.
    MediumBusy(LunId),
    /// Taking the medium back from the device failed.
    Verbs(String),
}

impl fmt::Display for ManageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManageError::Core(e) => write!(f, "{e}"),
            ManageError::MediumBusy(l) => write!(
                f,
                "LUN {l}'s medium is in use by an I/O in flight; try again"
            ),
            ManageError::Verbs(e) => write!(f, "taking the medium back from the device: {e}"),
        }
    }
}

impl std::error::Error for ManageError {}

impl From<CoreError> for ManageError {
    fn from(e: CoreError) -> ManageError {
        ManageError::Core(e)
    }
}

impl SrpTarget {
    /// The ACL: `None` is demo mode (anyone), an empty list nobody.
    pub fn acl(&self) -> Option<&[AclEntry]> {
        self.cfg.login.acl.as_deref()
    }

    /// Replaces the ACL for the logins to come; [`SrpTarget::logout_refused`] ends the
    /// sessions it no longer admits.
    pub fn set_acl(&mut self, acl: Option<Vec<AclEntry>>) {
        self.cfg.login.acl = acl;
    }

    /// Logs out (DREQ) every channel on `port` whose initiator the ACL no longer admits (by
    /// its port identifier or its address); how many.
    pub fn logout_refused(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        port: TargetPort,
    ) -> usize {
        let acl = self.cfg.login.acl.as_deref();
        let chans: Vec<u32> = self
            .channels
            .iter()
            .filter(|(_, c)| {
                c.port == port.0
                    && c.state < ChannelState::Disconnecting
                    && !admits(acl, &c.key.0, c.source)
            })
            .map(|(k, _)| *k)
            .collect();
        let mut n = 0;
        for ch in chans {
            if self.disconnect_channel(now, rdma, Some((port.0, &mut *stack)), ch) {
                n += 1;
                self.events.push_back(SrpEvent::Logout {
                    channel: ChannelId(ch),
                    by: LogoutBy::Target,
                    why: "the initiator is no longer in the ACL".into(),
                });
            }
        }
        self.poll_port(now, rdma, stack, port.0);
        n
    }

    /// The LUN map a node ACL entry gives (see [`SrpConfig::lun_maps`](super::SrpConfig)).
    pub fn lun_map(&self, entry: &AclEntry) -> Option<&BTreeMap<LunId, LunMapping>> {
        self.cfg
            .lun_maps
            .iter()
            .find(|(e, _)| e == entry)
            .map(|(_, m)| m)
    }

    /// Sets (or with `None` removes) a node ACL entry's LUN map, for the logins to come and
    /// for the I_T nexuses of that initiator logged in now: their LUNs change at once and
    /// each mapped LU reports REPORTED LUNS DATA HAS CHANGED (LIO: a mapped LUN added to or
    /// removed from a node ACL with sessions). Returns how many nexuses changed.
    pub fn set_lun_map(
        &mut self,
        entry: AclEntry,
        map: Option<BTreeMap<LunId, LunMapping>>,
    ) -> Result<usize, ManageError> {
        if let Some(m) = &map {
            for l in m.values() {
                if self.scsi.lun(l.lun).is_none() {
                    return Err(CoreError::NoSuchLun(l.lun).into());
                }
            }
        }
        self.cfg.lun_maps.retain(|(e, _)| *e != entry);
        if let Some(m) = &map {
            self.cfg.lun_maps.push((entry.clone(), m.clone()));
        }
        let one = std::slice::from_ref(&entry);
        let nexuses: Vec<_> = self
            .nexuses
            .iter()
            .filter(|(key, n)| {
                n.channels.iter().any(|ch| {
                    self.channels
                        .get(ch)
                        .is_some_and(|c| admits(Some(one), &key.0, c.source))
                })
            })
            .map(|(_, n)| n.scsi)
            .collect();
        for n in &nexuses {
            self.scsi.set_lun_map(*n, map.clone())?;
        }
        Ok(nexuses.len())
    }

    /// Adds a LUN while sessions run; every session's other LUNs report REPORTED LUNS DATA
    /// HAS CHANGED, and the new one POWER ON (the SCSI core's `add_lun`). Its medium stays in
    /// the SCSI core (I/O copies through data buffers).
    pub fn add_lun(&mut self, lun: LunId, lu: LogicalUnit) -> Result<(), ManageError> {
        self.scsi.add_lun(lun, lu)?;
        Ok(())
    }

    /// Removes a LUN while sessions run: a medium lent to the device is taken back first
    /// (refused while an I/O uses it), the tasks in flight on the LUN are dropped without a
    /// response (their credits come back), and every session's other LUNs report REPORTED
    /// LUNS DATA HAS CHANGED. `stack` is the lending port's (with lent media the target has
    /// one port).
    pub fn remove_lun(
        &mut self,
        now: Instant,
        rdma: &mut RdmaCm,
        stack: &mut Stack,
        lun: LunId,
    ) -> Result<LogicalUnit, ManageError> {
        if self.scsi.lun(lun).is_none() {
            return Err(CoreError::NoSuchLun(lun).into());
        }
        if let Some(i) = self.media.iter().position(|m| m.lun == lun) {
            let lkey = self.media[i].keys.lkey;
            let busy = self.channels.values().any(|c| {
                c.ios.iter().any(
                    |x| matches!(x.state.data(), Some(DataAt::Medium { lkey: k, .. }) if k == lkey),
                )
            });
            if busy {
                return Err(ManageError::MediumBusy(lun));
            }
            let bytes = stack
                .verbs
                .dereg_mr(lkey)
                .map_err(|e| ManageError::Verbs(e.to_string()))?;
            self.media.remove(i);
            self.scsi.return_medium(lun, bytes)?;
        }
        let (lu, aborted) = self.scsi.remove_lun(lun)?;
        for a in aborted {
            self.abort_task(now, rdma, stack, a.nexus, a.tag, false);
        }
        Ok(lu)
    }
}
