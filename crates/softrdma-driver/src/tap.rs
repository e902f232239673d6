//! The pcap tap: every RoCEv2 datagram a device sends or receives, written as a classic pcap
//! file (`LINKTYPE_ETHERNET`) that `softrdma decode`, tshark and Wireshark read.
//!
//! A UDP socket never sees the Ethernet, IP or UDP headers of its datagrams, so the tap
//! synthesises them. What it writes is what the ICRC covers, so every ICRC in the file
//! verifies:
//!
//! - **IPv4 identification as it went on the wire.** Sent: the index of the datagram within the
//!   GSO send that carried it (0 for a datagram sent alone), DF set — what the kernel puts there
//!   for our unconnected `IP_PMTUDISC_DO` socket (measured; see `docs/measurements.md`). Received: the
//!   ID (and DF) that makes the datagram's ICRC verify, solved with
//!   [`icrc::verify_udp`]; a datagram whose ICRC does not verify for any ID is written with
//!   ID 0 and DF, so the file shows it as bad, as the stack counted it.
//! - TTL / hop limit 64, TOS / traffic class 0 (both masked out of the ICRC); the IPv4 header
//!   checksum is computed, the UDP checksum is 0 over IPv4 (what rxe sends) and computed over
//!   IPv6 (where 0 is not allowed).
//! - MAC addresses: `02:00:` followed by the last four bytes of the IP address (a locally
//!   administered address, the same rule the device uses for its own MAC), so each endpoint
//!   keeps one MAC through the file.
//!
//! Timestamps are wall-clock (`SystemTime`), microsecond resolution.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use softrdma_wire::icrc::{self, Flow, Ipv4Ident, Verdict};
use softrdma_wire::link::ipv4::{self, FLAG_DF};
use softrdma_wire::link::{
    EtherType, EthernetRepr, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Repr, LinkType, UdpRepr,
};
use softrdma_wire::pcap::Writer;

/// The locally administered MAC the tap (and the device, by default) gives an IP address:
/// `02:00:` + the address's last four bytes.
pub fn mac_for_ip(ip: IpAddr) -> [u8; 6] {
    let last4 = match ip {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [0x02, 0x00, last4[0], last4[1], last4[2], last4[3]]
}

/// A pcap file being written with the datagrams of one device.
pub struct Tap<W: Write = BufWriter<File>> {
    writer: Writer<W>,
    frame: Vec<u8>,
    /// The time records carry ([`Tap::stamp`]); `None`: when each is written.
    stamp: Option<SystemTime>,
    /// Packets written.
    pub packets: u64,
}

impl<W: Write> std::fmt::Debug for Tap<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tap")
            .field("packets", &self.packets)
            .finish()
    }
}

impl Tap<BufWriter<File>> {
    /// Creates (truncates) `path` and writes the pcap file header.
    pub fn create(path: &Path) -> io::Result<Self> {
        Tap::new(BufWriter::with_capacity(256 << 10, File::create(path)?))
    }
}

impl<W: Write> Tap<W> {
    /// A tap writing to any writer.
    pub fn new(out: W) -> io::Result<Self> {
        Ok(Tap {
            writer: Writer::new(out, LinkType::ETHERNET)?,
            frame: Vec::with_capacity(9000),
            stamp: None,
            packets: 0,
        })
    }

    /// Records a datagram we sent from `src` to `dst`; `gso_index` is its index within the
    /// GSO send that carried it (its IPv4 identification).
    pub fn sent(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        gso_index: u16,
        payload: &[u8],
    ) -> io::Result<()> {
        self.sent_tos(src, dst, gso_index, 0, payload)
    }

    /// [`Tap::sent`] for a datagram sent with IP TOS / traffic class `tos`.
    pub fn sent_tos(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        gso_index: u16,
        tos: u8,
        payload: &[u8],
    ) -> io::Result<()> {
        let ident = Ipv4Ident {
            id: gso_index,
            dont_fragment: true,
        };
        self.write_tos(src, dst, ident, tos, payload)
    }

