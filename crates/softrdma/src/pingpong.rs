//! `softrdma pingpong rc|ud`: a wire-compatible peer of rdma-core's `ibv_rc_pingpong` and
//! `ibv_ud_pingpong` (libibverbs/examples), over a softrdma device.
//!
//! Same flags, same TCP side channel ([`crate::pingpong_exch`]), same queue-pair setup and the
//! same output, so either end can be the rdma-core tool on a kernel RDMA device:
//!
//! - RC: one RC QP (send queue 1, receive queue `-r`), INIT with no remote access, RTR with
//!   `path_mtu` from `-m`, the peer's QPN and PSN, `max_dest_rd_atomic` 1, `min_rnr_timer` 12,
//!   an AV with the peer's GID (hop limit 1, `sgid_index` from `-g`), RTS with timeout 14,
//!   `retry_cnt` 7, `rnr_retry` 7, `max_rd_atomic` 1 and our PSN.
//! - UD: one UD QP with Q_Key 0x11111111, RTR and RTS (with our PSN), an AH to the peer's GID;
//!   receive buffers are `size + 40` bytes (the GRH lands in the first 40), sends go from
//!   offset 40.
//! - The loop: both post `-r` receives up front and top them up when one or fewer is left;
//!   the client sends first; each side sends its next message once both its previous send
//!   and a receive have completed, until `-n` sends and receives each are done.
//!
//! Differences, all deliberate:
//!
//! - `-d` names a softrdma device by its IP address (the device binds `<ip>:4791`). Default:
//!   the server uses 127.0.0.1; a client talking to 127.0.0.1 uses 127.0.0.2 (so both ends fit
//!   on one host), to another loopback address 127.0.0.1, and otherwise the address the host
//!   routes towards the server from.
//! - `-g`: GID index as in softrdma's GID table — with the device's default MAC, index 0 is the
//!   link-local `fe80::` GID and **index 1 is the device's IP address**, like an rxe port on
//!   Ethernet (the lab's `-g 1`). Without `-g` the tools send a zero GID and build no GRH,
//!   which RoCE cannot do; we send and use the IP GID instead. A GID whose address is not the
//!   device's (index 0 on an IPv4 device) is refused up front. A peer that sends a zero GID is
//!   reached at the address of its TCP connection.
//! - `-c`: the tools fill the buffer with 0x7b, the client zeroes the first byte of every 4 KiB
//!   page before its first send, and the server checks those bytes at the end, printing
//!   `invalid data in page N`. We do the same, and also check every byte of every message
//!   received against that pattern; any mismatch is printed and makes the exit status 1.
//! - `-e` runs the device's event loop on a background thread and sleeps on completions;
//!   without it the loop runs inline and the CQ is busy-polled, as the tools poll theirs.
//! - `--pcap FILE` records the traffic; `--timeout SECS` gives up when no completion arrives
//!   for that long (the tools wait forever).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use softrdma_core::device::gid::GID_TABLE_LEN;
use softrdma_core::device::Mtu;
use softrdma_core::verbs::{
    required_mask, AccessFlags, AddressVector, QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr,
    SendOp, SendWr, Sge, UdDest, WcStatus, WorkCompletion,
};
use softrdma_driver::{Device, DeviceConfig};
use softrdma_wire::Gid;

use crate::pingpong_exch::{self, Dest};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// The UD receive buffer's GRH area.
const GRH_LEN: usize = 40;
/// `ibv_ud_pingpong`'s Q_Key.
const UD_QKEY: u32 = 0x1111_1111;
/// The page size the tools' `-c` pattern steps by (`sysconf(_SC_PAGESIZE)` on x86-64).
const PAGE_SIZE: usize = 4096;
/// The tools' buffer fill (`memset(ctx->buf, 0x7b, size)`).
const FILL: u8 = 0x7b;
/// Where the buffer sits in the MR's address space (any value works; page-aligned like the
/// tools' `memalign(page_size, ...)`).
const BUF_IOVA: u64 = 0x10_0000;

/// Which tool to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// `ibv_rc_pingpong`: reliable connected.
    Rc,
    /// `ibv_ud_pingpong`: unreliable datagram.
    Ud,
}

