//! `softrdma cmtime`: a peer of rdma-core 44's `cmtime` (librdmacm/examples/cmtime.c):
//! the client creates N ids, then runs each step for all of them back to back — resolve
//! address, resolve route, create QP, connect, disconnect, destroy — timing every step per
//! connection and in total, and prints v44's table
//! (`step              total ms     max ms     min us  us / conn`). The server accepts
//! every request (QP created, `rdma_accept(id, NULL)`), answers each DISCONNECTED with its
//! own disconnect and destroys the id, and exits after N disconnects.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use softrdma_core::rdma_cm::{ConnParam, RdmaCmEvent, RdmaCmEventType, RdmaCmId, RdmaId};
use softrdma_driver::cm::Event;

use crate::cmtool::{self, signals, CmDevice, CmText};

#[derive(Debug, Parser)]
pub struct Args {
    /// Client: the server's address (a name or an address); without it, run as the server.
    #[arg(short = 's')]
    pub server: Option<String>,
    /// Bind to this local address (server: listen on it; client: bind every id to it).
    #[arg(short = 'b')]
    pub bind: Option<String>,
    /// Number of connections.
    #[arg(short = 'c', default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub connections: u32,
    /// Port, 1 to 65535.
    #[arg(short = 'p', default_value_t = 7471, value_parser = cmtool::parse_port)]
    pub port: u16,
    /// Retries of address and route resolution (and the connection's RC retry count).
    #[arg(short = 'r', default_value_t = 2, value_parser = clap::value_parser!(u8).range(0..=7))]
    pub retries: u8,
    /// Timeout of address and route resolution, ms.
    #[arg(short = 't', default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub timeout: u32,
    /// Record every datagram to this pcap file (not a cmtime flag).
    #[arg(long)]
    pub pcap: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    CreateId,
    Bind,
    ResolveAddr,
    ResolveRoute,
    CreateQp,
    Connect,
    Disconnect,
    Destroy,
}

const STEPS: [Step; 8] = [
    Step::CreateId,
    Step::Bind,
    Step::ResolveAddr,
    Step::ResolveRoute,
    Step::CreateQp,
    Step::Connect,
    Step::Disconnect,
    Step::Destroy,
];

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::CreateId => "create id",
            Step::Bind => "bind addr",
            Step::ResolveAddr => "resolve addr",
            Step::ResolveRoute => "resolve route",
            Step::CreateQp => "create qp",
            Step::Connect => "connect",
            Step::Disconnect => "disconnect",
            Step::Destroy => "destroy",
        }
    }
}

/// Per-step timings: the whole step and each connection's part of it.
pub struct Timings {
    total: [(Option<Instant>, Option<Instant>); 8],
    per: Vec<[(Option<Instant>, Option<Instant>); 8]>,
    /// Per step, the connections with both times: asked after every event, so counted as
    /// they end rather than by a walk over all N (N² per step).
    finished: [usize; 8],
}

impl Timings {
    fn new(n: usize) -> Self {
        Timings {
            total: [(None, None); 8],
            per: vec![[(None, None); 8]; n],
            finished: [0; 8],
        }
    }
    fn start(&mut self, s: Step) {
        self.total[s as usize].0 = Some(Instant::now());
    }
    fn end(&mut self, s: Step) {
        self.total[s as usize].1 = Some(Instant::now());
    }
    fn start_c(&mut self, c: usize, s: Step) {
        let p = &mut self.per[c][s as usize];
        if p.0.is_none() && p.1.is_some() {
            self.finished[s as usize] += 1;
        }
        p.0 = Some(Instant::now());
    }
    fn end_c(&mut self, c: usize, s: Step) {
        let p = &mut self.per[c][s as usize];
        if p.1.is_none() {
            p.1 = Some(Instant::now());
            if p.0.is_some() {
                self.finished[s as usize] += 1;
            }
        }
    }
    fn done(&self, s: Step) -> usize {
        self.finished[s as usize]
    }

    /// Connection 0's time in the step named `name`, µs.
    pub fn step_us(&self, name: &str) -> Option<f64> {
        let s = STEPS.iter().find(|s| s.name() == name)?;
        match self.per.first()?[*s as usize] {
            (Some(a), Some(b)) => Some(b.saturating_duration_since(a).as_secs_f64() * 1e6),
            _ => None,
        }
    }

