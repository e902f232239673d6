//! `softrdma srpt`: a userspace SRP target a Linux `ib_srp` initiator logs in to, on the
//! driver's runtime (devices with background loops, the process's CM) around the sans-IO
//! engine of `softrdma-srp` and the SCSI core of `softrdma-scsi`.
//!
//! One thread runs the target: it takes the CM's events (logins, establishment,
//! disconnects) and the completions of each device's shared CQ, and hands both to the
//! engine under the device's and the CM's locks (`Cm::with`). DM MADs are answered in the
//! device loops by a [`MadClient`] on QP1.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use clap::Parser;
use serde::Deserialize;
use tracing::{debug, error, info, warn};

use softrdma_core::cm::{CmEvent, CmPort};
use softrdma_core::mad::{AgentId, MadEvent, SendParams};
use softrdma_core::rdma_cm::RdmaCmEventType;
use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::mad::{MadClient, PortCtx};
use softrdma_driver::{Device, DeviceConfig, PollMode, Progress};
use softrdma_scsi::{
    BlockSize, FileStore, LogicalUnit, LunConfig, LunId, MemStore, Target, TargetConfig,
};
use softrdma_srp::dm::{self, DmInfo};
use softrdma_srp::guid::{colon_guid, parse_guid};
use softrdma_srp::login::{DEFAULT_MAX_RDMA_SIZE, MIN_MAX_REQ_SIZE};
use softrdma_srp::{AclEntry, SrpConfig, SrpEvent, SrpTarget, TargetPort};
use softrdma_wire::dm::MGMT_CLASS_DEVICE_MGMT;
use softrdma_wire::mad::{Method, MgmtClass};

/// `softrdma srpt`.
#[derive(Debug, Parser)]
#[command(
    about = "A userspace SRP target (ib_srpt's logins, channels and I/O) that Linux's ib_srp mounts",
    override_usage = "softrdma srpt -a ADDR --lun SPEC... [OPTIONS]\n       softrdma srpt --config FILE [OPTIONS]",
    after_help = "LUN specs: mem:SIZE (K/M/G suffixes) or file:PATH, each with optional ,ro and ,bs=4096.\n\
                  The log goes to stderr (RUST_LOG=debug for more); the add_target line to stdout."
)]
pub struct Args {
    /// Local address to listen on (a softrdma device is opened on ADDR:4791); required
    /// unless --config lists them.
    #[arg(
        short = 'a',
        long = "addr",
        value_name = "ADDR",
        help_heading = "Required (or in --config)"
    )]
    addr: Vec<IpAddr>,
    /// RDMA CM port (ib_srpt's rdma_cm_port).
    #[arg(short = 'p', long = "port", default_value_t = 5555)]
    port: u16,
    /// The target GUID (srpt_service_guid): 16 hex digits, with or without 0x, or
    /// aaaa:bbbb:cccc:dddd. Default: the first device's node GUID.
    #[arg(long)]
    guid: Option<String>,
    /// A LUN (LUN 0, 1, ... in order): `mem:SIZE` or `file:PATH[,ro][,bs=4096]`; at least
    /// one, unless --config lists them.
    #[arg(
        long = "lun",
        value_name = "SPEC",
        help_heading = "Required (or in --config)"
    )]
    lun: Vec<String>,
    /// A TOML configuration file (see docs/srp-target.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Allow only these initiators (port identifier 0x + 32 hex digits, or source address).
    #[arg(long = "allow")]
    allow: Vec<String>,
    /// srp_max_req_size: the largest initiator-to-target IU.
    #[arg(long)]
    max_req_size: Option<u32>,
    /// Also listen on the IB CM with service ID = GUID (what ib_srpt does on IB ports).
    #[arg(long)]
    ib_cm: bool,
    /// Record the devices' traffic to this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    /// Addresses to listen on: "10.77.0.1" or "10.77.0.1:5555".
    #[serde(default)]
    listen: Vec<String>,
    guid: Option<String>,
    #[serde(default)]
    ib_cm: bool,
    #[serde(default)]
    lun: Vec<LunSpec>,
    #[serde(default)]
    acl: Option<AclSpec>,
    #[serde(default)]
    limits: Limits,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LunSpec {
    /// A memory LUN of this size ("16M").
    mem: Option<String>,
    /// A file LUN.
    file: Option<PathBuf>,
    block_size: Option<u32>,
    #[serde(default)]
    read_only: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AclSpec {
    /// Initiator port identifiers (0x + 32 hex digits) or source addresses.
    allow: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Limits {
    max_req_size: Option<u32>,
    rq_size: Option<u32>,
    channels_per_initiator: Option<u32>,
}

/// `16M`, `64MiB`, `512K`, `1G`, `4096`: the suffixes people type (K, M, G, T, each
/// optionally with `iB` or `B`; powers of 1024).
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let n = crate::srp::parse_size(t).map_err(|_| {
        format!("{t}: not a size (a number with an optional K, M, G or T: 64M, 64MiB, 1G)")
    })?;
    if n == 0 {
        return Err(format!(
            "{t}: a LUN needs at least one block (give a size such as 64M)"
        ));
    }
    Ok(n)
}

/// What a LUN's store refused, in words, with what to do.
fn store_error(what: &str, e: &softrdma_scsi::StoreError, bs: u32) -> String {
    use softrdma_scsi::StoreError;
    match e {
        StoreError::BadSize { size: 0, .. } => format!(
            "{what}: the file is empty or shorter than one {bs}-byte block; give it a size with \
             `truncate -s 64M PATH`"
        ),
        StoreError::BadSize { size, .. } => format!(
            "{what}: {size} bytes is not a multiple of {bs} bytes (the block size); give a \
             multiple, such as {}",
            (size / u64::from(bs)).max(1) * u64::from(bs)
        ),
        StoreError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
            format!("{what}: no such file; create one with `truncate -s 64M PATH`, or use mem:SIZE")
        }
        StoreError::Io(io) if io.kind() == std::io::ErrorKind::PermissionDenied => {
            format!("{what}: permission denied; make the file readable and writable, or add ,ro")
        }
        StoreError::Io(io) => format!("{what}: {io}"),
        e => format!("{what}: {e}"),
    }
}