impl Kind {
    fn qp_type(self) -> QpType {
        match self {
            Kind::Rc => QpType::Rc,
            Kind::Ud => QpType::Ud,
        }
    }
}

/// `softrdma pingpong rc|ud [options] [servername]`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Transport: rc (as ibv_rc_pingpong) or ud (as ibv_ud_pingpong).
    #[arg(value_enum)]
    pub kind: Kind,
    /// Connect to the server at this host; without it, start a server and wait for a client.
    pub servername: Option<String>,
    /// Listen on / connect to TCP port PORT (1..=65535) for the address exchange.
    #[arg(short = 'p', long = "port", default_value = "18515", value_parser = parse_port)]
    pub port: u16,
    /// The softrdma device, named by its IP address (it binds IP:4791). Default: 127.0.0.1
    /// for a server; for a client 127.0.0.2 when the server is 127.0.0.1, else the address
    /// routed towards the server.
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,
    /// Use port IBPORT of the device (softrdma devices have port 1 only).
    #[arg(short = 'i', long = "ib-port", default_value = "1", value_parser = parse_ib_port)]
    pub ib_port: u8,
    /// Size of the message to exchange, 1..=8388608 for rc, 1..=1024 (the port MTU) for ud
    /// (default 4096 for rc, 1024 for ud).
    #[arg(short = 's', long = "size", value_parser = parse_size)]
    pub size: Option<u32>,
    /// Path MTU (rc only): 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long = "mtu", value_parser = parse_mtu)]
    pub mtu: Option<u32>,
    /// Number of receives to post at a time, 1..=16384.
    #[arg(short = 'r', long = "rx-depth", default_value = "500", value_parser = parse_rx_depth)]
    pub rx_depth: u32,
    /// Number of exchanges, 1..=4294967295.
    #[arg(short = 'n', long = "iters", default_value = "1000", value_parser = parse_iters)]
    pub iters: u32,
    /// Service level value, 0..=15 (carried in the address vector; RoCEv2 does not use it).
    #[arg(short = 'l', long = "sl", default_value = "0", value_parser = parse_sl)]
    pub sl: u8,
    /// Sleep on completion events (a background event loop) instead of busy-polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Local port GID index, 0..=1023 (1 = the device's IP address; see `softrdma pingpong
    /// --help`); negative: the default.
    #[arg(short = 'g', long = "gid-idx", value_parser = parse_gid_idx, allow_negative_numbers = true)]
    pub gid_idx: Option<i64>,
    /// Validate received buffers.
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// Record every datagram sent and received to this pcap file.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Give up when no completion arrives for this many seconds, 0..=31536000 (0: wait
    /// forever).
    #[arg(long, value_name = "SECS", default_value = "0", value_parser = parse_timeout)]
    pub timeout: u64,
}

/// `strtoul(…, 0)`: decimal, `0x` hex or leading-0 octal.
fn parse_num(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        i64::from_str_radix(&t[1..], 8)
    } else {
        t.parse::<i64>()
    }
    .map_err(|e| format!("{s}: {e}"))?;
    Ok(if neg { -v } else { v })
}

/// A number (as [`parse_num`] reads it) within `lo..=hi`.
fn ranged(s: &str, lo: i64, hi: i64) -> Result<i64, String> {
    let v = parse_num(s).map_err(|_| format!("{s} is not a number in {lo}..={hi}"))?;
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s} is not in {lo}..={hi}"))
    }
}

/// The largest message (the port's `max_msg_sz`).
const MAX_SIZE: i64 = 0x80_0000;
/// The most receives a QP may have posted (the device's `max_qp_wr`).
const MAX_RX_DEPTH: i64 = 0x4000;
/// The longest `--timeout`: a year.
const MAX_TIMEOUT: i64 = 365 * 24 * 3600;

fn parse_port(s: &str) -> Result<u16, String> {
    ranged(s, 1, 65535).map(|v| v as u16)
}

fn parse_ib_port(s: &str) -> Result<u8, String> {
    ranged(s, 1, 1).map(|v| v as u8)
}

fn parse_size(s: &str) -> Result<u32, String> {
    ranged(s, 1, MAX_SIZE).map(|v| v as u32)
}

