//! The RDMA CM's share of the IB CM wire: port spaces, the service IDs made from them, and
//! the IP private-data header (`struct cma_hdr`, kernel `drivers/infiniband/core/cma.c`)
//! that the active side puts at the start of the REQ / SIDR_REQ private data.
//!
//! ```text
//! cma_hdr (36 bytes)
//!   0  cma_version (8)          CMA_VERSION 0x00; tshark shows it as major/minor nibbles
//!   1  ip_version (high 4 bits: 4 or 6) | reserved (4)
//!   2  port (16)                the *source* (active side) port
//!   4  src_addr (16)            union cma_ip_addr: IPv4 in the last 4 bytes, IPv6 whole
//!  20  dst_addr (16)
//! ```
//!
//! Service ID = `(port_space << 16) + port` (`rdma_get_service_id`); every RDMA CM service ID
//! lies under `IB_CMA_SERVICE_ID` 0x0000000001000000 / mask 0xFFFFFFFFFF000000.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};

/// Size of the IP private-data header.
pub const IP_CM_HEADER_LEN: usize = 36;
/// The only header version (`CMA_VERSION`); the kernel rejects others with -EINVAL.
pub const CMA_VERSION: u8 = 0x00;
/// `IB_CMA_SERVICE_ID`: the prefix of every RDMA CM IP service ID.
pub const IB_CMA_SERVICE_ID: u64 = 0x0000_0000_0100_0000;
/// `IB_CMA_SERVICE_ID_MASK`.
pub const IB_CMA_SERVICE_ID_MASK: u64 = 0xFFFF_FFFF_FF00_0000;
/// `RDMA_IB_IP_PS_MASK`: the port-space part of a service ID (prefix included).
pub const RDMA_IB_IP_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;

code_point! {
    /// RDMA CM port space (`enum rdma_ucm_port_space`).
    pub struct PortSpace(u16) {
        IPOIB = 0x0002 => "IPoIB",
        TCP = 0x0106 => "TCP",
        UDP = 0x0111 => "UDP",
        IB = 0x013f => "IB",
    }
}

impl PortSpace {
    /// Whether IP-addressed ids of this space carry the IP private-data header.
    /// (`RDMA_PS_IB` carries it only for IP-addressed ids, not for AF_IB ones.)
    pub fn is_ip(&self) -> bool {
        matches!(*self, PortSpace::TCP | PortSpace::UDP | PortSpace::IPOIB)
    }
}

/// The service ID of `port` in port space `ps`: `(ps << 16) + port`.
pub fn service_id(ps: PortSpace, port: u16) -> u64 {
    (u64::from(ps.0) << 16) + u64::from(port)
}

/// Whether `sid` is an RDMA CM IP service ID (prefix 0x0000000001).
pub fn is_ip_cm_service_id(sid: u64) -> bool {
    sid & IB_CMA_SERVICE_ID_MASK == IB_CMA_SERVICE_ID
}

/// The port space and port of an RDMA CM service ID (the inverse of [`service_id`], like
/// the kernel's `cma_ps_from_service_id` / `cma_port_from_service_id`); `None` unless the
/// upper 32 bits are zero and bits 16–31 name a known port space. (IPoIB's space 0x0002 is
/// not under the `IB_CMA_SERVICE_ID` prefix, so this is wider than
/// [`is_ip_cm_service_id`].)
pub fn split_service_id(sid: u64) -> Option<(PortSpace, u16)> {
    let ps = PortSpace((sid >> 16) as u16);
    if sid >> 32 != 0 || !ps.is_known() {
        return None;
    }
    Some((ps, sid as u16))
}

