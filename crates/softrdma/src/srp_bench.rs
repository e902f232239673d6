//! `softrdma srp bench`: a fio-style workload over a logged-in [`Session`]: fio's flag names
//! (`--rw read|write|randread|randwrite|randrw --bs --iodepth --runtime|--size --offset
//! --rwmixread --verify`), a progress line, fio's summary lines (`read: IOPS=…, BW=…`, latency
//! percentiles) or one JSON object.
//!
//! - Sequential workloads go through the region block after block (and around again until
//!   `--runtime` ends); random ones pick uniformly among the region's blocks, never one that
//!   has a command in flight. `--size` bounds the bytes moved, `--runtime` the time;
//!   with both, whichever comes first.
//! - `--verify`: every write writes [`softrdma_srp::verify`]'s pattern (each sector names its
//!   offset and the write's generation), every read checks each sector against the
//!   generation last written there; read workloads first lay the pattern out over the region;
//!   after a workload with writes, every block written is read back and checked.
//! - Latency is measured from submission to completion (fio's `lat`).

use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde_json::json;
use softrdma_srp::initiator::cdb;
use softrdma_srp::verify;
use softrdma_srp::{Command, Segment};
use softrdma_wire::scsi::ScsiStatus;

use crate::srp::{human, lun_info, parse_size, Session, IOVA};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Rw {
    Read,
    Write,
    Randread,
    Randwrite,
    Randrw,
}

impl Rw {
    pub fn name(self) -> &'static str {
        match self {
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::Randread => "randread",
            Rw::Randwrite => "randwrite",
            Rw::Randrw => "randrw",
        }
    }
    fn random(self) -> bool {
        matches!(self, Rw::Randread | Rw::Randwrite | Rw::Randrw)
    }
    fn reads(self) -> bool {
        matches!(self, Rw::Read | Rw::Randread | Rw::Randrw)
    }
    fn writes(self) -> bool {
        matches!(self, Rw::Write | Rw::Randwrite | Rw::Randrw)
    }
}

/// The flags (fio's names).
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    #[arg(long, default_value_t = 0)]
    pub lun: u64,
    /// read, write, randread, randwrite or randrw.
    #[arg(long, value_enum)]
    pub rw: Rw,
    /// Block size (k/m/g suffixes).
    #[arg(long, value_parser = parse_size, default_value = "4k")]
    pub bs: u64,
    /// Commands in flight.
    #[arg(long, default_value_t = 1)]
    pub iodepth: u32,
    /// Run this long (fio's --runtime with --time_based): seconds, or with a unit (500ms,
    /// 10s, 2m).
    #[arg(long, value_parser = parse_time)]
    pub runtime: Option<f64>,
    /// Move this many bytes (and the region's size; default: the LUN from --offset).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Where the region starts (k/m/g suffixes).
    #[arg(long, value_parser = parse_size, default_value = "0")]
    pub offset: u64,
    /// randrw: percentage of reads.
    #[arg(long, default_value_t = 50)]
    pub rwmixread: u32,
    /// Write a pattern encoding offset and generation; check every block read back.
    #[arg(long)]
    pub verify: bool,
    /// One JSON object instead of fio's text.
    #[arg(long)]
    pub json: bool,
}

/// A workload.
#[derive(Debug, Clone)]
pub struct Plan {
    pub lun: u64,
    pub rw: Rw,
    pub bs: u64,
    pub iodepth: u32,
    pub runtime: Option<Duration>,
    pub size: Option<u64>,
    pub offset: u64,
    pub rwmixread: u32,
    pub verify: bool,
}

/// fio's times: a number of seconds, or with `us`, `ms`, `s`, `m`, `h`.
pub fn parse_time(s: &str) -> Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s}: not a time (seconds, or 500ms, 10s, 2m)"))?;
    let mul = match unit {
        "" | "s" | "sec" => 1.0,
        "ms" | "msec" => 1e-3,
        "us" | "usec" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("{s}: unknown time unit {unit:?}")),
    };
    Ok(n * mul)
}

