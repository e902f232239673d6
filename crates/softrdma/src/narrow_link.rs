//! The narrow link (issue 21): two network namespaces of our own joined by a veth pair (MTU
//! 1500, as a plain Ethernet link), each direction shaped by `htb` to a rate over a shallow
//! tail-drop `bfifo` queue — what a switch port with shallow buffers, or a speed mismatch,
//! does to a sender that bursts. `softrdma perf … --link RATE` runs ours and a TCP stream
//! through it in the same run; `scripts/narrow-link.sh` builds the same link for commands
//! run by hand (the SRP target in one namespace, the initiator in the other).
//!
//! With impairments ([`NarrowLink::create_with`]), a third namespace (`srl<pid>r`) sits in
//! the middle: side A's veth is paired with `r0` there, side B's with `r1`, and the frame
//! relay ([`crate::relay`]) forwards frames between `r0` and `r1` with random loss,
//! delay/jitter and, when it is the bottleneck itself ([`crate::relay::Shape`]), ECN marking.
//! GSO, TSO and GRO are off on those veths (`ethtool`), so the relay's loss is per packet
//! on the wire, as a link's is, for our GSO trains and TCP's segments alike.
//!
//! Needs root (`CAP_NET_ADMIN`, `CAP_SYS_ADMIN` for `setns`) and the `ip` and `tc` tools
//! (and `ethtool` for the relay).
//! The namespaces are named after this process (`srl<pid>x<n>a`, `srl<pid>x<n>b`, n the
//! link's number in the process) and deleted
//! when the [`NarrowLink`] is dropped; a run killed before that leaves them behind, and
//! the next [`NarrowLink::create_with`] deletes those of processes that are gone. Addresses are
//! 10.221.0.1 (side A) and 10.221.0.2 (side B), inside those namespaces only: nothing is
//! sent anywhere else.

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsFd;
use std::process::Command;

/// The address of side A (the server / target side).
pub const ADDR_A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 221, 0, 1));
/// The address of side B (the client / initiator side).
pub const ADDR_B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 221, 0, 2));
/// The veth MTU.
pub const LINK_MTU: u32 = 1500;
/// The default queue (bytes) of each direction.
pub const DEFAULT_QUEUE: u64 = 256 * 1024;

const PREFIX: &str = "srl";

/// The environment variable that turns congestion control and pacing on (`1`, `on`) or
/// off (`0`, `off`) for the devices a command opens (`softrdma_core::Stack::
/// set_congestion_control`; off by default: `docs/congestion-control.md`).
pub const CC_ENV: &str = "SOFTRDMA_CC";

/// What [`CC_ENV`] asks for, if it is set to something it understands.
pub fn cc_from_env() -> Option<bool> {
    match std::env::var(CC_ENV).ok()?.to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

/// Applies [`CC_ENV`] to `dev` (`default` when it is unset).
pub fn apply_cc(dev: &softrdma_driver::Device, default: bool) {
    let on = cc_from_env().unwrap_or(default);
    if let Err(e) = dev.set_congestion_control(on) {
        eprintln!("{CC_ENV}: the ECN field of received datagrams cannot be read: {e}");
    }
}

/// A rate such as `2gbit`, `500mbit`, `2000000000` (bit/s); returns bit/s.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = if let Some(n) = t.strip_suffix("gbit") {
        (n, 1_000_000_000u64)
    } else if let Some(n) = t.strip_suffix("mbit") {
        (n, 1_000_000)
    } else if let Some(n) = t.strip_suffix("kbit") {
        (n, 1_000)
    } else if let Some(n) = t.strip_suffix("bit") {
        (n, 1)
    } else {
        (t.as_str(), 1)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * mult as f64 >= 1e6 && v * mult as f64 <= 1e11 => {
            Ok((v * mult as f64) as u64)
        }
        _ => Err(format!(
            "{s} is not a rate from 1mbit to 100gbit (like 2gbit, 500mbit)"
        )),
    }
}

/// One side of the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

