//! Multicast for the drop-in libraries: `ibv_attach_mcast` / `ibv_detach_mcast` on a
//! device's group table (`softrdma_core::transport::mcast`), and the RDMA CM's
//! `rdma_join_multicast(_ex)` / `rdma_leave_multicast` ([`crate::rdmacm::Proc::join_mc`]):
//! the core's membership and MULTICAST_JOIN, the device's interface joined to the IP group
//! for a full member ([`softrdma_driver::Device::join_multicast`]).
//!
//! Errors as the kernel's: a non-multicast GID or a QP that is not UD is `EINVAL`
//! (`ib_attach_mcast`), a full table `ENOMEM`, a detach of a group the QP is not in
//! `EINVAL`. The MLID is ignored on RoCE (there is none: it is 0 in MULTICAST_JOIN's AH).

use softrdma_core::transport::mcast::McastError;
use softrdma_driver::Device;
use softrdma_wire::Gid;

use crate::entry::Errno;

fn errno(e: McastError) -> Errno {
    match e {
        McastError::Limit => Errno::ENOMEM,
        McastError::NotMulticast | McastError::NotUd | McastError::NotAttached => Errno::EINVAL,
    }
}

/// `ibv_attach_mcast`.
pub fn attach(dev: &Device, qpn: u32, gid: [u8; 16], _lid: u16) -> Result<(), Errno> {
    dev.with_stack(|s| s.attach_mcast(qpn, Gid(gid)))
        .map_err(errno)
}

/// `ibv_detach_mcast`.
pub fn detach(dev: &Device, qpn: u32, gid: [u8; 16], _lid: u16) -> Result<(), Errno> {
    dev.with_stack(|s| s.detach_mcast(qpn, &Gid(gid)))
        .map_err(errno)
}
