//! softrdma's driver: the one place with sockets and a real clock.
//!
//! The sans-IO core (`softrdma-core`) is driven with `handle_datagram(now, bytes)`,
//! `handle_timeout(now)` and drained with `poll_transmit()` / `poll_timeout()`; this crate owns
//! what those calls need from the operating system:
//!
//! - [`udp`]: [`UdpEndpoint`], one unconnected, DF-set, non-blocking UDP socket per device on
//!   `<ip>:4791` (IPv4 or IPv6), with batched receive (`recvmmsg` + GRO), GSO send, blocking
//!   waits with timeouts, and a [`Capabilities`] query. Built on `quinn-udp` and
//!   `socket2`/`rustix`, so the crate needs no `unsafe`.
//! - [`clock`]: [`Clock`], `std::time::Instant` mapped to [`Micros`] (u64 microseconds since an
//!   arbitrary epoch, the representation of the core's `time::Instant`).
//! - [`timer`]: [`wait_for_input`], the event loop's wait until the earlier of the core's next
//!   timeout and socket input, sleeping in epoll or busy-polling ([`PollMode`]), and
//!   [`Notifier`] to wake it from other threads.
//! - [`device`]: the device runtime: [`Device`] (one endpoint + one `softrdma_core::Stack` +
//!   the clock, the blocking verbs API, its event loop on a background thread or inline in the
//!   caller's CQ polls) and [`AsyncDevice`] (futures that resolve on completions; any
//!   executor — its docs say how to use it from tokio). Its docs say how ICRCs are re-sealed
//!   for the socket's source port and GSO IP IDs, and what the GID indices of a driver device
//!   are.
//! - [`tap`]: [`Tap`], the pcap tap (`--pcap FILE`): every datagram sent and received, with
//!   synthesised Ethernet/IP/UDP headers whose IPv4 IDs make every ICRC verify.
//!
//! # Wire facts: what the kernel puts in the IPv4 header of our datagrams
//!
//! The RoCEv2 ICRC covers the IPv4 header with only TOS, TTL and checksum masked, so the
//! **identification field is inside the CRC** and a sender that computes the ICRC before the
//! kernel writes the header must know the ID the kernel will choose. Measured on this machine's
//! kernel (Linux 6.18) with `scripts/wire-facts.sh` (the `wire_facts` example sends, `dumpcap`
//! captures `lo`, `tshark -e ip.id` reads the IDs; 100-byte datagrams 127.0.0.1 → 127.0.0.2):
//!
//! | socket (src port in the script)                       | DF | IP IDs of 5 sends              |
//! |-------------------------------------------------------|----|--------------------------------|
//! | **unconnected, `IP_PMTUDISC_DO`** ([`UdpEndpoint`])    | 1  | `0 0 0 0 0`                    |
//! | unconnected, `IP_PMTUDISC_PROBE` (quinn-udp's default) | 1  | `0 0 0 0 0`                    |
//! | unconnected, kernel default (`IP_PMTUDISC_WANT`)       | 1  | `0x1464 0x1465 …` (counter)    |
//! | connected, `IP_PMTUDISC_DO`                            | 1  | `0x72aa 0x72ab …` (random base)|
//!
//! So: **an unconnected socket with DF forced (DO or PROBE) sends ID 0**, as DESIGN §3 says.
//! The default `WANT` also sets DF on small packets but still takes IDs from the kernel's
//! global generator, and a connected socket counts from a random per-socket base — neither is
//! predictable, which is why [`UdpEndpoint`] is never connected and forces `PMTUDISC_DO`
//! (tested in `tests/loopback.rs`: `df_is_set_and_buffers_are_large`). This matches the
//! kernel's `ip_select_ident_segs()` (include/net/ip.h): a socket with a destination uses its
//! own counter; otherwise DF set and `!skb->ignore_df` (true for DO and PROBE, false for WANT)
//! gives ID 0, and anything else the hashed generator.
//!
//! ## UDP GSO: the segments' IDs count up from the first
//!
//! Two GSO sends of 5 × 1000 bytes each. On the host's `lo` the GSO packet is never segmented
//! (loopback takes GSO packets whole: the capture shows one 5028-byte IP packet per send, ID 0,
//! and the receiving socket either gets it coalesced via GRO or split by `udp_rcv_segment`). To
//! see the segments as a device without UDP segmentation offload emits them (a tap into a
//! guest without USO, e.g. the lab's 6.1 guest), the script repeats the sends in a private
//! network namespace whose `lo` has `gso_max_segs 1`, forcing software segmentation before the
//! capture point:
//!
//! | socket                         | IDs, 1st send             | IDs, 2nd send             |
//! |--------------------------------|---------------------------|---------------------------|
//! | unconnected, DO ([`UdpEndpoint`]) | `0 1 2 3 4`            | `0 1 2 3 4`               |
//! | connected, DO                  | `0x64b5 … 0x64b9`         | `0x64b6 … 0x64ba`         |
//!
//! So **segment *k* of a GSO send carries IP ID *k*** (0 for the first, then upwards; at most
//! 64 segments, no wrap), restarting at 0 for every send. The sender computes each packet's
//! ICRC over ID = its index within the GSO transmit it goes out in; a packet sent on its own
//! has ID 0. (The connected socket advances its counter by only 1 per GSO send, so its
//! segments' IDs overlap between sends: one more reason not to connect.) A NIC doing the
//! segmentation in hardware (USO) is asked by Linux to increment the ID the same way, but that
//! is the NIC's doing: where that matters, send RoCE packets without GSO
//! ([`EndpointConfig::gso`] = false) or verify against a capture on that NIC.
//!
//! ## GRO on loopback
//!
//! From `wire_facts gro` (receiver = [`UdpEndpoint`], GRO on, 32 receive buffers):
//!
//! - 32 separate 1000-byte `sendmsg`s back to back: 32 records, each `len 1000 seg 1000`. Loopback
//!   does not run GRO (its receive path is `netif_rx`, not NAPI), so individual datagrams are
//!   never coalesced.
//! - one GSO send of 10 × 1000 + 77 bytes: 1 record, `len 10077 seg 1000`; two GSO sends of
//!   4 × 4096: 2 records, `len 16384 seg 4096`. The GSO packet crosses `lo` whole and is handed
//!   to a GRO socket as it was sent: [`RecvDatagram::segment_size`] is the sender's segment size
//!   and the last segment may be short. GRO never merges two sends.
//! - the same 10 × 1000 + 77 with GSO off: 11 records, the last `len 77 seg 77`.
//!
//! A receiver therefore always iterates [`RecvDatagram::segments`]; on a real NIC, GRO may also
//! coalesce separately sent datagrams of one flow, with the same record format.
//!
//! ## IPv6
//!
//! No identification field; [`UdpEndpoint`] sets `IPV6_MTU_DISCOVER = IPV6_PMTUDISC_DO` and
//! `IPV6_DONTFRAG` (the latter by quinn-udp), and the socket is v6-only.
//!
//! # Throughput on loopback
//!
//! `examples/udp_probe.rs` (release build; `cargo run --release --example udp_probe`) sends
//! RDMA-WRITE-MIDDLE-sized datagrams (12 B BTH + payload + 4 B ICRC) flat out from 127.0.0.1 to
//! 127.0.0.2 and counts the payload the receiver got, each case right after a TCP stream of the
//! same length as its baseline (the first runs used one TCP figure per run). Six runs on the 2-core development VM (other builds and lab
//! guests running, so TCP alone ranged 573–2128 MB/s; ratios are to the adjacent TCP run):
//!
//! | payload | send / receive                      | × TCP          | CPU s/GB  |
//! |---------|-------------------------------------|----------------|-----------|
//! | 1024    | 1 `sendmsg` / 1 `recvfrom` each     | 0.09 – 0.14    | 7 – 10    |
//! | 1024    | 1 `sendmsg` each / `recvmmsg`+GRO   | 0.06 – 0.12    | 8 – 11    |
//! | 1024    | GSO (63 per send) / 1 `recvfrom`    | 0.25 – 0.36    | 2 – 3     |
//! | 1024    | GSO / `recvmmsg`+GRO                | 1.3 – 2.5      | 0.4 – 0.6 |
//! | 4096    | 1 `sendmsg` / 1 `recvfrom` each     | 0.20 – 0.56    | 2.2 – 2.8 |
//! | 4096    | GSO (15 per send) / 1 `recvfrom`    | 0.64 – 1.44    | 0.8 – 0.95|
//! | 4096    | GSO / `recvmmsg`+GRO                | 0.95 – 2.9     | 0.45      |
//!
//! (TCP: 0.45–1.2 CPU s/GB.) A `sendmsg` or `recvfrom` costs about 5 µs here, so one datagram
//! per syscall tops out near 100–190 k datagrams/s: **0.5× TCP is out of reach without GSO**,
//! at any MTU. With GSO the receive side decides: at MTU 1024 only GSO + GRO (on loopback the
//! GSO train arrives whole, one buffer per send) clears 0.5×; at MTU 4096 GSO alone does. The
//! UDP cases lose 17–45 % because the sender runs unpaced; RC's ACK window will pace it.
//! The same probe's 16-byte ping-pong: TCP 16–21 µs median, UDP with epoll waits 20–26 µs
//! (≈1.2× TCP); busy-polling both ends in one process on 2 oversubscribed cores gave 13–16 µs
//! medians in quiet moments and multi-millisecond stalls otherwise (spinning threads are
//! descheduled), so busy-poll pays only where a core is free for each spinner.

#![forbid(unsafe_code)]

pub mod clock;
pub mod cm;
pub mod device;
pub mod tap;
pub mod timer;
pub mod udp;

pub use clock::{Clock, Micros};
pub use device::{
    AsyncDevice, Device, DeviceConfig, DriverCounters, Error, Progress, Result as DeviceResult,
};
pub use tap::Tap;
pub use timer::{wait_for_input, Input, Notifier, PollMode};
pub use udp::{
    Capabilities, EndpointConfig, IoStats, Readiness, RecvDatagram, Transmit, UdpEndpoint,
    ROCEV2_PORT,
};
