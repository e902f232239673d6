//! `softrdma decode FILE|- [--json] [-c COUNT] [--only-roce]`: every frame of a capture, every
//! layer by field name, the way `tshark -V` prints it (or JSON Lines: one JSON object per
//! frame, one per line).
//!
//! Whatever goes wrong is said in one line on stderr — what was wrong and what to do — and the
//! exit status is 1, as tshark does.

use softrdma_wire::dissect::{Node, Tree, Value};
use softrdma_wire::frame::{dissect_frame, FrameInfo};
use softrdma_wire::pcap::{PcapError, Reader, Record};
use std::io::{self, BufWriter, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// The JSON format, for `softrdma decode --help`.
const JSON_HELP: &str = "\
JSON (--json) is JSON Lines: one object per frame, one frame per line (jq, jq -s, or any
JSON Lines reader). Keys are the fields of the text view: {\"frame\":{...},\"eth\":{...},
\"ip\":{...},\"udp\":{...},\"infiniband\":{\"bth\":{...},...}}.
  - 64-bit fields (GUIDs, TIDs, service IDs, virtual addresses, SRP tags, LUNs, LBAs) are
    strings \"0x%016x\", so that no JSON reader rounds them (jq and JavaScript keep only 53 bits
    of a number); narrower integers are numbers.
  - IP addresses are \"10.77.0.1\" / \"fd77::10\", GIDs IPv6 text (\"::ffff:10.77.0.1\"), MACs
    \"52:54:00:77:00:0a\"; other bytes are lowercase hex strings.
  - infiniband.icrc_status: true if the ICRC is correct, false if not (the text view shows the
    right value), null if it could not be checked (e.g. the frame was cut short).

Examples:
  softrdma decode --json b_rping.pcap | jq -r '.infiniband.cm_req.local_ca_guid // empty'
  tcpdump -U -i eth0 -w - udp port 4791 | softrdma decode -";

#[derive(Debug, clap::Args)]
#[command(after_long_help = JSON_HELP)]
pub struct Args {
    /// The capture file (classic pcap or pcapng; Ethernet, Linux cooked v1/v2 or raw IP), or
    /// `-` to read it from standard input.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print JSON Lines (one JSON object per frame, one per line) instead of the text tree;
    /// `--help` describes the format.
    #[arg(long)]
    pub json: bool,
    /// Stop after COUNT frames (at least 1; counting only the frames shown).
    #[arg(
        short = 'c',
        long = "count",
        value_name = "COUNT",
        allow_negative_numbers = true
    )]
    pub count: Option<String>,
    /// Show only RoCEv2 frames (UDP port 4791); frame numbers stay those of the file.
    #[arg(long)]
    pub only_roce: bool,
}

/// Says what was wrong, in one line, and gives the exit status for it.
fn refuse(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("softrdma decode: {msg}");
    ExitCode::from(1)
}

/// `-c COUNT`: a whole number of frames, at least 1 (tshark refuses 0 too).
fn parse_count(c: &str) -> Result<u64, String> {
    match c.parse::<u64>() {
        Ok(0) => Err("-c 0: the count must be at least 1; leave -c out to show every frame".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "-c {c}: not a number of frames; give a whole number of at least 1, or leave -c out \
             to show every frame"
        )),
    }
}

/// Where the capture comes from: a whole file, or standard input read as it arrives (so
/// `tcpdump -U -w - | softrdma decode -` shows each packet when it comes, as tshark does).
struct Input {
    name: String,
    buf: Vec<u8>,
    stdin: Option<io::StdinLock<'static>>,
}

impl Input {
    /// Opens the input, or says in one line why it cannot be had.
    fn open(args: &Args) -> Result<Input, String> {
        if args.file.as_os_str() == "-" {
            let name = "standard input".to_string();
            let stdin = io::stdin().lock();
            if stdin.is_terminal() {
                return Err(format!(
                    "{name} is a terminal, not a capture; pipe one in \
                     (tcpdump -U -w - ... | softrdma decode -) or give a file name"
                ));
            }
            return Ok(Input {
                name,
                buf: Vec::new(),
                stdin: Some(stdin),
            });
        }
        let name = args.file.display().to_string();
        match std::fs::read(&args.file) {
            Ok(buf) => Ok(Input {
                name,
                buf,
                stdin: None,
            }),
            Err(e) => Err(match e.kind() {
                io::ErrorKind::NotFound => {
                    format!("{name}: no such file; give the path of a .pcap or .pcapng capture")
                }
                io::ErrorKind::IsADirectory => format!(
                    "{name}: is a directory; give the path of a .pcap or .pcapng capture in it"
                ),
                io::ErrorKind::PermissionDenied => format!(
                    "{name}: permission denied; make the file readable (chmod a+r) or run as \
                     its owner"
                ),
                _ => format!("cannot read {name}: {}", io_text(&e)),
            }),
        }
    }

