//! Multicast groups of a device (`ibv_attach_mcast` / `ibv_detach_mcast`), as rxe keeps them
//! (`rxe_mcast.c`): a table from a multicast GID to the UD QPs attached to it. A UD packet
//! whose BTH names QP 0xFFFFFF ([`MULTICAST_QPN`]) and whose destination address is such a
//! GID is handed to every QP attached to it (`rxe_rcv_mcast_pkt`), each through the same
//! per-QP checks (type, state, P_Key, Q_Key) a unicast packet meets; a QP that fails one
//! is skipped, the others still get the packet.
//!
//! The table says which QPs hear a group; whether the device's network interface hears it
//! at all is the IGMP/MLD join, which the RDMA CM does (`rdma_join_multicast`) and the driver
//! carries out on a socket — as in the kernel, where `ibv_attach_mcast` alone adds a MAC
//! filter and only the CM's `cma_igmp_send` makes the IP layer accept the group.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use softrdma_wire::Gid;

/// The destination QPN of a multicast packet (`IB_MULTICAST_QPN`).
pub const MULTICAST_QPN: u32 = 0x00FF_FFFF;

/// The most QPs one group takes (rxe's `RXE_MAX_MCAST_QP_ATTACH`).
pub const MAX_MCAST_QP_ATTACH: usize = 56;
/// The most groups a device has (rxe's `RXE_MAX_MCAST_GRP`).
pub const MAX_MCAST_GRP: usize = 8192;

/// Whether `gid` is a multicast GID (`rdma_is_multicast_addr`): an IPv4-mapped address in
/// 224.0.0.0/4, or an IPv6 address in ff00::/8.
pub fn is_multicast_gid(gid: &Gid) -> bool {
    match gid.to_ip() {
        IpAddr::V4(v4) => v4.is_multicast(),
        IpAddr::V6(_) => gid.0[0] == 0xff,
    }
}

/// Why an attach or detach was refused (all `-EINVAL` but the limits, `-ENOMEM`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum McastError {
    /// The GID is not a multicast GID.
    NotMulticast,
    /// Only UD QPs join groups.
    NotUd,
    /// Detach of a QP that is not attached to the group.
    NotAttached,
    /// [`MAX_MCAST_GRP`] or [`MAX_MCAST_QP_ATTACH`] reached.
    Limit,
}

impl core::fmt::Display for McastError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            McastError::NotMulticast => "not a multicast GID",
            McastError::NotUd => "only UD QPs attach to multicast groups",
            McastError::NotAttached => "the QP is not attached to that group",
            McastError::Limit => "too many multicast groups or attached QPs",
        })
    }
}

impl std::error::Error for McastError {}

/// The device's groups: multicast GID → attached QPNs.
#[derive(Clone, Debug, Default)]
pub struct Groups {
    map: BTreeMap<Gid, BTreeSet<u32>>,
}

impl Groups {
    /// Attaches `qpn` to `gid`; attaching twice is one attachment (uverbs ignores the
    /// repeat).
    pub fn attach(&mut self, gid: Gid, qpn: u32) -> Result<(), McastError> {
        if !is_multicast_gid(&gid) {
            return Err(McastError::NotMulticast);
        }
        if !self.map.contains_key(&gid) && self.map.len() >= MAX_MCAST_GRP {
            return Err(McastError::Limit);
        }
        let qps = self.map.entry(gid).or_default();
        if !qps.contains(&qpn) && qps.len() >= MAX_MCAST_QP_ATTACH {
            return Err(McastError::Limit);
        }
        qps.insert(qpn);
        Ok(())
    }

    /// Detaches `qpn` from `gid`; the group goes when its last QP does.
    pub fn detach(&mut self, gid: &Gid, qpn: u32) -> Result<(), McastError> {
        let qps = self.map.get_mut(gid).ok_or(McastError::NotAttached)?;
        if !qps.remove(&qpn) {
            return Err(McastError::NotAttached);
        }
        if qps.is_empty() {
            self.map.remove(gid);
        }
        Ok(())
    }

    /// Detaches `qpn` from every group (the QP is destroyed).
    pub fn detach_all(&mut self, qpn: u32) {
        self.map.retain(|_, qps| {
            qps.remove(&qpn);
            !qps.is_empty()
        });
    }

    /// The QPs attached to `gid`, in QPN order.
    pub fn members(&self, gid: &Gid) -> Vec<u32> {
        self.map
            .get(gid)
            .map(|q| q.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The groups `qpn` is attached to.
    pub fn groups_of(&self, qpn: u32) -> Vec<Gid> {
        self.map
            .iter()
            .filter(|(_, q)| q.contains(&qpn))
            .map(|(g, _)| *g)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn g(s: &str) -> Gid {
        Gid::from(
            s.parse::<IpAddr>()
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        )
    }

    #[test]
    fn multicast_gids_are_ipv4_class_d_or_ff00_8() {
        assert!(is_multicast_gid(&g("239.1.2.3")));
        assert!(is_multicast_gid(&g("224.0.0.1")));
        assert!(!is_multicast_gid(&g("10.0.0.1")));
        assert!(is_multicast_gid(&g("ff0e::1")));
        assert!(!is_multicast_gid(&g("fe80::1")));
    }

    #[test]
    fn attach_detach_and_members() {
        let mut t = Groups::default();
        let m = g("239.1.2.3");
        assert_eq!(t.attach(g("10.0.0.1"), 5), Err(McastError::NotMulticast));
        assert_eq!(t.attach(m, 7), Ok(()));
        assert_eq!(t.attach(m, 5), Ok(()));
        assert_eq!(t.attach(m, 5), Ok(()));
        assert_eq!(t.members(&m), vec![5, 7]);
        assert_eq!(t.detach(&m, 9), Err(McastError::NotAttached));
        assert_eq!(t.detach(&m, 5), Ok(()));
        assert_eq!(t.groups_of(7), vec![m]);
        t.detach_all(7);
        assert!(t.members(&m).is_empty());
        assert_eq!(t.detach(&m, 7), Err(McastError::NotAttached));
        for q in 0..MAX_MCAST_QP_ATTACH as u32 {
            assert_eq!(t.attach(m, q), Ok(()));
        }
        assert_eq!(t.attach(m, 1000), Err(McastError::Limit));
    }
}
