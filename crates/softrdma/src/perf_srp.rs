//! `softrdma perf srp`: block I/O over our SRP (the initiator of `softrdma srp` → the target of
//! `softrdma srpt`, memory LUN, both in this process on loopback: 127.0.0.2 → 127.0.0.1 over
//! RoCEv2) against `fio --ioengine=nbd` → `nbdkit memory` over TCP on loopback, in the same
//! run: 4 KiB random read and write at queue depth 32, 1 MiB sequential read and write, each
//! test's runs interleaved (ours, theirs, ours, theirs…), then the medians and the ratios.
//!
//! With fio, a third row per run: `fio --ioengine=nbd` → `softrdma srp nbd` (a child
//! process, initiator on `--nbd-initiator`) → the same target over RoCEv2: what an NBD client
//! of an SRP LUN gets, against the same fio → nbdkit.
//!
//! Both sides measure latency from submission to completion (fio's `lat`, asked for with
//! `--lat_percentiles=1`). fio and nbdkit are Debian's packages (`apt-get install -y fio
//! nbdkit`); without them, only ours runs.

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::cmtool::signals;
use crate::srp::{human, parse_size, Session, SessionOpts};
use crate::srp_bench::{self, fio_num, Plan, Rw};
use crate::srpt::{Background, Setup};

/// `softrdma perf srp`'s options (a subcommand of `softrdma perf`).
#[derive(Debug, clap::Args)]
pub struct Plan2 {
    /// Runs of each test, each side.
    #[arg(short = 'r', long, default_value_t = 3)]
    pub runs: u32,
    /// Seconds per run.
    #[arg(long, default_value_t = 3.0)]
    pub runtime: f64,
    /// LUN (and nbdkit memory) size.
    #[arg(long, default_value = "256m", value_parser = parse_size)]
    pub size: u64,
    /// Queue depth of the 4 KiB tests.
    #[arg(long, default_value_t = 32)]
    pub iodepth: u32,
    /// Queue depth of the 1 MiB tests.
    #[arg(long, default_value_t = 8)]
    pub seq_iodepth: u32,
    /// RDMA channels of ours.
    #[arg(long, default_value_t = 1)]
    pub ch_count: u32,
    /// Only these tests (randread, randwrite, read, write).
    #[arg(long)]
    pub only: Vec<String>,
    /// After each run of ours, print what the initiator's CM, MAD layer, stack and driver
    /// counted in it (the counters that moved): a slow run's retransmissions, duplicates
    /// and NAKs (the target's show as the initiator's duplicates and out-of-sequence
    /// requests).
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// The target's address (ours).
    #[arg(long, default_value = "127.0.0.1")]
    pub target: IpAddr,
    /// The initiator's address (ours).
    #[arg(long, default_value = "127.0.0.2")]
    pub initiator: IpAddr,
    /// The address of `softrdma srp nbd`'s initiator (the fio → srp nbd row).
    #[arg(long, default_value = "127.0.0.3")]
    pub nbd_initiator: IpAddr,
}

#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    iops: f64,
    bw: f64,
    p50_us: f64,
    p99_us: f64,
    /// CPU microseconds per I/O, every process of the side counted (ours: the one process
    /// holding initiator and target; theirs: fio and nbdkit).
    cpu_us: f64,
}

impl Figures {
    /// Each figure's median over `runs`.
    fn median_of(runs: &[Figures]) -> Figures {
        let m = |f: fn(&Figures) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>());
        Figures {
            iops: m(|r| r.iops),
            bw: m(|r| r.bw),
            p50_us: m(|r| r.p50_us),
            p99_us: m(|r| r.p99_us),
            cpu_us: m(|r| r.cpu_us),
        }
    }
}

