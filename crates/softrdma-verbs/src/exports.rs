//! Every exported verb and every ops-table function. Each is an `entry!`: a panic boundary
//! and rdma-core's return convention; pointers are checked through `crate::ptr` before use.

#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

use core::ffi::{c_char, c_int, c_void, CStr};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use softrdma_core::device::GidType;
use softrdma_core::verbs::{
    AccessFlags, AddressVector, CqId, Memory, PdId, QpInitAttr, QpType, RecvWr, SendOp, SendWr,
    Sge, SrqAttr, SrqId, UdDest,
};
use softrdma_driver::{Device, DeviceConfig, PollMode, Progress};

use crate::abi::*;
use crate::conv;
use crate::devices::{self, DevInfo};
use crate::entry::{entry, Errno};
use crate::ptr::{self, AppWindow};

// The `.symver` directives binding `sv__NAME` to `NAME@@VERSION` (build.rs).
#[cfg(not(test))]
include!(concat!(env!("OUT_DIR"), "/symver.rs"));

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ----- devices -----

/// A device in a `verbs_device`-shaped frame (rdma-core's private `driver.h`): the
/// `ibv_device`, then an `ops` pointer that no provider library recognises as its own (it
/// points at [`FRAME_OPS`]), then the rest of the frame zeroed.
#[repr(C)]
struct DeviceFrame {
    dev: ibv_device,
    ops: usize,
    refcount: i32,
    entry: [usize; 2],
    sysfs: usize,
    core_support: u64,
}

/// What a frame's `ops` points at: ours, and no provider's `verbs_device_ops`.
static FRAME_OPS: [u64; 8] = [0; 8];

struct Devices {
    /// (frame address, what it is).
    list: Vec<(usize, DevInfo)>,
}

fn devices() -> &'static Devices {
    static DEVS: OnceLock<Devices> = OnceLock::new();
    DEVS.get_or_init(|| {
        let list = devices::scan()
            .into_iter()
            .enumerate()
            .map(|(i, info)| {
                let mut dev = ibv_device {
                    ops: ibv_device_ops_compat::default(),
                    node_type: 1,      // IBV_NODE_CA
                    transport_type: 0, // IBV_TRANSPORT_IB
                    name: [0; SYSFS_NAME_MAX],
                    dev_name: [0; SYSFS_NAME_MAX],
                    dev_path: [0; SYSFS_PATH_MAX],
                    ibdev_path: [0; SYSFS_PATH_MAX],
                };
                conv::put_str(&mut dev.name, &info.name);
                conv::put_str(&mut dev.dev_name, &format!("softrdma{i}"));
                // No sysfs: the paths name the interface's, which exist, so
                // ibv_read_sysfs_file reads real files there (or fails as for a missing one).
                conv::put_str(
                    &mut dev.dev_path,
                    &format!("/sys/class/net/{}", info.ifname),
                );
                conv::put_str(
                    &mut dev.ibdev_path,
                    &format!("/sys/class/net/{}", info.ifname),
                );
                let frame = Box::leak(Box::new(DeviceFrame {
                    dev,
                    ops: FRAME_OPS.as_ptr() as usize,
                    refcount: 1,
                    entry: [0; 2],
                    sysfs: 0,
                    core_support: 0,
                }));
                (frame as *mut DeviceFrame as usize, info)
            })
            .collect();
        Devices { list }
    })
}

fn device_info(dev: *const ibv_device) -> Result<(usize, &'static DevInfo), Errno> {
    devices()
        .list
        .iter()
        .enumerate()
        .find(|(_, (a, _))| *a == dev as usize)
        .map(|(i, (_, info))| (i, info))
        .ok_or(Errno::EINVAL)
}

/// The arrays `ibv_get_device_list` handed out (as addresses: a `usize` has the layout of a
/// pointer), until `ibv_free_device_list`.
type DeviceLists = Vec<Box<[usize]>>;

fn lists() -> MutexGuard<'static, DeviceLists> {
    static L: OnceLock<Mutex<DeviceLists>> = OnceLock::new();
    lock(L.get_or_init(|| Mutex::new(Vec::new())))
}

entry! {
    export null fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
        let devs = devices();
        let mut arr: Vec<usize> = devs.list.iter().map(|(a, _)| *a).collect();
        let n = arr.len() as c_int;
        arr.push(0);
        let mut b = arr.into_boxed_slice();
        let p = b.as_mut_ptr().cast::<*mut ibv_device>();
        lists().push(b);
        if !num_devices.is_null() {
            // SAFETY: non-NULL: the caller's optional output integer.
            unsafe { ptr::write_out(num_devices, n)? };
        }
        Ok(p)
    }
}

entry! {
    export value fn ibv_free_device_list(list: *mut *mut ibv_device) -> () {
        let mut l = lists();
        if let Some(i) = l.iter().position(|a| std::ptr::eq(a.as_ptr(), list.cast::<usize>())) {
            l.swap_remove(i);
        }
    }
}

entry! {
    export value fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
        match device_info(device) {
            Ok(_) => {
                // SAFETY: a live frame (device_info found it): its name is NUL-terminated.
                unsafe { (*device).name.as_ptr() }
            }
            Err(e) => {
                crate::entry::set_errno(e);
                core::ptr::null()
            }
        }
    }
}

entry! {
    export value fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
        match device_info(device) {
            Ok((_, info)) => info.guid.to_be(),
            Err(e) => {
                crate::entry::set_errno(e);
                0
            }
        }
    }
}

entry! {
    export neg fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
        Ok(device_info(device)?.0 as c_int)
    }
}

// ----- contexts -----

/// A completion channel's Rust side.
struct ChanShared {
    fd: OwnedFd,
    events: Mutex<VecDeque<usize>>,
    users: AtomicI32,
}

struct Armed {
    cq: CqId,
    at: u64,
    chan: Arc<ChanShared>,
    cq_addr: usize,
}

/// What the context's watcher thread shares with the verbs.
struct CtxShared {
    dev: Device,
    /// The interface the device is of, whose addresses it follows ([`follow_addresses`]).
    ifname: String,
    armed: Mutex<Vec<Armed>>,
    stop: AtomicBool,
    /// The context's `async_fd` (an eventfd counting queued events) and the events.
    async_fd: OwnedFd,
    async_events: Mutex<VecDeque<ibv_async_event>>,
    /// The C objects async events name: QPs by number, CQs and SRQs by id.
    qps: Mutex<std::collections::HashMap<u32, usize>>,
    cqs: Mutex<std::collections::HashMap<u32, usize>>,
    srqs: Mutex<std::collections::HashMap<u32, usize>>,
    /// When the application last found a CQ empty ([`now_ns`]): while it busy-polls, its
    /// polls turn the device's loop and the watcher stays out of their way (see [`CtxRs::watch`]).
    app_polled: AtomicU64,
}

/// Nanoseconds since the library's first use (a monotonic clock the threads share).
fn now_ns() -> u64 {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// How long after the application's last poll the watcher waits for the loop's signals
/// again instead of napping.
const APP_POLL_GRACE: Duration = Duration::from_millis(2);

/// Notes a CQ poll of the application's. The poll itself turns the device in the caller's
/// thread when the CQ is empty (`DeviceConfig::app_turns`: non-blocking, nothing if another
/// thread holds the loop, `Device::poll_cq_into`), so a busy-polling application makes
/// progress itself, as `softrdma perf` and a kernel-bypass NIC driver do; while polls keep
/// coming the watcher naps between event checks instead of waking on every turn's signal.
fn note_poll(s: &CtxShared) {
    s.app_polled.store(now_ns(), Ordering::Relaxed);
}

/// A context's Rust side.
pub struct CtxRs {
    shared: Arc<CtxShared>,
    /// The interface's index (`ibv_gid_entry.ndev_ifindex`).
    ifindex: u32,
    watcher: Mutex<Option<JoinHandle<()>>>,
}

impl CtxRs {
    fn dev(&self) -> &Device {
        &self.shared.dev
    }

    /// Starts the context's watcher thread (once): it turns armed CQs' new completions into
    /// channel events (waiting for the signal of the loop's turns, or napping while the
    /// application busy-polls, [`note_poll`]: waking for every turn took the application's
    /// CPU for nothing), delivers async events, and once a second follows the interface's
    /// addresses ([`follow_addresses`]).
    fn watch(&self) {
        let mut w = lock(&self.watcher);
        if w.is_some() {
            return;
        }
        let s = self.shared.clone();
        *w = std::thread::Builder::new()
            .name("softrdma-cq-events".into())
            .spawn(move || {
                let mut addrs_seen = std::time::Instant::now();
                while !s.stop.load(Ordering::Acquire) {
                    if addrs_seen.elapsed() >= ADDR_POLL {
                        follow_addresses(&s);
                        addrs_seen = std::time::Instant::now();
                    }
                    let since = now_ns().saturating_sub(s.app_polled.load(Ordering::Relaxed));
                    if since > APP_POLL_GRACE.as_nanos() as u64 {
                        let _ = s
                            .dev
                            .progress_wait(PollMode::Blocking, Some(Duration::from_millis(10)));
                    } else {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    fire(&s);
                }
            })
            .ok();
    }
}

/// How often a context looks at its interface's addresses ([`follow_addresses`]).
const ADDR_POLL: Duration = Duration::from_secs(1);

/// The interface's addresses now, against those the device serves: an address added to the
/// interface joins the device (a socket, a GID in the first free index) and one removed
/// leaves it, as rxe follows its netdev's `NETDEV_UP`/`inetaddr` events (`getifaddrs` once a
/// second instead of rtnetlink: no unsafe code and no new dependency; an address is in the
/// table within about a second). Which addresses are served is the rule at open
/// ([`DevInfo::served_after`]): one another process holds is retried at the next look. The
/// device's first address is kept when it is a loopback stand-in (a free `127.0.0.x` that is
/// not one of the interface's) and otherwise leaves the table with the interface's.
fn follow_addresses(s: &CtxShared) {
    let Some(info) = crate::devices::scan()
        .into_iter()
        .find(|d| d.ifname == s.ifname)
    else {
        // The interface is gone (or has no address left): what it served stays until the
        // context closes; its sockets receive nothing.
        return;
    };
    let first = s.dev.local_addr().ip();
    let want = info.served_after(first);
    let have: Vec<IpAddr> = s.dev.local_addrs().iter().skip(1).map(|a| a.ip()).collect();
    for a in &want {
        if !have.contains(a) {
            // Another process holding it, or gone again: tried again next time.
            let _ = s.dev.add_address(*a);
        }
    }
    for a in &have {
        if !want.contains(a) {
            let _ = s.dev.remove_address(*a);
        }
    }
    if !first.is_loopback() {
        let _ = if info.addrs.contains(&first) {
            s.dev.add_address(first)
        } else {
            s.dev.remove_address(first)
        };
    }
}

/// Moves the core's asynchronous events to the context's `async_fd` (`enum ibv_event_type`
/// values), naming the C objects; events of objects already destroyed are dropped.
fn deliver_async(s: &CtxShared) {
    use softrdma_core::verbs::AsyncEvent as E;
    while let Some(ev) = s.dev.poll_async_event() {
        let (map, key, ty) = match ev {
            E::CqErr(cq) => (&s.cqs, cq.0, 0),
            E::QpFatal(qpn) => (&s.qps, qpn, 1),
            E::SqDrained(qpn) => (&s.qps, qpn, 5),
            E::SrqLimitReached(srq) => (&s.srqs, srq.0, 15),
            E::LastWqeReached(qpn) => (&s.qps, qpn, 16),
        };
        let Some(&element) = lock(map).get(&key) else {
            continue;
        };
        lock(&s.async_events).push_back(ibv_async_event {
            element,
            event_type: ty,
        });
        // An eventfd write only fails when the counter would overflow.
        let _ = rustix::io::write(&s.async_fd, &1u64.to_ne_bytes());
    }
}

/// Delivers an event for every armed CQ that got a completion since it was armed.
fn fire(s: &CtxShared) {
    deliver_async(s);
    let mut armed = lock(&s.armed);
    armed.retain(|a| {
        let now = s.dev.cq_completions_added(a.cq).unwrap_or(0);
        if now <= a.at {
            return true;
        }
        lock(&a.chan.events).push_back(a.cq_addr);
        // An eventfd write only fails when the counter would overflow.
        let _ = rustix::io::write(&a.chan.fd, &1u64.to_ne_bytes());
        false
    });
}

impl Drop for CtxRs {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = lock(&self.watcher).take() {
            let _ = t.join();
        }
    }
}

fn ctx_rs<'a>(ctx: *const ibv_context) -> Result<&'a CtxRs, Errno> {
    ptr::get_ctx::<CtxRs>(ctx)
}

/// Where a context's device loop runs: in the process's one node loop thread (`Cm::add_device`,
/// `node_loop.rs`), which sleeps in epoll over every socket of every context —
/// progress without the application, as on a NIC, one node per process, no core
/// burnt when idle — and also in the application's own CQ polls (`app_turns`): a
/// poll that finds its CQ empty turns the device in the polling thread when nobody
/// else is turning it, and while such polls keep coming the loop thread naps instead
/// of waking for every datagram. The answer to a SEND then leaves from the polling
/// thread without a cross-thread wake-up; what a poll's turn queued (the ACK of the
/// SEND just received) leaves with the application's next post, or at the next turn,
/// as one GSO send (`defer_flush`). `SOFTRDMA_PROGRESS=inline` (session 9's opt-in
/// for this) means the same now. `SOFTRDMA_PROGRESS=thread`: only the loop thread
/// turns the device, every datagram handed from it to the application (for
/// comparison: docs/measurements.md). Commands (the RDMA CM's MADs) leave at once
/// either way.
fn with_progress(c: DeviceConfig) -> DeviceConfig {
    let app_turns = std::env::var("SOFTRDMA_PROGRESS").as_deref() != Ok("thread");
    c.with_progress(Progress::Thread(PollMode::Blocking))
        .with_wait(PollMode::Blocking)
        .with_app_turns(app_turns)
        .with_defer_flush(app_turns)
        .with_defer_commands(false)
}

/// Opens the driver device for `info`: binds its address, or on the IPv4 loopback the first
/// free 127.0.0.x when another process holds it (see [`crate::devices`]).
/// `at`: exactly that address instead (the RDMA CM binding a loopback address, see
/// [`crate::rdmacm`]), no fallback.
fn open_dev(info: &DevInfo, at: Option<IpAddr>) -> Result<Device, Errno> {
    if let Some(ip) = at {
        let mut c = with_progress(DeviceConfig::new(ip).with_interface_mtu());
        c.name = info.name.clone();
        c.mac = Some(info.mac);
        return Device::open_with(c).map_err(|e| conv::dev_errno(&e));
    }
    let ip = info.addr().ok_or(Errno::ENODEV)?;
    let config = |ip: IpAddr| {
        let mut c = with_progress(DeviceConfig::new(ip))
            .with_interface_mtu()
            .with_more_ips(info.served_after(ip))
            .with_scope_id(nix::net::if_::if_nametoindex(info.ifname.as_str()).unwrap_or(0));
        c.name = info.name.clone();
        c.mac = Some(info.mac);
        c
    };
    match Device::open_with(config(ip)) {
        Ok(d) => Ok(d),
        Err(softrdma_driver::Error::Io(e))
            if e.kind() == std::io::ErrorKind::AddrInUse && ip.is_loopback() && ip.is_ipv4() =>
        {
            for last in 2..=254u8 {
                let alt = IpAddr::V4(Ipv4Addr::new(127, 0, 0, last));
                match Device::open_with(config(alt)) {
                    Ok(d) => return Ok(d),
                    Err(softrdma_driver::Error::Io(e))
                        if e.kind() == std::io::ErrorKind::AddrInUse => {}
                    Err(e) => return Err(conv::dev_errno(&e)),
                }
            }
            Err(Errno(libc::EADDRINUSE))
        }
        Err(e) => Err(conv::dev_errno(&e)),
    }
}

fn context_ops() -> ibv_context_ops {
    ibv_context_ops {
        poll_cq: Some(op_poll_cq),
        req_notify_cq: Some(op_req_notify_cq),
        post_srq_recv: Some(op_post_srq_recv),
        post_send: Some(op_post_send),
        post_recv: Some(op_post_recv),
        ..Default::default()
    }
}

entry! {
    export null fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
        open_context(device, None)
    }
}

// ----- what the RDMA CM (crate::rdmacm) needs of the devices -----

/// The devices: `(ibv_device address, what it is)`.
pub(crate) fn device_list() -> Vec<(usize, &'static DevInfo)> {
    devices().list.iter().map(|(a, i)| (*a, i)).collect()
}

/// The driver device of a live context.
pub(crate) fn context_device(ctx: *const ibv_context) -> Result<Device, Errno> {
    Ok(ctx_rs(ctx)?.dev().clone())
}

/// The QP number of a live QP.
pub(crate) fn qp_num(qp: *const ibv_qp) -> Result<u32, Errno> {
    Ok(qp_rs(qp)?.qpn)
}

