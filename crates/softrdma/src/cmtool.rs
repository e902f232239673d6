//! What the RDMA CM tools (`ucmatose`, `cmtime`, `rping`) share: a device with the
//! process's CM on it, RC QPs in INIT, the source address rule, the message for an address
//! another process holds, every local address (a wildcard listener), and SIGINT/SIGTERM.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use softrdma_core::cm::CmPort;
use softrdma_core::rdma_cm::{RdmaCm, RdmaCmEventType, RdmaCmId};
use softrdma_core::verbs::{CqId, PdId, QpCap, QpInitAttr, QpType};
use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::{Device, DeviceConfig, PollMode, Progress};

/// A device on `ip` with a CM on it.
pub struct CmDevice {
    pub dev: Device,
    pub cm: Cm,
    /// The device's port in the CM.
    #[allow(dead_code)]
    pub port: CmPort,
    pub pd: PdId,
}

impl Drop for CmDevice {
    /// The pcap file is complete when the tool's own handle goes, on the tool's thread: the
    /// device itself may outlive it for a moment on its loop thread (which may hold the
    /// CM's last reference), and a process that returns from `main` meanwhile would lose
    /// what was buffered.
    fn drop(&mut self) {
        let _ = self.dev.flush_pcap();
    }
}

/// A seed from the clock and the process id.
pub fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        ^ u64::from(std::process::id()).rotate_left(32)
}

/// The RoCEv2 UDP port every softrdma device binds on its address.
pub const ROCE_PORT: u16 = 4791;

/// A background loop thread that sleeps in epoll (the tools' default).
pub const THREAD: Progress = Progress::Thread(PollMode::Blocking);

/// Opens a device on `ip` (binding `ip:4791`) with a background loop thread, nothing more.
pub fn open_device(ip: IpAddr, pcap: Option<&Path>) -> Result<Device, softrdma_driver::Error> {
    open_device_with(ip, pcap, THREAD)
}

/// [`open_device`] with the loop where `progress` says: [`Progress::Inline`] for a tool
/// whose one thread always waits on the device (the SRP initiator and target: no thread
/// hand-off between a datagram and its completion).
pub fn open_device_with(
    ip: IpAddr,
    pcap: Option<&Path>,
    progress: Progress,
) -> Result<Device, softrdma_driver::Error> {
    // The interface's MTU, as rxe's port has it: the default (1500, path MTU 1024) held
    // `perf srp` on loopback to 1024-byte packets, four times the packets per byte.
    let mut cfg = DeviceConfig::new(ip)
        .with_interface_mtu()
        .with_progress(progress)
        .with_wait(PollMode::Blocking);
    if let Some(p) = pcap {
        cfg = cfg.with_pcap(p);
    }
    let dev = Device::open_with(cfg)?;
    crate::narrow_link::apply_cc(&dev, false);
    Ok(dev)
}

/// Whether opening a device failed because another socket holds `<ip>:4791`.
pub fn is_in_use(e: &softrdma_driver::Error) -> bool {
    matches!(e, softrdma_driver::Error::Io(io) if io.kind() == std::io::ErrorKind::AddrInUse)
}

/// What every tool says when `<ip>:4791` is taken: who holds it and how to choose another
/// address (`how`: e.g. "pass another local address with -I ADDR").
pub fn in_use_message(ip: IpAddr, how: &str) -> String {
    format!("{}; stop it or {how}", held(ip))
}

/// "another process already holds `<ip>`:4791 (...)".
fn held(ip: IpAddr) -> String {
    format!(
        "another process already holds {}:{ROCE_PORT} (a softrdma device, e.g. a server on \
         this host)",
        bracket(ip)
    )
}

/// `ip` as it stands before `:port` (IPv6 in brackets).
pub fn bracket(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    }
}

