//! `softrdma srp` against `softrdma srpt` on loopback: the add_target line srpt prints works
//! unchanged (source rule: a free 127.0.0.x... here the target's 127.0.84.x neighbour),
//! login prints the LUN, write then read returns the bytes, bench --verify --json, discover
//! prints both forms, and refusals are typed one-liners.

mod common;

use std::io::Write;
use std::process::{Child, Command, Stdio};

struct Target {
    child: Child,
    line: String,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn target(addr: &str, extra: &[&str]) -> Target {
    let mut child = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args(["srpt", "-a", addr, "--lun", "mem:8M", "--demo"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn srpt");
    let out = child.stdout.take().expect("stdout");
    // Stopped when dropped, should the wait for its line fail too.
    let mut t = Target {
        child,
        line: String::new(),
    };
    // Its stdout is read on after the line: srpt prints more (the IB CM form), and a closed
    // pipe would kill it on that write (EPIPE) — a test that then saw no target at all.
    t.line = common::add_target_line(out);
    t
}

fn srp(args: &[&str]) -> std::process::Output {
    common::output(
        Command::new(env!("CARGO_BIN_EXE_softrdma"))
            .arg("srp")
            .args(args),
    )
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn login_write_read_bench_and_discover_against_srpt() {
    let t = target("127.0.84.1", &[]);
    let with_src = format!("{},src=127.0.84.2", t.line);
    let o = srp(&["login", &with_src]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains("logged in to 127.0.84.1:5555 from 127.0.84.2"),
        "{out}"
    );
    assert!(out.contains("channel 0: QP"), "{out}");
    assert!(
        out.contains("LUN 0: LIO-ORG  RAMDISK-MCP") && out.contains("16384 blocks of 512 bytes"),
        "{out}"
    );
    assert!(out.trim_end().ends_with("logged out"), "{out}");

    // Raw bytes: write 12 KiB at 64 KiB from stdin, read them back to stdout.
    let data: Vec<u8> = (0..12288u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut w = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args(["srp", "write", &with_src, "--offset", "64k"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    w.stdin
        .take()
        .expect("stdin")
        .write_all(&data)
        .expect("feed");
    let o = common::wait_output(w);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = srp(&["read", &with_src, "--offset", "64k", "--length", "12k"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(o.stdout, data);
    // Not a multiple of the block size.
    let o = srp(&["read", &with_src, "--offset", "100", "--length", "512"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("multiples of LUN 0's block size"));

    // A verified random workload, as JSON.
    let o = srp(&[
        "bench",
        &with_src,
        "--rw",
        "randrw",
        "--bs",
        "4k",
        "--iodepth",
        "8",
        "--size",
        "1m",
        "--verify",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(j["iops"].as_f64().unwrap_or(0.0) > 0.0, "{j}");
    assert_eq!(j["verify"]["errors"], 0, "{j}");
    assert!(j["verify"]["checked"].as_u64().unwrap_or(0) > 0, "{j}");
    assert!(
        j["read"]["lat_ns"]["percentile"]["99.000000"]
            .as_u64()
            .is_some(),
        "{j}"
    );
    // fio text.
    let o = srp(&[
        "bench",
        &with_src,
        "--rw",
        "read",
        "--bs",
        "64k",
        "--iodepth",
        "4",
        "--size",
        "1m",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("  read: IOPS="), "{out}");
    // fio's unit: usec, or msec when even the fastest command took 10 ms or more (as on a
    // loaded 2-core machine: 57 to 102 ms seen), in both latency lines alike.
    let min_ms = out
        .split("    lat (msec): min=")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .map(|m| m.trim().parse::<u64>().unwrap());
    let unit = match min_ms {
        Some(m) => {
            assert!(m >= 10, "msec for a {m} ms minimum: {out}");
            "msec"
        }
        None => "usec",
    };
    assert!(out.contains(&format!("    lat ({unit}): min=")), "{out}");
    assert!(out.contains(&format!("lat percentiles ({unit}):")), "{out}");

    // Discovery over QP1: both forms, the RDMA CM one equal to srpt's line.
    let o = srp(&["discover", "127.0.84.1", "--src", "127.0.84.3"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].contains(",dgid=00000000000000000000ffff7f005401,pkey=ffff,service_id="),
        "{out}"
    );
    assert_eq!(lines[1], t.line);
}

#[test]
fn login_refusals_are_one_line_with_the_reason() {
    let t = target("127.0.84.11", &["--max-req-size", "2048"]);
    let src = ",src=127.0.84.12";
    let o = srp(&["login", &format!("{}{src}", t.line)]);
    assert_eq!(o.status.code(), Some(1));
    let e = text(&o.stderr);
    assert!(
        e.contains("SRP_LOGIN_REJ: requested max_it_iu_len too large"),
        "{e}"
    );
    // The same login capped to what the target takes.
    let o = srp(&["login", &format!("{}{src},max_it_iu_size=2048", t.line)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let bad = t
        .line
        .replacen("ioc_guid=", "ioc_guid=1", 0)
        .replace("dest=", "xx=");
    let o = srp(&["login", &bad]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("unknown parameter or missing value 'xx="));
    let o = srp(&[
        "login",
        &format!("{}{src}", t.line.replace(":5555", ":5599")),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("REJ reason 0x8 (invalid service ID)"));
}

#[test]
fn demo_runs_and_says_what_happened() {
    let o = common::output(Command::new(env!("CARGO_BIN_EXE_softrdma")).args([
        "demo",
        "--runtime",
        "0.5",
        "--target",
        "127.0.85.1",
        "--initiator",
        "127.0.85.2",
        "--size",
        "8m",
    ]));
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    for want in [
        "channel 0  REQ  ->  SRP_LOGIN_REQ: SINGLE, it_iu_len 8260",
        "channel 0  REP  <-  SRP_LOGIN_RSP: 128 credits",
        "channel 1  REQ  ->  SRP_LOGIN_REQ: MULTI",
        "channel 0  DREQ ->",
        "channel 1  DREP <-",
        "IB CM counters: initiator sent REQ 2, RTU 2, DREQ 2; received REP 2, DREP 2",
        "target sent REP 2, DREP 2; received REQ 2, RTU 2, DREQ 2",
        "read : IOPS=",
        "write: IOPS=",
        " 0 errors",
        "softrdma demo: OK in ",
    ] {
        assert!(out.contains(want), "{want:?} not in:\n{out}");
    }
}

#[test]
fn perf_srp_runs_ours_and_says_about_fio() {
    let o = common::output(Command::new(env!("CARGO_BIN_EXE_softrdma")).args([
        "perf",
        "srp",
        "-r",
        "1",
        "--runtime",
        "0.3",
        "--only",
        "randwrite",
        "--target",
        "127.0.86.1",
        "--initiator",
        "127.0.86.2",
        "--size",
        "16m",
        "-v",
    ]));
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(out.contains("4k randwrite qd32"), "{out}");
    assert!(out.contains("summary (medians"), "{out}");
    // -v: what the initiator's stack and driver counted in the run.
    assert!(
        out.lines()
            .any(|l| l.starts_with("  initiator: ") && l.contains("stack sent_pkts +")),
        "{out}"
    );
    // CPU per I/O, for both sides when fio runs.
    assert!(out.contains("CPU us/IO"), "{out}");
    assert!(
        !out.contains("fio --ioengine=nbd -> nbdkit memory") || out.contains("CPU per I/O ratio"),
        "{out}"
    );
    assert!(
        out.contains("fio --ioengine=nbd -> nbdkit memory")
            || out.contains("apt-get install -y fio nbdkit"),
        "{out}"
    );
}

#[test]
fn the_ib_form_from_discover_logs_in_over_the_ib_cm() {
    let _t = target("127.0.84.21", &["--ib-cm"]);
    let o = srp(&["discover", "127.0.84.21", "--src", "127.0.84.22"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let ib = out.lines().next().expect("IB line");
    assert!(ib.contains(",dgid=") && ib.contains(",service_id="), "{ib}");
    // ib_srp takes src= in this form too (and ignores it); we take our address from it.
    let o = srp(&["login", &format!("{ib},src=127.0.84.22")]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(out.contains("IB CM SINGLE"), "{out}");
    assert!(out.contains("LUN 0: LIO-ORG"), "{out}");
}
