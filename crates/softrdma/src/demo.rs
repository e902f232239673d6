//! `softrdma demo`: an SRP target (what `softrdma srpt` runs) with a memory LUN and an SRP
//! initiator (what `softrdma srp` runs) in one process, over RoCEv2 on loopback (127.0.0.1
//! ↔ 127.0.0.2, two UDP sockets on port 4791): login over the RDMA CM, a short verified
//! workload with a progress line, logout, and a summary — the CM exchange as it happened,
//! the login parameters, IOPS, bandwidth and latency. No privileges needed.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use softrdma_core::cm::{CmCounterGroup, CmCounters};
use softrdma_srp::{AclEntry, InitiatorEvent};
use softrdma_wire::cm::AttrId;

use crate::cmtool::signals;
use crate::srp::{channel_line, human, parse_size, scan, Session, SessionOpts};
use crate::srp_bench::{self, fio_bw, fio_num, Plan, Rw};
use crate::srpt::{Background, Setup};

#[derive(Debug, Parser)]
pub struct Args {
    /// The memory LUN's size (k/m/g suffixes).
    #[arg(long, default_value = "64m", value_parser = parse_size)]
    pub size: u64,
    /// Seconds of workload.
    #[arg(long, default_value_t = 3.0)]
    pub runtime: f64,
    /// The workload (fio's --rw).
    #[arg(long, value_enum, default_value = "randrw")]
    pub rw: Rw,
    /// Block size.
    #[arg(long, default_value = "4k", value_parser = parse_size)]
    pub bs: u64,
    /// Commands in flight.
    #[arg(long, default_value_t = 16)]
    pub iodepth: u32,
    /// RDMA channels (ib_srp's ch_count).
    #[arg(long, default_value_t = 2)]
    pub ch_count: u32,
    /// The target's address.
    #[arg(long, default_value = "127.0.0.1")]
    pub target: IpAddr,
    /// The initiator's address.
    #[arg(long, default_value = "127.0.0.2")]
    pub initiator: IpAddr,
    /// Record the initiator's traffic to this pcap file (every data packet too).
    #[arg(long)]
    pub pcap: Option<PathBuf>,
}

const ATTRS: [(AttrId, &str); 7] = [
    (AttrId::REQ, "REQ"),
    (AttrId::MRA, "MRA"),
    (AttrId::REJ, "REJ"),
    (AttrId::REP, "REP"),
    (AttrId::RTU, "RTU"),
    (AttrId::DREQ, "DREQ"),
    (AttrId::DREP, "DREP"),
];

/// "REQ 2, RTU 2" for the messages a CM sent (`tx`) or received.
fn counts(c: &CmCounters, tx: bool) -> String {
    let v: Vec<String> = ATTRS
        .iter()
        .filter_map(|(a, n)| {
            let k = if tx {
                c.group(CmCounterGroup::TxMsgs, *a) - c.group(CmCounterGroup::TxRetries, *a)
            } else {
                c.group(CmCounterGroup::RxMsgs, *a)
            };
            (k > 0).then(|| format!("{n} {k}"))
        })
        .collect();
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join(", ")
    }
}

fn retries(c: &CmCounters) -> u64 {
    ATTRS
        .iter()
        .filter(|(a, _)| *a != AttrId::DREP)
        .map(|(a, _)| c.group(CmCounterGroup::TxRetries, *a))
        .sum()
}

pub fn run(args: &Args) -> ExitCode {
    signals::catch();
    match demo(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            if let Some(sig) = e.strip_prefix("signal ").and_then(|s| s.parse().ok()) {
                signals::die(sig);
            }
            eprintln!("softrdma demo: {e}");
            ExitCode::from(1)
        }
    }
}