impl BenchArgs {
    pub fn plan(&self) -> Result<Plan, String> {
        if self.runtime.is_none() && self.size.is_none() {
            return Err("give --runtime SECS or --size BYTES".into());
        }
        if self.bs == 0 || self.bs % 512 != 0 {
            return Err(format!("--bs {}: a multiple of 512", self.bs));
        }
        if !(1..=1024).contains(&self.iodepth) {
            return Err(format!("--iodepth {}: 1 ..= 1024", self.iodepth));
        }
        if self.rwmixread > 100 {
            return Err("--rwmixread: 0 ..= 100".into());
        }
        Ok(Plan {
            lun: self.lun,
            rw: self.rw,
            bs: self.bs,
            iodepth: self.iodepth,
            runtime: self
                .runtime
                .map(|s| Duration::from_secs_f64(s.clamp(0.001, 1e6))),
            size: self.size,
            offset: self.offset,
            rwmixread: self.rwmixread,
            verify: self.verify,
        })
    }
}

impl Plan {
    /// Registered memory: one buffer per command in flight.
    pub fn buffer_len(&self) -> usize {
        (self.bs * u64::from(self.iodepth)) as usize
    }
}

/// One direction's figures.
#[derive(Debug, Clone, Default)]
pub struct DirStats {
    pub ios: u64,
    pub bytes: u64,
    /// Per command, submission to completion.
    pub lat_ns: Vec<u64>,
}