/// `ibv_open_device`, or with `at` a context bound at exactly that address.
pub(crate) fn open_context(
    device: *mut ibv_device,
    at: Option<IpAddr>,
) -> Result<*mut ibv_context, Errno> {
    {
        let (_, info) = device_info(device)?;
        let dev = open_dev(info, at)?;
        let mut v = verbs_context {
            query_port: Some(op_query_port),
            before_create_cq_ex: [None; 24],
            create_cq_ex: Some(op_create_cq_ex),
            priv_: core::ptr::null_mut(),
            query_device_ex: Some(op_query_device_ex),
            before_create_qp_ex: [None; 5],
            create_qp_ex: Some(op_create_qp_ex),
            after_create_qp_ex: [None; 4],
            abi_placeholder3: 0,
            sz: core::mem::size_of::<verbs_context>(),
            context: ibv_context {
                device,
                ops: context_ops(),
                cmd_fd: -1,
                async_fd: -1,
                num_comp_vectors: 1,
                mutex: [0; 5],
                abi_compat: VERBS_ABI_IS_EXTENDED as *mut c_void,
            },
        };
        let async_fd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::SEMAPHORE,
        )
        .map_err(|e| Errno(e.raw_os_error()))?;
        v.context.async_fd = async_fd.as_raw_fd();
        // One node per process: a context's device is a port of the process's CM's node
        // from the start (the RDMA CM then runs on it as it is), and the node's one loop
        // thread runs it beside every other context's sockets (the application's polls
        // turning it too, `app_turns`).
        crate::rdmacm::proc_()
            .cm
            .add_device(&dev)
            .map_err(|_| Errno(libc::ENODEV))?;
        let rs = CtxRs {
            ifindex: nix::net::if_::if_nametoindex(info.ifname.as_str()).unwrap_or(0),
            shared: Arc::new(CtxShared {
                dev,
                armed: Mutex::new(Vec::new()),
                stop: AtomicBool::new(false),
                async_fd,
                async_events: Mutex::new(VecDeque::new()),
                qps: Mutex::default(),
                cqs: Mutex::default(),
                srqs: Mutex::default(),
                app_polled: AtomicU64::new(0),
                ifname: info.ifname.clone(),
            }),
            watcher: Mutex::new(None),
        };
        // The watcher delivers completion-channel and asynchronous events.
        rs.watch();
        let ips = rs.dev().local_addrs().iter().map(|a| a.ip()).collect();
        let ctx = ptr::publish_ctx(v, rs);
        open_contexts().push((ctx as usize, ips));
        Ok(ctx)
    }
}

entry! {
    /// `SOFTRDMA_PRIVATE_1`: the RDMA CM's table for softrdma's librdmacm.so.1
    /// ([`crate::cm_abi`]).
    export value fn softrdma_rdmacm_ops() -> *const crate::cm_abi::CmOps {
        crate::cm_exports::ops()
    }
}

entry! {
    export errno fn ibv_close_device(context: *mut ibv_context) -> c_int {
        ctx_rs(context)?;
        {
            let mut open = open_contexts();
            open.retain(|o| o.0 != context as usize);
            // The RDMA CM runs on it (and ids show it as `id->verbs`): it stays open for the
            // process's lifetime, as librdmacm's own contexts do.
            if pinned_contexts().contains(&(context as usize)) {
                return Ok(());
            }
        }
        // Its port leaves the process's node.
        let _ = crate::rdmacm::proc_().cm.remove_device(ctx_rs(context)?.dev());
        drop(ptr::retire_ctx::<CtxRs>(context)?);
        Ok(())
    }
}

/// The contexts the program opened (`ibv_open_device`), with the addresses their device
/// serves: the RDMA CM runs on one of these rather than open a second device on an address.
type OpenContexts = Vec<(usize, Vec<IpAddr>)>;
fn open_contexts() -> MutexGuard<'static, OpenContexts> {
    static L: OnceLock<Mutex<OpenContexts>> = OnceLock::new();
    lock(L.get_or_init(Default::default))
}

/// The contexts the RDMA CM runs on: `ibv_close_device` leaves them open.
fn pinned_contexts() -> MutexGuard<'static, std::collections::HashSet<usize>> {
    static L: OnceLock<Mutex<std::collections::HashSet<usize>>> = OnceLock::new();
    lock(L.get_or_init(Default::default))
}

/// An open context of `device` at `ip` (any address with `ip` None), pinned for the RDMA CM.
pub(crate) fn adopt_context(device: usize, ip: Option<IpAddr>) -> Option<*mut ibv_context> {
    let open = open_contexts();
    // A context is published inside its `verbs_context` (`get_ctx`), so it is recognised
    // through its Rust state: the device it was opened on, by name.
    let name = &device_info(device as *const ibv_device).ok()?.1.name;
    let found = open.iter().find(|(c, a)| {
        ip.is_none_or(|ip| a.contains(&ip))
            && ctx_rs(*c as *const ibv_context).is_ok_and(|r| r.dev().name() == name.as_str())
    })?;
    pinned_contexts().insert(found.0);
    Some(found.0 as *mut ibv_context)
}

entry! {
    export errno fn ibv_query_device(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int {
        let c = ctx_rs(context)?;
        let a = conv::device_attr(&c.dev().query_device());
        // SAFETY: the caller's output struct (NULL is EINVAL).
        unsafe { ptr::write_out(device_attr, a) }
    }
}

/// `IBV_DEVICE_ATTR_EX` fields beyond the legacy ones softrdma has something to say in.
fn device_attr_ex(c: &CtxRs) -> ibv_device_attr_ex {
    let orig = conv::device_attr(&c.dev().query_device());
    ibv_device_attr_ex {
        orig_attr: orig,
        comp_mask: 0,
        odp_caps: [0; 3],
        completion_timestamp_mask: 0,
        hca_core_clock: 0,
        device_cap_flags_ex: u64::from(orig.device_cap_flags),
        tso_caps: [0; 2],
        rss_caps: [0; 4],
        max_wq_type_rq: 0,
        packet_pacing_caps: [0; 3],
        raw_packet_caps: 0,
        tm_caps: [0; 5],
        cq_mod_caps: [0; 2],
        max_dm_size: 0,
        pci_atomic_caps: [0; 3],
        xrc_odp_caps: 0,
        phys_port_cnt_ex: u32::from(orig.phys_port_cnt),
    }
}

entry! {
    /// `verbs_context.query_device_ex` (`ibv_query_device_ex`, inline in `verbs.h`): the
    /// first `attr_size` bytes of the extended attributes; a size short of the legacy part,
    /// or an input with a `comp_mask`, is `EINVAL` as in rdma-core's `ibv_cmd_query_device_any`.
    op errno fn op_query_device_ex(context: *mut ibv_context, input: *const c_void, attr: *mut ibv_device_attr_ex, attr_size: usize) -> c_int {
        let c = ctx_rs(context)?;
        if !input.is_null() {
            // SAFETY: the caller's `struct ibv_query_device_ex_input` (one u32, `comp_mask`).
            let mask = unsafe { ptr::read_in(input.cast::<u32>())? };
            if mask != 0 {
                return Err(Errno::EINVAL);
            }
        }
        if attr_size < core::mem::size_of::<ibv_device_attr>() {
            return Err(Errno::EINVAL);
        }
        let a = device_attr_ex(c);
        // SAFETY: the caller's struct, writable for `attr_size` bytes (NULL is EINVAL).
        unsafe { ptr::write_prefix(attr, &a, attr_size) }
    }
}

fn query_port(context: *const ibv_context, port: u8) -> Result<ibv_port_attr, Errno> {
    let c = ctx_rs(context)?;
    let p = c.dev().query_port(port).map_err(|e| conv::dev_errno(&e))?;
    Ok(conv::port_attr(&p))
}

entry! {
    /// The legacy export (`struct _compat_ibv_port_attr`, the old size without the last
    /// fields): what `___ibv_query_port` calls when the context has no `query_port` op.
    export errno fn ibv_query_port(context: *mut ibv_context, port_num: u8, port_attr: *mut ibv_port_attr) -> c_int {
        let a = query_port(context, port_num)?;
        // SAFETY: the caller's output struct, at least as large as the compat layout, which
        // ends before `flags` (offset 50).
        unsafe { ptr::write_prefix(port_attr, &a, core::mem::offset_of!(ibv_port_attr, flags)) }
    }
}

entry! {
    /// `verbs_context.query_port`: what `ibv_query_port` (the `verbs.h` macro) calls.
    op errno fn op_query_port(context: *mut ibv_context, port_num: u8, port_attr: *mut ibv_port_attr, len: usize) -> c_int {
        let a = query_port(context, port_num)?;
        // SAFETY: the caller passes `sizeof(*port_attr)` of its struct as `len`.
        unsafe { ptr::write_prefix(port_attr, &a, len) }
    }
}

entry! {
    export neg fn ibv_query_gid(context: *mut ibv_context, port_num: u8, index: c_int, gid: *mut ibv_gid) -> c_int {
        let c = ctx_rs(context)?;
        let p = c.dev().query_port(port_num).map_err(|e| conv::dev_errno(&e))?;
        let idx = u32::try_from(index).map_err(|_| Errno::EINVAL)?;
        if idx >= p.gid_tbl_len {
            return Err(Errno::EINVAL);
        }
        // An empty entry reads as the zero GID, as rdma-core answers for one.
        let raw = c.dev().query_gid(port_num, idx as u16).map(|e| e.gid.0).unwrap_or([0; 16]);
        // SAFETY: the caller's output GID.
        unsafe { ptr::write_out(gid, ibv_gid { raw })? };
        Ok(0)
    }
}

entry! {
    /// `IBVERBS_PRIVATE_34`, used by `ibv_devinfo`: `IBV_GID_TYPE_SYSFS_IB_ROCE_V1` (0) or
    /// `IBV_GID_TYPE_SYSFS_ROCE_V2` (1).
    export neg fn ibv_query_gid_type(context: *mut ibv_context, port_num: u8, index: u32, gid_type: *mut c_int) -> c_int {
        let c = ctx_rs(context)?;
        let e = c.dev().query_gid(port_num, u16::try_from(index).map_err(|_| Errno::EINVAL)?)
            .map_err(|_| Errno::ENODATA)?;
        let t = match e.gid_type {
            GidType::RoceV2 => 1,
            GidType::Ib | GidType::RoceV1 => 0,
        };
        // SAFETY: the caller's output.
        unsafe { ptr::write_out(gid_type, t)? };
        Ok(0)
    }
}

/// The GID table of port `port` as `ibv_gid_entry`s (non-empty entries only).
fn gid_entries(c: &CtxRs, port: u32) -> Result<Vec<ibv_gid_entry>, Errno> {
    let p = u8::try_from(port).map_err(|_| Errno::EINVAL)?;
    c.dev().query_port(p).map_err(|e| conv::dev_errno(&e))?;
    let ifindex = c.ifindex;
    Ok(c.dev()
        .gid_table()
        .iter()
        .map(|e| ibv_gid_entry {
            gid: ibv_gid { raw: e.gid.0 },
            gid_index: u32::from(e.index),
            port_num: port,
            gid_type: match e.gid_type {
                GidType::Ib => 0,
                GidType::RoceV1 => 1,
                GidType::RoceV2 => 2,
            },
            ndev_ifindex: ifindex,
        })
        .collect())
}

entry! {
    /// `ibv_query_gid_ex` (an inline wrapper in `verbs.h`): 0, `ENODATA` for an empty entry,
    /// `EINVAL` for flags, a short `entry_size` or an index past the table.
    export errno fn _ibv_query_gid_ex(context: *mut ibv_context, port_num: u32, gid_index: u32, entry: *mut ibv_gid_entry, flags: u32, entry_size: usize) -> c_int {
        let c = ctx_rs(context)?;
        if flags != 0 || entry_size < core::mem::size_of::<ibv_gid_entry>() {
            return Err(Errno::EINVAL);
        }
        let len = query_port(context, u8::try_from(port_num).map_err(|_| Errno::EINVAL)?)?.gid_tbl_len;
        if gid_index >= len as u32 {
            return Err(Errno::EINVAL);
        }
        let e = gid_entries(c, port_num)?
            .into_iter()
            .find(|e| e.gid_index == gid_index)
            .ok_or(Errno::ENODATA)?;
        // SAFETY: the caller's output, `entry_size` ≥ our size (checked).
        unsafe { ptr::write_out(entry, e) }
    }
}

entry! {
    /// `ibv_query_gid_table`: the valid entries of every port, their count or a negative errno.
    export value fn _ibv_query_gid_table(context: *mut ibv_context, entries: *mut ibv_gid_entry, max_entries: usize, flags: u32, entry_size: usize) -> isize {
        let r = (|| {
            let c = ctx_rs(context)?;
            if flags != 0 || entry_size < core::mem::size_of::<ibv_gid_entry>() {
                return Err(Errno::EINVAL);
            }
            let all = gid_entries(c, 1)?;
            if all.len() > max_entries {
                return Err(Errno::EINVAL);
            }
            if !all.is_empty() && entries.is_null() {
                return Err(Errno::EINVAL);
            }
            for (i, e) in all.iter().enumerate() {
                // SAFETY: the caller's array of `max_entries` ≥ all.len() entries, each
                // `entry_size` bytes apart.
                unsafe { entries.cast::<u8>().add(i * entry_size).cast::<ibv_gid_entry>().write_unaligned(*e) };
            }
            Ok(all.len() as isize)
        })();
        r.unwrap_or_else(|e| -(e.0 as isize))
    }
}

entry! {
    export neg fn ibv_query_pkey(context: *mut ibv_context, port_num: u8, index: c_int, pkey: *mut u16) -> c_int {
        let c = ctx_rs(context)?;
        let idx = u16::try_from(index).map_err(|_| Errno::EINVAL)?;
        let k = c.dev().with_stack(|s| s.device.query_pkey(port_num, idx)).map_err(|_| Errno::EINVAL)?;
        // SAFETY: the caller's output (the P_Key in network byte order, as rdma-core's).
        unsafe { ptr::write_out(pkey, k.0.to_be())? };
        Ok(0)
    }
}

entry! {
    /// The next asynchronous event: blocks on `async_fd` unless the application made it
    /// non-blocking (then -1 with `EAGAIN` when there is none).
    export neg fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int {
        let c = ctx_rs(context)?;
        if event.is_null() {
            return Err(Errno::EINVAL);
        }
        let mut buf = [0u8; 8];
        rustix::io::read(&c.shared.async_fd, &mut buf).map_err(|e| Errno(e.raw_os_error()))?;
        let ev = lock(&c.shared.async_events).pop_front().ok_or(Errno(libc::EAGAIN))?;
        // SAFETY: the caller's output (checked non-NULL).
        unsafe { ptr::write_out(event, ev)? };
        Ok(0)
    }
}

entry! {
    /// Acknowledges an event (rdma-core counts them for destroy calls that wait; ours do not
    /// wait, so there is nothing to count).
    export value fn ibv_ack_async_event(event: *mut ibv_async_event) -> () {
        let _ = event;
    }
}

// ----- PDs and MRs -----

/// A PD's Rust side.
pub struct PdRs {
    ctx: usize,
    id: PdId,
}

entry! {
    export null fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
        let c = ctx_rs(context)?;
        let id = c.dev().alloc_pd().map_err(|e| conv::dev_errno(&e))?;
        Ok(ptr::publish(ibv_pd { context, handle: id.0 }, PdRs { ctx: context as usize, id }))
    }
}

entry! {
    export errno fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
        let p = ptr::get::<ibv_pd, PdRs>(pd)?;
        let c = ctx_rs(p.ctx as *const ibv_context)?;
        c.dev().dealloc_pd(p.id).map_err(|e| conv::dev_errno(&e))?;
        drop(ptr::retire::<ibv_pd, PdRs>(pd)?);
        Ok(())
    }
}

/// An address handle's Rust side: the core takes the address vector with each UD send.
pub struct AhRs {
    pd: PdId,
    av: AddressVector,
}

/// `ibv_create_ah`'s work (shared with `ibv_create_ah_from_wc`: an export is never called
/// from Rust, its implementation symbol is renamed away at link time).
fn create_ah(pd: *mut ibv_pd, a: &ibv_ah_attr) -> Result<*mut ibv_ah, Errno> {
    let p = ptr::get::<ibv_pd, PdRs>(pd)?;
    let av = conv::ah_attr(a)?;
    let c = ctx_rs(p.ctx as *const ibv_context)?;
    // The source GID must exist (rxe: EINVAL).
    c.dev()
        .query_gid(1, av.sgid_index)
        .map_err(|_| Errno::EINVAL)?;
    Ok(ptr::publish(
        ibv_ah {
            context: p.ctx as *mut ibv_context,
            pd,
            handle: 0,
        },
        AhRs { pd: p.id, av },
    ))
}

entry! {
    export null fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
        // SAFETY: the caller's attributes (NULL is EINVAL).
        let a = unsafe { ptr::read_in(attr as *const ibv_ah_attr)? };
        create_ah(pd, &a)
    }
}

/// `IBV_WC_GRH`.
const WC_GRH: u32 = 1;

/// The address vector that answers a received UD message (`ibv_init_ah_from_wc`).
fn ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *const ibv_wc,
    grh: *const [u8; 40],
) -> Result<ibv_ah_attr, Errno> {
    let c = ctx_rs(context)?;
    // SAFETY: the caller's completion (NULL is EINVAL).
    let w = unsafe { ptr::read_in(wc)? };
    if w.wc_flags & WC_GRH == 0 {
        // RoCE has no path without a GRH.
        return Err(Errno::EINVAL);
    }
    // SAFETY: the caller's 40-byte GRH area, the start of the receive buffer (NULL is EINVAL).
    let g = unsafe { ptr::read_in(grh)? };
    let (remote, local, flow_label, tclass) = conv::path_from_grh(&g).ok_or(Errno::EINVAL)?;
    let sgid_index = c
        .dev()
        .with_stack(|s| s.device.find_gid(port_num, &local, GidType::RoceV2))
        .map_err(|_| Errno::EINVAL)?;
    Ok(ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: remote.0 },
            flow_label,
            sgid_index: u8::try_from(sgid_index).map_err(|_| Errno::EINVAL)?,
            hop_limit: 0xff,
            traffic_class: tclass,
        },
        dlid: 0,
        sl: w.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num,
    })
}

