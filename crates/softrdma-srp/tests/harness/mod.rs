//! What the SRP crate's two simulations share: nodes (`softrdma_core::Node`: stack, QP1,
//! MAD layer, IB CM and RDMA CM, in the call order the node writes down once) in the
//! core's simulated network, and the SRP target's application — an `SrpTarget` on a
//! memory LUN, listening on the RDMA CM and the IB CM, driven by its node's events.

// Each test binary uses the part it needs.
#![allow(dead_code)]

use std::net::SocketAddr;

use softrdma_core::cm::{CmConfig, CmEvent, CmPort, RXE_CA_ACK_DELAY};
use softrdma_core::rdma_cm::{RdmaCmEvent, RdmaCmId};
use softrdma_core::sim::Sim;
use softrdma_core::time::Instant;
use softrdma_core::{DeviceConfig, Node, Stack};
use softrdma_scsi::{BlockSize, LogicalUnit, LunConfig, LunId, MemStore, Target, TargetConfig};
use softrdma_srp::{SrpConfig, SrpEvent, SrpTarget, TargetPort};
use softrdma_wire::Guid;

pub const GUID: u64 = 0x5054_00ff_fe77_0001;
pub const PORT: u16 = 5555;
pub const LUN_BYTES: u64 = 4 << 20;

/// Node `i` of a simulation: one port on the simulation's `i`-th address, QP1 with 32
/// receives, a CM seeded with `seed`.
pub fn node(i: usize, seed: u64) -> (Node, CmPort) {
    let mut n = Node::new(CmConfig::new(
        Guid(0x5054_00ff_fe77_0000 + seed),
        RXE_CA_ACK_DELAY,
        seed,
    ))
    .expect("node");
    let stack = Stack::new(
        DeviceConfig::new(format!("sim{i}"), vec![Sim::<Node>::addr(i)]),
        seed ^ 0x5eed,
    );
    let port = n.add_port(stack, 32).expect("port");
    (n, port)
}

/// Node `n`'s stack on `port`.
pub fn stack(n: &mut Node, port: CmPort) -> &mut Stack {
    n.stack_mut(port).expect("port")
}

/// The SRP target's application on its node.
pub struct TargetApp {
    pub port: CmPort,
    pub tport: TargetPort,
    pub engine: SrpTarget,
    pub events: Vec<SrpEvent>,
    /// The RDMA CM listener (kept for the world's life).
    pub listener: RdmaCmId,
    /// Test aid: the engine is not run (a hung target whose NIC and CM still answer).
    pub frozen: bool,
}

impl TargetApp {
    /// A target on `node`'s `port`: LUN 0 of [`LUN_BYTES`] memory; with `lend`, its medium
    /// moves into the device (READ and WRITE in place, as in `softrdma srpt`); the RDMA CM
    /// listens on [`PORT`] and the IB CM on the target's service IDs.
    pub fn new(node: &mut Node, port: CmPort, cfg: SrpConfig, lend: bool) -> TargetApp {
        let mut scsi = Target::new(TargetConfig::default());
        let store = MemStore::new(LUN_BYTES, BlockSize::B512).expect("store");
        scsi.add_lun(
            LunId(0),
            LogicalUnit::new(Box::new(store), LunConfig::default()),
        )
        .expect("lun");
        let mut engine = SrpTarget::new(cfg, scsi);
        let s = stack(node, port);
        let tport = engine.add_port(s, port).expect("target port");
        if lend {
            assert_eq!(engine.lend_media(s, tport).expect("lend"), 1);
        }
        let addr = SocketAddr::new(s.device.addrs()[0], PORT);
        let listener = node.rdma_mut().listen_on(addr, 128).expect("listen");
        engine.listen_ib(node.rdma_mut()).expect("ib listen");
        TargetApp {
            port,
            tport,
            engine,
            events: Vec::new(),
            listener,
            frozen: false,
        }
    }

    /// The application's turn: the node's events to the engine (logins by the RDMA CM and
    /// the IB CM, channel events), the engine's own work, its events kept.
    pub fn turn(&mut self, now: Instant, node: &mut Node) {
        if self.frozen {
            return;
        }
        let (engine, port) = (&mut self.engine, self.port);
        while let Some(e) = node.poll_rdma_event() {
            node.with_port(now, port, |cm, s| {
                if let RdmaCmEvent::ConnectRequest {
                    new_id,
                    private_data,
                    ..
                } = e
                {
                    if let Err(f) = engine.rdma_connect_request(now, cm, s, new_id, &private_data) {
                        f.reject(now, cm);
                    }
                } else {
                    engine.rdma_event(now, cm, s, &e);
                }
            })
            .expect("port");
        }
        while let Some(e) = node.poll_ib_event() {
            node.with_port(now, port, |cm, s| match e {
                CmEvent::ReqReceived { id, listen, req } => {
                    assert!(engine.is_ib_listener(listen));
                    if let Err(f) = engine.ib_req(now, cm, s, id, &req) {
                        f.reject(now, cm);
                    }
                }
                e => engine.ib_event(now, cm, s, &e),
            })
            .expect("port");
        }
        let tport = self.tport;
        node.with_port(now, port, |cm, s| engine.poll(now, cm, s, tport))
            .expect("port");
        while let Some(e) = self.engine.poll_event() {
            self.events.push(e);
        }
    }
}

/// Runs `node`'s timers when they are due (the simulation delivers datagrams itself).
pub fn timers(now: Instant, node: &mut Node) {
    if node.poll_timeout().is_some_and(|t| t <= now) {
        node.handle_timeout(now);
    }
}
