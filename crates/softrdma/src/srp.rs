//! `softrdma srp`: an SRP initiator (what Linux's `ib_srp` does on the wire) on the driver's
//! runtime, around the sans-IO engine of `softrdma-srp` ([`SrpInitiator`]).
//!
//! The TARGET argument is the string ib_srp's `add_target` takes (`id_ext=…,ioc_guid=…,
//! dest=IP:PORT[,src=IP][,ch_count=N]…` or `…,dgid=…,pkey=ffff,service_id=…`), so the line
//! `softrdma srpt` prints works unchanged. Without `src=`, the source address is the one the
//! routing table picks towards the target; on IPv4 loopback, when that address is held by
//! another process (a target on this host), a free 127.0.0.x is taken, as the other tools do.
//!
//! One thread runs it: it waits on the initiator's CQ (stopping for CM events), hands the
//! completions and the CM events to the engine under the device's and the CM's locks
//! ([`Cm::with`]), and runs the engine's timers (command timeouts, task management).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant as StdInstant};

use clap::{Parser, Subcommand};
use softrdma_core::cm::{CmEvent, CmPort};
use softrdma_core::mad::{AgentId, MadAddr, MadEvent, SendParams};
use softrdma_core::verbs::{MrKeys, WorkCompletion};
use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::mad::{MadClient, PortCtx};
use softrdma_driver::Device;
use softrdma_scsi::LunId;
use softrdma_srp::dm::{self, SrpService};
use softrdma_srp::initiator::{cdb, ChannelInfo};
use softrdma_srp::{
    AddTarget, Command, Completion, Dest, InitiatorConfig, InitiatorEvent, IoError, ScsiResult,
    Segment, SessionState, SrpInitiator, SubmitError,
};
use softrdma_wire::dm::{
    DmAttributeId, IocProfileRepr, ServiceEntriesModifier, ServiceEntriesRepr,
    MGMT_CLASS_DEVICE_MGMT,
};
use softrdma_wire::mad::{Method, MgmtClass};
use softrdma_wire::scsi::ScsiStatus;
use softrdma_wire::Gid;

use crate::cmtool::{self, signals, SIGNAL_SLICE};
use crate::srp_bench::{self, Cut};
use crate::srp_nbd;

/// `softrdma srp`.
#[derive(Debug, Parser)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: SrpCmd,
}

/// Where `read` and `write` start.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct LunOffset {
    /// The LUN (0, 1, ... as `softrdma srp login` lists them).
    #[arg(long, default_value_t = 0)]
    pub lun: u64,
    /// Where to start, in bytes (k/m/g suffixes; a multiple of the block size).
    #[arg(long, value_parser = parse_size)]
    pub offset: u64,
}

/// What every subcommand that logs in takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Conn {
    /// The target, as ib_srp's add_target takes it:
    /// `id_ext=…,ioc_guid=…,dest=IP:PORT[,src=IP][,ch_count=N][,queue_size=N][,max_it_iu_size=N]…`
    /// or `id_ext=…,ioc_guid=…,dgid=…,pkey=ffff,service_id=…`
    pub target: String,
    /// Record every datagram to this pcap file.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Log the login, channel and task management events on stderr.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// A command's timeout before ABORT TASK, in seconds (the SCSI default, 30).
    #[arg(long, default_value_t = 30)]
    pub cmd_timeout: u64,
    /// Give up on a login the target does not answer after SECS seconds (default: when the
    /// CM gives up on its REQ, after about 98 s).
    #[arg(long, value_name = "SECS")]
    pub login_timeout: Option<u64>,
    /// ib_srp's reconnect_delay: after a lost channel (QP error, DREQ, target restart), try
    /// to log in again every SECS seconds; `off`: no reconnect.
    #[arg(long, value_name = "SECS|off", default_value = "10", value_parser = parse_tmo)]
    pub reconnect_delay: Tmo,
    /// ib_srp's fast_io_fail_tmo: SECS after the loss, commands held since then fail, and
    /// new ones fail at once (reconnects go on); `off`: held until dev_loss_tmo.
    #[arg(long, value_name = "SECS|off", default_value = "15", value_parser = parse_tmo)]
    pub fast_io_fail_tmo: Tmo,
    /// ib_srp's dev_loss_tmo: SECS after the loss with no reconnect, the device is given up
    /// (the command exits); `off`: never.
    #[arg(long, value_name = "SECS|off", default_value = "600", value_parser = parse_tmo)]
    pub dev_loss_tmo: Tmo,
}

/// A transport timer: seconds, or off (`None`), as ib_srp's sysfs files take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tmo(pub Option<Duration>);

fn parse_tmo(s: &str) -> Result<Tmo, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("off") {
        return Ok(Tmo(None));
    }
    let secs: f64 = t
        .parse()
        .map_err(|_| format!("{s}: seconds (a number) or off"))?;
    if !(0.0..=86_400.0 * 365.0).contains(&secs) || secs.is_nan() {
        return Err(format!("{s}: seconds from 0 to a year, or off"));
    }
    Ok(Tmo(Some(Duration::from_secs_f64(secs))))
}