entry! {
    /// The address handle attributes that reply to a received UD message: the sender's GID
    /// from the GRH area, our GID it was sent to as the source index; -1 with `EINVAL` when
    /// there is no GRH or the area names none of our GIDs.
    export neg fn ibv_init_ah_from_wc(context: *mut ibv_context, port_num: u8, wc: *mut ibv_wc, grh: *mut c_void, ah_attr: *mut ibv_ah_attr) -> c_int {
        let a = ah_from_wc(context, port_num, wc, grh as *const [u8; 40])?;
        // SAFETY: the caller's output (NULL is EINVAL).
        unsafe { ptr::write_out(ah_attr, a)? };
        Ok(0)
    }
}

entry! {
    export null fn ibv_create_ah_from_wc(pd: *mut ibv_pd, wc: *mut ibv_wc, grh: *mut c_void, port_num: u8) -> *mut ibv_ah {
        let p = ptr::get::<ibv_pd, PdRs>(pd)?;
        let a = ah_from_wc(p.ctx as *mut ibv_context, port_num, wc, grh as *const [u8; 40])?;
        create_ah(pd, &a)
    }
}

entry! {
    export errno fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
        drop(ptr::retire::<ibv_ah, AhRs>(ah)?);
        Ok(())
    }
}

/// An MR's Rust side.
pub struct MrRs {
    ctx: usize,
    /// What `ibv_rereg_mr` changes.
    reg: Mutex<MrReg>,
}

/// An MR's registration: the core's lkey and what it was registered with.
#[derive(Clone, Copy)]
struct MrReg {
    lkey: u32,
    pd: usize,
    addr: usize,
    length: usize,
    iova: u64,
    access: c_int,
}

/// `IBV_ACCESS_OPTIONAL_RANGE`: hints a provider may ignore.
const ACCESS_OPTIONAL: u32 = 0x3ff0_0000;

fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> Result<*mut ibv_mr, Errno> {
    let p = ptr::get::<ibv_pd, PdRs>(pd)?;
    let c = ctx_rs(p.ctx as *const ibv_context)?;
    let win = AppWindow::new(addr, length)?;
    let access = AccessFlags(access as u32 & !ACCESS_OPTIONAL);
    let keys = c
        .dev()
        .reg_mr(p.id, Memory::external(Box::new(win)), iova, access)
        .map_err(|e| conv::dev_errno(&e))?;
    Ok(ptr::publish(
        ibv_mr {
            context: p.ctx as *mut ibv_context,
            pd,
            addr,
            length,
            handle: keys.lkey,
            lkey: keys.lkey,
            rkey: keys.rkey,
        },
        MrRs {
            ctx: p.ctx,
            reg: Mutex::new(MrReg {
                lkey: keys.lkey,
                pd: pd as usize,
                addr: addr as usize,
                length,
                iova,
                access: access.0 as c_int,
            }),
        },
    ))
}

entry! {
    export null fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr {
        reg_mr(pd, addr, length, addr as u64, access)
    }
}

entry! {
    export null fn ibv_reg_mr_iova(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_int) -> *mut ibv_mr {
        reg_mr(pd, addr, length, iova, access)
    }
}

entry! {
    export null fn ibv_reg_mr_iova2(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: u32) -> *mut ibv_mr {
        reg_mr(pd, addr, length, iova, access as c_int)
    }
}

entry! {
    export errno fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
        let m = ptr::get::<ibv_mr, MrRs>(mr)?;
        let c = ctx_rs(m.ctx as *const ibv_context)?;
        // The window comes back and is dropped: the application's memory is its own again.
        let lkey = lock(&m.reg).lkey;
        drop(c.dev().dereg_mr(lkey).map_err(|e| conv::dev_errno(&e))?);
        drop(ptr::retire::<ibv_mr, MrRs>(mr)?);
        Ok(())
    }
}

/// `enum ibv_rereg_mr_flags`.
const REREG_MR_CHANGE_TRANSLATION: c_int = 1 << 0;
const REREG_MR_CHANGE_PD: c_int = 1 << 1;
const REREG_MR_CHANGE_ACCESS: c_int = 1 << 2;
/// `enum ibv_rereg_mr_err_code`: the caller's input, the command.
const REREG_MR_ERR_INPUT: c_int = -1;
const REREG_MR_ERR_CMD: c_int = -4;

/// `ibv_rereg_mr`'s work: the MR registered anew with what `flags` changes (the new
/// registration first, so that on failure the old one is untouched), then the old one
/// dropped; the `ibv_mr`'s keys, PD and range updated. Errors are (`ibv_rereg_mr_err_code`,
/// errno).
fn rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> Result<(), (c_int, Errno)> {
    let input = |e| (REREG_MR_ERR_INPUT, e);
    let m = ptr::get::<ibv_mr, MrRs>(mr).map_err(input)?;
    let all = REREG_MR_CHANGE_TRANSLATION | REREG_MR_CHANGE_PD | REREG_MR_CHANGE_ACCESS;
    if flags & !all != 0
        || (flags & REREG_MR_CHANGE_TRANSLATION != 0 && (length == 0 || addr.is_null()))
        || (access != 0 && flags & REREG_MR_CHANGE_ACCESS == 0)
    {
        return Err(input(Errno::EINVAL));
    }
    let c = ctx_rs(m.ctx as *const ibv_context).map_err(input)?;
    let mut reg = lock(&m.reg);
    let mut new = *reg;
    if flags & REREG_MR_CHANGE_PD != 0 {
        if ptr::read_c::<ibv_pd, PdRs, _>(pd, |p| p.context).map_err(input)? as usize != m.ctx {
            return Err(input(Errno::EINVAL));
        }
        new.pd = pd as usize;
    }
    if flags & REREG_MR_CHANGE_TRANSLATION != 0 {
        new.addr = addr as usize;
        new.length = length;
        new.iova = addr as u64;
    }
    if flags & REREG_MR_CHANGE_ACCESS != 0 {
        new.access = access & !(ACCESS_OPTIONAL as c_int);
    }
    let cmd = |e| (REREG_MR_ERR_CMD, e);
    let pd_id = ptr::get::<ibv_pd, PdRs>(new.pd as *const ibv_pd)
        .map_err(cmd)?
        .id;
    let win = AppWindow::new(new.addr as *mut c_void, new.length).map_err(cmd)?;
    let keys = c
        .dev()
        .reg_mr(
            pd_id,
            Memory::external(Box::new(win)),
            new.iova,
            AccessFlags(new.access as u32),
        )
        .map_err(|e| cmd(conv::dev_errno(&e)))?;
    // The old window comes back and is dropped.
    let _ = c.dev().dereg_mr(reg.lkey);
    new.lkey = keys.lkey;
    *reg = new;
    // SAFETY: `mr` is live (checked above); our own fields, written through raw places.
    unsafe {
        (*mr).lkey = keys.lkey;
        (*mr).rkey = keys.rkey;
        (*mr).handle = keys.lkey;
        (*mr).pd = new.pd as *mut ibv_pd;
        (*mr).addr = new.addr as *mut c_void;
        (*mr).length = new.length;
    }
    Ok(())
}

entry! {
    /// 0, or an `ibv_rereg_mr_err_code` with `errno` set.
    export value fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> c_int {
        match rereg_mr(mr, flags, pd, addr, length, access) {
            Ok(()) => 0,
            Err((code, e)) => {
                crate::entry::set_errno(e);
                code
            }
        }
    }
}

// ----- completion channels and CQs -----

/// A completion channel's Rust side.
pub struct ChanRs {
    ctx: usize,
    shared: Arc<ChanShared>,
}

entry! {
    export null fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel {
        let c = ctx_rs(context)?;
        let fd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::SEMAPHORE,
        )
        .map_err(|e| Errno(e.raw_os_error()))?;
        let raw = fd.as_raw_fd();
        c.watch();
        let shared = Arc::new(ChanShared { fd, events: Mutex::new(VecDeque::new()), users: AtomicI32::new(0) });
        Ok(ptr::publish(
            ibv_comp_channel { context, fd: raw, refcnt: 0 },
            ChanRs { ctx: context as usize, shared },
        ))
    }
}

entry! {
    export errno fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
        let ch = ptr::get::<ibv_comp_channel, ChanRs>(channel)?;
        if ch.shared.users.load(Ordering::Acquire) > 0 {
            return Err(Errno::EBUSY);
        }
        let _ = ch.ctx;
        drop(ptr::retire::<ibv_comp_channel, ChanRs>(channel)?);
        Ok(())
    }
}

/// A CQ's Rust side. Every CQ is published as an `ibv_cq_ex` (an `ibv_cq` followed by the
/// poll functions), whichever verb created it: C reaches the same object as either type.
pub struct CqRs {
    ctx: usize,
    id: CqId,
    chan: Option<(usize, Arc<ChanShared>)>,
    acked: AtomicU32,
    /// The completion `start_poll`/`next_poll` took off the queue, which the `read_*`
    /// functions describe (already converted to `struct ibv_wc`).
    current: Mutex<ibv_wc>,
}

/// The Rust state of the CQ at `cq` (`EINVAL` for NULL or anything not a live CQ of ours).
fn cq_rs<'a>(cq: *const ibv_cq) -> Result<&'a CqRs, Errno> {
    ptr::get::<ibv_cq_ex, CqRs>(cq.cast())
}

/// `IBV_WC_STANDARD_FLAGS`: the completion fields `ibv_create_cq_ex` can ask for that every
/// completion of ours has (rxe's set). The others (timestamps, VLAN, flow tag, tag matching)
/// are `EOPNOTSUPP`.
const WC_EX_STANDARD_FLAGS: u64 = 0x7f;
/// `IBV_CQ_INIT_ATTR_MASK_FLAGS`.
const CQ_INIT_ATTR_MASK_FLAGS: u32 = 1;
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`: a hint (our CQs are always thread-safe).
const CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1;

/// `ibv_create_cq` and `ibv_create_cq_ex`'s common work.
fn create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> Result<*mut ibv_cq_ex, Errno> {
    let c = ctx_rs(context)?;
    if cqe < 1 || !(0..1).contains(&comp_vector) {
        return Err(Errno::EINVAL);
    }
    let chan = if channel.is_null() {
        None
    } else {
        let ch = ptr::get::<ibv_comp_channel, ChanRs>(channel)?;
        Some((channel as usize, ch.shared.clone()))
    };
    let id = c
        .dev()
        .create_cq(cqe as u32)
        .map_err(|e| conv::dev_errno(&e))?;
    let depth = c
        .dev()
        .with_stack(|s| s.verbs.cq(id).map(|q| q.cqe()))
        .unwrap_or(cqe as u32);
    if let Some((_, ch)) = &chan {
        ch.users.fetch_add(1, Ordering::AcqRel);
    }
    let p = ptr::publish(
        ibv_cq_ex {
            cq: ibv_cq {
                context,
                channel,
                cq_context,
                handle: id.0,
                cqe: i32::try_from(depth).unwrap_or(i32::MAX),
                mutex: [0; 5],
                cond: [0; 6],
                comp_events_completed: 0,
                async_events_completed: 0,
            },
            comp_mask: 0,
            status: 0,
            wr_id: 0,
            start_poll: Some(op_cq_start_poll),
            next_poll: Some(op_cq_next_poll),
            end_poll: Some(op_cq_end_poll),
            read_opcode: Some(op_cq_read_opcode),
            read_vendor_err: Some(op_cq_read_vendor_err),
            read_byte_len: Some(op_cq_read_byte_len),
            read_imm_data: Some(op_cq_read_imm_data),
            read_qp_num: Some(op_cq_read_qp_num),
            read_src_qp: Some(op_cq_read_src_qp),
            read_wc_flags: Some(op_cq_read_wc_flags),
            read_slid: Some(op_cq_read_slid),
            read_sl: Some(op_cq_read_sl),
            read_dlid_path_bits: Some(op_cq_read_dlid_path_bits),
            read_completion_ts: None,
            read_cvlan: None,
            read_flow_tag: None,
            read_tm_info: None,
            read_completion_wallclock_ns: None,
        },
        CqRs {
            ctx: context as usize,
            id,
            chan,
            acked: AtomicU32::new(0),
            current: Mutex::new(ibv_wc::default()),
        },
    );
    lock(&c.shared.cqs).insert(id.0, p as usize);
    Ok(p)
}

entry! {
    export null fn ibv_create_cq(context: *mut ibv_context, cqe: c_int, cq_context: *mut c_void, channel: *mut ibv_comp_channel, comp_vector: c_int) -> *mut ibv_cq {
        create_cq(context, cqe, cq_context, channel, comp_vector).map(|p| p.cast())
    }
}

entry! {
    /// `verbs_context.create_cq_ex` (`ibv_create_cq_ex`, inline in `verbs.h`).
    op null fn op_create_cq_ex(context: *mut ibv_context, attr: *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex {
        // SAFETY: the caller's attributes (NULL is EINVAL).
        let a = unsafe { ptr::read_in(attr as *const ibv_cq_init_attr_ex)? };
        if a.wc_flags & !WC_EX_STANDARD_FLAGS != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & !CQ_INIT_ATTR_MASK_FLAGS != 0 {
            // A parent domain (IBV_CQ_INIT_ATTR_MASK_PD) or a later extension.
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & CQ_INIT_ATTR_MASK_FLAGS != 0 && a.flags & !CREATE_CQ_ATTR_SINGLE_THREADED != 0 {
            // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: our CQs always report an overrun.
            return Err(Errno::EOPNOTSUPP);
        }
        let cqe = c_int::try_from(a.cqe).map_err(|_| Errno::EINVAL)?;
        let vector = c_int::try_from(a.comp_vector).map_err(|_| Errno::EINVAL)?;
        create_cq(context, cqe, a.cq_context, a.channel, vector)
    }
}

entry! {
    export errno fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
        let q = cq_rs(cq)?;
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        c.dev().destroy_cq(q.id).map_err(|e| conv::dev_errno(&e))?;
        lock(&c.shared.cqs).remove(&q.id.0);
        lock(&c.shared.armed).retain(|a| a.cq != q.id);
        if let Some((_, ch)) = &q.chan {
            ch.users.fetch_sub(1, Ordering::AcqRel);
            lock(&ch.events).retain(|a| *a != cq as usize);
        }
        drop(ptr::retire::<ibv_cq_ex, CqRs>(cq.cast())?);
        Ok(())
    }
}

entry! {
    /// The CQ's depth becomes at least `cqe` (rxe's sizing, written to `cq->cqe`); the
    /// completions waiting stay. `EINVAL` for less than 1, more than `max_cqe`, or fewer
    /// than the completions waiting, as on rxe.
    export errno fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
        let q = cq_rs(cq)?;
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        let want = u32::try_from(cqe).map_err(|_| Errno::EINVAL)?;
        let depth = c
            .dev()
            .with_stack(|s| s.verbs.resize_cq(q.id, want))
            .map_err(|_| Errno::EINVAL)?;
        // SAFETY: `cq` is live (checked); our own field, written through a raw place.
        unsafe { (*cq).cqe = i32::try_from(depth).unwrap_or(i32::MAX) };
        Ok(())
    }
}

entry! {
    export neg fn ibv_get_cq_event(channel: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, cq_context: *mut *mut c_void) -> c_int {
        let ch = ptr::get::<ibv_comp_channel, ChanRs>(channel)?;
        if cq.is_null() || cq_context.is_null() {
            return Err(Errno::EINVAL);
        }
        let mut buf = [0u8; 8];
        // Blocks unless the application made the descriptor non-blocking (then EAGAIN).
        rustix::io::read(&ch.shared.fd, &mut buf).map_err(|e| Errno(e.raw_os_error()))?;
        let addr = lock(&ch.shared.events).pop_front().ok_or(Errno(libc::EAGAIN))?;
        let ctx = ptr::read_c::<ibv_cq_ex, CqRs, _>(addr as *const ibv_cq_ex, |c| c.cq.cq_context)?;
        // SAFETY: both outputs checked non-NULL above.
        unsafe {
            ptr::write_out(cq, addr as *mut ibv_cq)?;
            ptr::write_out(cq_context, ctx)?;
        }
        Ok(0)
    }
}

entry! {
    export value fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) -> () {
        if let Ok(q) = cq_rs(cq) {
            let total = q.acked.fetch_add(nevents, Ordering::AcqRel).wrapping_add(nevents);
            // SAFETY: `cq` is live (checked); we write our own field through a raw place.
            unsafe { (*cq).comp_events_completed = total };
        }
    }
}

entry! {
    op neg fn op_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
        let q = cq_rs(cq)?;
        if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
            return Err(Errno::EINVAL);
        }
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        thread_local! {
            static BUF: std::cell::RefCell<Vec<softrdma_core::verbs::WorkCompletion>> =
                const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with(|b| {
            let mut b = b.borrow_mut();
            b.clear();
            note_poll(&c.shared);
            let n = c.dev().poll_cq_into(q.id, &mut b, num_entries as usize).map_err(|e| conv::dev_errno(&e))?;
            for (i, w) in b.iter().take(n).enumerate() {
                // SAFETY: the caller's array holds `num_entries` ≥ n entries.
                unsafe { ptr::write_elem(wc, i, conv::wc(w)) };
            }
            if n == 0 && !c.dev().app_turns() {
                // A program spinning on an empty CQ would otherwise retake the device lock
                // the instant it lets go, and the device's loop thread — which needs that lock
                // to turn the datagram it woke for into the completion polled for — waits for
                // the spinner's time slice to end (milliseconds on a busy machine). When the
                // polls turn the loop themselves (`app_turns`), a yield would only hand the
                // core to other processes.
                std::thread::yield_now();
            }
            Ok(n as c_int)
        })
    }
}

entry! {
    op errno fn op_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
        let _ = solicited_only; // Every completion is an event (solicited-only is a subset).
        let q = cq_rs(cq)?;
        let Some((_, ch)) = &q.chan else {
            return Ok(());
        };
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        let at = c.dev().cq_completions_added(q.id).map_err(|e| conv::dev_errno(&e))?;
        let mut armed = lock(&c.shared.armed);
        if !armed.iter().any(|a| a.cq == q.id) {
            armed.push(Armed { cq: q.id, at, chan: ch.clone(), cq_addr: cq as usize });
        }
        Ok(())
    }
}

/// `start_poll`/`next_poll`'s work: takes the CQ's next completion off the queue into
/// [`CqRs::current`] and the `ibv_cq_ex`'s `status`/`wr_id`; `ENOENT` (also in `errno`, as
/// rxe sets it) when the CQ is empty.
fn cq_ex_advance(cq: *mut ibv_cq_ex) -> Result<(), Errno> {
    let q = ptr::get::<ibv_cq_ex, CqRs>(cq)?;
    let c = ctx_rs(q.ctx as *const ibv_context)?;
    thread_local! {
        static ONE: std::cell::RefCell<Vec<softrdma_core::verbs::WorkCompletion>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    let wc = ONE.with(|b| {
        let mut b = b.borrow_mut();
        b.clear();
        note_poll(&c.shared);
        let n = c
            .dev()
            .poll_cq_into(q.id, &mut b, 1)
            .map_err(|e| conv::dev_errno(&e))?;
        Ok::<_, Errno>(b.iter().take(n).next().map(conv::wc))
    })?;
    let Some(wc) = wc else {
        // As in `op_poll_cq`: let the device's loop thread have the lock a spinner would
        // otherwise retake at once.
        if !c.dev().app_turns() {
            std::thread::yield_now();
        }
        crate::entry::set_errno(Errno::ENOENT);
        return Err(Errno::ENOENT);
    };
    *lock(&q.current) = wc;
    // SAFETY: `cq` is live (checked above); we write our own fields through raw places.
    unsafe {
        (*cq).status = wc.status;
        (*cq).wr_id = wc.wr_id;
    }
    Ok(())
}

/// The current completion of the CQ-ex at `cq` (what `read_*` describe).
fn cq_ex_current(cq: *mut ibv_cq_ex) -> Result<ibv_wc, Errno> {
    Ok(*lock(&ptr::get::<ibv_cq_ex, CqRs>(cq)?.current))
}

entry! {
    /// `ibv_start_poll`: 0 with the first completion current, or `ENOENT`. The completion
    /// is consumed as it becomes current, so nothing is held between the calls and
    /// `end_poll` has nothing to release.
    op errno fn op_cq_start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
        if !attr.is_null() {
            // SAFETY: the caller's `struct ibv_poll_cq_attr`.
            let a = unsafe { ptr::read_in(attr as *const ibv_poll_cq_attr)? };
            if a.comp_mask != 0 {
                return Err(Errno::EINVAL);
            }
        }
        cq_ex_advance(cq)
    }
}

entry! {
    /// `ibv_next_poll`: 0 with the next completion current, or `ENOENT`.
    op errno fn op_cq_next_poll(cq: *mut ibv_cq_ex) -> c_int {
        cq_ex_advance(cq)
    }
}

entry! {
    /// `ibv_end_poll`.
    op value fn op_cq_end_poll(cq: *mut ibv_cq_ex) -> () {
        let _ = cq;
    }
}

/// Declares `read_*` functions of the current completion: each reads one field of it (0
/// for a CQ that is not ours, where rdma-core's would read freed memory).
macro_rules! cq_ex_readers {
    ($($name:ident -> $ret:ty = |$w:ident| $e:expr;)*) => {$(
        entry! {
            op value fn $name(cq: *mut ibv_cq_ex) -> $ret {
                cq_ex_current(cq).map(|$w| $e).unwrap_or(0)
            }
        }
    )*};
}

cq_ex_readers! {
    op_cq_read_opcode -> u32 = |w| w.opcode as u32;
    op_cq_read_vendor_err -> u32 = |w| w.vendor_err;
    op_cq_read_byte_len -> u32 = |w| w.byte_len;
    op_cq_read_imm_data -> u32 = |w| w.imm_data;
    op_cq_read_qp_num -> u32 = |w| w.qp_num;
    op_cq_read_src_qp -> u32 = |w| w.src_qp;
    op_cq_read_wc_flags -> u32 = |w| w.wc_flags;
    op_cq_read_slid -> u32 = |w| u32::from(w.slid);
    op_cq_read_sl -> u8 = |w| w.sl;
    op_cq_read_dlid_path_bits -> u8 = |w| w.dlid_path_bits;
}

// ----- QPs -----

/// A QP's Rust side. Every QP is published as an `ibv_qp_ex` (an `ibv_qp` followed by the
/// work-request builder), whichever verb created it; `ibv_qp_to_qp_ex` hands the builder out
/// only for QPs created with send ops, as rdma-core does.
pub struct QpRs {
    ctx: usize,
    qpn: u32,
    max_send_sge: u32,
    max_inline: u32,
    /// The QP's PD (a UD send's address handle must be of it).
    pd: PdId,
    ud: bool,
    /// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` (None: created without, no `ibv_qp_ex`).
    send_ops: Option<u64>,
    /// The WRs built since `wr_start` ([`WrBatch`]).
    batch: Mutex<WrBatch>,
}