fn parse_lun(spec: &str) -> Result<LunSpec, String> {
    let mut parts = spec.split(',');
    let head = parts.next().unwrap_or("");
    let mut l = LunSpec::default();
    if let Some(sz) = head.strip_prefix("mem:") {
        l.mem = Some(sz.to_string());
    } else if let Some(p) = head.strip_prefix("file:") {
        l.file = Some(PathBuf::from(p));
    } else {
        return Err(format!("--lun {spec}: expected mem:SIZE or file:PATH"));
    }
    for p in parts {
        match p {
            "ro" => l.read_only = true,
            _ if p.starts_with("bs=") => {
                l.block_size = Some(
                    p[3..]
                        .parse()
                        .map_err(|_| format!("--lun {spec}: bad block size"))?,
                )
            }
            _ => return Err(format!("--lun {spec}: unknown option {p}")),
        }
    }
    Ok(l)
}

fn make_lun(l: &LunSpec) -> Result<LogicalUnit, String> {
    let bs = match l.block_size.unwrap_or(512) {
        512 => BlockSize::B512,
        4096 => BlockSize::B4096,
        n => return Err(format!("block size {n}: 512 or 4096")),
    };
    let cfg = LunConfig {
        read_only: l.read_only,
        ..LunConfig::default()
    };
    match (&l.mem, &l.file) {
        (Some(sz), None) => {
            let size = parse_size(sz)?;
            let m = MemStore::new(size, bs)
                .map_err(|e| store_error(&format!("--lun mem:{sz}"), &e, bs.bytes()))?;
            let m = if l.read_only { m.into_read_only() } else { m };
            Ok(LogicalUnit::new(Box::new(m), cfg))
        }
        (None, Some(p)) => {
            let f = FileStore::open(p, bs, l.read_only)
                .map_err(|e| store_error(&format!("--lun file:{}", p.display()), &e, bs.bytes()))?;
            Ok(LogicalUnit::new(Box::new(f), cfg))
        }
        _ => Err("a LUN is either mem = SIZE or file = PATH".into()),
    }
}

