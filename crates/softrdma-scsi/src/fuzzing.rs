//! Fuzz body for the target core, shared by the cargo-fuzz target `scsi_target`
//! (`fuzz/fuzz_targets/scsi_target.rs`) and the stable test that replays its committed
//! corpus (`tests/fuzz_corpus.rs`), as `softrdma_wire::fuzzing` does for the parsers.
//!
//! [`target`] builds a [`Target`] with a writable LUN 0 (64 blocks), a read-only LUN 1
//! (8 × 4096 bytes) and two nexuses, then feeds it the commands and task management
//! functions the input describes. It must never panic, and every response must be
//! consistent: sense data exactly with CHECK CONDITION, no data-in beyond the transfer
//! length, residuals that add up to the expected length.
//!
//! # Input format
//!
//! Byte 0: setup (bit 0: LUN 0 has 4096-byte blocks; bit 1: LUN 0 has a write cache;
//! bit 2: no LUN 0, so the virtual LUN 0 answers; bit 3: no power-on unit attentions;
//! bits 4–5: the LUN RESET unit attention policy; bit 6: LUN 0's medium is lent, so its
//! READs and WRITEs run in place and every placement must lie inside it). Then records of
//! `sel, len_lo, len_hi, cdb_len, cdb[cdb_len % 49]` (a short last record takes what is left),
//! at most [`MAX_RECORDS`]:
//!
//! | `sel` bits | meaning |
//! |-----------|---------|
//! | 0–1 | LUN: 0, 1, 2 (missing), 0x4000 (missing) |
//! | 2–3 | direction of the initiator's buffers: none, in, out, in |
//! | 4 | sent on the second nexus |
//! | 5 | a task management function instead (`cdb[0] % 8` the function, `cdb[1]` the tag) |
//! | 6 | first unregister (or re-register) the second nexus |
//! | 7 | record the command as a task in flight (tag `cdb_len`); if that tag is in flight already, finish it instead |
//!
//! `len` is the expected data transfer length; the data-out is `len` bytes of a pattern,
//! led by the record's bytes past the CDB length the opcode implies (so an UNMAP parameter
//! list, or the blocks a COMPARE AND WRITE compares, can come from the input).

use softrdma_wire::scsi::{ScsiOpcode, ScsiStatus, SenseRepr};

use crate::store::Memory;

use crate::{
    BackingStore, BlockSize, Cmd, Data, DataDir, Decoded, InPlace, InitiatorId, LogicalUnit,
    LunConfig, LunId, LunResetUa, MemStore, NexusId, Residual, Response, StoreError, Target,
    TargetConfig, TmfKind,
};

/// Records past this are ignored.
pub const MAX_RECORDS: usize = 64;

/// A memory store with a (pretend) volatile write cache, to reach the FUA paths.
struct CachedMem(MemStore);

