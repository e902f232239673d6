//! A device's multicast groups on the network: the IGMP join the kernel's RDMA CM makes
//! for a full member (`cma_igmp_send` → `ip_mc_inc_group` on the port's netdev), here a UDP
//! socket of the device's own bound to `<group>:4791` and joined to the group on the
//! interface of the device's address (`IP_ADD_MEMBERSHIP`). What it receives goes through
//! the device's node as the loop's datagrams do (`Shared::inject`); the transport hands a
//! packet to the QPs attached to its MGID (`softrdma_core::transport::mcast`).
//!
//! Why a socket of its own: the device's socket is bound to its unicast `<ip>:4791`, and
//! Linux hands a multicast datagram only to sockets bound to the group's address or the
//! wildcard. Several processes on one host may hear the same group (SO_REUSEADDR: each
//! gets its copy). Sending needs nothing: a UD send to the group's GID leaves the device's
//! socket for `<group>:4791`, and Linux routes a multicast datagram from a bound source out
//! of that source's interface (and loops it back to local members: `IP_MULTICAST_LOOP`).
//!
//! One socket per device and group, counted: the interface leaves the group with the last
//! join ([`Device::leave_multicast`]). A receive thread per group reads it (a short read
//! timeout lets it notice the leave).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use softrdma_wire::icrc::ROCE_V2_PORT;

use crate::device::{Device, Shared};

/// `SO_RCVBUF` of a group's socket (the device socket's default, `EndpointConfig`).
const GROUP_RECV_BUFFER: usize = 4 << 20;

/// How often a group's receive thread looks whether it should stop.
const STOP_POLL: Duration = Duration::from_millis(100);

struct Group {
    joins: u32,
    /// The device whose socket this is (an entry whose device is gone is stale: a new
    /// device at the same address starts over).
    dev: Weak<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

type Key = (SocketAddr, IpAddr);

fn groups() -> MutexGuard<'static, HashMap<Key, Group>> {
    static G: OnceLock<Mutex<HashMap<Key, Group>>> = OnceLock::new();
    G.get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// The group's socket: bound to `<group>:4791`, joined on the interface of `local`.
fn group_socket(local: IpAddr, group: IpAddr) -> io::Result<Socket> {
    let (IpAddr::V4(l), IpAddr::V4(g)) = (local, group) else {
        // cma_iboe_join_multicast: -ENOTSUPP for an IPv6 group on RoCEv2.
        return Err(io::Error::from(io::ErrorKind::Unsupported));
    };
    if !g.is_multicast() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    // The device socket's receive buffer: a burst of UD SENDs to the group (mckey posts all
    // its messages at once) waits here while the thread hands them to the node one by one.
    crate::udp::set_buffer(&s, GROUP_RECV_BUFFER, true);
    s.set_reuse_address(true)?;
    s.bind(&SocketAddrV4::new(g, ROCE_V2_PORT).into())?;
    s.join_multicast_v4(&g, &l)?;
    s.set_read_timeout(Some(STOP_POLL))?;
    Ok(s)
}

fn receive(sock: Socket, group: IpAddr, dev: Weak<Shared>, stop: Arc<AtomicBool>) {
    let sock = std::net::UdpSocket::from(sock);
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Acquire) {
        match sock.recv_from(&mut buf) {
            Ok((n, src)) => {
                let Some(d) = dev.upgrade() else { return };
                d.inject(src, group, &buf[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => std::thread::sleep(STOP_POLL),
        }
        if dev.strong_count() == 0 {
            return;
        }
    }
}

impl Device {
    /// Joins the device's interface to the IP multicast group `group` (a full member's
    /// `rdma_join_multicast`): from now on the device receives the group's datagrams.
    /// Counted: each join needs its [`Device::leave_multicast`]. The error is the socket's
    /// (`bind` or `IP_ADD_MEMBERSHIP`: e.g. `ENODEV` when no interface has the device's
    /// address); an IPv6 group is `Unsupported`.
    pub fn join_multicast(&self, group: IpAddr) -> io::Result<()> {
        let local = self.local_addr();
        let mut g = groups();
        if let Some(e) = g.get_mut(&(local, group)) {
            if std::ptr::eq(e.dev.as_ptr(), Arc::as_ptr(self.shared())) {
                e.joins += 1;
                return Ok(());
            }
            // Left behind by a device that is gone: its thread ends by itself.
            e.stop.store(true, Ordering::Release);
            g.remove(&(local, group));
        }
        let sock = group_socket(local.ip(), group)?;
        let stop = Arc::new(AtomicBool::new(false));
        let weak = Arc::downgrade(self.shared());
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("softrdma-mc-{group}"))
            .spawn(move || receive(sock, group, weak, st))?;
        g.insert(
            (local, group),
            Group {
                joins: 1,
                dev: Arc::downgrade(self.shared()),
                stop,
                thread: Some(thread),
            },
        );
        Ok(())
    }

    /// Undoes one [`Device::join_multicast`]; the last one closes the group's socket (the
    /// kernel sends the IGMP leave). Leaving a group not joined does nothing.
    pub fn leave_multicast(&self, group: IpAddr) {
        let key = (self.local_addr(), group);
        let gone = {
            let mut g = groups();
            match g.get_mut(&key) {
                Some(e) if e.joins > 1 => {
                    e.joins -= 1;
                    None
                }
                Some(_) => g.remove(&key),
                None => None,
            }
        };
        if let Some(mut e) = gone {
            e.stop.store(true, Ordering::Release);
            if let Some(t) = e.thread.take() {
                if t.thread().id() != std::thread::current().id() {
                    let _ = t.join();
                }
            }
        }
    }

    /// The groups this device's interface is joined to.
    pub fn multicast_groups(&self) -> Vec<IpAddr> {
        let local = self.local_addr();
        let mut v: Vec<IpAddr> = groups()
            .keys()
            .filter(|(l, _)| *l == local)
            .map(|(_, g)| *g)
            .collect();
        v.sort();
        v
    }
}