/// The message for a device that could not be opened (`how`: as for [`in_use_message`]).
pub fn device_error(ip: IpAddr, e: &softrdma_driver::Error, how: &str) -> String {
    match e {
        e if is_in_use(e) => in_use_message(ip, how),
        softrdma_driver::Error::Io(io) if io.kind() == std::io::ErrorKind::AddrNotAvailable => {
            format!("{ip} is not an address of this host; {how}")
        }
        e => format!("device {ip}: {e}"),
    }
}

/// Runs a CM on `dev`, with a PD.
fn with_cm(dev: Device, cm: Cm) -> Result<CmDevice, String> {
    let ip = dev.local_addr().ip();
    let port = cm
        .add_device(&dev)
        .map_err(|e| format!("device {ip}: {e}"))?;
    let pd = dev.alloc_pd().map_err(|e| format!("ibv_alloc_pd: {e}"))?;
    Ok(CmDevice { dev, cm, port, pd })
}

/// Opens the device on `ip` (binding `ip:4791`) and runs a CM on it. The error says what
/// to do when another process holds the address (`how`, as for [`in_use_message`]).
pub fn open(
    ip: IpAddr,
    pcap: Option<&PathBuf>,
    how: &str,
    progress: Progress,
) -> Result<CmDevice, String> {
    let dev = open_device_with(ip, pcap.map(|p| p.as_path()), progress)
        .map_err(|e| device_error(ip, &e, how))?;
    with_cm(dev, Cm::new(seed()))
}

/// [`open`] for a tool whose one thread drives its device and CM and issues commands in
/// bursts (perf cm): the loop runs in that thread ([`Progress::Inline`]) and what the
/// commands send leaves when the thread next waits, batched
/// ([`DeviceConfig::defer_flush`]).
/// With `pcap`, every datagram is recorded there too; `wait` is how the thread waits for
/// input (blocking in epoll, or spinning a while first).
pub fn open_batched(
    ip: IpAddr,
    how: &str,
    pcap: Option<&Path>,
    wait: PollMode,
) -> Result<CmDevice, String> {
    let mut cfg = DeviceConfig::new(ip)
        .with_interface_mtu()
        .with_progress(Progress::Inline)
        .with_wait(wait)
        .with_defer_flush(true);
    if let Some(p) = pcap {
        cfg = cfg.with_pcap(p);
    }
    let dev = Device::open_with(cfg).map_err(|e| device_error(ip, &e, how))?;
    crate::narrow_link::apply_cc(&dev, false);
    with_cm(dev, Cm::new(seed()))
}

/// The client's device. With `given` (`-b`/`-I`), on that address. Without, on the
/// address the routing table picks towards `dst`; when another process holds it (a server
/// on the same host: the routed source of a local address is that address, or 127.0.0.1
/// for all of 127.0.0.0/8) an IPv4 loopback client takes the next free 127.0.0.x and says
/// so on stderr, and anything else is refused with a hint to pass `flag` ADDR. `tool`
/// prefixes the note.
pub fn open_client(
    given: Option<IpAddr>,
    dst: IpAddr,
    pcap: Option<&PathBuf>,
    flag: &str,
    tool: &str,
    progress: Progress,
) -> Result<CmDevice, String> {
    open_client_noted(given, dst, pcap, flag, tool, progress, true)
}

/// [`open_client`] for a `-s`/`-b` tool (cmtime, cmatose) on its own thread, with its
/// messages prefixed by `tool`.
pub fn open_client_b(
    src: Option<IpAddr>,
    dst: SocketAddr,
    pcap: Option<&PathBuf>,
    tool: &str,
) -> Result<CmDevice, String> {
    open_client(src, dst.ip(), pcap, "-b", tool, THREAD).map_err(|e| format!("{tool}: {e}"))
}

