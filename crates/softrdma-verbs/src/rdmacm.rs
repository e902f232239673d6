//! The process's RDMA CM, for softrdma's `librdmacm.so.1` ([`crate::cm_abi`] is the interface,
//! `cm_exports` its C side).
//!
//! It lives in this library because the devices do: the CM is a MAD client of the verbs
//! device of each address it uses ([`softrdma_driver::cm::Cm::add_device`]), so it shares that
//! device's `<ip>:4791` socket and loop, and the `ibv_context` an id shows as `id->verbs` is
//! that same device — the PD, CQs and QP the program makes on it are the ones the CM moves.
//! One context per device is opened for the CM, on first use, and kept for the process's
//! lifetime (as rdma-core's librdmacm keeps its `cma_device` contexts).
//!
//! **Addresses on the loopback.** An id bound to a 127.0.0.0/8 address opens the loopback's
//! device at exactly that address (any 127/8 address is local), so a server on one host can be
//! reached at the address it names; a client's source (`rdma_resolve_addr` without one) is
//! the loopback device wherever it opened (127.0.0.1, or the first free 127.0.0.x when another
//! process holds it, as `ibv_open_device` does). The loopback device of a process has one
//! address: a later bind to another 127/8 address binds the device's.
//! `SOFTRDMA_LOOPBACK_ADDR=127.x.y.z` names the address the loopback device takes when no
//! call names one (a wildcard listener: perftest's `-R` server).
//!
//! **Events.** One thread takes the CM's events ([`softrdma_driver::cm::Cm::wait_event`]) and
//! queues each on the channel of its id (a CONNECT_REQUEST: of its listener, whose channel
//! the new id joins); a channel's descriptor is an eventfd in semaphore mode counting its
//! queued events, so `poll()` works on it and a read honours its `O_NONBLOCK`.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use softrdma_core::cm::CmPort;
use softrdma_core::rdma_cm::multicast::{mgid_of, JoinError, JoinFlags};
use softrdma_core::rdma_cm::{
    ConnParam, Ece, PortSpace, RdmaCm, RdmaCmError, RdmaCmEvent, RdmaCmEventType, RdmaCmId,
    RdmaOption,
};
use softrdma_core::time::Instant;
use softrdma_core::verbs::QpType;
use softrdma_core::Stack;
use softrdma_driver::cm::{Cm, Event};
use softrdma_driver::Device;

use crate::cm_abi::{CmEventOut, CmIdInfo, SockaddrStorage, EVENT_PRIVATE_DATA_MAX};
use crate::entry::Errno;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The errno librdmacm returns for an RDMA CM refusal.
pub fn cm_errno(e: &RdmaCmError) -> Errno {
    Errno(match e {
        RdmaCmError::NoSuchId | RdmaCmError::InvalidState | RdmaCmError::Invalid => libc::EINVAL,
        RdmaCmError::FamilyMismatch | RdmaCmError::TooLong => libc::EINVAL,
        RdmaCmError::NoDevice => libc::ENODEV,
        RdmaCmError::AddrInUse => libc::EADDRINUSE,
        RdmaCmError::NoFreePort => libc::EADDRNOTAVAIL,
        RdmaCmError::Cm(softrdma_core::cm::CmError::IsConnected) => libc::EISCONN,
        RdmaCmError::Cm(_) => libc::EINVAL,
        RdmaCmError::Verbs(v) => return crate::conv::verbs_errno(v),
    })
}

/// The kernel's `ENOTSUPP` (524), what joining an IPv6 group on RoCEv2 returns.
const ENOTSUPP: i32 = 524;

fn join_errno(e: &JoinError) -> Errno {
    match e {
        JoinError::Rdma(r) => cm_errno(r),
        JoinError::NotSupported => Errno(ENOTSUPP),
        JoinError::NotJoined => Errno(libc::EADDRNOTAVAIL),
    }
}

fn drv_errno(e: &softrdma_driver::cm::Error) -> Errno {
    match e {
        softrdma_driver::cm::Error::Rdma(r) => cm_errno(r),
        _ => Errno::EINVAL,
    }
}