fn parse_acl(s: &str) -> Result<AclEntry, String> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(AclEntry::Addr(ip));
    }
    let h = s.strip_prefix("0x").unwrap_or(s);
    if h.len() == 32 && h.bytes().all(|c| c.is_ascii_hexdigit()) {
        let mut id = [0u8; 16];
        for (i, b) in id.iter_mut().enumerate() {
            *b = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
        }
        return Ok(AclEntry::PortId(id));
    }
    Err(format!(
        "{s}: an initiator is a port identifier (0x + 32 hex digits) or an IP address"
    ))
}

/// The DM class on one device's QP1.
struct DmClient {
    agent: AgentId,
    info: DmInfo,
}

impl MadClient for DmClient {
    fn owns(&self, agent: AgentId) -> bool {
        agent == self.agent
    }
    fn handle_mad(&self, ctx: &mut PortCtx<'_>, ev: MadEvent) {
        if let MadEvent::Received {
            agent, mad, from, ..
        } = ev
        {
            let rsp = dm::answer(&mad, &self.info);
            debug!(
                attr = mad.header.attr_id,
                status = rsp.header.status.0,
                "DM MAD answered"
            );
            let _ = ctx.mad.send(ctx.now, agent, from, rsp, SendParams::ONCE);
        }
    }
}

struct Port {
    dev: Device,
    cm_port: CmPort,
    tport: TargetPort,
}

pub fn run(args: Args) -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softrdma srpt: {e}");
            ExitCode::from(1)
        }
    }
}

/// What a target serves, from the command line and the configuration file.
pub struct Setup {
    pub listen: Vec<SocketAddr>,
    pub guid: Option<String>,
    pub luns: Vec<LunSpec>,
    pub acl: Option<Vec<AclEntry>>,
    pub max_req_size: Option<u32>,
    pub rq_size: Option<u32>,
    pub channels_per_initiator: Option<u32>,
    pub ib_cm: bool,
    pub pcap: Option<PathBuf>,
    /// The flag that chooses the address, for the hints (`-a` for srpt, `--target` for
    /// the demo).
    pub addr_flag: &'static str,
}

impl Setup {
    /// A target on `listen` with one memory LUN of `size` bytes (512-byte blocks).
    pub fn memory(listen: SocketAddr, size: u64) -> Setup {
        Setup {
            listen: vec![listen],
            guid: None,
            luns: vec![LunSpec {
                mem: Some(size.to_string()),
                ..LunSpec::default()
            }],
            acl: None,
            max_req_size: None,
            rq_size: None,
            channels_per_initiator: None,
            ib_cm: false,
            pcap: None,
            addr_flag: "-a",
        }
    }
}

fn setup_from(args: &Args) -> Result<Setup, String> {
    let file: FileConfig = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            toml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => FileConfig::default(),
    };
    let default_port = args.port;
    let mut listen: Vec<SocketAddr> = args
        .addr
        .iter()
        .map(|a| SocketAddr::new(*a, default_port))
        .collect();
    for l in &file.listen {
        let a = l
            .parse::<SocketAddr>()
            .or_else(|_| {
                l.parse::<IpAddr>()
                    .map(|ip| SocketAddr::new(ip, default_port))
            })
            .map_err(|_| format!("listen = {l}: not an address"))?;
        listen.push(a);
    }
    if listen.is_empty() {
        return Err(
            "give the address to listen on (-a ADDR, or listen = [...] in --config)".into(),
        );
    }
    let mut luns: Vec<LunSpec> = file.lun;
    for l in &args.lun {
        luns.push(parse_lun(l)?);
    }
    if luns.is_empty() {
        return Err("give at least one LUN (--lun mem:SIZE or --lun file:PATH)".into());
    }
    let mut acl: Option<Vec<AclEntry>> = file
        .acl
        .map(|a| a.allow.iter().map(|s| parse_acl(s)).collect())
        .transpose()?;
    if !args.allow.is_empty() {
        let extra: Vec<AclEntry> = args
            .allow
            .iter()
            .map(|s| parse_acl(s))
            .collect::<Result<_, _>>()?;
        acl.get_or_insert_with(Vec::new).extend(extra);
    }
    Ok(Setup {
        listen,
        guid: args.guid.clone().or(file.guid),
        luns,
        acl,
        max_req_size: args.max_req_size.or(file.limits.max_req_size),
        rq_size: file.limits.rq_size,
        channels_per_initiator: file.limits.channels_per_initiator,
        ib_cm: file.ib_cm || args.ib_cm,
        pcap: args.pcap.clone(),
        addr_flag: "-a",
    })
}