/// [`open_client`]; `note`: whether to say on stderr that another 127.0.0.x was taken
/// (`softrdma srp` says it only with `-v`: on loopback it is the normal path).
pub fn open_client_noted(
    given: Option<IpAddr>,
    dst: IpAddr,
    pcap: Option<&PathBuf>,
    flag: &str,
    tool: &str,
    progress: Progress,
    note: bool,
) -> Result<CmDevice, String> {
    let how = format!("pass another local address with {flag} ADDR");
    if let Some(ip) = given {
        return open(ip, pcap, &how, progress);
    }
    let src = softrdma_driver::cm::route_source(dst)
        .ok_or_else(|| format!("no route to {dst}: give the source address with {flag} ADDR"))?;
    let pcap = pcap.map(|p| p.as_path());
    let first = match open_device_with(src, pcap, progress) {
        Ok(dev) => return with_cm(dev, Cm::new(seed())),
        Err(e) => e,
    };
    if !is_in_use(&first) {
        return Err(device_error(src, &first, &how));
    }
    match src {
        IpAddr::V4(a) if a.is_loopback() => {
            for k in 2..=254u8 {
                let cand = IpAddr::V4(Ipv4Addr::new(127, 0, 0, k));
                if cand == src || cand == dst {
                    continue;
                }
                match open_device_with(cand, pcap, progress) {
                    Ok(dev) => {
                        if note {
                            eprintln!(
                            "{tool}: {src}:{ROCE_PORT} (the source address routed towards {dst}) \
                             is held by another process; using {cand} instead ({flag} ADDR \
                             chooses one)"
                            );
                        }
                        return with_cm(dev, Cm::new(seed()));
                    }
                    Err(e) if is_in_use(&e) => continue,
                    Err(e) => return Err(device_error(cand, &e, &how)),
                }
            }
            Err(format!(
                "every address from 127.0.0.1 to 127.0.0.254 is held by another process on \
                 port {ROCE_PORT}; {how}"
            ))
        }
        IpAddr::V6(a) if a.is_loopback() => Err(format!(
            "the source address routed towards {dst} is {src}, and {}; IPv6 has only one \
             loopback address, so a client on the server's host needs another IPv6 address \
             of this host: pass it with {flag} ADDR",
            held(src)
        )),
        _ => Err(format!(
            "the source address routed towards {dst} is {src}, and {}; {how}",
            held(src)
        )),
    }
}

/// Every address of this host a device can open on, of the family of `v4`: the interfaces'
/// addresses, without IPv6 link-local ones (a device needs an address without a scope).
pub fn local_addrs(v4: bool) -> Vec<(String, IpAddr)> {
    let mut out: Vec<(String, IpAddr)> = Vec::new();
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return out;
    };
    for a in addrs {
        let Some(sa) = a.address else { continue };
        let ip = if let Some(s) = sa.as_sockaddr_in() {
            IpAddr::V4(s.ip())
        } else if let Some(s) = sa.as_sockaddr_in6() {
            let ip = s.ip();
            if (ip.segments()[0] & 0xffc0) == 0xfe80 {
                continue;
            }
            IpAddr::V6(ip)
        } else {
            continue;
        };
        if ip.is_ipv4() == v4 && !out.iter().any(|(_, x)| *x == ip) {
            out.push((a.interface_name, ip));
        }
    }
    out
}

/// `path` for one of several devices: `NAME-IP.EXT`.
fn pcap_for(path: &Path, ip: IpAddr) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{ip}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{ip}"),
    };
    path.with_file_name(name)
}