    /// v44's show_perf: total ms, max ms, min us, us / conn (the total over N).
    pub fn table(&self, bound: bool) -> String {
        let us = |(a, b): (Option<Instant>, Option<Instant>)| match (a, b) {
            (Some(a), Some(b)) => Some(b.saturating_duration_since(a).as_secs_f64() * 1e6),
            _ => None,
        };
        let n = self.per.len().max(1) as f64;
        let mut out = String::from("step              total ms     max ms     min us  us / conn\n");
        for s in STEPS {
            if s == Step::Bind && !bound {
                continue;
            }
            let i = s as usize;
            let total = us(self.total[i]).unwrap_or(0.0);
            let each: Vec<f64> = self.per.iter().filter_map(|p| us(p[i])).collect();
            let max = each.iter().cloned().fold(0.0, f64::max);
            // No connection finished the step: 0, not a placeholder wider than the column.
            let min = if each.is_empty() {
                0.0
            } else {
                each.iter().cloned().fold(f64::MAX, f64::min)
            };
            out.push_str(&format!(
                "{:<13}: {:11.2}{:11.2}{:11.2}{:11.2}\n",
                s.name(),
                total / 1000.0,
                max / 1000.0,
                min,
                total / n
            ));
        }
        out
    }
}

/// How long the client waits for one step of all connections before giving up.
const STEP_LIMIT: Duration = Duration::from_secs(60);

struct Conn {
    id: Option<RdmaCmId>,
    qpn: Option<u32>,
    error: bool,
    /// Established and not disconnected yet.
    up: bool,
}

/// A wait ended by SIGINT/SIGTERM, carried as a message: `signal N`.
fn signal_error(sig: i32) -> String {
    format!("signal {sig}")
}

fn is_signal(m: &str) -> Option<i32> {
    m.strip_prefix("signal ")?.parse().ok()
}

/// Disconnects (DREQ) every connection still up, as the kernel does for ids of a process
/// that exits, and waits up to a second for the DREPs: a failed or interrupted run leaves
/// no server waiting.
fn hang_up(d: &CmDevice, conns: &mut [Conn]) {
    d.hang_up(conns.iter_mut().filter(|c| c.up).filter_map(|c| {
        c.up = false;
        let c: &Conn = c;
        c.id.as_ref()
    }));
}

/// Handles events until every live connection finished `step` (or failed).
#[allow(clippy::too_many_arguments)]
fn wait_step(
    d: &CmDevice,
    conns: &mut [Conn],
    t: &mut Timings,
    step: Step,
    started: usize,
    retries: u8,
    dst: SocketAddr,
    src: Option<IpAddr>,
    notes: bool,
) -> Result<(), String> {
    use RdmaCmEventType as T;
    let end = Instant::now() + STEP_LIMIT;
    let mut retries = vec![retries; conns.len()];
    // An event's connection by its id, and the failed ones, without a walk over every
    // connection per event (that walk made a step of N connections cost N²).
    let index: std::collections::HashMap<RdmaId, usize> = conns
        .iter()
        .enumerate()
        .filter_map(|(k, c)| Some((c.id.as_ref()?.name(), k)))
        .collect();
    let mut failed = conns.iter().filter(|c| c.error).count();
    loop {
        let finished = t.done(step) + failed;
        if finished >= started {
            return Ok(());
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "cmtime: {}: {} of {started} connections did not finish in {} s",
                step.name(),
                started - t.done(step),
                STEP_LIMIT.as_secs()
            ));
        }
        let e = match cmtool::wait_event(&d.cm, left) {
            Ok(Some(Event::Rdma(e))) => e,
            Ok(Some(Event::Ib(ev))) => {
                // Each unanswered REQ resent, on stderr (stdout is cmtime's own).
                if notes {
                    let now = d.dev.now();
                    if let Some(l) = cmtool::retry_note("cmtime", &dst.to_string(), now, &ev) {
                        eprintln!("{l}");
                    }
                }
                continue;
            }
            Ok(None) => continue,
            Err(sig) => return Err(signal_error(sig)),
        };
        let Some(&c) = index.get(&e.id()) else {
            continue;
        };
        match e.kind() {
            T::Established => conns[c].up = true,
            T::Disconnected => conns[c].up = false,
            _ => {}
        }
        match e.kind() {
            T::AddrResolved => t.end_c(c, Step::ResolveAddr),
            T::RouteResolved => t.end_c(c, Step::ResolveRoute),
            T::Established => t.end_c(c, Step::Connect),
            T::Disconnected => t.end_c(c, Step::Disconnect),
            T::AddrError | T::RouteError => {
                let addr = e.kind() == T::AddrError;
                if retries[c] > 0 {
                    retries[c] -= 1;
                    let id = conns[c].id.as_ref().ok_or("no id")?;
                    let r = if addr {
                        d.cm.resolve_addr(id, src, dst).map_err(|e| e.text())
                    } else {
                        d.cm.with_cm(|cm| cm.resolve_route(id))
                            .map_err(|e| e.text())
                    };
                    if r.is_ok() {
                        continue;
                    }
                }
                println!("{}, error: {}", e.kind().as_str(), e.status());
                t.end_c(c, step);
                failed += usize::from(!conns[c].error);
                conns[c].error = true;
            }
            T::ConnectError | T::Unreachable | T::Rejected => {
                println!("event: {}, error: {}", e.kind().as_str(), e.status());
                t.end_c(c, Step::Connect);
                failed += usize::from(!conns[c].error);
                conns[c].error = true;
            }
            _ => {}
        }
    }
}