/// The WRs `ibv_wr_*` built since `wr_start`, posted together by `wr_complete`; the first
/// error a builder or setter met (the C functions return nothing) is `wr_complete`'s answer,
/// and then nothing is posted (as on rxe).
#[derive(Default)]
struct WrBatch {
    wrs: Vec<SendWr>,
    err: Option<Errno>,
}

/// The Rust state of the QP at `qp`.
fn qp_rs<'a>(qp: *const ibv_qp) -> Result<&'a QpRs, Errno> {
    ptr::get::<ibv_qp_ex, QpRs>(qp.cast())
}

/// `enum ibv_qp_create_send_ops_flags` bits.
mod send_ops {
    pub const RDMA_WRITE: u64 = 1 << 0;
    pub const RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    pub const SEND: u64 = 1 << 2;
    pub const SEND_WITH_IMM: u64 = 1 << 3;
    pub const RDMA_READ: u64 = 1 << 4;
    pub const ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    pub const ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    pub const SEND_WITH_INV: u64 = 1 << 9;
    /// What each QP type's transport does (rxe's sets less memory windows, local
    /// invalidation and atomic write, which softrdma's transport does not have).
    pub const RC: u64 = RDMA_WRITE
        | RDMA_WRITE_WITH_IMM
        | SEND
        | SEND_WITH_IMM
        | RDMA_READ
        | ATOMIC_CMP_AND_SWP
        | ATOMIC_FETCH_AND_ADD
        | SEND_WITH_INV;
    pub const UC: u64 = RDMA_WRITE | RDMA_WRITE_WITH_IMM | SEND | SEND_WITH_IMM;
    pub const UD: u64 = SEND | SEND_WITH_IMM;
}

/// `IBV_QP_INIT_ATTR_PD`, `IBV_QP_INIT_ATTR_CREATE_FLAGS`, `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
const QP_INIT_ATTR_PD: u32 = 1 << 0;
const QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
const QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

/// `ibv_create_qp` and `ibv_create_qp_ex`'s common work: `a` is the legacy part of the
/// attributes (whose granted capabilities are written back to `cap_out`).
fn create_qp(
    pd: *mut ibv_pd,
    a: &ibv_qp_init_attr,
    cap_out: *mut ibv_qp_cap,
    send_ops: Option<u64>,
) -> Result<*mut ibv_qp, Errno> {
    let p = ptr::get::<ibv_pd, PdRs>(pd)?;
    let c = ctx_rs(p.ctx as *const ibv_context)?;
    let srq = if a.srq.is_null() {
        None
    } else {
        Some(ptr::get::<ibv_srq, SrqRs>(a.srq as *const ibv_srq)?.id)
    };
    let send = cq_rs(a.send_cq)?;
    let recv = cq_rs(a.recv_cq)?;
    let ty = conv::qp_type(a.qp_type)?;
    if let Some(ops) = send_ops {
        let allowed = match ty {
            QpType::Rc => send_ops::RC,
            QpType::Uc => send_ops::UC,
            _ => send_ops::UD,
        };
        if ops & !allowed != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
    }
    let init = QpInitAttr {
        qp_type: ty,
        pd: p.id,
        send_cq: send.id,
        recv_cq: recv.id,
        srq,
        cap: conv::cap(&a.cap),
        sq_sig_all: a.sq_sig_all != 0,
    };
    let (qpn, granted) = c.dev().create_qp(init).map_err(|e| conv::dev_errno(&e))?;
    // rdma-core writes the granted capabilities back.
    // SAFETY: the caller's attribute struct's `cap`, writable (the verbs take a
    // non-const pointer and write it).
    unsafe { cap_out.write_unaligned(conv::cap_c(&granted)) };
    let ops = send_ops.unwrap_or(0);
    let setters = send_ops.is_some();
    let q = ptr::publish(
        ibv_qp_ex {
            qp_base: ibv_qp {
                context: p.ctx as *mut ibv_context,
                qp_context: a.qp_context,
                pd,
                send_cq: a.send_cq,
                recv_cq: a.recv_cq,
                srq: a.srq,
                handle: qpn,
                qp_num: qpn,
                state: 0,
                qp_type: a.qp_type,
                mutex: [0; 5],
                cond: [0; 6],
                events_completed: 0,
            },
            comp_mask: 0,
            wr_id: 0,
            wr_flags: 0,
            wr_atomic_cmp_swp: (ops & send_ops::ATOMIC_CMP_AND_SWP != 0)
                .then_some(op_wr_atomic_cmp_swp as WrCmpSwpFn),
            wr_atomic_fetch_add: (ops & send_ops::ATOMIC_FETCH_AND_ADD != 0)
                .then_some(op_wr_atomic_fetch_add as WrFetchAddFn),
            wr_bind_mw: None,
            wr_local_inv: None,
            wr_rdma_read: (ops & send_ops::RDMA_READ != 0).then_some(op_wr_rdma_read as WrRdmaFn),
            wr_rdma_write: (ops & send_ops::RDMA_WRITE != 0)
                .then_some(op_wr_rdma_write as WrRdmaFn),
            wr_rdma_write_imm: (ops & send_ops::RDMA_WRITE_WITH_IMM != 0)
                .then_some(op_wr_rdma_write_imm as WrRdmaImmFn),
            wr_send: (ops & send_ops::SEND != 0).then_some(op_wr_send as WrSendFn),
            wr_send_imm: (ops & send_ops::SEND_WITH_IMM != 0)
                .then_some(op_wr_send_imm as WrSendU32Fn),
            wr_send_inv: (ops & send_ops::SEND_WITH_INV != 0)
                .then_some(op_wr_send_inv as WrSendU32Fn),
            wr_send_tso: None,
            wr_set_ud_addr: setters.then_some(op_wr_set_ud_addr as WrSetUdAddrFn),
            wr_set_xrc_srqn: None,
            wr_set_inline_data: setters.then_some(op_wr_set_inline_data as WrSetInlineFn),
            wr_set_inline_data_list: setters
                .then_some(op_wr_set_inline_data_list as WrSetInlineListFn),
            wr_set_sge: setters.then_some(op_wr_set_sge as WrSetSgeFn),
            wr_set_sge_list: setters.then_some(op_wr_set_sge_list as WrSetSgeListFn),
            wr_start: setters.then_some(op_wr_start as WrSendFn),
            wr_complete: setters.then_some(op_wr_complete as WrCompleteFn),
            wr_abort: setters.then_some(op_wr_abort as WrSendFn),
            wr_atomic_write: None,
        },
        QpRs {
            ctx: p.ctx,
            qpn,
            max_send_sge: granted.max_send_sge,
            max_inline: granted.max_inline_data,
            pd: p.id,
            ud: ty == QpType::Ud,
            send_ops,
            batch: Mutex::default(),
        },
    );
    lock(&c.shared.qps).insert(qpn, q as usize);
    Ok(q.cast())
}

entry! {
    export null fn ibv_create_qp(pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
        // SAFETY: the caller's attributes (NULL is EINVAL).
        let a = unsafe { ptr::read_in(qp_init_attr as *const ibv_qp_init_attr)? };
        // SAFETY: non-NULL (read above); `cap` is a field of the caller's struct.
        let cap = unsafe { &raw mut (*qp_init_attr).cap };
        create_qp(pd, &a, cap, None)
    }
}

entry! {
    /// `verbs_context.create_qp_ex` (`ibv_create_qp_ex`, inline in `verbs.h`, which itself
    /// calls `ibv_create_qp` when the mask is only `IBV_QP_INIT_ATTR_PD`). A PD is required;
    /// create flags, XRC, RSS and TSO are `EOPNOTSUPP` (rxe accepts create flags only to
    /// refuse every one the kernel lacks).
    op null fn op_create_qp_ex(context: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
        // SAFETY: the caller's attributes (NULL is EINVAL).
        let a = unsafe { ptr::read_in(attr as *const ibv_qp_init_attr_ex)? };
        let supported = QP_INIT_ATTR_PD | QP_INIT_ATTR_CREATE_FLAGS | QP_INIT_ATTR_SEND_OPS_FLAGS;
        if a.comp_mask & !supported != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & QP_INIT_ATTR_PD == 0 {
            return Err(Errno::EINVAL);
        }
        if ptr::read_c::<ibv_pd, PdRs, _>(a.pd, |p| p.context)? != context {
            return Err(Errno::EINVAL);
        }
        let legacy = a.legacy();
        let ops = (a.comp_mask & QP_INIT_ATTR_SEND_OPS_FLAGS != 0).then_some(a.send_ops_flags);
        // SAFETY: non-NULL (read above); `cap` is a field of the caller's struct.
        let cap = unsafe { &raw mut (*attr).cap };
        create_qp(a.pd, &legacy, cap, ops)
    }
}

entry! {
    export errno fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int {
        let q = qp_rs(qp)?;
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        // SAFETY: the caller's attributes (NULL is EINVAL).
        let a = unsafe { ptr::read_in(attr as *const ibv_qp_attr)? };
        let (qa, mask) = conv::qp_attr(&a, attr_mask as u32)?;
        c.dev().modify_qp(q.qpn, &qa, mask).map_err(|e| conv::dev_errno(&e))?;
        if mask.contains(softrdma_core::verbs::QpAttrMask::STATE) {
            // SAFETY: `qp` is live; our own field, written through a raw place.
            unsafe { (*qp).state = a.qp_state };
        }
        Ok(())
    }
}

entry! {
    export errno fn ibv_query_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int, init_attr: *mut ibv_qp_init_attr) -> c_int {
        let _ = attr_mask; // Everything is returned, as rxe does.
        let q = qp_rs(qp)?;
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        let qa = c.dev().query_qp(q.qpn).map_err(|e| conv::dev_errno(&e))?;
        let ca = conv::qp_attr_c(&qa);
        let init = ptr::read_c::<ibv_qp_ex, QpRs, _>(qp.cast(), |x| ibv_qp_init_attr {
            qp_context: x.qp_base.qp_context,
            send_cq: x.qp_base.send_cq,
            recv_cq: x.qp_base.recv_cq,
            srq: x.qp_base.srq,
            cap: ca.cap,
            qp_type: x.qp_base.qp_type,
            sq_sig_all: 0,
        })?;
        let sig_all = c.dev().with_stack(|s| s.verbs.qp(q.qpn).map(|p| p.sq_sig_all()).unwrap_or(false));
        // SAFETY: the caller's two output structs (NULL is EINVAL).
        unsafe {
            ptr::write_out(attr, ca)?;
            ptr::write_out(init_attr, ibv_qp_init_attr { sq_sig_all: c_int::from(sig_all), ..init })?;
        }
        Ok(())
    }
}

entry! {
    export errno fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
        let q = qp_rs(qp)?;
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        c.dev().destroy_qp(q.qpn).map_err(|e| conv::dev_errno(&e))?;
        lock(&c.shared.qps).remove(&q.qpn);
        drop(ptr::retire::<ibv_qp_ex, QpRs>(qp.cast())?);
        Ok(())
    }
}

entry! {
    /// `ibv_attach_mcast`: the UD QP hears the multicast group `gid` (`crate::mcast`).
    export errno fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
        let q = qp_rs(qp)?;
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        // SAFETY: the caller's GID (NULL is EINVAL).
        let g = unsafe { ptr::read_in(gid)? };
        crate::mcast::attach(c.dev(), q.qpn, g.raw, lid)
    }
}

entry! {
    /// `ibv_detach_mcast`.
    export errno fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
        let q = qp_rs(qp)?;
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        // SAFETY: the caller's GID (NULL is EINVAL).
        let g = unsafe { ptr::read_in(gid)? };
        crate::mcast::detach(c.dev(), q.qpn, g.raw, lid)
    }
}

entry! {
    /// The QP's `ibv_qp_ex` (the same address) if it was created with send ops, else NULL,
    /// as rdma-core answers.
    export value fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut c_void {
        match qp_rs(qp) {
            Ok(q) if q.send_ops.is_some() => qp.cast(),
            _ => core::ptr::null_mut(),
        }
    }
}

// ----- the work-request builder of `ibv_qp_ex` (`ibv_wr_*`) -----

/// Runs `f` on the batch of the QP-ex at `qp`; an error it returns becomes the batch's
/// (the first one stays: it is what `wr_complete` reports).
fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&QpRs, &mut WrBatch) -> Result<(), Errno>) {
    let Ok(q) = ptr::get::<ibv_qp_ex, QpRs>(qp) else {
        return; // Not a QP of ours: nothing to record it in (rdma-core would crash).
    };
    let mut b = lock(&q.batch);
    if b.err.is_some() {
        return;
    }
    if let Err(e) = f(q, &mut b) {
        b.err = Some(e);
    }
}