/// The IP private-data header at the start of `pd`, and the consumer data after it, when
/// `sid` is an RDMA CM service ID whose port space carries one: TCP, UDP, IPoIB always; IB
/// only when the header looks like one (version 0, IP version 4 or 6), since AF_IB ids of
/// that space send none. `None` otherwise, or if `pd` is shorter than the header.
pub fn ip_private_data(sid: u64, pd: &[u8]) -> Option<(IpCmHeader, &[u8])> {
    let (ps, _) = split_service_id(sid)?;
    let hdr = IpCmHeader::parse(pd).ok()?;
    let plausible = hdr.cma_version == CMA_VERSION && matches!(hdr.ip_version, 4 | 6);
    if ps.is_ip() || (ps == PortSpace::IB && plausible) {
        Some((hdr, pd.get(IP_CM_HEADER_LEN..).unwrap_or(&[])))
    } else {
        None
    }
}

/// Adds tshark's "IP CM ServiceID" group (Prefix / Protocol / Destination Port) when `sid`
/// is an RDMA CM service ID.
pub fn dissect_service_id(t: &mut Tree, sid: u64) {
    if !is_ip_cm_service_id(sid) {
        return;
    }
    let b = sid.to_be_bytes();
    t.subtree("ip_cm_service_id", "IP CM ServiceID", |t| {
        t.bytes("prefix", "Prefix", &b[..5]);
        let ps = PortSpace((sid >> 16) as u16);
        t.hex("protocol", "Protocol", b[5], 2);
        if let Some(d) = ps.description() {
            t.text("port_space", "Port Space", d);
        }
        t.hex("dport", "Destination Port", sid as u16, 4);
    });
}

/// Adds tshark's "IP CM Private Data" group when `pd` starts with an IP header for `sid`
/// (see [`ip_private_data`]).
pub fn dissect_private_data(t: &mut Tree, sid: u64, pd: &[u8]) {
    if let Some((hdr, consumer)) = ip_private_data(sid, pd) {
        t.subtree("ip_cm", "IP CM Private Data", |t| {
            hdr.dissect_fields(t);
            t.bytes("consumer_data", "IP CM Consumer PrivateData", consumer);
        });
    }
}

/// Field locations.
pub mod fields {
    use super::{Bits, Field};
    pub const CMA_VERSION: Bits = Bits::new(0, 0, 8);
    pub const IP_VERSION: Bits = Bits::new(1, 0, 4);
    pub const RESERVED: Bits = Bits::new(1, 4, 4);
    pub const PORT: Bits = Bits::new(2, 0, 16);
    pub const SRC_ADDR: Field = 4..20;
    pub const DST_ADDR: Field = 20..36;
}

fixed_view! {
    /// A view of the IP private-data header.
    struct Packet(IP_CM_HEADER_LEN, "rdma_cm.ip_header");
}

bit_accessors! {
    cma_version / set_cma_version: u8 = fields::CMA_VERSION;
    /// 4 or 6.
    ip_version / set_ip_version: u8 = fields::IP_VERSION;
    reserved / set_reserved: u8 = fields::RESERVED;
    /// The active side's port.
    port / set_port: u16 = fields::PORT;
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn src_addr(&self) -> [u8; 16] {
        field::read_array(self.buffer.as_ref(), fields::SRC_ADDR.start)
    }

    pub fn dst_addr(&self) -> [u8; 16] {
        field::read_array(self.buffer.as_ref(), fields::DST_ADDR.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_addr(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[fields::SRC_ADDR].copy_from_slice(&a);
    }

    pub fn set_dst_addr(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[fields::DST_ADDR].copy_from_slice(&a);
    }
}

/// The decoded IP private-data header. Addresses are kept as the 16 raw bytes of
/// `union cma_ip_addr`; [`Repr::src_ip`] / [`Repr::dst_ip`] read them by IP version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub cma_version: u8,
    /// The high nibble of byte 1: 4 or 6.
    pub ip_version: u8,
    /// The low nibble of byte 1 (reserved, kept for exact re-emission).
    pub reserved: u8,
    /// The active side's port.
    pub src_port: u16,
    pub src_addr: [u8; 16],
    pub dst_addr: [u8; 16],
}

/// The IP private-data header under its descriptive name.
pub type IpCmHeader = Repr;

fn addr_bytes(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&v4.octets());
            b
        }
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn addr_ip(version: u8, b: &[u8; 16]) -> Option<IpAddr> {
    match version {
        4 => Some(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15]))),
        6 => Some(IpAddr::V6(Ipv6Addr::from(*b))),
        _ => None,
    }
}