fn run_client(args: &Args) -> Result<(), String> {
    let host = args.server.as_deref().unwrap_or_default();
    let dst = softrdma_driver::cm::resolve_host(host, args.port, None)
        .map_err(|e| format!("cmtime: getaddrinfo {host}: {e}"))?;
    let bind = match args.bind.as_deref() {
        Some(b) => {
            Some(cmtool::source_of_family(b, dst, "-s", "-b").map_err(|e| format!("cmtime: {e}"))?)
        }
        None => None,
    };
    let d = cmtool::open_client_b(bind, dst, args.pcap.as_ref(), "cmtime")?;
    let src = d.dev.local_addr().ip();
    let (t, r) = cycle(&d, args.connections, dst, src, bind, args.retries, true);
    if r.as_ref().err().and_then(|m| is_signal(m)).is_none() {
        print!("{}", t.table(bind.is_some()));
    }
    r
}

/// Where a client run goes and how its steps wait ([`wait_step`]'s view of the run).
struct Target<'a> {
    d: &'a CmDevice,
    dst: SocketAddr,
    src: IpAddr,
    retries: u8,
    verbose: bool,
}

/// One asynchronous step as cmtime.c runs each (address, route, connect, disconnect): `op`
/// on the id (and QP) of every connection not in error, its start taken first — `Ok(true)`
/// started, `Ok(false)` not started, `Err(m)`: `m` printed and the connection in error —
/// then the events of those started ([`wait_step`]), then the step's end.
fn async_step(
    to: &Target,
    conns: &mut [Conn],
    t: &mut Timings,
    step: Step,
    mut op: impl FnMut(&RdmaCmId, Option<u32>) -> Result<bool, String>,
) -> Result<(), String> {
    t.start(step);
    let mut started = 0;
    for (c, conn) in conns.iter_mut().enumerate() {
        if conn.error {
            continue;
        }
        t.start_c(c, step);
        let Some(id) = conn.id.as_ref() else { continue };
        match op(id, conn.qpn) {
            Ok(true) => started += 1,
            Ok(false) => {}
            Err(m) => {
                println!("{m}");
                conn.error = true;
            }
        }
    }
    wait_step(
        to.d,
        conns,
        t,
        step,
        started,
        to.retries,
        to.dst,
        Some(to.src),
        to.verbose,
    )?;
    t.end(step);
    Ok(())
}