/// How long `rdma_destroy_id` waits for the DREP of a DREQ it sent.
const DREP_WAIT: Duration = Duration::from_millis(1500);

/// An event channel.
pub struct Chan {
    /// Counts the queued events (eventfd, semaphore mode, blocking unless the program sets
    /// `O_NONBLOCK`).
    pub fd: OwnedFd,
    /// As librdmacm will read them (a CONNECT_REQUEST's new id already in the id table).
    events: Mutex<VecDeque<CmEventOut>>,
}

struct IdEntry {
    /// `None` once rejected (the core consumed it); the program still destroys the id.
    id: Option<RdmaCmId>,
    chan: u32,
}

/// A device context the CM opened and runs on.
pub struct CtxEntry {
    /// `ibv_context *`.
    pub ctx: usize,
    pub port: CmPort,
    /// The addresses its device serves (the first its first; a loopback device also serves
    /// `::1` unless another process holds it).
    pub ips: Vec<IpAddr>,
    pub loopback: bool,
    /// The PD `rdma_create_qp(id, NULL, …)` uses (`ibv_pd *`), made on first need.
    pub pd: usize,
}

#[derive(Default)]
struct State {
    chans: HashMap<u32, Arc<Chan>>,
    next_chan: u32,
    ids: HashMap<u32, IdEntry>,
    ctxs: Vec<CtxEntry>,
}

/// The process's RDMA CM.
pub struct Proc {
    pub cm: Cm,
    st: Mutex<State>,
}

/// The process's RDMA CM, started on first use with its event thread.
pub fn proc_() -> &'static Proc {
    static P: OnceLock<Proc> = OnceLock::new();
    P.get_or_init(|| {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ u64::from(std::process::id()).rotate_left(32);
        let cm = Cm::new(seed);
        cm.keep_ib_events(false);
        let ev = cm.clone();
        // The thread lives as long as the process (the CM does too).
        let _ = std::thread::Builder::new()
            .name("softrdma-rdmacm".into())
            .spawn(move || loop {
                if let Some(Event::Rdma(e)) = ev.wait_event(Duration::from_millis(200)) {
                    proc_().route(e);
                }
            });
        Proc {
            cm,
            st: Mutex::new(State {
                next_chan: 1,
                ..State::default()
            }),
        }
    })
}

/// `SOFTRDMA_LOOPBACK_ADDR`: where the CM opens the loopback device when no call names an
/// address (a wildcard listener, a client's source), e.g. `127.0.23.7`, so that a server
/// which cannot bind an address (perftest's `-R` server) is reachable at a known one.
fn loopback_override() -> Option<IpAddr> {
    std::env::var("SOFTRDMA_LOOPBACK_ADDR")
        .ok()?
        .parse::<IpAddr>()
        .ok()
        .filter(IpAddr::is_loopback)
}

/// `SOFTRDMA_CONNECT_DELAY_MS`: a test aid (like `softrdma rping --accept-delay`): each
/// `rdma_connect` waits this long before its REQ leaves. perftest's `-R` client connects a
/// second time right after its parameter exchange while its server only then listens again;
/// a native client wins that race against a slow (emulated) server and gets REJ 8 (invalid
/// service ID), as a kernel client would, and perftest's retry loop cannot recover (it retries
/// on ids it destroyed). The lab's `librdmacm_send_bw_guest_server` sets it.
pub fn connect_delay() -> Option<Duration> {
    static D: OnceLock<Option<Duration>> = OnceLock::new();
    *D.get_or_init(|| {
        std::env::var("SOFTRDMA_CONNECT_DELAY_MS")
            .ok()?
            .parse::<u64>()
            .ok()
            .filter(|&ms| ms > 0 && ms <= 60_000)
            .map(Duration::from_millis)
    })
}

fn is_loopback(ip: &IpAddr) -> bool {
    ip.is_loopback()
}