fn demo(a: &Args) -> Result<bool, String> {
    let t0 = Instant::now();
    println!(
        "softrdma demo: an SRP target and an SRP initiator in this process, over RoCEv2 (UDP 4791) on loopback\n"
    );
    // `softrdma srpt` is closed by default (as LIO): the demo's initiator gets an ACL entry,
    // its source address, like `softrdma srpt --allow ADDR`.
    let setup = Setup {
        addr_flag: "--target",
        acl: Some(vec![AclEntry::Addr(a.initiator)]),
        ..Setup::memory(SocketAddr::new(a.target, 5555), a.size)
    };
    let target = Background::spawn(setup).map_err(|e| format!("target: {e}"))?;
    println!(
        "target     softrdma srpt on {}:5555, LUN 0 = {} of memory",
        a.target,
        human(a.size as f64)
    );
    println!("           add_target: {}", target.line);
    println!(
        "           ACL: {} (the initiator's address, as `--allow {}`; without one srpt refuses every login)",
        a.initiator, a.initiator
    );
    let line = format!(
        "{},src={},ch_count={}",
        target.line, a.initiator, a.ch_count
    );
    println!("initiator  softrdma srp on {}: {line}", a.initiator);
    let plan = Plan {
        lun: 0,
        rw: a.rw,
        bs: a.bs,
        iodepth: a.iodepth,
        runtime: Some(Duration::from_secs_f64(a.runtime.clamp(0.1, 60.0))),
        size: None,
        offset: 0,
        rwmixread: 50,
        verify: true,
    };
    let o = SessionOpts {
        pcap: a.pcap.clone(),
        verbose: false,
        cmd_timeout: Some(Duration::from_secs(30)),
        buffer: plan.buffer_len(),
        tool: "softrdma demo",
        keep_events: true,
        ..SessionOpts::default()
    };
    let start = Instant::now();
    let mut s = Session::open(line.parse().map_err(|e| format!("{e}"))?, &o)?;
    println!(
        "\nlogged in over the RDMA CM in {:.1} ms, {} channels:",
        s.login_time.as_secs_f64() * 1e3,
        s.ini.channels().len()
    );
    for c in s.ini.channels() {
        println!("  {}", channel_line(&c));
    }
    for l in scan(&mut s)? {
        println!("  {l}");
    }
    println!(
        "\nworkload   {}, {} blocks, queue depth {}, {:.0} s, verified (every write carries its offset and generation, every read is checked)",
        a.rw.name(),
        human(a.bs as f64),
        a.iodepth,
        plan.runtime.map_or(0.0, |d| d.as_secs_f64())
    );
    let r = srp_bench::run(&mut s, &plan, true);
    let logout_at = Instant::now();
    let l = s.logout();
    let ini_counters = s.cm.counters();
    let tgt_counters = target.stop();
    let r = r?;
    l?;

    println!("\nCM exchange (the initiator's side, as it happened):");
    let ms = |t: Instant| t.saturating_duration_since(start).as_secs_f64() * 1e3;
    // In time order: both channels' DREQs leave together at logout, before either DREP.
    let mut lines: Vec<(Instant, String)> = Vec::new();
    for (t, e) in &s.events {
        match e {
            InitiatorEvent::LoginSent { channel, multi } => {
                let c = s.ini.channels();
                let req = c.get(*channel).map(|c| c.login_req);
                lines.push((*t, format!(
                    "  {:>9.3} ms  channel {channel}  REQ  ->  SRP_LOGIN_REQ: {}, it_iu_len {}, direct and indirect buffers, immediate data at offset {}",
                    ms(*t),
                    if *multi { "MULTI" } else { "SINGLE" },
                    req.map_or(0, |r| r.req_it_iu_len),
                    req.map_or(0, |r| r.imm_data_offset)
                )));
            }
            InitiatorEvent::LoggedIn {
                channel,
                rsp,
                immediate,
            } => {
                lines.push((*t, format!(
                    "  {:>9.3} ms  channel {channel}  REP  <-  SRP_LOGIN_RSP: {} credits, max_it_iu_len {}, max_ti_iu_len {}, {}{}",
                    ms(*t),
                    rsp.req_lim_delta,
                    rsp.max_it_iu_len,
                    rsp.max_ti_iu_len,
                    rsp.multichannel_result(),
                    if *immediate { ", immediate data" } else { "" }
                )));
                lines.push((
                    *t,
                    format!("  {:>9.3} ms  channel {channel}  RTU  ->", ms(*t)),
                ));
            }
            InitiatorEvent::LoggedOut { channel, answered } => {
                lines.push((
                    logout_at,
                    format!(
                        "  {:>9.3} ms  channel {channel}  DREQ ->  (logout)",
                        ms(logout_at)
                    ),
                ));
                if *answered {
                    lines.push((
                        *t,
                        format!("  {:>9.3} ms  channel {channel}  DREP <-", ms(*t)),
                    ));
                }
            }
            InitiatorEvent::LoginFailed { channel, error } => lines.push((
                *t,
                format!(
                    "  {:>9.3} ms  channel {channel}  login failed: {error}",
                    ms(*t)
                ),
            )),
            _ => {}
        }
    }
    lines.sort_by_key(|(t, _)| *t);
    for (_, l) in &lines {
        println!("{l}");
    }
    println!(
        "  IB CM counters: initiator sent {}; received {}",
        counts(&ini_counters, true),
        counts(&ini_counters, false)
    );
    println!(
        "                  target sent {}; received {}; retransmissions {}",
        counts(&tgt_counters, true),
        counts(&tgt_counters, false),
        retries(&ini_counters) + retries(&tgt_counters)
    );

    println!("\nresults ({:.2} s)", r.runtime.as_secs_f64());
    for (name, d) in [("read ", &r.read), ("write", &r.write)] {
        if d.ios == 0 {
            continue;
        }
        println!(
            "  {name}: IOPS={}, BW={}, latency p50={:.0} us, p99={:.0} us, p99.9={:.0} us ({} commands)",
            fio_num(d.iops(r.runtime)),
            fio_bw(d.bw(r.runtime)),
            d.percentile(50.0) as f64 / 1e3,
            d.percentile(99.0) as f64 / 1e3,
            d.percentile(99.9) as f64 / 1e3,
            d.ios
        );
    }
    println!(
        "  verify: {}{}",
        r.verify_text(),
        r.first_mismatch
            .as_ref()
            .map(|m| format!(" (first: {m})"))
            .unwrap_or_default()
    );
    if let Some(p) = &a.pcap {
        println!("  capture: {}", p.display());
    }
    let ok = r.verify_errors == 0 && r.read.ios + r.write.ios > 0;
    println!(
        "\nsoftrdma demo: {} in {:.1} s",
        if ok { "OK" } else { "FAILED" },
        t0.elapsed().as_secs_f64()
    );
    Ok(ok)
}