/// The two namespaces and the shaped veth pair between them; deleted on drop.
#[derive(Debug)]
pub struct NarrowLink {
    names: [String; 2],
    /// The relay's namespace and the relay, when the link has impairments.
    relay: Option<(String, crate::relay::Relay)>,
    /// The namespace the creating thread was in (to go back to).
    home: File,
    pub rate_bps: u64,
    pub queue_bytes: u64,
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| format!("{shown}: {e} (the narrow link needs the `ip` and `tc` tools)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{shown}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Why this process cannot build the link, if it cannot (not root); `None` when it may try.
pub fn unavailable() -> Option<String> {
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    });
    if !root {
        return Some("the narrow link needs root (network namespaces, tc)".into());
    }
    if Command::new("ip").arg("-V").output().is_err()
        || Command::new("tc").arg("-V").output().is_err()
    {
        return Some("the narrow link needs the `ip` and `tc` tools (iproute2)".into());
    }
    None
}

/// Deletes namespaces of earlier runs whose process is gone.
fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir("/var/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let Some(pid) = rest
            .strip_suffix('a')
            .or_else(|| rest.strip_suffix('b'))
            .or_else(|| rest.strip_suffix('r'))
            .and_then(|p| p.split('x').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run(Command::new("ip").args(["netns", "del", &name]));
        }
    }
}

impl NarrowLink {
    /// Builds the link: rate `rate_bps` each way over a `queue_bytes` tail-drop queue.
    pub fn create(rate_bps: u64, queue_bytes: u64) -> Result<NarrowLink, String> {
        Self::create_with(rate_bps, queue_bytes, None)
    }

    /// [`NarrowLink::create`] with the frame relay in the middle when `imp` is given. The `htb`
    /// shaping stays on both sides unless the relay shapes itself (`imp.shape`: the relay's
    /// queue is then the bottleneck, so it can mark ECN).
    pub fn create_with(
        rate_bps: u64,
        queue_bytes: u64,
        imp: Option<crate::relay::Impairments>,
    ) -> Result<NarrowLink, String> {
        if let Some(why) = unavailable() {
            return Err(why);
        }
        if imp.is_some() && Command::new("ethtool").arg("--version").output().is_err() {
            return Err("the frame relay needs the `ethtool` tool (Debian's ethtool)".into());
        }
        sweep_stale();
        let home = File::open("/proc/thread-self/ns/net")
            .map_err(|e| format!("/proc/thread-self/ns/net: {e}"))?;
        // Named after the process and the link's number in it (tests build several): at
        // most 15 bytes with the `v` of the veth names.
        static SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 100;
        let pid = format!("{}x{n}", std::process::id());
        let names = [format!("{PREFIX}{pid}a"), format!("{PREFIX}{pid}b")];
        // From here on, drop deletes whatever was made.
        let mut link = NarrowLink {
            names,
            relay: None,
            home,
            rate_bps,
            queue_bytes,
        };
        match imp {
            None => link.build(true)?,
            Some(imp) => {
                let r = format!("{PREFIX}{pid}r");
                // Made first, so drop deletes it whatever fails later.
                run(Command::new("ip").args(["netns", "add", &r]))?;
                let path = format!("/var/run/netns/{r}");
                link.relay = Some((r.clone(), crate::relay::Relay::stopped()));
                link.build_relayed(&r, imp.shape.is_none())?;
                let relay = crate::relay::Relay::start(Some(&path), "r0", "r1", imp)?;
                link.relay = Some((r, relay));
            }
        }
        Ok(link)
    }

    /// Side A's veth paired with `r0` in the relay's namespace, side B's with `r1`; offloads
    /// off on all four.
    fn build_relayed(&self, r: &str, shaped: bool) -> Result<(), String> {
        let [a, b] = &self.names;
        let ip = |args: &[&str]| run(Command::new("ip").args(args));
        ip(&["netns", "add", a])?;
        ip(&["netns", "add", b])?;
        for (ns, peer) in [(a, "r0"), (b, "r1")] {
            let dev = format!("{ns}v");
            ip(&[
                "link", "add", &dev, "netns", ns, "mtu", "1500", "type", "veth", "peer", "name",
                peer, "netns", r, "mtu", "1500",
            ])?;
        }
        ip(&["-n", r, "link", "set", "lo", "up"])?;
        for (ns, dev) in [
            (a.as_str(), format!("{a}v")),
            (b.as_str(), format!("{b}v")),
            (r, "r0".into()),
            (r, "r1".into()),
        ] {
            // Wire-sized frames through the relay: no GSO/TSO trains leave a veth, none are
            // merged by GRO. Checksum offload stays (the relay forwards its state).
            run(Command::new("ip").args([
                "netns",
                "exec",
                ns,
                "ethtool",
                "-K",
                &dev,
                "tso",
                "off",
                "gso",
                "off",
                "gro",
                "off",
                "tx-udp-segmentation",
                "off",
            ]))?;
        }
        ip(&["-n", r, "link", "set", "r0", "up"])?;
        ip(&["-n", r, "link", "set", "r1", "up"])?;
        self.configure_sides(shaped)
    }