impl Repr {
    /// The header the kernel builds (`cma_format_hdr`) for a connection from `src:src_port`
    /// to `dst`. Both addresses must be of the same family (the source's is used).
    pub fn new(src: IpAddr, src_port: u16, dst: IpAddr) -> Repr {
        Repr {
            cma_version: CMA_VERSION,
            ip_version: if src.is_ipv4() { 4 } else { 6 },
            reserved: 0,
            src_port,
            src_addr: addr_bytes(src),
            dst_addr: addr_bytes(dst),
        }
    }

    /// The source address, read according to the IP version (`None` for other versions).
    pub fn src_ip(&self) -> Option<IpAddr> {
        addr_ip(self.ip_version, &self.src_addr)
    }

    /// The destination address, read according to the IP version.
    pub fn dst_ip(&self) -> Option<IpAddr> {
        addr_ip(self.ip_version, &self.dst_addr)
    }

    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            cma_version: p.cma_version(),
            ip_version: p.ip_version(),
            reserved: p.reserved(),
            src_port: p.port(),
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
        }
    }

    fixed_repr!(Packet, IP_CM_HEADER_LEN);

    /// Writes the header into `buf` (exactly 36 bytes).
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(
            buf.len(),
            IP_CM_HEADER_LEN,
            "rdma_cm header: wrong buffer length"
        );
        let mut p = Packet::new_unchecked(buf);
        p.set_cma_version(self.cma_version);
        p.set_ip_version(self.ip_version);
        p.set_reserved(self.reserved);
        p.set_port(self.src_port);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
    }

    fn dissect_addr(t: &mut Tree, key: &'static str, label: &str, v: u8, b: &[u8; 16]) {
        match addr_ip(v, b) {
            Some(ip) => t.ip(key, label, ip),
            None => t.bytes(key, label, b),
        }
    }

    fn dissect_fields(&self, t: &mut Tree) {
        t.hex(
            "major_version",
            "IP CM Major Version",
            self.cma_version >> 4,
            1,
        );
        t.hex(
            "minor_version",
            "IP CM Minor Version",
            self.cma_version & 0xf,
            1,
        );
        t.hex("ip_version", "IP CM IP Version", self.ip_version, 1);
        t.hex("reserved", "IP CM Reserved", self.reserved, 1);
        t.hex("src_port", "IP CM Source Port", self.src_port, 4);
        Self::dissect_addr(
            t,
            "src_ip",
            "IP CM Source IP",
            self.ip_version,
            &self.src_addr,
        );
        Self::dissect_addr(
            t,
            "dst_ip",
            "IP CM Destination IP",
            self.ip_version,
            &self.dst_addr,
        );
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("ip_cm", "IP CM Private Data", |t| self.dissect_fields(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids() {
        assert_eq!(service_id(PortSpace::TCP, 5555), 0x0000_0000_0106_15b3);
        assert_eq!(service_id(PortSpace::UDP, 7174), 0x0000_0000_0111_1c06);
        assert_eq!(service_id(PortSpace::IB, 1), 0x0000_0000_013f_0001);
        assert_eq!(service_id(PortSpace::IPOIB, 0xffff), 0x0000_0000_0002_ffff);
        assert_eq!(
            split_service_id(0x0000_0000_0106_270f),
            Some((PortSpace::TCP, 9999))
        );
        // IPoIB's space 0x0002 is not under the 0x01 prefix: `IB_CMA_SERVICE_ID` masks out
        // the RDMA CM spaces 0x01xx only; it still splits.
        assert!(!is_ip_cm_service_id(service_id(PortSpace::IPOIB, 1)));
        assert_eq!(
            split_service_id(service_id(PortSpace::IPOIB, 1)),
            Some((PortSpace::IPOIB, 1))
        );
        assert_eq!(split_service_id(0x0000_0000_0107_0001), None);
        assert!(is_ip_cm_service_id(0x0000_0000_0106_0000));
        assert!(!is_ip_cm_service_id(0x0200_0000_0000_0001)); // IB_CM_ASSIGN_SERVICE_ID
        assert!(!is_ip_cm_service_id(0x0000_0000_0201_0000));
        assert_eq!(split_service_id(0x1234), None);
        for ps in PortSpace::ALL {
            for port in [0u16, 1, 4791, 0xffff] {
                let sid = service_id(*ps, port);
                assert_eq!(split_service_id(sid), Some((*ps, port)));
                assert_eq!(sid & RDMA_IB_IP_PS_MASK, u64::from(ps.0) << 16);
            }
        }
    }

    #[test]
    fn header_layout() {
        let h = Repr::new(
            IpAddr::V4(Ipv4Addr::new(10, 77, 0, 10)),
            0xe924,
            IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1)),
        );
        let b = h.to_bytes();
        let mut want = [0u8; 36];
        want[1] = 0x40;
        want[2..4].copy_from_slice(&[0xe9, 0x24]);
        want[16..20].copy_from_slice(&[10, 77, 0, 10]);
        want[32..36].copy_from_slice(&[10, 77, 0, 1]);
        assert_eq!(b, want);
        assert_eq!(Repr::parse(&b), Ok(h));
        assert_eq!(h.src_ip(), Some(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 10))));
        for n in 0..IP_CM_HEADER_LEN {
            assert!(Repr::parse(&b[..n]).is_err());
        }
        let v6: Ipv6Addr = "fe80::1".parse().expect("addr");
        let h6 = Repr::new(IpAddr::V6(v6), 1, IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(h6.to_bytes()[1], 0x60);
        assert_eq!(Repr::parse(&h6.to_bytes()), Ok(h6));
        assert_eq!(h6.dst_ip(), Some(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        let odd = Repr { ip_version: 5, ..h };
        assert_eq!(odd.src_ip(), None);
        let t = odd.to_tree();
        assert_eq!(t.uint("ip_cm.ip_version"), Some(5));
    }

    #[test]
    fn private_data_only_for_ip_spaces() {
        let h = Repr::new(
            IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)),
            7,
            IpAddr::V4(Ipv4Addr::new(5, 6, 7, 8)),
        );
        let mut pd = h.to_bytes();
        pd.extend_from_slice(&[0xab; 56]);
        let tcp = service_id(PortSpace::TCP, 1);
        let (got, rest) = ip_private_data(tcp, &pd).expect("TCP carries the header");
        assert_eq!(got, h);
        assert_eq!(rest, &[0xab; 56][..]);
        assert!(ip_private_data(0x1234_5678, &pd).is_none());
        assert!(ip_private_data(tcp, &pd[..35]).is_none());
        let ib = service_id(PortSpace::IB, 1);
        assert!(ip_private_data(ib, &pd).is_some());
        assert!(ip_private_data(ib, &[0xffu8; 92]).is_none());
        assert!(ip_private_data(service_id(PortSpace(0x0155), 1), &pd).is_none());
        let mut t = Tree::new();
        dissect_service_id(&mut t, tcp);
        dissect_private_data(&mut t, tcp, &pd);
        assert_eq!(
            t.find("ip_cm_service_id.prefix")
                .map(|n| n.display.as_str()),
            Some("0000000001")
        );
        assert_eq!(t.uint("ip_cm_service_id.protocol"), Some(6));
        assert_eq!(t.uint("ip_cm.src_port"), Some(7));
        assert_eq!(
            t.find("ip_cm.dst_ip").map(|n| n.display.as_str()),
            Some("5.6.7.8")
        );
    }
}