/// A CM over a device on every local address of one family (a wildcard listener), and the
/// devices. Addresses another process holds are skipped with a note on stderr; with
/// `pcap`, each device records to `NAME-IP.EXT`.
pub fn open_every(
    v4: bool,
    pcap: Option<&PathBuf>,
    tool: &str,
) -> Result<(Cm, Vec<Device>), String> {
    let cm = Cm::new(seed());
    let mut devs = Vec::new();
    let addrs = local_addrs(v4);
    for (ifname, ip) in &addrs {
        let p = pcap.map(|p| pcap_for(p, *ip));
        match open_device(*ip, p.as_deref()) {
            Ok(dev) => {
                cm.add_device(&dev)
                    .map_err(|e| format!("device {ip}: {e}"))?;
                devs.push(dev);
            }
            Err(e) if is_in_use(&e) => eprintln!(
                "{tool}: skipping {ip} ({ifname}): {}",
                in_use_message(*ip, "listen on another address with -a ADDR")
            ),
            Err(e) => eprintln!("{tool}: skipping {ip} ({ifname}): {e}"),
        }
    }
    if devs.is_empty() {
        return Err(format!(
            "no local {} address could take a device ({} found); give one with -a ADDR",
            if v4 { "IPv4" } else { "IPv6" },
            addrs.len()
        ));
    }
    Ok((cm, devs))
}

impl CmDevice {
    /// Disconnects (DREQ) `ids`, as the kernel does for the ids of a process that exits,
    /// and waits up to a second for their DREPs: a failed or interrupted run leaves no peer
    /// waiting.
    pub fn hang_up<'a>(&self, ids: impl IntoIterator<Item = &'a RdmaCmId>) {
        let mut waiting = 0usize;
        for id in ids {
            if let Ok(Ok(())) = self
                .cm
                .with_id(id.name(), |cm, s, now| cm.disconnect(now, s, id))
            {
                waiting += 1;
            }
        }
        let end = Instant::now() + Duration::from_secs(1);
        while waiting > 0 {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Some(Event::Rdma(e)) = self.cm.wait_event(left.min(SIGNAL_SLICE)) {
                if e.kind() == RdmaCmEventType::Disconnected {
                    waiting -= 1;
                }
            }
        }
    }

    /// One CQ for `connections` QPs with `messages` sends and receives each.
    pub fn shared_cq(&self, connections: u32, messages: u32) -> Result<CqId, String> {
        let n = u64::from(connections) * 2 * u64::from(messages.max(1)) + 16;
        self.dev
            .create_cq(n.min(1 << 20) as u32)
            .map_err(|e| format!("ibv_create_cq: {e}"))
    }

    /// An RC QP in INIT on `cq`.
    pub fn rc_qp_on(&self, cq: CqId, send: u32, recv: u32) -> Result<(CqId, u32), String> {
        let (qpn, _) = self
            .dev
            .create_qp(QpInitAttr::rc(self.pd, cq, send.max(1), recv.max(1)).signal_all())
            .map_err(|e| format!("rdma_create_qp: {e}"))?;
        self.dev
            .with_stack(|s| RdmaCm::init_qp(s, qpn))
            .map_err(|e| format!("rdma_create_qp: {e}"))?;
        Ok((cq, qpn))
    }
}

/// Resolves a client's `-b`/`-I` source for `dst`: a name takes an address of `dst`'s
/// family; an address of the other family is refused at once. `dst_flag` and `src_flag`
/// name the two flags in the message (`-s ::1 is an IPv6 address but -b 127.0.0.2 is IPv4`).
pub fn source_of_family(
    src: &str,
    dst: SocketAddr,
    dst_flag: &str,
    src_flag: &str,
) -> Result<IpAddr, String> {
    let fam = |ip: IpAddr| if ip.is_ipv4() { "IPv4" } else { "IPv6" };
    if let Ok(ip) = src.parse::<IpAddr>() {
        if ip.is_ipv4() != dst.is_ipv4() {
            return Err(format!(
                "{dst_flag} {} is an {} address but {src_flag} {ip} is {}: the source must be \
                 of the destination's family",
                dst.ip(),
                fam(dst.ip()),
                fam(ip)
            ));
        }
        return Ok(ip);
    }
    softrdma_driver::cm::resolve_host(src, 0, Some(dst.is_ipv4()))
        .map(|a| a.ip())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!(
                "{src_flag} {src} has no {} address, and {dst_flag} {} is {}",
                fam(dst.ip()),
                dst.ip(),
                fam(dst.ip())
            ),
            _ => format!("getaddrinfo {src}: {e}"),
        })
}