/// A builder: starts a WR of `op` with the `ibv_qp_ex`'s current `wr_id` and `wr_flags`
/// (`IBV_SEND_INLINE` there means nothing: inline data comes with `wr_set_inline_data`).
fn build(qp: *mut ibv_qp_ex, op: SendOp) {
    let Ok((wr_id, flags)) = ptr::read_c::<ibv_qp_ex, QpRs, _>(qp, |x| (x.wr_id, x.wr_flags))
    else {
        return;
    };
    with_batch(qp, |_, b| {
        let mut w = SendWr::new(wr_id, op);
        w.signaled = flags & conv::SEND_SIGNALED != 0;
        w.solicited = flags & conv::SEND_SOLICITED != 0;
        w.fence = flags & conv::SEND_FENCE != 0;
        b.wrs.push(w);
        Ok(())
    });
}

/// A setter: completes the last WR built (`EINVAL` if none was).
fn set_last(qp: *mut ibv_qp_ex, f: impl FnOnce(&QpRs, &mut SendWr) -> Result<(), Errno>) {
    with_batch(qp, |q, b| f(q, b.wrs.last_mut().ok_or(Errno::EINVAL)?));
}

entry! {
    op value fn op_wr_atomic_cmp_swp(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, compare: u64, swap: u64) -> () {
        build(qp, SendOp::AtomicCmpSwp { remote_addr, rkey, compare, swap });
    }
}

entry! {
    op value fn op_wr_atomic_fetch_add(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64) -> () {
        build(qp, SendOp::AtomicFetchAdd { remote_addr, rkey, add });
    }
}

entry! {
    op value fn op_wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) -> () {
        build(qp, SendOp::RdmaRead { remote_addr, rkey });
    }
}

entry! {
    op value fn op_wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) -> () {
        build(qp, SendOp::RdmaWrite { remote_addr, rkey });
    }
}

entry! {
    /// `imm_data` is `__be32`.
    op value fn op_wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm_data: u32) -> () {
        build(qp, SendOp::RdmaWriteWithImm { remote_addr, rkey, imm: u32::from_be(imm_data) });
    }
}

entry! {
    op value fn op_wr_send(qp: *mut ibv_qp_ex) -> () {
        build(qp, SendOp::Send);
    }
}

entry! {
    /// `imm_data` is `__be32`.
    op value fn op_wr_send_imm(qp: *mut ibv_qp_ex, imm_data: u32) -> () {
        build(qp, SendOp::SendWithImm { imm: u32::from_be(imm_data) });
    }
}

entry! {
    op value fn op_wr_send_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) -> () {
        build(qp, SendOp::SendWithInv { invalidate_rkey });
    }
}

entry! {
    op value fn op_wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) -> () {
        set_last(qp, |q, w| {
            w.ud = Some(ud_dest(q, ah, remote_qpn, remote_qkey)?);
            Ok(())
        });
    }
}

entry! {
    /// Copies the bytes now (the application may reuse them when the call returns); more
    /// than the QP's `max_inline_data` is `ENOSPC`, as on rxe.
    op value fn op_wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) -> () {
        set_last(qp, |q, w| {
            if length > q.max_inline as usize {
                return Err(Errno(libc::ENOSPC));
            }
            // SAFETY: the application's `length` readable bytes at `addr` (the verb's
            // contract), bounded by max_inline_data above.
            let data = unsafe { ptr::read_bytes(addr as u64, length)? };
            w.sg_list.clear();
            w.inline_data = Some(data);
            Ok(())
        });
    }
}

entry! {
    op value fn op_wr_set_inline_data_list(qp: *mut ibv_qp_ex, num_buf: usize, buf_list: *const ibv_data_buf) -> () {
        set_last(qp, |q, w| {
            if num_buf > SGE_READ_MAX {
                return Err(Errno(libc::ENOSPC));
            }
            // SAFETY: the application's array of `num_buf` entries (bounded above).
            let bufs = unsafe { ptr::read_array(buf_list, num_buf)? };
            let total = bufs.iter().try_fold(0usize, |t, b| t.checked_add(b.length));
            if total.is_none_or(|t| t > q.max_inline as usize) {
                return Err(Errno(libc::ENOSPC));
            }
            let mut data = Vec::with_capacity(total.unwrap_or(0));
            for b in &bufs {
                // SAFETY: each buffer's `length` readable bytes (the verb's contract); the
                // sum is bounded by max_inline_data above.
                data.extend(unsafe { ptr::read_bytes(b.addr as u64, b.length)? });
            }
            w.sg_list.clear();
            w.inline_data = Some(data);
            Ok(())
        });
    }
}

entry! {
    /// One SGE; a zero length means no SGE (a zero-length message), as on rxe.
    op value fn op_wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) -> () {
        set_last(qp, |_, w| {
            w.inline_data = None;
            w.sg_list.clear();
            if length != 0 {
                w.sg_list.push(Sge { addr, length, lkey });
            }
            Ok(())
        });
    }
}

entry! {
    /// More SGEs than the QP's `max_send_sge` is `ENOSPC`, as on rxe.
    op value fn op_wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) -> () {
        set_last(qp, |q, w| {
            if num_sge > q.max_send_sge as usize {
                return Err(Errno(libc::ENOSPC));
            }
            let n = c_int::try_from(num_sge).map_err(|_| Errno(libc::ENOSPC))?;
            w.inline_data = None;
            w.sg_list = sges(sg_list.cast_mut(), n)?;
            Ok(())
        });
    }
}

entry! {
    /// Starts a batch (anything built and not completed before is dropped).
    op value fn op_wr_start(qp: *mut ibv_qp_ex) -> () {
        if let Ok(q) = ptr::get::<ibv_qp_ex, QpRs>(qp) {
            *lock(&q.batch) = WrBatch::default();
        }
    }
}

entry! {
    /// Drops the batch.
    op value fn op_wr_abort(qp: *mut ibv_qp_ex) -> () {
        if let Ok(q) = ptr::get::<ibv_qp_ex, QpRs>(qp) {
            *lock(&q.batch) = WrBatch::default();
        }
    }
}

entry! {
    /// Posts the batch all or nothing, as rxe's and mlx5's `wr_complete` do (they roll the
    /// send queue back to where `wr_start` found it on an error): its first builder or
    /// setter error if it has one, else the core's refusal of any of its WRs (queue room
    /// counted with the batch's earlier WRs, `ENOSPC` as rxe's builders say it;
    /// `Stack::post_send_batch`) — then nothing of the batch is posted — else every WR, in
    /// order, under one hold of the device.
    op errno fn op_wr_complete(qp: *mut ibv_qp_ex) -> c_int {
        let q = ptr::get::<ibv_qp_ex, QpRs>(qp)?;
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        let b = core::mem::take(&mut *lock(&q.batch));
        if let Some(e) = b.err {
            return Err(e);
        }
        if b.wrs.iter().any(|w| q.ud != w.ud.is_some()) {
            // A UD WR without `wr_set_ud_addr` (a connected QP's WRs never get one).
            return Err(Errno::EINVAL);
        }
        let qpn = q.qpn;
        c.dev()
            .with_stack(|s| s.post_send_batch(qpn, b.wrs))
            .map_err(|(_, e)| match e {
                // rxe's builders find the queue full as they build (`check_qp_queue_full`):
                // ENOSPC, where its ibv_post_send says ENOMEM.
                softrdma_core::verbs::VerbsError::QueueFull { .. } => Errno(libc::ENOSPC),
                e => conv::verbs_errno(&e),
            })
    }
}

/// A UD WR's destination: the address handle (of the QP's PD) and the remote QP.
fn ud_dest(
    q: &QpRs,
    ah: *const ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) -> Result<UdDest, Errno> {
    let ah = ptr::get::<ibv_ah, AhRs>(ah)?;
    if ah.pd != q.pd {
        return Err(Errno::EINVAL);
    }
    Ok(UdDest {
        av: ah.av,
        remote_qpn,
        remote_qkey,
    })
}

/// Upper bound on SGEs read from one WR before the core checks the QP's own limit.
const SGE_READ_MAX: usize = 1024;

/// `ibv_post_recv` / `ibv_post_srq_recv` over a caller's WR list: each WR's SGEs read and
/// handed to `post` with the receive queue `found` names; the first WR refused (the first
/// of all when `found` is an error) goes to `*bad_wr`, as rdma-core reports it.
fn post_recv_list<T: Copy>(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    found: Result<T, Errno>,
    mut post: impl FnMut(T, u64, Vec<Sge>) -> Result<(), Errno>,
) -> Result<(), Errno> {
    let refuse = |at: *mut ibv_recv_wr, e: Errno| {
        if !bad_wr.is_null() {
            // SAFETY: the caller's non-NULL output (the entry point's `bad_wr`).
            unsafe { bad_wr.write(at) };
        }
        Err(e)
    };
    let target = match found {
        Ok(t) => t,
        Err(e) => return refuse(wr, e),
    };
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: `cur` is the caller's WR (the list the entry point was given, walked by
        // its own `next` links).
        let (id, list, n, next) =
            unsafe { ((*cur).wr_id, (*cur).sg_list, (*cur).num_sge, (*cur).next) };
        if let Err(e) = sges(list, n).and_then(|sg| post(target, id, sg)) {
            return refuse(cur, e);
        }
        cur = next;
    }
    Ok(())
}

fn sges(list: *mut ibv_sge, n: c_int) -> Result<Vec<Sge>, Errno> {
    let n = usize::try_from(n).map_err(|_| Errno::EINVAL)?;
    if n > SGE_READ_MAX {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the WR's `sg_list` holds `num_sge` entries (bounded above).
    let v = unsafe { ptr::read_array(list as *const ibv_sge, n)? };
    Ok(v.iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect())
}

entry! {
    op errno fn op_post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int {
        let found = qp_rs(qp).and_then(|q| Ok((q, ctx_rs(q.ctx as *const ibv_context)?)));
        let (q, c) = match found {
            Ok(v) => v,
            Err(e) => {
                // The first WR is the one refused.
                if !bad_wr.is_null() {
                    // SAFETY: the caller's non-NULL output.
                    unsafe { bad_wr.write(wr) };
                }
                return Err(e);
            }
        };
        let mut cur = wr;
        while !cur.is_null() {
            let r = (|| {
                // SAFETY: `cur` is the caller's WR (the list's head or a `next` it set).
                let w = unsafe { &*cur };
                let mut s = SendWr::new(w.wr_id, conv::send_op(w)?);
                s.sg_list = sges(w.sg_list, w.num_sge)?;
                s.signaled = w.send_flags & conv::SEND_SIGNALED != 0;
                s.solicited = w.send_flags & conv::SEND_SOLICITED != 0;
                s.fence = w.send_flags & conv::SEND_FENCE != 0;
                if q.ud {
                    s.ud = Some(ud_dest(q, w.ud_ah() as *const ibv_ah, w.ud_remote_qpn(), w.ud_remote_qkey())?);
                }
                if w.send_flags & conv::SEND_INLINE != 0 {
                    let total: u64 = s.sg_list.iter().map(|g| u64::from(g.length)).sum();
                    if total > u64::from(q.max_inline) {
                        return Err(Errno::EINVAL);
                    }
                    let mut data = Vec::with_capacity(total as usize);
                    for g in &s.sg_list {
                        // SAFETY: inline data: the application's bytes, readable during
                        // the call (the verbs contract), bounded by max_inline_data above.
                        data.extend(unsafe { ptr::read_bytes(g.addr, g.length as usize)? });
                    }
                    s.inline_data = Some(data);
                }
                c.dev().post_send(q.qpn, s).map_err(|e| conv::dev_errno(&e))
            })();
            if let Err(e) = r {
                if !bad_wr.is_null() {
                    // SAFETY: the caller's non-NULL output.
                    unsafe { bad_wr.write(cur) };
                }
                return Err(e);
            }
            // SAFETY: as above.
            cur = unsafe { (*cur).next };
        }
        Ok(())
    }
}

entry! {
    op errno fn op_post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int {
        let found = qp_rs(qp).and_then(|q| Ok((q, ctx_rs(q.ctx as *const ibv_context)?)));
        post_recv_list(wr, bad_wr, found, |(q, c), id, sg| {
            c.dev().post_recv(q.qpn, RecvWr::new(id, sg)).map_err(|e| conv::dev_errno(&e))
        })
    }
}

/// An SRQ's Rust side.
pub struct SrqRs {
    ctx: usize,
    id: SrqId,
}

fn srq_attr_c(a: &SrqAttr) -> ibv_srq_attr {
    ibv_srq_attr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

entry! {
    export null fn ibv_create_srq(pd: *mut ibv_pd, srq_init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
        let p = ptr::get::<ibv_pd, PdRs>(pd)?;
        let c = ctx_rs(p.ctx as *const ibv_context)?;
        // SAFETY: the caller's attributes (NULL is EINVAL).
        let init = unsafe { ptr::read_in(srq_init_attr as *const ibv_srq_init_attr)? };
        let want = SrqAttr { max_wr: init.attr.max_wr, max_sge: init.attr.max_sge, srq_limit: init.attr.srq_limit };
        let (id, got) = c
            .dev()
            .with_stack(|s| s.verbs.create_srq(p.id, want))
            .map_err(|e| conv::verbs_errno(&e))?;
        // rdma-core writes the granted sizes back.
        // SAFETY: the same caller struct, writable (`struct ibv_srq_init_attr *`).
        unsafe { (*srq_init_attr).attr = srq_attr_c(&got) };
        let q = ptr::publish(
            ibv_srq {
                context: p.ctx as *mut ibv_context,
                srq_context: init.srq_context,
                pd,
                handle: id.0,
                mutex: [0; 5],
                cond: [0; 6],
                events_completed: 0,
            },
            SrqRs { ctx: p.ctx, id },
        );
        lock(&c.shared.srqs).insert(id.0, q as usize);
        Ok(q)
    }
}

/// `IBV_SRQ_MAX_WR` (resizing), `IBV_SRQ_LIMIT` (arming the limit event).
const SRQ_MAX_WR: c_int = 1;
const SRQ_LIMIT: c_int = 2;

entry! {
    /// Arms the SRQ limit; resizing is `EOPNOTSUPP` (softrdma's SRQs keep their size).
    export errno fn ibv_modify_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, srq_attr_mask: c_int) -> c_int {
        let q = ptr::get::<ibv_srq, SrqRs>(srq)?;
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        // SAFETY: the caller's attributes (NULL is EINVAL).
        let a = unsafe { ptr::read_in(srq_attr as *const ibv_srq_attr)? };
        if srq_attr_mask & !(SRQ_MAX_WR | SRQ_LIMIT) != 0 {
            return Err(Errno::EINVAL);
        }
        if srq_attr_mask & SRQ_MAX_WR != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if srq_attr_mask & SRQ_LIMIT != 0 {
            c.dev()
                .with_stack(|s| s.verbs.arm_srq_limit(q.id, a.srq_limit))
                .map_err(|e| conv::verbs_errno(&e))?;
        }
        Ok(())
    }
}

entry! {
    export errno fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int {
        let q = ptr::get::<ibv_srq, SrqRs>(srq)?;
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        let a = c
            .dev()
            .with_stack(|s| s.verbs.srq(q.id).map(|s| s.attr()))
            .map_err(|e| conv::verbs_errno(&e))?;
        // SAFETY: the caller's output (NULL is EINVAL).
        unsafe { ptr::write_out(srq_attr, srq_attr_c(&a)) }
    }
}

entry! {
    export errno fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
        let q = ptr::get::<ibv_srq, SrqRs>(srq)?;
        let c = ctx_rs(q.ctx as *const ibv_context)?;
        c.dev().with_stack(|s| s.verbs.destroy_srq(q.id)).map_err(|e| conv::verbs_errno(&e))?;
        lock(&c.shared.srqs).remove(&q.id.0);
        drop(ptr::retire::<ibv_srq, SrqRs>(srq)?);
        Ok(())
    }
}

entry! {
    op errno fn op_post_srq_recv(srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int {
        let found = ptr::get::<ibv_srq, SrqRs>(srq).and_then(|q| Ok((q, ctx_rs(q.ctx as *const ibv_context)?)));
        post_recv_list(wr, bad_wr, found, |(q, c), id, sg| {
            c.dev().post_srq_recv(q.id, RecvWr::new(id, sg)).map_err(|e| conv::dev_errno(&e))
        })
    }
}

// ----- helpers -----

entry! {
    /// Our library pins no pages, so `fork()` needs no preparation: 0, as rdma-core answers
    /// on a kernel with copy-on-fork for pinned pages.
    export value fn ibv_fork_init() -> c_int {
        0
    }
}

entry! {
    /// `IBV_FORK_UNNEEDED` (2): see `ibv_fork_init`.
    export value fn ibv_is_fork_initialized() -> c_int {
        2
    }
}

entry! {
    /// Reads `dir/file` (up to `size - 1` bytes, a trailing newline dropped, NUL-terminated)
    /// and returns its length, or -1.
    export value fn ibv_read_sysfs_file(dir: *const c_char, file: *const c_char, buf: *mut c_char, size: usize) -> c_int {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            return -1;
        }
        // SAFETY: both are the caller's NUL-terminated strings (checked non-NULL).
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let path = format!("{}/{}", d.to_string_lossy(), f.to_string_lossy());
        let Ok(mut bytes) = std::fs::read(&path) else {
            return -1;
        };
        bytes.truncate(size - 1);
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
        }
        let n = bytes.len();
        bytes.push(0);
        // SAFETY: `buf` is writable for `size` > n bytes by the caller's contract.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n + 1) };
        n as c_int
    }
}

fn cstr_of(table: &'static [&'static CStr], i: c_int, unknown: &'static CStr) -> *const c_char {
    usize::try_from(i)
        .ok()
        .and_then(|i| table.get(i))
        .unwrap_or(&unknown)
        .as_ptr()
}