fn parse_mtu(s: &str) -> Result<u32, String> {
    let v = parse_num(s).unwrap_or(0);
    match u32::try_from(v).ok().and_then(mtu_from_bytes) {
        Some(m) => Ok(m.bytes()),
        None => Err(format!("{s} is not one of 256, 512, 1024, 2048, 4096")),
    }
}

fn parse_rx_depth(s: &str) -> Result<u32, String> {
    ranged(s, 1, MAX_RX_DEPTH).map(|v| v as u32)
}

fn parse_iters(s: &str) -> Result<u32, String> {
    ranged(s, 1, i64::from(u32::MAX)).map(|v| v as u32)
}

fn parse_sl(s: &str) -> Result<u8, String> {
    ranged(s, 0, 15).map(|v| v as u8)
}

fn parse_gid_idx(s: &str) -> Result<i64, String> {
    let max = GID_TABLE_LEN as i64 - 1;
    match parse_num(s) {
        Ok(v) if v < 0 => Ok(-1),
        Ok(v) if v <= max => Ok(v),
        _ => Err(format!(
            "{s} is not a GID index in 0..={max} (or negative: the default)"
        )),
    }
}

fn parse_timeout(s: &str) -> Result<u64, String> {
    ranged(s, 0, MAX_TIMEOUT).map(|v| v as u64)
}

/// A failure: what to print on stderr (the tools' wording where they have one).
struct Fail(String);

impl<T: Into<String>> From<T> for Fail {
    fn from(s: T) -> Fail {
        Fail(s.into())
    }
}

pub fn run(args: &Args) -> ExitCode {
    match run_inner(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(Fail(msg)) => {
            eprintln!("{msg}");
            ExitCode::from(1)
        }
    }
}

