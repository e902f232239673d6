//! `softrdma mckey`: a peer of rdma-core 44's `mckey` (librdmacm/examples/mckey.c): N UD ids
//! join an IP multicast group through the RDMA CM; the sender (`-s`) sends C SENDs with
//! immediate of S bytes to the group, the receiver waits for C receives on each id.
//!
//! The exchange (mckey.c): each id is bound (`-b`) and resolved towards the group; on
//! ADDR_RESOLVED the tool checks the size against the port's MTU, makes a CQ of 2·C, a UD QP
//! with C WRs each way (the CM makes it ready with the Q_Key 0x01234567), a buffer of S + 40
//! bytes, posts C receives (receiver), and joins the group (`rdma_join_multicast_ex`: full
//! member, or with `-o` send-only). MULTICAST_JOIN names the AH to the group's MGID, QPN
//! 0xFFFFFF and the Q_Key; the id's QP is attached to the MGID (not a send-only member's, as
//! librdmacm's `ucma_process_join`) and the tool prints the joined line. Then it sleeps 3 s
//! (mckey's pause for the SM), sends or receives, and leaves the group on every id. Output
//! lines and exit status are mckey's. `-M` (an AF_IB group) and `-l` (no loopback: rxe
//! refuses the create flag) are refused with a message.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use softrdma_core::rdma_cm::multicast::JoinFlags;
use softrdma_core::rdma_cm::{PortSpace, RdmaCmEvent, RdmaCmEventType, RdmaCmId};
use softrdma_core::verbs::{
    AccessFlags, AddressVector, CqId, MrKeys, RecvWr, SendOp, SendWr, Sge, UdDest, WorkCompletion,
};
use softrdma_driver::cm::Event;

use crate::cmtool::{self, CmDevice};

/// The GRH area in front of every receive.
const GRH: u32 = 40;
const IOVA: u64 = 0x10_0000;
/// mckey's pause between the joins and the data ("to give SM chance to configure
/// switches").
const SM_PAUSE: Duration = Duration::from_secs(3);

#[derive(Debug, Parser)]
pub struct Args {
    /// The multicast group's address (an IPv4 group: 224.0.0.0/4).
    #[arg(short = 'm')]
    pub mcast: Option<String>,
    /// An unmapped (AF_IB) multicast address: not on RoCEv2 (refused).
    #[arg(short = 'M')]
    pub unmapped: Option<String>,
    /// Send to the group (default: receive).
    #[arg(short = 's')]
    pub sender: bool,
    /// Bind address (the device's).
    #[arg(short = 'b')]
    pub bind: Option<String>,
    /// Number of ids joining the group.
    #[arg(short = 'c', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub connections: u32,
    /// Messages per id.
    #[arg(short = 'C', default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=4096))]
    pub message_count: u32,
    /// Message size in bytes (at most the port's active MTU; 0: no data).
    #[arg(short = 'S', default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=65536))]
    pub message_size: u32,
    /// Port space as a number: 0x111 UDP (default), 0x2 IPoIB (`strtol(…, 0)`).
    #[arg(short = 'p', value_parser = parse_c_u16)]
    pub port_space: Option<u16>,
    /// Join as a send-only full member.
    #[arg(short = 'o')]
    pub send_only: bool,
    /// Join without multicast loopback (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: rxe refuses it).
    #[arg(short = 'l')]
    pub no_loopback: bool,
    /// Record every datagram to this pcap file (not an mckey flag).
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// The receiver gives up after SECS seconds without all its messages (not an mckey
    /// flag: v44 spins on its CQ forever).
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
}

fn parse_c_u16(s: &str) -> Result<u16, String> {
    let t = s.trim();
    let r = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u16::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        u16::from_str_radix(&t[1..], 8)
    } else {
        t.parse()
    };
    r.map_err(|_| format!("'{s}' is not a port space number"))
}

struct Node {
    id: Option<RdmaCmId>,
    cq: Option<CqId>,
    qpn: u32,
    mr: Option<MrKeys>,
    ah: Option<AddressVector>,
    remote_qpn: u32,
    remote_qkey: u32,
    connected: bool,
    /// The MGID this node's QP is attached to.
    attached: Option<softrdma_wire::Gid>,
}

/// An error that ends the run with `ret` (mckey's `return status`), after `msg` (stdout).
struct Fail {
    ret: i32,
    msg: Option<String>,
}

fn fail(ret: i32, msg: impl Into<String>) -> Fail {
    Fail {
        ret,
        msg: Some(msg.into()),
    }
}

