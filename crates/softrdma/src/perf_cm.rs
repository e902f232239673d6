//! `softrdma perf cm`: the connection rate of full RDMA CM cycles between two devices on
//! loopback — create id, resolve address and route, create QP, connect, established,
//! disconnect, destroy, with all N in flight step by step as cmtime issues them — and, in
//! the same run, TCP connect / accept / close with the same number in flight. Also the
//! latency of one connection set up alone, ours (REQ to ESTABLISHED) against TCP's connect.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::Device;

use crate::cmtime;
use crate::cmtool;

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
    let open = |ip, how| {
        if p.loop_thread {
            cmtool::open(ip, None, how, cmtool::THREAD)
        } else {
            cmtool::open_batched(ip, how)
        }
    };
    let srv = open(p.server, "--server")?;
    let cli = open(p.client, "--client")?;
    let dst = SocketAddr::new(p.server, 7471);
    let listener = srv
        .cm
        .with_cm(|cm| cm.listen_on(dst, 0))
        .map_err(|e| format!("listen on {dst}: {e}"))?;
    let srv_view = p.verbose.then(|| (srv.dev.clone(), srv.cm.clone()));
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
    let mut last_table = String::new();
    for run in 1..=p.runs {
        let before = srv_view
            .as_ref()
            .map(|(d, c)| (snapshot((&cli.dev, &cli.cm)), snapshot((d, c))));
        let t0 = Instant::now();
        let (t, r) = cmtime::cycle(&cli, p.connections, dst, p.client, None, 7, false);
        let ours = t0.elapsed();
        r?;
        last_table = t.table(false);
        let tcp = tcp_cycle(p.server, p.client, p.connections)?;
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
        if let (Some((d, c)), Some((bc, bs))) = (srv_view.as_ref(), before) {
            print_moved("client", &bc, &snapshot((&cli.dev, &cli.cm)));
            print_moved("server", &bs, &snapshot((d, c)));
        }
    }
    print!("{last_table}");
    // One connection set up alone: ours REQ → ESTABLISHED (the connect step), TCP connect.
    let mut ours1 = Vec::new();
    let mut tcp1 = Vec::new();
    for _ in 0..20 {
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
    println!(
        "one connection alone: softrdma connect (REQ → ESTABLISHED) median {:.1} us | TCP connect median {:.1} us",
        median(&mut ours1),
        median(&mut tcp1)
    );
    stop.store(true, Ordering::Relaxed);
    server
        .join()
        .map_err(|_| "server thread panicked".to_string())??;
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

/// The server's CQ holds every QP's completions; cmtime's QPs post nothing, so any size
/// works — keep it small.
fn p_conns_for_cq() -> u32 {
    64
}