struct Test {
    name: String,
    rw: Rw,
    bs: u64,
    iodepth: u32,
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// nbdkit's memory plugin on a free loopback TCP port; killed on drop.
struct Nbdkit {
    child: Child,
    port: u16,
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nbdkit(size: u64) -> Result<Nbdkit, String> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("a free TCP port: {e}"))?
        .port();
    let child = Command::new("nbdkit")
        .args([
            "--foreground",
            "--exit-with-parent",
            "--ipaddr=127.0.0.1",
            &format!("--port={port}"),
            "memory",
            &size.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("nbdkit: {e}"))?;
    let n = Nbdkit { child, port };
    let end = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).is_err() {
        if Instant::now() > end {
            return Err("nbdkit did not listen within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(n)
}

/// The CPU time `pid` has used so far (user + system, all its threads), from
/// `/proc/PID/stat`.
fn pid_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: the fields start after its closing parenthesis.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of proc(5) (utime, stime) are 12 and 13 after the name and state.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let hz = rustix::param::clock_ticks_per_second().max(1);
    Some(Duration::from_secs_f64(ticks as f64 / hz as f64))
}

/// `softrdma srp nbd` (this binary) logged in to `line`; killed on drop.
struct SrpNbd {
    child: Child,
    uri: String,
}

impl Drop for SrpNbd {
    fn drop(&mut self) {
        // SIGTERM: it logs out (DREQ) before it exits, as an operator's ^C would.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn srp_nbd(line: &str) -> Result<SrpNbd, String> {
    use std::io::BufRead;
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let mut child = Command::new(exe)
        .args([
            "srp",
            "nbd",
            line,
            "--listen",
            "127.0.0.1:0",
            "--login-timeout",
            "10",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("softrdma srp nbd: {e}"))?;
    let out = child.stdout.take().ok_or("softrdma srp nbd: no stdout")?;
    // Its stderr says why when it fails (a refused login, an address another process
    // holds); drained all along so that it never blocks on a full pipe.
    let err = child.stderr.take().ok_or("softrdma srp nbd: no stderr")?;
    let said = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(err), &mut s);
        s
    });
    let mut n = SrpNbd {
        child,
        uri: String::new(),
    };
    let mut lines = std::io::BufReader::new(out).lines();
    for l in lines.by_ref() {
        let l = l.map_err(|e| format!("softrdma srp nbd: {e}"))?;
        if let Some(i) = l.find("exported as ") {
            n.uri = l[i + "exported as ".len()..].trim().to_string();
            break;
        }
    }
    if n.uri.is_empty() {
        let _ = n.child.wait();
        let said = said.join().unwrap_or_default();
        return Err(format!(
            "softrdma srp nbd exited before exporting the LUN: {}",
            said.trim()
        ));
    }
    // It prints nothing more, but a closed pipe must not kill it if it does.
    std::thread::spawn(move || lines.for_each(drop));
    Ok(n)
}

/// fio through nbdkit (`server` its process) or through `softrdma srp nbd` (then the
/// target's CPU, in this process, counts too).
fn fio(
    t: &Test,
    uri: &str,
    server: u32,
    with_self: bool,
    size: u64,
    runtime: f64,
) -> Result<Figures, String> {
    let me = std::process::id();
    let cpu = || -> Option<Duration> {
        let s = pid_cpu(server)?;
        Some(if with_self { s + pid_cpu(me)? } else { s })
    };
    let server_cpu0 = cpu();
    let out = Command::new("fio")
        .args([
            "--name=nbd",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            &format!("--rw={}", t.rw.name()),
            &format!("--bs={}", t.bs),
            &format!("--iodepth={}", t.iodepth),
            "--time_based",
            &format!("--runtime={}ms", (runtime * 1000.0) as u64),
            &format!("--size={size}"),
            "--lat_percentiles=1",
            "--output-format=json",
        ])
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("fio: {e}"))?;
    let mut child = out;
    let mut s = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut s);
    }
    let st = child.wait().map_err(|e| format!("fio: {e}"))?;
    if !st.success() {
        let mut e = String::new();
        if let Some(mut x) = child.stderr.take() {
            let _ = x.read_to_string(&mut e);
        }
        return Err(format!("fio failed ({st}): {}", e.trim()));
    }
    let server_cpu = match (server_cpu0, cpu()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => return Err("the server's CPU time: /proc/PID/stat unreadable".into()),
    };
    let j: serde_json::Value =
        serde_json::from_str(s.get(s.find('{').unwrap_or(0)..).unwrap_or(""))
            .map_err(|e| format!("fio's JSON: {e}"))?;
    let job = &j["jobs"][0];
    let d = if t.rw.name().contains("write") {
        &job["write"]
    } else {
        &job["read"]
    };
    let p = |k: &str| d["lat_ns"]["percentile"][k].as_f64().unwrap_or(0.0) / 1e3;
    // fio's usr_cpu / sys_cpu are percentages of the job's runtime.
    let num = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let fio_cpu_s =
        (num(&job["usr_cpu"]) + num(&job["sys_cpu"])) / 100.0 * num(&job["job_runtime"]) / 1e3;
    let ios = num(&d["total_ios"]).max(1.0);
    Ok(Figures {
        iops: num(&d["iops"]),
        bw: num(&d["bw_bytes"]),
        p50_us: p("50.000000"),
        p99_us: p("99.000000"),
        cpu_us: (fio_cpu_s + server_cpu.as_secs_f64()) * 1e6 / ios,
    })
}