/// A target serving: its devices, the CM, the engine, the listeners.
pub struct Served {
    cm: Cm,
    engine: SrpTarget,
    tports: Vec<Port>,
    listeners: Vec<softrdma_core::rdma_cm::RdmaCmId>,
    pub guid: u64,
    pub listen: Vec<SocketAddr>,
    pub ib_cm: bool,
}

/// Opens the devices, builds the LUNs and the engine, listens.
pub fn start(setup: Setup) -> Result<Served, String> {
    let Setup {
        listen,
        guid,
        luns,
        acl,
        max_req_size,
        rq_size,
        channels_per_initiator,
        ib_cm,
        pcap,
        addr_flag,
    } = setup;
    // Devices and the CM.
    let cm = Cm::new(crate::cmtool::seed());
    let mut ports = Vec::new();
    let mut ips: Vec<IpAddr> = Vec::new();
    let single = listen
        .iter()
        .all(|a| a.ip() == listen.first().map(|f| f.ip()).unwrap_or(a.ip()));
    for a in &listen {
        if ips.contains(&a.ip()) {
            continue;
        }
        ips.push(a.ip());
        // One device: the serving thread runs its loop itself (no hand-off between a
        // command's arrival and its processing). Several: each has its loop thread, and the
        // serving thread waits on each in turn.
        let progress = if single {
            Progress::Inline
        } else {
            Progress::Thread(PollMode::Blocking)
        };
        let mut cfg = DeviceConfig::new(a.ip())
            .with_interface_mtu()
            .with_progress(progress)
            .with_wait(PollMode::Blocking);
        if let Some(p) = &pcap {
            cfg = cfg.with_pcap(p);
        }
        let how = format!("listen on another local address with {addr_flag} ADDR");
        let dev =
            Device::open_with(cfg).map_err(|e| crate::cmtool::device_error(a.ip(), &e, &how))?;
        crate::narrow_link::apply_cc(&dev, false);
        let cm_port = cm
            .add_device(&dev)
            .map_err(|e| format!("device {}: {e}", a.ip()))?;
        ports.push((dev, cm_port));
    }
    let guid = match guid.as_deref() {
        Some(g) => parse_guid(g).ok_or_else(|| {
            format!("--guid {g}: 16 hex digits (with or without 0x) or aaaa:bbbb:cccc:dddd")
        })?,
        None => ports[0].0.query_device().node_guid.0,
    };

    let mut cfg = SrpConfig::new(guid);
    cfg.login.acl = acl;
    if let Some(n) = max_req_size {
        if n < MIN_MAX_REQ_SIZE {
            return Err(format!("max request size {n}: at least {MIN_MAX_REQ_SIZE}"));
        }
        cfg.login.max_req_size = n;
    }
    if let Some(n) = rq_size {
        if !(2..=4096).contains(&n) {
            return Err(format!("rq_size {n}: 2 ..= 4096"));
        }
        cfg.login.rq_size = n;
    }
    cfg.login.channels_per_initiator = channels_per_initiator;

    let mut scsi = Target::new(TargetConfig {
        port_name: colon_guid(guid),
        ..TargetConfig::default()
    });
    for (i, l) in luns.iter().enumerate() {
        let lu = make_lun(l)?;
        info!(
            lun = i,
            blocks = lu.blocks(),
            block_size = lu.block_size(),
            read_only = lu.read_only(),
            "LUN"
        );
        scsi.add_lun(LunId(i as u64), lu)
            .map_err(|e| format!("LUN {i}: {e}"))?;
    }
    let mut engine = SrpTarget::new(cfg.clone(), scsi);

    let mut tports = Vec::new();
    for (dev, cm_port) in ports {
        let tport = cm
            .with(cm_port, |_, stack, _| engine.add_port(stack, cm_port))
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("device {}: {e}", dev.local_addr().ip()))?;
        let attr = dev.query_device();
        let info = DmInfo {
            guid,
            vendor_id: attr.vendor_id,
            device_id: attr.vendor_part_id,
            device_version: attr.hw_ver as u16,
            send_queue_depth: cfg.login.rq_size.min(attr.max_qp_wr) as u16,
            send_size: cfg.login.max_req_size,
            max_rdma_size: DEFAULT_MAX_RDMA_SIZE,
        };
        dev.attach_mad_client(|mad, _| {
            let agent = mad.register_methods(
                MgmtClass(MGMT_CLASS_DEVICE_MGMT),
                1,
                Some(&[Method::GET, Method::SET]),
            )?;
            Ok::<_, softrdma_core::mad::MadError>(Arc::new(DmClient { agent, info }))
        })
        .map_err(|e| format!("DM agent: {e:?}"))?;
        tports.push(Port {
            dev,
            cm_port,
            tport,
        });
    }
    // One port: the memory LUNs' media move into its device, so READ and WRITE data go
    // between the wire and the LUN with no bounce-buffer copy. With several ports each
    // device has its own memory, so the LUNs stay in the SCSI core and I/O copies.
    if let [p] = tports.as_slice() {
        let n = cm
            .with(p.cm_port, |_, stack, _| engine.lend_media(stack, p.tport))
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("device {}: {e}", p.dev.local_addr().ip()))?;
        debug!(
            luns = n,
            "memory LUNs lent to the device: READ and WRITE run in place"
        );
    }
    let mut listeners = Vec::new();
    for a in &listen {
        let id = cm
            .with_cm(|r| {
                let id = r.create_id();
                match r.bind_addr(&id, *a).and_then(|_| r.listen(&id, 128)) {
                    Ok(()) => Ok(id),
                    Err(e) => {
                        r.destroy(softrdma_core::time::Instant::ZERO, id);
                        Err(e)
                    }
                }
            })
            .map_err(|e| format!("listen on {a}: {e}"))?;
        listeners.push(id);
    }
    if ib_cm {
        cm.with_cm(|r| engine.listen_ib(r))
            .map_err(|e| format!("IB CM listen on service ID {guid:#018x}: {e:?}"))?;
    }
    Ok(Served {
        cm,
        engine,
        tports,
        listeners,
        guid,
        listen,
        ib_cm,
    })
}