#[derive(Debug, Subcommand)]
pub enum SrpCmd {
    /// Log in, print each LUN's INQUIRY data and capacity, log out.
    Login {
        #[command(flatten)]
        conn: Conn,
    },
    /// Read raw bytes from a LUN (to stdout, or -o FILE).
    Read {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        at: LunOffset,
        /// How much, in bytes (k/m/g suffixes; a multiple of the block size).
        #[arg(long, value_parser = parse_size)]
        length: u64,
        /// Write the bytes to this file instead of stdout.
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Write raw bytes to a LUN (from stdin, or -i FILE).
    Write {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        at: LunOffset,
        /// Read the bytes from this file instead of stdin (a multiple of the block size).
        #[arg(short = 'i', long, value_name = "FILE")]
        input: Option<PathBuf>,
    },
    /// A fio-style workload (fio's flag names): IOPS, bandwidth, latency percentiles.
    Bench {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        spec: srp_bench::BenchArgs,
    },
    /// Serve a LUN as an NBD export (fixed newstyle; READ, WRITE with FUA, FLUSH, TRIM as
    /// UNMAP, WRITE_ZEROES as WRITE SAME; several clients at once) until SIGINT/SIGTERM.
    Nbd {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        nbd: srp_nbd::NbdArgs,
    },
    /// Device management queries over QP1 (IOUnitInfo, IOControllerProfile,
    /// ServiceEntries): one add_target line per SRP service found, in the IB form as
    /// `ibsrpdm -c` prints it, and in the RDMA CM form.
    Discover {
        /// The target's address, and the RDMA CM port for the printed lines (5555).
        addr: String,
        /// Our address (default: the routed source, or a free 127.0.0.x on loopback).
        #[arg(long)]
        src: Option<IpAddr>,
        /// How long to wait for each answer, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
    },
}

/// fio's sizes: a number with an optional k/m/g/t (powers of 1024, `KiB`/`kB`/`k` alike).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suf) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s}: not a size (a number with an optional k, m, g or t)"))?;
    let suf = suf.to_ascii_lowercase();
    let mul: u64 = match suf.trim_end_matches('b').trim_end_matches('i') {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return Err(format!("{s}: unknown size suffix {suf:?} (k, m, g or t)")),
    };
    n.checked_mul(mul).ok_or_else(|| format!("{s}: too large"))
}

/// `n` bytes as fio prints sizes (`4096KiB`, `64.0MiB`).
pub fn human(n: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v >= 100.0 {
        format!("{v:.0}{}", units[u])
    } else {
        format!("{v:.1}{}", units[u])
    }
}

/// How a session opens.
#[derive(Debug, Clone, Default)]
pub struct SessionOpts {
    pub pcap: Option<PathBuf>,
    pub verbose: bool,
    pub cmd_timeout: Option<Duration>,
    /// Bytes of registered buffer to allocate (default 1 MiB).
    pub buffer: usize,
    /// The tool name for notes on stderr.
    pub tool: &'static str,
    /// Keep the engine's events (the demo's summary).
    pub keep_events: bool,
    /// How long to wait for the login (default: until the CM gives up on its REQ).
    pub login_timeout: Option<Duration>,
    /// Say on stderr that the login is under way (`softrdma srp`: a target that does not
    /// answer is not a silent wait).
    pub announce: bool,
    /// ib_srp's transport timers (`None`: off; all off, the default, fails the session
    /// when its target is lost).
    pub reconnect_delay: Option<Duration>,
    pub fast_io_fail_tmo: Option<Duration>,
    pub dev_loss_tmo: Option<Duration>,
}

/// A logged-in initiator on its device, run from the caller's thread.
pub struct Session {
    pub dev: Device,
    pub cm: Cm,
    pub port: CmPort,
    pub ini: SrpInitiator,
    pub buf: MrKeys,
    pub target: AddTarget,
    wcs: Vec<WorkCompletion>,
    done: Vec<Completion>,
    verbose: bool,
    tool: &'static str,
    /// With `keep_events`: the engine's events and when they came.
    pub events: Vec<(StdInstant, InitiatorEvent)>,
    keep_events: bool,
    pub login_time: Duration,
}

/// Where our data buffers appear in the MR's address space.
pub const IOVA: u64 = 0x1000_0000;

fn std_dur(d: softrdma_core::time::Duration) -> Duration {
    Duration::from_micros(d.total_micros())
}

impl Session {
    /// Opens the device (src=, or the source rule), starts the login and waits for it.
    pub fn open(target: AddTarget, o: &SessionOpts) -> Result<Session, String> {
        let (dst, src) = match target.dest {
            Dest::Rdma { dest, src } => (dest.ip(), src),
            Dest::Ib { dgid, src, .. } => (dgid.to_ip(), src),
        };
        let d = cmtool::open_client_noted(
            src,
            dst,
            o.pcap.as_ref(),
            "src=",
            o.tool,
            softrdma_driver::Progress::Inline,
            o.verbose,
        )?;
        let mut cfg = InitiatorConfig::new(target.clone());
        cfg.src = Some(d.dev.local_addr().ip());
        cfg.default_ch_count = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
            .min(4);
        if let Some(t) = o.cmd_timeout {
            cfg.cmd_timeout = softrdma_core::time::Duration::from_millis(t.as_millis() as u64);
        }
        cfg.seed = cmtool::seed();
        let core = |d: Option<Duration>| {
            d.map(|d| softrdma_core::time::Duration::from_micros(d.as_micros() as u64))
        };
        cfg.reconnect_delay = core(o.reconnect_delay);
        cfg.fast_io_fail_tmo = core(o.fast_io_fail_tmo);
        cfg.dev_loss_tmo = core(o.dev_loss_tmo);
        softrdma_srp::initiator::validate_tmo(
            cfg.reconnect_delay,
            cfg.fast_io_fail_tmo,
            cfg.dev_loss_tmo,
        )?;
        let mut ini = SrpInitiator::new(cfg);
        let buf_len = o.buffer.max(1 << 20);
        let buf = d
            .dev
            .with_stack(|s| ini.alloc_buffer(s, buf_len, IOVA))
            .map_err(|e| format!("ibv_reg_mr: {e}"))?;
        let mut s = Session {
            dev: d.dev.clone(),
            cm: d.cm.clone(),
            port: d.port,
            ini,
            buf,
            target,
            wcs: Vec::with_capacity(64),
            done: Vec::new(),
            verbose: o.verbose,
            tool: o.tool,
            events: Vec::new(),
            keep_events: o.keep_events,
            login_time: Duration::ZERO,
        };
        let t0 = StdInstant::now();
        let port = s.port;
        let r =
            s.cm.with(port, |rdma, stack, now| s.ini.start(now, rdma, stack, port))
                .map_err(|e| e.to_string())?;
        if let Err(e) = r {
            return Err(format!("login to {} failed: {e}", s.target.dest_name()));
        }
        // Said at once, so that a target that is not there is not a silent wait.
        let limit = o.login_timeout.unwrap_or(Duration::from_secs(120));
        if o.announce {
            eprintln!(
                "{}: logging in to {} from {} (each unanswered CM retry shows here; a dead \
             address gives up after about 98 s{})",
                s.tool,
                s.target.dest_name(),
                s.dev.local_addr().ip(),
                match o.login_timeout {
                    Some(t) => format!(", this login after {} s", t.as_secs_f64()),
                    None => ", or --login-timeout SECS".into(),
                }
            );
        }
        let ok = s.run_until(limit, |i| i.state() != &SessionState::LoggingIn)?;
        if !ok {
            return Err(format!(
                "login to {} got no answer within {} s: is the target running there? \
                 (`softrdma srp discover {}` lists what is there)",
                s.target.dest_name(),
                limit.as_secs_f64(),
                discover_addr(&s.target)
            ));
        }
        s.login_time = t0.elapsed();
        match s.ini.state().clone() {
            SessionState::Live => Ok(s),
            SessionState::LoginFailed(e) => Err(format!(
                "login to {} failed: {e}{}",
                s.target.dest_name(),
                login_hint(&e, &s.target)
            )),
            st => Err(format!("login to {}: {st:?}", s.target.dest_name())),
        }
    }

