//! The RoCEv2 Invariant CRC (ICRC): IBTA Vol 1 §7.8.1 and Annex A17.4, as Linux rxe
//! computes it (`drivers/infiniband/sw/rxe/rxe_icrc.c`).
//!
//! The ICRC is the plain CRC-32 of zlib/Ethernet (reflected polynomial 0xEDB88320, initial
//! value all-ones, final complement) over:
//!
//! 1. 8 bytes of 0xff, standing for the masked LRH of native InfiniBand;
//! 2. the IP header with its variant fields set to all-ones: IPv4 TOS, TTL and header
//!    checksum; IPv6 traffic class, flow label and hop limit (rxe assumes a 20-byte IPv4
//!    header / a 40-byte IPv6 header without extension headers, and so do we);
//! 3. the UDP header with the checksum set to all-ones;
//! 4. the BTH with byte 4 (resv8a, where RoCE NICs mark FECN/BECN) set to all-ones;
//! 5. everything after the BTH up to, not including, the 4-byte ICRC.
//!
//! The result is stored in the last 4 bytes of the UDP payload **little-endian** (rxe stores
//! `~crc` as a CPU-order `u32` on a little-endian machine; the 387 kernel packets in the lab
//! captures confirm it). [`compute`] returns the value as a `u32`; the wire bytes are
//! `icrc.to_le_bytes()`.
//!
//! # IPv4 and the identification field
//!
//! The IPv4 identification and flags are *not* masked, yet a program on a UDP socket neither
//! writes nor sees them:
//!
//! - **Sending**: an unconnected UDP socket with `IP_MTU_DISCOVER = IP_PMTUDISC_DO` on Linux
//!   sends IP ID 0 with DF set (see `docs/wire-facts.md`), so a sender computes its ICRC with
//!   [`Ipv4Ident::LINUX_UNCONNECTED_DF`] ([`seal_udp`]).
//! - **Receiving**: the CRC is affine in the 16 ID bits, so [`verify_udp`] solves for the ID
//!   that would make the received ICRC right, first with DF set, then with DF clear. It
//!   reports [`Verdict::Verified`] with the ID it found, or [`Verdict::Mismatch`]. The price:
//!   a corrupted packet passes when its CRC error happens to be reachable by some ID, which
//!   for a random error is 2^16 out of 2^32 values per DF hypothesis — about 1 in 65,536 for
//!   each, 1 in 32,768 with both tried. (The UDP checksum, which the kernel verifies before
//!   we see the datagram when the sender filled it, catches most corruption anyway; rxe
//!   sends it as zero.) The solve costs one CRC pass plus a handful of carry-less
//!   multiplications — no loop over the 65,536 IDs.
//!
//! IPv6 headers hold nothing the receiver does not know (addresses, ports, lengths), so
//! IPv6 ICRCs are checked exactly.

use crate::{Error, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The reflected CRC-32 polynomial (IEEE 802.3 / zlib).
const POLY: u32 = 0xedb8_8320;

/// Slicing-by-8 tables: `TABLES[0]` is the classic byte table; `TABLES[k][b]` is the register
/// contribution of byte `b` followed by `k` zero bytes.
static TABLES: [[u32; 256]; 8] = make_tables();

const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut s = 1;
    while s < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        s += 1;
    }
    t
}

/// Advances a raw CRC-32 register over `data` (no initial or final complement).
///
/// `!crc32_update(!0, data)` is zlib's `crc32(data)`; chaining calls over consecutive
/// pieces equals one call over their concatenation.
///
/// Computed with `crc32fast` (carry-less multiplication folding where the CPU has it, else
/// slicing-by-16): the ICRC covers every byte of every packet on both ends, and the
/// table-driven loop below cost about 3 instructions per byte — most of softrdma's CPU time at
/// 4 KiB MTU (see softrdma-core's `examples/hotpath.rs`). zlib's CRC chains through its
/// finalized value, which is the complement of the raw register.
pub fn crc32_update(crc: u32, data: &[u8]) -> u32 {
    // A middle packet has no extension header and no pad: two empty pieces per packet.
    if data.is_empty() {
        return crc;
    }
    let mut h = crc32fast::Hasher::new_with_initial(!crc);
    h.update(data);
    !h.finalize()
}

