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
use std::time::Duration;

use clap::Parser;
use softrdma_core::rdma_cm::multicast::JoinFlags;
use softrdma_core::rdma_cm::{PortSpace, RdmaCmEvent, RdmaCmEventType};
use softrdma_driver::cm::Event;

use crate::cmtool;
use crate::udtool::{self, fail, status, Fail, Ud};

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
    #[arg(short = 'p', value_parser = cmtool::parse_c_u16)]
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

struct Test {
    ud: Ud,
    sender: bool,
    flags: JoinFlags,
    group: SocketAddr,
    /// The interface joins this run made (left at the end).
    iface_joins: u32,
    /// The QPs attached to the group's MGID (a full member's), detached at the end.
    attached: Vec<(u32, softrdma_wire::Gid)>,
    /// `--timeout`.
    data_timeout: Duration,
}

impl Test {
    /// `addr_handler`: resources (`init_node`, the receiver's `post_recvs`), then
    /// `rdma_join_multicast_ex` (a full member's device joins the IP group first, as
    /// librdmacm over softrdma does).
    fn addr_handler(&mut self, i: usize) -> Result<(), Fail> {
        self.ud.verify_test_params()?;
        self.ud.init_node(i, !self.sender)?;
        let group = self.group.ip();
        if self.flags == JoinFlags::FullMember {
            self.ud.d.dev.join_multicast(group).map_err(|e| {
                fail(
                    -e.raw_os_error().unwrap_or(22),
                    format!("mckey: failure joining: {e} (the interface of the -b address must carry multicast)"),
                )
            })?;
            self.iface_joins += 1;
        }
        let id = self.ud.id(i)?;
        let flags = self.flags;
        self.ud
            .d
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
            let qpn = self.ud.nodes[i].qpn;
            self.ud
                .d
                .dev
                .with_stack(|s| s.attach_mcast(qpn, ud.ah.dgid))
                .map_err(|e| fail(-1, format!("mckey: ibv_attach_mcast: {e}")))?;
            self.attached.push((qpn, ud.ah.dgid));
        }
        println!(
            "mckey: joined dgid: {} mlid 0x0 sl {}",
            std::net::Ipv6Addr::from(ud.ah.dgid.0),
            ud.ah.sl
        );
        let n = &mut self.ud.nodes[i];
        n.remote_qpn = ud.qp_num;
        n.remote_qkey = ud.qkey;
        n.ah = Some(ud.ah);
        n.connected = true;
        self.ud.connect_done();
        Ok(())
    }

    fn on_event(&mut self, e: RdmaCmEvent) -> Result<(), Fail> {
        use RdmaCmEventType as T;
        let Some(i) = self.ud.node_of(&e) else {
            return Ok(());
        };
        let r = match e.kind() {
            T::AddrResolved => self.addr_handler(i),
            T::MulticastJoin => self.join_handler(i, &e),
            T::AddrError | T::RouteError | T::MulticastError => {
                println!("mckey: event: {}, error: {}", e.kind().as_str(), e.status());
                Err(status(e.status()))
            }
            _ => return Ok(()),
        };
        if r.is_err() {
            self.ud.connect_done();
        }
        r
    }

    /// `connect_events`.
    fn connect_events(&mut self) -> Result<(), Fail> {
        while self.ud.connects_left > 0 {
            let e = match cmtool::wait_event(&self.ud.d.cm, Duration::from_secs(30)) {
                Ok(Some(Event::Rdma(e))) => e,
                Ok(Some(Event::Ib(_))) => continue,
                Ok(None) => return Err(fail(-110, "mckey: timed out waiting for CM events")),
                Err(sig) => cmtool::signals::die(sig),
            };
            self.on_event(e)?;
        }
        Ok(())
    }

    /// `rdma_leave_multicast` on every id (QPs detached first), then the ids.
    fn leave_and_destroy(&mut self) -> i32 {
        let group = self.group.ip();
        for (qpn, g) in self.attached.drain(..) {
            let _ = self.ud.d.dev.with_stack(|s| s.detach_mcast(qpn, &g));
        }
        let mut ret = 0;
        for n in &self.ud.nodes {
            if let (Some(id), true) = (n.id.as_ref(), n.connected) {
                if let Err(e) = self.ud.d.cm.with_cm(|cm| cm.leave_multicast(id, group)) {
                    println!("mckey: failure leaving: {e:?}");
                    ret = -1;
                }
            }
        }
        self.ud.destroy_ids();
        for _ in 0..self.iface_joins {
            self.ud.d.dev.leave_multicast(group);
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
    let resolve = |h: &str| {
        softrdma_driver::cm::resolve_host(h, 0, None).map_err(|e| {
            fail(
                -2,
                format!("getaddrinfo failed ({e}) - invalid hostname or IP address"),
            )
        })
    };
    let group = resolve(m)?;
    let src = match a.bind.as_deref() {
        Some(b) => Some(resolve(b)?.ip()),
        None => None,
    };
    let d = udtool::open_client("mckey", src, group.ip(), a.pcap.as_ref())?;
    let src = d.dev.local_addr().ip();
    let ps = PortSpace(a.port_space.unwrap_or(PortSpace::UDP.0));
    let mut t = Test {
        ud: Ud::new("mckey", d, a.connections, a.message_count, a.message_size),
        sender: a.sender,
        flags: if a.send_only {
            JoinFlags::SendOnlyFullMember
        } else {
            JoinFlags::FullMember
        },
        group,
        iface_joins: 0,
        attached: Vec::new(),
        data_timeout: Duration::from_secs(a.timeout),
    };
    t.ud.create_ids(a.connections, ps);
    println!("mckey: joining");
    let r = (|| {
        for i in 0..t.ud.nodes.len() {
            let id = t.ud.id(i)?;
            if let Err(e) = t.ud.d.cm.resolve_addr(id, Some(src), group) {
                println!("mckey: resolve addr failure: {e}");
                return Err(status(-1));
            }
        }
        t.connect_events()?;
        std::thread::sleep(SM_PAUSE);
        if t.ud.count > 0 {
            if t.sender {
                println!("initiating data transfers");
                for i in 0..t.ud.nodes.len() {
                    t.ud.post_sends(i, false)?;
                }
            } else {
                println!("receiving data transfers");
                t.ud.poll_cqs(t.data_timeout, "messages received", false)?;
            }
            println!("data transfers complete");
        }
        Ok(())
    })();
    let left = t.leave_and_destroy();
    match r {
        Ok(()) if left != 0 => Err(status(left)),
        r => r,
    }
}

pub fn run(args: Args) -> ExitCode {
    udtool::report(run_test(&args))
}