entry! {
    export value fn ibv_wc_status_str(status: c_int) -> *const c_char {
        const T: &[&CStr] = &[
            c"success", c"local length error", c"local QP operation error",
            c"local EE context operation error", c"local protection error",
            c"Work Request Flushed Error", c"memory management operation error",
            c"bad response error", c"local access error", c"remote invalid request error",
            c"remote access error", c"remote operation error",
            c"transport retry counter exceeded", c"RNR retry counter exceeded",
            c"local RDD violation error", c"remote invalid RD request", c"operation aborted",
            c"invalid EE context number", c"invalid EE context state", c"fatal error",
            c"response timeout error", c"general error", c"TM error", c"TM RNDV incomplete",
        ];
        cstr_of(T, status, c"unknown")
    }
}

entry! {
    export value fn ibv_node_type_str(node_type: c_int) -> *const c_char {
        const T: &[&CStr] = &[c"unknown", c"InfiniBand channel adapter", c"InfiniBand switch",
            c"InfiniBand router", c"iWARP NIC", c"usNIC", c"usNIC UDP", c"unspecified"];
        cstr_of(T, node_type + 1, c"unknown")
    }
}

entry! {
    export value fn ibv_port_state_str(port_state: c_int) -> *const c_char {
        const T: &[&CStr] = &[c"PORT_NOP", c"PORT_DOWN", c"PORT_INIT", c"PORT_ARMED",
            c"PORT_ACTIVE", c"PORT_ACTIVE_DEFER"];
        cstr_of(T, port_state, c"unknown")
    }
}

entry! {
    export value fn ibv_event_type_str(event: c_int) -> *const c_char {
        const T: &[&CStr] = &[c"CQ error", c"local work queue catastrophic error",
            c"invalid request local work queue error", c"local access violation work queue error",
            c"communication established", c"send queue drained", c"path migrated",
            c"path migration request error", c"local catastrophic error", c"port active",
            c"port error", c"LID change", c"P_Key change", c"SM change", c"SRQ catastrophic error",
            c"SRQ limit reached", c"last WQE reached", c"client reregistration", c"GID table change",
            c"WQ fatal"];
        cstr_of(T, event, c"unknown")
    }
}

/// `enum ibv_rate` → (multiple of 2.5 Gb/s, Mb/s), in enum order from `IBV_RATE_2_5_GBPS` (2).
const RATES: &[(c_int, c_int, c_int)] = &[
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 0, 14062),
    (12, 0, 56250),
    (13, 0, 112500),
    (14, 0, 168750),
    (15, 0, 25781),
    (16, 0, 100000),
    (17, 0, 200000),
    (18, 0, 300000),
    (19, 0, 28125),
    (20, 0, 50000),
    (21, 0, 400000),
    (22, 0, 600000),
];

entry! {
    export value fn ibv_rate_to_mult(rate: c_int) -> c_int {
        RATES.iter().find(|r| r.0 == rate && r.1 != 0).map_or(-1, |r| r.1)
    }
}

entry! {
    export value fn mult_to_ibv_rate(mult: c_int) -> c_int {
        RATES.iter().find(|r| r.1 == mult && r.1 != 0).map_or(0, |r| r.0)
    }
}

entry! {
    export value fn ibv_rate_to_mbps(rate: c_int) -> c_int {
        RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
    }
}

entry! {
    export value fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
        RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
    }
}

// ----- exported, not supported (yet): rdma-core's errno, never a made-up answer -----
//
// Their parameters are not read (so not declared: on x86-64 and arm64 a callee that ignores
// its arguments is ABI-compatible with any caller). `IBVERBS_PRIVATE_34` is the interface
// between libibverbs and its provider libraries: Debian's libmlx5/libefa/libmana import it,
// are linked BIND_NOW, and their constructors call `verbs_register_driver_34`. Our devices
// never reach a provider, so registering a driver, setting its ops or initialising its objects
// has nothing to act on (the `void` ones return having done nothing, which is all they could
// do here), and every provider command fails with `EOPNOTSUPP`. The `IBVERBS_1.0` bindings are
// the pre-2006 ABI (other structure layouts); they fail likewise.

/// Entry points softrdma has no device of theirs for: each fails as rdma-core's does, with
/// EOPNOTSUPP in the form its C signature returns (the errno as the value, `NULL`, `-1`, or
/// nothing, with `errno` set).
macro_rules! unsupported {
    ($($sym:literal $name:ident -> $ret:ty = $val:expr;)*) => {
        $(entry! {
            export_as $sym value fn $name() -> $ret { $val }
        })*
    };
}

fn unsupported_void() {
    crate::entry::set_errno(Errno::EOPNOTSUPP);
}

fn unsupported_neg() -> c_int {
    crate::entry::set_errno(Errno::EOPNOTSUPP);
    -1
}

fn unsupported_null() -> *mut c_void {
    crate::entry::set_errno(Errno::EOPNOTSUPP);
    core::ptr::null_mut()
}

entry! {
    export_as "sv____ioctl_final_num_attrs" value fn x_ioctl_final_num_attrs() -> u32 {
        { crate::entry::set_errno(Errno::EOPNOTSUPP); 0 }
    }
}

unsupported! {
    "sv____verbs_log" x_verbs_log -> () = unsupported_void();
    "sv___verbs_init_and_alloc_context" x_verbs_init_and_alloc_context -> *mut c_void = unsupported_null();
    "sv__execute_ioctl" x_execute_ioctl -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_advise_mr" x_ibv_cmd_advise_mr -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_alloc_dm" x_ibv_cmd_alloc_dm -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_alloc_mw" x_ibv_cmd_alloc_mw -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_alloc_pd" x_ibv_cmd_alloc_pd -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_attach_mcast" x_ibv_cmd_attach_mcast -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_close_xrcd" x_ibv_cmd_close_xrcd -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_ah" x_ibv_cmd_create_ah -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_counters" x_ibv_cmd_create_counters -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_cq" x_ibv_cmd_create_cq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_cq_ex" x_ibv_cmd_create_cq_ex -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_flow" x_ibv_cmd_create_flow -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_flow_action_esp" x_ibv_cmd_create_flow_action_esp -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_qp" x_ibv_cmd_create_qp -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_qp_ex" x_ibv_cmd_create_qp_ex -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_qp_ex2" x_ibv_cmd_create_qp_ex2 -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_rwq_ind_table" x_ibv_cmd_create_rwq_ind_table -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_srq" x_ibv_cmd_create_srq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_srq_ex" x_ibv_cmd_create_srq_ex -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_create_wq" x_ibv_cmd_create_wq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_dealloc_mw" x_ibv_cmd_dealloc_mw -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_dealloc_pd" x_ibv_cmd_dealloc_pd -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_dereg_mr" x_ibv_cmd_dereg_mr -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_destroy_ah" x_ibv_cmd_destroy_ah -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_destroy_counters" x_ibv_cmd_destroy_counters -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_destroy_cq" x_ibv_cmd_destroy_cq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_destroy_flow" x_ibv_cmd_destroy_flow -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_destroy_flow_action" x_ibv_cmd_destroy_flow_action -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_destroy_qp" x_ibv_cmd_destroy_qp -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_destroy_rwq_ind_table" x_ibv_cmd_destroy_rwq_ind_table -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_destroy_srq" x_ibv_cmd_destroy_srq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_destroy_wq" x_ibv_cmd_destroy_wq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_detach_mcast" x_ibv_cmd_detach_mcast -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_free_dm" x_ibv_cmd_free_dm -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_get_context" x_ibv_cmd_get_context -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_modify_cq" x_ibv_cmd_modify_cq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_modify_flow_action_esp" x_ibv_cmd_modify_flow_action_esp -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_modify_qp" x_ibv_cmd_modify_qp -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_modify_qp_ex" x_ibv_cmd_modify_qp_ex -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_modify_srq" x_ibv_cmd_modify_srq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_modify_wq" x_ibv_cmd_modify_wq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_open_qp" x_ibv_cmd_open_qp -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_open_xrcd" x_ibv_cmd_open_xrcd -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_poll_cq" x_ibv_cmd_poll_cq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_post_recv" x_ibv_cmd_post_recv -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_post_send" x_ibv_cmd_post_send -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_post_srq_recv" x_ibv_cmd_post_srq_recv -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_query_context" x_ibv_cmd_query_context -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_query_device_any" x_ibv_cmd_query_device_any -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_query_mr" x_ibv_cmd_query_mr -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_query_port" x_ibv_cmd_query_port -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_query_qp" x_ibv_cmd_query_qp -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_query_srq" x_ibv_cmd_query_srq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_read_counters" x_ibv_cmd_read_counters -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_reg_dm_mr" x_ibv_cmd_reg_dm_mr -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_reg_dmabuf_mr" x_ibv_cmd_reg_dmabuf_mr -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_reg_mr" x_ibv_cmd_reg_mr -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_req_notify_cq" x_ibv_cmd_req_notify_cq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_rereg_mr" x_ibv_cmd_rereg_mr -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_cmd_resize_cq" x_ibv_cmd_resize_cq -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_import_device" x_ibv_import_device -> *mut c_void = unsupported_null();
    "sv__ibv_import_dm" x_ibv_import_dm -> *mut c_void = unsupported_null();
    "sv__ibv_import_mr" x_ibv_import_mr -> *mut c_void = unsupported_null();
    "sv__ibv_import_pd" x_ibv_import_pd -> *mut c_void = unsupported_null();
    "sv__ibv_query_ece" x_ibv_query_ece -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_read_ibdev_sysfs_file" x_ibv_read_ibdev_sysfs_file -> c_int = unsupported_neg();
    "sv__ibv_reg_dmabuf_mr" x_ibv_reg_dmabuf_mr -> *mut c_void = unsupported_null();
    "sv__ibv_resolve_eth_l2_from_gid" x_ibv_resolve_eth_l2_from_gid -> c_int = unsupported_neg();
    "sv__ibv_set_ece" x_ibv_set_ece -> c_int = libc::EOPNOTSUPP;
    "sv__ibv_unimport_dm" x_ibv_unimport_dm -> () = unsupported_void();
    "sv__ibv_unimport_mr" x_ibv_unimport_mr -> () = unsupported_void();
    "sv__ibv_unimport_pd" x_ibv_unimport_pd -> () = unsupported_void();
}

entry! {
    export_as "sv__verbs_allow_disassociate_destroy" value fn x_verbs_allow_disassociate_destroy() -> bool {
        false
    }
}

unsupported! {
    "sv__verbs_init_cq" x_verbs_init_cq -> () = unsupported_void();
    "sv__verbs_open_device" x_verbs_open_device -> *mut c_void = unsupported_null();
    "sv__verbs_register_driver_34" x_verbs_register_driver_34 -> () = unsupported_void();
    "sv__verbs_set_ops" x_verbs_set_ops -> () = unsupported_void();
    "sv__verbs_uninit_context" x_verbs_uninit_context -> () = unsupported_void();
    "sv10__ibv_ack_async_event" compat10_ibv_ack_async_event -> () = unsupported_void();
    "sv10__ibv_ack_cq_events" compat10_ibv_ack_cq_events -> () = unsupported_void();
    "sv10__ibv_alloc_pd" compat10_ibv_alloc_pd -> *mut c_void = unsupported_null();
    "sv10__ibv_attach_mcast" compat10_ibv_attach_mcast -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_close_device" compat10_ibv_close_device -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_create_ah" compat10_ibv_create_ah -> *mut c_void = unsupported_null();
    "sv10__ibv_create_cq" compat10_ibv_create_cq -> *mut c_void = unsupported_null();
    "sv10__ibv_create_qp" compat10_ibv_create_qp -> *mut c_void = unsupported_null();
    "sv10__ibv_create_srq" compat10_ibv_create_srq -> *mut c_void = unsupported_null();
    "sv10__ibv_dealloc_pd" compat10_ibv_dealloc_pd -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_dereg_mr" compat10_ibv_dereg_mr -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_destroy_ah" compat10_ibv_destroy_ah -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_destroy_cq" compat10_ibv_destroy_cq -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_destroy_qp" compat10_ibv_destroy_qp -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_destroy_srq" compat10_ibv_destroy_srq -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_detach_mcast" compat10_ibv_detach_mcast -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_free_device_list" compat10_ibv_free_device_list -> () = unsupported_void();
    "sv10__ibv_get_async_event" compat10_ibv_get_async_event -> c_int = unsupported_neg();
    "sv10__ibv_get_cq_event" compat10_ibv_get_cq_event -> c_int = unsupported_neg();
}

entry! {
    export_as "sv10__ibv_get_device_guid" value fn compat10_ibv_get_device_guid() -> u64 {
        { crate::entry::set_errno(Errno::EOPNOTSUPP); 0 }
    }
}

unsupported! {
    "sv10__ibv_get_device_list" compat10_ibv_get_device_list -> *mut c_void = unsupported_null();
    "sv10__ibv_get_device_name" compat10_ibv_get_device_name -> *mut c_void = unsupported_null();
    "sv10__ibv_modify_qp" compat10_ibv_modify_qp -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_modify_srq" compat10_ibv_modify_srq -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_open_device" compat10_ibv_open_device -> *mut c_void = unsupported_null();
    "sv10__ibv_query_device" compat10_ibv_query_device -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_query_gid" compat10_ibv_query_gid -> c_int = unsupported_neg();
    "sv10__ibv_query_pkey" compat10_ibv_query_pkey -> c_int = unsupported_neg();
    "sv10__ibv_query_port" compat10_ibv_query_port -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_query_qp" compat10_ibv_query_qp -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_query_srq" compat10_ibv_query_srq -> c_int = libc::EOPNOTSUPP;
    "sv10__ibv_reg_mr" compat10_ibv_reg_mr -> *mut c_void = unsupported_null();
    "sv10__ibv_resize_cq" compat10_ibv_resize_cq -> c_int = libc::EOPNOTSUPP;
}

entry! {
    /// Our library pins no pages, so there is no range to keep out of a child: 0, as rdma-core
    /// answers when fork support was not initialised.
    export value fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
        let _ = (base, size);
        0
    }
}

entry! {
    /// See `ibv_dontfork_range`.
    export value fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
        let _ = (base, size);
        0
    }
}

entry! {
    /// The index of `pkey` (network byte order) in port `port_num`'s P_Key table, or -1 with
    /// `ENOENT`.
    export neg fn ibv_get_pkey_index(context: *mut ibv_context, port_num: u8, pkey: u16) -> c_int {
        let c = ctx_rs(context)?;
        let len = query_port(context, port_num)?.pkey_tbl_len;
        for i in 0..len {
            let k = c.dev().with_stack(|s| s.device.query_pkey(port_num, i)).map_err(|_| Errno::EINVAL)?;
            if k.0 == u16::from_be(pkey) {
                return Ok(c_int::from(i));
            }
        }
        Err(Errno::ENOENT)
    }
}

entry! {
    /// Where sysfs is mounted.
    export value fn ibv_get_sysfs_path() -> *const c_char {
        c"/sys".as_ptr()
    }
}

entry! {
    /// 0: no in-order data placement is promised (the conservative answer rdma-core gives for
    /// a device that reports none).
    export value fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: c_int, flags: u32) -> c_int {
        let _ = (qp, op, flags);
        0
    }
}

entry! {
    /// The old driver-registration entry (`IBVERBS_1.1`, not default): there are no provider
    /// drivers here to register; nothing to do.
    export_as "sv10__ibv_register_driver" value fn compat_ibv_register_driver() -> () {
        unsupported_void()
    }
}

/// The `ibv_copy_*_from_kern`/`_to_kern` helpers: `dst = f(*src)`; with a NULL (or otherwise
/// unreadable) pointer nothing is copied, as those `void` calls have no way to fail.
fn copy_converted<S: Copy, D>(src: *mut S, dst: *mut D, f: impl FnOnce(&S) -> D) {
    // SAFETY: the caller's structs, each checked for NULL before use.
    unsafe {
        if let Ok(k) = ptr::read_in(src as *const S) {
            let _ = ptr::write_out(dst, f(&k));
        }
    }
}

entry! {
    /// Kernel → verbs QP attributes (librdmacm's, for replies from the kernel's RDMA CM).
    export value fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *mut ib_uverbs_qp_attr) -> () {
        copy_converted(src, dst, conv::qp_attr_from_kern);
    }
}

entry! {
    /// Kernel → verbs address vector.
    export value fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *mut ib_uverbs_ah_attr) -> () {
        copy_converted(src, dst, conv::ah_attr_from_kern);
    }
}

entry! {
    /// Kernel → `<infiniband/sa.h>` path record.
    export value fn ibv_copy_path_rec_from_kern(dst: *mut ibv_sa_path_rec, src: *mut ib_user_path_rec) -> () {
        copy_converted(src, dst, conv::path_rec_from_kern);
    }
}

entry! {
    /// `<infiniband/sa.h>` → kernel path record.
    export value fn ibv_copy_path_rec_to_kern(dst: *mut ib_user_path_rec, src: *mut ibv_sa_path_rec) -> () {
        copy_converted(src, dst, conv::path_rec_to_kern);
    }
}