/// The portable slicing-by-8 form of [`crc32_update`] (the reference the tests compare with).
#[cfg(test)]
fn crc32_update_portable(mut crc: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        crc = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][c[4] as usize]
            ^ t[2][c[5] as usize]
            ^ t[1][c[6] as usize]
            ^ t[0][c[7] as usize];
    }
    for &b in chunks.remainder() {
        crc = t[0][((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

/// zlib's CRC-32 of `data`.
pub fn crc32(data: &[u8]) -> u32 {
    !crc32_update(!0, data)
}

/// The register after the all-ones initial value and the 8 bytes of 0xff of the masked LRH
/// (rxe's seed `0xdebb20e3`).
pub const LRH_SEED: u32 = 0xdebb_20e3;

/// The UDP destination port of RoCEv2.
pub const ROCE_V2_PORT: u16 = 4791;

/// Bytes of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Bytes of the BTH (the part of the RoCE header the ICRC masks).
const BTH_LEN: usize = 12;
/// Offset of resv8a inside the BTH.
const BTH_RESV8A: usize = 4;

const IPV4_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
const UDP_HEADER_LEN: usize = 8;
const IPPROTO_UDP: u8 = 17;
/// The DF bit in the IPv4 flags/fragment-offset word.
const IPV4_DF: u16 = 0x4000;

// --- GF(2)[x] / P arithmetic in the reflected representation (bit 31 is x^0) -----------

/// `a * b mod P`, both in the reflected representation of the CRC register.
const fn gf2_mul(mut a: u32, mut b: u32) -> u32 {
    let mut p = 0u32;
    let mut i = 0;
    while i < 32 {
        if a & 0x8000_0000 != 0 {
            p ^= b;
        }
        a <<= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
        i += 1;
    }
    p
}

/// x^-1 mod P (reflected). Multiplying by x shifts right and folds bit 0 back with `POLY`;
/// undoing that on the polynomial 1 (`0x8000_0000`) gives `((1 ^ POLY) << 1) | 1`.
const X_INV: u32 = ((0x8000_0000u32 ^ POLY) << 1) | 1;

/// `X_INV8_POW[j]` = x^(-8 * 2^j) mod P: moving a register back by 2^j bytes.
static X_INV8_POW: [u32; 17] = make_inv_pows();

const fn make_inv_pows() -> [u32; 17] {
    // x^-8
    let mut b = 0x8000_0000u32;
    let mut i = 0;
    while i < 8 {
        b = gf2_mul(b, X_INV);
        i += 1;
    }
    let mut t = [0u32; 17];
    t[0] = b;
    let mut j = 1;
    while j < 17 {
        t[j] = gf2_mul(t[j - 1], t[j - 1]);
        j += 1;
    }
    t
}

/// [`x_inv8_pow`] through a small per-thread cache keyed by `n`: a receiver sees the same few
/// packet lengths over and over, and the square-and-multiply costs a few thousand
/// instructions — as much as the CRC pass over a 4 KiB packet with carry-less multiplication.
fn x_inv8_pow_cached(n: usize) -> u32 {
    use std::cell::Cell;
    const WAYS: usize = 8;
    thread_local! {
        static CACHE: [Cell<(usize, u32)>; WAYS] =
            const { [const { Cell::new((usize::MAX, 0)) }; WAYS] };
    }
    // RoCE packets are padded to 4 bytes: spread by n / 4.
    let slot = (n >> 2) % WAYS;
    CACHE.with(|c| {
        let Some(cell) = c.get(slot) else {
            return x_inv8_pow(n);
        };
        let (k, v) = cell.get();
        if k == n {
            v
        } else {
            let v = x_inv8_pow(n);
            cell.set((n, v));
            v
        }
    })
}

/// x^(-8n) mod P for `n < 2^17`.
fn x_inv8_pow(n: usize) -> u32 {
    let mut r = 0x8000_0000u32;
    for (j, p) in X_INV8_POW.iter().enumerate() {
        if n & (1 << j) != 0 {
            r = gf2_mul(r, *p);
        }
    }
    r
}

/// `X8_POW[j]` = x^(8·2^j) mod P: advancing a register over 2^j zero bytes.
static X8_POW: [u32; 17] = {
    let mut t = [0u32; 17];
    t[0] = 0x0080_0000; // x^8
    let mut j = 1;
    while j < 17 {
        t[j] = gf2_mul(t[j - 1], t[j - 1]);
        j += 1;
    }
    t
};

/// x^(8n) mod P for `n < 2^17`: advancing a register over `n` zero bytes.
fn x8_pow(n: usize) -> u32 {
    let mut r = 0x8000_0000u32; // 1
    for (j, p) in X8_POW.iter().enumerate() {
        if n & (1 << j) != 0 {
            r = gf2_mul(r, *p);
        }
    }
    r
}

/// The factor [`ipv4_id_delta_with`] needs for a RoCE UDP payload of `roce_len` bytes: the
/// IPv4 ID sits 12 bytes into the ICRC's input (8 LRH bytes + 4 IP header bytes) and is
/// followed by the rest of the 20-byte IP header, the 8-byte UDP header and the RoCE payload
/// less its ICRC: `roce_len + 18` bytes, so the factor is x^(8·(roce_len + 18)) mod P.
/// Computing it costs a square-and-multiply; a sender that seals many datagrams of one
/// length keeps it.
pub fn ipv4_id_shift(roce_len: usize) -> u32 {
    x8_pow(roce_len.saturating_add(18) & 0x1_ffff)
}

/// What IPv4 ID `id` changes in the ICRC of a datagram whose [`ipv4_id_shift`] is `shift`,
/// against ID 0 (same DF flag): the ICRC is affine in the ID bits (IBTA A17.4 covers the IPv4
/// ID), so `icrc(id) = icrc(0) ^ ipv4_id_delta_with(shift, id)`. A GSO train's segments get
/// IDs 0, 1, 2…: each is sealed for ID 0 and corrected by this.
pub fn ipv4_id_delta_with(shift: u32, id: u16) -> u32 {
    gf2_mul(two_byte_register(id), shift)
}

/// [`ipv4_id_delta_with`] for a `roce_len`-byte RoCE UDP payload.
pub fn ipv4_id_delta(roce_len: usize, id: u16) -> u32 {
    ipv4_id_delta_with(ipv4_id_shift(roce_len), id)
}

/// `REV[top byte of TABLES[0][i]] = i`: the top bytes of the CRC-32 table are a permutation,
/// which makes a register that processed two bytes from zero invertible by lookup.
static TOP_BYTE_INDEX: [u8; 256] = make_rev();

const fn make_rev() -> [u8; 256] {
    let t = make_tables();
    let mut r = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        r[(t[0][i] >> 24) as usize] = i as u8;
        i += 1;
    }
    r
}

/// The register after processing the two bytes of `v` (big-endian) from zero (the solver and
/// the compile-time DF share are checked against it; [`ipv4_id_delta_with`] uses it).
fn two_byte_register(v: u16) -> u32 {
    let [hi, lo] = v.to_be_bytes();
    let t = &TABLES[0];
    let c1 = t[usize::from(hi)];
    t[((c1 ^ u32::from(lo)) & 0xff) as usize] ^ (c1 >> 8)
}

/// The 16-bit `v` with `two_byte_register(v) == reg`, if there is one.
fn solve_two_byte_register(reg: u32) -> Option<u16> {
    let t = &TABLES[0];
    let j = TOP_BYTE_INDEX[(reg >> 24) as usize];
    let c1_shifted = reg ^ t[usize::from(j)]; // == c1 >> 8
    let hi = TOP_BYTE_INDEX[((c1_shifted >> 16) & 0xff) as usize];
    let c1 = t[usize::from(hi)];
    if c1 >> 8 != c1_shifted {
        return None;
    }
    let lo = (c1 as u8) ^ j;
    Some(u16::from_be_bytes([hi, lo]))
}

// --- The API ------------------------------------------------------------------------------

/// The addresses and ports of a RoCEv2 datagram: what a UDP socket knows about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
}

/// The IPv4 identification and DF flag the ICRC covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ipv4Ident {
    pub id: u16,
    pub dont_fragment: bool,
}

impl Ipv4Ident {
    /// What Linux puts in the header of an unconnected UDP socket with DF set
    /// (`IP_PMTUDISC_DO`): ID 0, DF. (`docs/wire-facts.md`; rxe's own packets use other IDs.)
    pub const LINUX_UNCONNECTED_DF: Ipv4Ident = Ipv4Ident {
        id: 0,
        dont_fragment: true,
    };
}

/// The outcome of checking a received ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The ICRC is right. For IPv4, `ipv4` is the identification/DF that makes it right
    /// (the ID the sender's IP header must have carried, barring a 2^-16 coincidence).
    Verified { ipv4: Option<Ipv4Ident> },
    /// No header the sender could have sent makes the ICRC right.
    Mismatch,
}

impl Verdict {
    pub fn is_verified(&self) -> bool {
        matches!(self, Verdict::Verified { .. })
    }
}

/// The masked headers (8 × 0xff, IP, UDP) as the CRC sees them, plus where the IPv4
/// identification sits in that byte stream.
struct Pseudo {
    buf: [u8; 8 + IPV6_HEADER_LEN + UDP_HEADER_LEN],
    len: usize,
}