impl Proc {
    /// Queues `e` on its id's channel (a CONNECT_REQUEST: the listener's, which its new id
    /// joins); the event of an id destroyed meanwhile is dropped, its new id destroyed.
    fn route(&self, e: RdmaCmEvent) {
        let mut st = lock(&self.st);
        let owner = e.listen_id().unwrap_or(e.id()).value();
        let out = event_out(&e);
        let Some(chan) = st.ids.get(&owner).map(|i| i.chan) else {
            drop(st);
            if let Some(n) = e.into_new_id() {
                self.destroy_core(n);
            }
            return;
        };
        if let Some(n) = e.into_new_id() {
            st.ids
                .insert(n.name().value(), IdEntry { id: Some(n), chan });
        }
        if let Some(c) = st.chans.get(&chan).cloned() {
            drop(st);
            lock(&c.events).push_back(out);
            // An eventfd write only fails when the counter would overflow.
            let _ = rustix::io::write(&c.fd, &1u64.to_ne_bytes());
        }
    }

    /// The time for a CM command that is not run on a device's port: the first device's
    /// clock, or zero before any device is open.
    fn cm_now(&self) -> Instant {
        self.cm
            .devices()
            .first()
            .map(|(_, d)| d.now())
            .unwrap_or_default()
    }

    fn destroy_core(&self, id: RdmaCmId) {
        let now = self.cm_now();
        self.cm.with_cm(|r| r.destroy(now, id));
    }

