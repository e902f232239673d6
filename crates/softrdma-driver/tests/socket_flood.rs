//! A real-socket flood on loopback against a running server, judged by counters and memory,
//! not by timing (issue 13).
//!
//! The server is a driver `Device` with the process `Cm`: an RDMA CM listener (backlog
//! [`BACKLOG`]) whose application thread accepts every CONNECT_REQUEST it takes (an RC QP
//! each; UNREACHABLE destroys both), and an IB CM listener whose application rejects every
//! REQ and SIDR REQ. The CM's half-open limit is [`HALF_OPEN_LIMIT`]. The attacker is a plain
//! `std::net::UdpSocket` on another loopback address writing RoCEv2 UD SENDs to QP1 with the
//! crate's own builders (valid ICRCs), and never answering:
//!
//! 1. **REQ flood**: [`FLOOD_REQS`] REQs with distinct comm IDs and QPNs (80 % RDMA CM REQs
//!    with the IP CM header, 20 % IB CM REQs) plus [`FLOOD_SIDR`] SIDR REQs to the IB CM
//!    listener. During a stretch of it the server application stops taking events, so the
//!    backlog and the half-open limit are reached for certain; a legitimate RDMA CM client
//!    (another `Device` and `Cm`) starts connecting in the middle.
//! 2. **Storms**, in rounds, until the legitimate client is ESTABLISHED: DREQ, RTU, REJ, MRA,
//!    DREP, REP, SIDR REP and LAP for unknown ids; REQs for no listener and with a bad IP CM
//!    header; SIDR REQs for no listener and for the RC listener; malformed MADs (short, bad
//!    base version, a CM Get, a Get of an unregistered class); malformed datagrams (bad
//!    ICRC, truncated, BTH version 1, unknown QPN, bad Q_Key, bad P_Key, an RC opcode to
//!    QP1).
//! 3. **Duplicate storm**: the legitimate connection's own REQ and RTU, captured off the
//!    server's socket, replayed from the attacker's address.
//!
//! Then the client disconnects; both sides go through TIMEWAIT. Every flood kind is counted
//! where the kernel would count it (cm.c's counters, the MAD layer's, the transport's drop
//! counters by reason, the RDMA CM's backlog drops, our half-open drops), with the answers
//! cm.c gives (none, REJ 8 / 28, a context-free DREP, SIDR REP 1 / 2, GetResp 0x000C); the
//! CM's tables stay bounded while it runs and are back to the listeners alone afterwards;
//! the process RSS grows by less than [`RSS_BOUND_MIB`]. The sender keeps at most
//! [`WINDOW`] datagrams in flight (by the server's receive counter), so the kernel drops
//! nothing and the counts are exact.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as StdInstant};

use softrdma_core::cm::{CmConfig, CmEvent, CmId, RXE_CA_ACK_DELAY};
use softrdma_core::rdma_cm::{
    ConnParam, RdmaCm, RdmaCmEventType as T, RdmaCmId, RdmaId, RdmaOption,
};
use softrdma_core::transport::emit;
use softrdma_core::verbs::{CqId, PdId, QpInitAttr, GSI_QKEY};
use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::{Device, DeviceConfig};
use softrdma_wire::cm::{
    AttrId, CmMessage, DrepRepr, DreqRepr, ExtendedTransportType, LapRepr, MraMessage, MraRepr,
    Path, PathMtu, RejMessage, RejRepr, RejectReason, RepRepr, ReqRepr, RtuRepr, SidrRepRepr,
    SidrReqRepr, TransportType,
};
use softrdma_wire::mad::{Mad, MadHeader, MadStatus, Method, MgmtClass, BASE_VERSION};
use softrdma_wire::rdma_cm::{service_id, IpCmHeader, PortSpace};
use softrdma_wire::roce::{BthRepr, DethRepr, Opcode, Psn, RoceRepr};
use softrdma_wire::{Gid, Guid};

/// REQs in the REQ flood (distinct comm IDs).
const FLOOD_REQS: u32 = 100_000;
/// SIDR REQs in the REQ flood (one after every tenth REQ).
const FLOOD_SIDR: u32 = FLOOD_REQS / 10;
/// The REQs of the flood during which the server application takes no events.
const HOLD: std::ops::Range<u32> = 30_000..40_000;
/// The legitimate client starts connecting after this many REQs of the flood.
const CLIENT_AT: u32 = 20_000;
/// Each kind of the storms, per round.
const STORM: u32 = 200;
/// At least this many storm rounds.
const MIN_ROUNDS: u32 = 2;
/// Replays of the legitimate connection's REQ and of its RTU.
const DUPS: u32 = 2_000;
const BACKLOG: u32 = 128;
const HALF_OPEN_LIMIT: usize = 256;
/// Datagrams the attacker keeps in flight at most (sent, not yet taken off the server's
/// socket).
const WINDOW: u64 = 128;
/// The bound on the process's RSS growth over the whole test (measured: 1.6 MiB). The
/// CM's state is bounded by the backlog, the half-open limit and what the application
/// holds (a few hundred ids); keeping an id for every flood REQ would cost more than
/// 45 MiB in the IB CM alone (an IB CM id in REQ_RCVD with its event is about 480 bytes,
/// `docs/measurements.md`), more with the RDMA CM's.
const RSS_BOUND_MIB: u64 = 16;