impl Pseudo {
    fn bytes(&self) -> &[u8] {
        // `len` is always 36 or 56, within `buf`.
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

/// Offset of the IPv4 identification in the CRC input (after the 8 LRH bytes).
const IPV4_ID_CRC_OFFSET: usize = 8 + 4;

fn pseudo_header(flow: &Flow, ident: Ipv4Ident, roce_len: usize) -> Result<Pseudo> {
    let udp_len = UDP_HEADER_LEN + roce_len;
    let mut p = Pseudo {
        buf: [0xff; 56],
        len: 0,
    };
    let b = &mut p.buf;
    let ip_len = match (flow.src, flow.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = IPV4_HEADER_LEN + udp_len;
            let total = u16::try_from(total).map_err(|_| Error::BadLength {
                what: "icrc.ipv4_total_length",
                len: total,
            })?;
            let flags = if ident.dont_fragment { IPV4_DF } else { 0 };
            b[8] = 0x45;
            b[9] = 0xff; // TOS, masked
            b[10..12].copy_from_slice(&total.to_be_bytes());
            b[12..14].copy_from_slice(&ident.id.to_be_bytes());
            b[14..16].copy_from_slice(&flags.to_be_bytes());
            b[16] = 0xff; // TTL, masked
            b[17] = IPPROTO_UDP;
            b[18..20].copy_from_slice(&[0xff, 0xff]); // checksum, masked
            b[20..24].copy_from_slice(&s.octets());
            b[24..28].copy_from_slice(&d.octets());
            IPV4_HEADER_LEN
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let plen = u16::try_from(udp_len).map_err(|_| Error::BadLength {
                what: "icrc.ipv6_payload_length",
                len: udp_len,
            })?;
            // Version 6, traffic class and flow label masked to all-ones.
            b[8..12].copy_from_slice(&[0x6f, 0xff, 0xff, 0xff]);
            b[12..14].copy_from_slice(&plen.to_be_bytes());
            b[14] = IPPROTO_UDP;
            b[15] = 0xff; // hop limit, masked
            b[16..32].copy_from_slice(&s.octets());
            b[32..48].copy_from_slice(&d.octets());
            IPV6_HEADER_LEN
        }
        _ => {
            return Err(Error::BadValue {
                field: "icrc.flow",
                value: 0,
            })
        }
    };
    let u = 8 + ip_len;
    let udp_len = udp_len as u16; // fits: checked above with the IP length
    b[u..u + 2].copy_from_slice(&flow.src_port.to_be_bytes());
    b[u + 2..u + 4].copy_from_slice(&flow.dst_port.to_be_bytes());
    b[u + 4..u + 6].copy_from_slice(&udp_len.to_be_bytes());
    b[u + 6..u + 8].copy_from_slice(&[0xff, 0xff]); // checksum, masked
    p.len = u + UDP_HEADER_LEN;
    Ok(p)
}

/// Bytes of the CRC input a [`HeaderMemo`] remembers the register after: the 8 LRH bytes,
/// the IP and UDP headers and the BTH up to its PSN word.
const fn memo_prefix(ip_header: usize) -> usize {
    8 + ip_header + UDP_HEADER_LEN + BTH_PSN_WORD
}
/// Offset of the word holding the AckReq bit and the PSN inside the BTH: the last 4 bytes,
/// the only ones that differ between the segments of a train.
const BTH_PSN_WORD: usize = 8;

/// `ID_SHARE[0][b]` / `ID_SHARE[1][b]`: what the IPv4 ID's high / low byte `b` adds to the
/// register at the end of an IPv4 [`HeaderMemo`] prefix (the CRC is linear: the share of a
/// byte is its table entry moved over the zero bytes after it).
static ID_SHARE: [[u32; 256]; 2] = make_id_share();

const fn make_id_share() -> [[u32; 256]; 2] {
    let t = make_tables();
    let mut s = [[0u32; 256]; 2];
    let mut which = 0;
    while which < 2 {
        let follow = memo_prefix(IPV4_HEADER_LEN) - (IPV4_ID_CRC_OFFSET + which) - 1;
        let mut b = 0;
        while b < 256 {
            let mut c = t[0][b];
            let mut k = 0;
            while k < follow {
                c = (c >> 8) ^ t[0][(c & 0xff) as usize];
                k += 1;
            }
            s[which][b] = c;
            b += 1;
        }
        which += 1;
    }
    s
}

/// The key of a [`HeaderMemo`] entry: what fixes the CRC input up to the BTH's PSN word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MemoKey {
    flow: Flow,
    dont_fragment: bool,
    roce_len: usize,
    /// BTH bytes 0..8, resv8a masked.
    bth: [u8; BTH_PSN_WORD],
}

/// The CRC register after a packet's masked headers up to the BTH's PSN word, remembered
/// for the next packet that shares them. The segments of a GSO train, and most packets of
/// one QP, differ only in the IPv4 ID (added by table lookup: the CRC is linear in it) and
/// the PSN word (4 bytes by table); rebuilding the masked IP/UDP headers and running the
/// CRC over 48 bytes for each of them cost the 1 MiB sender about 4% of its thread.
///
/// One entry: the cheap comparison is the point, and a READ response's first and last
/// packets are one miss each among 256.
#[derive(Debug, Clone, Default)]
pub struct HeaderMemo {
    entry: Option<(MemoKey, u32)>,
}

impl HeaderMemo {
    /// The register (from the all-ones start) after the masked headers of a `roce_len`-byte
    /// RoCE UDP payload over `flow` with `ident` and the masked BTH `bth` (at least 12
    /// bytes; the caller checks).
    fn through_bth(
        &mut self,
        flow: &Flow,
        ident: Ipv4Ident,
        roce_len: usize,
        bth: &[u8],
    ) -> Result<u32> {
        let mut head = [0u8; BTH_PSN_WORD];
        head.copy_from_slice(bth.get(..BTH_PSN_WORD).unwrap_or(&[0; BTH_PSN_WORD]));
        head[BTH_RESV8A] = 0xff;
        let key = MemoKey {
            flow: *flow,
            dont_fragment: ident.dont_fragment,
            roce_len,
            bth: head,
        };
        let mut reg = match self.entry {
            Some((k, reg)) if k == key => reg,
            _ => {
                let id0 = Ipv4Ident { id: 0, ..ident };
                let p = pseudo_header(flow, id0, roce_len)?;
                let mut buf = [0u8; memo_prefix(IPV6_HEADER_LEN)];
                let h = p.bytes();
                let n = h.len() + BTH_PSN_WORD;
                if let Some(dst) = buf.get_mut(..n) {
                    let (a, b) = dst.split_at_mut(h.len());
                    a.copy_from_slice(h);
                    b.copy_from_slice(&head);
                }
                let reg = crc32_update(!0, buf.get(..n).unwrap_or(&[]));
                self.entry = Some((key, reg));
                reg
            }
        };
        if flow.src.is_ipv4() {
            let [hi, lo] = ident.id.to_be_bytes();
            reg ^= ID_SHARE[0][usize::from(hi)] ^ ID_SHARE[1][usize::from(lo)];
        }
        // The PSN word: one slicing-by-4 step.
        let mut w = [0u8; 4];
        w.copy_from_slice(bth.get(BTH_PSN_WORD..BTH_LEN).unwrap_or(&[0; 4]));
        let t = &TABLES;
        let x = reg ^ u32::from_le_bytes(w);
        Ok(t[3][(x & 0xff) as usize]
            ^ t[2][((x >> 8) & 0xff) as usize]
            ^ t[1][((x >> 16) & 0xff) as usize]
            ^ t[0][(x >> 24) as usize])
    }

    /// [`compute_udp`] through the memo.
    pub fn compute_udp(&mut self, flow: &Flow, ident: Ipv4Ident, roce: &[u8]) -> Result<u32> {
        let body_end = roce_body_end(roce)?;
        let crc = self.through_bth(flow, ident, roce.len(), roce)?;
        Ok(!crc32_update(
            crc,
            roce.get(BTH_LEN..body_end).unwrap_or(&[]),
        ))
    }