impl Served {
    /// The add_target line of each listening address.
    pub fn add_target_lines(&self) -> Vec<String> {
        let guid = self.guid;
        self.listen
            .iter()
            .map(|a| {
                let dest = match a {
                    SocketAddr::V4(v) => format!("{}:{}", v.ip(), v.port()),
                    SocketAddr::V6(v) => format!("[{}]:{}", v.ip(), v.port()),
                };
                format!("id_ext={guid:016x},ioc_guid={guid:016x},dest={dest}")
            })
            .collect()
    }

    /// The IB CM's counters of the target's CM.
    pub fn cm_counters(&self) -> softrdma_core::cm::CmCounters {
        self.cm.counters()
    }

    /// Serves until `term`; then disconnects every channel (up to 5 s for the DREPs),
    /// flushes the file LUNs and closes the listeners.
    pub fn run(&mut self, term: &AtomicBool) {
        let Served {
            cm,
            engine,
            tports,
            listeners,
            ..
        } = self;
        let mut wcs = Vec::with_capacity(64);
        let slice = if tports.len() > 1 {
            Duration::from_millis(5)
        } else {
            Duration::from_millis(200)
        };
        let mut shutting: Option<StdInstant> = None;
        loop {
            if term.load(Ordering::Relaxed) && shutting.is_none() {
                info!("shutting down: disconnecting every channel");
                engine.set_enabled(false);
                for p in tports.iter() {
                    let _ = cm.with(p.cm_port, |rdma, stack, now| {
                        engine.logout_all(now, rdma, stack, p.tport)
                    });
                }
                shutting = Some(StdInstant::now());
            }
            while let Some(ev) = cm.poll_event() {
                handle_event(cm, engine, tports, ev);
            }
            log_events(engine);
            if let Some(t) = shutting {
                if engine.channels().is_empty() || t.elapsed() > Duration::from_secs(5) {
                    break;
                }
            }
            for p in tports.iter() {
                let Some(cq) = engine.cq(p.tport) else {
                    continue;
                };
                wcs.clear();
                let stop =
                    || cm.has_event() || (term.load(Ordering::Relaxed) && shutting.is_none());
                let _ = p.dev.wait_cq_or(cq, &mut wcs, 64, Some(slice), &stop);
                let _ = cm.with(p.cm_port, |rdma, stack, now| {
                    for wc in &wcs {
                        engine.completion(now, rdma, stack, wc);
                    }
                    engine.poll(now, rdma, stack, p.tport)
                });
            }
            log_events(engine);
        }
        for (lun, e) in engine.scsi().flush_luns() {
            error!(%lun, "flushing the LUN failed: {e:?}");
        }
        let now = tports[0].dev.now();
        cm.with_cm(|r| {
            for id in listeners.drain(..) {
                r.destroy(now, id);
            }
        });
        for p in tports.iter() {
            let _ = p.dev.flush_pcap();
        }
        info!("stopped");
    }
}

