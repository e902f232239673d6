//! The UDP header (RFC 768). RoCEv2 packets go to destination port 4791; the source port is
//! flow entropy (rxe: 55410 on QP1, derived from the flow label on connected QPs).

use crate::dissect::{Dissect, Tree};
use crate::field::{read_u16, write_u16};
use crate::{Error, Result};

/// The IANA port of RoCEv2.
pub const ROCEV2_PORT: u16 = 4791;

/// The header length.
pub const HEADER_LEN: usize = 8;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

fixed_view! {
    /// A zero-copy view of a UDP datagram.
    struct Packet(HEADER_LEN, "udp");
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Header + payload length.
    pub fn len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Whether the length field claims no more than the header.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// The payload by the length field, clipped to the buffer.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = usize::from(self.len()).clamp(HEADER_LEN, b.len().max(HEADER_LEN));
        b.get(HEADER_LEN..end.min(b.len())).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, v);
    }
    pub fn set_dst_port(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, v);
    }
    pub fn set_len(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, v);
    }
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
}

/// A UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    /// Header + payload length.
    pub length: u16,
    /// As captured; 0 = none (what rxe sends over IPv4).
    pub checksum: u16,
}

impl Repr {
    /// Parses the header; the length must cover at least the header.
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        let p = Packet::new_checked(buf)?;
        if usize::from(p.len()) < HEADER_LEN {
            return Err(Error::BadLength {
                what: "udp.length",
                len: p.len().into(),
            });
        }
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            length: p.len(),
            checksum: p.checksum(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn payload_len(&self) -> usize {
        usize::from(self.length).saturating_sub(HEADER_LEN)
    }

    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), HEADER_LEN, "udp: emit buffer length");
        let mut p = Packet::new_unchecked(buf);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(self.length);
        p.set_checksum(self.checksum);
    }

    to_bytes!();

    pub fn title(&self) -> String {
        format!(
            "User Datagram Protocol, Src Port: {}, Dst Port: {}",
            self.src_port, self.dst_port
        )
    }
}

impl Dissect for Repr {
    /// A subtree `udp` titled as tshark titles the layer.
    fn dissect(&self, t: &mut Tree) {
        t.subtree("udp", self.title(), |t| self.dissect_fields(t));
    }
}

impl Repr {
    /// The layer's fields, without the enclosing subtree.
    pub fn dissect_fields(&self, t: &mut Tree) {
        t.dec("srcport", "Source Port", self.src_port);
        t.dec("dstport", "Destination Port", self.dst_port);
        t.dec("length", "Length", self.length);
        if self.checksum == 0 {
            super::leaf(
                t,
                "checksum",
                "Checksum",
                crate::dissect::Value::Uint(0),
                "0x0000 [zero-value ignored]".into(),
            );
        } else {
            t.hex("checksum", "Checksum", self.checksum, 4);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // h_req_single.pcap frame 1, bytes 34..42.
    const HDR: [u8; 8] = [0xd8, 0x72, 0x12, 0xb7, 0x01, 0x20, 0x00, 0x00];

    #[test]
    fn parse_captured() {
        let r = Repr::parse(&HDR).unwrap();
        assert_eq!(r.src_port, 55410);
        assert_eq!(r.dst_port, ROCEV2_PORT);
        assert_eq!(r.length, 288);
        assert_eq!(r.payload_len(), 280);
        assert_eq!(r.to_bytes(), HDR);
        assert_eq!(
            r.title(),
            "User Datagram Protocol, Src Port: 55410, Dst Port: 4791"
        );
        assert_eq!(
            r.to_tree().find("udp.checksum").unwrap().display,
            "0x0000 [zero-value ignored]"
        );
        for n in 0..8 {
            assert!(Repr::parse(&HDR[..n]).is_err());
        }
        let mut bad = HDR;
        bad[5] = 7;
        bad[4] = 0;
        assert!(Repr::parse(&bad).is_err());
        // The view's payload never reaches past the buffer, whatever the length says.
        let p = Packet::new_checked(&HDR[..]).unwrap();
        assert!(p.payload().is_empty());
    }
}