const PORT: u16 = 7650;
const SVC_IB: u64 = 0x0000_0000_0106_5a5a;
const ATTACKER_GUID: Guid = Guid(0x0bad_0bad_0bad_0bad);

fn v4(t: u8, l: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, t, l))
}

/// `VmRSS` and `VmHWM` of this process, in KiB.
fn rss_kib() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap()
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The kernel's receive drops on the UDP socket bound to `ip:4791` (`/proc/net/udp`).
fn kernel_drops(ip: Ipv4Addr) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/net/udp").ok()?;
    let local = format!("{:08X}:{:04X}", u32::from_le_bytes(ip.octets()), 4791);
    s.lines()
        .skip(1)
        .find(|l| l.split_whitespace().nth(1) == Some(local.as_str()))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|d| d.parse().ok())
}

/// The MAD inside a RoCEv2 UDP payload to QP1 (BTH 12 + DETH 8, then 256 bytes).
fn qp1_mad(payload: &[u8]) -> Option<&[u8]> {
    let dest_qp = u32::from_be_bytes([0, *payload.get(5)?, *payload.get(6)?, *payload.get(7)?]);
    (dest_qp == 1).then(|| payload.get(20..276)).flatten()
}

/// The legitimate connection's REQ and RTU as the server received them.
#[derive(Default)]
struct Captured {
    req: Option<Vec<u8>>,
    rtu: Option<Vec<u8>>,
}

/// The attacker: a plain UDP socket on `ip:4791` writing RoCEv2 datagrams to the server,
/// at most [`WINDOW`] ahead of what the server has taken off its socket.
struct Attacker {
    sock: UdpSocket,
    src: SocketAddr,
    dst: SocketAddr,
    psn: u32,
    sent: u64,
    server: Device,
}

impl Attacker {
    fn datagram(
        &mut self,
        opcode: Opcode,
        dest_qp: u32,
        q_key: u32,
        pkey: u16,
        tver: u8,
        payload: &[u8],
    ) -> Vec<u8> {
        self.psn = self.psn.wrapping_add(1);
        let mut r = RoceRepr::new(BthRepr {
            opcode,
            pkey,
            dest_qp,
            ack_req: true,
            tver,
            psn: Psn::new(self.psn),
            ..BthRepr::default()
        });
        r.deth = Some(DethRepr {
            q_key,
            reserved: 0,
            src_qp: 1,
        });
        r.set_payload(payload);
        emit::build(&r, self.src.ip(), self.src.port(), self.dst.ip()).payload
    }

    /// A MAD as a UD SEND to QP1 with a valid ICRC.
    fn mad_bytes(&mut self, mad: &[u8]) -> Vec<u8> {
        self.datagram(Opcode::UD_SEND_ONLY, 1, GSI_QKEY, 0xffff, 0, mad)
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        // Pace by the server's receive counter, never by time.
        let end = StdInstant::now() + Duration::from_secs(60);
        while self.sent >= self.server.driver_counters().rx_datagrams + WINDOW {
            assert!(StdInstant::now() < end, "the server stopped receiving");
            std::thread::sleep(Duration::from_micros(100));
        }
        self.sock.send_to(bytes, self.dst).unwrap();
        self.sent += 1;
    }

    fn send_mad(&mut self, mad: &Mad) {
        let b = self.mad_bytes(&mad.to_bytes());
        self.send_raw(&b);
    }

    fn send_cm(&mut self, msg: CmMessage, tid_low: u32) {
        let mad = msg.to_mad(0x0000_0002_0000_0000 | u64::from(tid_low), 0);
        self.send_mad(&mad);
    }
}

/// A REQ from the attacker: the REP wait `cvt(8)` = 1 ms with no retry, so an accepted
/// one ends in UNREACHABLE a millisecond later; distinct comm ID and QPN per `n`.
fn flood_req(n: u32, service_id: u64, pd: [u8; 92], from: IpAddr, to: IpAddr) -> ReqRepr {
    ReqRepr {
        local_comm_id: (n + 1).wrapping_mul(0x9e37_79b1),
        service_id,
        local_ca_guid: ATTACKER_GUID,
        local_qpn: 0x100 + n,
        remote_cm_response_timeout: 20,
        transport_service_type: TransportType::RC,
        starting_psn: n & 0xff_ffff,
        local_cm_response_timeout: 8,
        retry_count: 7,
        partition_key: 0xffff,
        path_mtu: PathMtu::MTU_1024,
        rnr_retry_count: 7,
        max_cm_retries: 0,
        extended_transport_type: ExtendedTransportType::NONE,
        primary_path: Path {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: Gid::from(from),
            remote_gid: Gid::from(to),
            hop_limit: 64,
            local_ack_timeout: 14,
            ..Path::default()
        },
        private_data: pd,
        ..ReqRepr::default()
    }
}

fn ip_header(from: IpAddr, sport: u16, to: IpAddr) -> [u8; 92] {
    let mut pd = IpCmHeader::new(from, sport, to).to_bytes();
    pd.resize(92, 0);
    pd.try_into().unwrap()
}

fn mad_header(class: MgmtClass, method: Method, attr_id: u16, tid: u64) -> MadHeader {
    MadHeader {
        base_version: BASE_VERSION,
        mgmt_class: class,
        class_version: if class == MgmtClass::CM { 2 } else { 1 },
        method,
        status: MadStatus::SUCCESS,
        class_specific: 0,
        tid,
        attr_id,
        reserved: 0,
        attr_mod: 0,
    }
}