    /// Whether more bytes may still come.
    fn open_ended(&self) -> bool {
        self.stdin.is_some()
    }

    /// Reads what the pipe has now (waiting for at least one byte); at its end, closes it.
    fn fill(&mut self) -> Result<(), String> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Ok(());
        };
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match stdin.read(&mut chunk) {
                Ok(0) => {
                    self.stdin = None;
                    return Ok(());
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("cannot read {}: {}", self.name, io_text(&e))),
            }
        }
    }
}

/// An I/O error as a sentence, without the `(os error N)` tail.
fn io_text(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// A capture that cannot be opened: what is wrong with it and, where there is one, what to do.
fn open_error(name: &str, len: usize, e: &PcapError) -> String {
    match e {
        PcapError::NotACapture { magic: None } if len == 0 => format!(
            "{name}: empty, not a capture; write captures with `tcpdump -w`, `dumpcap -w` or \
             `--pcap FILE`"
        ),
        PcapError::NotACapture { magic: None } => format!(
            "{name}: not a pcap or pcapng capture file (only {len} bytes); write captures with \
             `tcpdump -w`, `dumpcap -w` or `--pcap FILE`"
        ),
        _ => format!("{name}: {e}"),
    }
}

pub fn run(args: &Args) -> ExitCode {
    let count = match args.count.as_deref().map(parse_count).transpose() {
        Ok(c) => c,
        Err(msg) => return refuse(msg),
    };
    let mut input = match Input::open(args) {
        Ok(i) => i,
        Err(msg) => return refuse(msg),
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut shown = 0u64;
    let mut number = 0u64;
    let mut first_ts: Option<Duration> = None;
    let mut prev_ts: Option<Duration> = None;
    // The reader's place between packets, kept apart from the buffer it reads so that the
    // buffer can grow while a pipe delivers more.
    let mut saved: Option<Reader<'static>> = None;
    while count.is_none_or(|c| shown < c) {
        let mut reader = match &saved {
            Some(s) => s.continue_on(&input.buf),
            None => match Reader::new(&input.buf) {
                Ok(r) => r,
                Err(PcapError::NotACapture { magic: None } | PcapError::Truncated { .. })
                    if input.open_ended() =>
                {
                    if let Err(msg) = input.fill() {
                        return refuse(msg);
                    }
                    continue;
                }
                Err(e) => return refuse(open_error(&input.name, input.buf.len(), &e)),
            },
        };
        let before = reader.continue_on(&[]);
        let rec = match reader.next() {
            Some(Ok(rec)) => rec,
            None | Some(Err(PcapError::Truncated { .. })) if input.open_ended() => {
                // The pipe has not delivered the whole packet yet: show what we have, wait.
                saved = Some(before);
                if out.flush().is_err() {
                    return ExitCode::SUCCESS;
                }
                if let Err(msg) = input.fill() {
                    return refuse(msg);
                }
                continue;
            }
            None => break,
            Some(Err(e)) => {
                let _ = out.flush();
                return refuse(format!(
                    "{}: {e}; the {shown} frame{} before it {} shown",
                    input.name,
                    if shown == 1 { "" } else { "s" },
                    if shown == 1 { "was" } else { "were" }
                ));
            }
        };
        saved = Some(reader.continue_on(&[]));
        number += 1;
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
            write_json(&mut out, &full)
        } else {
            write_text(&mut out, &full)
        };
        if r.is_err() {
            // Broken pipe (`| head`): stop quietly.
            return ExitCode::SUCCESS;
        }
    }
    let _ = out.flush();
    ExitCode::SUCCESS
}

/// One JSON Lines record: the frame's tree as one object (serde, `softrdma-wire`'s `serde`
/// feature), then a newline.
fn write_json(out: &mut impl Write, t: &Tree) -> io::Result<()> {
    serde_json::to_writer(&mut *out, t)?;
    out.write_all(b"\n")
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
