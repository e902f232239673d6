//! `softrdma decode FILE [--json] [-c COUNT] [--only-roce]`: every frame of a capture, every
//! layer by field name, the way `tshark -V` prints it (or one JSON object per frame).

use softrdma_wire::dissect::{Node, Tree, Value};
use softrdma_wire::frame::{dissect_frame, FrameInfo};
use softrdma_wire::pcap::{Reader, Record};
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The capture file (classic pcap or pcapng; Ethernet, Linux cooked v1/v2 or raw IP).
    pub file: PathBuf,
    /// Print one JSON object per frame, one per line, instead of the text tree.
    #[arg(long)]
    pub json: bool,
    /// Stop after this many frames (counting only the frames shown).
    #[arg(short = 'c', long = "count", value_name = "COUNT")]
    pub count: Option<u64>,
    /// Show only RoCEv2 frames (UDP port 4791); frame numbers stay those of the file.
    #[arg(long)]
    pub only_roce: bool,
}

pub fn run(args: &Args) -> ExitCode {
    let path = args.file.display();
    let bytes = match std::fs::read(&args.file) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            eprintln!("softrdma decode: {path}: no such file; give the path of a .pcap or .pcapng capture");
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("softrdma decode: cannot read {path}: {e}");
            return ExitCode::from(1);
        }
    };
    let reader = match Reader::new(&bytes) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("softrdma decode: {path}: {e}");
            return ExitCode::from(1);
        }
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut shown = 0u64;
    let mut first_ts: Option<Duration> = None;
    let mut prev_ts: Option<Duration> = None;
    let mut status = ExitCode::SUCCESS;
    for (i, rec) in reader.enumerate() {
        if args.count.is_some_and(|c| shown >= c) {
            break;
        }
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                let _ = out.flush();
                eprintln!("softrdma decode: {path}: {e}");
                status = ExitCode::from(1);
                break;
            }
        };
        let number = i as u64 + 1;
        let (tree, info) = dissect_frame(rec.linktype, rec.data);
        let first = *first_ts.get_or_insert(rec.timestamp);
        let delta = prev_ts.map_or(Duration::ZERO, |p| rec.timestamp.saturating_sub(p));
        prev_ts = Some(rec.timestamp);
        if args.only_roce && !info.roce {
            continue;
        }
        shown += 1;
        let frame = frame_node(
            number,
            &rec,
            &info,
            rec.timestamp.saturating_sub(first),
            delta,
        );
        let mut full = Tree::new();
        full.push(frame);
        full.nodes.extend(tree.nodes);
        let r = if args.json {
            writeln!(out, "{}", full.to_json())
        } else {
            write_text(&mut out, &full)
        };
        if r.is_err() {
            // Broken pipe (`| head`): stop quietly.
            return status;
        }
    }
    let _ = out.flush();
    status
}

fn write_text(out: &mut impl Write, t: &Tree) -> io::Result<()> {
    // The frame node's label is the first line, unindented, like tshark's; the layers follow.
    let mut s = String::new();
    for n in &t.nodes {
        let mut one = Tree::new();
        one.push(n.clone());
        s.push_str(&one.to_text(0));
    }
    s.push('\n');
    out.write_all(s.as_bytes())
}

fn leaf(key: &'static str, label: &str, value: Value, display: String) -> Node {
    Node {
        key,
        label: label.to_string(),
        value,
        display,
        children: Vec::new(),
    }
}

fn secs(d: Duration) -> String {
    format!("{}.{:09} seconds", d.as_secs(), d.subsec_nanos())
}

fn frame_node(
    number: u64,
    rec: &Record<'_>,
    info: &FrameInfo,
    since_first: Duration,
    delta: Duration,
) -> Node {
    let len = u64::from(rec.orig_len);
    let cap = rec.data.len() as u64;
    let mut children = vec![
        leaf(
            "encap",
            "Link type",
            Value::Uint(rec.linktype.0.into()),
            format!("{} ({})", rec.linktype, rec.linktype.0),
        ),
        leaf(
            "time",
            "Arrival Time",
            Value::Text(utc_text(rec.timestamp)),
            utc_text(rec.timestamp),
        ),
        leaf(
            "time_epoch",
            "Epoch Time",
            Value::Text(format!(
                "{}.{:09}",
                rec.timestamp.as_secs(),
                rec.timestamp.subsec_nanos()
            )),
            secs(rec.timestamp),
        ),
        leaf(
            "time_delta",
            "[Time delta from previous captured frame",
            Value::Text(format!("{}.{:09}", delta.as_secs(), delta.subsec_nanos())),
            format!("{}]", secs(delta)),
        ),
        leaf(
            "time_relative",
            "[Time since reference or first frame",
            Value::Text(format!(
                "{}.{:09}",
                since_first.as_secs(),
                since_first.subsec_nanos()
            )),
            format!("{}]", secs(since_first)),
        ),
        leaf(
            "number",
            "Frame Number",
            Value::Uint(number),
            number.to_string(),
        ),
        leaf(
            "len",
            "Frame Length",
            Value::Uint(len),
            format!("{len} bytes ({} bits)", len * 8),
        ),
        leaf(
            "cap_len",
            "Capture Length",
            Value::Uint(cap),
            format!("{cap} bytes ({} bits)", cap * 8),
        ),
        leaf(
            "protocols",
            "[Protocols in frame",
            Value::Text(info.protocols.join(":")),
            format!("{}]", info.protocols.join(":")),
        ),
    ];
    if rec.interface != 0 {
        children.insert(
            0,
            leaf(
                "interface_id",
                "Interface id",
                Value::Uint(rec.interface.into()),
                rec.interface.to_string(),
            ),
        );
    }
    if !info.info.is_empty() {
        children.push(leaf(
            "info",
            "[Info",
            Value::Text(info.info.clone()),
            format!("{}]", info.info),
        ));
    }
    Node {
        key: "frame",
        label: format!(
            "Frame {number}: {len} bytes on wire ({} bits), {cap} bytes captured ({} bits)",
            len * 8,
            cap * 8
        ),
        value: Value::None,
        display: String::new(),
        children,
    }
}

/// `Nov 30, 2026 13:26:18.574630000 UTC`, as tshark prints arrival times (in UTC here).
fn utc_text(t: Duration) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = t.as_secs();
    let days = (secs / 86_400) as i64;
    let sod = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let month = MONTHS
        .get((m as usize).wrapping_sub(1))
        .copied()
        .unwrap_or("???");
    format!(
        "{month} {d}, {y} {:02}:{:02}:{:02}.{:09} UTC",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60,
        t.subsec_nanos()
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (H. Hinnant's `civil_from_days` algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrival_time_like_tshark() {
        // h_req_single.txt: "Arrival Time: Nov 30, 2026 13:26:18.574630000 UTC".
        assert_eq!(
            utc_text(Duration::new(1_796_045_178, 574_630_000)),
            "Nov 30, 2026 13:26:18.574630000 UTC"
        );
        assert_eq!(
            utc_text(Duration::ZERO),
            "Jan 1, 1970 00:00:00.000000000 UTC"
        );
        assert_eq!(
            utc_text(Duration::new(951_782_400, 0)),
            "Feb 29, 2000 00:00:00.000000000 UTC"
        );
    }
}