/// What the server application did.
#[derive(Default, Debug)]
struct AppStats {
    /// CONNECT_REQUESTs taken: the attacker's, the client's.
    flood_requests: u64,
    client_requests: u64,
    unreachable: u64,
    ib_rejected: u64,
    sidr_rejected: u64,
    /// Connections accepted and not yet destroyed, and the most at once.
    live: usize,
    max_live: usize,
    /// Events the server did not expect (must stay empty).
    unexpected: Vec<String>,
    /// The legitimate connection's id on the server, once it is ESTABLISHED.
    client_conn: Option<RdmaId>,
    client_gone: bool,
}

struct App {
    hold: AtomicBool,
    stop: AtomicBool,
    stats: Mutex<AppStats>,
}

/// The server application: accepts every CONNECT_REQUEST (an RC QP each), destroys what
/// ends, rejects the IB CM listener's REQs and SIDR REQs; takes no event while `hold`.
fn server_app(
    cm: Cm,
    dev: Device,
    client_ip: IpAddr,
    pd: PdId,
    cq: CqId,
    app: Arc<App>,
) -> impl FnOnce() {
    move || {
        let mut conns: HashMap<RdmaId, (RdmaCmId, u32)> = HashMap::new();
        let destroy = |conns: &mut HashMap<RdmaId, (RdmaCmId, u32)>, id: RdmaId| {
            if let Some((id, qpn)) = conns.remove(&id) {
                cm.with_cm(|r| r.destroy(dev.now(), id));
                dev.destroy_qp(qpn).unwrap();
            }
        };
        while !app.stop.load(Ordering::SeqCst) {
            if app.hold.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let Some(ev) = cm.wait_event(Duration::from_millis(20)) else {
                continue;
            };
            let mut st = app.stats.lock().unwrap();
            match ev {
                Event::Rdma(e) => match e.kind() {
                    T::ConnectRequest => {
                        let id = e.into_new_id().unwrap();
                        let legit = cm.with_cm(|r| r.remote_addr(id.name())).map(|a| a.ip())
                            == Some(client_ip);
                        if legit {
                            st.client_requests += 1;
                        } else {
                            st.flood_requests += 1;
                        }
                        let (qpn, _) = dev.create_qp(QpInitAttr::rc(pd, cq, 2, 2)).unwrap();
                        dev.with_stack(|s| RdmaCm::init_qp(s, qpn)).unwrap();
                        let name = id.name();
                        let r = cm
                            .with_id(name, |r, s, now| {
                                r.accept(now, s, &id, qpn, &ConnParam::default())
                            })
                            .unwrap();
                        if let Err(err) = r {
                            st.unexpected.push(format!("accept: {err}"));
                        }
                        conns.insert(name, (id, qpn));
                        st.live = conns.len();
                        st.max_live = st.max_live.max(st.live);
                    }
                    T::Unreachable => {
                        st.unreachable += 1;
                        destroy(&mut conns, e.id());
                        st.live = conns.len();
                    }
                    T::Established => st.client_conn = Some(e.id()),
                    T::Disconnected => {
                        // rdma_disconnect: the DREP, then TIMEWAIT.
                        if let Some((id, _)) = conns.get(&e.id()) {
                            let r = cm.with_id(e.id(), |r, s, now| r.disconnect(now, s, id));
                            if !matches!(r, Ok(Ok(()))) {
                                st.unexpected.push(format!("disconnect: {r:?}"));
                            }
                        }
                    }
                    T::TimewaitExit => {
                        destroy(&mut conns, e.id());
                        st.live = conns.len();
                        st.client_gone = true;
                    }
                    _ => st.unexpected.push(format!("{e:?}")),
                },
                Event::Ib(CmEvent::ReqReceived { id, .. }) => {
                    st.ib_rejected += 1;
                    reject_ib(&cm, id);
                }
                Event::Ib(CmEvent::SidrReqReceived { id, .. }) => {
                    // Destroying it answers SIDR REP status 2 (REJECT).
                    st.sidr_rejected += 1;
                    cm.with_cm(|r| r.cm_mut().destroy(dev.now(), id));
                }
                Event::Ib(CmEvent::Retry { .. }) => {}
                Event::Ib(e) => st.unexpected.push(format!("{e:?}")),
            }
        }
        for (_, (id, qpn)) in conns.drain() {
            cm.with_cm(|r| r.destroy(dev.now(), id));
            let _ = dev.destroy_qp(qpn);
        }
    }
}

fn reject_ib(cm: &Cm, id: CmId) {
    let port = cm.devices()[0].0;
    cm.with(port, |r, _, now| {
        if let Err(e) = r
            .cm_mut()
            .reject(now, id, RejectReason::CONSUMER_DEFINED, &[], &[])
        {
            r.cm_mut().destroy(now, e.id);
        }
    })
    .unwrap();
}

/// What the legitimate client saw.
#[derive(Default, Debug)]
struct ClientStats {
    established: bool,
    disconnected: bool,
    done: bool,
    unexpected: Vec<String>,
}