/// A target serving on a thread of this process (the demo, `perf srp`): stopped (channels
/// disconnected) when dropped.
pub struct Background {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<softrdma_core::cm::CmCounters>>,
    /// Its add_target line.
    pub line: String,
}

impl Background {
    /// Starts `setup` on its own thread; returns once it listens.
    pub fn spawn(setup: Setup) -> Result<Background, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let st = stop.clone();
        let handle = std::thread::Builder::new()
            .name("srp-target".into())
            .spawn(move || match start(setup) {
                Ok(mut s) => {
                    let _ = tx.send(Ok(s.add_target_lines().remove(0)));
                    s.run(&st);
                    s.cm_counters()
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    softrdma_core::cm::CmCounters::default()
                }
            })
            .map_err(|e| format!("thread: {e}"))?;
        let line = rx
            .recv()
            .map_err(|_| "the target thread ended".to_string())??;
        Ok(Background {
            stop,
            handle: Some(handle),
            line,
        })
    }

    /// Stops it (every channel disconnected) and returns its CM counters.
    pub fn stop(mut self) -> softrdma_core::cm::CmCounters {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn serve(args: Args) -> Result<(), String> {
    let setup = setup_from(&args)?;
    let mut served = start(setup)?;
    // Handlers first: whoever reads the add_target line may signal us at once (a SIGTERM
    // that came before them killed the process instead of shutting it down).
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, term.clone()).map_err(|e| format!("signal: {e}"))?;
    }
    let guid = served.guid;
    println!("target GUID {guid:016x} ({})", colon_guid(guid));
    for l in served.add_target_lines() {
        println!("add_target: {l}");
    }
    if served.ib_cm {
        println!(
            "add_target (IB CM): id_ext={guid:016x},ioc_guid={guid:016x},dgid=<target gid>,pkey=ffff,service_id={guid:016x}"
        );
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();

    served.run(&term);
    Ok(())
}

