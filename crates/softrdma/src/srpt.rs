//! `softrdma srpt`: a userspace SRP target a Linux `ib_srp` initiator logs in to, on the
//! driver's runtime (devices with background loops, the process's CM) around the sans-IO
//! engine of `softrdma-srp` and the SCSI core of `softrdma-scsi`.
//!
//! One thread runs the target: it takes the CM's events (logins, establishment,
//! disconnects) and the completions of each device's shared CQ, and hands both to the
//! engine under the device's and the CM's locks (`Cm::with`). DM MADs are answered in the
//! device loops by a [`MadClient`] on QP1.

use std::collections::BTreeMap;
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
use softrdma_core::rdma_cm::RdmaCmEvent;
use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::mad::{MadClient, PortCtx};
use softrdma_driver::{Device, DeviceConfig, PollMode, Progress};
use softrdma_scsi::{
    AluaState, BlockSize, FileStore, LogicalUnit, LunConfig, LunId, LunMapping, MemStore,
    PortGroup, Target, TargetConfig,
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
    override_usage = "softrdma srpt -a ADDR --lun SPEC... [OPTIONS]\n       softrdma srpt --config FILE [OPTIONS]\n       softrdma srpt ctl SOCKET COMMAND...",
    args_conflicts_with_subcommands = true,
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
    /// Allow this initiator to log in: its port identifier (32 hex digits, or fewer for
    /// initiator_ext 0, with or without 0x), its GUID (aaaa:bbbb:cccc:dddd, any
    /// initiator_ext) or its source address. Without --allow (or `[acl]` in --config) every
    /// login is refused, as LIO refuses initiators without a node ACL.
    #[arg(long = "allow", value_name = "INITIATOR")]
    allow: Vec<String>,
    /// Let any initiator log in (LIO's demo mode, generate_node_acls=1).
    #[arg(long)]
    demo: bool,
    /// srp_max_req_size: the largest initiator-to-target IU.
    #[arg(long)]
    max_req_size: Option<u32>,
    /// Also listen on the IB CM with service ID = GUID (what ib_srpt does on IB ports).
    #[arg(long)]
    ib_cm: bool,
    /// Record the devices' traffic to this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Take management commands on this Unix socket while serving (`softrdma srpt ctl`).
    #[arg(long, value_name = "SOCKET")]
    ctl: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Option<SrptCmd>,
}

#[derive(Debug, clap::Subcommand)]
enum SrptCmd {
    /// Change a running target (started with --ctl SOCKET): `show`, `lun add N SPEC`, `lun
    /// remove N`, `acl add INITIATOR`, `acl remove INITIATOR` (its sessions end), `map add
    /// INITIATOR LUN TPG_LUN [ro]`, `map remove INITIATOR LUN`.
    Ctl {
        /// The target's --ctl socket.
        socket: PathBuf,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        words: Vec<String>,
    },
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
    /// The management socket (`--ctl`).
    ctl: Option<PathBuf>,
    /// Node ACLs with their own LUN numbers (LIO's mapped LUNs); each also admits its
    /// initiator.
    #[serde(default)]
    node_acl: Vec<NodeAcl>,
    /// Any initiator may log in (LIO's demo mode); otherwise only the ACL's.
    #[serde(default)]
    demo_mode: bool,
    #[serde(default)]
    limits: Limits,
    /// ib_srpt's TPG attributes.
    #[serde(default)]
    tpg: TpgAttrib,
}

/// A node ACL (`/sys/kernel/config/target/srpt/<port>/tpgt_1/acls/<initiator>/`): the
/// initiator in any `--allow` form and its mapped LUNs.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeAcl {
    initiator: String,
    #[serde(default)]
    mapped_lun: Vec<MappedLun>,
}

/// `lun_N` of a node ACL: the initiator's LUN number `lun` reaches the target's LUN
/// `tpg_lun`, read-only with `read_only` (LIO's `write_protect`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MappedLun {
    lun: u16,
    tpg_lun: u16,
    #[serde(default)]
    read_only: bool,
}

/// ib_srpt's TPG attributes (`/sys/kernel/config/target/srpt/<port>/tpgt_1/attrib/`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TpgAttrib {
    /// Advertised in the DM IOControllerProfile (RDMATransferSize), 65536 by default.
    srp_max_rdma_size: Option<u32>,
    /// The send buffer of one response (SRP_RSP and its sense), 256 by default.
    srp_max_rsp_size: Option<u32>,
    /// The channel's send queue is half of it (ib_srpt sizes its SQ so), 1024 by default here.
    srp_sq_size: Option<u32>,
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