/// The legitimate client: connects through the RDMA CM, waits for `go_away`, disconnects,
/// waits for TIMEWAIT_EXIT and destroys everything.
fn client(
    cm: Cm,
    dev: Device,
    dst: SocketAddr,
    go_away: Arc<AtomicBool>,
    stats: Arc<Mutex<ClientStats>>,
) -> impl FnOnce() {
    move || {
        let src = dev.local_addr().ip();
        let id = cm.with_cm(|r| r.create_id());
        // ACK timeout 14: packet lifetime 13, so the TIMEWAITs are short (cvt(14) = 64 ms
        // on the server, cvt(16) = 256 ms here); the REQ still waits cvt(20) = 4 s a try.
        cm.with_cm(|r| r.set_option(&id, RdmaOption::AckTimeout(14)))
            .unwrap();
        cm.resolve_addr(&id, Some(src), dst).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(4).unwrap();
        let mut qpn = None;
        let end = StdInstant::now() + Duration::from_secs(90);
        while StdInstant::now() < end {
            if go_away.load(Ordering::SeqCst) && stats.lock().unwrap().established {
                go_away.store(false, Ordering::SeqCst);
                cm.with_id(id.name(), |r, s, now| r.disconnect(now, s, &id))
                    .unwrap()
                    .unwrap();
            }
            let Some(Event::Rdma(e)) = cm.wait_event(Duration::from_millis(20)) else {
                continue;
            };
            let mut st = stats.lock().unwrap();
            match e.kind() {
                T::AddrResolved => cm.with_cm(|r| r.resolve_route(&id)).unwrap(),
                T::RouteResolved => {
                    let (q, _) = dev.create_qp(QpInitAttr::rc(pd, cq, 2, 2)).unwrap();
                    dev.with_stack(|s| RdmaCm::init_qp(s, q)).unwrap();
                    qpn = Some(q);
                    cm.with_id(id.name(), |r, s, now| {
                        r.connect(now, s, &id, Some(q), &ConnParam::default())
                    })
                    .unwrap()
                    .unwrap();
                }
                T::Established => st.established = true,
                T::Disconnected => st.disconnected = true,
                T::TimewaitExit => {
                    st.done = true;
                    break;
                }
                _ => st.unexpected.push(format!("{e:?}")),
            }
        }
        cm.with_cm(|r| r.destroy(dev.now(), id));
        if let Some(q) = qpn {
            dev.destroy_qp(q).unwrap();
        }
    }
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let end = StdInstant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(StdInstant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Opens the server, the client and the attacker's socket on 127.0.t.{2,1,9} for the first
/// `t` whose three addresses are free (`None`: none is; the test is skipped).
fn open_addresses(capture: &Arc<Mutex<Captured>>) -> Option<(Device, Device, UdpSocket, u8)> {
    for t in 50u8..58 {
        let (s_ip, c_ip, x_ip) = (v4(t, 2), v4(t, 1), v4(t, 9));
        let cap = capture.clone();
        let server = DeviceConfig::new(s_ip).with_rx_drop(move |src, payload| {
            if src.ip() == c_ip {
                if let Some(m) = qp1_mad(payload) {
                    let mut c = cap.lock().unwrap();
                    match u16::from_be_bytes([m[16], m[17]]) {
                        0x10 if c.req.is_none() => c.req = Some(m.to_vec()),
                        0x14 if c.rtu.is_none() => c.rtu = Some(m.to_vec()),
                        _ => {}
                    }
                }
            }
            false
        });
        let Ok(server) = Device::open_with(server) else {
            continue;
        };
        let Ok(client) = Device::open(c_ip) else {
            continue;
        };
        let Ok(sock) = UdpSocket::bind((x_ip, 4791)) else {
            continue;
        };
        return Some((server, client, sock, t));
    }
    None
}

#[test]
fn real_socket_flood_against_a_running_server() {
    let capture = Arc::new(Mutex::new(Captured::default()));
    let Some((server, client_dev, sock, t)) = open_addresses(&capture) else {
        eprintln!("skipped: no free 127.0.5x.{{1,2,9}}:4791");
        return;
    };
    let (s_ip, c_ip, x_ip) = (v4(t, 2), v4(t, 1), v4(t, 9));
    let s_v4 = Ipv4Addr::new(127, 0, t, 2);

    // The server: the process CM with a small half-open limit, an RDMA CM listener and an
    // IB CM listener, and its application thread.
    let mut cfg = CmConfig::new(Guid(0), RXE_CA_ACK_DELAY, 0x5eed);
    cfg.half_open_limit = HALF_OPEN_LIMIT;
    let cm_s = Cm::with_config(cfg);
    let ps = cm_s.add_device(&server).unwrap();
    let dst = SocketAddr::new(s_ip, PORT);
    let listener = cm_s.with_cm(|r| r.listen_on(dst, BACKLOG)).unwrap();
    let ib_listener: CmId = cm_s
        .with(ps, |r, _, _| {
            let id = r.cm_mut().create_id();
            r.cm_mut().listen(&id, SVC_IB).map(|_| id)
        })
        .unwrap()
        .unwrap();
    let pd = server.alloc_pd().unwrap();
    let cq = server.create_cq(64).unwrap();
    let qps_at_rest = server.with_stack(|s| s.verbs.qp_numbers().count());
    let app = Arc::new(App {
        hold: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        stats: Mutex::new(AppStats::default()),
    });
    let app_thread = std::thread::spawn(server_app(
        cm_s.clone(),
        server.clone(),
        c_ip,
        pd,
        cq,
        app.clone(),
    ));

    // The attacker's socket also takes the server's answers (REP, REJ, DREP, SIDR REP,
    // GetResp), counted by attribute and thrown away: it never answers.
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let answers: Arc<Mutex<BTreeMap<(u8, u16), u64>>> = Arc::default();
    let drain_stop = Arc::new(AtomicBool::new(false));
    let drain = {
        let (sock, answers, stop) = (
            sock.try_clone().unwrap(),
            answers.clone(),
            drain_stop.clone(),
        );
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::SeqCst) {
                if let Ok(n) = sock.recv(&mut buf) {
                    if let Some(m) = qp1_mad(&buf[..n]) {
                        *answers
                            .lock()
                            .unwrap()
                            .entry((m[1], u16::from_be_bytes([m[16], m[17]])))
                            .or_default() += 1;
                    }
                }
            }
        })
    };
    let mut x = Attacker {
        sock,
        src: SocketAddr::new(x_ip, 4791),
        dst: SocketAddr::new(s_ip, 4791),
        psn: 0,
        sent: 0,
        server: server.clone(),
    };

    // Memory before: everything is set up, nothing has happened yet.
    let (rss_before, _) = rss_kib();
    let drops_before = kernel_drops(s_v4);

    // The legitimate client, started in the middle of the REQ flood.
    let cm_c = Cm::new(0xc11e);
    cm_c.add_device(&client_dev).unwrap();
    let go_away = Arc::new(AtomicBool::new(false));
    let client_stats = Arc::new(Mutex::new(ClientStats::default()));
    let mut client_thread = None;

    // ---- 1. The REQ flood --------------------------------------------------------------
    let rdma_sid = service_id(PortSpace::TCP, PORT);
    let (mut max_ids, mut max_half_open, mut max_queued, mut max_rdma_ids) = (0, 0, 0, 0);
    let (mut rdma_reqs, mut ib_reqs, mut sidr_reqs) = (0u64, 0u64, 0u64);
    let mut sample = |cm: &Cm| {
        let s = cm.table_sizes();
        max_ids = max_ids.max(s.ids);
        max_half_open = max_half_open.max(s.half_open);
        max_queued = max_queued.max(cm.queued_events());
        max_rdma_ids = max_rdma_ids.max(cm.id_count());
        assert!(s.half_open <= HALF_OPEN_LIMIT, "{s:?}");
    };
    for n in 0..FLOOD_REQS {
        if n == CLIENT_AT {
            client_thread = Some(std::thread::spawn(client(
                cm_c.clone(),
                client_dev.clone(),
                dst,
                go_away.clone(),
                client_stats.clone(),
            )));
        }
        if n == HOLD.start {
            app.hold.store(true, Ordering::SeqCst);
        }
        if n == HOLD.end {
            // Everything sent so far is handled: the application took nothing since
            // HOLD.start, so the backlog and the half-open limit are full.
            let want = x.sent;
            wait_for("the server to take the held part", 30, || {
                server.driver_counters().rx_datagrams >= want
            });
            wait_for("the server to handle it", 30, || {
                let c = cm_s.counters();
                c.rx(AttrId::REQ) >= rdma_reqs + ib_reqs && c.rx(AttrId::SIDR_REQ) >= sidr_reqs
            });
            let s = cm_s.table_sizes();
            assert_eq!(s.half_open, HALF_OPEN_LIMIT, "{s:?}");
            assert!(cm_s.queued_events() >= HALF_OPEN_LIMIT);
            let (c, r) = (cm_s.counters(), cm_s.rdma_counters());
            assert!(c.half_open_drops > 0 && r.backlog_drops > 0, "{c:?} {r:?}");
            sample(&cm_s);
            app.hold.store(false, Ordering::SeqCst);
        }
        let from = x_ip;
        let m = if n % 5 == 4 {
            ib_reqs += 1;
            flood_req(n, SVC_IB, [0; 92], from, s_ip)
        } else {
            rdma_reqs += 1;
            let pd = ip_header(from, 40_000 + (n % 20_000) as u16, s_ip);
            flood_req(n, rdma_sid, pd, from, s_ip)
        };
        x.send_cm(CmMessage::Req(m), n);
        if n % 10 == 9 {
            sidr_reqs += 1;
            let req = SidrReqRepr {
                request_id: (n + 1).wrapping_mul(0x85eb_ca6b),
                partition_key: 0xffff,
                service_id: SVC_IB,
                private_data: [0; 216],
            };
            x.send_cm(CmMessage::SidrReq(req), n);
        }
        if n % 1000 == 0 {
            sample(&cm_s);
        }
    }
    assert_eq!(
        (rdma_reqs + ib_reqs, sidr_reqs),
        (FLOOD_REQS.into(), FLOOD_SIDR.into())
    );
    let flood_sent = x.sent;
    // The application drains what the flood left queued (the client's request, if it is
    // there, is accepted at once).
    wait_for("the application to drain the flood", 60, || {
        server.driver_counters().rx_datagrams >= flood_sent && cm_s.table_sizes().half_open <= 1
    });

    // ---- 2. Storms, until the client is ESTABLISHED -----------------------------------
    let mut k = 0u32;
    let mut rounds = 0u32;
    let storm_t0 = x.sent;
    let storms_end = StdInstant::now() + Duration::from_secs(60);
    while rounds < MIN_ROUNDS || !client_stats.lock().unwrap().established {
        assert!(
            StdInstant::now() < storms_end,
            "the client never connected: {:?}",
            client_stats.lock().unwrap()
        );
        for _ in 0..STORM {
            k += 1;
            let (l, r) = (
                k.wrapping_mul(0x2545_f491) | 1,
                k.wrapping_mul(0x9e37_79b9) | 1,
            );
            let msgs = [
                CmMessage::Dreq(DreqRepr {
                    local_comm_id: l,
                    remote_comm_id: r,
                    remote_qpn_eecn: 0x4242,
                    ..DreqRepr::default()
                }),
                CmMessage::Rtu(RtuRepr {
                    local_comm_id: l,
                    remote_comm_id: r,
                    ..RtuRepr::default()
                }),
                CmMessage::Rej(RejRepr {
                    local_comm_id: l,
                    remote_comm_id: r,
                    message_rejected: RejMessage::REP,
                    reason: RejectReason::CONSUMER_DEFINED,
                    ..RejRepr::default()
                }),
                CmMessage::Rej(RejRepr {
                    local_comm_id: l,
                    remote_comm_id: r,
                    message_rejected: RejMessage::REQ,
                    reason: RejectReason::TIMEOUT,
                    ..RejRepr::default()
                }),
                CmMessage::Mra(MraRepr {
                    local_comm_id: l,
                    remote_comm_id: r,
                    message_mraed: MraMessage::REQ,
                    service_timeout: 20,
                    ..MraRepr::default()
                }),
                CmMessage::Drep(DrepRepr {
                    local_comm_id: l,
                    remote_comm_id: r,
                    ..DrepRepr::default()
                }),
                CmMessage::Rep(RepRepr {
                    local_comm_id: l,
                    remote_comm_id: r,
                    local_qpn: 0x55,
                    local_ca_guid: ATTACKER_GUID,
                    ..RepRepr::default()
                }),
                CmMessage::SidrRep(SidrRepRepr {
                    request_id: r,
                    ..SidrRepRepr::default()
                }),
                CmMessage::Lap(LapRepr {
                    local_comm_id: l,
                    remote_comm_id: r,
                    ..LapRepr::default()
                }),
                // No listener: REJ 8.
                CmMessage::Req(flood_req(FLOOD_REQS + k, 0xdead_beef, [0; 92], x_ip, s_ip)),
                // The RC listener's service ID with no IP CM header: REJ 28.
                CmMessage::Req(flood_req(
                    2 * FLOOD_REQS + k,
                    rdma_sid,
                    [0xee; 92],
                    x_ip,
                    s_ip,
                )),
                // No listener: SIDR REP 1.
                CmMessage::SidrReq(SidrReqRepr {
                    request_id: l,
                    partition_key: 0xffff,
                    service_id: 0xdead_beef,
                    private_data: [0; 216],
                }),
                // The RC listener's: refused, SIDR REP 2.
                CmMessage::SidrReq(SidrReqRepr {
                    request_id: r,
                    partition_key: 0xffff,
                    service_id: rdma_sid,
                    private_data: [0; 216],
                }),
            ];
            for m in msgs {
                x.send_cm(m, k);
            }
            // MADs the MAD layer refuses or answers itself.
            let req = CmMessage::Req(flood_req(3 * FLOOD_REQS + k, rdma_sid, [0; 92], x_ip, s_ip))
                .to_mad(0x0000_0002_0000_0000 | u64::from(k), 0)
                .to_bytes();
            let short = x.mad_bytes(&req[..100]);
            x.send_raw(&short);
            let mut bad_base = req.clone();
            bad_base[0] = 2;
            let b = x.mad_bytes(&bad_base);
            x.send_raw(&b);
            let cm_get = Mad::new(
                mad_header(MgmtClass::CM, Method::GET, AttrId::REQ.0, u64::from(k)),
                &[0; 16],
            );
            x.send_mad(&cm_get);
            let perf_get = Mad::new(
                mad_header(MgmtClass::PERF_MGMT, Method::GET, 0x12, u64::from(k)),
                &[0; 16],
            );
            x.send_mad(&perf_get);
            // Datagrams the transport drops, one per reason.
            let mut bad_icrc = x.mad_bytes(&req);
            let last = bad_icrc.len() - 1;
            bad_icrc[last] ^= 0x5a;
            x.send_raw(&bad_icrc);
            let good = x.mad_bytes(&req);
            x.send_raw(&good[..1 + k as usize % 15]);
            let tver = x.datagram(Opcode::UD_SEND_ONLY, 1, GSI_QKEY, 0xffff, 1, &req);
            x.send_raw(&tver);
            let qpn = x.datagram(Opcode::UD_SEND_ONLY, 0xab_cdef, GSI_QKEY, 0xffff, 0, &req);
            x.send_raw(&qpn);
            let qkey = x.datagram(Opcode::UD_SEND_ONLY, 1, 0x1234_5678, 0xffff, 0, &req);
            x.send_raw(&qkey);
            let pkey = x.datagram(Opcode::UD_SEND_ONLY, 1, GSI_QKEY, 0x1234, 0, &req);
            x.send_raw(&pkey);
            let rc = x.datagram(Opcode::RC_SEND_ONLY, 1, GSI_QKEY, 0xffff, 0, &req);
            x.send_raw(&rc);
        }
        rounds += 1;
        sample(&cm_s);
    }
    let storms = u64::from(k);
    let storm_sent = x.sent - storm_t0;

    // ---- 3. The legitimate connection's REQ and RTU, replayed -------------------------
    let (req, rtu) = {
        let c = capture.lock().unwrap();
        (c.req.clone().unwrap(), c.rtu.clone().unwrap())
    };
    wait_for("the server's side of the connection", 30, || {
        app.stats.lock().unwrap().client_conn.is_some()
    });
    let dup0 = cm_s.counters();
    for _ in 0..DUPS {
        let b = x.mad_bytes(&req);
        x.send_raw(&b);
        let b = x.mad_bytes(&rtu);
        x.send_raw(&b);
    }
    let dups = u64::from(DUPS);
    wait_for("the replays", 30, || {
        let c = cm_s.counters();
        c.dup(AttrId::REQ) >= dup0.dup(AttrId::REQ) + dups
            && c.dup(AttrId::RTU) >= dup0.dup(AttrId::RTU) + dups
    });
    let conn = app.stats.lock().unwrap().client_conn.unwrap();
    assert_eq!(
        cm_s.with_cm(|r| r.cm_state(conn)),
        Some(softrdma_core::cm::CmState::Established)
    );
    let total_sent = x.sent;

    // ---- The client leaves; everything returns to rest ---------------------------------
    go_away.store(true, Ordering::SeqCst);
    client_thread.take().unwrap().join().unwrap();
    let cs = std::mem::take(&mut *client_stats.lock().unwrap());
    assert!(cs.established && cs.disconnected && cs.done, "{cs:?}");
    assert!(cs.unexpected.is_empty(), "{:?}", cs.unexpected);
    wait_for("the server's TIMEWAIT_EXIT", 30, || {
        app.stats.lock().unwrap().client_gone
    });
    let at_rest = |cm: &Cm| {
        let s = cm.table_sizes();
        s.ids == 2
            && s.listeners == 2
            && (s.remote_ids, s.remote_qpns, s.remote_sidr) == (0, 0, 0)
            && (s.sends, s.timewaits, s.half_open, s.events, s.mad_ops) == (0, 0, 0, 0, 0)
            && cm.id_count() == 1
            && cm.queued_events() == 0
    };
    wait_for("the server's CM at rest", 30, || {
        at_rest(&cm_s)
            && app.stats.lock().unwrap().live == 0
            && server.with_mad(|m| m.mad.outstanding()) == 0
    });
    assert_eq!(
        server.with_stack(|s| s.verbs.qp_numbers().count()),
        qps_at_rest
    );
    let (rss_after, hwm) = rss_kib();
    let drops_after = kernel_drops(s_v4);
    app.stop.store(true, Ordering::SeqCst);
    app_thread.join().unwrap();
    drain_stop.store(true, Ordering::SeqCst);
    drain.join().unwrap();
    let st = std::mem::take(&mut *app.stats.lock().unwrap());
    assert!(st.unexpected.is_empty(), "{:?}", st.unexpected);

    // ---- The counters -------------------------------------------------------------------
    let c = cm_s.counters();
    let r = cm_s.rdma_counters();
    let cc = cm_c.counters();
    let (mad, qp1_errors, _) = server.mad_counters();
    let sc = server.counters();
    let dc = server.driver_counters();
    let client_reqs = cc.tx(AttrId::REQ);
    // A retransmission of the client's REQ that finds its passive id still waiting is a
    // duplicate (with an MRA from MRA_REQ_SENT), not a new request: possible only if the
    // application took longer than the REQ's 4 s timeout to accept it (a loaded machine).
    let client_dups = c.dup(AttrId::REQ) - u64::from(DUPS);
    assert!(client_dups < client_reqs, "{client_dups} of {client_reqs}");
    // Nothing was lost on the way: the kernel dropped nothing, the server took every
    // datagram off its socket and QP1 always had a buffer.
    assert_eq!(drops_before, drops_after, "the kernel dropped datagrams");
    assert!(dc.rx_datagrams >= total_sent);
    assert_eq!(sc.drop_no_recv_wqe, 0, "{sc}");
    assert_eq!(qp1_errors, (0, 0));
    assert_eq!(dc.tx_errors, 0);

    // The REQ flood: every REQ and SIDR REQ that reached a listener ended in exactly one
    // place — taken by the application, dropped at the backlog or at the half-open limit
    // (no REJ), refused (REJ 28 / SIDR REP 2) — and the queue limit never bit.
    assert_eq!(r.queue_full_drops, 0, "{r:?}");
    assert_eq!(r.retry_notice_drops, 0, "{r:?}");
    assert!(r.backlog_drops > 0 && c.half_open_drops > 0);
    assert_eq!(
        st.flood_requests
            + st.client_requests
            + st.ib_rejected
            + st.sidr_rejected
            + r.backlog_drops
            + c.half_open_drops
            + r.req_refused,
        u64::from(FLOOD_REQS) + u64::from(FLOOD_SIDR) + client_reqs - client_dups + 2 * storms,
        "{st:?} {r:?} {c:?}"
    );
    assert_eq!(st.client_requests, 1);
    assert_eq!(r.req_refused, 2 * storms);
    assert_eq!(st.unreachable, st.flood_requests);
    // What each message got.
    assert_eq!(
        c.rx(AttrId::REQ),
        u64::from(FLOOD_REQS) + client_reqs + 2 * storms + dups
    );
    assert_eq!(c.rx(AttrId::SIDR_REQ), u64::from(FLOOD_SIDR) + 2 * storms);
    assert_eq!(c.rx(AttrId::RTU), storms + 1 + dups);
    for a in [
        AttrId::DREQ,
        AttrId::MRA,
        AttrId::REP,
        AttrId::SIDR_REP,
        AttrId::LAP,
    ] {
        assert_eq!(c.rx(a), storms + u64::from(a == AttrId::DREQ), "{a:?}");
    }
    assert_eq!(c.rx(AttrId::REJ), 2 * storms);
    assert_eq!(c.rx(AttrId::DREP), storms);
    // DREQ for no id: a context-free DREP each, counted as a duplicate DREQ (and, as cm.c
    // counts an answer with no id, twice sent, once retried); plus the client's DREP.
    assert_eq!(c.dup(AttrId::DREQ), storms);
    assert_eq!(c.tx(AttrId::DREP), 2 * storms + 1);
    // RTU, REJ, MRA, DREP, REP, SIDR REP and LAP for no id: dropped, nothing sent.
    assert_eq!(c.rx_dropped, 8 * storms, "{c}");
    assert!(c.tx(AttrId::MRA) <= 2 * client_dups, "{c}");
    assert_eq!(c.tx(AttrId::RTU), 0);
    // REJ 8 and REJ 28 for the storms' REQs, REJ 28 for each IB CM REQ rejected.
    assert_eq!(c.tx(AttrId::REJ), 2 * storms + st.ib_rejected);
    // SIDR REP 1 / 2 for the storms' SIDR REQs, 2 for each one the application destroyed.
    assert_eq!(c.tx(AttrId::SIDR_REP), 2 * storms + st.sidr_rejected);
    // A REP per accepted request (the attacker's never answered: UNREACHABLE).
    assert_eq!(c.tx(AttrId::REP), st.flood_requests + 1);
    // The replays: duplicates of a live connection, dropped; it stayed up.
    assert_eq!(c.dup(AttrId::REQ), dups + client_dups);
    assert_eq!(c.dup(AttrId::RTU), dups);
    assert_eq!(c.rx_malformed, 0);
    // The MAD layer: one of each refusal per round, the Perf Get answered 0x000C.
    assert_eq!(mad.rx_malformed, storms, "{mad:?}");
    assert_eq!(mad.rx_bad_base_version, storms);
    assert_eq!(mad.rx_invalid, storms);
    assert_eq!((mad.rx_no_agent, mad.unsupported_replies), (storms, storms));
    // The transport: one drop per reason per round.
    assert_eq!(sc.drop_bad_icrc, storms, "{sc}");
    assert_eq!(sc.drop_malformed, storms);
    assert_eq!(sc.drop_bad_tver, storms);
    assert_eq!(sc.drop_unknown_qpn, storms);
    assert_eq!(sc.drop_bad_qkey, storms);
    assert_eq!(sc.drop_bad_pkey, storms);
    assert_eq!(sc.drop_bad_opcode, storms);
    assert_eq!(sc.total_drops(), 7 * storms);

    // Bounded while it ran, and memory back within the bound.
    assert!(max_half_open <= HALF_OPEN_LIMIT);
    assert!(
        max_ids <= 2 + HALF_OPEN_LIMIT + st.max_live + 1,
        "{max_ids}"
    );
    assert!(
        max_queued <= HALF_OPEN_LIMIT + st.max_live + 8,
        "{max_queued}"
    );
    let grown = rss_after.saturating_sub(rss_before);
    assert!(
        grown < RSS_BOUND_MIB * 1024,
        "RSS grew by {grown} KiB ({rss_before} → {rss_after} KiB)"
    );
    let answers = answers.lock().unwrap().clone();
    eprintln!(
        "socket flood: {total_sent} datagrams sent ({flood_sent} in the REQ flood: {FLOOD_REQS} \
         REQs + {FLOOD_SIDR} SIDR REQs; {storm_sent} in {rounds} storm rounds of {STORM} × 24 \
         kinds; {} replays)\n  \
         server app: {} flood CONNECT_REQUESTs accepted, {} UNREACHABLE, {} IB CM REQs and {} \
         SIDR REQs rejected, at most {} accepted at once; client REQs sent {client_reqs}\n  \
         drops: backlog {}, half-open {}, refused {}, queue full {}, retry notices {}\n  \
         CM: {c:?}\n  MAD: {mad:?}\n  transport drops: icrc {} malformed {} tver {} qpn {} \
         qkey {} pkey {} opcode {}\n  \
         most at once: {max_ids} IB CM ids, {max_rdma_ids} RDMA CM ids, {max_half_open} \
         half-open, {max_queued} queued events\n  \
         attacker received (class, attr) → n: {answers:?}\n  \
         RSS {rss_before} KiB before, {rss_after} KiB after (+{grown} KiB), peak {hwm} KiB; \
         kernel drops {drops_before:?} → {drops_after:?}",
        2 * dups,
        st.flood_requests,
        st.unreachable,
        st.ib_rejected,
        st.sidr_rejected,
        st.max_live,
        r.backlog_drops,
        c.half_open_drops,
        r.req_refused,
        r.queue_full_drops,
        r.retry_notice_drops,
        sc.drop_bad_icrc,
        sc.drop_malformed,
        sc.drop_bad_tver,
        sc.drop_unknown_qpn,
        sc.drop_bad_qkey,
        sc.drop_bad_pkey,
        sc.drop_bad_opcode,
    );
    cm_s.with(ps, |r, _, now| r.cm_mut().destroy(now, ib_listener))
        .unwrap();
    cm_s.with_cm(|r| r.destroy(server.now(), listener));
}