fn ours(s: &mut Session, t: &Test, runtime: f64) -> Result<Figures, String> {
    let plan = Plan {
        lun: 0,
        rw: t.rw,
        bs: t.bs,
        iodepth: t.iodepth,
        runtime: Some(Duration::from_secs_f64(runtime)),
        size: None,
        offset: 0,
        rwmixread: 50,
        verify: false,
    };
    let r = srp_bench::run(s, &plan, false)?;
    let d = if t.rw.name().contains("write") {
        &r.write
    } else {
        &r.read
    };
    Ok(Figures {
        iops: d.iops(r.runtime),
        bw: d.bw(r.runtime),
        p50_us: d.percentile(50.0) as f64 / 1e3,
        p99_us: d.percentile(99.0) as f64 / 1e3,
        cpu_us: r.cpu_us_per_io(),
    })
}

fn row(name: &str, run: &str, a: &Figures, b: Option<&Figures>) {
    let theirs = match b {
        Some(b) => format!(
            "{:>9} {:>10} {:>8.0} {:>8.0} {:>6.1} | {:>5.2} {:>5.2}",
            fio_num(b.iops),
            format!("{}/s", human(b.bw)),
            b.p50_us,
            b.p99_us,
            b.cpu_us,
            a.iops / b.iops.max(1e-9),
            a.cpu_us / b.cpu_us.max(1e-9)
        ),
        None => "        -          -        -        -      - |     -     -".into(),
    };
    println!(
        "{name:<22} {run:>6}  {:>9} {:>10} {:>8.0} {:>8.0} {:>6.1} | {theirs}",
        fio_num(a.iops),
        format!("{}/s", human(a.bw)),
        a.p50_us,
        a.p99_us,
        a.cpu_us,
    );
}

pub fn run(p: &Plan2) -> ExitCode {
    signals::catch();
    match perf(p) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(sig) = e.strip_prefix("signal ").and_then(|s| s.parse().ok()) {
                signals::die(sig);
            }
            eprintln!("softrdma perf srp: {e}");
            ExitCode::from(1)
        }
    }
}