/// A LUN's unit serial number, as targetcli gives every LIO backstore one (`vpd_unit_serial`):
/// without it LIO lists no VPD pages and Linux reads neither the block limits (0xB0) nor the
/// provisioning page (0xB2), so it would not know to send UNMAP. Stable across restarts: the
/// target GUID, the LUN number and (FNV-1a of) the backing file's path.
fn unit_serial(guid: u64, lun: usize, l: &LunSpec) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let what = match &l.file {
        Some(p) => p.display().to_string(),
        None => "mem".to_string(),
    };
    for b in what.bytes().chain((lun as u64).to_be_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{guid:016x}{h:016x}")
}

fn make_lun(l: &LunSpec, serial: String) -> Result<LogicalUnit, String> {
    let bs = match l.block_size.unwrap_or(512) {
        512 => BlockSize::B512,
        4096 => BlockSize::B4096,
        n => return Err(format!("block size {n}: 512 or 4096")),
    };
    let cfg = LunConfig {
        read_only: l.read_only,
        unit_serial: Some(serial),
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

/// An ACL entry in the forms LIO's ib_srpt takes for a node ACL name
/// (`srpt_parse_i_port_id`, `srpt_parse_guid`, an address for RDMA CM logins): the
/// initiator port identifier as 1 to 32 hex digits, with or without `0x` (fewer than 32 are
/// the low digits: `505400fffe77000a` is initiator_ext 0 and that GUID), the GUID as
/// `aaaa:bbbb:cccc:dddd` (any initiator_ext), or an IPv4/IPv6 address.
pub fn parse_acl(s: &str) -> Result<AclEntry, String> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(AclEntry::Addr(ip));
    }
    if s.contains(':') {
        let groups: Vec<&str> = s.split(':').collect();
        if groups.len() == 4
            && groups
                .iter()
                .all(|g| (1..=4).contains(&g.len()) && g.bytes().all(|c| c.is_ascii_hexdigit()))
        {
            let mut g: u64 = 0;
            for x in groups {
                g = g << 16 | u64::from(u16::from_str_radix(x, 16).map_err(|e| e.to_string())?);
            }
            return Ok(AclEntry::Guid(g));
        }
    }
    let h = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if (1..=32).contains(&h.len()) && h.bytes().all(|c| c.is_ascii_hexdigit()) {
        let v = u128::from_str_radix(h, 16).map_err(|e| e.to_string())?;
        return Ok(AclEntry::PortId(v.to_be_bytes()));
    }
    Err(format!(
        "{s}: an initiator is a port identifier (up to 32 hex digits, 0x optional), a GUID \
         (aaaa:bbbb:cccc:dddd) or an IP address"
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
    if let Some(SrptCmd::Ctl { socket, words }) = &args.cmd {
        return ctl_client(socket, words);
    }
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
    /// `None`: any initiator (demo mode); `Some` of an empty list: nobody.
    pub acl: Option<Vec<AclEntry>>,
    /// Node ACLs with mapped LUNs.
    pub lun_maps: Vec<(AclEntry, BTreeMap<LunId, LunMapping>)>,
    pub max_req_size: Option<u32>,
    pub max_rsp_size: Option<u32>,
    pub max_rdma_size: Option<u32>,
    pub sq_size: Option<u32>,
    pub rq_size: Option<u32>,
    pub channels_per_initiator: Option<u32>,
    pub ib_cm: bool,
    pub pcap: Option<PathBuf>,
    /// The flag that chooses the address, for the hints (`-a` for srpt, `--target` for
    /// the demo).
    pub addr_flag: &'static str,
}

impl Setup {
    /// A target on `listen` with one memory LUN of `size` bytes (512-byte blocks), open to
    /// any initiator (demo mode: the in-process benchmarks' target; `softrdma demo` gives its
    /// initiator an ACL instead).
    pub fn memory(listen: SocketAddr, size: u64) -> Setup {
        Setup {
            listen: vec![listen],
            guid: None,
            luns: vec![LunSpec {
                mem: Some(size.to_string()),
                ..LunSpec::default()
            }],
            acl: None,
            lun_maps: Vec::new(),
            max_req_size: None,
            max_rsp_size: None,
            max_rdma_size: None,
            sq_size: None,
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
    // Closed by default, as LIO: no ACL entry, no login. Demo mode opens it to anyone.
    let mut entries: Vec<AclEntry> = match &file.acl {
        Some(a) => a
            .allow
            .iter()
            .map(|s| parse_acl(s))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    for s in &args.allow {
        entries.push(parse_acl(s).map_err(|e| format!("--allow {e}"))?);
    }
    let mut lun_maps = Vec::new();
    for n in &file.node_acl {
        let e = parse_acl(&n.initiator).map_err(|e| format!("[[node_acl]] {e}"))?;
        if !n.mapped_lun.is_empty() {
            let mut map = BTreeMap::new();
            for m in &n.mapped_lun {
                let mapping = LunMapping {
                    lun: LunId(u64::from(m.tpg_lun)),
                    read_only: m.read_only,
                };
                if map.insert(LunId(u64::from(m.lun)), mapping).is_some() {
                    return Err(format!(
                        "[[node_acl]] {}: LUN {} mapped twice",
                        n.initiator, m.lun
                    ));
                }
            }
            lun_maps.push((e.clone(), map));
        }
        entries.push(e);
    }
    let acl = if args.demo || file.demo_mode {
        None
    } else {
        Some(entries)
    };
    Ok(Setup {
        listen,
        guid: args.guid.clone().or(file.guid),
        luns,
        acl,
        lun_maps,
        max_req_size: args.max_req_size.or(file.limits.max_req_size),
        max_rsp_size: file.tpg.srp_max_rsp_size,
        max_rdma_size: file.tpg.srp_max_rdma_size,
        sq_size: file.tpg.srp_sq_size,
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
    /// The management socket (`--ctl`), polled between turns.
    ctl: Option<std::os::unix::net::UnixListener>,
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
        lun_maps,
        max_req_size,
        max_rsp_size,
        max_rdma_size,
        sq_size,
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
    if let Some(n) = max_rsp_size {
        // An SRP_RSP (36 bytes) with the 18 bytes of fixed-format sense must fit.
        if !(64..=65536).contains(&n) {
            return Err(format!("srp_max_rsp_size {n}: 64 ..= 65536"));
        }
        cfg.login.max_rsp_size = n;
    }
    if let Some(n) = sq_size {
        if !(16..=65536).contains(&n) {
            return Err(format!("srp_sq_size {n}: 16 ..= 65536"));
        }
        cfg.sq_size = n / 2;
    }
    let max_rdma_size = match max_rdma_size {
        Some(n) if !(4096..=(1 << 24)).contains(&n) => {
            return Err(format!("srp_max_rdma_size {n}: 4096 ..= 16777216"))
        }
        Some(n) => n,
        None => DEFAULT_MAX_RDMA_SIZE,
    };

    // ALUA as LIO's default_tg_pt_gp: one target port group (id 0), active/optimized, with
    // every target port (one per address; relative port identifier = index + 1), so a
    // multipath initiator sees each address as an optimized path to the same LUs.
    let ports_count = ports.len();
    let mut scsi = Target::new(TargetConfig {
        port_name: colon_guid(guid),
        port_groups: vec![PortGroup {
            id: 0,
            state: AluaState::ActiveOptimized,
            preferred: false,
            ports: (1..=ports_count)
                .map(|p| u16::try_from(p).unwrap_or(u16::MAX))
                .collect(),
        }],
        ..TargetConfig::default()
    });
    for (i, l) in luns.iter().enumerate() {
        let lu = make_lun(l, unit_serial(guid, i, l))?;
        if let Some(e) = lu.reservations_load_error() {
            warn!(lun = i, "{e}: starting without persistent reservations");
        }
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
    for (e, map) in &lun_maps {
        for (l, m) in map {
            if scsi.lun(m.lun).is_none() {
                return Err(format!(
                    "[[node_acl]] {}: LUN {l} maps to tpg_lun {}, which is not configured",
                    acl_text(e),
                    m.lun
                ));
            }
        }
    }
    cfg.lun_maps = lun_maps;
    // Said once the configuration is known good (a refusal stays one line).
    match &cfg.login.acl {
        None => info!("demo mode: any initiator may log in"),
        Some(a) if a.is_empty() => warn!(
            "no ACL: every login is refused (SRP_LOGIN_REJ reason 0x00010006), as LIO refuses \
             initiators without a node ACL; allow initiators with --allow (or [acl] allow in \
             --config), or any with --demo (demo_mode = true)"
        ),
        Some(a) => info!(entries = a.len(), "ACL: only these initiators may log in"),
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
            max_rdma_size,
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
        ctl: None,
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

    /// Takes management commands on a Unix socket at `path` (a stale socket file nobody
    /// listens on is replaced; one a running target holds is refused).
    pub fn listen_ctl(&mut self, path: &std::path::Path) -> Result<(), String> {
        use std::os::unix::net::{UnixListener, UnixStream};
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(format!(
                    "--ctl {}: another target is listening there",
                    path.display()
                ));
            }
            let _ = std::fs::remove_file(path);
        }
        let l = UnixListener::bind(path).map_err(|e| format!("--ctl {}: {e}", path.display()))?;
        l.set_nonblocking(true)
            .map_err(|e| format!("--ctl {}: {e}", path.display()))?;
        self.ctl = Some(l);
        Ok(())
    }

    /// Serves until `term`; then disconnects every channel (up to 5 s for the DREPs),
    /// flushes the file LUNs and closes the listeners.
    pub fn run(&mut self, term: &AtomicBool) {
        let guid = self.guid;
        let Served {
            cm,
            engine,
            tports,
            listeners,
            ctl,
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
            if let (Some(l), None) = (ctl.as_ref(), shutting) {
                while let Ok((conn, _)) = l.accept() {
                    ctl_serve(conn, cm, engine, tports, guid);
                }
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
    // The management socket before the add_target lines: whoever reads them may send a
    // `ctl` command at once (a test did, and found no socket yet).
    let ctl_path = args
        .ctl
        .clone()
        .or_else(|| setup_ctl_from_config(&args).ok().flatten());
    if let Some(p) = &ctl_path {
        served.listen_ctl(p)?;
        info!(socket = %p.display(), "management commands: softrdma srpt ctl SOCKET ...");
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
    if let Some(p) = &ctl_path {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

/// The `ctl` path of the configuration file, if it names one.
fn setup_ctl_from_config(args: &Args) -> Result<Option<PathBuf>, String> {
    let Some(p) = &args.config else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let f: FileConfig = toml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(f.ctl)
}

/// `softrdma srpt ctl SOCKET WORDS...`: one command line to the target, its answer printed;
/// exit status 1 when the target refused it (an answer starting `error:`).
fn ctl_client(socket: &std::path::Path, words: &[String]) -> ExitCode {
    use std::io::{Read, Write};
    let mut conn = match std::os::unix::net::UnixStream::connect(socket) {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "softrdma srpt ctl: {}: {e} (is a target running with --ctl {}?)",
                socket.display(),
                socket.display()
            );
            return ExitCode::from(1);
        }
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let line = format!("{}\n", words.join(" "));
    let mut answer = String::new();
    let r = conn
        .write_all(line.as_bytes())
        .and_then(|_| conn.shutdown(std::net::Shutdown::Write))
        .and_then(|_| conn.read_to_string(&mut answer));
    if let Err(e) = r {
        eprintln!("softrdma srpt ctl: {}: {e}", socket.display());
        return ExitCode::from(1);
    }
    if let Some(e) = answer.strip_prefix("error: ") {
        eprint!("softrdma srpt ctl: {e}");
        return ExitCode::from(1);
    }
    print!("{answer}");
    ExitCode::SUCCESS
}

/// One management connection: a command line in, the answer out (`error: ...` when
/// refused), closed.
fn ctl_serve(
    conn: std::os::unix::net::UnixStream,
    cm: &Cm,
    engine: &mut SrpTarget,
    ports: &[Port],
    guid: u64,
) {
    use std::io::{BufRead, Write};
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let mut line = String::new();
    let mut r = std::io::BufReader::new(&conn);
    if r.read_line(&mut line).is_err() {
        return;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let answer = match ctl_command(&words, cm, engine, ports, guid) {
        Ok(a) => a,
        Err(e) => format!("error: {e}\n"),
    };
    info!(command = %line.trim(), answer = %answer.trim(), "ctl");
    let mut w = &conn;
    let _ = w.write_all(answer.as_bytes());
}

/// A management command; the answer's text.
fn ctl_command(
    words: &[&str],
    cm: &Cm,
    engine: &mut SrpTarget,
    ports: &[Port],
    guid: u64,
) -> Result<String, String> {
    const USAGE: &str = "commands: show | lun add N SPEC | lun remove N | acl add INITIATOR | \
                         acl remove INITIATOR | map add INITIATOR LUN TPG_LUN [ro] | \
                         map remove INITIATOR LUN";
    let lun_no = |s: &str| -> Result<LunId, String> {
        s.parse::<u16>()
            .map(|n| LunId(u64::from(n)))
            .map_err(|_| format!("{s}: a LUN number (0 ..= 65535)"))
    };
    match words {
        ["show"] => {
            let mut out = String::new();
            let ids: Vec<LunId> = engine.scsi().lun_ids().collect();
            for id in ids {
                if let Some(lu) = engine.scsi().lun(id) {
                    out.push_str(&format!(
                        "lun {id}: {} blocks of {} bytes{}{}\n",
                        lu.blocks(),
                        lu.block_size(),
                        if lu.read_only() { ", read-only" } else { "" },
                        if lu.medium_lent() {
                            ", in the device"
                        } else {
                            ""
                        },
                    ));
                }
            }
            match engine.acl() {
                None => out.push_str("acl: demo mode (any initiator)\n"),
                Some([]) => out.push_str("acl: none (every login refused)\n"),
                Some(a) => {
                    for e in a {
                        out.push_str(&format!("acl: {}\n", acl_text(e)));
                    }
                }
            }
            for (ch, st) in engine.channels() {
                out.push_str(&format!(
                    "channel {ch}: {st}, initiator {}\n",
                    engine.channel_initiator(ch).unwrap_or("?")
                ));
            }
            Ok(out)
        }
        ["lun", "add", n, spec] => {
            let id = lun_no(n)?;
            let l = parse_lun(spec)?;
            let lu = make_lun(&l, unit_serial(guid, id.0 as usize, &l))?;
            engine.add_lun(id, lu).map_err(|e| e.to_string())?;
            Ok(format!("lun {id} added\n"))
        }
        ["lun", "remove", n] => {
            let id = lun_no(n)?;
            let p = ports.first().ok_or("no port")?;
            let r = cm
                .with(p.cm_port, |rdma, stack, now| {
                    engine.remove_lun(now, rdma, stack, id)
                })
                .map_err(|e| e.to_string())?;
            r.map_err(|e| e.to_string())?;
            Ok(format!("lun {id} removed\n"))
        }
        ["acl", op @ ("add" | "remove"), who] => {
            let e = parse_acl(who)?;
            let mut acl = match engine.acl() {
                Some(a) => a.to_vec(),
                None => return Err(
                    "demo mode: every initiator may log in; restart without --demo to use an ACL"
                        .into(),
                ),
            };
            if *op == "add" {
                if !acl.contains(&e) {
                    acl.push(e.clone());
                }
                engine.set_acl(Some(acl));
                return Ok(format!("acl {} added\n", acl_text(&e)));
            }
            let before = acl.len();
            acl.retain(|x| *x != e);
            if acl.len() == before {
                return Err(format!("{who}: not in the ACL"));
            }
            engine.set_acl(Some(acl));
            let mut ended = 0;
            for p in ports {
                ended += cm
                    .with(p.cm_port, |rdma, stack, now| {
                        engine.logout_refused(now, rdma, stack, p.tport)
                    })
                    .unwrap_or(0);
            }
            Ok(format!(
                "acl {} removed; {ended} channel(s) logged out\n",
                acl_text(&e)
            ))
        }
        ["map", "add", who, lun, tpg_lun, rest @ ..] => {
            let e = parse_acl(who)?;
            let read_only = match rest {
                [] => false,
                ["ro"] => true,
                _ => {
                    return Err(format!(
                        "{}: the last word is ro or nothing",
                        rest.join(" ")
                    ))
                }
            };
            let mut map = engine.lun_map(&e).cloned().unwrap_or_default();
            map.insert(
                lun_no(lun)?,
                LunMapping {
                    lun: lun_no(tpg_lun)?,
                    read_only,
                },
            );
            let n = engine
                .set_lun_map(e, Some(map))
                .map_err(|e| e.to_string())?;
            Ok(format!("mapped; {n} session(s) see it now\n"))
        }
        ["map", "remove", who, lun] => {
            let e = parse_acl(who)?;
            let id = lun_no(lun)?;
            let mut map = engine
                .lun_map(&e)
                .cloned()
                .ok_or_else(|| format!("{who}: no mapped LUNs"))?;
            if map.remove(&id).is_none() {
                return Err(format!("{who}: LUN {id} is not mapped"));
            }
            // An empty map still hides every LUN (LIO: a node ACL without mapped LUNs).
            let n = engine
                .set_lun_map(e, Some(map))
                .map_err(|e| e.to_string())?;
            Ok(format!("unmapped; {n} session(s) changed\n"))
        }
        _ => Err(format!("{}: unknown command; {USAGE}", words.join(" "))),
    }
}

/// An ACL entry as `--allow` takes it.
fn acl_text(e: &AclEntry) -> String {
    match e {
        AclEntry::PortId(id) => format!(
            "0x{}",
            id.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
        AclEntry::Guid(g) => colon_guid(*g),
        AclEntry::Addr(a) => a.to_string(),
    }
}

fn handle_event(cm: &Cm, engine: &mut SrpTarget, ports: &[Port], ev: Event) {
    match ev {
        Event::Rdma(RdmaCmEvent::ConnectRequest {
            new_id: id,
            private_data: pd,
            ..
        }) => {
            let name = id.name();
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
            let _ = cm.with_id(e.id(), |rdma, stack, now| {
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
            let Some(id) = SrpTarget::ib_event_id(&e) else {
                return;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_forms_lio_takes() {
        let id = |h: u128| AclEntry::PortId(h.to_be_bytes());
        let full = 0x0000_0000_0000_0001_5054_00ff_fe77_000a_u128;
        assert_eq!(
            parse_acl("0x0000000000000001505400fffe77000a"),
            Ok(id(full))
        );
        assert_eq!(parse_acl("0000000000000001505400fffe77000a"), Ok(id(full)));
        // The short form: the low digits, initiator_ext 0.
        assert_eq!(parse_acl("505400fffe77000a"), Ok(id(0x5054_00ff_fe77_000a)));
        assert_eq!(
            parse_acl("0x505400FFFE77000A"),
            Ok(id(0x5054_00ff_fe77_000a))
        );
        assert_eq!(
            parse_acl("5054:00ff:fe77:000a"),
            Ok(AclEntry::Guid(0x5054_00ff_fe77_000a))
        );
        assert_eq!(
            parse_acl("10.77.0.10"),
            Ok(AclEntry::Addr(
                "10.77.0.10".parse().unwrap_or(IpAddr::from([0; 4]))
            ))
        );
        assert!(matches!(parse_acl("fd77::10"), Ok(AclEntry::Addr(_))));
        for bad in [
            "",
            "0x",
            "nobody",
            "0x123456789012345678901234567890123",
            "1:2:3",
        ] {
            assert!(parse_acl(bad).is_err(), "{bad}");
        }
    }

    fn args(extra: &[&str]) -> Args {
        let mut v = vec!["srpt", "-a", "127.0.0.1", "--lun", "mem:1M"];
        v.extend_from_slice(extra);
        Args::parse_from(v)
    }

    #[test]
    fn closed_unless_allowed_or_demo() {
        let s = setup_from(&args(&[])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.acl, Some(Vec::new()));
        let s = setup_from(&args(&["--allow", "127.0.0.2"])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.acl.map(|a| a.len()), Some(1));
        let s = setup_from(&args(&["--demo"])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.acl, None);
    }

    #[test]
    fn config_demo_mode_and_tpg_attributes() {
        let dir = std::env::temp_dir().join(format!("softrdma-srpt-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let p = dir.join("t.toml");
        std::fs::write(
            &p,
            "demo_mode = true\n[tpg]\nsrp_max_rdma_size = 131072\nsrp_max_rsp_size = 512\nsrp_sq_size = 2048\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let path = p.display().to_string();
        let s = setup_from(&args(&["--config", &path])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.acl, None);
        assert_eq!(
            (s.max_rdma_size, s.max_rsp_size, s.sq_size),
            (Some(131072), Some(512), Some(2048))
        );
        std::fs::write(&p, "[acl]\nallow = [\"5054:00ff:fe77:000a\"]\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let s = setup_from(&args(&["--config", &path])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.acl, Some(vec![AclEntry::Guid(0x5054_00ff_fe77_000a)]));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
