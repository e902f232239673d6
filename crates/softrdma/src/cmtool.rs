//! What the RDMA CM tools (`ucmatose`, `cmtime`, `rping`) share: a device with the
//! process's CM on it, RC QPs in INIT, and the source address rule.

use std::net::IpAddr;
use std::path::PathBuf;

use softrdma_core::cm::CmPort;
use softrdma_core::rdma_cm::RdmaCm;
use softrdma_core::verbs::{CqId, PdId, QpCap, QpInitAttr, QpType};
use softrdma_driver::cm::Cm;
use softrdma_driver::{Device, DeviceConfig};

/// A device on `ip` with a CM on it.
pub struct CmDevice {
    pub dev: Device,
    pub cm: Cm,
    /// The device's port in the CM.
    #[allow(dead_code)]
    pub port: CmPort,
    pub pd: PdId,
}

/// A seed from the clock and the process id.
pub fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        ^ u64::from(std::process::id()).rotate_left(32)
}

/// Opens the device on `ip` (binding `ip:4791`) and runs a CM on it. The error says what
/// to do when another process holds the address.
pub fn open(ip: IpAddr, pcap: Option<&PathBuf>) -> Result<CmDevice, String> {
    let mut cfg = DeviceConfig::new(ip);
    if let Some(p) = pcap {
        cfg = cfg.with_pcap(p);
    }
    let dev = Device::open_with(cfg).map_err(|e| device_error(ip, &e))?;
    let cm = Cm::new(seed());
    let port = cm
        .add_device(&dev)
        .map_err(|e| format!("device {ip}: {e}"))?;
    let pd = dev.alloc_pd().map_err(|e| format!("ibv_alloc_pd: {e}"))?;
    Ok(CmDevice { dev, cm, port, pd })
}

/// The message for a device that could not be opened.
pub fn device_error(ip: IpAddr, e: &softrdma_driver::Error) -> String {
    match e {
        softrdma_driver::Error::Io(io) if io.kind() == std::io::ErrorKind::AddrInUse => format!(
            "{ip}:4791 is already held by another process (a softrdma device on that address); \
             stop it or choose another local address"
        ),
        softrdma_driver::Error::Io(io) if io.kind() == std::io::ErrorKind::AddrNotAvailable => {
            format!("{ip} is not an address of this host; choose a local address")
        }
        e => format!("device {ip}: {e}"),
    }
}

impl CmDevice {
    /// One CQ for `connections` QPs with `messages` sends and receives each.
    pub fn shared_cq(&self, connections: u32, messages: u32) -> Result<CqId, String> {
        let n = u64::from(connections) * 2 * u64::from(messages.max(1)) + 16;
        self.dev
            .create_cq(n.min(1 << 20) as u32)
            .map_err(|e| format!("ibv_create_cq: {e}"))
    }

    /// An RC QP in INIT on `cq`.
    pub fn rc_qp_on(&self, cq: CqId, send: u32, recv: u32) -> Result<(CqId, u32), String> {
        let (qpn, _) = self
            .dev
            .create_qp(QpInitAttr {
                qp_type: QpType::Rc,
                pd: self.pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: send.max(1),
                    max_recv_wr: recv.max(1),
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: true,
            })
            .map_err(|e| format!("rdma_create_qp: {e}"))?;
        self.dev
            .with_stack(|s| RdmaCm::init_qp(s, qpn))
            .map_err(|e| format!("rdma_create_qp: {e}"))?;
        Ok((cq, qpn))
    }
}

impl CmDevice {
    /// A UD QP on `cq` (both queues), in RESET: the CM makes it ready
    /// (`RdmaCm::init_qp_for`), as `rdma_create_qp` does. Sends are not all signalled.
    pub fn ud_qp_on(&self, cq: CqId, send: u32, recv: u32) -> Result<(CqId, u32), String> {
        let (qpn, _) = self
            .dev
            .create_qp(QpInitAttr {
                qp_type: QpType::Ud,
                pd: self.pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: send.max(1),
                    max_recv_wr: recv.max(1),
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .map_err(|e| format!("rdma_create_qp: {e}"))?;
        Ok((cq, qpn))
    }
}

/// The client's source address: `-b`/`-I` if given, else the routed one.
pub fn source_for(given: Option<IpAddr>, dst: IpAddr) -> Result<IpAddr, String> {
    given
        .or_else(|| softrdma_driver::cm::route_source(dst))
        .ok_or_else(|| format!("no route to {dst}: give the source address"))
}