/// One cmtime client run of `connections` full cycles from `d` to `dst` (`bind`: bind every
/// id to it first; `verbose`: print the step lines). Also what `softrdma perf cm` runs.
pub(crate) fn cycle(
    d: &CmDevice,
    connections: u32,
    dst: SocketAddr,
    src: IpAddr,
    bind: Option<IpAddr>,
    retries: u8,
    verbose: bool,
) -> (Timings, Result<(), String>) {
    let say = |m: &str| {
        if verbose {
            println!("{m}");
        }
    };
    let n = connections as usize;
    let mut t = Timings::new(n);
    let cq = match d.shared_cq(connections, 1) {
        Ok(c) => c,
        Err(e) => return (t, Err(e)),
    };
    say("creating id");
    t.start(Step::CreateId);
    let mut conns: Vec<Conn> = (0..n)
        .map(|c| {
            t.start_c(c, Step::CreateId);
            let id = d.cm.with_cm(|cm| cm.create_id());
            t.end_c(c, Step::CreateId);
            Conn {
                id: Some(id),
                qpn: None,
                error: false,
                up: false,
            }
        })
        .collect();
    t.end(Step::CreateId);
    let r = (|| {
        if let Some(b) = bind {
            say("binding source address");
            t.start(Step::Bind);
            for (c, conn) in conns.iter_mut().enumerate() {
                t.start_c(c, Step::Bind);
                let id = conn.id.as_ref().ok_or("no id")?;
                match d.cm.with_cm(|cm| cm.bind_addr(id, SocketAddr::new(b, 0))) {
                    Ok(_) => t.end_c(c, Step::Bind),
                    Err(e) => {
                        println!("failure bind addr: {}", e.text());
                        conn.error = true;
                    }
                }
            }
            t.end(Step::Bind);
        }
        let to = Target {
            d,
            dst,
            src,
            retries,
            verbose,
        };
        say("resolving address");
        async_step(&to, &mut conns, &mut t, Step::ResolveAddr, |id, _| {
            d.cm.resolve_addr(id, Some(src), dst)
                .map(|()| true)
                .map_err(|e| format!("failure getting addr: {}", e.text()))
        })?;

        say("resolving route");
        async_step(&to, &mut conns, &mut t, Step::ResolveRoute, |id, _| {
            d.cm.with_cm(|cm| cm.resolve_route(id))
                .map(|()| true)
                .map_err(|e| format!("failure resolving route: {}", e.text()))
        })?;

        say("creating qp");
        t.start(Step::CreateQp);
        for (c, conn) in conns.iter_mut().enumerate() {
            if conn.error {
                continue;
            }
            t.start_c(c, Step::CreateQp);
            match d.rc_qp_on(cq, 1, 1) {
                Ok((_, qpn)) => {
                    conn.qpn = Some(qpn);
                    t.end_c(c, Step::CreateQp);
                }
                Err(e) => {
                    println!("failure creating qp: {e}");
                    conn.error = true;
                }
            }
        }
        t.end(Step::CreateQp);

        say("connecting");
        // cmtime: resources 1/1, the RC retry count is -r, RNR retry 0.
        let p = ConnParam {
            retry_count: retries,
            rnr_retry_count: 0,
            ..ConnParam::default()
        };
        if verbose {
            eprintln!(
                "cmtime: connecting to {dst} (each unanswered REQ retry shows here; a dead \
                 address gives up after {} s)",
                STEP_LIMIT.as_secs()
            );
        }
        async_step(&to, &mut conns, &mut t, Step::Connect, |id, qpn| {
            match d
                .cm
                .with_id(id.name(), |cm, s, now| cm.connect(now, s, id, qpn, &p))
            {
                Ok(Ok(())) => Ok(true),
                Ok(Err(e)) => Err(format!("failure rconnecting: {}", e.text())),
                Err(e) => Err(format!("failure rconnecting: {}", e.text())),
            }
        })?;

        say("disconnecting");
        // A disconnect that cannot start (the peer's DREQ came first) is not an error.
        async_step(&to, &mut conns, &mut t, Step::Disconnect, |id, _| {
            Ok(matches!(
                d.cm.with_id(id.name(), |cm, s, now| cm.disconnect(now, s, id)),
                Ok(Ok(()))
            ))
        })?;
        Ok(())
    })();
    // A failure or a signal part way: disconnect what is up before the ids go.
    hang_up(d, &mut conns);
    if r.as_ref()
        .err()
        .and_then(|m: &String| is_signal(m))
        .is_some()
    {
        for conn in conns.iter_mut() {
            if let Some(id) = conn.id.take() {
                d.cm.with_cm(|cm| cm.destroy(d.dev.now(), id));
            }
        }
        return (t, r);
    }
    say("destroying id");
    t.start(Step::Destroy);
    for (c, conn) in conns.iter_mut().enumerate() {
        t.start_c(c, Step::Destroy);
        if let Some(id) = conn.id.take() {
            d.cm.with_cm(|cm| cm.destroy(d.dev.now(), id));
        }
        // rdma_destroy_qp (v44 does it at disconnect): a QP left behind would stay in the
        // device for the process's life.
        if let Some(qpn) = conn.qpn.take() {
            let _ = d.dev.destroy_qp(qpn);
        }
        t.end_c(c, Step::Destroy);
    }
    t.end(Step::Destroy);
    (t, r)
}