    /// [`compute_udp_parts`] through the memo.
    pub fn compute_udp_parts(
        &mut self,
        flow: &Flow,
        ident: Ipv4Ident,
        parts: &[&[u8]],
    ) -> Result<u32> {
        let body: usize = parts.iter().map(|p| p.len()).sum();
        let first = parts.first().copied().unwrap_or(&[]);
        if first.len() < BTH_LEN {
            return Err(Error::Truncated {
                what: "icrc.roce",
                need: BTH_LEN,
                got: first.len(),
            });
        }
        let mut crc = self.through_bth(flow, ident, body + ICRC_LEN, first)?;
        crc = crc32_update(crc, first.get(BTH_LEN..).unwrap_or(&[]));
        for part in parts.iter().skip(1) {
            crc = crc32_update(crc, part);
        }
        Ok(!crc)
    }

    /// [`verify_udp`] through the memo.
    pub fn verify_udp(&mut self, flow: &Flow, roce: &[u8]) -> Result<Verdict> {
        match (flow.src, flow.dst) {
            (IpAddr::V6(_), IpAddr::V6(_)) => {
                let ok = self.compute_udp(flow, Ipv4Ident::default(), roce)? == stored(roce)?;
                Ok(if ok {
                    Verdict::Verified { ipv4: None }
                } else {
                    Verdict::Mismatch
                })
            }
            _ => {
                let at_id = self.ipv4_difference_at_id(flow, roce)?;
                for (df, diff) in [(true, at_id ^ df_at_id()), (false, at_id)] {
                    if let Some(id) = solve_two_byte_register(diff) {
                        return Ok(Verdict::Verified {
                            ipv4: Some(Ipv4Ident {
                                id,
                                dont_fragment: df,
                            }),
                        });
                    }
                }
                Ok(Verdict::Mismatch)
            }
        }
    }

    /// The difference between the stored ICRC and the one computed with ID 0 and DF clear,
    /// moved back to the register state right after the ID field. One CRC pass.
    fn ipv4_difference_at_id(&mut self, flow: &Flow, roce: &[u8]) -> Result<u32> {
        if !matches!((flow.src, flow.dst), (IpAddr::V4(_), IpAddr::V4(_))) {
            return Err(Error::BadValue {
                field: "icrc.flow",
                value: 6,
            });
        }
        let got = stored(roce)?;
        let c0 = self.compute_udp(flow, Ipv4Ident::default(), roce)?;
        // The CRC input: 8 LRH bytes + 20 IP + 8 UDP + RoCE without the ICRC. `k` bytes
        // follow the two ID bytes; the ID's effect on the CRC is its two-byte register
        // advanced by k bytes (multiplied by x^8k). Move the observed difference back by k
        // bytes; what is left must be the two-byte register of the ID (plus the DF bit's
        // share).
        let msg_len = 8 + IPV4_HEADER_LEN + UDP_HEADER_LEN + roce.len() - ICRC_LEN;
        let k = msg_len - IPV4_ID_CRC_OFFSET - 2;
        Ok(gf2_mul(got ^ c0, x_inv8_pow_cached(k)))
    }
}

/// Continues a CRC register over the RoCE part (BTH ... up to the ICRC) of `roce`, the
/// whole UDP payload including the 4-byte ICRC.
fn crc_roce(mut crc: u32, roce: &[u8]) -> Result<u32> {
    let body_end = roce_body_end(roce)?;
    let mut bth = [0u8; BTH_LEN];
    bth.copy_from_slice(roce.get(..BTH_LEN).unwrap_or(&[0; BTH_LEN]));
    bth[BTH_RESV8A] = 0xff;
    crc = crc32_update(crc, &bth);
    crc = crc32_update(crc, roce.get(BTH_LEN..body_end).unwrap_or(&[]));
    Ok(crc)
}

/// Checks that `roce` (a whole UDP payload, ICRC included) holds a BTH and an ICRC; returns
/// where the ICRC starts.
fn roce_body_end(roce: &[u8]) -> Result<usize> {
    let need = BTH_LEN + ICRC_LEN;
    roce.len()
        .checked_sub(ICRC_LEN)
        .filter(|_| roce.len() >= need)
        .ok_or(Error::Truncated {
            what: "icrc.roce",
            need,
            got: roce.len(),
        })
}

/// The ICRC stored in the last 4 bytes of a RoCE UDP payload.
pub fn stored(roce: &[u8]) -> Result<u32> {
    let n = roce.len();
    match roce.get(n.wrapping_sub(ICRC_LEN)..) {
        Some(&[a, b, c, d]) if n >= ICRC_LEN => Ok(u32::from_le_bytes([a, b, c, d])),
        _ => Err(Error::Truncated {
            what: "icrc",
            need: ICRC_LEN,
            got: n,
        }),
    }
}

/// The ICRC of a RoCE UDP payload (`roce` = BTH ... ICRC; its last 4 bytes are not covered)
/// sent over `flow`, with IPv4 identification `ident` (ignored for IPv6).
pub fn compute_udp(flow: &Flow, ident: Ipv4Ident, roce: &[u8]) -> Result<u32> {
    HeaderMemo::default().compute_udp(flow, ident, roce)
}

/// [`compute_udp`] of a RoCE UDP payload given in pieces: `parts`, concatenated, are its
/// bytes from the BTH up to the ICRC (the ICRC's 4 bytes not included). The first part
/// must hold the whole BTH. For a sender whose payload stays where it lies (the MR) while
/// the headers are written elsewhere.
pub fn compute_udp_parts(flow: &Flow, ident: Ipv4Ident, parts: &[&[u8]]) -> Result<u32> {
    HeaderMemo::default().compute_udp_parts(flow, ident, parts)
}

/// A sender's step: computes the ICRC for an unconnected DF UDP socket on Linux (IPv4 ID 0,
/// DF) and writes it little-endian into the last 4 bytes of `roce`. Returns the ICRC.
pub fn seal_udp(flow: &Flow, roce: &mut [u8]) -> Result<u32> {
    let icrc = compute_udp(flow, Ipv4Ident::LINUX_UNCONNECTED_DF, roce)?;
    let n = roce.len();
    if let Some(t) = roce.get_mut(n - ICRC_LEN..) {
        t.copy_from_slice(&icrc.to_le_bytes());
    }
    Ok(icrc)
}

/// For IPv4: the identification that makes the stored ICRC of `roce` right, given the DF
/// flag, or `None`. `Err` for IPv6 flows or malformed input.
pub fn solve_ipv4_id(flow: &Flow, dont_fragment: bool, roce: &[u8]) -> Result<Option<u16>> {
    let at_id = HeaderMemo::default().ipv4_difference_at_id(flow, roce)?;
    Ok(solve_two_byte_register(if dont_fragment {
        at_id ^ df_at_id()
    } else {
        at_id
    }))
}

/// The DF bit's share of the difference at the ID position: the flags word follows the ID
/// directly, so its two-byte register is moved back by the 2 bytes between them
/// (x^-16 = `X_INV8_POW[1]`). A constant, computed at compile time.
const DF_AT_ID: u32 = {
    // two_byte_register(IPV4_DF), bit by bit (const context: no table lookups).
    let bytes = IPV4_DF.to_be_bytes();
    let mut reg = 0u32;
    let mut i = 0;
    while i < 2 {
        reg ^= bytes[i] as u32;
        let mut k = 0;
        while k < 8 {
            reg = if reg & 1 != 0 {
                (reg >> 1) ^ POLY
            } else {
                reg >> 1
            };
            k += 1;
        }
        i += 1;
    }
    gf2_mul(reg, make_inv_pows()[1])
};

fn df_at_id() -> u32 {
    DF_AT_ID
}

