//! UDP throughput on loopback, 127.0.0.1 → 127.0.0.2, against a TCP stream in the same run.
//!
//! `cargo run --release --example udp_probe [-- SECONDS_PER_CASE]` (default 1 s per case, each
//! preceded by a TCP stream of the same length as its baseline).
//!
//! Each datagram is what an RDMA WRITE MIDDLE packet would be: 12 bytes of BTH + payload + 4
//! bytes of ICRC (the payload is the path MTU: 1024 or 4096). Goodput counts payload bytes the
//! receiver got; the sender runs flat out, so what the receiver cannot take is dropped and
//! shown as loss. CPU is the whole process's user+system time per GB of payload received.
//!
//! Cases: send one datagram per `sendmsg` or GSO (up to 64 datagrams / 64 KiB per `sendmsg`);
//! receive one datagram per `recvfrom` (plain std socket, no GRO: the kernel splits a GSO
//! train) or batched (quinn-udp: `recvmmsg` of 32 buffers, GRO).

#![allow(clippy::unwrap_used)] // a benchmark: fail loudly

use std::io::{IoSliceMut, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softrdma_driver::timer::{wait_for_input, Input, PollMode};
use softrdma_driver::udp::{EndpointConfig, Transmit, UdpEndpoint};
use softrdma_driver::Clock;

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const OVERHEAD: usize = 12 + 4; // BTH + ICRC

#[derive(Clone, Copy, PartialEq)]
enum Send {
    OnePerSyscall,
    Gso,
}
#[derive(Clone, Copy, PartialEq)]
enum Recv {
    OnePerSyscall,
    Batched,
}

struct Result {
    mb_s: f64,
    loss: f64,
    cpu_s_per_gb: f64,
    syscalls_per_s: f64,
}

fn cpu_seconds() -> f64 {
    // utime + stime of the process, fields 14 and 15 of /proc/self/stat, in clock ticks.
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    ticks as f64 / rustix::param::clock_ticks_per_second() as f64
}

fn udp_case(payload: usize, send: Send, recv: Recv, secs: f64) -> Result {
    let dgram = payload + OVERHEAD;
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));

    let (dst, rx_thread) = match recv {
        Recv::Batched => {
            let rx =
                UdpEndpoint::bind_with(SocketAddr::new(B, 0), &EndpointConfig::default()).unwrap();
            let dst = rx.local_addr();
            let (stop, got) = (stop.clone(), got.clone());
            let h = std::thread::spawn(move || {
                let mut storage = vec![vec![0u8; 65_536]; 32];
                let mut recs = Vec::with_capacity(32);
                let mut dgrams = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut slices: Vec<IoSliceMut<'_>> =
                        storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
                    recs.clear();
                    let n = rx.recv_batch_into(&mut slices, &mut recs).unwrap();
                    if n == 0 {
                        rx.wait_readable(Some(Duration::from_millis(20))).unwrap();
                        continue;
                    }
                    for r in &recs {
                        dgrams += r.datagrams() as u64;
                    }
                }
                got.store(dgrams, Ordering::Relaxed);
            });
            (dst, h)
        }
        Recv::OnePerSyscall => {
            let rx =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
            rx.set_recv_buffer_size(8 << 20).unwrap();
            rx.bind(&SocketAddr::new(B, 0).into()).unwrap();
            let rx: UdpSocket = rx.into();
            rx.set_read_timeout(Some(Duration::from_millis(20)))
                .unwrap();
            let dst = rx.local_addr().unwrap();
            let (stop, got) = (stop.clone(), got.clone());
            let h = std::thread::spawn(move || {
                let mut buf = vec![0u8; 65_536];
                let mut dgrams = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if rx.recv_from(&mut buf).is_ok() {
                        dgrams += 1;
                    }
                }
                got.store(dgrams, Ordering::Relaxed);
            });
            (dst, h)
        }
    };

    let tx = UdpEndpoint::bind_with(
        SocketAddr::new(A, 0),
        &EndpointConfig {
            gso: send == Send::Gso,
            ..EndpointConfig::default()
        },
    )
    .unwrap();
    let per_send = match send {
        Send::OnePerSyscall => 1,
        Send::Gso => tx
            .max_gso_segments()
            .min(softrdma_driver::udp::MAX_UDP_PAYLOAD_V4 / dgram),
    };
    let train = vec![0x5au8; dgram * per_send];
    let t = if per_send == 1 {
        Transmit::single(dst, &train)
    } else {
        Transmit::segmented(dst, &train, dgram)
    };

    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let mut sent = 0u64;
    let mut syscalls = 0u64;
    while Instant::now() < end {
        for _ in 0..64 {
            match tx.send(&t) {
                Ok(()) => sent += per_send as u64,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    tx.wait_writable(Some(Duration::from_millis(5))).unwrap();
                }
                Err(e) => panic!("send: {e}"),
            }
            syscalls += 1;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(100)); // let the receiver drain
    stop.store(true, Ordering::Relaxed);
    rx_thread.join().unwrap();
    let cpu = cpu_seconds() - cpu0;
    let received = got.load(Ordering::Relaxed);
    let bytes = (received * payload as u64) as f64;
    Result {
        mb_s: bytes / elapsed / 1e6,
        loss: 1.0 - received as f64 / sent.max(1) as f64,
        cpu_s_per_gb: cpu / (bytes / 1e9).max(1e-9),
        syscalls_per_s: syscalls as f64 / elapsed,
    }
}