impl DirStats {
    pub fn iops(&self, t: Duration) -> f64 {
        self.ios as f64 / t.as_secs_f64().max(1e-9)
    }
    pub fn bw(&self, t: Duration) -> f64 {
        self.bytes as f64 / t.as_secs_f64().max(1e-9)
    }
    fn sorted(&self) -> Vec<u64> {
        let mut v = self.lat_ns.clone();
        v.sort_unstable();
        v
    }
    /// The `p`-th percentile (0..100) of the latencies.
    pub fn percentile(&self, p: f64) -> u64 {
        pct(&self.sorted(), p)
    }
    fn mean_stdev(&self) -> (f64, f64) {
        let n = self.lat_ns.len().max(1) as f64;
        let m = self.lat_ns.iter().map(|&x| x as f64).sum::<f64>() / n;
        let v = self
            .lat_ns
            .iter()
            .map(|&x| (x as f64 - m).powi(2))
            .sum::<f64>()
            / n;
        (m, v.sqrt())
    }
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

/// fio's percentile list.
pub const PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct BenchResult {
    pub read: DirStats,
    pub write: DirStats,
    pub runtime: Duration,
    /// Bytes laid out before a verified read workload.
    pub prefill_bytes: u64,
    /// Blocks checked (during the run and in the final pass).
    pub verify_checked: u64,
    /// Reads with `--verify` of blocks not written yet in the run: nothing to check.
    pub verify_unwritten: u64,
    /// Of `verify_checked`, those of the read of every written block after the workload.
    pub verify_after: u64,
    pub verify_errors: u64,
    pub first_mismatch: Option<String>,
    /// CPU time this process used over the measured window (every thread: the initiator,
    /// and the target too when it runs in this process, as `softrdma perf srp`'s does).
    pub cpu: Duration,
}

impl BenchResult {
    /// CPU microseconds per I/O (reads and writes together).
    pub fn cpu_us_per_io(&self) -> f64 {
        let ios = self.read.ios + self.write.ios;
        self.cpu.as_secs_f64() * 1e6 / ios.max(1) as f64
    }
}

/// This process's CPU time so far (`CLOCK_PROCESS_CPUTIME_ID`: all threads, user + system).
pub fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

struct Slot {
    busy: bool,
    write: bool,
    block: u64,
    generation: u64,
    start: Instant,
    tag: u64,
    /// UNIT ATTENTIONs this command has had (retried up to 5 times, as the midlayer does).
    attentions: u8,
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// fio's IOPS figure (`31.5k`).
pub fn fio_num(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else if x >= 1e3 {
        format!("{:.2}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// fio's bandwidth figure (`123MiB/s (129MB/s)`).
pub fn fio_bw(b: f64) -> String {
    let (si, unit) = if b >= 1e9 {
        (b / 1e9, "GB/s")
    } else if b >= 1e6 {
        (b / 1e6, "MB/s")
    } else {
        (b / 1e3, "kB/s")
    };
    format!("{}/s ({:.0}{unit})", human(b), si)
}

struct Runner<'a> {
    s: &'a mut Session,
    plan: &'a Plan,
    bs: u64,
    lba_per_block: u64,
    first_block: u64,
    blocks: u64,
    gen_of: Vec<u64>,
    busy: Vec<bool>,
    slots: Vec<Slot>,
    next_seq: u64,
    generation: u64,
    rng: Rng,
    res: BenchResult,
    scratch: Vec<u8>,
    /// Slots whose command ended with its channel lost while a reconnect is under way:
    /// submitted again (as they were: a write's data is still in its slot) once the
    /// session takes commands, as the midlayer retries a `DID_RESET`.
    retry: Vec<usize>,
    /// Commands submitted again after a lost channel.
    pub retried: u64,
}

impl Runner<'_> {
    fn seg(&self, slot: usize) -> [Segment; 1] {
        [Segment {
            mr: self.s.buf,
            addr: IOVA + slot as u64 * self.bs,
            len: self.bs as u32,
        }]
    }

    /// Submits one command in `slot`: `write` of block `block` (or read).
    fn submit(&mut self, slot: usize, write: bool, block: u64) -> Result<(), String> {
        loop {
            self.busy[block as usize] = true;
            if self.submit_batch(&[(slot, write, block)])? == 1 {
                return Ok(());
            }
            self.busy[block as usize] = false;
            self.s.pump(Duration::from_millis(1))?;
            self.reap(false)?;
        }
    }

    /// Submits `picks` (slot, write?, block; their blocks already marked busy) under one
    /// lock, so the commands leave together. Returns how many were submitted (the first ones);
    /// the others' blocks are freed again.
    fn submit_batch(&mut self, picks: &[(usize, bool, u64)]) -> Result<usize, String> {
        let mut prepared = Vec::with_capacity(picks.len());
        for &(slot, write, block) in picks {
            let lba = (self.first_block + block) * self.lba_per_block;
            let mut generation = 0;
            if write && self.plan.verify {
                self.generation += 1;
                generation = self.generation;
                self.scratch.resize(self.bs as usize, 0);
                verify::fill(
                    &mut self.scratch,
                    (self.first_block + block) * self.bs,
                    generation,
                );
                self.s
                    .dev
                    .write_mr(self.s.buf.lkey, IOVA + slot as u64 * self.bs, &self.scratch)
                    .map_err(|e| e.to_string())?;
            }
            let (c, n) = cdb::rw(write, lba, self.lba_per_block as u32);
            prepared.push((c, n, self.seg(slot), generation));
        }
        let cmds: Vec<Command<'_>> = picks
            .iter()
            .zip(&prepared)
            .map(|(&(slot, write, _), (c, n, seg, _))| {
                let cmd = Command::new(self.plan.lun, &c[..*n]).user(slot as u64);
                if write {
                    cmd.write_from(seg)
                } else {
                    cmd.read_into(seg)
                }
            })
            .collect();
        let start = Instant::now();
        let tags = self.s.submit_many(&cmds)?;
        drop(cmds);
        for (k, &(slot, write, block)) in picks.iter().enumerate() {
            let Some(&tag) = tags.get(k) else {
                self.busy[block as usize] = false;
                continue;
            };
            self.slots[slot] = Slot {
                busy: true,
                write,
                block,
                generation: prepared[k].3,
                start,
                tag,
                attentions: 0,
            };
        }
        Ok(tags.len())
    }

    /// Handles the completions that arrived; returns how many.
    fn reap(&mut self, measure: bool) -> Result<usize, String> {
        let done = self.s.take_done();
        let n = done.len();
        for d in done {
            let slot = d.user as usize;
            let Some(sl) = self.slots.get_mut(slot) else {
                continue;
            };
            if !sl.busy || sl.tag != d.tag {
                continue;
            }
            if matches!(d.result, Err(softrdma_srp::IoError::ChannelDown(_)))
                && self.s.ini.will_retry()
            {
                // Still busy: the same command goes again after the reconnect.
                sl.tag = u64::MAX;
                self.retry.push(slot);
                continue;
            }
            // UNIT ATTENTION (a restarted target's power-on reset, a LUN change): again, as
            // the midlayer retries it.
            if let Ok(r) = &d.result {
                if r.status == ScsiStatus::CHECK_CONDITION
                    && r.sense_key().map(|k| k.0) == Some(6)
                    && sl.attentions < 5
                {
                    sl.attentions += 1;
                    sl.tag = u64::MAX;
                    self.retry.push(slot);
                    continue;
                }
            }
            sl.busy = false;
            let lat = sl.start.elapsed().as_nanos() as u64;
            let (write, block, generation) = (sl.write, sl.block, sl.generation);
            self.busy[block as usize] = false;
            let r = d.result.map_err(|e| {
                format!(
                    "{} of block {block}: {e}",
                    if write { "write" } else { "read" }
                )
            })?;
            if r.status != ScsiStatus::GOOD {
                return Err(format!(
                    "{} of block {block}: {}",
                    if write { "write" } else { "read" },
                    crate::srp::result_text(&r)
                ));
            }
            if write {
                if self.plan.verify {
                    self.gen_of[block as usize] = generation;
                }
            } else if self.plan.verify && self.gen_of[block as usize] != 0 {
                self.check(slot, block)?;
            } else if self.plan.verify {
                self.res.verify_unwritten += 1;
            }
            if measure {
                let st = if write {
                    &mut self.res.write
                } else {
                    &mut self.res.read
                };
                st.ios += 1;
                st.bytes += self.bs;
                st.lat_ns.push(lat);
            }
        }
        self.resubmit()?;
        Ok(n)
    }

    /// Submits again what a lost channel ended (see `retry`); what the session does not
    /// take yet (blocked) waits for the next turn.
    fn resubmit(&mut self) -> Result<(), String> {
        if self.retry.is_empty() {
            return Ok(());
        }
        let slots = std::mem::take(&mut self.retry);
        let prepared: Vec<_> = slots
            .iter()
            .map(|&slot| {
                let sl = &self.slots[slot];
                let lba = (self.first_block + sl.block) * self.lba_per_block;
                let (c, n) = cdb::rw(sl.write, lba, self.lba_per_block as u32);
                (c, n, self.seg(slot), sl.write)
            })
            .collect();
        let cmds: Vec<Command<'_>> = slots
            .iter()
            .zip(&prepared)
            .map(|(&slot, (c, n, seg, write))| {
                let cmd = Command::new(self.plan.lun, &c[..*n]).user(slot as u64);
                if *write {
                    cmd.write_from(seg)
                } else {
                    cmd.read_into(seg)
                }
            })
            .collect();
        let tags = self.s.submit_many(&cmds)?;
        drop(cmds);
        for (k, &slot) in slots.iter().enumerate() {
            match tags.get(k) {
                Some(&t) => {
                    self.slots[slot].tag = t;
                    self.retried += 1;
                }
                None => self.retry.push(slot),
            }
        }
        Ok(())
    }

    fn check(&mut self, slot: usize, block: u64) -> Result<(), String> {
        self.scratch.resize(self.bs as usize, 0);
        self.s
            .dev
            .read_mr(
                self.s.buf.lkey,
                IOVA + slot as u64 * self.bs,
                &mut self.scratch,
            )
            .map_err(|e| e.to_string())?;
        let want = self.gen_of[block as usize];
        let off = (self.first_block + block) * self.bs;
        self.res.verify_checked += 1;
        if let Err(m) = verify::check(&self.scratch, off, |_| Some(want)) {
            self.res.verify_errors += 1;
            if self.res.first_mismatch.is_none() {
                self.res.first_mismatch = Some(m.to_string());
            }
        }
        Ok(())
    }

    fn free_slot(&self) -> Option<usize> {
        self.slots.iter().position(|s| !s.busy)
    }

    fn in_flight(&self) -> usize {
        self.slots.iter().filter(|s| s.busy).count()
    }

    /// Waits for everything in flight.
    fn drain(&mut self, measure: bool) -> Result<(), String> {
        while self.in_flight() > 0 {
            self.s.pump(Duration::from_millis(100))?;
            self.reap(measure)?;
        }
        Ok(())
    }

    /// A sequential pass over every block (`write`), or over the written ones (reads),
    /// outside the measurement.
    fn pass(&mut self, write: bool) -> Result<(), String> {
        let mut b = 0;
        while b < self.blocks || self.in_flight() > 0 {
            while b < self.blocks {
                if !write && self.gen_of[b as usize] == 0 {
                    b += 1;
                    continue;
                }
                let Some(slot) = self.free_slot() else { break };
                self.submit(slot, write, b)?;
                b += 1;
            }
            self.s.pump(Duration::from_millis(100))?;
            self.reap(false)?;
        }
        Ok(())
    }

    fn pick(&mut self) -> Option<(bool, u64)> {
        let p = self.plan;
        let write = match p.rw {
            Rw::Read | Rw::Randread => false,
            Rw::Write | Rw::Randwrite => true,
            Rw::Randrw => (self.rng.next() % 100) as u32 >= p.rwmixread,
        };
        if p.rw.random() {
            for _ in 0..64 {
                let b = self.rng.next() % self.blocks;
                if !self.busy[b as usize] {
                    return Some((write, b));
                }
            }
            None
        } else {
            let b = self.next_seq % self.blocks;
            if self.busy[b as usize] {
                return None;
            }
            self.next_seq += 1;
            Some((write, b))
        }
    }
}

/// Runs the workload on `s` (logged in). `progress`: the progress line on stderr.
pub fn run(s: &mut Session, plan: &Plan, progress: bool) -> Result<BenchResult, String> {
    run_keep(s, plan, progress).map_err(|f| f.why)
}

/// A run that ended early (the target went away, a command failed): why, and what was done
/// until then (fio prints its summary then too).
pub struct Cut {
    pub why: String,
    /// The commands that completed before; `None` when the workload had not started.
    pub partial: Option<Box<BenchResult>>,
}

impl From<String> for Cut {
    fn from(why: String) -> Cut {
        Cut { why, partial: None }
    }
}

/// [`run`], keeping what was done when the run ends early.
pub fn run_keep(s: &mut Session, plan: &Plan, progress: bool) -> Result<BenchResult, Cut> {
    let info = lun_info(s, plan.lun)?;
    let lbs = u64::from(info.block_size);
    if plan.bs % lbs != 0 {
        return Err(format!(
            "--bs {}: a multiple of LUN {}'s block size ({lbs})",
            plan.bs, plan.lun
        )
        .into());
    }
    if plan.offset % plan.bs != 0 {
        return Err(format!("--offset {}: a multiple of --bs", plan.offset).into());
    }
    if plan.offset >= info.bytes() {
        return Err(format!(
            "--offset {} is past the end of LUN {} ({} bytes)",
            plan.offset,
            plan.lun,
            info.bytes()
        )
        .into());
    }
    let region = plan
        .size
        .unwrap_or(u64::MAX)
        .min(info.bytes() - plan.offset);
    let blocks = region / plan.bs;
    if blocks == 0 {
        return Err(format!("the region holds no block of {} bytes", plan.bs).into());
    }
    let depth = (plan.iodepth as usize).min(blocks as usize).max(1);
    let mut r = Runner {
        s,
        plan,
        bs: plan.bs,
        lba_per_block: plan.bs / lbs,
        first_block: plan.offset / plan.bs,
        blocks,
        gen_of: vec![0; blocks as usize],
        busy: vec![false; blocks as usize],
        slots: (0..depth)
            .map(|_| Slot {
                busy: false,
                write: false,
                block: 0,
                generation: 0,
                start: Instant::now(),
                tag: 0,
                attentions: 0,
            })
            .collect(),
        next_seq: 0,
        generation: 0,
        rng: Rng(0x9e37_79b9_7f4a_7c15 ^ crate::cmtool::seed() | 1),
        res: BenchResult::default(),
        scratch: Vec::new(),
        retry: Vec::new(),
        retried: 0,
    };
    if plan.verify && plan.rw.reads() && !plan.rw.writes() {
        if progress {
            eprintln!(
                "softrdma srp bench: --verify: laying the pattern out over {} first",
                human((blocks * plan.bs) as f64)
            );
        }
        r.pass(true)?;
        r.res.prefill_bytes = blocks * plan.bs;
    }
    let cpu0 = process_cpu();
    let start = Instant::now();
    let outcome = workload(&mut r, plan, progress, start);
    if let Err(why) = outcome {
        // What completed until then, as fio reports it: the same runtime and counts.
        r.res.runtime = start.elapsed();
        r.res.cpu = process_cpu().saturating_sub(cpu0);
        if progress && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprintln!();
        }
        return Err(Cut {
            why,
            partial: Some(Box::new(r.res)),
        });
    }
    r.res.runtime = start.elapsed();
    r.res.cpu = process_cpu().saturating_sub(cpu0);
    if progress && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!();
    }
    if plan.verify && plan.rw.writes() {
        let before = r.res.verify_checked;
        r.pass(false)?;
        r.res.verify_after = r.res.verify_checked - before;
    }
    Ok(r.res)
}

/// The measured part of [`run_keep`]: submit, reap and report progress until the runtime
/// or the size is reached, then wait for what is in flight.
fn workload(r: &mut Runner<'_>, plan: &Plan, progress: bool, start: Instant) -> Result<(), String> {
    let limit_bytes = plan.size;
    let mut last = start;
    let (mut last_r, mut last_w) = (0u64, 0u64);
    let (mut last_ri, mut last_wi) = (0u64, 0u64);
    let mut moved_submitted = 0u64;
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    loop {
        let elapsed = start.elapsed();
        let time_up = plan.runtime.is_some_and(|t| elapsed >= t);
        let bytes_up = limit_bytes.is_some_and(|b| moved_submitted >= b);
        if time_up || bytes_up {
            break;
        }
        let mut picks = Vec::new();
        for slot in 0..r.slots.len() {
            if r.slots[slot].busy {
                continue;
            }
            let planned = moved_submitted + picks.len() as u64 * plan.bs;
            if limit_bytes.is_some_and(|b| planned >= b) {
                break;
            }
            let Some((w, b)) = r.pick() else { break };
            r.busy[b as usize] = true;
            picks.push((slot, w, b));
        }
        if !picks.is_empty() {
            let n = r.submit_batch(&picks)?;
            if !plan.rw.random() {
                r.next_seq -= (picks.len() - n) as u64;
            }
            moved_submitted += n as u64 * plan.bs;
        }
        r.s.pump(Duration::from_millis(50))?;
        r.reap(true)?;
        if progress && last.elapsed() >= Duration::from_secs(1) {
            let dt = last.elapsed().as_secs_f64();
            let (rb, wb) = (r.res.read.bytes, r.res.write.bytes);
            let (ri, wi) = (r.res.read.ios, r.res.write.ios);
            let eta = match (plan.runtime, limit_bytes) {
                (Some(t), _) => t.saturating_sub(start.elapsed()).as_secs(),
                (None, Some(b)) => {
                    let rate = (rb + wb) as f64 / start.elapsed().as_secs_f64().max(1e-3);
                    ((b.saturating_sub(rb + wb)) as f64 / rate.max(1.0)) as u64
                }
                _ => 0,
            };
            let done = match (plan.runtime, limit_bytes) {
                (Some(t), _) => start.elapsed().as_secs_f64() / t.as_secs_f64() * 100.0,
                (None, Some(b)) => (rb + wb) as f64 / b as f64 * 100.0,
                _ => 0.0,
            };
            let line = format!(
                "Jobs: 1 (f=1): [{}(1)][{:.1}%][r={}/s,w={}/s][r={},w={} IOPS][eta {:02}m:{:02}s]",
                match plan.rw {
                    Rw::Read => "R",
                    Rw::Write => "W",
                    Rw::Randread => "r",
                    Rw::Randwrite => "w",
                    Rw::Randrw => "m",
                },
                done.min(100.0),
                human((rb - last_r) as f64 / dt),
                human((wb - last_w) as f64 / dt),
                fio_num((ri - last_ri) as f64 / dt),
                fio_num((wi - last_wi) as f64 / dt),
                eta / 60,
                eta % 60
            );
            if tty {
                eprint!("\r{line}   ");
            } else {
                eprintln!("{line}");
            }
            (last_r, last_w, last_ri, last_wi) = (rb, wb, ri, wi);
            last = Instant::now();
        }
    }
    r.drain(true)?;
    Ok(())
}

impl BenchResult {
    /// `--verify`'s count in words: reads checked against what was written, the errors, and
    /// the reads that had nothing to check (their block not written yet in the run).
    pub fn verify_text(&self) -> String {
        let mut s = format!(
            "{} blocks checked against what was written",
            self.verify_checked
        );
        if self.verify_after > 0 {
            s += &format!(
                " ({} by the workload's reads, {} by a read of every written block after it)",
                self.verify_checked - self.verify_after,
                self.verify_after
            );
        }
        s += &format!(", {} errors", self.verify_errors);
        if self.verify_unwritten > 0 {
            s += &format!(
                "; {} of the workload's reads were of blocks not written yet (nothing to check)",
                self.verify_unwritten
            );
        }
        s
    }