fn perf(p: &Plan2) -> Result<(), String> {
    let runtime = p.runtime.clamp(0.2, 600.0);
    let all = [
        ("randread", Rw::Randread, 4096u64, p.iodepth),
        ("randwrite", Rw::Randwrite, 4096, p.iodepth),
        ("read", Rw::Read, 1 << 20, p.seq_iodepth),
        ("write", Rw::Write, 1 << 20, p.seq_iodepth),
    ];
    let tests: Vec<Test> = all
        .iter()
        .filter(|(n, ..)| p.only.is_empty() || p.only.iter().any(|o| o == n))
        .map(|&(_, rw, bs, qd)| Test {
            name: format!(
                "{} {} qd{qd}",
                if bs >= 1 << 20 { "1M" } else { "4k" },
                rw.name()
            ),
            rw,
            bs,
            iodepth: qd,
        })
        .collect();
    if tests.is_empty() {
        return Err("--only: randread, randwrite, read or write".into());
    }
    let fio_ok = have("fio") && have("nbdkit");
    println!(
        "softrdma perf srp: ours = softrdma srp -> softrdma srpt ({} memory LUN) over RoCEv2, one process, {} -> {}, {} channel(s);",
        human(p.size as f64),
        p.initiator,
        p.target,
        p.ch_count
    );
    if fio_ok {
        println!(
            "  theirs = fio --ioengine=nbd -> nbdkit memory {} over TCP on 127.0.0.1; {} run(s) of {runtime} s per test and side, interleaved",
            human(p.size as f64),
            p.runs
        );
    } else {
        println!(
            "  fio and nbdkit not found: ours only (install them with: apt-get install -y fio nbdkit)"
        );
    }
    let target = Background::spawn(Setup::memory(SocketAddr::new(p.target, 5555), p.size))
        .map_err(|e| format!("target: {e}"))?;
    let line = format!(
        "{},src={},ch_count={}",
        target.line, p.initiator, p.ch_count
    );
    let buffer = tests
        .iter()
        .map(|t| (t.bs * u64::from(t.iodepth)) as usize)
        .max()
        .unwrap_or(1 << 20);
    let o = SessionOpts {
        pcap: None,
        verbose: false,
        cmd_timeout: Some(Duration::from_secs(30)),
        buffer,
        tool: "softrdma perf srp",
        keep_events: false,
        ..SessionOpts::default()
    };
    let mut s = Session::open(line.parse().map_err(|e| format!("{e}"))?, &o)?;
    let server = if fio_ok { Some(nbdkit(p.size)?) } else { None };
    let via_nbd = if fio_ok {
        Some(srp_nbd(&format!(
            "{},src={},ch_count={}",
            target.line, p.nbd_initiator, p.ch_count
        ))?)
    } else {
        None
    };
    if via_nbd.is_some() {
        println!(
            "  and, in rows marked \"via nbd\": fio --ioengine=nbd -> softrdma srp nbd (initiator {}) -> the same target",
            p.nbd_initiator
        );
    }
    println!(
        "\ncpu/io: CPU microseconds per I/O, every thread of the side (ours: initiator and target; \
         theirs: fio and nbdkit); last columns: ours / theirs (IOPS: higher is better, CPU: lower)"
    );
    println!(
        "{:<22} {:>6}  {:>9} {:>10} {:>8} {:>8} {:>6} | {:>9} {:>10} {:>8} {:>8} {:>6} | {:>5} {:>5}",
        "test",
        "run",
        "ours IOPS",
        "ours BW",
        "p50 us",
        "p99 us",
        "cpu/io",
        "nbd IOPS",
        "nbd BW",
        "p50 us",
        "p99 us",
        "cpu/io",
        "IOPS",
        "CPU"
    );

    let mut summary = Vec::new();
    for t in &tests {
        let (mut ours_runs, mut theirs_runs, mut nbd_runs) = (Vec::new(), Vec::new(), Vec::new());
        let nbd_name = format!("{} via nbd", t.name);
        for run in 1..=p.runs.max(1) {
            let before = p.verbose.then(|| crate::perf_cm::snapshot((&s.dev, &s.cm)));
            let a = ours(&mut s, t, runtime)?;
            let counted = before.map(|b| (b, crate::perf_cm::snapshot((&s.dev, &s.cm))));
            let b = match &server {
                Some(n) => Some(fio(
                    t,
                    &format!("nbd://127.0.0.1:{}/", n.port),
                    n.child.id(),
                    false,
                    p.size,
                    runtime,
                )?),
                None => None,
            };
            row(&t.name, &run.to_string(), &a, b.as_ref());
            if let Some(n) = &via_nbd {
                let c = fio(t, &n.uri, n.child.id(), true, p.size, runtime)?;
                row(&nbd_name, &run.to_string(), &c, b.as_ref());
                nbd_runs.push(c);
            }
            if let Some((before, after)) = &counted {
                crate::perf_cm::print_moved("initiator", before, after);
            }
            ours_runs.push(a);
            theirs_runs.extend(b);
        }
        let a = Figures::median_of(&ours_runs);
        let b = (!theirs_runs.is_empty()).then(|| Figures::median_of(&theirs_runs));
        row(&t.name, "median", &a, b.as_ref());
        summary.push((t.name.clone(), a, b));
        if !nbd_runs.is_empty() {
            let c = Figures::median_of(&nbd_runs);
            row(&nbd_name, "median", &c, b.as_ref());
            summary.push((nbd_name, c, b));
        }
    }
    let _ = s.logout();
    drop(via_nbd);
    drop(server);
    drop(target);
    println!("\nsummary (medians; ratio = ours / fio+nbdkit):");
    for (name, a, b) in summary {
        match b {
            Some(b) => println!(
                "  {name:<20} ours {} IOPS {}/s p99 {:.0} us {:.1} CPU us/IO; fio+nbdkit {} IOPS {}/s p99 {:.0} us {:.1} CPU us/IO; IOPS ratio {:.2} (higher is better), p99 ratio {:.2}, CPU per I/O ratio {:.2} (lower is better)",
                fio_num(a.iops),
                human(a.bw),
                a.p99_us,
                a.cpu_us,
                fio_num(b.iops),
                human(b.bw),
                b.p99_us,
                b.cpu_us,
                a.iops / b.iops.max(1e-9),
                a.p99_us / b.p99_us.max(1e-9),
                a.cpu_us / b.cpu_us.max(1e-9)
            ),
            None => println!(
                "  {name:<20} ours {} IOPS {}/s p50 {:.0} us p99 {:.0} us {:.1} CPU us/IO",
                fio_num(a.iops),
                human(a.bw),
                a.p50_us,
                a.p99_us,
                a.cpu_us
            ),
        }
    }
    Ok(())
}