fn handle_event(cm: &Cm, engine: &mut SrpTarget, ports: &[Port], ev: Event) {
    match ev {
        Event::Rdma(mut e) if e.event == RdmaCmEventType::ConnectRequest => {
            let Some(id) = e.new_id.take() else { return };
            let name = id.name();
            let pd = std::mem::take(&mut e.private_data);
            let mut id = Some(id);
            let r = cm.with_id(name, |rdma, stack, now| {
                let Some(id) = id.take() else { return };
                if let Err(f) = engine.rdma_connect_request(now, rdma, stack, id, &pd) {
                    f.reject(now, rdma);
                }
            });
            if r.is_err() {
                if let Some(id) = id {
                    let now = ports[0].dev.now();
                    cm.with_cm(|r| r.destroy(now, id));
                }
            }
        }
        Event::Rdma(e) => {
            let _ = cm.with_id(e.id, |rdma, stack, now| {
                engine.rdma_event(now, rdma, stack, &e)
            });
        }
        Event::Ib(CmEvent::ReqReceived { id, listen, req }) => {
            if !engine.is_ib_listener(listen) {
                let now = ports[0].dev.now();
                cm.with_cm(|r| r.cm_mut().destroy(now, id));
                return;
            }
            let mut id = Some(id);
            let r = cm.with(req.port, |rdma, stack, now| {
                let Some(id) = id.take() else { return };
                if let Err(f) = engine.ib_req(now, rdma, stack, id, &req) {
                    f.reject(now, rdma);
                }
            });
            if r.is_err() {
                if let Some(id) = id {
                    let now = ports[0].dev.now();
                    cm.with_cm(|r| r.cm_mut().destroy(now, id));
                }
            }
        }
        Event::Ib(CmEvent::Retry { .. }) => {}
        Event::Ib(e) => {
            let id = match &e {
                CmEvent::RtuReceived { id, .. }
                | CmEvent::UserEstablished { id }
                | CmEvent::DreqReceived { id, .. }
                | CmEvent::DrepReceived { id, .. }
                | CmEvent::TimewaitExit { id }
                | CmEvent::RejReceived { id, .. }
                | CmEvent::RepError { id, .. }
                | CmEvent::DreqError { id, .. } => *id,
                _ => return,
            };
            if let Some(port) = cm.with_cm(|r| r.cm().port_of(id)) {
                let _ = cm.with(port, |rdma, stack, now| {
                    engine.ib_event(now, rdma, stack, &e)
                });
            }
        }
    }
}

fn log_events(engine: &mut SrpTarget) {
    while let Some(ev) = engine.poll_event() {
        match ev {
            SrpEvent::LoginRequest {
                initiator,
                target,
                it_iu_len,
                source,
            } => info!(
                "Received SRP_LOGIN_REQ with i_port_id {initiator}, t_port_id {target} and it_iu_len {it_iu_len} from {source}"
            ),
            SrpEvent::LoginAccepted {
                channel,
                initiator,
                source,
                it_iu_len,
                immediate,
                multichannel,
                cm,
            } => info!(
                %channel,
                "login accepted ({cm}): initiator {initiator} from {source}, it_iu_len {it_iu_len}, immediate data {}, {multichannel}",
                if immediate { "on" } else { "off" }
            ),
            SrpEvent::LoginRefused {
                initiator,
                source,
                refusal,
            } => match refusal {
                Some(r) => warn!(
                    "login rejected: initiator {initiator} from {source}: SRP_LOGIN_REJ reason {:#010x} ({}) because {r}",
                    r.reason().0,
                    r.reason()
                ),
                None => warn!("login rejected: from {source}: not an SRP login request"),
            },
            SrpEvent::StateChanged { channel, from, to } => {
                info!(%channel, "channel state {from} -> {to}")
            }
            SrpEvent::Logout { channel, by, why } => {
                info!(%channel, "logout by the {}: {why}", match by {
                    softrdma_srp::LogoutBy::Initiator => "initiator",
                    softrdma_srp::LogoutBy::Target => "target",
                })
            }
            SrpEvent::Warning { channel, what } => match channel {
                Some(c) => warn!(channel = %c, "{what}"),
                None => warn!("{what}"),
            },
        }
    }
}