    fn dir_text(&self, name: &str, d: &DirStats) -> String {
        if d.ios == 0 {
            return String::new();
        }
        let t = self.runtime;
        let sorted = d.sorted();
        let (mean, sd) = d.mean_stdev();
        let min = sorted.first().copied().unwrap_or(0);
        let max = sorted.last().copied().unwrap_or(0);
        let (unit, div) = if min >= 10_000_000 {
            ("msec", 1e6)
        } else {
            ("usec", 1e3)
        };
        let mut s = format!(
            "  {name}: IOPS={}, BW={}({}/{}msec)\n",
            fio_num(d.iops(t)),
            fio_bw(d.bw(t)),
            human(d.bytes as f64),
            t.as_millis()
        );
        s += &format!(
            "    lat ({unit}): min={:.0}, max={:.0}, avg={:.2}, stdev={:.2}\n",
            min as f64 / div,
            max as f64 / div,
            mean / div,
            sd / div
        );
        s += &format!("    lat percentiles ({unit}):\n");
        for (i, p) in PERCENTILES.iter().enumerate() {
            if i % 4 == 0 {
                s += "     |";
            }
            let v = pct(&sorted, *p) as f64 / div;
            s += &format!(" {:>5.2}th=[{:>5.0}]", p, v);
            if i + 1 < PERCENTILES.len() {
                s += ",";
            }
            if i % 4 == 3 || i + 1 == PERCENTILES.len() {
                s += "\n";
            }
        }
        s
    }