/// The device address when `-d` is not given (see the module docs).
fn default_device(server: Option<&str>, port: u16) -> IpAddr {
    let lo1 = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
    let lo2 = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let Some(server) = server else { return lo1 };
    let Some(addr) = (server, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.find(|a| a.is_ipv4()).or_else(|| a.next()))
    else {
        return lo2;
    };
    match addr.ip() {
        ip if ip == lo1 => lo2,
        ip if ip.is_loopback() => lo1,
        ip => {
            // The source address the kernel would pick towards the server.
            let any: SocketAddr = if ip.is_ipv4() {
                (Ipv4Addr::UNSPECIFIED, 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            UdpSocket::bind(any)
                .and_then(|s| s.connect(addr).and_then(|_| s.local_addr()))
                .map(|a| a.ip())
                .unwrap_or(lo1)
        }
    }
}

fn mtu_from_bytes(b: u32) -> Option<Mtu> {
    Mtu::ALL.into_iter().find(|m| m.bytes() == b)
}

struct Ctx {
    dev: Device,
    kind: Kind,
    qpn: u32,
    cq: softrdma_core::verbs::CqId,
    lkey: u32,
    size: usize,
    rx_depth: u32,
    ud_dest: Option<UdDest>,
}

impl Ctx {
    /// Where a message's data starts in the buffer.
    fn data_off(&self) -> u64 {
        match self.kind {
            Kind::Rc => 0,
            Kind::Ud => GRH_LEN as u64,
        }
    }

    fn post_recv(&self, n: u32) -> u32 {
        let len = match self.kind {
            Kind::Rc => self.size,
            Kind::Ud => self.size + GRH_LEN,
        };
        let wr = RecvWr::new(
            RECV_WRID,
            vec![Sge {
                addr: BUF_IOVA,
                length: len as u32,
                lkey: self.lkey,
            }],
        );
        for i in 0..n {
            if self.dev.post_recv(self.qpn, wr.clone()).is_err() {
                return i;
            }
        }
        n
    }

    fn post_send(&self) -> Result<(), Fail> {
        let mut wr = SendWr::new(SEND_WRID, SendOp::Send).with_sge(Sge {
            addr: BUF_IOVA + self.data_off(),
            length: self.size as u32,
            lkey: self.lkey,
        });
        wr.signaled = true;
        wr.ud = self.ud_dest;
        self.dev
            .post_send(self.qpn, wr)
            .map_err(|e| Fail(format!("Couldn't post send: {e}")))
    }

    /// Checks the message area against the `-c` pattern; returns the mismatching pages and
    /// the first mismatching byte (offset, got, want), if any.
    fn check(&self) -> (Vec<usize>, Option<(usize, u8, u8)>) {
        let off = self.data_off();
        let size = self.size;
        self.dev
            .with_mr(self.lkey, |mr| {
                let Ok(data) = mr.slice(BUF_IOVA + off, size) else {
                    return (vec![0], None);
                };
                let mut pages = Vec::new();
                let mut first = None;
                for (i, &b) in data.iter().enumerate() {
                    let want = expected_byte(i);
                    if b != want {
                        if first.is_none() {
                            first = Some((i, b, want));
                        }
                        if pages.last() != Some(&(i / PAGE_SIZE)) {
                            pages.push(i / PAGE_SIZE);
                        }
                    }
                }
                (pages, first)
            })
            .unwrap_or((vec![0], None))
    }
}

/// The byte at offset `i` of a message under `-c`: 0 at each page start (`i / page_size %
/// sizeof(char)`, always 0), the 0x7b fill elsewhere.
fn expected_byte(i: usize) -> u8 {
    if i % PAGE_SIZE == 0 {
        0
    } else {
        FILL
    }
}

fn run_inner(args: &Args) -> Result<bool, Fail> {
    let kind = args.kind;
    let server = args.servername.as_deref();
    if kind == Kind::Ud && args.mtu.is_some() {
        return Err("-m/--mtu is an ibv_rc_pingpong option (ud uses the port MTU)".into());
    }
    // clap checked each argument's range; what depends on several is checked here, before the
    // device is opened.
    let mtu = mtu_from_bytes(args.mtu.unwrap_or(1024)).unwrap_or(Mtu::Mtu1024);
    let size = args.size.unwrap_or(match kind {
        Kind::Rc => 4096,
        Kind::Ud => 1024,
    }) as usize;
    let ib_port = args.ib_port;
    let dev_ip = match &args.ib_dev {
        Some(name) => name
            .parse::<IpAddr>()
            .map_err(|_| format!("IB device {name} not found (name a softrdma device by its IP address, e.g. -d 127.0.0.1)"))?,
        None => default_device(server, args.port),
    };
    let mut cfg = DeviceConfig::new(dev_ip);
    if kind == Kind::Ud {
        // The port's active MTU, as the device will derive it from its netdev MTU.
        let port_mtu = Mtu::from_netdev_mtu(cfg.netdev_mtu, Mtu::Mtu4096).bytes() as usize;
        if size > port_mtu {
            return Err(format!(
                "Requested size larger than port MTU ({port_mtu}): -s must be 1..={port_mtu} for ud"
            )
            .into());
        }
    }

    // The device.
    cfg = if args.events {
        cfg.background()
    } else {
        cfg.busy_poll()
    };
    if let Some(p) = &args.pcap {
        cfg = cfg.with_pcap(p);
    }
    let dev = Device::open_with(cfg).map_err(|e| {
        if crate::cmtool::is_in_use(&e) {
            format!(
                "Couldn't get context for {dev_ip}: {}",
                crate::cmtool::in_use_message(dev_ip, "name another local address with -d ADDR")
            )
        } else {
            format!("Couldn't get context for {dev_ip}: {e}")
        }
    })?;

    // pp_init_ctx.
    let pd = dev
        .alloc_pd()
        .map_err(|e| format!("Couldn't allocate PD: {e}"))?;
    let buf_len = match kind {
        Kind::Rc => size,
        Kind::Ud => size + GRH_LEN,
    };
    let keys = dev
        .reg_mr(pd, vec![FILL; buf_len], BUF_IOVA, AccessFlags::LOCAL_WRITE)
        .map_err(|e| format!("Couldn't register MR: {e}"))?;
    let cq = dev
        .create_cq(args.rx_depth + 1)
        .map_err(|e| format!("Couldn't create CQ: {e}"))?;
    let (qpn, _) = dev
        .create_qp(QpInitAttr {
            qp_type: kind.qp_type(),
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 1,
                max_recv_wr: args.rx_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .map_err(|e| format!("Couldn't create QP: {e}"))?;
    {
        let init = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: ib_port,
            qp_access_flags: AccessFlags::NONE,
            qkey: UD_QKEY,
            ..QpAttr::default()
        };
        let mask = required_mask(QpState::Reset, QpState::Init, kind.qp_type());
        dev.modify_qp(qpn, &init, mask)
            .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
    }
    let mut ctx = Ctx {
        dev,
        kind,
        qpn,
        cq,
        lkey: keys.lkey,
        size,
        rx_depth: args.rx_depth,
        ud_dest: None,
    };

    let mut routs = ctx.post_recv(ctx.rx_depth);
    if routs < ctx.rx_depth {
        return Err(format!("Couldn't post receive ({routs})").into());
    }

    let port = ctx
        .dev
        .query_port(ib_port)
        .map_err(|_| "Couldn't get port info")?;
    // Our GID: -g, or the device's IP GID (see the module docs).
    let ip_index = ctx.dev.ip_gid_index();
    let sgid_index = match args.gid_idx {
        Some(g) if g >= 0 => {
            let g = u16::try_from(g).unwrap_or(u16::MAX);
            let e = ctx.dev.query_gid(ib_port, g).map_err(|_| match kind {
                Kind::Rc => format!("can't read sgid of index {g}"),
                Kind::Ud => format!("Could not get local gid for gid index {g}"),
            })?;
            if e.gid.to_ip() != dev_ip {
                let hint = ip_index.map_or(String::new(), |i| format!(" (use -g {i})"));
                return Err(format!(
                    "GID index {g} ({}) is not the address of softrdma device {dev_ip}{hint}",
                    std::net::Ipv6Addr::from(e.gid.0)
                )
                .into());
            }
            g
        }
        _ => ip_index.ok_or("the device has no GID for its own address")?,
    };
    let my_gid = ctx
        .dev
        .query_gid(ib_port, sgid_index)
        .map(|e| e.gid)
        .map_err(|e| e.to_string())?;
    let my = Dest {
        lid: port.lid,
        qpn,
        psn: random_psn(),
        gid: my_gid,
    };
    let sep = match kind {
        Kind::Rc => ",",
        Kind::Ud => ":",
    };
    println!(
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
        my.lid,
        my.qpn,
        my.psn,
        my.gid_text()
    );

    let connect = |ctx: &mut Ctx, rem: &Dest, tcp_peer: IpAddr| -> Result<(), Fail> {
        let dgid = if rem.has_gid() {
            rem.gid
        } else {
            Gid::from_ip(tcp_peer)
        };
        let av = AddressVector {
            dgid,
            sgid_index,
            hop_limit: 1,
            sl: args.sl,
            port_num: ib_port,
            ..AddressVector::default()
        };
        connect_ctx(ctx, mtu, &my, rem, av)
    };

    let (rem, tcp_peer) = match server {
        Some(s) => pingpong_exch::client_exchange(s, args.port, &my)?,
        None => {
            let listener = pingpong_exch::listen(args.port)?;
            let mut err = None;
            let r = pingpong_exch::server_exchange(listener, &my, |rem, peer| {
                connect(&mut ctx, rem, peer).map_err(|Fail(e)| {
                    err = Some(e.clone());
                    e
                })
            });
            r.map_err(|e| err.unwrap_or(e))?
        }
    };
    println!(
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        rem.lid,
        rem.qpn,
        rem.psn,
        rem.gid_text()
    );
    if server.is_some() {
        connect(&mut ctx, &rem, tcp_peer)?;
    }

    // The ping-pong.
    let mut pending = RECV_WRID;
    if server.is_some() {
        if args.chk {
            let off = ctx.data_off();
            for i in (0..size).step_by(PAGE_SIZE) {
                ctx.dev
                    .write_mr(ctx.lkey, BUF_IOVA + off + i as u64, &[0])
                    .map_err(|e| format!("{e}"))?;
            }
        }
        ctx.post_send()?;
        pending |= SEND_WRID;
    }

    let iters = args.iters;
    let stall = (args.timeout > 0).then(|| Duration::from_secs(args.timeout));
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let mut wcs: Vec<WorkCompletion> = Vec::with_capacity(2);
    let mut bad_pages: Vec<usize> = Vec::new();
    let mut first_bad: Option<(u32, usize, u8, u8)> = None;
    while rcnt < iters || scnt < iters {
        wcs.clear();
        let n = ctx
            .dev
            .wait_cq(ctx.cq, &mut wcs, 2, stall)
            .map_err(|e| format!("poll CQ failed: {e}"))?;
        if n == 0 {
            return Err(format!(
                "no completion for {} s (after {scnt} sends, {rcnt} receives); giving up",
                args.timeout
            )
            .into());
        }
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                return Err(format!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status.as_str(),
                    wc.status.to_verbs(),
                    wc.wr_id
                )
                .into());
            }
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        routs += ctx.post_recv(ctx.rx_depth - routs);
                        if routs < ctx.rx_depth {
                            return Err(format!("Couldn't post receive ({routs})").into());
                        }
                    }
                    rcnt += 1;
                    if args.chk {
                        let (pages, first) = ctx.check();
                        for p in pages {
                            if !bad_pages.contains(&p) {
                                bad_pages.push(p);
                            }
                        }
                        if first_bad.is_none() {
                            first_bad = first.map(|(o, g, w)| (rcnt, o, g, w));
                        }
                    }
                }
                other => {
                    return Err(format!("Completion for unknown wr_id {other}").into());
                }
            }
            pending &= !wc.wr_id;
            if scnt < iters && pending == 0 {
                ctx.post_send()?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = size as u64 * u64::from(iters) * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / f64::from(iters.max(1))
    );
    let mut ok = true;
    if args.chk {
        bad_pages.sort_unstable();
        for p in &bad_pages {
            println!("invalid data in page {p}");
        }
        if let Some((msg, off, got, want)) = first_bad {
            println!(
                "invalid data in message {msg} at byte {off}: 0x{got:02x}, expected 0x{want:02x}"
            );
            ok = false;
        }
    }
    // Keep answering for a moment (inline devices only run while polled): the peer may still
    // need an ACK we sent if it was lost.
    if kind == Kind::Rc {
        let _ = ctx.dev.progress_for(Duration::from_millis(20));
    }
    let _ = ctx.dev.flush_pcap();
    Ok(ok)
}

