//! `softrdma perf cm`: the connection rate of full RDMA CM cycles between two devices on
//! loopback — create id, resolve address and route, create QP, connect, established,
//! disconnect, destroy, with all N in flight step by step as cmtime issues them — and, in
//! the same run, TCP connect / accept / close with the same number in flight. Also the
//! latency of one connection set up alone, ours (REQ to ESTABLISHED) against TCP's connect.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::{Device, PollMode};

use crate::cmtime;
use crate::cmtool;
use crate::perf::process_cpu;

/// `softrdma perf cm`'s options (a subcommand of `softrdma perf`: [`crate::perf::PerfCmd`]).
#[derive(Debug, clap::Args)]
pub struct Plan {
    /// Connections in flight per run.
    #[arg(short = 'c', long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub connections: u32,
    /// Runs (ours and TCP's, interleaved).
    #[arg(short = 'r', long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,
    /// The server device's address.
    #[arg(long, default_value = "127.0.0.2")]
    pub server: IpAddr,
    /// The client device's address.
    #[arg(long, default_value = "127.0.0.1")]
    pub client: IpAddr,
    /// After each run, print what each side's CM, MAD layer, stack and driver counted in it
    /// (the counters that moved): where a slow run spent its retransmissions.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Run each device's event loop on a thread of its own (the other tools' default)
    /// rather than in the thread that waits on its CM.
    #[arg(long)]
    pub loop_thread: bool,
    /// Record both devices' datagrams (pcap files in a temporary directory, kept with
    /// -v) and print where one connection's microseconds go, hop by hop, from the
    /// recorded times (the recording adds its own cost to every hop).
    #[arg(long)]
    pub trace: bool,
    /// How long each side's thread spins on its socket before it sleeps in epoll when it
    /// waits for input (0: it sleeps at once). Spinning trades CPU for the wake-up of a
    /// sleeping thread: on a 2-vCPU VM each of one connection's two waits (the server's for
    /// the REQ, the client's for the REP) costs 50-60 us asleep and about 10 us spinning
    /// (`--trace` shows both; the line after "one connection alone" counts what each side's
    /// waits did). Spinning needs an idle core: a thread whose spin loses its core to other
    /// threads stops, and its waits sleep at once for a while (--spin-backoff-us); on a busy
    /// host that is what keeps a hop near a wake-up's cost instead of a whole spin.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub spin_us: u64,
    /// How long a thread's spinning stays off after one of its spins lost its core to
    /// other threads, the first time (it doubles with each further spin that loses as soon
    /// as it is tried, up to 100 ms, falls back with spins that keep their core, and starts
    /// over after a quiet spell). The default, 1000, is the driver's; 100000 is session 8's
    /// fixed 100 ms, for comparisons.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub spin_backoff_us: u64,
    /// How long a thread's spin may grow to while its input keeps arriving shortly after a
    /// spin of --spin-us ran out (it doubles each time, and halves after idle spells): a
    /// side idle between two single connections for longer than --spin-us otherwise
    /// sleeps through the next message, and on a VM whose idle vCPU halts that wake-up can
    /// cost hundreds of microseconds. --spin-max-us 0 (or at most --spin-us) keeps every
    /// spin at --spin-us.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub spin_max_us: u64,
}

/// Every counter of one side by name: the IB CM's, the MAD layer's, the stack's, the
/// driver's.
pub(crate) fn snapshot((dev, cm): (&Device, &Cm)) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = cm
        .counters()
        .iter()
        .map(|(n, c)| (format!("cm {n}"), c))
        .collect();
    let (mad, (send_err, recv_err), orphaned) = dev.mad_counters();
    v.extend([
        ("mad tx".into(), mad.tx),
        ("mad retransmits".into(), mad.retransmits),
        ("mad timeouts".into(), mad.timeouts),
        ("mad rx_delivered".into(), mad.rx_delivered),
        (
            "mad rx_unmatched_response".into(),
            mad.rx_unmatched_response,
        ),
        ("mad rx_no_agent".into(), mad.rx_no_agent),
        ("mad rx_invalid".into(), mad.rx_invalid),
        ("qp1 send_errors".into(), send_err),
        ("qp1 recv_errors".into(), recv_err),
        ("mad orphaned".into(), orphaned),
    ]);
    v.extend(
        dev.counters()
            .iter()
            .map(|(n, c)| (format!("stack {n}"), c)),
    );
    let d = dev.driver_counters();
    v.extend([
        ("driver tx_datagrams".into(), d.tx_datagrams),
        ("driver tx_sends".into(), d.tx_sends),
        ("driver tx_errors".into(), d.tx_errors),
        ("driver tx_dropped".into(), d.tx_dropped),
        ("driver rx_datagrams".into(), d.rx_datagrams),
        ("driver rx_records".into(), d.rx_records),
    ]);
    v
}