    /// fio's text.
    pub fn fio_text(&self, p: &Plan) -> String {
        let mut s = format!(
            "srp: (g=0): rw={}, bs=(R) {b}B-{b}B, (W) {b}B-{b}B, (T) {b}B-{b}B, ioengine=srp, iodepth={}\n",
            p.rw.name(),
            p.iodepth,
            b = p.bs
        );
        s += &format!(
            "srp: (groupid=0, jobs=1): err= {}: pid={}\n",
            if self.verify_errors > 0 { 84 } else { 0 },
            std::process::id()
        );
        s += &self.dir_text("read", &self.read);
        s += &self.dir_text("write", &self.write);
        s += &format!(
            "  cpu          : {:.1}% of one core (this process), {:.2} us per I/O\n",
            self.cpu.as_secs_f64() / self.runtime.as_secs_f64().max(1e-9) * 100.0,
            self.cpu_us_per_io()
        );
        if p.verify {
            s += &format!(
                "  verify: {}{}{}\n",
                self.verify_text(),
                if self.prefill_bytes > 0 {
                    format!(
                        " (pattern laid out first over {})",
                        human(self.prefill_bytes as f64)
                    )
                } else {
                    String::new()
                },
                self.first_mismatch
                    .as_ref()
                    .map(|m| format!("; first: {m}"))
                    .unwrap_or_default()
            );
        }
        s += "\nRun status group 0 (all jobs):\n";
        for (n, d) in [("READ", &self.read), ("WRITE", &self.write)] {
            if d.ios > 0 {
                s += &format!(
                    "   {n}: bw={}, io={}, run={}-{}msec\n",
                    fio_bw(d.bw(self.runtime)),
                    human(d.bytes as f64),
                    self.runtime.as_millis(),
                    self.runtime.as_millis()
                );
            }
        }
        s
    }