struct Test {
    d: CmDevice,
    nodes: Vec<Node>,
    connects_left: u32,
    count: u32,
    size: u32,
    sender: bool,
    flags: JoinFlags,
    group: SocketAddr,
    /// The interface joins this run made (left at the end).
    iface_joins: u32,
    /// `--timeout`.
    data_timeout: Duration,
}

impl Test {
    fn node_of(&self, e: &RdmaCmEvent) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.id.as_ref().is_some_and(|i| *i == e.id()))
    }

    fn id(&self, i: usize) -> Result<&RdmaCmId, Fail> {
        self.nodes[i].id.as_ref().ok_or_else(|| fail(-22, "no id"))
    }

    /// `verify_test_params`.
    fn verify_test_params(&self) -> Result<(), Fail> {
        let mtu = self
            .d
            .dev
            .query_port(1)
            .map(|p| p.active_mtu.bytes())
            .unwrap_or(1024);
        if self.count > 0 && self.size > mtu {
            return Err(fail(
                -22,
                format!(
                    "mckey: message_size {} is larger than active mtu {mtu}",
                    self.size
                ),
            ));
        }
        Ok(())
    }

    /// `init_node` (+ `post_recvs` for the receiver).
    fn init_node(&mut self, i: usize) -> Result<(), Fail> {
        let c = self.count;
        let cq = self
            .d
            .dev
            .create_cq((c * 2).max(2))
            .map_err(|e| fail(-12, format!("mckey: unable to create CQ ({e})")))?;
        let (_, qpn) = self
            .d
            .ud_qp_on(cq, c.max(1), c.max(1))
            .map_err(|e| fail(-1, format!("mckey: unable to create QP: {e}")))?;
        let id = self.id(i)?;
        self.d
            .cm
            .with_id(id.name(), |cm, s, _| cm.init_qp_for(s, id, qpn))
            .map_err(|e| fail(-1, format!("mckey: unable to create QP: {e}")))?
            .map_err(|e| fail(-1, format!("mckey: unable to create QP: {e}")))?;
        let n = &mut self.nodes[i];
        n.cq = Some(cq);
        n.qpn = qpn;
        if c == 0 {
            return Ok(());
        }
        let mr = self
            .d
            .dev
            .reg_mr(
                self.d.pd,
                vec![0u8; (self.size + GRH) as usize],
                IOVA,
                AccessFlags::LOCAL_WRITE,
            )
            .map_err(|_| fail(-1, "failed to reg MR"))?;
        if !self.sender {
            for k in 0..c {
                let wr = RecvWr::new(
                    u64::from(k),
                    vec![Sge {
                        addr: IOVA,
                        length: self.size + GRH,
                        lkey: mr.lkey,
                    }],
                );
                self.d
                    .dev
                    .post_recv(qpn, wr)
                    .map_err(|e| fail(-1, format!("failed to post receives: {e}")))?;
            }
        }
        self.nodes[i].mr = Some(mr);
        Ok(())
    }

    /// `addr_handler`: resources, then `rdma_join_multicast_ex` (a full member's device
    /// joins the IP group first, as librdmacm over softrdma does).
    fn addr_handler(&mut self, i: usize) -> Result<(), Fail> {
        self.verify_test_params()?;
        self.init_node(i)?;
        let group = self.group.ip();
        if self.flags == JoinFlags::FullMember {
            self.d.dev.join_multicast(group).map_err(|e| {
                fail(
                    -e.raw_os_error().unwrap_or(22),
                    format!("mckey: failure joining: {e} (the interface of the -b address must carry multicast)"),
                )
            })?;
            self.iface_joins += 1;
        }
        let id = self.id(i)?;
        let flags = self.flags;
        self.d
            .cm
            .with_id(id.name(), |cm, s, _| {
                cm.join_multicast(Some(s), id, group, flags)
            })
            .map_err(|e| fail(-1, format!("mckey: failure joining: {e}")))?
            .map_err(|e| fail(-1, format!("mckey: failure joining: {e:?}")))?;
        Ok(())
    }

    /// `join_handler` (after librdmacm's attach of the QP).
    fn join_handler(&mut self, i: usize, e: &RdmaCmEvent) -> Result<(), Fail> {
        let Some(&ud) = e.ud() else {
            return Err(fail(-1, "mckey: failure creating address handle"));
        };
        if self.flags == JoinFlags::FullMember {
            let qpn = self.nodes[i].qpn;
            self.d
                .dev
                .with_stack(|s| s.attach_mcast(qpn, ud.ah.dgid))
                .map_err(|e| fail(-1, format!("mckey: ibv_attach_mcast: {e}")))?;
            self.nodes[i].attached = Some(ud.ah.dgid);
        }
        println!(
            "mckey: joined dgid: {} mlid 0x0 sl {}",
            std::net::Ipv6Addr::from(ud.ah.dgid.0),
            ud.ah.sl
        );
        let n = &mut self.nodes[i];
        n.remote_qpn = ud.qp_num;
        n.remote_qkey = ud.qkey;
        n.ah = Some(ud.ah);
        n.connected = true;
        self.connects_left = self.connects_left.saturating_sub(1);
        Ok(())
    }

    fn on_event(&mut self, e: RdmaCmEvent) -> Result<(), Fail> {
        use RdmaCmEventType as T;
        let Some(i) = self.node_of(&e) else {
            return Ok(());
        };
        match e.kind() {
            T::AddrResolved => {
                if let Err(f) = self.addr_handler(i) {
                    self.connects_left = self.connects_left.saturating_sub(1);
                    return Err(f);
                }
            }
            T::MulticastJoin => {
                if let Err(f) = self.join_handler(i, &e) {
                    self.connects_left = self.connects_left.saturating_sub(1);
                    return Err(f);
                }
            }
            T::AddrError | T::RouteError | T::MulticastError => {
                println!("mckey: event: {}, error: {}", e.kind().as_str(), e.status());
                self.connects_left = self.connects_left.saturating_sub(1);
                return Err(Fail {
                    ret: e.status(),
                    msg: None,
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// `connect_events`.
    fn connect_events(&mut self) -> Result<(), Fail> {
        while self.connects_left > 0 {
            let e = match cmtool::wait_event(&self.d.cm, Duration::from_secs(30)) {
                Ok(Some(Event::Rdma(e))) => e,
                Ok(Some(Event::Ib(_))) => continue,
                Ok(None) => return Err(fail(-110, "mckey: timed out waiting for CM events")),
                Err(sig) => cmtool::signals::die(sig),
            };
            self.on_event(e)?;
        }
        Ok(())
    }

    /// `post_sends`: C unsignalled SENDs with immediate (our QPN) to the group.
    fn post_sends(&self, i: usize) -> Result<(), Fail> {
        let n = &self.nodes[i];
        let (Some(ah), Some(mr)) = (n.ah, n.mr.as_ref()) else {
            return Ok(());
        };
        if !n.connected {
            return Ok(());
        }
        for k in 0..self.count {
            let mut wr = SendWr::new(u64::from(k), SendOp::SendWithImm { imm: n.qpn })
                .with_sge(Sge {
                    addr: IOVA,
                    length: self.size,
                    lkey: mr.lkey,
                })
                .with_ud(UdDest {
                    av: ah,
                    remote_qpn: n.remote_qpn,
                    remote_qkey: n.remote_qkey,
                });
            wr.signaled = false;
            self.d
                .dev
                .post_send(n.qpn, wr)
                .map_err(|e| fail(-1, format!("failed to post sends: {e}")))?;
        }
        Ok(())
    }

    /// `poll_cqs`: C completions on each joined node.
    fn poll_cqs(&mut self) -> Result<(), Fail> {
        let mut wcs: Vec<WorkCompletion> = Vec::new();
        for n in &self.nodes {
            let (true, Some(cq)) = (n.connected, n.cq) else {
                continue;
            };
            let end = Instant::now() + self.data_timeout;
            let mut done = 0;
            while done < self.count {
                if Instant::now() > end {
                    return Err(fail(
                        -110,
                        format!(
                            "mckey: timed out: {done} of {} messages received",
                            self.count
                        ),
                    ));
                }
                wcs.clear();
                let k = self
                    .d
                    .dev
                    .wait_cq_or(cq, &mut wcs, 8, Some(Duration::from_millis(200)), &|| false)
                    .map_err(|e| fail(-1, format!("mckey: failed polling CQ: {e}")))?;
                done += k as u32;
            }
        }
        Ok(())
    }

    /// `rdma_leave_multicast` on every id (QP detached first), then the ids.
    fn leave_and_destroy(&mut self) -> i32 {
        let group = self.group.ip();
        let now = self.d.dev.now();
        let mut ret = 0;
        for n in &mut self.nodes {
            if let Some(g) = n.attached.take() {
                let qpn = n.qpn;
                let _ = self.d.dev.with_stack(|s| s.detach_mcast(qpn, &g));
            }
            if let Some(id) = n.id.as_ref() {
                if n.connected {
                    if let Err(e) = self.d.cm.with_cm(|cm| cm.leave_multicast(id, group)) {
                        println!("mckey: failure leaving: {e:?}");
                        ret = -1;
                    }
                }
            }
            if let Some(id) = n.id.take() {
                self.d.cm.with_cm(|cm| cm.destroy(now, id));
            }
        }
        for _ in 0..self.iface_joins {
            self.d.dev.leave_multicast(group);
        }
        self.iface_joins = 0;
        ret
    }
}

fn run_test(a: &Args) -> Result<(), Fail> {
    println!(
        "mckey: starting {}",
        if a.sender { "client" } else { "server" }
    );
    if a.unmapped.is_some() {
        return Err(fail(
            -97,
            "mckey: -M (an AF_IB multicast address) has no meaning on RoCEv2; use -m with an IPv4 group",
        ));
    }
    if a.no_loopback {
        return Err(fail(
            -95,
            "mckey: unable to create QP: Operation not supported (-l: rxe refuses IBV_QP_CREATE_BLOCK_SELF_MCAST_LB)",
        ));
    }
    let Some(m) = a.mcast.as_deref() else {
        return Err(fail(-22, "mckey: give the group with -m ADDR"));
    };
    let group = softrdma_driver::cm::resolve_host(m, 0, None).map_err(|e| {
        fail(
            -2,
            format!("getaddrinfo failed ({e}) - invalid hostname or IP address"),
        )
    })?;
    let src = match a.bind.as_deref() {
        Some(b) => Some(
            softrdma_driver::cm::resolve_host(b, 0, None)
                .map_err(|e| {
                    fail(
                        -2,
                        format!("getaddrinfo failed ({e}) - invalid hostname or IP address"),
                    )
                })?
                .ip(),
        ),
        None => None,
    };
    let d = cmtool::open_client(
        src,
        group.ip(),
        a.pcap.as_ref(),
        "-b",
        "mckey",
        cmtool::THREAD,
    )
    .map_err(|m| fail(-19, m))?;
    let src = d.dev.local_addr().ip();
    let ps = PortSpace(a.port_space.unwrap_or(PortSpace::UDP.0));
    let mut t = Test {
        d,
        nodes: Vec::new(),
        connects_left: a.connections,
        count: if a.message_size == 0 {
            0
        } else {
            a.message_count
        },
        size: a.message_size,
        sender: a.sender,
        flags: if a.send_only {
            JoinFlags::SendOnlyFullMember
        } else {
            JoinFlags::FullMember
        },
        group,
        iface_joins: 0,
        data_timeout: Duration::from_secs(a.timeout),
    };
    for _ in 0..a.connections {
        let id = t.d.cm.with_cm(|cm| cm.create_id_ps(ps));
        t.nodes.push(Node {
            id: Some(id),
            cq: None,
            qpn: 0,
            mr: None,
            ah: None,
            remote_qpn: 0,
            remote_qkey: 0,
            connected: false,
            attached: None,
        });
    }
    println!("mckey: joining");
    let r = (|| {
        for i in 0..t.nodes.len() {
            let id = t.id(i)?;
            if let Err(e) = t.d.cm.resolve_addr(id, Some(src), group) {
                println!("mckey: resolve addr failure: {e}");
                return Err(Fail { ret: -1, msg: None });
            }
        }
        t.connect_events()?;
        std::thread::sleep(SM_PAUSE);
        if t.count > 0 {
            if t.sender {
                println!("initiating data transfers");
                for i in 0..t.nodes.len() {
                    t.post_sends(i)?;
                }
            } else {
                println!("receiving data transfers");
                t.poll_cqs()?;
            }
            println!("data transfers complete");
        }
        Ok(())
    })();
    let left = t.leave_and_destroy();
    match r {
        Ok(()) if left != 0 => Err(Fail {
            ret: left,
            msg: None,
        }),
        r => r,
    }
}

pub fn run(args: Args) -> ExitCode {
    let status = match run_test(&args) {
        Ok(()) => 0,
        Err(f) => {
            if let Some(m) = f.msg {
                println!("{m}");
            }
            f.ret
        }
    };
    println!("test complete");
    println!("return status {status}");
    ExitCode::from((status & 0xff) as u8)
}