    fn build(&self, shaped: bool) -> Result<(), String> {
        let [a, b] = &self.names;
        let (va, vb) = (format!("{a}v"), format!("{b}v"));
        let ip = |args: &[&str]| run(Command::new("ip").args(args));
        ip(&["netns", "add", a])?;
        ip(&["netns", "add", b])?;
        ip(&[
            "link", "add", &va, "netns", a, "mtu", "1500", "type", "veth", "peer", "name", &vb,
            "netns", b, "mtu", "1500",
        ])?;
        self.configure_sides(shaped)
    }

    /// Addresses, links up and (when `shaped`) each side's egress shaping.
    fn configure_sides(&self, shaped: bool) -> Result<(), String> {
        let [a, b] = &self.names;
        let (va, vb) = (format!("{a}v"), format!("{b}v"));
        let ip = |args: &[&str]| run(Command::new("ip").args(args));
        let tc = |args: &[&str]| run(Command::new("tc").args(args));
        let rate = format!("{}bit", self.rate_bps);
        let limit = format!("{}b", self.queue_bytes);
        for (ns, dev, addr) in [(a, &va, ADDR_A), (b, &vb, ADDR_B)] {
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            if !shaped {
                continue;
            }
            // GSO trains (ours) and TSO segments (TCP's) reach the qdisc whole; the bfifo
            // counts them by the bytes their segments take on the wire (`qdisc_pkt_len`),
            // so both are held to the same queue.
            tc(&[
                "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1",
            ])?;
            tc(&[
                "-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
                "rate", &rate, "ceil", &rate, "quantum", "60000",
            ])?;
            tc(&[
                "-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "bfifo",
                "limit", &limit,
            ])?;
        }
        Ok(())
    }

    /// The namespace name of `side`.
    pub fn name(&self, side: Side) -> &str {
        match side {
            Side::A => &self.names[0],
            Side::B => &self.names[1],
        }
    }

    /// Moves the calling thread into `side`'s namespace: sockets it opens from now on are
    /// there (sockets opened before stay where they were).
    pub fn enter(&self, side: Side) -> Result<(), String> {
        let path = format!("/var/run/netns/{}", self.name(side));
        let f = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        rustix::thread::move_into_link_name_space(
            f.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| format!("setns {path}: {e}"))
    }

    /// Moves the calling thread back to the namespace the link was created from.
    pub fn leave(&self) -> Result<(), String> {
        rustix::thread::move_into_link_name_space(
            self.home.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| format!("setns back: {e}"))
    }

    /// Each direction's qdisc statistics (`tc -s qdisc`): bytes sent and packets dropped by
    /// the bfifo, side A's egress then side B's.
    pub fn drops(&self) -> [(u64, u64); 2] {
        let one = |ns: &str| -> (u64, u64) {
            let out = Command::new("tc")
                .args(["-n", ns, "-s", "qdisc", "show", "dev", &format!("{ns}v")])
                .output();
            let Ok(out) = out else { return (0, 0) };
            let text = String::from_utf8_lossy(&out.stdout);
            // The bfifo's block: "qdisc bfifo 10: ...\n Sent N bytes M pkt (dropped D, ..."
            let Some(at) = text.find("qdisc bfifo") else {
                return (0, 0);
            };
            let block = &text[at..];
            let num_after = |key: &str| -> u64 {
                block
                    .find(key)
                    .map(|i| &block[i + key.len()..])
                    .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|d| d.parse().ok())
                    .unwrap_or(0)
            };
            (num_after("Sent "), num_after("dropped "))
        };
        [one(&self.names[0]), one(&self.names[1])]
    }
}