/// SIGINT and SIGTERM: the first sets a flag the tools' waits look at (so they disconnect
/// and destroy their ids, as the kernel does for a process that exits, then die of the
/// signal); a second one of the same kind kills the process at once.
pub mod signals {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, OnceLock};

    use signal_hook::consts::{SIGINT, SIGTERM};

    struct Flags {
        caught: Arc<AtomicUsize>,
        any: Arc<AtomicBool>,
    }

    static FLAGS: OnceLock<Flags> = OnceLock::new();

    /// Installs the handlers (once per process).
    pub fn catch() {
        FLAGS.get_or_init(|| {
            let f = Flags {
                caught: Arc::new(AtomicUsize::new(0)),
                any: Arc::new(AtomicBool::new(false)),
            };
            for sig in [SIGINT, SIGTERM] {
                // The second signal: the default action (the handler runs before the flags
                // are set, so it sees the first one's).
                let _ = signal_hook::flag::register_conditional_default(sig, f.any.clone());
                let _ = signal_hook::flag::register_usize(sig, f.caught.clone(), sig as usize);
                let _ = signal_hook::flag::register(sig, f.any.clone());
            }
            f
        });
    }

    /// The signal caught, if any.
    pub fn caught() -> Option<i32> {
        let f = FLAGS.get()?;
        match f.caught.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s as i32),
        }
    }

    /// Dies of `sig` (as a process without handlers would: the shell sees the signal).
    pub fn die(sig: i32) -> ! {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        let _ = signal_hook::low_level::emulate_default_handler(sig);
        std::process::exit(128 + sig)
    }
}

/// The next CM event within `timeout`, waiting in short slices so a caught signal ends the
/// wait: `Err(signal)`.
pub fn wait_event(cm: &Cm, timeout: Duration) -> Result<Option<Event>, i32> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(s) = signals::caught() {
            return Err(s);
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        if let Some(e) = cm.wait_event(left.min(SIGNAL_SLICE)) {
            return Ok(Some(e));
        }
    }
}

/// How often a blocked tool looks for a caught signal.
pub const SIGNAL_SLICE: Duration = Duration::from_millis(100);

/// A decimal number within `lo..=hi`, or the one-line message naming the range.
pub fn parse_in(s: &str, lo: i64, hi: i64) -> Result<i64, String> {
    match s.trim().parse::<i64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(format!("{s} is not in {lo}..={hi}")),
    }
}

/// A number as C's `strtoul(s, NULL, 0)` reads it: `0x…` hex, `0…` octal, else decimal
/// (the RDMA CM tools' numeric flags).
pub fn parse_c(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        u64::from_str_radix(&t[1..], 8)
    } else {
        t.parse()
    };
    r.map_err(|_| format!("'{s}' is not a number"))
}

/// [`parse_c`] into a u16 (a port space number).
pub fn parse_c_u16(s: &str) -> Result<u16, String> {
    parse_c(s).and_then(|v| u16::try_from(v).map_err(|_| format!("'{s}' is out of range")))
}

/// A port, 1 to 65535.
pub fn parse_port(s: &str) -> Result<u16, String> {
    parse_in(s, 1, 65535).map(|v| v as u16)
}

/// A CM error as the tools print it: the IB CM's state by its kernel name
/// (`IB_CM_TIMEWAIT`), not as Rust debug output.
pub trait CmText {
    fn text(&self) -> String;
}