    fn dir_json(&self, d: &DirStats) -> serde_json::Value {
        let sorted = d.sorted();
        let (mean, sd) = d.mean_stdev();
        let mut pm = serde_json::Map::new();
        for p in PERCENTILES {
            pm.insert(format!("{p:.6}"), json!(pct(&sorted, p)));
        }
        json!({
            "io_bytes": d.bytes,
            "total_ios": d.ios,
            "runtime_ms": self.runtime.as_millis() as u64,
            "iops": d.iops(self.runtime),
            "bw_bytes": d.bw(self.runtime),
            "bw": d.bw(self.runtime) / 1024.0,
            "lat_ns": {
                "min": sorted.first().copied().unwrap_or(0),
                "max": sorted.last().copied().unwrap_or(0),
                "mean": mean,
                "stdev": sd,
                "percentile": pm,
            }
        })
    }

    /// One JSON object (fio's field names where it has them).
    pub fn to_json(&self, p: &Plan) -> serde_json::Value {
        let t = self.runtime;
        json!({
            "jobname": "srp",
            "rw": p.rw.name(),
            "bs": p.bs,
            "iodepth": p.iodepth,
            "runtime_ms": t.as_millis() as u64,
            "iops": self.read.iops(t) + self.write.iops(t),
            "bw_bytes": self.read.bw(t) + self.write.bw(t),
            "read": self.dir_json(&self.read),
            "write": self.dir_json(&self.write),
            "cpu_ns": self.cpu.as_nanos() as u64,
            "cpu_us_per_io": self.cpu_us_per_io(),
            "verify": {
                "enabled": p.verify,
                "checked": self.verify_checked,
                "errors": self.verify_errors,
                "first_mismatch": self.first_mismatch,
            },
            "error": u8::from(self.verify_errors > 0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_figures() {
        let d = DirStats {
            ios: 100,
            bytes: 409600,
            lat_ns: (1..=100).map(|x| x * 1000).collect(),
        };
        assert_eq!(d.percentile(50.0), 50_000);
        assert_eq!(d.percentile(99.0), 99_000);
        assert_eq!(d.percentile(99.99), 100_000);
        assert_eq!(fio_num(31_456.0), "31.5k");
        assert_eq!(fio_num(950.0), "950");
        assert!(fio_bw(129e6).starts_with("123MiB/s (129MB/s)"));
        assert_eq!(parse_time("5"), Ok(5.0));
        assert_eq!(parse_time("500ms"), Ok(0.5));
        assert_eq!(parse_time("2m"), Ok(120.0));
        assert!(parse_time("5x").is_err());
    }
}