impl NarrowLink {
    /// The relay's counters, when the link has one.
    pub fn relay_counts(&self) -> Option<crate::relay::Counts> {
        self.relay.as_ref().map(|(_, r)| r.stats.counts())
    }
}

impl Drop for NarrowLink {
    fn drop(&mut self) {
        let _ = self.leave();
        if let Some((name, mut relay)) = self.relay.take() {
            let _ = relay.stop();
            let _ = run(Command::new("ip").args(["netns", "del", &name]));
        }
        for n in &self.names {
            let _ = run(Command::new("ip").args(["netns", "del", n]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("2gbit"), Ok(2_000_000_000));
        assert_eq!(parse_rate("500mbit"), Ok(500_000_000));
        assert_eq!(parse_rate("1.5Gbit"), Ok(1_500_000_000));
        assert_eq!(parse_rate("2000000000"), Ok(2_000_000_000));
        assert!(parse_rate("2gb/s").is_err());
        assert!(parse_rate("0gbit").is_err());
        assert!(parse_rate("10kbit").is_err());
    }

    /// The link comes up shaped and goes away on drop (root only; skipped otherwise, saying
    /// so).
    #[test]
    fn the_link_is_built_and_removed() {
        if let Some(why) = unavailable() {
            eprintln!("skipped: {why}");
            return;
        }
        let link = NarrowLink::create(2_000_000_000, DEFAULT_QUEUE).expect("create");
        let a = link.name(Side::A).to_string();
        let out = Command::new("tc")
            .args(["-n", &a, "qdisc", "show", "dev", &format!("{a}v")])
            .output()
            .expect("tc");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("htb") && text.contains("bfifo"), "{text}");
        drop(link);
        assert!(!std::path::Path::new(&format!("/var/run/netns/{a}")).exists());
    }

    /// The frame relay between the namespaces (root only; skipped otherwise, saying so).
    /// One test, since links are named after the process: (1) UDP datagrams from A reach B
    /// unchanged, about 80% of them at 20% loss, and the relay counts what it lost; (2) a
    /// TCP stream arrives intact (its checksum-offload state forwarded with the frames); (3)
    /// a relay that shapes and marks sets CE on ECT datagrams that find a queue, which our
    /// endpoint reads (`set_recv_ecn`), and leaves not-ECT ones alone.
    #[test]
    fn the_relay_forwards_loses_and_marks() {
        use crate::relay::{Impairments, Shape};
        use softrdma_driver::udp::{EndpointConfig, Transmit, UdpEndpoint};
        use std::io::{IoSliceMut, Read, Write};
        use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
        use std::time::Duration;
        if let Some(why) = unavailable() {
            eprintln!("skipped: {why}");
            return;
        }
        if Command::new("ethtool").arg("--version").output().is_err() {
            eprintln!("skipped: the relay needs ethtool");
            return;
        }
        let imp = Impairments {
            loss: 0.2,
            seed: 3,
            ..Impairments::default()
        };
        let link = NarrowLink::create_with(1_000_000_000, DEFAULT_QUEUE, Some(imp)).expect("link");
        let in_side = |side, f: &mut dyn FnMut()| {
            link.enter(side).expect("enter");
            f();
            link.leave().expect("leave");
        };
        let (mut rx, mut tx) = (None, None);
        in_side(Side::B, &mut || {
            rx = Some(UdpSocket::bind((ADDR_B, 0)).unwrap())
        });
        in_side(Side::A, &mut || {
            tx = Some(UdpSocket::bind((ADDR_A, 0)).unwrap())
        });
        let (rx, tx) = (rx.unwrap(), tx.unwrap());
        rx.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let dst = rx.local_addr().unwrap();
        // ARP first (not IP: the relay passes it without loss).
        for _ in 0..5 {
            tx.send_to(b"hello", dst).unwrap();
        }
        let mut buf = [0u8; 2048];
        while rx.recv(&mut buf).is_ok() {}
        let before = link.relay_counts().unwrap();
        const N: usize = 1000;
        // Read while sending (a socket buffer holds few of these datagrams as the kernel
        // accounts them).
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let mut got = 0;
            while let Ok(n) = rx.recv(&mut buf) {
                assert_eq!(n, 400);
                let i = usize::from(buf[0]);
                assert!(
                    (0..400).all(|k| buf[k] == (i + k) as u8),
                    "a datagram arrived changed"
                );
                got += 1;
            }
            got
        });
        for i in 0..N {
            let msg: Vec<u8> = (0..400).map(|k| (i + k) as u8).collect();
            tx.send_to(&msg, dst).unwrap();
            if i % 20 == 19 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let got: usize = reader.join().expect("reader");
        let c = link.relay_counts().unwrap().minus(&before);
        assert!(
            (700..=880).contains(&got),
            "{got} of {N} at 20% loss: {c:?}"
        );
        // (Frames the hosts send by themselves — IPv6 neighbour discovery — cross too.)
        assert!((c.lost as usize + got).abs_diff(N) <= 5, "{c:?}");
        assert_eq!(c.gso_frames, 0);
        drop(link);

        // A clean relay that shapes to 100 Mbit/s and marks above 0 bytes queued.
        let imp = Impairments {
            shape: Some(Shape {
                rate_bps: 100_000_000,
                queue_bytes: DEFAULT_QUEUE,
                ecn_threshold: Some(0),
            }),
            ..Impairments::default()
        };
        let link = NarrowLink::create_with(1_000_000_000, DEFAULT_QUEUE, Some(imp)).expect("link");
        let in_side = |side, f: &mut dyn FnMut()| {
            link.enter(side).expect("enter");
            f();
            link.leave().expect("leave");
        };
        // TCP: 4 MB through the relay, intact.
        let (mut lis, mut client) = (None, None);
        in_side(Side::B, &mut || {
            lis = Some(TcpListener::bind((ADDR_B, 0)).unwrap())
        });
        let lis = lis.unwrap();
        let at = lis.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = lis.accept().unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).unwrap();
            all
        });
        in_side(Side::A, &mut || {
            client = Some(TcpStream::connect_timeout(&at, Duration::from_secs(5)).unwrap())
        });
        let data: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut client = client.unwrap();
        client.write_all(&data).unwrap();
        drop(client);
        assert!(
            reader.join().unwrap() == data,
            "the TCP stream arrived changed"
        );
        // ECN: a burst of ECT(0) datagrams finds the relay's queue and arrives CE.
        let (mut a, mut b) = (None, None);
        let any = |ip| SocketAddr::new(ip, 0);
        in_side(Side::B, &mut || {
            b = Some(UdpEndpoint::bind_with(any(ADDR_B), &EndpointConfig::default()).unwrap())
        });
        in_side(Side::A, &mut || {
            a = Some(UdpEndpoint::bind_with(any(ADDR_A), &EndpointConfig::default()).unwrap())
        });
        let (a, b) = (a.unwrap(), b.unwrap());
        b.set_recv_ecn(true).unwrap();
        let payload = [5u8; 1000];
        let mut ecns = Vec::new();
        for tos in [0b10u8, 0] {
            for _ in 0..20 {
                a.send(&Transmit::single(b.local_addr(), &payload).with_tos(tos))
                    .unwrap();
            }
            let mut rbuf = vec![0u8; 4096];
            let mut seen = Vec::new();
            while seen.len() < 20 {
                let mut bufs = [IoSliceMut::new(&mut rbuf)];
                let r = b
                    .recv_batch_timeout(&mut bufs, Some(Duration::from_secs(2)))
                    .unwrap();
                if r.is_empty() {
                    break;
                }
                seen.extend(r.iter().map(|d| d.ecn));
            }
            ecns.push(seen);
            std::thread::sleep(Duration::from_millis(20));
        }
        let c = link.relay_counts().unwrap();
        assert_eq!(ecns[0].len(), 20, "{ecns:?}");
        assert!(ecns[0].contains(&0b11), "CE: {ecns:?} {c:?}");
        assert!(ecns[0].iter().all(|&e| e == 0b11 || e == 0b10));
        assert!(
            ecns[1].iter().all(|&e| e == 0),
            "not-ECT stays so: {ecns:?}"
        );
        assert!(c.ce_marked > 0 && c.ect_seen >= 20, "{c:?}");
    }
}