    /// `rdma_create_event_channel`.
    pub fn chan_create(&self) -> Result<(u32, Arc<Chan>), Errno> {
        let fd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::SEMAPHORE,
        )
        .map_err(|e| Errno(e.raw_os_error()))?;
        let c = Arc::new(Chan {
            fd,
            events: Mutex::new(VecDeque::new()),
        });
        let mut st = lock(&self.st);
        let h = st.next_chan;
        st.next_chan = st.next_chan.wrapping_add(1).max(1);
        st.chans.insert(h, c.clone());
        Ok((h, c))
    }

    /// `rdma_destroy_event_channel`: `EBUSY` while ids use it (librdmacm asserts instead).
    pub fn chan_destroy(&self, chan: u32) -> Result<(), Errno> {
        let mut st = lock(&self.st);
        if st.ids.values().any(|i| i.chan == chan) {
            return Err(Errno::EBUSY);
        }
        st.chans.remove(&chan).map(drop).ok_or(Errno::EINVAL)
    }

    /// `rdma_get_cm_event`: waits on the channel's descriptor, then takes the event (events
    /// of ids destroyed after they were queued are skipped).
    pub fn get_event(&self, chan: u32) -> Result<CmEventOut, Errno> {
        let c = lock(&self.st)
            .chans
            .get(&chan)
            .cloned()
            .ok_or(Errno::EINVAL)?;
        loop {
            let mut b = [0u8; 8];
            rustix::io::read(&c.fd, &mut b).map_err(|e| Errno(e.raw_os_error()))?;
            let Some(e) = lock(&c.events).pop_front() else {
                continue;
            };
            if lock(&self.st).ids.contains_key(&e.id) {
                return Ok(e);
            }
        }
    }

    /// `rdma_create_id`.
    pub fn id_create(&self, chan: u32, ps: u16, qp_type: i32) -> Result<u32, Errno> {
        let ps = PortSpace(ps);
        if !matches!(
            ps,
            PortSpace::TCP | PortSpace::UDP | PortSpace::IB | PortSpace::IPOIB
        ) {
            return Err(Errno(libc::EPROTONOSUPPORT));
        }
        let _ = qp_type;
        if !lock(&self.st).chans.contains_key(&chan) {
            return Err(Errno::EINVAL);
        }
        let id = self.cm.with_cm(|r| r.create_id_ps(ps));
        let h = id.name().value();
        lock(&self.st).ids.insert(h, IdEntry { id: Some(id), chan });
        Ok(h)
    }

    /// `rdma_destroy_id`. An id whose DREQ is still unanswered waits for the DREP (at most
    /// `DREP_WAIT`): the kernel's CM outlives the process and takes that DREP itself; ours
    /// lives in the process, and a program that exits right after `rdma_destroy_id` (rping's
    /// client) would otherwise leave the peer's DREP to an ICMP port unreachable.
    pub fn id_destroy(&self, h: u32) -> Result<(), Errno> {
        let start = std::time::Instant::now();
        while start.elapsed() < DREP_WAIT
            && self.with_id(h, |id| {
                self.cm.with_cm(|r| r.cm_state(id.name()))
                    == Some(softrdma_core::cm::CmState::DreqSent)
            })?
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.leave_all_mc(h);
        let e = lock(&self.st).ids.remove(&h).ok_or(Errno::EINVAL)?;
        if let Some(id) = e.id {
            self.destroy_core(id);
        }
        Ok(())
    }

    /// `rdma_migrate_id`: the id's future events go to `chan`.
    pub fn id_migrate(&self, h: u32, chan: u32) -> Result<(), Errno> {
        let mut st = lock(&self.st);
        if !st.chans.contains_key(&chan) {
            return Err(Errno::EINVAL);
        }
        st.ids.get_mut(&h).ok_or(Errno::EINVAL)?.chan = chan;
        Ok(())
    }

    /// Runs `f` with the live core id `h`.
    /// Runs the CM command `f` on id `h`, with the stack and clock of the id's device; the
    /// driver's and the CM's errors as errnos.
    fn cm_call(
        &self,
        h: u32,
        f: impl FnOnce(&mut RdmaCm, &mut Stack, Instant, &RdmaCmId) -> Result<(), RdmaCmError>,
    ) -> Result<(), Errno> {
        let port = self.port_of(h)?;
        self.with_id(h, |id| {
            self.cm.with(port, |r, stack, now| f(r, stack, now, id))
        })?
        .map_err(|e| drv_errno(&e))?
        .map_err(|e| cm_errno(&e))
    }

    fn with_id<R>(&self, h: u32, f: impl FnOnce(&RdmaCmId) -> R) -> Result<R, Errno> {
        let st = lock(&self.st);
        let id = st
            .ids
            .get(&h)
            .and_then(|e| e.id.as_ref())
            .ok_or(Errno::EINVAL)?;
        Ok(f(id))
    }

    /// The context the CM runs on for `ip`, opened now if needed: `exact` binds a loopback
    /// device at `ip` itself (see the module docs).
    pub fn ctx_for(&self, ip: IpAddr, exact: bool) -> Result<(usize, CmPort, IpAddr), Errno> {
        let mut st = lock(&self.st);
        if let Some(c) = st.ctxs.iter().find(|c| c.ips.contains(&ip)) {
            return Ok((c.ctx, c.port, ip));
        }
        if is_loopback(&ip) {
            let same = st.ctxs.iter().filter(|c| c.loopback).find_map(|c| {
                c.ips
                    .iter()
                    .find(|a| a.is_loopback() && a.is_ipv4() == ip.is_ipv4())
                    .map(|a| (c.ctx, c.port, *a))
            });
            if let Some(found) = same {
                return Ok(found);
            }
        }
        let devs = crate::exports::device_list();
        let found = devs
            .iter()
            .find(|(_, i)| i.addrs.contains(&ip))
            .or_else(|| {
                is_loopback(&ip)
                    .then(|| {
                        devs.iter().find(|(_, i)| {
                            i.addrs
                                .iter()
                                .any(|a| a.is_loopback() && a.is_ipv4() == ip.is_ipv4())
                        })
                    })
                    .flatten()
            });
        let (dev, info) = found.ok_or(Errno(libc::EADDRNOTAVAIL))?;
        let at = if is_loopback(&ip) {
            if exact {
                Some(ip)
            } else {
                loopback_override().filter(|a| a.is_ipv4() == ip.is_ipv4())
            }
        } else if info.addr() == Some(ip) {
            None
        } else {
            Some(ip)
        };
        // A context the program opened on that device (and address) already holds the
        // socket: the CM runs on it (one device per address and process).
        let want = match at {
            Some(a) => Some(a),
            None if is_loopback(&ip) => None,
            None => Some(ip),
        };
        let ctx = match crate::exports::adopt_context(*dev, want) {
            Some(c) => c,
            None => crate::exports::open_context(*dev as *mut _, at)?,
        };
        let d: Device = crate::exports::context_device(ctx)?;
        let port = self.cm.add_device(&d).map_err(|e| drv_errno(&e))?;
        let ips: Vec<IpAddr> = d.local_addrs().iter().map(|a| a.ip()).collect();
        // The address asked for when the device serves it, else (a loopback device on a free
        // 127.0.0.x, see crate::devices) its address of that family, else its first.
        let actual = ips
            .iter()
            .find(|a| **a == ip)
            .or_else(|| ips.iter().find(|a| a.is_ipv4() == ip.is_ipv4()))
            .copied()
            .unwrap_or_else(|| d.local_addr().ip());
        st.ctxs.push(CtxEntry {
            ctx: ctx as usize,
            port,
            ips,
            loopback: is_loopback(&ip),
            pd: 0,
        });
        Ok((ctx as usize, port, actual))
    }

    /// Every device's context (`rdma_get_devices`).
    pub fn all_contexts(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for (_, info) in crate::exports::device_list() {
            if let Some(ip) = info.addr() {
                if let Ok((c, _, _)) = self.ctx_for(ip, false) {
                    out.push(c);
                }
            }
        }
        out
    }

    /// The context and its PD slot of the CM port `port`.
    pub fn ctx_of_port(&self, port: CmPort) -> Option<(usize, usize)> {
        lock(&self.st)
            .ctxs
            .iter()
            .find(|c| c.port == port)
            .map(|c| (c.ctx, c.pd))
    }

    /// Remembers the PD made for `ctx`.
    pub fn set_pd(&self, ctx: usize, pd: usize) {
        if let Some(c) = lock(&self.st).ctxs.iter_mut().find(|c| c.ctx == ctx) {
            c.pd = pd;
        }
    }

    /// The CM port of id `h`.
    pub fn port_of(&self, h: u32) -> Result<CmPort, Errno> {
        self.with_id(h, |id| self.cm.with_cm(|r| r.port_of(id.name())))?
            .ok_or(Errno::EINVAL)
    }

    /// `rdma_bind_addr`.
    pub fn bind(&self, h: u32, addr: SocketAddr) -> Result<(), Errno> {
        let addr = if addr.ip().is_unspecified() {
            addr
        } else {
            let (_, _, ip) = self.ctx_for(addr.ip(), true)?;
            SocketAddr::new(ip, addr.port())
        };
        self.with_id(h, |id| self.cm.with_cm(|r| r.bind_addr(id, addr)))?
            .map(drop)
            .map_err(|e| cm_errno(&e))
    }

    /// `rdma_resolve_addr`.
    pub fn resolve_addr(
        &self,
        h: u32,
        src: Option<SocketAddr>,
        dst: SocketAddr,
    ) -> Result<(), Errno> {
        if let Some(s) = src.filter(|s| !s.ip().is_unspecified()) {
            let bound = self.with_id(h, |id| self.cm.with_cm(|r| r.local_addr(id.name())))?;
            if bound.is_none() {
                self.bind(h, s)?;
            }
        }
        let bound = self
            .with_id(h, |id| self.cm.with_cm(|r| r.local_addr(id.name())))?
            .filter(|b| !b.ip().is_unspecified());
        let src_ip = match bound {
            Some(b) => b.ip(),
            None => {
                let ip = softrdma_driver::cm::route_source(dst.ip()).ok_or(Errno::ENODEV)?;
                self.ctx_for(ip, false)?.2
            }
        };
        self.with_id(h, |id| self.cm.resolve_addr(id, Some(src_ip), dst))?
            .map_err(|e| drv_errno(&e))
    }

    /// `rdma_resolve_route`.
    pub fn resolve_route(&self, h: u32) -> Result<(), Errno> {
        self.with_id(h, |id| self.cm.with_cm(|r| r.resolve_route(id)))?
            .map_err(|e| cm_errno(&e))
    }

    /// `rdma_listen` (a wildcard listener: on every device's context).
    pub fn listen(&self, h: u32, backlog: i32) -> Result<(), Errno> {
        let bound = self.with_id(h, |id| self.cm.with_cm(|r| r.local_addr(id.name())))?;
        let backlog = u32::try_from(backlog).unwrap_or(0);
        self.with_id(h, |id| self.cm.with_cm(|r| r.listen(id, backlog)))?
            .map_err(|e| cm_errno(&e))?;
        // A wildcard listener hears every device: opened after the listen, so that a device
        // bound is one that answers its requests.
        if bound.is_none_or(|b| b.ip().is_unspecified()) {
            self.all_contexts();
        }
        Ok(())
    }

    /// `rdma_create_qp`'s transition of QP `qpn` (made on the id's device).
    pub fn init_qp(&self, h: u32, qpn: u32) -> Result<(), Errno> {
        self.cm_call(h, |r, stack, _, id| r.init_qp_for(stack, id, qpn))
    }

    /// `rdma_connect`: `qp`: the id's QP the CM moves, or the user's own QP number.
    pub fn connect(&self, h: u32, qp: Result<u32, u32>, p: &ConnParam) -> Result<(), Errno> {
        self.cm_call(h, |r, stack, now, id| match qp {
            Ok(qpn) => r.connect(now, stack, id, Some(qpn), p),
            Err(qpn) => r.connect_user_qp(now, stack, id, qpn, p),
        })
    }

    /// `rdma_accept`.
    pub fn accept(&self, h: u32, qpn: u32, p: &ConnParam) -> Result<(), Errno> {
        self.cm_call(h, |r, stack, now, id| r.accept(now, stack, id, qpn, p))
    }

    /// `rdma_reject` / `rdma_reject_ece`: the core id is consumed; the program's id stays
    /// until `rdma_destroy_id`.
    pub fn reject(&self, h: u32, data: &[u8], ece: bool) -> Result<(), Errno> {
        let mut st = lock(&self.st);
        let e = st.ids.get_mut(&h).ok_or(Errno::EINVAL)?;
        let id = e.id.take().ok_or(Errno::EINVAL)?;
        let now = self.cm_now();
        let r = self.cm.with_cm(|r| {
            if ece {
                r.reject_ece(now, id, data)
            } else {
                r.reject(now, id, data)
            }
        });
        match r {
            Ok(()) => Ok(()),
            Err((id, err)) => {
                if let Some(e) = st.ids.get_mut(&h) {
                    e.id = Some(id);
                }
                Err(cm_errno(&err))
            }
        }
    }

    /// `rdma_disconnect`.
    pub fn disconnect(&self, h: u32) -> Result<(), Errno> {
        self.cm_call(h, |r, stack, now, id| r.disconnect(now, stack, id))
    }

    /// `rdma_establish`.
    pub fn establish(&self, h: u32) -> Result<(), Errno> {
        self.cm_call(h, |r, _, now, id| r.establish(now, id))
    }

    /// `rdma_notify` (`softrdma_core::rdma_cm`'s `notify`: COMM_EST establishes a passive
    /// connection before its RTU).
    pub fn notify(&self, h: u32, event: i32) -> Result<(), Errno> {
        self.cm_call(h, |r, _, _, id| r.notify(id, event))
    }

    /// `rdma_init_qp_attr`.
    pub fn init_qp_attr(
        &self,
        h: u32,
        target: softrdma_core::verbs::QpState,
    ) -> Result<
        (
            softrdma_core::verbs::QpAttr,
            softrdma_core::verbs::QpAttrMask,
        ),
        Errno,
    > {
        self.with_id(h, |id| {
            self.cm.with_cm(|r| r.init_qp_attr(id.name(), target))
        })?
        .map_err(|e| cm_errno(&e))
    }

    /// `rdma_set_option(RDMA_OPTION_ID, …)`.
    pub fn set_option(&self, h: u32, opt: RdmaOption) -> Result<(), Errno> {
        self.with_id(h, |id| self.cm.with_cm(|r| r.set_option(id, opt)))?
            .map_err(|e| cm_errno(&e))
    }

    /// `rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH)` as the kernel takes it on a
    /// RoCE port (`ucma_set_ib_path` → `rdma_set_ib_path`): an id whose address is resolved
    /// takes the path (its L2 fields from the id's addresses, its traffic class from the
    /// record) and ROUTE_RESOLVED follows; in any other state `EINVAL`.
    pub fn set_ib_path(&self, h: u32, tclass: u8) -> Result<(), Errno> {
        let state = self.with_id(h, |id| self.cm.with_cm(|r| r.state(id.name())))?;
        if state != Some(softrdma_core::rdma_cm::CmaState::AddrResolved) {
            return Err(Errno::EINVAL);
        }
        self.set_option(h, RdmaOption::Tos(tclass))?;
        self.resolve_route(h)
    }

    /// `rdma_set_local_ece`.
    pub fn set_local_ece(&self, h: u32, ece: Ece) -> Result<(), Errno> {
        self.with_id(h, |id| self.cm.with_cm(|r| r.set_local_ece(id, ece)))?
            .map_err(|e| cm_errno(&e))
    }

    /// `rdma_get_remote_ece`.
    pub fn remote_ece(&self, h: u32) -> Result<Ece, Errno> {
        Ok(self
            .with_id(h, |id| self.cm.with_cm(|r| r.remote_ece(id.name())))?
            .unwrap_or_default())
    }

    /// `rdma_join_multicast_ex` ([`crate::mcast`]): the core's membership and its
    /// MULTICAST_JOIN, and for a full member the device's interface joined to the group
    /// first (its socket's error is the join's: nothing was recorded then).
    pub fn join_mc(&self, h: u32, addr: IpAddr, flags: JoinFlags) -> Result<(), Errno> {
        let port = self.port_of(h)?;
        let dev = self.cm.device(port).ok_or(Errno::EINVAL)?;
        let iface = flags == JoinFlags::FullMember && mgid_of(addr).is_some();
        if iface {
            dev.join_multicast(addr).map_err(|e| {
                Errno(
                    e.raw_os_error()
                        .unwrap_or(if e.kind() == std::io::ErrorKind::Unsupported {
                            ENOTSUPP
                        } else {
                            libc::EINVAL
                        }),
                )
            })?;
        }
        let r = self
            .with_id(h, |id| {
                self.cm.with(port, |r, stack, _| {
                    r.join_multicast(Some(stack), id, addr, flags)
                })
            })?
            .map_err(|e| drv_errno(&e))?;
        match r {
            Ok(_) => Ok(()),
            Err(e) => {
                if iface {
                    dev.leave_multicast(addr);
                }
                Err(join_errno(&e))
            }
        }
    }

    /// `rdma_leave_multicast`.
    pub fn leave_mc(&self, h: u32, addr: IpAddr) -> Result<(), Errno> {
        let m = self
            .with_id(h, |id| self.cm.with_cm(|r| r.leave_multicast(id, addr)))?
            .map_err(|e| join_errno(&e))?;
        if m.joins_interface() {
            if let Some(d) = self.port_of(h).ok().and_then(|p| self.cm.device(p)) {
                d.leave_multicast(addr);
            }
        }
        Ok(())
    }

    /// The groups id `h` is in, left as its destruction does (`cma_leave_mc_groups`).
    fn leave_all_mc(&self, h: u32) {
        let Ok(ms) = self.with_id(h, |id| self.cm.with_cm(|r| r.memberships(id))) else {
            return;
        };
        for m in ms {
            let _ = self.leave_mc(h, m.addr);
        }
    }

    /// What `struct rdma_cm_id` shows.
    pub fn info(&self, h: u32) -> Result<CmIdInfo, Errno> {
        let (local, remote, qp_type, port) = self.with_id(h, |id| {
            self.cm.with_cm(|r| {
                let n = id.name();
                (
                    r.local_addr(n),
                    r.remote_addr(n),
                    r.qp_type(n),
                    r.port_of(n),
                )
            })
        })?;
        let verbs = port
            .and_then(|p| self.ctx_of_port(p))
            .map(|(c, _)| c)
            .unwrap_or(0);
        let mut out = CmIdInfo {
            verbs: verbs as *mut core::ffi::c_void,
            src: sockaddr_storage(local),
            dst: sockaddr_storage(remote),
            sgid: local.map(|a| gid_of(a.ip())).unwrap_or([0; 16]),
            dgid: remote.map(|a| gid_of(a.ip())).unwrap_or([0; 16]),
            pkey: 0xffff,
            port_num: u8::from(verbs != 0),
            qp_type: if qp_type == Some(QpType::Ud) { 4 } else { 2 },
        };
        out.pkey = 0xffffu16.to_be();
        Ok(out)
    }
}

