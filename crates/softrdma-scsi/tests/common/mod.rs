//! Shared test rig: a target with LUNs over memory stores, and a one-call command runner.

#![allow(dead_code, clippy::unwrap_used)]

use softrdma_scsi::*;
use softrdma_wire::scsi::{AscAscq, ScsiStatus, SenseKey};

pub const SERIAL: &str = "6001405a1b2c3d4e5f60718293a4b5c6";

/// A LUN config with a unit serial (so the VPD pages are listed).
pub fn cfg() -> LunConfig {
    LunConfig {
        unit_serial: Some(SERIAL.into()),
        ..LunConfig::default()
    }
}

pub fn mem(blocks: u64, bs: BlockSize) -> Box<MemStore> {
    Box::new(MemStore::new(blocks * u64::from(bs.bytes()), bs).unwrap())
}

/// A target with LUN 0 (64 × 512-byte blocks, writable) and LUN 1 (16 × 4096, read-only),
/// one nexus whose power-on unit attentions are already consumed.
pub fn rig() -> (Target, NexusId) {
    let mut t = Target::new(TargetConfig::default());
    t.add_lun(LunId(0), LogicalUnit::new(mem(64, BlockSize::B512), cfg()))
        .unwrap();
    let ro = LunConfig {
        read_only: true,
        ..cfg()
    };
    t.add_lun(LunId(1), LogicalUnit::new(mem(16, BlockSize::B4096), ro))
        .unwrap();
    let n = t.register_nexus(InitiatorId(1));
    clear_ua(&mut t, n);
    (t, n)
}

/// Consumes every pending unit attention of `n` (a TEST UNIT READY per LUN).
pub fn clear_ua(t: &mut Target, n: NexusId) {
    let luns: Vec<LunId> = t.lun_ids().collect();
    for l in luns {
        let _ = run(t, n, l, &[0, 0, 0, 0, 0, 0], DataDir::None, 0, &[]);
    }
}

/// Decodes and executes a command; the response and the data-in it produced.
pub fn run(
    t: &mut Target,
    n: NexusId,
    lun: LunId,
    cdb: &[u8],
    dir: DataDir,
    expected: u32,
    data_out: &[u8],
) -> (Response, Vec<u8>) {
    match t.decode(n, lun, cdb, dir, expected).unwrap() {
        Decoded::Done(r) => {
            assert_eq!(r.status, ScsiStatus::CHECK_CONDITION);
            assert_eq!(r.data_len, 0);
            (r, Vec::new())
        }
        Decoded::Ready(cmd) => {
            assert!(cmd.transfer_len() <= expected);
            let len = cmd.transfer_len() as usize;
            match cmd.data_dir() {
                DataDir::In => {
                    let mut buf = vec![0xee; len];
                    let r = t.execute(&cmd, Data::In(&mut buf)).unwrap();
                    assert!(r.data_len as usize <= len);
                    buf.truncate(r.data_len as usize);
                    (r, buf)
                }
                DataDir::Out => {
                    let r = t.execute(&cmd, Data::Out(&data_out[..len])).unwrap();
                    assert_eq!(r.data_len, 0);
                    (r, Vec::new())
                }
                DataDir::None => (t.execute(&cmd, Data::None).unwrap(), Vec::new()),
            }
        }
    }
}

/// Data-in command with the expected length equal to what the CDB allocates.
pub fn run_in(t: &mut Target, n: NexusId, lun: LunId, cdb: &[u8], len: u32) -> (Response, Vec<u8>) {
    run(t, n, lun, cdb, DataDir::In, len, &[])
}

pub fn run_none(t: &mut Target, n: NexusId, lun: LunId, cdb: &[u8]) -> Response {
    run(t, n, lun, cdb, DataDir::None, 0, &[]).0
}

pub fn run_out(t: &mut Target, n: NexusId, lun: LunId, cdb: &[u8], data: &[u8]) -> Response {
    run(t, n, lun, cdb, DataDir::Out, data.len() as u32, data).0
}

#[track_caller]
pub fn good(r: &Response) {
    assert_eq!(r.status, ScsiStatus::GOOD, "{r:?}");
    assert_eq!(r.sense, None);
}

/// CHECK CONDITION with this key and ASC/ASCQ; the 18 fixed-format sense bytes checked.
#[track_caller]
pub fn check(r: &Response, key: SenseKey, asc: AscAscq) {
    assert_eq!(r.status, ScsiStatus::CHECK_CONDITION, "{r:?}");
    assert_eq!(r.data_len, 0);
    let s = r.sense.unwrap();
    assert_eq!((s.key, s.asc_ascq), (key, asc), "{r:?}");
    let b = s.to_fixed();
    let mut want = [0u8; 18];
    want[0] = 0x70;
    want[2] = key.0;
    want[7] = 10;
    want[12] = asc.asc();
    want[13] = asc.ascq();
    assert_eq!(b, want);
}

#[track_caller]
pub fn illegal(r: &Response, asc: AscAscq) {
    check(r, SenseKey::ILLEGAL_REQUEST, asc);
}

pub fn cdb10(op: u8, b1: u8, lba: u32, len: u16) -> [u8; 10] {
    let mut c = [0u8; 10];
    c[0] = op;
    c[1] = b1;
    c[2..6].copy_from_slice(&lba.to_be_bytes());
    c[7..9].copy_from_slice(&len.to_be_bytes());
    c
}

pub fn cdb16(op: u8, b1: u8, lba: u64, len: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = op;
    c[1] = b1;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&len.to_be_bytes());
    c
}

pub fn cdb12(op: u8, b1: u8, lba: u32, len: u32) -> [u8; 12] {
    let mut c = [0u8; 12];
    c[0] = op;
    c[1] = b1;
    c[2..6].copy_from_slice(&lba.to_be_bytes());
    c[6..10].copy_from_slice(&len.to_be_bytes());
    c
}

/// A store of any size that reads zeroes and drops writes (for LUNs beyond 2^32 blocks),
/// counting flushes; optionally with a write cache, or failing every I/O.
#[derive(Debug, Default)]
pub struct NullStore {
    pub size: u64,
    pub wce: bool,
    pub fail: bool,
    pub flushes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl BackingStore for NullStore {
    fn size(&self) -> u64 {
        self.size
    }
    fn block_size(&self) -> BlockSize {
        BlockSize::B512
    }
    fn read_only(&self) -> bool {
        false
    }
    fn write_cache(&self) -> bool {
        self.wce
    }
    fn non_rotational(&self) -> bool {
        false
    }
    fn product(&self) -> &str {
        "NULLIO"
    }
    fn read_at(&self, _offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        if self.fail {
            return Err(StoreError::Io(std::io::Error::other("injected")));
        }
        buf.fill(0);
        Ok(())
    }
    fn write_at(&mut self, _offset: u64, _buf: &[u8]) -> Result<(), StoreError> {
        if self.fail {
            return Err(StoreError::Io(std::io::Error::other("injected")));
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        if self.fail {
            return Err(StoreError::Io(std::io::Error::other("injected")));
        }
        self.flushes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// A target whose only LUN (0) is `store`, the power-on UA consumed.
pub fn rig_with(store: Box<dyn BackingStore + Send>, config: LunConfig) -> (Target, NexusId) {
    let mut t = Target::new(TargetConfig::default());
    t.add_lun(LunId(0), LogicalUnit::new(store, config))
        .unwrap();
    let n = t.register_nexus(InitiatorId(1));
    clear_ua(&mut t, n);
    (t, n)
}