/// Bad input through the entry points: an errno or a completion error, never a crash. The
/// tests call the functions as C would (unit-test builds have no export names), on the
/// loopback interface's device only.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use core::ptr::{null, null_mut};

    fn errno() -> c_int {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    const EINVAL: c_int = libc::EINVAL;

    /// Opens `softrdma_lo`.
    fn open_lo() -> *mut ibv_context {
        // SAFETY (test): the C calling sequence of ibv_devinfo.
        unsafe {
            let mut n = 0;
            let list = ibv_get_device_list(&mut n);
            assert!(!list.is_null() && n > 0);
            let mut ctx = null_mut();
            for i in 0..n as usize {
                let d = *list.add(i);
                let name = CStr::from_ptr(ibv_get_device_name(d));
                if name.to_bytes() == b"softrdma_lo" {
                    ctx = ibv_open_device(d);
                }
            }
            ibv_free_device_list(list);
            assert!(
                !ctx.is_null(),
                "softrdma_lo did not open: errno {}",
                errno()
            );
            ctx
        }
    }

    /// The extended verbs' function pointers given NULL or a foreign object: an errno (or
    /// nothing done, for the `void` ones), never a crash.
    #[test]
    fn extended_verbs_refuse_null_and_foreign_objects() {
        // SAFETY (test): every pointer is NULL, one of ours, or deliberately wrong.
        unsafe {
            let ctx = open_lo();
            let mut bytes = [0u64; 64];
            let foreign = bytes.as_mut_ptr().cast::<c_void>();
            assert_eq!(op_query_device_ex(ctx, null(), null_mut(), 400), EINVAL);
            let mut dx = core::mem::zeroed::<ibv_device_attr_ex>();
            assert_eq!(op_query_device_ex(ctx, null(), &mut dx, 8), EINVAL, "short");
            assert_eq!(op_query_device_ex(null_mut(), null(), &mut dx, 400), EINVAL);
            assert!(op_create_cq_ex(ctx, null_mut()).is_null());
            assert_eq!(errno(), EINVAL);
            assert!(op_create_qp_ex(ctx, null_mut()).is_null());
            assert_eq!(errno(), EINVAL);
            for cq in [null_mut(), foreign.cast::<ibv_cq_ex>()] {
                assert_eq!(op_cq_start_poll(cq, null_mut()), EINVAL);
                assert_eq!(op_cq_next_poll(cq), EINVAL);
                op_cq_end_poll(cq);
                assert_eq!(op_cq_read_byte_len(cq), 0);
                assert_eq!(op_cq_read_sl(cq), 0);
            }
            for qp in [null_mut(), foreign.cast::<ibv_qp_ex>()] {
                op_wr_start(qp);
                op_wr_send(qp);
                op_wr_rdma_write(qp, 1, 2);
                op_wr_set_sge(qp, 1, 2, 3);
                op_wr_set_sge_list(qp, 1, null());
                op_wr_set_inline_data(qp, null_mut(), 5);
                op_wr_set_inline_data_list(qp, 1, null());
                op_wr_set_ud_addr(qp, null_mut(), 1, 2);
                assert_eq!(op_wr_complete(qp), EINVAL);
                op_wr_abort(qp);
            }
            assert!(ibv_qp_to_qp_ex(null_mut()).is_null());
            assert!(ibv_qp_to_qp_ex(foreign.cast()).is_null());
            assert_eq!(bytes, [0u64; 64], "nothing written into a foreign object");
            assert_eq!(ibv_rereg_mr(null_mut(), 1, null_mut(), foreign, 8, 0), -1);
            assert_eq!(errno(), EINVAL);
            assert_eq!(ibv_close_device(ctx), 0);
        }
    }

    #[test]
    fn null_and_foreign_pointers_are_einval() {
        // SAFETY (test): every pointer is NULL, one of ours, or deliberately wrong.
        unsafe {
            assert!(ibv_open_device(null_mut()).is_null());
            assert_eq!(errno(), EINVAL);
            assert_eq!(ibv_close_device(null_mut()), EINVAL);
            assert!(ibv_get_device_name(null_mut()).is_null());
            assert_eq!(ibv_get_device_guid(null_mut()), 0);
            ibv_free_device_list(null_mut());
            assert!(
                !ibv_get_device_list(null_mut()).is_null(),
                "num_devices may be NULL"
            );
            assert!(ibv_alloc_pd(null_mut()).is_null());
            assert_eq!(errno(), EINVAL);

            let ctx = open_lo();
            assert_eq!(ibv_query_device(ctx, null_mut()), EINVAL);
            assert_eq!(ibv_query_port(ctx, 1, null_mut()), EINVAL);
            let mut pa = ibv_port_attr::default();
            assert_eq!(ibv_query_port(ctx, 2, &mut pa), EINVAL, "one port only");
            assert_eq!(ibv_query_gid(ctx, 1, -1, &mut ibv_gid::default()), -1);
            assert_eq!(ibv_query_gid(ctx, 1, 1 << 20, &mut ibv_gid::default()), -1);
            assert_eq!(ibv_query_gid(ctx, 1, 0, null_mut()), -1);
            assert_eq!(errno(), EINVAL);

            let pd = ibv_alloc_pd(ctx);
            assert!(!pd.is_null());
            // An MR on NULL with a length.
            assert!(ibv_reg_mr(pd, null_mut(), 64, 1).is_null());
            assert_eq!(errno(), EINVAL);
            // Remote write without local write (ib_check_mr_access).
            let mut buf = vec![0u8; 64];
            assert!(ibv_reg_mr(pd, buf.as_mut_ptr().cast(), 64, 2).is_null());
            assert_eq!(errno(), EINVAL);
            let cq = ibv_create_cq(ctx, 4, null_mut(), null_mut(), 0);
            assert!(!cq.is_null());
            assert!(ibv_create_cq(ctx, 0, null_mut(), null_mut(), 0).is_null());
            assert!(
                ibv_create_cq(ctx, 4, null_mut(), null_mut(), 7).is_null(),
                "one vector"
            );
            // A CQ is not a PD, a PD not a CQ.
            assert_eq!(ibv_dealloc_pd(cq.cast()), EINVAL);
            assert_eq!(ibv_destroy_cq(pd.cast()), EINVAL);
            assert!(ibv_create_qp(pd, null_mut()).is_null());
            assert_eq!(errno(), EINVAL);
            let mut init = ibv_qp_init_attr {
                qp_context: null_mut(),
                send_cq: cq,
                recv_cq: pd.cast(),
                srq: null_mut(),
                cap: ibv_qp_cap {
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: 2,
                sq_sig_all: 0,
            };
            assert!(ibv_create_qp(pd, &mut init).is_null(), "recv_cq is a PD");
            assert_eq!(errno(), EINVAL);
            init.recv_cq = cq;
            init.qp_type = 99;
            assert!(ibv_create_qp(pd, &mut init).is_null());
            assert_eq!(errno(), EINVAL);
            // Address handles: NULL, no GRH (RoCE), a source GID that does not exist.
            assert!(ibv_create_ah(pd, null_mut()).is_null());
            assert_eq!(errno(), EINVAL);
            let mut ah_attr = ibv_ah_attr {
                port_num: 1,
                ..Default::default()
            };
            assert!(ibv_create_ah(pd, &mut ah_attr).is_null(), "no GRH");
            assert_eq!(errno(), EINVAL);
            ah_attr.is_global = 1;
            ah_attr.grh.sgid_index = 200;
            assert!(
                ibv_create_ah(pd, &mut ah_attr).is_null(),
                "no such source GID"
            );
            ah_attr.grh.sgid_index = 1;
            let ah = ibv_create_ah(pd, &mut ah_attr);
            assert!(!ah.is_null());
            assert_eq!(ibv_destroy_ah(pd.cast()), EINVAL, "a PD is not an AH");
            assert_eq!(ibv_destroy_ah(ah), 0);
            assert_eq!(ibv_destroy_ah(ah), EINVAL, "twice");
            // SRQs: NULL attributes, resizing (not supported), one in use cannot go.
            assert!(ibv_create_srq(pd, null_mut()).is_null());
            assert_eq!(errno(), EINVAL);
            let mut si = ibv_srq_init_attr {
                srq_context: null_mut(),
                attr: ibv_srq_attr {
                    max_wr: 8,
                    max_sge: 1,
                    srq_limit: 0,
                },
            };
            let srq = ibv_create_srq(pd, &mut si);
            assert!(!srq.is_null(), "errno {}", errno());
            assert!(si.attr.max_wr >= 8, "granted sizes written back");
            let mut sa = ibv_srq_attr {
                max_wr: 64,
                ..Default::default()
            };
            assert_eq!(ibv_modify_srq(srq, &mut sa, 1), libc::EOPNOTSUPP);
            sa.srq_limit = 2;
            assert_eq!(ibv_modify_srq(srq, &mut sa, 2), 0);
            assert_eq!(ibv_query_srq(srq, &mut sa), 0);
            assert_eq!(sa.srq_limit, 2);
            assert_eq!(ibv_query_srq(srq, null_mut()), EINVAL);
            let mut rwr = ibv_recv_wr {
                wr_id: 1,
                next: null_mut(),
                sg_list: null_mut(),
                num_sge: 0,
            };
            let mut bad = null_mut();
            assert_eq!(
                op_post_srq_recv(cq.cast(), &mut rwr, &mut bad),
                EINVAL,
                "a CQ is not an SRQ"
            );
            assert_eq!(bad, &mut rwr as *mut ibv_recv_wr);
            rwr.num_sge = 2000;
            assert_eq!(
                op_post_srq_recv(srq, &mut rwr, &mut bad),
                EINVAL,
                "num_sge past any bound"
            );
            let mut init = ibv_qp_init_attr {
                qp_context: null_mut(),
                send_cq: cq,
                recv_cq: cq,
                srq: srq.cast(),
                cap: ibv_qp_cap {
                    max_send_wr: 4,
                    max_recv_wr: 0,
                    max_send_sge: 1,
                    max_recv_sge: 0,
                    max_inline_data: 0,
                },
                qp_type: 2,
                sq_sig_all: 0,
            };
            let qp = ibv_create_qp(pd, &mut init);
            assert!(!qp.is_null(), "errno {}", errno());
            assert_eq!(ibv_destroy_srq(srq), libc::EBUSY);
            assert_eq!(ibv_destroy_qp(qp), 0);
            assert_eq!(ibv_destroy_srq(srq), 0);
            assert_eq!(ibv_destroy_srq(srq), EINVAL, "twice");
            assert_eq!(op_poll_cq(cq, 4, null_mut()), -1);
            assert_eq!(op_poll_cq(cq, -1, &mut ibv_wc::default()), -1);
            assert_eq!(op_poll_cq(null_mut(), 1, &mut ibv_wc::default()), -1);
            assert_eq!(ibv_read_sysfs_file(null(), null(), null_mut(), 0), -1);
            // The PD is still in use by nothing: freed; freeing twice is EINVAL.
            assert_eq!(ibv_destroy_cq(cq), 0);
            assert_eq!(ibv_dealloc_pd(pd), 0);
            assert_eq!(ibv_dealloc_pd(pd), EINVAL);
            assert_eq!(ibv_close_device(ctx), 0);
            assert_eq!(ibv_close_device(ctx), EINVAL);
        }
    }

    #[test]
    fn gid_entries_say_their_type_and_interface() {
        // SAFETY (test): our own context and output structs.
        unsafe {
            let ctx = open_lo();
            let sz = core::mem::size_of::<ibv_gid_entry>();
            let mut e = ibv_gid_entry::default();
            assert_eq!(_ibv_query_gid_ex(ctx, 1, 1, &mut e, 0, sz), 0);
            assert_eq!((e.gid_index, e.port_num, e.gid_type), (1, 1, 2), "RoCE v2");
            assert_eq!(
                &e.gid.raw[..12],
                &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
            );
            assert_eq!(e.gid.raw[12], 127);
            assert_eq!(e.ndev_ifindex, nix::net::if_::if_nametoindex("lo").unwrap());
            let mut g = ibv_gid::default();
            assert_eq!(ibv_query_gid(ctx, 1, 1, &mut g), 0);
            assert_eq!(g, e.gid);
            assert_eq!(
                _ibv_query_gid_ex(ctx, 1, 500, &mut e, 0, sz),
                libc::ENODATA,
                "empty"
            );
            assert_eq!(_ibv_query_gid_ex(ctx, 1, 1 << 20, &mut e, 0, sz), EINVAL);
            assert_eq!(_ibv_query_gid_ex(ctx, 1, 1, &mut e, 1, sz), EINVAL, "flags");
            assert_eq!(_ibv_query_gid_ex(ctx, 1, 1, &mut e, 0, sz - 1), EINVAL);
            assert_eq!(_ibv_query_gid_ex(ctx, 1, 1, null_mut(), 0, sz), EINVAL);
            let mut t = [ibv_gid_entry::default(); 8];
            assert_eq!(_ibv_query_gid_table(ctx, t.as_mut_ptr(), 8, 0, sz), 2);
            assert_eq!(
                (t[0].gid.raw[0], t[0].gid.raw[1]),
                (0xfe, 0x80),
                "link-local first"
            );
            assert_eq!(t[1].gid, e.gid);
            assert_eq!(
                _ibv_query_gid_table(ctx, t.as_mut_ptr(), 1, 0, sz),
                -(EINVAL as isize)
            );
            let mut ty = -1;
            assert_eq!(ibv_query_gid_type(ctx, 1, 1, &mut ty), 0);
            assert_eq!(ty, 1, "IBV_GID_TYPE_SYSFS_ROCE_V2");
            let mut pkey = 0u16;
            assert_eq!(ibv_query_pkey(ctx, 1, 0, &mut pkey), 0);
            assert_eq!(u16::from_be(pkey), 0xffff);
            assert_eq!(ibv_query_pkey(ctx, 1, 5, &mut pkey), -1);
            assert_eq!(ibv_close_device(ctx), 0);
        }
    }

    const M_STATE: c_int = 1;
    const M_ACCESS: c_int = 1 << 3;
    const M_PKEY: c_int = 1 << 4;
    const M_PORT: c_int = 1 << 5;
    const M_AV: c_int = 1 << 7;
    const M_MTU: c_int = 1 << 8;
    const M_TIMEOUT: c_int = 1 << 9;
    const M_RETRY: c_int = 1 << 10;
    const M_RNR_RETRY: c_int = 1 << 11;
    const M_RQ_PSN: c_int = 1 << 12;
    const M_RD_ATOMIC: c_int = 1 << 13;
    const M_MIN_RNR: c_int = 1 << 15;
    const M_SQ_PSN: c_int = 1 << 16;
    const M_DEST_RD_ATOMIC: c_int = 1 << 17;
    const M_DEST_QPN: c_int = 1 << 20;

    struct Pair {
        ctx: *mut ibv_context,
        pd: *mut ibv_pd,
        cq: *mut ibv_cq,
        a: *mut ibv_qp,
        b: *mut ibv_qp,
    }

    /// Two RC QPs of one device connected to each other over the loopback.
    unsafe fn pair() -> Pair {
        // SAFETY (test): as `pair_cqe`.
        unsafe { pair_cqe(16) }
    }

    /// [`pair`] sharing one CQ of `cqe` entries.
    unsafe fn pair_cqe(cqe: c_int) -> Pair {
        // SAFETY (test): the ibv_rc_pingpong sequence, on our own objects.
        unsafe {
            let ctx = open_lo();
            let pd = ibv_alloc_pd(ctx);
            let cq = ibv_create_cq(ctx, cqe, null_mut(), null_mut(), 0);
            let mk = || {
                let mut init = ibv_qp_init_attr {
                    qp_context: null_mut(),
                    send_cq: cq,
                    recv_cq: cq,
                    srq: null_mut(),
                    cap: ibv_qp_cap {
                        max_send_wr: 4,
                        max_recv_wr: 4,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    qp_type: 2,
                    sq_sig_all: 0,
                };
                let q = ibv_create_qp(pd, &mut init);
                assert!(!q.is_null(), "create_qp: errno {}", errno());
                q
            };
            let (a, b) = (mk(), mk());
            let mut gid = ibv_gid::default();
            assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
            for (q, peer) in [(a, b), (b, a)] {
                let mut at = ibv_qp_attr {
                    qp_state: 1,
                    port_num: 1,
                    qp_access_flags: 1 | 2 | 4 | 8,
                    ..Default::default()
                };
                assert_eq!(
                    ibv_modify_qp(q, &mut at, M_STATE | M_PKEY | M_PORT | M_ACCESS),
                    0
                );
                let mut at = ibv_qp_attr {
                    qp_state: 2,
                    path_mtu: 3,
                    dest_qp_num: (*peer).qp_num,
                    rq_psn: 1,
                    max_dest_rd_atomic: 1,
                    min_rnr_timer: 12,
                    ..Default::default()
                };
                at.ah_attr.is_global = 1;
                at.ah_attr.grh.dgid = gid;
                at.ah_attr.grh.sgid_index = 1;
                at.ah_attr.grh.hop_limit = 1;
                at.ah_attr.port_num = 1;
                let m =
                    M_STATE | M_AV | M_MTU | M_DEST_QPN | M_RQ_PSN | M_DEST_RD_ATOMIC | M_MIN_RNR;
                assert_eq!(ibv_modify_qp(q, &mut at, m), 0);
                let mut at = ibv_qp_attr {
                    qp_state: 3,
                    timeout: 14,
                    retry_cnt: 7,
                    rnr_retry: 7,
                    sq_psn: 1,
                    max_rd_atomic: 1,
                    ..Default::default()
                };
                let m = M_STATE | M_TIMEOUT | M_RETRY | M_RNR_RETRY | M_SQ_PSN | M_RD_ATOMIC;
                assert_eq!(ibv_modify_qp(q, &mut at, m), 0);
                assert_eq!((*q).state, 3);
            }
            Pair { ctx, pd, cq, a, b }
        }
    }

    /// Polls until one completion arrives (5 s at most).
    unsafe fn one(cq: *mut ibv_cq) -> ibv_wc {
        let start = std::time::Instant::now();
        let mut wc = ibv_wc::default();
        loop {
            // SAFETY (test): one entry.
            let n = unsafe { op_poll_cq(cq, 1, &mut wc) };
            assert!(n >= 0);
            if n == 1 {
                return wc;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "no completion");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    unsafe fn send(p: &Pair, sge: &mut ibv_sge) -> c_int {
        // SAFETY (test): as `post`.
        unsafe { post(p, sge, 2, conv::SEND_SIGNALED, [0; 4]) }
    }

    unsafe fn post(p: &Pair, sge: &mut ibv_sge, opcode: c_int, flags: u32, wr4: [u64; 4]) -> c_int {
        let mut wr = ibv_send_wr {
            wr_id: 7,
            next: null_mut(),
            sg_list: sge,
            num_sge: 1,
            opcode,
            send_flags: flags,
            imm_data: 0,
            wr: wr4,
            remote_srqn: 0,
            rest: [0; 6],
        };
        let mut bad = null_mut();
        // SAFETY (test): one WR of ours.
        let r = unsafe { op_post_send(p.a, &mut wr, &mut bad) };
        if r != 0 {
            assert_eq!(
                bad, &mut wr as *mut ibv_send_wr,
                "bad_wr names the refused WR"
            );
        }
        r
    }

    #[test]
    fn sends_land_in_application_memory_and_bad_sges_fail_as_completions() {
        // SAFETY (test): our own objects and buffers, alive until the end.
        unsafe {
            let p = pair();
            let mut src = vec![0u8; 256];
            let mut dst = vec![0u8; 256];
            for (i, b) in src.iter_mut().enumerate() {
                *b = i as u8;
            }
            let smr = ibv_reg_mr(p.pd, src.as_mut_ptr().cast(), 256, 1);
            let dmr = ibv_reg_mr(p.pd, dst.as_mut_ptr().cast(), 256, 1);
            assert!(!smr.is_null() && !dmr.is_null());
            // A receive, then a good send: the bytes land in `dst` itself.
            let mut rsge = ibv_sge {
                addr: dst.as_ptr() as u64,
                length: 256,
                lkey: (*dmr).lkey,
            };
            let mut rwr = ibv_recv_wr {
                wr_id: 9,
                next: null_mut(),
                sg_list: &mut rsge,
                num_sge: 1,
            };
            let mut bad = null_mut();
            assert_eq!(op_post_recv(p.b, &mut rwr, &mut bad), 0);
            let mut sge = ibv_sge {
                addr: src.as_ptr() as u64,
                length: 100,
                lkey: (*smr).lkey,
            };
            assert_eq!(send(&p, &mut sge), 0);
            let mut got = [one(p.cq), one(p.cq)];
            got.sort_by_key(|w| w.wr_id);
            assert_eq!((got[0].wr_id, got[0].status), (7, 0));
            assert_eq!((got[1].wr_id, got[1].status, got[1].byte_len), (9, 0, 100));
            assert_eq!(&dst[..100], &src[..100]);

            // An SGE past its MR: a local protection error, never a read past the buffer.
            let mut sge = ibv_sge {
                addr: src.as_ptr() as u64 + 200,
                length: 100,
                lkey: (*smr).lkey,
            };
            let r = send(&p, &mut sge);
            if r == 0 {
                let w = one(p.cq);
                assert_eq!(w.wr_id, 7);
                assert_eq!(w.status, 4, "IBV_WC_LOC_PROT_ERR, got {w:?}");
            } else {
                assert_eq!(r, EINVAL);
            }
            // An lkey that names no MR (or one of another PD): the same.
            let pd2 = ibv_alloc_pd(p.ctx);
            let mut other = vec![0u8; 64];
            let omr = ibv_reg_mr(pd2, other.as_mut_ptr().cast(), 64, 1);
            assert!(!omr.is_null());
            let mut sge = ibv_sge {
                addr: other.as_ptr() as u64,
                length: 8,
                lkey: (*omr).lkey,
            };
            let r = send(&p, &mut sge);
            assert!(r == 0 || r == EINVAL);
            // The QP is in error after the first failure: what follows completes in error too.
            if r == 0 {
                assert_ne!(one(p.cq).status, 0);
            }
            assert_eq!(ibv_dereg_mr(omr), 0);
            assert_eq!(ibv_dereg_mr(omr), EINVAL, "twice");
            assert_eq!(ibv_dealloc_pd(pd2), 0);
        }
    }

    #[test]
    fn rdma_write_read_atomics_and_inline_sends_reach_application_memory() {
        // SAFETY (test): our own objects and buffers, alive until the end.
        unsafe {
            let p = pair();
            let access = 1 | 2 | 4 | 8; // local write, remote write, read, atomic
            let mut local = vec![0u8; 64];
            let mut remote = vec![0u8; 64];
            let lmr = ibv_reg_mr(p.pd, local.as_mut_ptr().cast(), 64, access);
            let rmr = ibv_reg_mr(p.pd, remote.as_mut_ptr().cast(), 64, access);
            assert!(!lmr.is_null() && !rmr.is_null());
            let raddr = remote.as_ptr() as u64;
            let rkey = u64::from((*rmr).rkey);
            local[..8].copy_from_slice(b"written!");
            // RDMA WRITE: `remote` changes with no receive posted.
            let mut sge = ibv_sge {
                addr: local.as_ptr() as u64,
                length: 8,
                lkey: (*lmr).lkey,
            };
            assert_eq!(
                post(&p, &mut sge, 0, conv::SEND_SIGNALED, [raddr, rkey, 0, 0]),
                0
            );
            assert_eq!(one(p.cq).status, 0);
            assert_eq!(&remote[..8], b"written!");
            // RDMA READ of remote[16..24] into local[8..16].
            remote[16..24].copy_from_slice(b"readback");
            let mut sge = ibv_sge {
                addr: local.as_ptr() as u64 + 8,
                length: 8,
                lkey: (*lmr).lkey,
            };
            assert_eq!(
                post(
                    &p,
                    &mut sge,
                    4,
                    conv::SEND_SIGNALED,
                    [raddr + 16, rkey, 0, 0]
                ),
                0
            );
            assert_eq!(one(p.cq).status, 0);
            assert_eq!(&local[8..16], b"readback");
            // FETCH_AND_ADD on remote[32..40]: the old value comes back into local[16..24].
            remote[32..40].copy_from_slice(&5u64.to_ne_bytes());
            let mut sge = ibv_sge {
                addr: local.as_ptr() as u64 + 16,
                length: 8,
                lkey: (*lmr).lkey,
            };
            assert_eq!(
                post(
                    &p,
                    &mut sge,
                    6,
                    conv::SEND_SIGNALED,
                    [raddr + 32, 3, 0, rkey]
                ),
                0
            );
            assert_eq!(one(p.cq).status, 0);
            assert_eq!(u64::from_ne_bytes(local[16..24].try_into().unwrap()), 5);
            assert_eq!(u64::from_ne_bytes(remote[32..40].try_into().unwrap()), 8);
            // An inline SEND needs no MR (lkey 0): its bytes are copied at post time.
            let mut q = ibv_qp_attr::default();
            let mut qi: ibv_qp_init_attr = core::mem::zeroed();
            assert_eq!(ibv_query_qp(p.a, &mut q, 0, &mut qi), 0);
            let max_inline = qi.cap.max_inline_data as usize;
            assert!(max_inline >= 8, "granted {max_inline}");
            let mut rsge = ibv_sge {
                addr: local.as_ptr() as u64 + 32,
                length: 32,
                lkey: (*lmr).lkey,
            };
            let mut rwr = ibv_recv_wr {
                wr_id: 9,
                next: null_mut(),
                sg_list: &mut rsge,
                num_sge: 1,
            };
            let mut bad = null_mut();
            assert_eq!(op_post_recv(p.b, &mut rwr, &mut bad), 0);
            let mut msg = *b"inline!!";
            let mut sge = ibv_sge {
                addr: msg.as_mut_ptr() as u64,
                length: 8,
                lkey: 0,
            };
            assert_eq!(
                post(
                    &p,
                    &mut sge,
                    2,
                    conv::SEND_SIGNALED | conv::SEND_INLINE,
                    [0; 4]
                ),
                0
            );
            msg.fill(0); // the device copied it already
            let mut got = [one(p.cq), one(p.cq)];
            got.sort_by_key(|w| w.wr_id);
            assert_eq!((got[0].status, got[1].status, got[1].byte_len), (0, 0, 8));
            assert_eq!(&local[32..40], b"inline!!");
            // Inline data beyond the QP's max_inline_data is refused.
            let big = vec![0u8; max_inline + 1];
            let mut sge = ibv_sge {
                addr: big.as_ptr() as u64,
                length: big.len() as u32,
                lkey: 0,
            };
            assert_eq!(
                post(
                    &p,
                    &mut sge,
                    2,
                    conv::SEND_SIGNALED | conv::SEND_INLINE,
                    [0; 4]
                ),
                EINVAL
            );
            assert_eq!(ibv_dereg_mr(lmr), 0);
            assert_eq!(ibv_dereg_mr(rmr), 0);
        }
    }

    #[test]
    fn ud_replies_are_addressed_from_the_received_grh() {
        // SAFETY (test): our own objects and buffers, alive until the end.
        unsafe {
            let ctx = open_lo();
            let pd = ibv_alloc_pd(ctx);
            let cq = ibv_create_cq(ctx, 8, null_mut(), null_mut(), 0);
            let mk = || {
                let mut init = ibv_qp_init_attr {
                    qp_context: null_mut(),
                    send_cq: cq,
                    recv_cq: cq,
                    srq: null_mut(),
                    cap: ibv_qp_cap {
                        max_send_wr: 2,
                        max_recv_wr: 2,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    qp_type: 4,
                    sq_sig_all: 1,
                };
                let q = ibv_create_qp(pd, &mut init);
                assert!(!q.is_null());
                let mut at = ibv_qp_attr {
                    qp_state: 1,
                    port_num: 1,
                    qkey: 0x11,
                    ..Default::default()
                };
                assert_eq!(
                    ibv_modify_qp(q, &mut at, M_STATE | M_PKEY | M_PORT | (1 << 6)),
                    0
                );
                let mut at = ibv_qp_attr {
                    qp_state: 2,
                    ..Default::default()
                };
                assert_eq!(ibv_modify_qp(q, &mut at, M_STATE), 0);
                let mut at = ibv_qp_attr {
                    qp_state: 3,
                    sq_psn: 1,
                    ..Default::default()
                };
                assert_eq!(ibv_modify_qp(q, &mut at, M_STATE | M_SQ_PSN), 0);
                q
            };
            let (a, b) = (mk(), mk());
            let mut buf = vec![0u8; 256];
            let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), 256, 1);
            let base = buf.as_ptr() as u64;
            let mut rsge = ibv_sge {
                addr: base + 128,
                length: 128,
                lkey: (*mr).lkey,
            };
            let mut rwr = ibv_recv_wr {
                wr_id: 2,
                next: null_mut(),
                sg_list: &mut rsge,
                num_sge: 1,
            };
            let mut bad = null_mut();
            assert_eq!(op_post_recv(b, &mut rwr, &mut bad), 0);
            let mut gid = ibv_gid::default();
            assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
            let mut ah_attr = ibv_ah_attr {
                is_global: 1,
                port_num: 1,
                ..Default::default()
            };
            ah_attr.grh.dgid = gid;
            ah_attr.grh.sgid_index = 1;
            let ah = ibv_create_ah(pd, &mut ah_attr);
            let mut sge = ibv_sge {
                addr: base,
                length: 16,
                lkey: (*mr).lkey,
            };
            let mut wr = ibv_send_wr {
                wr_id: 1,
                next: null_mut(),
                sg_list: &mut sge,
                num_sge: 1,
                opcode: 2,
                send_flags: conv::SEND_SIGNALED,
                imm_data: 0,
                wr: [ah as u64, u64::from((*b).qp_num) | (0x11u64 << 32), 0, 0],
                remote_srqn: 0,
                rest: [0; 6],
            };
            let mut bad = null_mut();
            assert_eq!(op_post_send(a, &mut wr, &mut bad), 0);
            let mut got = [one(cq), one(cq)];
            got.sort_by_key(|w| w.wr_id);
            assert_eq!(
                (got[0].status, got[1].status, got[1].byte_len),
                (0, 0, 40 + 16)
            );
            let rwc = got[1];
            assert_eq!(rwc.wc_flags & WC_GRH, WC_GRH);
            assert_eq!(rwc.src_qp, (*a).qp_num);
            let grh = buf.as_mut_ptr().add(128).cast::<c_void>();
            let mut back = ibv_ah_attr::default();
            assert_eq!(
                ibv_init_ah_from_wc(ctx, 1, &rwc as *const ibv_wc as *mut ibv_wc, grh, &mut back),
                0
            );
            assert_eq!(
                (back.is_global, back.grh.sgid_index, back.port_num),
                (1, 1, 1)
            );
            assert_eq!(back.grh.dgid, gid, "the sender is this device's GID 1");
            let reply = ibv_create_ah_from_wc(pd, &rwc as *const ibv_wc as *mut ibv_wc, grh, 1);
            assert!(!reply.is_null());
            // Without a GRH, or without a completion: EINVAL.
            let mut nogrh = rwc;
            nogrh.wc_flags = 0;
            assert_eq!(ibv_init_ah_from_wc(ctx, 1, &mut nogrh, grh, &mut back), -1);
            assert_eq!(errno(), EINVAL);
            assert_eq!(ibv_init_ah_from_wc(ctx, 1, null_mut(), grh, &mut back), -1);
            assert!(ibv_create_ah_from_wc(pd, &mut nogrh, grh, 1).is_null());
            assert_eq!(ibv_destroy_ah(reply), 0);
            assert_eq!(ibv_destroy_ah(ah), 0);
        }
    }

    #[test]
    fn a_cq_overrun_is_an_async_event_on_the_pollable_async_fd() {
        // SAFETY (test): our own objects and buffers, alive until the end.
        unsafe {
            let p = pair_cqe(1);
            let depth = (*p.cq).cqe as usize;
            let fd = (*p.ctx).async_fd;
            assert!(fd >= 0);
            let mut buf = vec![0u8; 64];
            let mr = ibv_reg_mr(p.pd, buf.as_mut_ptr().cast(), 64, 1 | 2);
            let (addr, rkey) = (buf.as_ptr() as u64, u64::from((*mr).rkey));
            // More signaled WRITEs than the CQ holds, never polled: completions are lost.
            let start = std::time::Instant::now();
            let mut posted = 0;
            while posted < depth + 4 {
                let mut sge = ibv_sge {
                    addr,
                    length: 8,
                    lkey: (*mr).lkey,
                };
                match post(
                    &p,
                    &mut sge,
                    0,
                    conv::SEND_SIGNALED,
                    [addr + 32, rkey, 0, 0],
                ) {
                    0 => posted += 1,
                    e => {
                        // The send queue is full until earlier WRITEs complete.
                        assert_eq!(e, libc::ENOMEM);
                        assert!(start.elapsed() < Duration::from_secs(10));
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            }
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            assert_eq!(
                libc::poll(&mut pfd, 1, 5000),
                1,
                "async_fd never became readable"
            );
            let mut ev = ibv_async_event {
                element: 0,
                event_type: -1,
            };
            assert_eq!(ibv_get_async_event(p.ctx, &mut ev), 0);
            assert_eq!(ev.event_type, 0, "IBV_EVENT_CQ_ERR");
            assert_eq!(ev.element, p.cq as usize);
            ibv_ack_async_event(&mut ev);
            assert_eq!(ibv_get_async_event(p.ctx, null_mut()), -1);
            // Non-blocking and empty: EAGAIN, not a hang.
            assert_eq!(libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK), 0);
            assert_eq!(ibv_get_async_event(p.ctx, &mut ev), -1);
            assert_eq!(errno(), libc::EAGAIN);
            // The one completion that fit is still there; polling never hands out more.
            let mut wcs = vec![ibv_wc::default(); depth + 8];
            let n = op_poll_cq(p.cq, (depth + 8) as c_int, wcs.as_mut_ptr());
            assert!(
                n >= 0 && n as usize <= depth,
                "{n} completions from a CQ of {depth}"
            );
        }
    }

    #[test]
    fn qps_modified_out_of_order_are_refused_and_stay_where_they_were() {
        // SAFETY (test): our own objects.
        unsafe {
            let ctx = open_lo();
            let pd = ibv_alloc_pd(ctx);
            let cq = ibv_create_cq(ctx, 4, null_mut(), null_mut(), 0);
            let mut init = ibv_qp_init_attr {
                qp_context: null_mut(),
                send_cq: cq,
                recv_cq: cq,
                srq: null_mut(),
                cap: ibv_qp_cap {
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: 2,
                sq_sig_all: 0,
            };
            let qp = ibv_create_qp(pd, &mut init);
            assert!(!qp.is_null());
            // RESET → RTS skips INIT and RTR.
            let mut at = ibv_qp_attr {
                qp_state: 3,
                ..Default::default()
            };
            assert_eq!(ibv_modify_qp(qp, &mut at, M_STATE), EINVAL);
            // RESET → INIT without its required attributes.
            let mut at = ibv_qp_attr {
                qp_state: 1,
                ..Default::default()
            };
            assert_eq!(ibv_modify_qp(qp, &mut at, M_STATE), EINVAL);
            assert_eq!(ibv_modify_qp(qp, null_mut(), M_STATE), EINVAL);
            let mut q = ibv_qp_attr::default();
            let mut qi = init;
            assert_eq!(ibv_query_qp(qp, &mut q, M_STATE, &mut qi), 0);
            assert_eq!(q.qp_state, 0, "still RESET");
            assert_eq!((*qp).state, 0);
            // Posting a send in RESET is refused.
            let mut wr = ibv_send_wr {
                wr_id: 1,
                next: null_mut(),
                sg_list: null_mut(),
                num_sge: 0,
                opcode: 2,
                send_flags: 0,
                imm_data: 0,
                wr: [0; 4],
                remote_srqn: 0,
                rest: [0; 6],
            };
            let mut bad = null_mut();
            assert_ne!(op_post_send(qp, &mut wr, &mut bad), 0);
            // A CQ in use by a QP cannot go.
            assert_eq!(ibv_destroy_cq(cq), libc::EBUSY);
            assert_eq!(ibv_destroy_qp(qp), 0);
            assert_eq!(ibv_destroy_cq(cq), 0);
            assert_eq!(ibv_dealloc_pd(pd), 0);
            assert_eq!(ibv_close_device(ctx), 0);
        }
    }
}