impl BackingStore for CachedMem {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn block_size(&self) -> BlockSize {
        self.0.block_size()
    }
    fn read_only(&self) -> bool {
        false
    }
    fn write_cache(&self) -> bool {
        true
    }
    fn non_rotational(&self) -> bool {
        true
    }
    fn product(&self) -> &str {
        "FILEIO"
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> Result<(), StoreError> {
        self.0.write_at(offset, buf)
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

fn setup(flags: u8) -> (Target, NexusId, NexusId) {
    let policy = match (flags >> 4) & 3 {
        0 => LunResetUa::AllNexuses,
        1 => LunResetUa::OtherNexuses,
        _ => LunResetUa::IssuingNexus,
    };
    let mut t = Target::new(TargetConfig {
        power_on_ua: flags & 8 == 0,
        lun_reset_ua: policy,
        ..TargetConfig::default()
    });
    let config = LunConfig {
        unit_serial: Some("6001405f0e1d2c3b".into()),
        max_transfer_bytes: 64 * 1024,
        ..LunConfig::default()
    };
    if flags & 4 == 0 {
        let bs = if flags & 1 != 0 {
            BlockSize::B4096
        } else {
            BlockSize::B512
        };
        let mem = MemStore::new(64 * u64::from(bs.bytes()), bs).unwrap_or_else(|e| panic!("{e}"));
        let store: Box<dyn BackingStore + Send> = if flags & 2 != 0 {
            Box::new(CachedMem(mem))
        } else {
            Box::new(mem)
        };
        t.add_lun(LunId(0), LogicalUnit::new(store, config.clone()))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let ro = MemStore::new(8 * 4096, BlockSize::B4096)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_read_only();
    t.add_lun(LunId(1), LogicalUnit::new(Box::new(ro), config))
        .unwrap_or_else(|e| panic!("{e}"));
    let a = t.register_nexus(InitiatorId(0xa));
    let b = t.register_nexus(InitiatorId(0xb));
    (t, a, b)
}

/// A READ or WRITE on LUN 0's lent medium, as a transport runs it: the placement must lie
/// inside the medium; the data moves there; the response has the length `execute` gives.
fn in_place(t: &mut Target, cmd: &Cmd, medium: &mut [u8]) -> Option<Response> {
    match t.start_in_place(cmd).unwrap_or_else(|e| panic!("{e}")) {
        InPlace::No => None,
        InPlace::Done(r) => {
            assert_eq!(r.status, ScsiStatus::CHECK_CONDITION);
            Some(r)
        }
        InPlace::Go(p) => {
            assert_eq!(p.lun, cmd.lun());
            assert_eq!(p.len, cmd.transfer_len());
            let end = p.offset + u64::from(p.len);
            assert!(end <= medium.len() as u64, "{p:?} outside the medium");
            let range = p.offset as usize..end as usize;
            if cmd.data_dir() == DataDir::Out {
                for (i, b) in medium[range].iter_mut().enumerate() {
                    *b = i as u8;
                }
            }
            let r = t.finish_in_place(cmd).unwrap_or_else(|e| panic!("{e}"));
            let want = if cmd.data_dir() == DataDir::In {
                p.len
            } else {
                0
            };
            assert!(r.status != ScsiStatus::GOOD || r.data_len == want);
            Some(r)
        }
    }
}

/// One command through decode and execute, checking the response.
fn command(
    t: &mut Target,
    medium: &mut Option<Memory>,
    n: NexusId,
    lun: LunId,
    cdb: &[u8],
    dir: DataDir,
    expected: u32,
) {
    let rsp = match t.decode(n, lun, cdb, dir, expected) {
        Ok(Decoded::Done(r)) => {
            assert!(
                r.status == ScsiStatus::CHECK_CONDITION
                    || r.status == ScsiStatus::RESERVATION_CONFLICT
            );
            assert_eq!(r.data_len, 0);
            r
        }
        Ok(Decoded::Ready(cmd)) => {
            let len = cmd.transfer_len() as usize;
            if dir == DataDir::None {
                assert_eq!(len, 0);
            }
            assert!(len as u64 <= u64::from(expected));
            let placed = match medium {
                Some(m) if cmd.lun() == LunId(0) => in_place(t, &cmd, m),
                _ => None,
            };
            let r = match (placed, cmd.data_dir()) {
                (Some(r), _) => r,
                (None, DataDir::In) => {
                    let mut buf = vec![0u8; len];
                    let r = t
                        .execute(&cmd, Data::In(&mut buf))
                        .unwrap_or_else(|e| panic!("{e}"));
                    assert!(r.data_len as usize <= len);
                    if r.status == ScsiStatus::GOOD {
                        match r.residual {
                            Residual::Underflow(u) => {
                                assert_eq!(
                                    u64::from(r.data_len) + u64::from(u),
                                    u64::from(expected)
                                )
                            }
                            Residual::None => assert_eq!(r.data_len, expected),
                            Residual::Overflow(o) => {
                                assert!(o > 0);
                                assert_eq!(r.data_len, expected);
                            }
                        }
                    }
                    r
                }
                (None, DataDir::Out) => {
                    let mut data: Vec<u8> = (0..len).map(|i| (i as u8) ^ cdb.len() as u8).collect();
                    // The record's bytes past the opcode's CDB length lead the data-out (an
                    // UNMAP parameter list, a COMPARE AND WRITE's blocks).
                    let op_len = cdb
                        .first()
                        .and_then(|o| ScsiOpcode(*o).cdb_len())
                        .unwrap_or(cdb.len());
                    if let Some(extra) = cdb.get(op_len..) {
                        let n = extra.len().min(data.len());
                        data[..n].copy_from_slice(&extra[..n]);
                    }
                    match medium {
                        // UNMAP, WRITE SAME, COMPARE AND WRITE on the lent medium.
                        Some(m) if t.needs_medium(&cmd) => {
                            t.execute_on_medium(&cmd, Data::Out(&data), m)
                        }
                        _ => t.execute(&cmd, Data::Out(&data)),
                    }
                    .unwrap_or_else(|e| panic!("{e}"))
                }
                (None, DataDir::None) => match medium {
                    Some(m) if t.needs_medium(&cmd) => t.execute_on_medium(&cmd, Data::None, m),
                    _ => t.execute(&cmd, Data::None),
                }
                .unwrap_or_else(|e| panic!("{e}")),
            };
            if cmd.data_dir() != DataDir::In {
                assert_eq!(r.data_len, 0);
            }
            r
        }
        Err(e) => panic!("{e}"),
    };
    match rsp.sense {
        Some(s) => {
            assert_eq!(rsp.status, ScsiStatus::CHECK_CONDITION);
            assert_eq!(rsp.data_len, 0);
            let p = SenseRepr::parse(&s.to_fixed()).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!((p.sense_key(), p.asc_ascq()), (s.key, s.asc_ascq));
        }
        None => assert!(
            rsp.status == ScsiStatus::GOOD || rsp.status == ScsiStatus::RESERVATION_CONFLICT
        ),
    }
}

/// The fuzz body.
pub fn target(data: &[u8]) {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let (mut t, a, mut b) = setup(flags);
    // LUN 0's medium lent to the "transport": READ and WRITE run in place.
    let mut medium = if flags & 0x40 != 0 {
        t.lend_medium(LunId(0)).ok()
    } else {
        None
    };
    let mut b_registered = true;
    for _ in 0..MAX_RECORDS {
        if rest.len() < 4 {
            break;
        }
        let (sel, expected, cdb_len) = (
            rest[0],
            u32::from(u16::from_le_bytes([rest[1], rest[2]])),
            usize::from(rest[3] % 49),
        );
        rest = &rest[4..];
        let cdb = &rest[..cdb_len.min(rest.len())];
        rest = &rest[cdb.len()..];
        if sel & 0x40 != 0 {
            if b_registered {
                let gone = t.unregister_nexus(b).unwrap_or_else(|e| panic!("{e}"));
                assert!(gone.iter().all(|g| g.nexus == b));
            } else {
                b = t.register_nexus(InitiatorId(0xb));
            }
            b_registered = !b_registered;
        }
        let n = if sel & 0x10 != 0 { b } else { a };
        if n == b && !b_registered {
            assert!(t.decode(n, LunId(0), cdb, DataDir::None, 0).is_err());
            continue;
        }
        let lun = match sel & 3 {
            0 => LunId(0),
            1 => LunId(1),
            2 => LunId(2),
            _ => LunId(0x4000),
        };
        let dir = match (sel >> 2) & 3 {
            0 => DataDir::None,
            2 => DataDir::Out,
            _ => DataDir::In,
        };
        if sel & 0x20 != 0 {
            let f = cdb.first().copied().unwrap_or(0);
            let tag = u64::from(cdb.get(1).copied().unwrap_or(0));
            let kind = match f % 8 {
                0 => TmfKind::AbortTask(tag),
                1 => TmfKind::AbortTaskSet,
                2 => TmfKind::ClearAca,
                3 => TmfKind::ClearTaskSet,
                4 => TmfKind::LunReset,
                5 => TmfKind::TargetWarmReset,
                6 => TmfKind::TargetColdReset,
                _ => TmfKind::Unknown(f),
            };
            let before = t.tasks_in_flight();
            let o = t
                .task_management(n, lun, kind)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(t.tasks_in_flight() + o.aborted.len(), before);
            for x in &o.aborted {
                assert!(!t.task_in_flight(x.nexus, x.tag));
            }
            continue;
        }
        let tag = cdb_len as u64;
        if sel & 0x80 != 0 && t.task_started(n, lun, tag).is_err() {
            assert!(t.task_finished(n, tag));
        }
        command(&mut t, &mut medium, n, lun, cdb, dir, expected);
    }
}

/// Seed inputs for the corpus (`tests/fuzz_corpus.rs` writes them with
/// `FUZZ_SEED_CORPUS=1`): sequences of well-formed commands, so the fuzzer starts from the
/// paths an initiator takes.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    // (sel, expected, cdb)
    type Rec = (u8, u16, Vec<u8>);
    let rec = |v: &[Rec]| {
        let mut out = Vec::new();
        for (sel, exp, cdb) in v {
            out.push(*sel);
            out.extend_from_slice(&exp.to_le_bytes());
            out.push(cdb.len() as u8);
            out.extend_from_slice(cdb);
        }
        out
    };
    let tur = vec![0u8; 6];
    let inq = |evpd: u8, page: u8, len: u8| vec![0x12, evpd, page, 0, len, 0];
    let r10 = |op: u8, b1: u8, lba: u8, n: u8| vec![op, b1, 0, 0, 0, lba, 0, 0, n, 0];
    let r16 = |op: u8, lba: u8, n: u8| {
        let mut c = vec![0u8; 16];
        c[0] = op;
        c[9] = lba;
        c[13] = n;
        c
    };
    const IN: u8 = 0x04;
    const OUT: u8 = 0x08;
    let mut cap16 = vec![0u8; 16];
    cap16[0] = 0x9e;
    cap16[1] = 0x10;
    cap16[13] = 32;
    let mut luns = vec![0u8; 12];
    luns[0] = 0xa0;
    luns[8] = 0x10;
    // PERSISTENT RESERVE OUT with its 24-byte parameter list after the CDB (the data-out
    // comes from the record's bytes past the CDB), and PERSISTENT RESERVE IN.
    let pr_out = |sa: u8, ty: u8, key: u64, sa_key: u64| {
        let mut c = vec![0x5f, sa, ty, 0, 0, 0, 0, 0, 24, 0];
        c.extend_from_slice(&key.to_be_bytes());
        c.extend_from_slice(&sa_key.to_be_bytes());
        c.extend_from_slice(&[0; 8]);
        c
    };
    let pr_in = |sa: u8, len: u8| vec![0x5e, sa, 0, 0, 0, 0, 0, 0, len, 0];
    let mut seeds = vec![
        (
            "login-scan",
            rec(&[
                (0, 0, tur.clone()),
                (IN, 36, inq(0, 0, 36)),
                (IN, 4096, luns.clone()),
                (IN, 255, inq(1, 0x00, 255)),
                (IN, 255, inq(1, 0x80, 255)),
                (IN, 255, inq(1, 0x83, 255)),
                (IN, 64, inq(1, 0xb0, 64)),
                (IN, 64, inq(1, 0xb1, 64)),
                (IN, 8, vec![0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
                (IN, 32, cap16),
                (IN, 255, vec![0x1a, 0, 0x3f, 0, 255, 0]),
                (IN, 32, vec![0x1a, 0x08, 0x08, 0, 32, 0]),
                (IN | 1, 36, inq(0, 0, 36)),
            ]),
        ),
        (
            "read-write",
            rec(&[
                (0, 0, tur.clone()),
                (OUT, 1024, r10(0x2a, 0, 3, 2)),
                (IN, 1024, r10(0x28, 0, 3, 2)),
                (OUT, 512, vec![0x0a, 0, 0, 9, 1, 0]),
                (IN, 512, vec![0x08, 0, 0, 9, 1, 0]),
                (OUT | 0x80, 512, r16(0x8a, 1, 1)),
                (IN | 0x80, 512, r16(0x88, 1, 1)),
                (OUT, 512, vec![0xaa, 0, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0]),
                (IN, 512, vec![0xa8, 0, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0]),
                (OUT, 512, r10(0x2e, 0x02, 5, 1)),
                (0, 0, r10(0x2f, 0, 0, 8)),
                (0, 0, r10(0x35, 0, 0, 0)),
                (OUT | 1, 4096, r10(0x2a, 0, 0, 1)),
                (IN, 1000, r10(0x28, 0, 0, 4)),
            ]),
        ),
        (
            "mode-sense-select-sense",
            rec(&[
                (IN, 18, vec![0x03, 0, 0, 0, 18, 0]),
                (IN, 255, vec![0x1a, 0x08, 0x08, 0, 255, 0]),
                (OUT, 24, vec![0x15, 0x10, 0, 0, 24, 0]),
                (IN, 0x100, vec![0x5a, 0x10, 0x3f, 0, 0, 0, 0, 1, 0, 0]),
                (0, 0, vec![0x1b, 1, 0, 0, 1, 0]),
                (IN, 16, vec![0x4d, 0, 0, 0, 0, 0, 0, 0, 16, 0]),
            ]),
        ),
        (
            "provisioning",
            rec(&[
                (0, 0, tur.clone()),
                (IN, 64, inq(1, 0xb0, 64)),
                (IN, 64, inq(1, 0xb2, 64)),
                (OUT, 2048, r10(0x2a, 0, 0, 4)),
                // UNMAP of blocks 1..3: the CDB, then the parameter list's header and one
                // descriptor (its last two reserved bytes from the pattern).
                (OUT, 24, {
                    let mut c = vec![0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0];
                    c.extend_from_slice(&[0, 22, 0, 16, 0, 0, 0, 0]);
                    c.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0]);
                    c
                }),
                // WRITE SAME(10) of 4 blocks, WRITE SAME(16) with UNMAP of 2.
                (OUT, 512, r10(0x41, 0, 8, 4)),
                (OUT, 512, {
                    let mut c = r16(0x93, 12, 0);
                    c[1] = 0x08;
                    c[13] = 2;
                    c
                }),
                // COMPARE AND WRITE of one block (compare, then write).
                (OUT, 1024, {
                    let mut c = r16(0x89, 8, 0);
                    c[13] = 1;
                    c
                }),
                (0, 0, vec![0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
                (OUT | 1, 24, vec![0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0]),
            ]),
        ),
        (
            // Two nexuses register, the first reserves (write exclusive), the second's WRITE
            // conflicts and its READ does not; READ KEYS, READ FULL STATUS; the second
            // preempts and aborts; SPC-2 RESERVE/RELEASE.
            "reservations",
            rec(&[
                (0, 0, tur.clone()),
                (0x10, 0, tur.clone()),
                (OUT, 24, pr_out(0, 0, 0, 0xaa)),
                (OUT | 0x10, 24, pr_out(6, 0, 0, 0xbb)),
                (OUT, 24, pr_out(1, 1, 0xaa, 0)),
                (OUT | 0x10, 512, r10(0x2a, 0, 0, 1)),
                (IN | 0x10, 512, r10(0x28, 0, 0, 1)),
                (IN, 64, pr_in(0, 64)),
                (IN, 64, pr_in(1, 64)),
                (IN, 8, pr_in(2, 8)),
                (IN, 255, pr_in(3, 255)),
                (0x80 | IN, 512, r10(0x28, 0, 0, 1)),
                (OUT | 0x10, 24, pr_out(5, 3, 0xbb, 0xaa)),
                (0, 0, tur.clone()),
                (OUT | 0x10, 24, pr_out(3, 0, 0xbb, 0)),
                (0, 0, vec![0x16, 0, 0, 0, 0, 0]),
                (0x10 | IN, 512, r10(0x28, 0, 0, 1)),
                (0x40, 0, Vec::new()),
                (0, 0, vec![0x17, 0, 0, 0, 0, 0]),
            ]),
        ),
        (
            "task-management",
            rec(&[
                (0x80 | IN, 512, r10(0x28, 0, 0, 1)),
                (0x80 | 0x10, 0, vec![0; 6]),
                (0x80, 0, vec![0; 7]),
                (0x20, 0, vec![0, 10]),
                (0x20 | 0x10, 0, vec![1]),
                (0x20, 0, vec![3]),
                (0x20, 0, vec![4]),
                (0x10, 0, tur.clone()),
                (0x20, 0, vec![2]),
                (0x20 | 2, 0, vec![4]),
                (0x40, 0, Vec::new()),
                (0x10, 0, tur.clone()),
                (0x40 | 0x10, 0, tur),
            ]),
        ),
    ];
    // Setup variants: 4096-byte blocks with a write cache (FUA), the virtual LUN 0, and a
    // lent LUN 0 medium (READ and WRITE in place).
    let mut out = Vec::new();
    for (name, body) in seeds.drain(..) {
        let flags: &[(u8, &str)] = match name {
            "read-write" => &[
                (0, "read-write"),
                (3, "read-write-4k-wce"),
                (0x40, "read-write-in-place"),
                (0x41, "read-write-4k-in-place"),
            ],
            "task-management" => &[(0, name), (0x40, "task-management-in-place")],
            "reservations" => &[(0, "reservations"), (0x40, "reservations-in-place")],
            "provisioning" => &[
                (0, "provisioning"),
                (3, "provisioning-4k-wce"),
                (0x40, "provisioning-in-place"),
            ],
            "login-scan" => &[(0, "login-scan"), (4 | 0x18, "login-scan-virtual-lun0")],
            _ => &[(0, name)],
        };
        for (f, n) in flags {
            let mut v = vec![*f];
            v.extend_from_slice(&body);
            out.push((*n, v));
        }
    }
    out
}

/// Fuzz body of the `pr_state` target: the APTPL state file's parser (what a file LU reads
/// back at start) must never panic, and what it accepts must write back as itself.
pub fn pr_state(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(st) = crate::pr::PrState::from_aptpl_text(&text) {
        let again = st.to_aptpl_text();
        let back = crate::pr::PrState::from_aptpl_text(&again)
            .unwrap_or_else(|e| panic!("{e}: {again:?}"));
        assert_eq!(back.to_aptpl_text(), again);
    }
}

/// Seed inputs of the `pr_state` target.
pub fn pr_state_seeds() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("empty", Vec::new()),
        (
            "registrations",
            b"softrdma-pr 1\ngeneration 7\nregister 0000000000000000505400fffe770002 1 00000000000000aa\nregister 0001020304050607505400fffe770002 2 00000000000000bb\n".to_vec(),
        ),
        (
            "reserved",
            b"softrdma-pr 1\ngeneration 3\nregister 0000000000000000505400fffe770002 1 00000000000000aa\nreserve 0000000000000000505400fffe770002 1 1\n".to_vec(),
        ),
    ]
}