fn run_server(args: &Args) -> Result<(), String> {
    let Some(b) = args.bind.as_deref() else {
        return Err("cmtime: give -b ADDR: a softrdma device opens on one local address".into());
    };
    let bind = softrdma_driver::cm::resolve_host(b, args.port, None)
        .map_err(|e| format!("cmtime: getaddrinfo {b}: {e}"))?;
    let d = cmtool::open(
        bind.ip(),
        args.pcap.as_ref(),
        "listen on another local address with -b ADDR",
        cmtool::THREAD,
    )
    .map_err(|e| format!("cmtime: {e}"))?;
    let cq = d.shared_cq(args.connections, 1)?;
    let listener =
        d.cm.with_cm(|cm| cm.listen_on(bind, 0))
            .map_err(|e| format!("cmtime: listen on {bind}: {}", e.text()))?;
    let mut live = Live::new();
    let mut disc = 0u32;
    // v44's server handles events until it is stopped (the lab sends SIGTERM).
    let r = (|| loop {
        let e = match cmtool::wait_event(&d.cm, Duration::from_secs(3600)) {
            Ok(Some(Event::Rdma(e))) => e,
            Ok(_) => continue,
            Err(sig) => return Err(signal_error(sig)),
        };
        on_server_event(&d, cq, e, &mut live, &mut disc)?;
    })();
    // Stopped: the connections still up are disconnected before their ids go.
    let mut conns: Vec<Conn> = live
        .into_values()
        .map(|id| Conn {
            id: Some(id),
            qpn: None,
            error: false,
            up: true,
        })
        .collect();
    hang_up(&d, &mut conns);
    for c in conns {
        if let Some(id) = c.id {
            d.cm.with_cm(|cm| cm.destroy(d.dev.now(), id));
        }
    }
    d.cm.with_cm(|cm| cm.destroy(d.dev.now(), listener));
    r
}

/// The server's accepted connections, by id (a DISCONNECTED finds its id without a walk).
pub(crate) type Live = std::collections::HashMap<RdmaId, RdmaCmId>;

pub(crate) fn on_server_event(
    d: &CmDevice,
    cq: softrdma_core::verbs::CqId,
    e: RdmaCmEvent,
    live: &mut Live,
    disc: &mut u32,
) -> Result<(), String> {
    use RdmaCmEventType as T;
    match e.kind() {
        T::ConnectRequest => {
            let RdmaCmEvent::ConnectRequest {
                new_id: id, param, ..
            } = e
            else {
                return Ok(());
            };
            // rdma_accept(id, NULL): the request's resources, retry counts 7.
            let p = ConnParam {
                responder_resources: param.responder_resources,
                initiator_depth: param.initiator_depth,
                ..ConnParam::default()
            };
            let r = d.rc_qp_on(cq, 1, 1).and_then(|(_, qpn)| {
                d.cm.with_id(id.name(), |cm, s, now| cm.accept(now, s, &id, qpn, &p))
                    .map_err(|e| e.text())?
                    .map_err(|e| e.text())
            });
            match r {
                Ok(()) => {
                    live.insert(id.name(), id);
                }
                Err(err) => {
                    println!("failing connection request: {err}");
                    d.cm.with_cm(|cm| cm.destroy(d.dev.now(), id));
                }
            }
        }
        T::Disconnected => {
            *disc += 1;
            if let Some(id) = live.remove(&e.id()) {
                let _ =
                    d.cm.with_id(id.name(), |cm, s, now| cm.disconnect(now, s, &id));
                let qpn = d.cm.with_cm(|cm| cm.qpn(id.name()));
                d.cm.with_cm(|cm| cm.destroy(d.dev.now(), id));
                // The disconnect work of v44's server: rdma_destroy_qp, rdma_destroy_id.
                if let Some(qpn) = qpn {
                    let _ = d.dev.destroy_qp(qpn);
                }
            }
        }
        _ => {}
    }
    Ok(())
}

pub fn run(args: &Args) -> ExitCode {
    signals::catch();
    let r = if args.server.is_some() {
        run_client(args)
    } else {
        run_server(args)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(m) if is_signal(&m).is_some() => signals::die(is_signal(&m).unwrap_or(15)),
        Err(m) => {
            eprintln!("{m}");
            ExitCode::FAILURE
        }
    }
}