/// The RoCEv2 GID of an address (IPv4-mapped for IPv4).
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// A socket address as `struct sockaddr_storage` (all zeros for none).
pub fn sockaddr_storage(a: Option<SocketAddr>) -> SockaddrStorage {
    let mut b = [0u8; 128];
    match a {
        Some(SocketAddr::V4(v4)) => {
            b[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&v4.port().to_be_bytes());
            b[4..8].copy_from_slice(&v4.ip().octets());
        }
        Some(SocketAddr::V6(v6)) => {
            b[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&v6.port().to_be_bytes());
            b[4..8].copy_from_slice(&v6.flowinfo().to_be_bytes());
            b[8..24].copy_from_slice(&v6.ip().octets());
            b[24..28].copy_from_slice(&v6.scope_id().to_ne_bytes());
        }
        None => {}
    }
    SockaddrStorage(b)
}

/// The socket address in the first bytes of a `struct sockaddr` (`len` of them readable).
pub fn socket_addr(b: &[u8]) -> Result<SocketAddr, Errno> {
    let fam = u16::from_ne_bytes([
        *b.first().ok_or(Errno::EINVAL)?,
        *b.get(1).ok_or(Errno::EINVAL)?,
    ]);
    let port = |b: &[u8]| u16::from_be_bytes([b[2], b[3]]);
    match i32::from(fam) {
        libc::AF_INET if b.len() >= 8 => Ok(SocketAddr::new(
            IpAddr::from([b[4], b[5], b[6], b[7]]),
            port(b),
        )),
        libc::AF_INET6 if b.len() >= 28 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[8..24]);
            Ok(SocketAddr::new(IpAddr::from(o), port(b)))
        }
        libc::AF_INET | libc::AF_INET6 => Err(Errno::EINVAL),
        _ => Err(Errno(libc::EAFNOSUPPORT)),
    }
}

