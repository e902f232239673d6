//! What the two UD tools of the RDMA CM (`udaddy`, `mckey`) share, as rdma-core's udaddy.c
//! and mckey.c share theirs (mckey.c began as a copy of udaddy.c): a node per id with its CQ,
//! UD QP, buffer and remote end; `verify_test_params`, `init_node` + `post_recvs`,
//! `post_sends`, `poll_cqs`; the error that ends a run with a status, and the two closing
//! lines. What differs stays in each tool: how a node gets its remote end (udaddy's SIDR
//! exchange, mckey's join) and the order of sends and receives.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use softrdma_core::rdma_cm::{init_ah_from_wc, PortSpace, RdmaCmEvent, RdmaCmId};
use softrdma_core::verbs::{
    AccessFlags, AddressVector, CqId, MrKeys, RecvWr, SendOp, SendWr, Sge, UdDest, WorkCompletion,
};

use crate::cmtool::{self, CmDevice};

/// The GRH area in front of every receive.
pub const GRH: u32 = 40;
/// Where each node's buffer sits in its MR.
const IOVA: u64 = 0x10_0000;

/// An error that ends the run with `ret` (the tool's `return status`), after `msg` (stdout).
pub struct Fail {
    pub ret: i32,
    pub msg: Option<String>,
}

/// A [`Fail`] with its message.
pub fn fail(ret: i32, msg: impl Into<String>) -> Fail {
    Fail {
        ret,
        msg: Some(msg.into()),
    }
}

/// A [`Fail`] whose message was printed already (or that has none).
pub fn status(ret: i32) -> Fail {
    Fail { ret, msg: None }
}