/// pp_connect_ctx: RTR and RTS (RC), or RTR, RTS and the AH (UD).
fn connect_ctx(
    ctx: &mut Ctx,
    mtu: Mtu,
    my: &Dest,
    rem: &Dest,
    av: AddressVector,
) -> Result<(), Fail> {
    use QpState::{Init, Rtr, Rts};
    match ctx.kind {
        Kind::Rc => {
            let rtr = QpAttr {
                qp_state: QpState::Rtr,
                path_mtu: mtu,
                dest_qp_num: rem.qpn,
                rq_psn: rem.psn,
                max_dest_rd_atomic: 1,
                min_rnr_timer: 12,
                ah_attr: av,
                ..QpAttr::default()
            };
            ctx.dev
                .modify_qp(ctx.qpn, &rtr, required_mask(Init, Rtr, QpType::Rc))
                .map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
            let rts = QpAttr {
                qp_state: QpState::Rts,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                sq_psn: my.psn,
                max_rd_atomic: 1,
                ..rtr
            };
            ctx.dev
                .modify_qp(ctx.qpn, &rts, required_mask(Rtr, Rts, QpType::Rc))
                .map_err(|e| format!("Failed to modify QP to RTS: {e}"))?;
        }
        Kind::Ud => {
            let rtr = QpAttr {
                qp_state: QpState::Rtr,
                ..QpAttr::default()
            };
            ctx.dev
                .modify_qp(ctx.qpn, &rtr, required_mask(Init, Rtr, QpType::Ud))
                .map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
            let rts = QpAttr {
                qp_state: QpState::Rts,
                sq_psn: my.psn,
                ..rtr
            };
            ctx.dev
                .modify_qp(ctx.qpn, &rts, required_mask(Rtr, Rts, QpType::Ud))
                .map_err(|e| format!("Failed to modify QP to RTS: {e}"))?;
            ctx.ud_dest = Some(UdDest {
                av,
                remote_qpn: rem.qpn,
                remote_qkey: UD_QKEY,
            });
        }
    }
    Ok(())
}

/// `lrand48() & 0xffffff` seeded from the time and the pid, as the tools seed it.
fn random_psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = t ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    // splitmix64
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x & 0xff_ffff) as u32
}