    /// The device clock → how long until the engine's next timer.
    fn timer_wait(&self, max: Duration) -> Duration {
        match self.ini.poll_timeout() {
            Some(t) => std_dur(t.saturating_duration_since(self.dev.now())).min(max),
            None => max,
        }
    }

    fn log(&mut self) {
        while let Some(e) = self.ini.poll_event() {
            // The transport layer's news is always said, as ib_srp's is in the kernel log.
            let tl = matches!(
                e,
                InitiatorEvent::TransportFailed { .. }
                    | InitiatorEvent::ReconnectAttempt { .. }
                    | InitiatorEvent::ReconnectFailed { .. }
                    | InitiatorEvent::Reconnected { .. }
                    | InitiatorEvent::FastIoFail { .. }
                    | InitiatorEvent::DeviceLost { .. }
            );
            if self.verbose || tl {
                eprintln!("{}: {}", self.tool, event_text(&e));
            }
            if self.keep_events {
                self.events.push((StdInstant::now(), e));
            }
        }
        while let Some(c) = self.ini.poll_completion() {
            self.done.push(c);
        }
    }

    /// CM events to the engine.
    fn dispatch(&mut self) {
        while let Some(ev) = self.cm.poll_event() {
            let port = self.port;
            let ini = &mut self.ini;
            match ev {
                Event::Rdma(e) => {
                    if ini.owns_rdma(e.id()) {
                        let _ = self.cm.with(port, |rdma, stack, now| {
                            ini.rdma_event(now, rdma, stack, &e)
                        });
                    }
                }
                Event::Ib(ev @ CmEvent::Retry { .. }) => {
                    let peer = self.target.dest_name();
                    if let Some(l) = cmtool::retry_note(self.tool, &peer, self.dev.now(), &ev) {
                        eprintln!("{l}");
                    }
                }
                Event::Ib(e) => {
                    let _ = self
                        .cm
                        .with(port, |rdma, stack, now| ini.ib_event(now, rdma, stack, &e));
                }
            }
            self.log();
        }
        self.log();
    }

    /// One turn: wait (at most `max`) for completions or CM events, hand them over, run
    /// the timers.
    pub fn pump(&mut self, max: Duration) -> Result<(), String> {
        self.pump_or(max, &|| false)
    }

    /// [`Session::pump`], also ending the wait when `wake` says so (another thread has work
    /// for this one, after `Device::wake`).
    pub fn pump_or(&mut self, max: Duration, wake: &dyn Fn() -> bool) -> Result<(), String> {
        self.dispatch();
        let wait = self.timer_wait(max);
        if let Some(cq) = self.ini.cq() {
            self.wcs.clear();
            let cm = self.cm.clone();
            self.dev
                .wait_cq_or(cq, &mut self.wcs, 64, Some(wait), &move || {
                    cm.has_event() || signals::caught().is_some() || wake()
                })
                .map_err(|e| format!("ibv_poll_cq: {e}"))?;
        } else if !self
            .dev
            .progress_until(StdInstant::now() + wait.min(Duration::from_millis(10)))
            .map_err(|e| format!("device: {e}"))?
            && self.dev.progress() != softrdma_driver::Progress::Inline
        {
            // A threaded device's loop runs by itself: only wait here.
            std::thread::sleep(wait.min(Duration::from_millis(10)));
        }
        let wcs = std::mem::take(&mut self.wcs);
        let port = self.port;
        let ini = &mut self.ini;
        let _ = self.cm.with(port, |rdma, stack, now| {
            for wc in &wcs {
                ini.completion(now, rdma, stack, wc);
            }
            ini.poll(now, rdma, stack);
            if ini.poll_timeout().is_some_and(|t| t <= now) {
                ini.handle_timeout(now, rdma, stack);
            }
        });
        self.wcs = wcs;
        self.dispatch();
        if let Some(sig) = signals::caught() {
            return Err(format!("signal {sig}"));
        }
        Ok(())
    }

    /// Pumps until `cond` (true) or `limit` (false).
    pub fn run_until(
        &mut self,
        limit: Duration,
        cond: impl Fn(&SrpInitiator) -> bool,
    ) -> Result<bool, String> {
        let end = StdInstant::now() + limit;
        loop {
            if cond(&self.ini) {
                return Ok(true);
            }
            let left = end.saturating_duration_since(StdInstant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.pump(left.min(SIGNAL_SLICE))?;
        }
    }

    /// Takes the completions that arrived.
    pub fn take_done(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.done)
    }