/// A receiver's check of the ICRC of `roce` (a whole RoCE UDP payload) that arrived over
/// `flow` on a UDP socket. IPv6: exact. IPv4: solves for the IP identification (DF set
/// first, then clear) with one CRC pass; see the module documentation for the false-accept
/// rate.
pub fn verify_udp(flow: &Flow, roce: &[u8]) -> Result<Verdict> {
    HeaderMemo::default().verify_udp(flow, roce)
}

/// The pieces of an IP packet carrying RoCEv2.
struct Split<'a> {
    flow: Flow,
    ident: Ipv4Ident,
    /// The UDP payload, as long as the UDP length says.
    roce: &'a [u8],
    /// Offset of `roce` in the packet.
    roce_offset: usize,
}

fn split(ip: &[u8]) -> Result<Split<'_>> {
    let version = ip.first().map(|b| b >> 4).ok_or(Error::Truncated {
        what: "icrc.ip",
        need: 1,
        got: 0,
    })?;
    let (flow_addrs, ident, proto, udp_off) = match version {
        4 => {
            let h: &[u8; IPV4_HEADER_LEN] = ip
                .get(..IPV4_HEADER_LEN)
                .and_then(|s| s.try_into().ok())
                .ok_or(Error::Truncated {
                    what: "icrc.ipv4",
                    need: IPV4_HEADER_LEN,
                    got: ip.len(),
                })?;
            let ihl = h[0] & 0x0f;
            if ihl != 5 {
                // rxe builds and checks a fixed 20-byte header; options are not RoCE.
                return Err(Error::Unsupported {
                    what: "icrc.ipv4_ihl",
                    value: u64::from(ihl),
                });
            }
            let flags = u16::from_be_bytes([h[6], h[7]]);
            let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
            let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
            let ident = Ipv4Ident {
                id: u16::from_be_bytes([h[4], h[5]]),
                dont_fragment: flags & IPV4_DF != 0,
            };
            if flags & !IPV4_DF != 0 {
                // MF, a fragment offset or the evil bit: the pseudo header could not
                // reproduce it, and fragments are not RoCE packets.
                return Err(Error::Unsupported {
                    what: "icrc.ipv4_flags",
                    value: u64::from(flags),
                });
            }
            (
                (IpAddr::V4(src), IpAddr::V4(dst)),
                ident,
                h[9],
                IPV4_HEADER_LEN,
            )
        }
        6 => {
            let h: &[u8; IPV6_HEADER_LEN] = ip
                .get(..IPV6_HEADER_LEN)
                .and_then(|s| s.try_into().ok())
                .ok_or(Error::Truncated {
                    what: "icrc.ipv6",
                    need: IPV6_HEADER_LEN,
                    got: ip.len(),
                })?;
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&h[8..24]);
            d.copy_from_slice(&h[24..40]);
            (
                (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d))),
                Ipv4Ident::default(),
                h[6],
                IPV6_HEADER_LEN,
            )
        }
        v => {
            return Err(Error::Unsupported {
                what: "icrc.ip_version",
                value: u64::from(v),
            })
        }
    };
    if proto != IPPROTO_UDP {
        return Err(Error::Unsupported {
            what: "icrc.ip_protocol",
            value: u64::from(proto),
        });
    }
    let udp = ip
        .get(udp_off..udp_off + UDP_HEADER_LEN)
        .ok_or(Error::Truncated {
            what: "icrc.udp",
            need: udp_off + UDP_HEADER_LEN,
            got: ip.len(),
        })?;
    let src_port = u16::from_be_bytes([udp[0], udp[1]]);
    let dst_port = u16::from_be_bytes([udp[2], udp[3]]);
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if udp_len < UDP_HEADER_LEN {
        return Err(Error::BadLength {
            what: "icrc.udp_length",
            len: udp_len,
        });
    }
    let roce_offset = udp_off + UDP_HEADER_LEN;
    let roce = ip
        .get(roce_offset..udp_off + udp_len)
        .ok_or(Error::Truncated {
            what: "icrc.udp_payload",
            need: udp_off + udp_len,
            got: ip.len(),
        })?;
    let (src, dst) = flow_addrs;
    Ok(Split {
        flow: Flow {
            src,
            dst,
            src_port,
            dst_port,
        },
        ident,
        roce,
        roce_offset,
    })
}

/// The ICRC of split packet `s` from the header bytes actually in `ip` (masked), as rxe
/// computes it: a header field we do not model (an IPv4 total length that disagrees with the
/// UDP length, say) is covered as it is.
fn compute_split(ip: &[u8], s: &Split<'_>) -> Result<u32> {
    let mut hdr = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN];
    let n = s.roce_offset;
    let src = ip.get(..n).ok_or(Error::Truncated {
        what: "icrc.ip",
        need: n,
        got: ip.len(),
    })?;
    let h = hdr.get_mut(..n).ok_or(Error::BadLength {
        what: "icrc.ip",
        len: n,
    })?;
    h.copy_from_slice(src);
    if n == IPV4_HEADER_LEN + UDP_HEADER_LEN {
        h[1] = 0xff; // TOS
        h[8] = 0xff; // TTL
        h[10] = 0xff; // header checksum
        h[11] = 0xff;
    } else {
        h[0] |= 0x0f; // traffic class (high nibble)
        h[1] = 0xff; // traffic class (low nibble), flow label
        h[2] = 0xff;
        h[3] = 0xff;
        h[7] = 0xff; // hop limit
    }
    h[n - 2] = 0xff; // UDP checksum
    h[n - 1] = 0xff;
    let crc = crc32_update(LRH_SEED, h);
    Ok(!crc_roce(crc, s.roce)?)
}

/// The ICRC of a whole IP packet (IPv4 or IPv6, starting at the IP header) carrying RoCEv2,
/// computed from the headers actually in it. The UDP length delimits the RoCE packet
/// (trailing link-layer padding is ignored).
pub fn compute(ip_packet: &[u8]) -> Result<u32> {
    let s = split(ip_packet)?;
    compute_split(ip_packet, &s)
}

/// The ICRC stored in a whole IP packet.
pub fn stored_in(ip_packet: &[u8]) -> Result<u32> {
    stored(split(ip_packet)?.roce)
}

/// Whether the ICRC of a whole IP packet is right.
pub fn verify(ip_packet: &[u8]) -> Result<bool> {
    let s = split(ip_packet)?;
    Ok(compute_split(ip_packet, &s)? == stored(s.roce)?)
}

/// Computes the ICRC of a whole IP packet and writes it into its last 4 UDP payload bytes.
pub fn fill(ip_packet: &mut [u8]) -> Result<u32> {
    let (icrc, end) = {
        let s = split(ip_packet)?;
        (compute_split(ip_packet, &s)?, s.roce_offset + s.roce.len())
    };
    if let Some(t) = ip_packet.get_mut(end - ICRC_LEN..end) {
        t.copy_from_slice(&icrc.to_le_bytes());
    }
    Ok(icrc)
}