    /// Records a datagram we received from `src` at `dst`; the IPv4 identification is the
    /// one that makes its ICRC verify (see the module docs).
    pub fn received(&mut self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> io::Result<()> {
        let flow = Flow {
            src: src.ip(),
            dst: dst.ip(),
            src_port: src.port(),
            dst_port: dst.port(),
        };
        let ident = match icrc::verify_udp(&flow, payload) {
            Ok(Verdict::Verified { ipv4: Some(id) }) => id,
            _ => Ipv4Ident::LINUX_UNCONNECTED_DF,
        };
        self.write(src, dst, ident, payload)
    }

    /// Writes one frame: Ethernet + IP + UDP headers around `payload`.
    pub fn write(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        ident: Ipv4Ident,
        payload: &[u8],
    ) -> io::Result<()> {
        self.write_tos(src, dst, ident, 0, payload)
    }

    /// [`Tap::write`] with an IP TOS / traffic class byte.
    pub fn write_tos(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        ident: Ipv4Ident,
        tos: u8,
        payload: &[u8],
    ) -> io::Result<()> {
        let udp_len = 8 + payload.len();
        let f = &mut self.frame;
        f.clear();
        let ethertype = if src.is_ipv4() {
            EtherType::IPV4
        } else {
            EtherType::IPV6
        };
        let eth = EthernetRepr {
            dst: mac_for_ip(dst.ip()),
            src: mac_for_ip(src.ip()),
            vlan: None,
            ethertype,
        };
        f.extend_from_slice(&eth.to_bytes());
        let udp_checksum;
        match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let total = u16::try_from(20 + udp_len).map_err(|_| too_long())?;
                let ip = Ipv4Repr {
                    dscp: tos >> 2,
                    ecn: tos & 3,
                    total_len: total,
                    ident: ident.id,
                    flags: if ident.dont_fragment { FLAG_DF } else { 0 },
                    frag_offset: 0,
                    ttl: 64,
                    protocol: IpProtocol::UDP,
                    checksum: 0,
                    src: s,
                    dst: d,
                    options: Vec::new(),
                };
                let mut h = ip.to_bytes();
                Ipv4Packet::new_unchecked(&mut h[..]).fill_checksum();
                f.extend_from_slice(&h);
                udp_checksum = 0;
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let plen = u16::try_from(udp_len).map_err(|_| too_long())?;
                let ip = Ipv6Repr {
                    traffic_class: tos,
                    flow_label: 0,
                    payload_len: plen,
                    next_header: IpProtocol::UDP,
                    hop_limit: 64,
                    src: s,
                    dst: d,
                };
                f.extend_from_slice(&ip.to_bytes());
                udp_checksum = udp6_checksum(&s.octets(), &d.octets(), src, dst, payload);
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "tap: mixed IPv4/IPv6 addresses",
                ))
            }
        }
        let udp = UdpRepr {
            src_port: src.port(),
            dst_port: dst.port(),
            length: u16::try_from(udp_len).map_err(|_| too_long())?,
            checksum: udp_checksum,
        };
        f.extend_from_slice(&udp.to_bytes());
        f.extend_from_slice(payload);
        let ts = self
            .stamp
            .unwrap_or_else(SystemTime::now)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.writer.write_packet(ts, f)?;
        self.packets += 1;
        Ok(())
    }

    /// The time the records written from now on carry (`None`: the time each is written):
    /// the runtime stamps a batch with when it went to, or came from, the socket, so the
    /// file's times are the wire's and not the tap's own.
    pub fn stamp(&mut self, at: Option<SystemTime>) {
        self.stamp = at;
    }

    /// Flushes the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }

    /// The underlying writer (flushed first is the caller's business).
    pub fn into_inner(self) -> W {
        self.writer.into_inner()
    }
}

fn too_long() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "tap: datagram too long")
}

/// The UDP checksum over IPv6 (RFC 8200 §8.1 pseudo-header); never 0 (0 becomes 0xffff).
fn udp6_checksum(
    s: &[u8; 16],
    d: &[u8; 16],
    src: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
) -> u16 {
    let len = 8 + payload.len();
    let mut buf = Vec::with_capacity(48 + len);
    buf.extend_from_slice(s);
    buf.extend_from_slice(d);
    buf.extend_from_slice(&(len as u32).to_be_bytes());
    buf.extend_from_slice(&[0, 0, 0, 17]);
    buf.extend_from_slice(&src.port().to_be_bytes());
    buf.extend_from_slice(&dst.port().to_be_bytes());
    buf.extend_from_slice(&(len as u16).to_be_bytes());
    buf.extend_from_slice(&[0, 0]);
    buf.extend_from_slice(payload);
    match ipv4::checksum(&buf) {
        0 => 0xffff,
        c => c,
    }
}