    /// Submits (waiting while every channel is busy).
    pub fn submit(&mut self, cmd: &Command<'_>) -> Result<u64, String> {
        loop {
            let port = self.port;
            let ini = &mut self.ini;
            let r = self
                .cm
                .with(port, |_, stack, now| ini.submit(now, stack, cmd))
                .map_err(|e| e.to_string())?;
            match r {
                Ok(t) => return Ok(t),
                Err(SubmitError::Busy) => self.pump(SIGNAL_SLICE)?,
                Err(SubmitError::NotLive) => return Err(self.why_down()),
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Submits `cmds` in order under one lock, so their SRP_CMDs leave in one flush (one
    /// `sendmmsg`) instead of one send each. Returns the tags of those submitted: all of
    /// them, or fewer when credits or tags ran out (the rest may be submitted after a pump).
    pub fn submit_many(&mut self, cmds: &[Command<'_>]) -> Result<Vec<u64>, String> {
        let port = self.port;
        let ini = &mut self.ini;
        let (tags, err) = self
            .cm
            .with(port, |_, stack, now| {
                let mut tags = Vec::with_capacity(cmds.len());
                for c in cmds {
                    match ini.submit(now, stack, c) {
                        Ok(t) => tags.push(t),
                        Err(e) => return (tags, Some(e)),
                    }
                }
                (tags, None)
            })
            .map_err(|e| e.to_string())?;
        match err {
            None | Some(SubmitError::Busy) => Ok(tags),
            Some(SubmitError::NotLive) if tags.is_empty() => Err(self.why_down()),
            Some(SubmitError::NotLive) => Ok(tags),
            Some(e) if tags.is_empty() => Err(e.to_string()),
            Some(_) => Ok(tags),
        }
    }

    /// Why the session is not live.
    pub fn why_down(&self) -> String {
        match self.ini.state() {
            SessionState::Failed(w) => format!("the target is gone: {w}"),
            SessionState::FailFast(w) => format!(
                "the target is unreachable since {w}; fast_io_fail_tmo passed (still reconnecting)"
            ),
            s => format!("no live channel ({s:?})"),
        }
    }

    /// Submits and waits for the end of one command.
    pub fn exec(&mut self, cmd: &Command<'_>) -> Result<Result<ScsiResult, IoError>, String> {
        let tag = self.submit(cmd)?;
        loop {
            if let Some(i) = self.done.iter().position(|c| c.tag == tag) {
                return Ok(self.done.remove(i).result);
            }
            self.pump(SIGNAL_SLICE)?;
        }
    }

    /// A SCSI command with `len` bytes of data at the start of our buffer (`dir`), retried
    /// on UNIT ATTENTION as the midlayer does. Returns the result and, for data-in, the bytes
    /// the target sent (the residual taken off).
    pub fn scsi(
        &mut self,
        lun: u64,
        cdb: &[u8],
        dir: softrdma_srp::DataDir,
        len: usize,
    ) -> Result<(ScsiResult, Vec<u8>), String> {
        let seg = [Segment {
            mr: self.buf,
            addr: IOVA,
            len: len as u32,
        }];
        let mut attentions = 0;
        while attentions < 5 {
            let mut c = Command::new(lun, cdb);
            if len > 0 {
                c.dir = dir;
                c.segs = &seg;
            }
            let r = match self.exec(&c)? {
                Ok(r) => r,
                // Its channel was lost and a reconnect is under way: again, as the midlayer
                // retries a DID_RESET (it waits while the session is blocked).
                Err(IoError::ChannelDown(_)) if self.ini.will_retry() => continue,
                Err(e) => return Err(format!("{}: {e}", cdb_name(cdb[0]))),
            };
            if r.status == ScsiStatus::CHECK_CONDITION && r.sense_key().map(|s| s.0) == Some(6) {
                attentions += 1;
                continue;
            }
            let mut data = Vec::new();
            if dir == softrdma_srp::DataDir::FromTarget && len > 0 {
                let n = (len as i64 - r.resid.max(0)).max(0) as usize;
                data = vec![0u8; n];
                self.dev
                    .read_mr(self.buf.lkey, IOVA, &mut data)
                    .map_err(|e| e.to_string())?;
            }
            return Ok((r, data));
        }
        Err(format!(
            "{}: unit attention after 5 tries",
            cdb_name(cdb[0])
        ))
    }

    /// Logs out and waits (up to 5 s) for the channels to close.
    pub fn logout(&mut self) -> Result<(), String> {
        let port = self.port;
        let ini = &mut self.ini;
        let _ = self
            .cm
            .with(port, |rdma, stack, now| ini.logout(now, rdma, stack));
        self.run_until(Duration::from_secs(5), |i| i.is_done())?;
        let _ = self.dev.flush_pcap();
        Ok(())
    }
}

/// `ADDR:PORT` for `softrdma srp discover` (the target's address and RDMA CM port).
fn discover_addr(t: &AddTarget) -> String {
    match t.dest {
        Dest::Rdma { dest, .. } => dest.to_string(),
        Dest::Ib { dgid, .. } => dgid.to_ip().to_string(),
    }
}

/// What to do after a refused or unanswered login, after ib_srp's words.
fn login_hint(e: &softrdma_srp::initiator::LoginError, t: &AddTarget) -> String {
    use softrdma_srp::initiator::LoginError;
    let discover = format!(
        "`softrdma srp discover {}` lists the targets there and their add_target lines",
        discover_addr(t)
    );
    match e {
        LoginError::Rejected(r) if r.cm_reason.0 == 8 => {
            let port = match t.dest {
                Dest::Rdma { dest, .. } => dest.port(),
                Dest::Ib { .. } => 0,
            };
            let what = cmtool::rej_meaning(8, port).unwrap_or_default();
            format!(": {what}; {discover}")
        }
        LoginError::Rejected(r) if r.login_rej.is_some() => format!(
            ": the target refused this login (check id_ext, ioc_guid and the target's --allow \
             list); {discover}"
        ),
        LoginError::Rejected(_) | LoginError::Unreachable => format!("; {discover}"),
        _ => String::new(),
    }
}

fn cdb_name(op: u8) -> &'static str {
    match op {
        0x00 => "TEST UNIT READY",
        0x12 => "INQUIRY",
        0xa0 => "REPORT LUNS",
        0x25 => "READ CAPACITY(10)",
        0x9e => "READ CAPACITY(16)",
        0x28 | 0x88 => "READ",
        0x2a | 0x8a => "WRITE",
        0x35 => "SYNCHRONIZE CACHE",
        _ => "SCSI command",
    }
}

/// A line for an engine event (`-v`).
pub fn event_text(e: &InitiatorEvent) -> String {
    match e {
        InitiatorEvent::LoginSent { channel, multi } => format!(
            "channel {channel}: SRP_LOGIN_REQ sent ({})",
            if *multi { "MULTI" } else { "SINGLE" }
        ),
        InitiatorEvent::LoggedIn {
            channel,
            rsp,
            immediate,
        } => format!(
            "channel {channel}: SRP_LOGIN_RSP: req_lim {}, max_it_iu_len {}, max_ti_iu_len {}, {}, immediate data {}",
            rsp.req_lim_delta,
            rsp.max_it_iu_len,
            rsp.max_ti_iu_len,
            rsp.multichannel_result(),
            if *immediate { "on" } else { "off" }
        ),
        InitiatorEvent::LoginFailed { channel, error } => {
            format!("channel {channel}: login failed: {error}")
        }
        InitiatorEvent::ChannelDown { channel, why } => format!("channel {channel}: down: {why}"),
        InitiatorEvent::LoggedOut { channel, answered } => format!(
            "channel {channel}: logged out ({})",
            if *answered {
                "DREQ answered"
            } else {
                "DREQ unanswered"
            }
        ),
        InitiatorEvent::TaskMgmt {
            channel,
            function,
            lun,
            task_tag,
        } => format!("channel {channel}: {function} sent (LUN {lun}, task tag {task_tag:#x})"),
        InitiatorEvent::TaskMgmtDone {
            channel,
            function,
            rsp_code,
        } => match rsp_code {
            Some(c) => format!("channel {channel}: {function} answered, RSP_CODE {c}"),
            None => format!("channel {channel}: {function} not answered in time"),
        },
        InitiatorEvent::TransportFailed {
            why,
            reconnect_delay,
            fast_io_fail_tmo,
            dev_loss_tmo,
        } => {
            let s = |d: &Option<softrdma_core::time::Duration>| match d {
                Some(d) => format!("{} s", d.total_millis() as f64 / 1e3),
                None => "off".into(),
            };
            format!(
                "lost the target: {why}; commands held; reconnect_delay {}, fast_io_fail_tmo {}, dev_loss_tmo {}",
                s(reconnect_delay),
                s(fast_io_fail_tmo),
                s(dev_loss_tmo)
            )
        }
        InitiatorEvent::ReconnectAttempt { attempt } => format!("reconnect attempt {attempt}"),
        InitiatorEvent::ReconnectFailed { attempt, error } => {
            format!("reconnect attempt {attempt} failed: {error}")
        }
        InitiatorEvent::Reconnected { attempt, down_for } => format!(
            "reconnect succeeded (attempt {attempt}, {:.3} s after the loss)",
            down_for.total_micros() as f64 / 1e6
        ),
        InitiatorEvent::FastIoFail { after } => format!(
            "fast_io_fail_tmo ({} s) passed: commands fail until a reconnect succeeds",
            after.total_millis() as f64 / 1e3
        ),
        InitiatorEvent::DeviceLost { after, attempts } => format!(
            "dev_loss_tmo ({} s) passed after {attempts} reconnect attempt(s): the device is given up",
            after.total_millis() as f64 / 1e3
        ),
        InitiatorEvent::LateResponse { channel, tag } => {
            format!("channel {channel}: SRP_RSP for tag {tag:#x} after its command ended")
        }
        InitiatorEvent::TargetLogout { channel, reason } => {
            format!("channel {channel}: Got target logout request (reason {reason:#x})")
        }
        InitiatorEvent::CreditRequest { channel, delta } => {
            format!("channel {channel}: SRP_CRED_REQ (+{delta})")
        }
        InitiatorEvent::AsyncEvent { channel, lun } => {
            format!("channel {channel}: ignoring AER for LUN {lun}")
        }
        InitiatorEvent::Warning { channel, what } => match channel {
            Some(c) => format!("channel {c}: {what}"),
            None => what.to_string(),
        },
    }
}

/// One LUN as `login` prints it.
#[derive(Debug, Clone)]
pub struct LunInfo {
    pub lun: u64,
    pub peripheral_type: u8,
    pub vendor: String,
    pub product: String,
    pub revision: String,
    pub blocks: u64,
    pub block_size: u32,
}

impl LunInfo {
    pub fn bytes(&self) -> u64 {
        self.blocks * u64::from(self.block_size)
    }
}

impl std::fmt::Display for LunInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.peripheral_type {
            0 => "disk".to_string(),
            5 => "cd/dvd".to_string(),
            t => format!("type {t:#x}"),
        };
        write!(
            f,
            "LUN {}: {:<8} {:<16} {:<4} ({kind}), {} blocks of {} bytes ({})",
            self.lun,
            self.vendor,
            self.product,
            self.revision,
            self.blocks,
            self.block_size,
            human(self.bytes() as f64)
        )
    }
}

/// Sense data in words: `DATA PROTECT: write protected (the LUN is read-only)`, then the
/// codes for whoever looks them up (`sense key 0x7, ASC/ASCQ 27/00`).
pub fn sense_text(key: u8, asc: u8, ascq: u8) -> String {
    use softrdma_wire::scsi::{AscAscq, SenseKey};
    let k = SenseKey(key);
    let a = AscAscq::new(asc, ascq);
    let key_name = k.description().unwrap_or("sense key");
    let why = match a.description() {
        Some(n) => n.to_ascii_lowercase(),
        None => format!("additional sense {asc:02x}/{ascq:02x}"),
    };
    let hint = match (k, a) {
        (SenseKey::DATA_PROTECT, AscAscq::WRITE_PROTECTED) => " (the LUN is read-only)",
        (_, AscAscq::LBA_OUT_OF_RANGE) => " (past the end of the LUN)",
        (_, AscAscq::LOGICAL_UNIT_NOT_SUPPORTED) => {
            " (no such LUN: `softrdma srp login TARGET` lists them)"
        }
        (_, AscAscq::INVALID_COMMAND_OPERATION_CODE) => " (the target does not know the command)",
        _ => "",
    };
    format!("{key_name}: {why}{hint}; sense key {key:#x}, ASC/ASCQ {asc:02x}/{ascq:02x}")
}

/// A SCSI status in words (`CHECK CONDITION`).
fn status_name(st: ScsiStatus) -> String {
    match st.0 {
        0x00 => "GOOD".into(),
        0x02 => "CHECK CONDITION".into(),
        0x08 => "BUSY".into(),
        0x18 => "RESERVATION CONFLICT".into(),
        0x28 => "TASK SET FULL".into(),
        0x30 => "ACA ACTIVE".into(),
        0x40 => "TASK ABORTED".into(),
        s => format!("status {s:#04x}"),
    }
}

/// A SCSI result that is not GOOD, in words.
pub fn result_text(r: &ScsiResult) -> String {
    match r.sense_key() {
        Some((k, asc, ascq)) => sense_text(k, asc, ascq),
        None => format!("{} (status {:#04x})", status_name(r.status), r.status.0),
    }
}

fn good(r: &ScsiResult, what: &str) -> Result<(), String> {
    if r.status == ScsiStatus::GOOD {
        return Ok(());
    }
    Err(format!("{what}: {}", result_text(r)))
}

/// REPORT LUNS (on LUN 0), then INQUIRY and READ CAPACITY of each.
pub fn scan(s: &mut Session) -> Result<Vec<LunInfo>, String> {
    use softrdma_srp::DataDir::FromTarget;
    let (r, d) = s.scsi(0, &cdb::report_luns(4096), FromTarget, 4096)?;
    good(&r, "REPORT LUNS")?;
    let n = d.get(..4).map_or(0, |b| {
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize / 8
    });
    let mut luns = Vec::new();
    for i in 0..n {
        let Some(b) = d.get(8 + 8 * i..16 + 8 * i) else {
            break;
        };
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        luns.push(LunId::from_wire(w).0);
    }
    let mut out = Vec::new();
    for lun in luns {
        out.push(lun_info(s, lun)?);
    }
    Ok(out)
}

/// INQUIRY and READ CAPACITY of one LUN.
pub fn lun_info(s: &mut Session, lun: u64) -> Result<LunInfo, String> {
    use softrdma_srp::DataDir::FromTarget;
    let (r, inq) = s.scsi(lun, &cdb::inquiry(96), FromTarget, 96)?;
    good(&r, "INQUIRY")?;
    let txt = |a: usize, b: usize| {
        String::from_utf8_lossy(inq.get(a..b.min(inq.len())).unwrap_or(&[]))
            .trim_end()
            .to_string()
    };
    let (r, cap) = s.scsi(lun, &cdb::read_capacity16(), FromTarget, 32)?;
    good(&r, "READ CAPACITY(16)")?;
    if cap.len() < 12 {
        return Err("READ CAPACITY(16): short answer".into());
    }
    let last = u64::from_be_bytes(cap[..8].try_into().unwrap_or([0; 8]));
    let bs = u32::from_be_bytes(cap[8..12].try_into().unwrap_or([0; 4]));
    Ok(LunInfo {
        lun,
        peripheral_type: inq.first().map_or(0x1f, |b| b & 0x1f),
        vendor: txt(8, 16),
        product: txt(16, 32),
        revision: txt(32, 36),
        blocks: last + 1,
        block_size: bs,
    })
}

/// The channel lines of `login`.
pub fn channel_line(c: &ChannelInfo) -> String {
    let rsp = c.login_rsp;
    format!(
        "channel {}: QP {:#x}, {} {}, req_it_iu_len {}, credits {}, {}, max_ti_iu_len {}, immediate data {}, {} tags",
        c.index,
        c.qpn,
        if c.via_ib_cm { "IB CM" } else { "RDMA CM" },
        if c.login_req.req_flags & 3 == 1 { "MULTI" } else { "SINGLE" },
        c.login_req.req_it_iu_len,
        rsp.map_or(0, |r| r.req_lim_delta),
        // The target's max_it_iu_len (SRP_LOGIN_RSP) and what this initiator uses: the
        // smaller of it and what it asked for.
        match rsp.map(|r| r.max_it_iu_len) {
            Some(m) if m != c.max_it_iu_len =>
                format!("max_it_iu_len {m} (using {})", c.max_it_iu_len),
            _ => format!("max_it_iu_len {}", c.max_it_iu_len),
        },
        c.max_ti_iu_len,
        if c.use_imm_data { "on" } else { "off" },
        c.can_queue,
    ) + &rsp.map_or(String::new(), |r| format!(" ({})", r.multichannel_result()))
}

/// TARGET as ib_srp's add_target takes it; the whole line `softrdma srpt` prints
/// (`add_target: id_ext=…`) is taken too.
fn parse_target(s: &str) -> Result<AddTarget, String> {
    let t = s.trim();
    let t = t
        .strip_prefix("add_target (IB CM):")
        .or_else(|| t.strip_prefix("add_target:"))
        .unwrap_or(t)
        .trim();
    t.parse::<AddTarget>()
        .map_err(|e| format!("TARGET {s:?}: {e}"))
}

fn opts(c: &Conn, buffer: usize) -> SessionOpts {
    SessionOpts {
        pcap: c.pcap.clone(),
        verbose: c.verbose,
        cmd_timeout: Some(Duration::from_secs(c.cmd_timeout.max(1))),
        buffer,
        tool: "softrdma srp",
        keep_events: false,
        login_timeout: c.login_timeout.map(|s| Duration::from_secs(s.max(1))),
        announce: true,
        reconnect_delay: c.reconnect_delay.0,
        fast_io_fail_tmo: c.fast_io_fail_tmo.0,
        dev_loss_tmo: c.dev_loss_tmo.0,
    }
}

pub fn run(args: Args) -> ExitCode {
    signals::catch();
    let r = match args.cmd {
        SrpCmd::Login { conn } => login(&conn),
        SrpCmd::Read {
            conn,
            at: LunOffset { lun, offset },
            length,
            output,
        } => read(&conn, lun, offset, length, output),
        SrpCmd::Write {
            conn,
            at: LunOffset { lun, offset },
            input,
        } => write(&conn, lun, offset, input),
        SrpCmd::Bench { conn, spec } => bench(&conn, &spec),
        SrpCmd::Nbd { conn, nbd } => parse_target(&conn.target).and_then(|t| {
            with_session(t, &opts(&conn, srp_nbd::BUFFER), |s| {
                srp_nbd::serve(s, &nbd, conn.verbose)
            })
        }),
        SrpCmd::Discover {
            addr,
            src,
            timeout_ms,
        } => discover(&addr, src, Duration::from_millis(timeout_ms.max(1))),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(sig) = e.strip_prefix("signal ").and_then(|s| s.parse().ok()) {
                signals::die(sig);
            }
            eprintln!("softrdma srp: {e}");
            ExitCode::from(1)
        }
    }
}

/// Logs in; on an error, logs out before returning it.
fn with_session<R>(
    target: AddTarget,
    o: &SessionOpts,
    f: impl FnOnce(&mut Session) -> Result<R, String>,
) -> Result<R, String> {
    let mut s = Session::open(target, o)?;
    let r = f(&mut s);
    let l = s.logout();
    let r = r?;
    l?;
    Ok(r)
}

fn login(c: &Conn) -> Result<(), String> {
    let t = parse_target(&c.target)?;
    with_session(t, &opts(c, 1 << 20), |s| {
        println!(
            "logged in to {} from {} ({} channel{}, initiator port {}) in {:.1} ms",
            s.target.dest_name(),
            s.dev.local_addr().ip(),
            s.ini.channels().len(),
            if s.ini.channels().len() == 1 { "" } else { "s" },
            softrdma_srp::login::hex_port_id(&s.ini.initiator_port_id()),
            s.login_time.as_secs_f64() * 1e3
        );
        for ch in s.ini.channels() {
            println!("{}", channel_line(&ch));
        }
        for l in scan(s)? {
            println!("{l}");
        }
        Ok(())
    })?;
    println!("logged out");
    Ok(())
}

/// The transfer of one command in `read`/`write` (ib_srp's default `max_sectors`, 1024).
const CHUNK: u64 = 512 << 10;

fn read(c: &Conn, lun: u64, offset: u64, length: u64, out: Option<PathBuf>) -> Result<(), String> {
    let t = parse_target(&c.target)?;
    let mut sink: Box<dyn Write> = match &out {
        Some(p) => Box::new(std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?),
        None => Box::new(std::io::stdout().lock()),
    };
    with_session(t, &opts(c, CHUNK as usize), |s| {
        let info = lun_info(s, lun)?;
        let bs = u64::from(info.block_size);
        check_range(&info, offset, length)?;
        let mut at = offset;
        while at < offset + length {
            let n = CHUNK.min(offset + length - at);
            let (cdb, k) = cdb::rw(false, at / bs, (n / bs) as u32);
            let (r, data) = s.scsi(
                lun,
                &cdb[..k],
                softrdma_srp::DataDir::FromTarget,
                n as usize,
            )?;
            good(&r, "READ")?;
            sink.write_all(&data).map_err(|e| format!("output: {e}"))?;
            at += n;
        }
        sink.flush().map_err(|e| format!("output: {e}"))?;
        Ok(())
    })
}

fn check_range(info: &LunInfo, offset: u64, length: u64) -> Result<(), String> {
    let bs = u64::from(info.block_size);
    if offset % bs != 0 || length % bs != 0 {
        return Err(format!(
            "offset {offset} and length {length} must be multiples of LUN {}'s block size ({bs} bytes)",
            info.lun
        ));
    }
    if offset + length > info.bytes() {
        return Err(format!(
            "{offset} + {length} bytes is past the end of LUN {} ({} bytes)",
            info.lun,
            info.bytes()
        ));
    }
    Ok(())
}

fn write(c: &Conn, lun: u64, offset: u64, input: Option<PathBuf>) -> Result<(), String> {
    let t = parse_target(&c.target)?;
    let mut data = Vec::new();
    match &input {
        Some(p) => {
            data = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        None => {
            std::io::stdin()
                .lock()
                .read_to_end(&mut data)
                .map_err(|e| format!("stdin: {e}"))?;
        }
    }
    let n = with_session(t, &opts(c, CHUNK as usize), |s| {
        let info = lun_info(s, lun)?;
        let bs = u64::from(info.block_size);
        check_range(&info, offset, data.len() as u64)?;
        let mut at = 0usize;
        while at < data.len() {
            let n = (CHUNK as usize).min(data.len() - at);
            s.dev
                .write_mr(s.buf.lkey, IOVA, &data[at..at + n])
                .map_err(|e| e.to_string())?;
            let lba = (offset + at as u64) / bs;
            let (cdb, k) = cdb::rw(true, lba, (n as u64 / bs) as u32);
            let (r, _) = s.scsi(lun, &cdb[..k], softrdma_srp::DataDir::ToTarget, n)?;
            good(&r, "WRITE")?;
            at += n;
        }
        let (r, _) = s.scsi(lun, &cdb::sync_cache(), softrdma_srp::DataDir::None, 0)?;
        good(&r, "SYNCHRONIZE CACHE")?;
        Ok(data.len())
    })?;
    eprintln!("softrdma srp: wrote {n} bytes at offset {offset} of LUN {lun}");
    Ok(())
}

fn bench(c: &Conn, spec: &srp_bench::BenchArgs) -> Result<(), String> {
    let t = parse_target(&c.target)?;
    let plan = spec.plan()?;
    let print = |r: &srp_bench::BenchResult| {
        if spec.json {
            println!("{}", r.to_json(&plan));
        } else {
            print!("{}", r.fio_text(&plan));
        }
    };
    let r = with_session(t, &opts(c, plan.buffer_len()), |s| {
        let r = srp_bench::run_keep(s, &plan, true);
        if let Err(Cut {
            partial: Some(p), ..
        }) = &r
        {
            // As fio does when a job fails part way: the summary of what was done, said when
            // the workload stops (the logout that follows may wait for a dead target's DREPs).
            eprintln!(
                "softrdma srp bench: the run ended early after {:.2} s; what completed until then:",
                p.runtime.as_secs_f64()
            );
            print(p);
        }
        Ok(r)
    })?;
    let r = r.map_err(|cut| cut.why)?;
    print(&r);
    if r.verify_errors > 0 {
        return Err(format!("{} blocks failed verification", r.verify_errors));
    }
    Ok(())
}

// -------------------------------------------------------------------------------------
// discover
// -------------------------------------------------------------------------------------

/// The DM class on our QP1: answers go to the waiting thread.
struct DmQuery {
    agent: AgentId,
    tx: Mutex<mpsc::Sender<MadEvent>>,
}

impl MadClient for DmQuery {
    fn owns(&self, agent: AgentId) -> bool {
        agent == self.agent
    }
    fn handle_mad(&self, _ctx: &mut PortCtx<'_>, ev: MadEvent) {
        let _ = self.tx.lock().unwrap_or_else(|p| p.into_inner()).send(ev);
    }
}

fn discover(addr: &str, src: Option<IpAddr>, timeout: Duration) -> Result<(), String> {
    let dest: SocketAddr = match addr.parse::<SocketAddr>() {
        Ok(a) => a,
        Err(_) => softrdma_driver::cm::resolve_host(addr, 5555, None)
            .map_err(|e| format!("{addr}: {e}"))?,
    };
    let d = cmtool::open_client(
        src,
        dest.ip(),
        None,
        "--src",
        "softrdma srp discover",
        cmtool::THREAD,
    )?;
    let (tx, rx) = mpsc::channel();
    let client = d
        .dev
        .attach_mad_client(|mad, _| {
            let agent = mad.register(MgmtClass(MGMT_CLASS_DEVICE_MGMT), 1)?;
            Ok::<_, softrdma_core::mad::MadError>(Arc::new(DmQuery {
                agent,
                tx: Mutex::new(tx),
            }))
        })
        .map_err(|e| format!("DM agent: {e:?}"))?;
    let agent = client.agent;
    let dgid = Gid::from(dest.ip());
    let peer = MadAddr::gsi(dgid);
    let mut low = 1u32;
    let mut query = |attr: DmAttributeId, m: u32| -> Result<softrdma_wire::mad::Mad, String> {
        let tid = softrdma_core::mad::form_tid(agent, low);
        low += 1;
        let mad = dm::get_request(attr, m, tid);
        let params = SendParams {
            timeout: softrdma_core::time::Duration::from_millis(timeout.as_millis() as u64),
            retries: 3,
            expects_response: true,
        };
        d.dev
            .with_mad(|ctx| ctx.mad.send(ctx.now, agent, peer, mad, params))
            .map_err(|e| format!("send: {e}"))?;
        d.dev.wake();
        let sent = StdInstant::now();
        let end = sent + timeout * 5 + Duration::from_secs(1);
        let mut noted = 0u32;
        loop {
            let left = end.saturating_duration_since(StdInstant::now());
            // The MAD layer resends every `timeout`, up to `params.retries` times: one line
            // each on stderr, so that an address with nothing there is not a silent wait.
            let next_retry = sent + timeout * (noted + 1);
            if noted < params.retries && StdInstant::now() >= next_retry {
                noted += 1;
                eprintln!(
                    "softrdma srp discover: no answer from {} yet: Get {attr} retry {noted}/{}, next in {:.1} s",
                    dest.ip(),
                    params.retries,
                    timeout.as_secs_f64()
                );
                continue;
            }
            let left = if noted < params.retries {
                left.min(next_retry.saturating_duration_since(StdInstant::now()))
            } else {
                left
            };
            match rx.recv_timeout(left) {
                Ok(MadEvent::Received { mad, .. }) if mad.header.tid == tid => return Ok(*mad),
                Ok(MadEvent::SendCompleted { status, .. })
                    if status != softrdma_core::mad::SendStatus::Ok =>
                {
                    return Err(format!(
                        "no answer to Get {attr} from {} ({status:?}): is an SRP target with device management there?",
                        dest.ip()
                    ))
                }
                Ok(_) => {}
                Err(_) if StdInstant::now() < end => {}
                Err(_) => return Err(format!("no answer to Get {attr} from {}", dest.ip())),
            }
        }
    };
    eprintln!(
        "softrdma srp discover: asking {} for its I/O controllers (unanswered queries are \
         resent {} times, {} ms apart: a dead address gives up after about {:.0} s; \
         --timeout-ms shortens it)",
        dest.ip(),
        3,
        timeout.as_millis(),
        (timeout * 4).as_secs_f64()
    );
    let iou = query(DmAttributeId::IO_UNIT_INFO, 0)?;
    let slots = dm::present_slots(
        dm::response_data(&iou).map_err(|s| format!("IOUnitInfo: status {:#06x} ({s})", s.0))?,
    );
    let mut found: Vec<SrpService> = Vec::new();
    for slot in slots {
        let p = query(DmAttributeId::IO_CONTROLLER_PROFILE, u32::from(slot))?;
        let Ok(data) = dm::response_data(&p) else {
            continue;
        };
        let Ok(prof) = IocProfileRepr::parse(&data[..128]) else {
            continue;
        };
        let n = usize::from(prof.num_svc_entries);
        let mut entries = Vec::new();
        let mut lo = 0usize;
        while lo < n {
            let hi = (lo + 3).min(n - 1);
            let m = ServiceEntriesModifier {
                slot,
                hi: hi as u8,
                lo: lo as u8,
            }
            .to_attr_mod();
            let e = query(DmAttributeId::SERVICE_ENTRIES, m)?;
            if let Ok(data) = dm::response_data(&e) {
                if let Ok(r) = ServiceEntriesRepr::parse(data) {
                    entries.extend_from_slice(&r.entries[..=hi - lo]);
                }
            }
            lo = hi + 1;
        }
        found.extend(dm::srp_services(slot, &prof, &entries));
    }
    if found.is_empty() {
        return Err(format!("{}: no SRP service found", dest.ip()));
    }
    for svc in &found {
        eprintln!(
            "softrdma srp discover: IOC slot {}: {} \"{}\" (service ID {:016x})",
            svc.slot, svc.name, svc.id_string, svc.service_id
        );
        println!("{}", svc.ib_line(&dgid, 0xffff));
        println!("{}", svc.rdma_line(dest));
    }
    let _ = Method::GET;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert!(parse_size("4x").is_err());
        assert!(parse_size("").is_err());
        assert_eq!(human(4096.0), "4.0KiB");
        assert_eq!(human(64.0 * 1048576.0), "64.0MiB");
    }
}
