//! The data pattern of verified workloads (`softrdma srp bench --verify`, the simulation
//! tests): every 512-byte sector says where it belongs and which write put it there, so a
//! read can tell a right block from a stale, misplaced, torn or corrupted one.
//!
//! Sector layout: `"SRPV"` magic (4 bytes), a checksum of the rest (4), the sector's byte
//! offset on the LUN (8), the generation (8, the write's number), then 488 bytes of filler
//! drawn from (offset, generation). All big-endian.

pub const SECTOR: usize = 512;
const MAGIC: &[u8; 4] = b"SRPV";

/// What a sector held that it should not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// Never written by a verified workload (no magic): zeroes, or foreign data.
    NotWritten { offset: u64 },
    /// The header names another place: a misdirected read or write.
    WrongOffset { offset: u64, found: u64 },
    /// The filler does not match the header: corrupted or torn.
    Corrupt { offset: u64 },
    /// A well-formed sector of another write than the one expected: lost or stale.
    WrongGeneration {
        offset: u64,
        expected: u64,
        found: u64,
    },
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::NotWritten { offset } => {
                write!(f, "sector at byte {offset}: not written by this workload")
            }
            Mismatch::WrongOffset { offset, found } => write!(
                f,
                "sector at byte {offset}: holds the sector of byte {found} (misplaced)"
            ),
            Mismatch::Corrupt { offset } => write!(f, "sector at byte {offset}: corrupted"),
            Mismatch::WrongGeneration {
                offset,
                expected,
                found,
            } => write!(
                f,
                "sector at byte {offset}: generation {found}, expected {expected} (lost or stale write)"
            ),
        }
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn filler(offset: u64, generation: u64, out: &mut [u8]) {
    let mut s = mix(offset ^ generation.rotate_left(32) ^ 0x5352_5056);
    for c in out.chunks_mut(8) {
        s = mix(s.wrapping_add(0x9e37_79b9_7f4a_7c15));
        let b = s.to_be_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
}

fn checksum(b: &[u8]) -> u32 {
    // FNV-1a over everything after the checksum field.
    let mut h: u32 = 0x811c_9dc5;
    for &x in b {
        h ^= u32::from(x);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Fills `buf` (a whole number of sectors) as the data of generation `generation` at byte
/// `offset` of the LUN.
pub fn fill(buf: &mut [u8], offset: u64, generation: u64) {
    for (i, s) in buf.chunks_mut(SECTOR).enumerate() {
        let off = offset + (i * SECTOR) as u64;
        s[..4].copy_from_slice(MAGIC);
        s[8..16].copy_from_slice(&off.to_be_bytes());
        s[16..24].copy_from_slice(&generation.to_be_bytes());
        filler(off, generation, &mut s[24..]);
        let c = checksum(&s[8..]);
        s[4..8].copy_from_slice(&c.to_be_bytes());
    }
}

/// Reads the generation of one sector that should be at byte `offset`.
pub fn sector_generation(s: &[u8], offset: u64) -> Result<u64, Mismatch> {
    if s.len() < SECTOR || &s[..4] != MAGIC {
        return Err(Mismatch::NotWritten { offset });
    }
    let found = u64::from_be_bytes(s[8..16].try_into().unwrap_or([0; 8]));
    let c = u32::from_be_bytes(s[4..8].try_into().unwrap_or([0; 4]));
    if c != checksum(&s[8..SECTOR]) {
        return Err(Mismatch::Corrupt { offset });
    }
    if found != offset {
        return Err(Mismatch::WrongOffset { offset, found });
    }
    let g = u64::from_be_bytes(s[16..24].try_into().unwrap_or([0; 8]));
    let mut want = [0u8; SECTOR - 24];
    filler(offset, g, &mut want);
    if want[..] != s[24..SECTOR] {
        return Err(Mismatch::Corrupt { offset });
    }
    Ok(g)
}

/// Checks `buf` read from byte `offset` against the generations `expected(sector offset)`
/// says were last written there (`None`: never written: any content is accepted).
pub fn check(
    buf: &[u8],
    offset: u64,
    mut expected: impl FnMut(u64) -> Option<u64>,
) -> Result<(), Mismatch> {
    for (i, s) in buf.chunks(SECTOR).enumerate() {
        let off = offset + (i * SECTOR) as u64;
        let Some(want) = expected(off) else { continue };
        let g = sector_generation(s, off)?;
        if g != want {
            return Err(Mismatch::WrongGeneration {
                offset: off,
                expected: want,
                found: g,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_kind_of_wrong() {
        let mut b = vec![0u8; 4 * SECTOR];
        fill(&mut b, 8192, 7);
        assert_eq!(check(&b, 8192, |_| Some(7)), Ok(()));
        assert_eq!(
            check(&b, 8192, |o| (o == 8192 + 512).then_some(8)),
            Err(Mismatch::WrongGeneration {
                offset: 8704,
                expected: 8,
                found: 7
            })
        );
        assert_eq!(
            check(&b, 0, |_| Some(7)),
            Err(Mismatch::WrongOffset {
                offset: 0,
                found: 8192
            })
        );
        let mut c = b.clone();
        c[SECTOR + 100] ^= 1;
        assert_eq!(
            check(&c, 8192, |_| Some(7)),
            Err(Mismatch::Corrupt { offset: 8704 })
        );
        assert_eq!(
            check(&[0u8; SECTOR], 0, |_| Some(1)),
            Err(Mismatch::NotWritten { offset: 0 })
        );
        assert_eq!(check(&[0u8; SECTOR], 0, |_| None), Ok(()));
    }
}