/// The flow (addresses, ports) and RoCE payload of a whole IP packet, as a UDP socket would
/// report them — for tests and for the decoder's "what would a receiver conclude" line.
pub fn flow_of(ip_packet: &[u8]) -> Result<(Flow, Ipv4Ident, &[u8])> {
    let s = split(ip_packet)?;
    Ok((s.flow, s.ident, s.roce))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests panic on purpose
mod tests {
    use super::*;
    use crate::roce::tests::pcap;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        let long: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        // Slicing-by-8 agrees with the byte-at-a-time loop on every split point.
        let bytewise = |data: &[u8]| {
            let mut c = !0u32;
            for &b in data {
                c = TABLES[0][((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
            }
            !c
        };
        for n in [0, 1, 7, 8, 9, 15, 16, 17, 999, 1000] {
            assert_eq!(crc32(&long[..n]), bytewise(&long[..n]));
        }
        let (a, b) = long.split_at(333);
        assert_eq!(!crc32_update(crc32_update(!0, a), b), crc32(&long));
        // The compile-time DF share equals the table-driven one, and the cache is exact.
        assert_eq!(DF_AT_ID, gf2_mul(two_byte_register(IPV4_DF), x_inv8_pow(2)));
        for n in [18, 1042, 4130, 18, 4130, 2066, 34, 4130 + 32, 4130] {
            assert_eq!(x_inv8_pow_cached(n), x_inv8_pow(n));
        }
        // The crc32fast path agrees with the portable tables at every length and alignment.
        for start in 0..9 {
            for end in start..long.len().min(start + 300) {
                let d = &long[start..end];
                assert_eq!(
                    crc32_update(0x1234_5678, d),
                    crc32_update_portable(0x1234_5678, d)
                );
            }
        }
        assert_eq!(crc32_update(!0, &[0xff; 8]), LRH_SEED);
    }

    /// The ID delta equals the difference of two full computations, and advancing by
    /// `x8_pow(n)` is what `n` zero bytes do to a register.
    #[test]
    fn ipv4_id_delta_matches_full_computations() {
        for n in [0usize, 1, 7, 1042, 65535] {
            assert_eq!(
                gf2_mul(0x1234_5678, x8_pow(n)),
                crc32_update(0x1234_5678, &vec![0; n]) ^ crc32_update(0, &vec![0; n]),
                "n={n}"
            );
        }
        let flow = Flow {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            src_port: 4791,
            dst_port: ROCE_V2_PORT,
        };
        for (len, id) in [
            (16usize, 1u16),
            (40, 2),
            (1060, 63),
            (4112, 14),
            (20, 0xffff),
        ] {
            let roce: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
            let c = |id| {
                compute_udp(
                    &flow,
                    Ipv4Ident {
                        id,
                        dont_fragment: true,
                    },
                    &roce,
                )
                .unwrap()
            };
            assert_eq!(c(0) ^ ipv4_id_delta(len, id), c(id), "len {len} id {id}");
        }
    }

    #[test]
    fn gf2_arithmetic() {
        let one = 0x8000_0000;
        let x = 0x4000_0000;
        assert_eq!(gf2_mul(x, X_INV), one);
        assert_eq!(gf2_mul(one, 0x1234_5678), 0x1234_5678);
        // Moving a register forward by n zero bytes then back by n is the identity.
        for n in [0usize, 1, 2, 3, 100, 1500, 65535] {
            let fwd = crc32_update(0xdead_beef, &vec![0; n]);
            assert_eq!(gf2_mul(fwd, x_inv8_pow(n)), 0xdead_beef, "n={n}");
        }
        // The two-byte step is invertible for every value.
        for v in 0..=u16::MAX {
            assert_eq!(solve_two_byte_register(two_byte_register(v)), Some(v));
        }
        assert_eq!(solve_two_byte_register(0x1234_5678), None);
        let mut tops = [false; 256];
        for e in TABLES[0] {
            tops[(e >> 24) as usize] = true;
        }
        assert!(tops.iter().all(|t| *t), "table top bytes are a permutation");
    }

    /// Every RoCEv2 packet of every kernel capture verifies; the ID solver, seeing only
    /// what a UDP socket sees, recovers each packet's real IP ID and DF flag.
    #[test]
    fn every_captured_icrc_verifies_and_the_id_is_recovered() {
        let mut checked = 0;
        for (name, file) in pcap::ALL {
            for (n, ip, udp) in pcap::roce_packets(file) {
                let (flow, ident, roce) = flow_of(ip).unwrap();
                assert_eq!(roce, udp);
                if *name == "h_host_rx" {
                    // Rebuilt IP headers: the stored ICRC does not match them.
                    assert!(!verify(ip).unwrap(), "{name} frame {n}");
                    continue;
                }
                assert!(verify(ip).unwrap(), "{name} frame {n}");
                assert_eq!(compute(ip).unwrap(), stored_in(ip).unwrap());
                assert_eq!(
                    compute_udp(&flow, ident, udp).unwrap(),
                    stored(udp).unwrap()
                );
                assert_eq!(
                    verify_udp(&flow, udp).unwrap(),
                    Verdict::Verified { ipv4: Some(ident) },
                    "{name} frame {n}"
                );
                checked += 1;
            }
        }
        assert!(checked > 2900, "{checked}");
    }

    /// The ICRC over pieces equals the one over the whole, wherever the pieces are cut
    /// (after the BTH).
    #[test]
    fn parts_give_the_same_icrc() {
        let flow = Flow {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            src_port: 49152,
            dst_port: ROCE_V2_PORT,
        };
        let roce: Vec<u8> = (0..4160u32).map(|i| (i * 7 + 3) as u8).collect();
        let ident = Ipv4Ident {
            id: 5,
            dont_fragment: true,
        };
        let whole = compute_udp(&flow, ident, &roce).unwrap();
        let body = &roce[..roce.len() - ICRC_LEN];
        for cuts in [[12usize, 12], [28, 4124], [12, 4156], [40, 41]] {
            let parts = [&body[..cuts[0]], &body[cuts[0]..cuts[1]], &body[cuts[1]..]];
            assert_eq!(compute_udp_parts(&flow, ident, &parts).unwrap(), whole);
        }
        assert!(compute_udp_parts(&flow, ident, &[&body[..8], &body[8..]]).is_err());
    }

    #[test]
    fn fill_rewrites_the_stored_icrc() {
        let (_, ip, _) = pcap::roce_packets(pcap::B_RPING)[0];
        let mut copy = ip.to_vec();
        let end = copy.len();
        copy[end - 4..].fill(0);
        assert!(!verify(&copy).unwrap());
        let icrc = fill(&mut copy).unwrap();
        assert_eq!(copy, ip);
        assert_eq!(icrc, stored_in(ip).unwrap());
        // The masked fields do not matter...
        copy[1] = 0xb8; // TOS
        copy[8] = 3; // TTL
        copy[10] ^= 0x55; // checksum
        copy[20 + 6] ^= 0x11; // UDP checksum
        copy[28 + 4] = 0xc0; // BTH resv8a (FECN/BECN)
        assert!(verify(&copy).unwrap());
        // ...every other bit does.
        for i in (0..copy.len()).filter(|i| ![1, 8, 10, 11, 26, 27, 32].contains(i)) {
            let mut bad = copy.clone();
            bad[i] ^= 0x01;
            assert_ne!(verify(&bad).ok(), Some(true), "byte {i}");
        }
    }

    /// One memo reused over a run of packets (trains of one header and many IDs and PSNs,
    /// then other flows, lengths and BTHs, both families) gives exactly what the whole-packet
    /// path gives for the IP packet that carries each, and its verify finds each ID.
    #[test]
    fn a_reused_header_memo_equals_the_whole_packet_icrc() {
        let mut memo = HeaderMemo::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..400u32 {
            let v6 = round % 5 == 4;
            let (src, dst) = if v6 {
                let a = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 1 + (round % 3) as u16);
                (IpAddr::V6(a), IpAddr::V6(Ipv6Addr::LOCALHOST))
            } else {
                let a = Ipv4Addr::new(127, 0, 0, 1 + (round % 3) as u8);
                (IpAddr::V4(a), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)))
            };
            let flow = Flow {
                src,
                dst,
                src_port: 49152 + (round % 2) as u16,
                dst_port: ROCE_V2_PORT,
            };
            let len = 12 + 4 * (3 + (next() % 40) as usize) + 4;
            let mut roce: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let df = round % 7 != 3;
            // A train: the same headers, consecutive IDs, PSNs and AckReq bits varying.
            let base_id = next() as u16;
            for seg in 0..6u16 {
                let ident = Ipv4Ident {
                    id: base_id.wrapping_add(seg),
                    dont_fragment: df,
                };
                roce[8] = (next() as u8) & 0x80;
                roce[9..12].copy_from_slice(&(next() as u32).to_be_bytes()[1..]);
                let got = memo.compute_udp(&flow, ident, &roce).unwrap();
                let parts = memo
                    .compute_udp_parts(&flow, ident, &[&roce[..20], &roce[20..len - 4]])
                    .unwrap();
                assert_eq!(parts, got, "round {round} segment {seg}: parts");
                // The same packet behind a real IP header, through `compute`.
                let mut ip = Vec::new();
                let udp_len = (8 + len) as u16;
                match (src, dst) {
                    (IpAddr::V4(s4), IpAddr::V4(d4)) => {
                        ip.extend_from_slice(&[0x45, 0x10]);
                        ip.extend_from_slice(&(20 + udp_len).to_be_bytes());
                        ip.extend_from_slice(&ident.id.to_be_bytes());
                        ip.extend_from_slice(&(if df { IPV4_DF } else { 0 }).to_be_bytes());
                        ip.extend_from_slice(&[64, 17, 0x12, 0x34]);
                        ip.extend_from_slice(&s4.octets());
                        ip.extend_from_slice(&d4.octets());
                    }
                    (IpAddr::V6(s6), IpAddr::V6(d6)) => {
                        ip.extend_from_slice(&[0x60, 0x01, 0x23, 0x45]);
                        ip.extend_from_slice(&udp_len.to_be_bytes());
                        ip.extend_from_slice(&[17, 64]);
                        ip.extend_from_slice(&s6.octets());
                        ip.extend_from_slice(&d6.octets());
                    }
                    _ => unreachable!(),
                }
                ip.extend_from_slice(&flow.src_port.to_be_bytes());
                ip.extend_from_slice(&flow.dst_port.to_be_bytes());
                ip.extend_from_slice(&udp_len.to_be_bytes());
                ip.extend_from_slice(&[0xab, 0xcd]);
                ip.extend_from_slice(&roce);
                assert_eq!(compute(&ip).unwrap(), got, "round {round} segment {seg}");
                // Sealed, the memo's verify recovers the header.
                roce[len - 4..].copy_from_slice(&got.to_le_bytes());
                let want = Verdict::Verified {
                    ipv4: (!v6).then_some(ident),
                };
                let v = memo.verify_udp(&flow, &roce).unwrap();
                if v6 || df {
                    assert_eq!(v, want, "round {round} segment {seg}: verify");
                } else {
                    // DF clear: DF set is tried first, and may solve with another ID.
                    assert!(v.is_verified(), "round {round} segment {seg}: verify");
                }
            }
        }
    }

    #[test]
    fn our_ipv4_sender_is_verifiable() {
        // Build a CM-sized UD packet the way softrdma sends it and check that the ICRC over
        // an IP header with ID 0 and DF is what a header-aware receiver computes.
        let flow = Flow {
            src: IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 77, 0, 10)),
            src_port: 4791,
            dst_port: ROCE_V2_PORT,
        };
        let mut roce = vec![0u8; 12 + 8 + 256 + 4];
        roce[..12].copy_from_slice(&[0x64, 0, 0xff, 0xff, 0, 0, 0, 1, 0x80, 0, 0, 0]);
        let icrc = seal_udp(&flow, &mut roce).unwrap();
        assert_eq!(stored(&roce).unwrap(), icrc);
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 77, 0, 1, 10, 77, 0, 10, 0x12, 0xb7,
            0x12, 0xb7, 0, 0, 0, 0,
        ];
        let total = (ip.len() + roce.len()) as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[24..26].copy_from_slice(&((8 + roce.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&roce);
        assert!(verify(&ip).unwrap());
        assert_eq!(
            verify_udp(&flow, &roce).unwrap(),
            Verdict::Verified {
                ipv4: Some(Ipv4Ident::LINUX_UNCONNECTED_DF)
            }
        );
        assert_eq!(solve_ipv4_id(&flow, true, &roce).unwrap(), Some(0));
        let v6 = Flow {
            src: IpAddr::V6(Ipv6Addr::LOCALHOST),
            dst: IpAddr::V6(Ipv6Addr::LOCALHOST),
            ..flow
        };
        assert!(solve_ipv4_id(&v6, true, &roce).is_err());
        // Without DF the solver still finds the header (second hypothesis).
        let icrc = compute_udp(
            &flow,
            Ipv4Ident {
                id: 0xbeef,
                dont_fragment: false,
            },
            &roce,
        )
        .unwrap();
        let n = roce.len();
        roce[n - 4..].copy_from_slice(&icrc.to_le_bytes());
        assert_eq!(
            verify_udp(&flow, &roce).unwrap(),
            Verdict::Verified {
                ipv4: Some(Ipv4Ident {
                    id: 0xbeef,
                    dont_fragment: false
                })
            }
        );
    }

    /// The lab's host program received 9 CM MADs from the guest's rxe on a UDP socket;
    /// `h_host_rx.pcap` holds them with IP headers rebuilt from `recvfrom` (IDs 1..9), so the
    /// stored ICRCs do not match those headers. From the UDP payloads alone, the solver finds
    /// exactly the IDs the kernel put on the wire, which `h_host_req.pcap` captured.
    #[test]
    fn solver_recovers_wire_ids_from_socket_data() {
        let rx = pcap::ALL.iter().find(|(n, _)| *n == "h_host_rx").unwrap().1;
        let wire_ids = [
            0xfcb6u16, 0x013b, 0x0316, 0x0563, 0x0780, 0x07f0, 0x0809, 0x0a02, 0x0d36,
        ];
        let pkts = pcap::roce_packets(rx);
        assert_eq!(pkts.len(), wire_ids.len());
        for ((n, ip, udp), want) in pkts.into_iter().zip(wire_ids) {
            assert!(!verify(ip).unwrap(), "frame {n}: rebuilt header");
            let (flow, _, _) = flow_of(ip).unwrap();
            assert_eq!(
                verify_udp(&flow, udp).unwrap(),
                Verdict::Verified {
                    ipv4: Some(Ipv4Ident {
                        id: want,
                        dont_fragment: true
                    })
                },
                "frame {n}"
            );
        }
    }

    /// The solver's false-accept rate: flipping payload bits of a good packet is caught
    /// except at about 2 × 2^-16 (two DF hypotheses).
    #[test]
    fn corruption_is_rejected_by_the_id_solver() {
        let (_, ip, udp) = pcap::roce_packets(pcap::G_TOOLS)[200];
        let (flow, _, _) = flow_of(ip).unwrap();
        let mut accepted = 0;
        let trials = 20_000;
        let mut s: u32 = 12345;
        for _ in 0..trials {
            s = s.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let mut bad = udp.to_vec();
            let i = 12 + (s as usize >> 8) % (bad.len() - 16);
            bad[i] ^= 1 << (s % 8) | 0x10;
            if verify_udp(&flow, &bad).unwrap().is_verified() {
                accepted += 1;
            }
        }
        assert!(accepted <= 3, "{accepted} of {trials} corruptions accepted");
    }

    /// IPv6 vectors, derived independently of this code: built with scapy 2.8.0
    /// (`scapy.contrib.roce`, whose `BTH.compute_icrc` masks the IPv6 traffic class, flow
    /// label and hop limit and stores the CRC little-endian) from
    /// `IPv6(src, dst, tc, fl, hlim)/UDP(sport, dport=4791)/BTH(...)/payload`, printed with
    /// `raw(p).hex()`. Traffic class, flow label and hop limit are non-zero where possible
    /// so that the masking matters.
    const IPV6_VECTORS: &[(&str, &str)] = &[
        // IPv6(src="fd00:77::a", dst="fd00:77::b", tc=0x68, fl=0x98adf, hlim=64)
        // /UDP(sport=55410, dport=4791, chksum=0)
        // /BTH(opcode=0x64, pkey=0xffff, dqpn=1, ackreq=1, psn=3)
        // /Raw(DETH(qkey=0x80010000, srcqp=1) + bytes(range(256)))
        ("ud_send_only", "66898adf01201140fd00007700000000000000000000000afd00007700000000000000000000000bd87212b7012000006400ffff00000001800000038001000000000001000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff42e47f80"),
        // IPv6(src="2001:db8::1", dst="2001:db8::2", tc=0, fl=0x12345, hlim=255)
        // /UDP(sport=51961, dport=4791, chksum=0x1234)
        // /BTH(opcode=0x11, pkey=0xffff, dqpn=0x11, psn=0xfffffe)/AETH(syndrome=0x1f, msn=5)
        ("rc_ack", "60012345001c11ff20010db800000000000000000000000120010db8000000000000000000000002caf912b7001c12341100ffff0000001100fffffe1f000005bd937656"),
        // IPv6(src="fe80::5054:ff:fe77:a", dst="fe80::5054:ff:fe77:b", fl=1, hlim=1)
        // /UDP(sport=0xc000, dport=4791)   (scapy fills a real UDP checksum)
        // /BTH(opcode=0x04, padcount=3, fecn=1, becn=1, pkey=0x8001, dqpn=0xabcdef,
        //      ackreq=1, psn=7)/Raw(b"hello\0\0\0")
        ("rc_send_only_pad", "6000000100201101fe80000000000000505400fffe77000afe80000000000000505400fffe77000bc00012b70020c7eb04308001c0abcdef8000000768656c6c6f0000006fea81cc"),
    ];

    #[test]
    fn ipv6_vectors_from_scapy() {
        for (name, h) in IPV6_VECTORS {
            let ip = hex(h);
            assert!(verify(&ip).unwrap(), "{name}");
            let (flow, _, roce) = flow_of(&ip).unwrap();
            assert!(matches!(flow.src, IpAddr::V6(_)));
            assert_eq!(
                verify_udp(&flow, roce).unwrap(),
                Verdict::Verified { ipv4: None },
                "{name}"
            );
            let mut copy = ip.clone();
            copy[1] ^= 0x0f; // flow label / traffic class: masked
            copy[7] = 9; // hop limit: masked
            assert!(verify(&copy).unwrap(), "{name}");
            copy[20] ^= 1; // source address: covered
            assert!(!verify(&copy).unwrap(), "{name}");
            let mut bad = roce.to_vec();
            let n = bad.len();
            bad[n - 5] ^= 0x80;
            assert_eq!(verify_udp(&flow, &bad).unwrap(), Verdict::Mismatch);
            // And the sender path reproduces scapy's ICRC.
            let mut sealed = roce.to_vec();
            sealed[n - 4..].fill(0);
            seal_udp(&flow, &mut sealed).unwrap();
            assert_eq!(sealed, roce, "{name}");
            // The RoCE part parses.
            let r = crate::roce::RoceRepr::parse(roce).unwrap();
            assert_eq!(r.to_bytes(), roce);
        }
        let v = hex(IPV6_VECTORS[2].1);
        let r = crate::roce::RoceRepr::parse(flow_of(&v).unwrap().2).unwrap();
        assert_eq!(r.payload, b"hello");
        assert_eq!(r.bth.resv8a, 0xc0);
    }

    #[test]
    fn malformed_ip_never_panics() {
        let (_, ip, _) = pcap::roce_packets(pcap::B_RPING)[0];
        for n in 0..ip.len() {
            let _ = verify(&ip[..n]);
            let _ = compute(&ip[..n]);
            let _ = stored_in(&ip[..n]);
            let mut c = ip[..n].to_vec();
            let _ = fill(&mut c);
        }
        let v6 = hex(IPV6_VECTORS[1].1);
        for n in 0..v6.len() {
            assert!(verify(&v6[..n]).is_err());
        }
        // Options, fragments, other protocols, other versions: typed errors.
        let mut opt = ip.to_vec();
        opt[0] = 0x46;
        assert!(matches!(
            verify(&opt),
            Err(Error::Unsupported {
                what: "icrc.ipv4_ihl",
                ..
            })
        ));
        let mut frag = ip.to_vec();
        frag[6] |= 0x20;
        assert!(matches!(
            verify(&frag),
            Err(Error::Unsupported {
                what: "icrc.ipv4_flags",
                ..
            })
        ));
        let mut tcp = ip.to_vec();
        tcp[9] = 6;
        assert!(matches!(
            verify(&tcp),
            Err(Error::Unsupported {
                what: "icrc.ip_protocol",
                ..
            })
        ));
        assert!(matches!(
            verify(&[0x50; 40]),
            Err(Error::Unsupported { .. })
        ));
        let mut short_udp = ip.to_vec();
        short_udp[24..26].copy_from_slice(&[0, 3]);
        assert!(matches!(verify(&short_udp), Err(Error::BadLength { .. })));
        // UDP payloads too short for a BTH + ICRC, mixed address families.
        let flow4 = Flow {
            src: IpAddr::V4(Ipv4Addr::LOCALHOST),
            dst: IpAddr::V4(Ipv4Addr::LOCALHOST),
            src_port: 1,
            dst_port: ROCE_V2_PORT,
        };
        for n in 0..16 {
            assert!(verify_udp(&flow4, &vec![0; n]).is_err());
            assert!(seal_udp(&flow4, &mut vec![0; n]).is_err());
        }
        let mixed = Flow {
            dst: IpAddr::V6(Ipv6Addr::LOCALHOST),
            ..flow4
        };
        assert!(compute_udp(&mixed, Ipv4Ident::default(), &[0; 20]).is_err());
        assert!(verify_udp(&mixed, &[0; 20]).is_err());
        assert!(compute_udp(&flow4, Ipv4Ident::default(), &vec![0; 70_000]).is_err());
    }
}