/// The counters that moved between two snapshots, one `name +delta` per line.
pub(crate) fn print_moved(side: &str, before: &[(String, u64)], after: &[(String, u64)]) {
    let moved: Vec<String> = before
        .iter()
        .zip(after)
        .filter(|(b, a)| a.1 != b.1)
        .map(|(b, a)| format!("{} +{}", a.0, a.1.wrapping_sub(b.1)))
        .collect();
    println!("  {side}: {}", moved.join(", "));
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// TCP connect/accept/close of `n` connections with all `n` in flight, as ours are: the
/// client issues `n` non-blocking connects back to back (bound to its own address), then
/// waits until each is connected; a server thread accepts and closes each (listen backlog
/// `n`); then the client closes all.
fn tcp_cycle(server: IpAddr, client: IpAddr, n: u32) -> Result<Duration, String> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let dom = if server.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let l = Socket::new(dom, Type::STREAM, Some(Protocol::TCP)).map_err(|e| e.to_string())?;
    l.set_reuse_address(true).map_err(|e| e.to_string())?;
    l.bind(&SockAddr::from(SocketAddr::new(server, 0)))
        .map_err(|e| format!("tcp bind: {e}"))?;
    l.listen(n.min(65_535) as i32).map_err(|e| e.to_string())?;
    let addr = l
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .ok_or("tcp listener address")?;
    let l: TcpListener = l.into();
    let acceptor = std::thread::spawn(move || {
        let mut got = 0u32;
        while got < n {
            match l.accept() {
                Ok((s, _)) => {
                    drop(s);
                    got += 1;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        got
    });
    let t0 = Instant::now();
    let mut socks = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let s = Socket::new(dom, Type::STREAM, Some(Protocol::TCP)).map_err(|e| e.to_string())?;
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
        s.bind(&SockAddr::from(SocketAddr::new(client, 0)))
            .map_err(|e| format!("tcp bind {client}: {e}"))?;
        match s.connect(&SockAddr::from(addr)) {
            Ok(()) => {}
            Err(e)
                if e.kind() == ErrorKind::WouldBlock
                    || e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
            Err(e) => return Err(format!("tcp connect: {e}")),
        }
        socks.push(s);
    }
    // Connected once the peer address is known (non-blocking connect done).
    let end = Instant::now() + Duration::from_secs(60);
    let mut pending: Vec<&Socket> = socks.iter().collect();
    while !pending.is_empty() {
        pending.retain(|s| s.peer_addr().is_err());
        if Instant::now() > end {
            return Err(format!(
                "tcp: {} connects still pending after 60 s",
                pending.len()
            ));
        }
        std::hint::spin_loop();
    }
    drop(socks);
    let got = acceptor
        .join()
        .map_err(|_| "tcp acceptor panicked".to_string())?;
    let dt = t0.elapsed();
    if got != n {
        return Err(format!("tcp: accepted {got} of {n}"));
    }
    Ok(dt)
}

pub fn run(p: &Plan) -> ExitCode {
    match run_inner(p) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("perf cm: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_inner(p: &Plan) -> Result<(), String> {
    println!(
        "softrdma perf cm: {} connections in flight, {} runs, {} <- {} (full RDMA CM cycles vs TCP connect/accept/close)",
        p.connections, p.runs, p.server, p.client
    );
    // Each side's loop runs in the thread that waits on its CM, and what a burst of
    // commands sends leaves as GSO trains when the thread waits again
    // (cmtool::open_batched). --loop-thread gives each device a loop thread of its own and
    // sends per command, as the other tools do.
    softrdma_driver::timer::set_spin_backoff_first(Duration::from_micros(p.spin_backoff_us));
    softrdma_driver::timer::set_spin_grow_max(Duration::from_micros(p.spin_max_us));
    let trace_dir = if p.trace {
        let d = std::env::temp_dir().join(format!("softrdma-perf-cm-{}", std::process::id()));
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        Some(d)
    } else {
        None
    };
    let pcap = |side: &str| trace_dir.as_ref().map(|d| d.join(format!("{side}.pcap")));
    let (srv_pcap, cli_pcap) = (pcap("server"), pcap("client"));
    let open = |ip, how, pcap: &Option<PathBuf>| {
        if p.loop_thread {
            cmtool::open(ip, pcap.as_ref(), how, cmtool::THREAD)
        } else {
            let wait = match p.spin_us {
                0 => PollMode::Blocking,
                us => PollMode::SpinThenBlock(Duration::from_micros(us)),
            };
            cmtool::open_batched(ip, how, pcap.as_deref(), wait)
        }
    };
    let srv = open(p.server, "--server", &srv_pcap)?;
    let cli = open(p.client, "--client", &cli_pcap)?;
    let dst = SocketAddr::new(p.server, 7471);
    let listener = srv
        .cm
        .with_cm(|cm| cm.listen_on(dst, 0))
        .map_err(|e| format!("listen on {dst}: {e}"))?;
    let srv_view = p.verbose.then(|| (srv.dev.clone(), srv.cm.clone()));
    // The server's device, for its waits' spin counts (dropped before the trace is read:
    // the last handle flushes the tap).
    let srv_dev = srv.dev.clone();
    // The server: cmtime's, on its own thread.
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let server = std::thread::spawn(move || {
        let cq = match srv.shared_cq(p_conns_for_cq(), 1) {
            Ok(c) => c,
            Err(e) => return Err(e),
        };
        let mut live = cmtime::Live::new();
        let mut disc = 0u32;
        while !st.load(Ordering::Relaxed) {
            if let Some(Event::Rdma(e)) = srv.cm.wait_event(Duration::from_millis(50)) {
                cmtime::on_server_event(&srv, cq, e, &mut live, &mut disc)?;
            }
        }
        for (_, id) in live {
            srv.cm.with_cm(|cm| cm.destroy(srv.dev.now(), id));
        }
        srv.cm.with_cm(|cm| cm.destroy(srv.dev.now(), listener));
        Ok(())
    });
    let mut ratios = Vec::new();
    // CPU time (the whole process's, user + system) per 1,000 connections, ours and TCP's,
    // per run: far less moved by the load than the rates are.
    let (mut ours_cpu, mut tcp_cpu) = (Vec::new(), Vec::new());
    let per_1000 = |cpu: f64| cpu * 1e3 * 1000.0 / f64::from(p.connections);
    let mut last_table = String::new();
    for run in 1..=p.runs {
        let before = srv_view
            .as_ref()
            .map(|(d, c)| (snapshot((&cli.dev, &cli.cm)), snapshot((d, c))));
        let (t0, c0) = (Instant::now(), process_cpu());
        let (t, r) = cmtime::cycle(&cli, p.connections, dst, p.client, None, 7, false);
        let ours = t0.elapsed();
        // The server thread may still be answering the last DREQs: its share of them
        // counts, as TCP's acceptor's does below.
        let ours_ms = per_1000(process_cpu() - c0);
        r?;
        last_table = t.table(false);
        let c1 = process_cpu();
        let tcp = tcp_cycle(p.server, p.client, p.connections)?;
        let tcp_ms = per_1000(process_cpu() - c1);
        ours_cpu.push(ours_ms);
        tcp_cpu.push(tcp_ms);
        let (ours_cps, tcp_cps) = (
            f64::from(p.connections) / ours.as_secs_f64(),
            f64::from(p.connections) / tcp.as_secs_f64(),
        );
        let ratio = ours_cps / tcp_cps;
        ratios.push(ratio);
        println!(
            "run {run}: softrdma {:9.0} conn/s ({:8.1} ms) | TCP {:9.0} conn/s ({:8.1} ms) | ratio {ratio:.2}x TCP: higher is better",
            ours_cps,
            ours.as_secs_f64() * 1e3,
            tcp_cps,
            tcp.as_secs_f64() * 1e3
        );
        println!(
            "  CPU per 1000 connections (user + system, all threads): softrdma {ours_ms:.1} ms | TCP {tcp_ms:.1} ms | {:.2}x TCP",
            ours_ms / tcp_ms.max(1e-9)
        );
        if let (Some((d, c)), Some((bc, bs))) = (srv_view.as_ref(), before) {
            print_moved("client", &bc, &snapshot((&cli.dev, &cli.cm)));
            print_moved("server", &bs, &snapshot((d, c)));
        }
    }
    print!("{last_table}");
    // One connection set up alone: ours REQ → ESTABLISHED (the connect step), TCP connect.
    // Alone also in time: the spins the rate runs lost (our two threads and TCP's two on
    // two cores) back spinning off for up to timer::SPIN_BACKOFF, per thread, and a loss
    // within as long again after it continues at that level; on a quiet machine the single
    // connections right after the last TCP half then slept through every hop (both sides
    // backed off in 32-36 of 40 waits, 145 µs against TCP's 34).
    std::thread::sleep(2 * softrdma_driver::timer::SPIN_BACKOFF + Duration::from_millis(10));
    let mut ours1 = Vec::new();
    let mut tcp1 = Vec::new();
    let spins0 = [cli.dev.io_stats().spins, srv_dev.io_stats().spins];
    for _ in 0..ALONE {
        let (t, r) = cmtime::cycle(&cli, 1, dst, p.client, None, 7, false);
        r?;
        if let Some(us) = t.step_us("connect") {
            ours1.push(us);
        }
        let l = TcpListener::bind(SocketAddr::new(p.server, 0)).map_err(|e| e.to_string())?;
        let a = l.local_addr().map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        let s = TcpStream::connect(a).map_err(|e| e.to_string())?;
        tcp1.push(t0.elapsed().as_secs_f64() * 1e6);
        drop(s);
    }
    let spins1 = [cli.dev.io_stats().spins, srv_dev.io_stats().spins];
    let ours1_median = median(&mut ours1);
    println!(
        "one connection alone: softrdma connect (REQ → ESTABLISHED) median {:.1} us | TCP connect median {:.1} us",
        ours1_median,
        median(&mut tcp1)
    );
    // Whether each hop was a spin or a sleeping thread's wake-up: what the waits for
    // input of both sides did over the single connections.
    for (side, (a, b)) in ["client", "server"].iter().zip(spins0.iter().zip(&spins1)) {
        println!(
            "  {side} waits for input: {} spun and found it, {} lost the core, {} spun out, {} slept at once (backed off)",
            b.found - a.found,
            b.lost - a.lost,
            b.expired - a.expired,
            b.backed_off - a.backed_off
        );
    }
    drop(srv_dev);
    stop.store(true, Ordering::Relaxed);
    server
        .join()
        .map_err(|_| "server thread panicked".to_string())??;
    if let (Some(d), Some(sp), Some(cp)) = (&trace_dir, &srv_pcap, &cli_pcap) {
        // Dropping the last handles on the devices flushes their taps (the server's went
        // with its thread).
        drop(srv_view);
        drop(cli);
        let hops = trace::hops(cp, sp, p.client, p.server, ALONE)?;
        print!("{}", trace::table(&hops, ours1_median));
        if p.verbose {
            println!("pcap files kept in {}", d.display());
        } else {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    let (ours_cpu_median, tcp_cpu_median) = (median(&mut ours_cpu), median(&mut tcp_cpu));
    println!(
        "CPU per 1000 connections over {} runs, medians: softrdma {ours_cpu_median:.1} ms | TCP {tcp_cpu_median:.1} ms | {:.2}x TCP: lower is better",
        ours_cpu.len(),
        ours_cpu_median / tcp_cpu_median.max(1e-9)
    );
    let mut r = ratios.clone();
    r.sort_by(|a, b| a.total_cmp(b));
    println!(
        "ratio over {} runs: min {:.2} median {:.2} max {:.2}",
        r.len(),
        r.first().copied().unwrap_or(0.0),
        median(&mut ratios),
        r.last().copied().unwrap_or(0.0)
    );
    Ok(())
}

/// Connections set up one at a time for the latency of one connection alone.
const ALONE: usize = 20;

/// Where one connection's microseconds go, from the pcap taps' timestamps of its CM
/// messages (`perf cm --trace`).
mod trace {
    use std::net::IpAddr;
    use std::path::Path;

    use softrdma_wire::cm::{AttrId, CmMessage};
    use softrdma_wire::mad::Mad;
    use softrdma_wire::pcap::Reader;
    use softrdma_wire::roce::RoceRepr;

    /// A CM message a tap recorded: when (µs since the epoch), from which address, what.
    struct Seen {
        at: f64,
        src: IpAddr,
        attr: AttrId,
    }

    /// The CM messages in a tap's file (Ethernet, IPv4, UDP, RoCEv2 to QP1).
    fn cm_seen(path: &Path) -> Result<Vec<Seen>, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let reader = Reader::new(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut out = Vec::new();
        for rec in reader {
            let rec = rec.map_err(|e| format!("{}: {e}", path.display()))?;
            let d = rec.data;
            // Ethernet (14) + IPv4 (IHL) + UDP (8): the tap writes IPv4 frames for IPv4
            // devices; anything else is not ours to time.
            let Some(&vihl) = d.get(14) else { continue };
            if vihl >> 4 != 4 {
                continue;
            }
            let ihl = usize::from(vihl & 0x0f) * 4;
            let (Some(src), Some(udp)) = (d.get(26..30), d.get(14 + ihl + 8..)) else {
                continue;
            };
            let src = IpAddr::from([src[0], src[1], src[2], src[3]]);
            let Ok(r) = RoceRepr::parse(udp) else {
                continue;
            };
            if r.bth.dest_qp != 1 {
                continue;
            }
            let Ok(m) = Mad::parse(r.payload) else {
                continue;
            };
            let Ok(msg) = CmMessage::from_mad(&m) else {
                continue;
            };
            out.push(Seen {
                at: rec.timestamp.as_secs_f64() * 1e6,
                src,
                attr: msg.attr_id(),
            });
        }
        Ok(out)
    }

    /// The last `n` times `attr` from `src` appears in `seen`.
    fn last(seen: &[Seen], attr: AttrId, src: IpAddr, n: usize) -> Vec<f64> {
        let v: Vec<f64> = seen
            .iter()
            .filter(|s| s.attr == attr && s.src == src)
            .map(|s| s.at)
            .collect();
        v[v.len().saturating_sub(n)..].to_vec()
    }

    /// Per hop, the median over the last `n` connections: (what, µs).
    pub fn hops(
        client_pcap: &Path,
        server_pcap: &Path,
        client: IpAddr,
        server: IpAddr,
        n: usize,
    ) -> Result<Vec<(&'static str, f64)>, String> {
        let (c, s) = (cm_seen(client_pcap)?, cm_seen(server_pcap)?);
        let req_tx = last(&c, AttrId::REQ, client, n);
        let req_rx = last(&s, AttrId::REQ, client, n);
        let rep_tx = last(&s, AttrId::REP, server, n);
        let rep_rx = last(&c, AttrId::REP, server, n);
        let rtu_tx = last(&c, AttrId::RTU, client, n);
        let k = [&req_tx, &req_rx, &rep_tx, &rep_rx, &rtu_tx]
            .iter()
            .map(|v| v.len())
            .min()
            .unwrap_or(0);
        if k == 0 {
            return Err("the taps recorded no complete REQ/REP/RTU exchange".into());
        }
        let med = |a: &[f64], b: &[f64]| {
            let mut d: Vec<f64> = a[a.len() - k..]
                .iter()
                .zip(&b[b.len() - k..])
                .map(|(x, y)| y - x)
                .collect();
            d.sort_by(|x, y| x.total_cmp(y));
            d[d.len() / 2]
        };
        Ok(vec![
            ("REQ: client sends → server receives", med(&req_tx, &req_rx)),
            (
                "server: REQ → CONNECT_REQUEST → accept → REP sent",
                med(&req_rx, &rep_tx),
            ),
            ("REP: server sends → client receives", med(&rep_tx, &rep_rx)),
            (
                "client: REP → RTU sent (ESTABLISHED queued)",
                med(&rep_rx, &rtu_tx),
            ),
            ("REQ sent → REP received", med(&req_tx, &rep_rx)),
            ("REQ sent → RTU sent", med(&req_tx, &rtu_tx)),
        ])
    }

    /// The hops, and what the connect step spent outside the REQ → REP exchange: the
    /// client's own work before the REQ and after the REP (handling it, taking
    /// ESTABLISHED). The RTU is not the end: with the batched sends of `perf cm` it leaves
    /// at the client's next turn, after the application took ESTABLISHED.
    pub fn table(hops: &[(&'static str, f64)], connect_us: f64) -> String {
        let mut t =
            String::from("where one connection's microseconds go (pcap timestamps, medians):\n");
        for (what, us) in hops {
            t += &format!("  {what:<55} {us:8.1} us\n");
        }
        if let Some((_, exchange)) = hops.iter().find(|(w, _)| *w == "REQ sent → REP received") {
            t += &format!(
                "  {:<55} {:8.1} us\n",
                "client: connect() → REQ sent, REP → ESTABLISHED taken",
                connect_us - exchange
            );
        }
        t
    }
}

/// The server's CQ holds every QP's completions; cmtime's QPs post nothing, so any size
/// works — keep it small.
fn p_conns_for_cq() -> u32 {
    64
}