/// An event as librdmacm hands it over.
pub fn event_out(e: &RdmaCmEvent) -> CmEventOut {
    // Events without parameters report the defaults, as before the enum.
    let dflt = ConnParam::default();
    let param = e.param().unwrap_or(&dflt);
    let mut o = CmEventOut {
        id: e.id().value(),
        listen_id: e.listen_id().map(|l| l.value()).unwrap_or(0),
        event: RdmaCmEventType::ALL
            .iter()
            .position(|t| *t == e.kind())
            .unwrap_or(0) as i32,
        status: e.status(),
        responder_resources: param.responder_resources,
        initiator_depth: param.initiator_depth,
        flow_control: u8::from(param.flow_control),
        retry_count: param.retry_count,
        rnr_retry_count: param.rnr_retry_count,
        ..CmEventOut::default()
    };
    let n = e.private_data().len().min(EVENT_PRIVATE_DATA_MAX);
    o.private_data[..n].copy_from_slice(&e.private_data()[..n]);
    o.private_data_len = n as u32;
    if let Some(ud) = e.ud() {
        o.ud = 1;
        o.ud_qp_num = ud.qp_num;
        o.ud_qkey = ud.qkey;
        o.ah_is_global = 1;
        o.ah_dgid = ud.ah.dgid.0;
        o.ah_flow_label = ud.ah.flow_label;
        o.ah_sgid_index = ud.ah.sgid_index as u8;
        o.ah_hop_limit = ud.ah.hop_limit;
        o.ah_traffic_class = ud.ah.traffic_class;
        o.ah_sl = ud.ah.sl;
        o.ah_port_num = ud.ah.port_num;
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip_through_sockaddr_storage() {
        for a in ["127.0.23.1:7174", "[::1]:99"] {
            let a: SocketAddr = a.parse().unwrap_or_else(|_| unreachable!());
            let ss = sockaddr_storage(Some(a));
            assert_eq!(socket_addr(&ss.0), Ok(a));
        }
        assert_eq!(socket_addr(&[0, 0, 0, 0]), Err(Errno(libc::EAFNOSUPPORT)));
    }
}