/// The end of both tools' `main`: the failure's message, `test complete`, `return status N`,
/// and N as the exit status (its low byte, as a C `return` from `main`).
pub fn report(r: Result<(), Fail>) -> ExitCode {
    let status = match r {
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

/// A client's device (both tools' `-b`): at `src`, or by the other tools' source rule (the
/// routed address, or on IPv4 loopback a free 127.0.0.x when a server on this host holds
/// it).
pub fn open_client(
    tool: &'static str,
    src: Option<IpAddr>,
    dst: IpAddr,
    pcap: Option<&PathBuf>,
) -> Result<CmDevice, Fail> {
    cmtool::open_client(src, dst, pcap, "-b", tool, cmtool::THREAD).map_err(|m| fail(-19, m))
}

/// One id's resources (`struct cmatest_node`).
pub struct Node {
    pub id: Option<RdmaCmId>,
    pub cq: Option<CqId>,
    pub qpn: u32,
    pub mr: Option<MrKeys>,
    pub ah: Option<AddressVector>,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
    pub connected: bool,
}

impl Node {
    pub fn new(id: Option<RdmaCmId>) -> Node {
        Node {
            id,
            cq: None,
            qpn: 0,
            mr: None,
            ah: None,
            remote_qpn: 0,
            remote_qkey: 0,
            connected: false,
        }
    }
}

/// The state both tools' `struct cmatest` holds: the device, the nodes, how many are still
/// to come up, and the message count and size.
pub struct Ud {
    /// The tool's name, first word of its messages.
    pub tool: &'static str,
    pub d: CmDevice,
    pub nodes: Vec<Node>,
    pub connects_left: u32,
    /// Messages per node (0 when the size is 0: no data at all, as both tools do).
    pub count: u32,
    pub size: u32,
}

impl Ud {
    /// `size` 0 means no data: no MR, no receives, no sends.
    pub fn new(tool: &'static str, d: CmDevice, connects: u32, count: u32, size: u32) -> Ud {
        Ud {
            tool,
            d,
            nodes: Vec::new(),
            connects_left: connects,
            count: if size == 0 { 0 } else { count },
            size,
        }
    }

    /// A node with a new id in port space `ps` for each of the `n` connections (a client's).
    pub fn create_ids(&mut self, n: u32, ps: PortSpace) {
        for _ in 0..n {
            let id = self.d.cm.with_cm(|cm| cm.create_id_ps(ps));
            self.nodes.push(Node::new(Some(id)));
        }
    }

    /// The node of the event's id.
    pub fn node_of(&self, e: &RdmaCmEvent) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.id.as_ref().is_some_and(|i| *i == e.id()))
    }

    /// Node `i`'s id.
    pub fn id(&self, i: usize) -> Result<&RdmaCmId, Fail> {
        self.nodes[i].id.as_ref().ok_or_else(|| fail(-22, "no id"))
    }

    /// One connection (or join) came up or failed: one fewer to wait for.
    pub fn connect_done(&mut self) {
        self.connects_left = self.connects_left.saturating_sub(1);
    }

    /// `verify_test_params`: the message must fit the port's active MTU.
    pub fn verify_test_params(&self) -> Result<(), Fail> {
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
                    "{}: message_size {} is larger than active mtu {mtu}",
                    self.tool, self.size
                ),
            ));
        }
        Ok(())
    }

    /// `init_node` (+ `post_recvs` when `recvs`): a CQ of 2·C, a UD QP with C WRs each way
    /// (made ready by the CM: INIT with the Q_Key, RTR, RTS), a buffer of S + 40 bytes, and
    /// C receives.
    pub fn init_node(&mut self, i: usize, recvs: bool) -> Result<(), Fail> {
        let (tool, c) = (self.tool, self.count);
        let cq = self
            .d
            .dev
            .create_cq((c * 2).max(2))
            .map_err(|e| fail(-12, format!("{tool}: unable to create CQ ({e})")))?;
        let (_, qpn) = self
            .d
            .ud_qp_on(cq, c.max(1), c.max(1))
            .map_err(|e| fail(-1, format!("{tool}: unable to create QP: {e}")))?;
        let id = self.id(i)?;
        self.d
            .cm
            .with_id(id.name(), |cm, s, _| cm.init_qp_for(s, id, qpn))
            .map_err(|e| fail(-1, format!("{tool}: unable to create QP: {e}")))?
            .map_err(|e| fail(-1, format!("{tool}: unable to create QP: {e}")))?;
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
        if recvs {
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

    /// `post_sends`: C SENDs with immediate (our QPN) of S bytes to node `i`'s remote end;
    /// nothing for a node not connected (or joined).
    pub fn post_sends(&self, i: usize, signaled: bool) -> Result<(), Fail> {
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
            wr.signaled = signaled;
            self.d
                .dev
                .post_send(n.qpn, wr)
                .map_err(|e| fail(-1, format!("failed to post sends: {e}")))?;
        }
        Ok(())
    }

    /// `poll_cqs`: C completions (of any kind, status not looked at) on each connected node,
    /// each node given `timeout` (v44 spins forever) after which the run ends with
    /// `TOOL: timed out: N of C WHAT`. With `reply_ah`, the first completion of a node
    /// without an AH makes the reply AH from its GRH (udaddy's server).
    pub fn poll_cqs(&mut self, timeout: Duration, what: &str, reply_ah: bool) -> Result<(), Fail> {
        let mut wcs: Vec<WorkCompletion> = Vec::new();
        for i in 0..self.nodes.len() {
            let (true, Some(cq)) = (self.nodes[i].connected, self.nodes[i].cq) else {
                continue;
            };
            let end = Instant::now() + timeout;
            let mut done = 0;
            while done < self.count {
                if Instant::now() > end {
                    return Err(fail(
                        -110,
                        format!("{}: timed out: {done} of {} {what}", self.tool, self.count),
                    ));
                }
                wcs.clear();
                let k = self
                    .d
                    .dev
                    .wait_cq_or(cq, &mut wcs, 8, Some(Duration::from_millis(200)), &|| false)
                    .map_err(|e| fail(-1, format!("{}: failed polling CQ: {e}", self.tool)))?;
                if reply_ah && k > 0 && self.nodes[i].ah.is_none() {
                    self.create_reply_ah(i, &wcs[0]).map_err(|()| {
                        fail(-1, format!("{}: failed to create reply AH", self.tool))
                    })?;
                }
                done += k as u32;
            }
        }
        Ok(())
    }

    /// `create_reply_ah`: `ibv_create_ah_from_wc` on the GRH in front of the receive, the
    /// peer's QPN from the immediate, our QP's Q_Key.
    fn create_reply_ah(&mut self, i: usize, wc: &WorkCompletion) -> Result<(), ()> {
        let n = &self.nodes[i];
        let mr = n.mr.as_ref().ok_or(())?;
        let mut grh = [0u8; GRH as usize];
        self.d
            .dev
            .read_mr(mr.lkey, IOVA, &mut grh)
            .map_err(|_| ())?;
        let ah = self
            .d
            .dev
            .with_stack(|s| init_ah_from_wc(s, wc, &grh))
            .ok_or(())?;
        let qkey = self.d.dev.query_qp(n.qpn).map_err(|_| ())?.qkey;
        let n = &mut self.nodes[i];
        n.ah = Some(ah);
        n.remote_qpn = wc.imm_data.unwrap_or(0);
        n.remote_qkey = qkey;
        Ok(())
    }

    /// Destroys every node's id.
    pub fn destroy_ids(&mut self) {
        let now = self.d.dev.now();
        for n in &mut self.nodes {
            if let Some(id) = n.id.take() {
                self.d.cm.with_cm(|cm| cm.destroy(now, id));
            }
        }
    }
}