impl CmText for softrdma_core::rdma_cm::RdmaCmError {
    fn text(&self) -> String {
        use softrdma_core::cm::{CmError, CmState as S};
        match self {
            softrdma_core::rdma_cm::RdmaCmError::Cm(CmError::InvalidState(s)) => {
                let name = match s {
                    S::Idle => "IB_CM_IDLE",
                    S::Listen => "IB_CM_LISTEN",
                    S::ReqSent => "IB_CM_REQ_SENT",
                    S::ReqRcvd => "IB_CM_REQ_RCVD",
                    S::MraReqSent => "IB_CM_MRA_REQ_SENT",
                    S::MraReqRcvd => "IB_CM_MRA_REQ_RCVD",
                    S::RepSent => "IB_CM_REP_SENT",
                    S::RepRcvd => "IB_CM_REP_RCVD",
                    S::MraRepSent => "IB_CM_MRA_REP_SENT",
                    S::MraRepRcvd => "IB_CM_MRA_REP_RCVD",
                    S::Established => "IB_CM_ESTABLISHED",
                    S::DreqSent => "IB_CM_DREQ_SENT",
                    S::DreqRcvd => "IB_CM_DREQ_RCVD",
                    S::Timewait => "IB_CM_TIMEWAIT",
                    S::SidrReqSent => "IB_CM_SIDR_REQ_SENT",
                    S::SidrReqRcvd => "IB_CM_SIDR_REQ_RCVD",
                    #[allow(unreachable_patterns)]
                    _ => "another IB CM state",
                };
                format!("the connection is in {name}, not a state for this call")
            }
            e => e.to_string(),
        }
    }
}

impl CmText for softrdma_driver::cm::Error {
    fn text(&self) -> String {
        match self {
            softrdma_driver::cm::Error::Rdma(e) => e.text(),
            e => e.to_string(),
        }
    }
}

impl CmDevice {
    /// A UD QP on `cq` (both queues), in RESET: the CM makes it ready
    /// (`RdmaCm::init_qp_for`), as `rdma_create_qp` does. Sends are not all signalled.
    pub fn ud_qp_on(&self, cq: CqId, send: u32, recv: u32) -> Result<(CqId, u32), String> {
        let (qpn, _) = self
            .dev
            .create_qp(QpInitAttr {
                qp_type: QpType::Ud,
                pd: self.pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: send.max(1),
                    max_recv_wr: recv.max(1),
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .map_err(|e| format!("rdma_create_qp: {e}"))?;
        Ok((cq, qpn))
    }
}

/// The name of a message the IB CM resends, for the retry notices.
fn resent_name(msg: softrdma_wire::cm::AttrId) -> &'static str {
    use softrdma_wire::cm::AttrId;
    match msg {
        AttrId::REQ => "REQ",
        AttrId::REP => "REP",
        AttrId::DREQ => "DREQ",
        AttrId::SIDR_REQ => "SIDR_REQ",
        _ => "CM MAD",
    }
}

/// The one-line notice of an IB CM retransmission that every tool waiting on a peer prints
/// on stderr (stdout stays the tools' rdma-core output):
/// `TOOL: no answer from PEER yet: REQ retry 3/15, next in 6.1 s`. `None` for other events.
pub fn retry_note(
    tool: &str,
    peer: &str,
    now: softrdma_core::time::Instant,
    ev: &softrdma_core::cm::CmEvent,
) -> Option<String> {
    let softrdma_core::cm::CmEvent::Retry {
        msg,
        attempt,
        max,
        next_deadline,
        ..
    } = ev
    else {
        return None;
    };
    let next = next_deadline.saturating_duration_since(now);
    Some(format!(
        "{tool}: no answer from {peer} yet: {} retry {attempt}/{max}, next in {:.1} s",
        resent_name(*msg),
        next.total_micros() as f64 / 1e6
    ))
}

/// What a REJ with `reason` means in words, for the reasons a newcomer meets; `port` is the
/// port the connection was for. Reason 8 (invalid service ID) is what a CM answers when
/// nothing listens on that port.
pub fn rej_meaning(reason: u16, port: u16) -> Option<String> {
    match reason {
        8 => Some(format!(
            "nothing listens on port {port} there (a service-ID reject): start the server on \
             that address and port, or connect to the port it listens on"
        )),
        28 => Some("the peer's application refused the connection (a consumer reject)".into()),
        _ => None,
    }
}