fn tcp_case(secs: f64) -> Result {
    let l = TcpListener::bind(SocketAddr::new(B, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n as u64,
            }
        }
        total
    });
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::new(A, 0).into()).unwrap();
    socket.connect(&addr.into()).unwrap();
    let mut s: TcpStream = socket.into();
    let chunk = vec![0x5au8; 64 * 1024];
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let mut syscalls = 0u64;
    while Instant::now() < end {
        s.write_all(&chunk).unwrap();
        syscalls += 1;
    }
    drop(s);
    let total = h.join().unwrap();
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    Result {
        mb_s: total as f64 / elapsed / 1e6,
        loss: 0.0,
        cpu_s_per_gb: cpu / (total as f64 / 1e9).max(1e-9),
        syscalls_per_s: syscalls as f64 / elapsed,
    }
}

/// Median and mean round trip of a 16-byte TCP ping-pong (TCP_NODELAY, blocking reads).
fn tcp_pingpong(secs: f64) -> (f64, f64) {
    let l = TcpListener::bind(SocketAddr::new(B, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = [0u8; 16];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::new(A, 0).into()).unwrap();
    socket.connect(&addr.into()).unwrap();
    let mut s: TcpStream = socket.into();
    s.set_nodelay(true).unwrap();
    let mut rtts = Vec::new();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut buf = [0u8; 16];
    while Instant::now() < end {
        let t0 = Instant::now();
        s.write_all(&buf).unwrap();
        s.read_exact(&mut buf).unwrap();
        rtts.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    drop(s);
    h.join().unwrap();
    stats(rtts)
}

/// Median and mean round trip of a 16-byte UDP ping-pong between two endpoints, both waiting
/// with `mode`.
fn udp_pingpong(secs: f64, mode: PollMode) -> (f64, f64) {
    let server = UdpEndpoint::bind_with(SocketAddr::new(B, 0), &EndpointConfig::default()).unwrap();
    let client = UdpEndpoint::bind_with(SocketAddr::new(A, 0), &EndpointConfig::default()).unwrap();
    let saddr = server.local_addr();
    let stop = server.notifier();
    let h = std::thread::spawn(move || {
        let clock = Clock::new();
        let mut storage = vec![vec![0u8; 65_536]; 4];
        loop {
            let mut slices: Vec<IoSliceMut<'_>> =
                storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
            match wait_for_input(&server, &mut slices, &clock, None, mode).unwrap() {
                Input::Datagrams(recs) => {
                    for (r, b) in recs.iter().zip(storage.iter()) {
                        let msg = b.get(..r.len).unwrap_or_default();
                        server.send(&Transmit::single(r.src, msg)).unwrap();
                    }
                }
                Input::Woken => break,
                Input::Deadline => {}
            }
        }
    });
    let clock = Clock::new();
    let mut storage = vec![vec![0u8; 65_536]; 4];
    let msg = [1u8; 16];
    let mut rtts = Vec::new();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let t0 = Instant::now();
        client.send(&Transmit::single(saddr, &msg)).unwrap();
        let deadline = clock.now() + 1_000_000;
        let mut slices: Vec<IoSliceMut<'_>> =
            storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        match wait_for_input(&client, &mut slices, &clock, Some(deadline), mode).unwrap() {
            Input::Datagrams(_) => rtts.push(t0.elapsed().as_secs_f64() * 1e6),
            _ => eprintln!("ping lost"),
        }
    }
    stop.notify().unwrap();
    h.join().unwrap();
    stats(rtts)
}

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let median = v[v.len() / 2];
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (median, mean)
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    println!("loopback 127.0.0.1 -> 127.0.0.2, {secs} s per case; datagram = 12 B BTH + payload + 4 B ICRC; MB = 1e6 B of payload");
    // The machines are noisy (TCP alone varies 2-3x within a run), so every UDP case is
    // compared with a TCP stream measured right before it; the TCP column is that baseline.
    let mut tcps = Vec::new();
    for payload in [1024usize, 4096] {
        for (send, recv, name) in [
            (
                Send::OnePerSyscall,
                Recv::OnePerSyscall,
                "1/sendmsg, 1/recvfrom",
            ),
            (
                Send::OnePerSyscall,
                Recv::Batched,
                "1/sendmsg, recvmmsg+GRO",
            ),
            (Send::Gso, Recv::OnePerSyscall, "GSO, 1/recvfrom"),
            (Send::Gso, Recv::Batched, "GSO, recvmmsg+GRO"),
        ] {
            let tcp = tcp_case(secs);
            let r = udp_case(payload, send, recv, secs);
            let label = format!("UDP {payload:>4} B: {name}");
            println!(
                "{label:<34} {:>6.0} MB/s  cpu {:>5.2} s/GB  {:>7.0} sends/s  loss {:>4.1}%  | TCP {:>5.0} MB/s cpu {:>4.2} s/GB | {:.2}x TCP",
                r.mb_s,
                r.cpu_s_per_gb,
                r.syscalls_per_s,
                r.loss * 100.0,
                tcp.mb_s,
                tcp.cpu_s_per_gb,
                r.mb_s / tcp.mb_s
            );
            tcps.push(tcp.mb_s);
        }
    }
    let lo = tcps.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = tcps.iter().copied().fold(0.0, f64::max);
    println!("TCP stream (64 KiB writes) ranged {lo:.0} .. {hi:.0} MB/s over the run");
    let (tm, ta) = tcp_pingpong(secs);
    println!(
        "{:<44} median {tm:>6.1} us  mean {ta:>6.1} us",
        "TCP ping-pong 16 B (nodelay)"
    );
    for (name, mode) in [
        ("UDP ping-pong 16 B, blocking (epoll)", PollMode::Blocking),
        ("UDP ping-pong 16 B, busy-poll", PollMode::BusyPoll),
        (
            "UDP ping-pong 16 B, spin 50 us then block",
            PollMode::SpinThenBlock(Duration::from_micros(50)),
        ),
    ] {
        let (m, a) = udp_pingpong(secs, mode);
        println!(
            "{name:<44} median {m:>6.1} us  mean {a:>6.1} us  = {:.2}x TCP (median)",
            m / tm
        );
    }
}
