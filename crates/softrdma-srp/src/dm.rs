//! Device-management MADs (class 0x06, version 1) answered as ib_srpt answers them
//! (`srpt_mad_recv_handler`, `srpt_mgmt_method_get` and the `srpt_get_*` helpers of
//! `drivers/infiniband/ulp/srpt/ib_srpt.c`, Linux 6.1). `docs/srp-target.md` lists the
//! layouts.
//!
//! The response starts as a copy of the request (`memcpy` of the received MAD), with method
//! GetResp and status 0; then:
//! - Get ClassPortInfo: the 72 bytes zeroed, BaseVersion 1, ClassVersion 1, RespTimeValue 20.
//! - Get IOUnitInfo: ChangeID 1, MaxControllers 16, slot 1 present, slots 2–16 not installed
//!   (the other bytes are left as the request had them, as `srpt_get_iou` does).
//! - Get IOControllerProfile, modifier = slot: 0 or > 16 → status INVALID_FIELD (0x001C);
//!   > 2 → NO_IOC (0x0100); else the 128-byte profile (zeroed first).
//! - Get ServiceEntries, modifier = slot << 16 | hi << 8 | lo: slot 0 or > 16 → INVALID_FIELD;
//!   slot > 2, lo > hi or hi > 1 → NO_IOC; else entry 0 = `SRP.T10:<guid>`, ID = guid.
//! - Get of another attribute, and any Set: UNSUP_METHOD_ATTR (0x000C); another method:
//!   UNSUP_METHOD (0x0008).
//!
//! ib_srpt answers slot 2 like slot 1 (its `slot > 2` test), although IOUnitInfo says only
//! slot 1 holds a controller; we keep that, since initiators (`srp_daemon`) probe slot 1.

use softrdma_wire::dm::ioc_profile::{
    SRP_IO_CLASS_REV16A, SRP_IO_SUBCLASS, SRP_PROTOCOL, SRP_PROTOCOL_VERSION,
};
use softrdma_wire::dm::{
    ControllerSlot, DmAttributeId, DmStatus, IocProfileRepr, IouInfoPacket, OpCapMask,
    ServiceEntriesModifier, ServiceEntriesRepr, ServiceEntry,
};
use softrdma_wire::mad::{ClassPortInfo, Mad, MadStatus, Method};
use softrdma_wire::Guid;

/// `SRPT_ID_STRING`.
pub const SRPT_ID_STRING: &str = "Linux SRP target";
/// Where the 192 bytes of attribute data start in the MAD data (after the 24-byte header):
/// `IB_MGMT_DEVICE_HDR` (64) − 24.
const ATTR: usize = 40;

/// What the answers are made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DmInfo {
    /// `srpt_service_guid` (IOC GUID, service ID).
    pub guid: u64,
    /// The device's `vendor_id`, `vendor_part_id`, `hw_ver`.
    pub vendor_id: u32,
    pub device_id: u32,
    pub device_version: u16,
    /// SendMessageQueueDepth: the channels' receive ring (`min(MAX_SRPT_RQ_SIZE,
    /// max_qp_wr)` without SRQ).
    pub send_queue_depth: u16,
    /// SendMessageSize: `srp_max_req_size`.
    pub send_size: u32,
    /// RDMATransferSize before the `1 << 24` cap: `srp_max_rdma_size`.
    pub max_rdma_size: u32,
}

fn status(m: &mut Mad, s: DmStatus) {
    m.header.status = MadStatus(s.0);
}

/// The answer to a DM request `req` (any method), as ib_srpt builds it.
pub fn answer(req: &Mad, info: &DmInfo) -> Mad {
    let mut rsp = req.clone();
    rsp.header.method = Method::GET_RESP;
    rsp.header.status = MadStatus(0);
    match req.header.method {
        Method::GET => get(&mut rsp, req, info),
        Method::SET => status(&mut rsp, DmStatus::UNSUP_METHOD_ATTR),
        _ => status(&mut rsp, DmStatus::UNSUP_METHOD),
    }
    rsp
}

fn get(rsp: &mut Mad, req: &Mad, info: &DmInfo) {
    let data = &mut rsp.data[ATTR..];
    match DmAttributeId(req.header.attr_id) {
        DmAttributeId::CLASS_PORT_INFO => {
            let cpi = ClassPortInfo {
                base_version: 1,
                class_version: 1,
                resp_time_value: 20,
                ..ClassPortInfo::default()
            };
            cpi.emit(&mut data[..softrdma_wire::mad::class_port_info::LEN]);
        }
        DmAttributeId::IO_UNIT_INFO => {
            let mut p = IouInfoPacket::new_unchecked(&mut data[..132]);
            p.set_change_id(1);
            p.set_max_controllers(16);
            p.set_slot(1, ControllerSlot::PRESENT);
            for slot in 2..=16 {
                p.set_slot(slot, ControllerSlot::NOT_INSTALLED);
            }
        }
        DmAttributeId::IO_CONTROLLER_PROFILE => {
            let slot = req.header.attr_mod;
            if slot == 0 || slot > 16 {
                return status(rsp, DmStatus::INVALID_FIELD);
            }
            if slot > 2 {
                return status(rsp, DmStatus::NO_IOC);
            }
            let mut p = IocProfileRepr {
                guid: Guid(info.guid),
                vendor_id: info.vendor_id,
                device_id: info.device_id,
                device_version: info.device_version,
                subsys_vendor_id: info.vendor_id,
                subsys_device_id: 0,
                io_class: SRP_IO_CLASS_REV16A,
                io_subclass: SRP_IO_SUBCLASS,
                protocol: SRP_PROTOCOL,
                protocol_version: SRP_PROTOCOL_VERSION,
                send_queue_depth: info.send_queue_depth,
                rdma_read_depth: 4,
                send_size: info.send_size,
                rdma_size: info.max_rdma_size.min(1 << 24),
                num_svc_entries: 1,
                op_cap_mask: OpCapMask::SRPT,
                ..IocProfileRepr::default()
            };
            p.set_id_str(SRPT_ID_STRING);
            p.emit(&mut data[..128]);
        }
        DmAttributeId::SERVICE_ENTRIES => {
            let m = ServiceEntriesModifier::from_attr_mod(req.header.attr_mod);
            if m.slot == 0 || m.slot > 16 {
                return status(rsp, DmStatus::INVALID_FIELD);
            }
            if m.slot > 2 || m.lo > m.hi || m.hi > 1 {
                return status(rsp, DmStatus::NO_IOC);
            }
            let mut r = ServiceEntriesRepr {
                entries: [ServiceEntry::default(); 4],
            };
            r.entries[0] = ServiceEntry::srp(info.guid);
            r.emit(&mut data[..192]);
        }
        _ => status(rsp, DmStatus::UNSUP_METHOD_ATTR),
    }
}

// -------------------------------------------------------------------------------------
// The initiator's side: the queries `ibsrpdm` / `srp_daemon` make and what they print.
// -------------------------------------------------------------------------------------

/// A Get request of the DM class (`srp_daemon`'s `init_srp_mad`): base version 1, class
/// 0x06 version 1, method Get, `attr`/`attr_mod`, the caller's TID.
pub fn get_request(attr: DmAttributeId, attr_mod: u32, tid: u64) -> Mad {
    use softrdma_wire::dm::MGMT_CLASS_DEVICE_MGMT;
    use softrdma_wire::mad::{MadHeader, MgmtClass, BASE_VERSION};
    Mad::new(
        MadHeader {
            base_version: BASE_VERSION,
            mgmt_class: MgmtClass(MGMT_CLASS_DEVICE_MGMT),
            class_version: 1,
            method: Method::GET,
            status: MadStatus(0),
            class_specific: 0,
            tid,
            attr_id: attr.0,
            reserved: 0,
            attr_mod,
        },
        &[],
    )
}

/// The attribute data of a DM GetResp (`None` if its status is not success).
pub fn response_data(rsp: &Mad) -> Result<&[u8], DmStatus> {
    if rsp.header.status.0 != 0 {
        return Err(DmStatus(rsp.header.status.0));
    }
    Ok(&rsp.data[ATTR..])
}

/// One SRP service an I/O controller offers, as discovery finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrpService {
    /// The controller's slot in the I/O unit.
    pub slot: u16,
    /// The IOControllerProfile GUID (`ioc_guid`).
    pub ioc_guid: u64,
    /// From the service name `SRP.T10:<id_ext>` (`id_ext`).
    pub id_ext: u64,
    /// The service entry's ID (`service_id`).
    pub service_id: u64,
    /// The profile's ID string (`Linux SRP target`).
    pub id_string: String,
    pub name: String,
}

impl SrpService {
    /// `srp_daemon -c` / `ibsrpdm -c`'s line: `id_ext=…,ioc_guid=…,dgid=…,pkey=ffff,service_id=…`.
    pub fn ib_line(&self, dgid: &softrdma_wire::Gid, pkey: u16) -> String {
        let g: String = dgid.0.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "id_ext={:016x},ioc_guid={:016x},dgid={g},pkey={pkey:04x},service_id={:016x}",
            self.id_ext, self.ioc_guid, self.service_id
        )
    }

    /// The RDMA CM form for the same target (`dest=IP:PORT`).
    pub fn rdma_line(&self, dest: std::net::SocketAddr) -> String {
        let d = match dest {
            std::net::SocketAddr::V4(v) => v.to_string(),
            std::net::SocketAddr::V6(v) => format!("[{}]:{}", v.ip(), v.port()),
        };
        format!(
            "id_ext={:016x},ioc_guid={:016x},dest={d}",
            self.id_ext, self.ioc_guid
        )
    }
}

/// The present slots of an IOUnitInfo answer.
pub fn present_slots(data: &[u8]) -> Vec<u16> {
    let Ok(iou) = softrdma_wire::dm::IouInfoRepr::parse(&data[..data.len().min(132)]) else {
        return Vec::new();
    };
    (1..=usize::from(iou.max_controllers).min(256))
        .filter(|&s| iou.slot(s) == Some(ControllerSlot::PRESENT))
        .map(|s| s as u16)
        .collect()
}

/// The SRP services of one controller from its profile and ServiceEntries answers
/// (`srp_daemon`'s `do_port`: only entries named `SRP.T10:*`).
pub fn srp_services(
    slot: u16,
    profile: &IocProfileRepr,
    entries: &[ServiceEntry],
) -> Vec<SrpService> {
    use softrdma_wire::dm::service_entries::SRP_SERVICE_NAME_PREFIX;
    entries
        .iter()
        .filter_map(|e| {
            let name = e.name_str();
            let ext = name.strip_prefix(SRP_SERVICE_NAME_PREFIX)?;
            let id_ext = u64::from_str_radix(ext.trim(), 16).ok()?;
            Some(SrpService {
                slot,
                ioc_guid: profile.guid.0,
                id_ext,
                service_id: e.id,
                id_string: profile.id_str(),
                name,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_wire::dm::{IouInfoRepr, MGMT_CLASS_DEVICE_MGMT};
    use softrdma_wire::mad::{MadHeader, MgmtClass, BASE_VERSION};

    fn info() -> DmInfo {
        DmInfo {
            guid: 0x5054_00ff_fe77_0001,
            vendor_id: 0x0000_1234,
            device_id: 0x5678,
            device_version: 1,
            send_queue_depth: 128,
            send_size: 8276,
            max_rdma_size: 65536,
        }
    }

    fn req(method: Method, attr: DmAttributeId, attr_mod: u32) -> Mad {
        Mad::new(
            MadHeader {
                base_version: BASE_VERSION,
                mgmt_class: MgmtClass(MGMT_CLASS_DEVICE_MGMT),
                class_version: 1,
                method,
                status: MadStatus(0),
                class_specific: 0,
                tid: 0x1234,
                attr_id: attr.0,
                reserved: 0,
                attr_mod,
            },
            &[],
        )
    }

    #[test]
    fn discovery_of_our_own_answers() {
        let i = info();
        let iou = answer(&get_request(DmAttributeId::IO_UNIT_INFO, 0, 1), &i);
        let slots = present_slots(response_data(&iou).expect("iou"));
        assert_eq!(slots, vec![1]);
        let p = answer(&get_request(DmAttributeId::IO_CONTROLLER_PROFILE, 1, 2), &i);
        let prof = IocProfileRepr::parse(&response_data(&p).expect("ioc")[..128]).expect("p");
        let m = ServiceEntriesModifier {
            slot: 1,
            hi: 0,
            lo: 0,
        }
        .to_attr_mod();
        let e = answer(&get_request(DmAttributeId::SERVICE_ENTRIES, m, 3), &i);
        let ents = ServiceEntriesRepr::parse(response_data(&e).expect("svc")).expect("e");
        let svc = srp_services(1, &prof, &ents.entries[..1]);
        assert_eq!(svc.len(), 1);
        assert_eq!(
            (svc[0].id_ext, svc[0].ioc_guid, svc[0].service_id),
            (i.guid, i.guid, i.guid)
        );
        let g = softrdma_wire::Gid::from("10.77.0.1".parse::<std::net::IpAddr>().unwrap());
        assert_eq!(
            svc[0].ib_line(&g, 0xffff),
            "id_ext=505400fffe770001,ioc_guid=505400fffe770001,dgid=00000000000000000000ffff0a4d0001,pkey=ffff,service_id=505400fffe770001"
        );
        assert_eq!(
            svc[0].rdma_line("10.77.0.1:5555".parse().unwrap()),
            "id_ext=505400fffe770001,ioc_guid=505400fffe770001,dest=10.77.0.1:5555"
        );
        let bad = answer(&get_request(DmAttributeId::IO_CONTROLLER_PROFILE, 5, 2), &i);
        assert_eq!(response_data(&bad), Err(DmStatus::NO_IOC));
    }

    #[test]
    fn answers() {
        let i = info();
        let r = answer(&req(Method::GET, DmAttributeId::CLASS_PORT_INFO, 0), &i);
        assert_eq!(r.header.method, Method::GET_RESP);
        assert_eq!(r.header.tid, 0x1234);
        assert_eq!(r.header.status.0, 0);
        assert_eq!(&r.data[ATTR..ATTR + 2], &[1, 1]);
        assert_eq!(r.data[ATTR + 7] & 0x1f, 20);

        let r = answer(&req(Method::GET, DmAttributeId::IO_UNIT_INFO, 0), &i);
        let iou = IouInfoRepr::parse(&r.data[ATTR..ATTR + 132]).expect("iou");
        assert_eq!(iou, IouInfoRepr::srpt());

        let r = answer(
            &req(Method::GET, DmAttributeId::IO_CONTROLLER_PROFILE, 1),
            &i,
        );
        let p = IocProfileRepr::parse(&r.data[ATTR..ATTR + 128]).expect("ioc");
        assert_eq!(p.guid, Guid(i.guid));
        assert_eq!(p.io_class, 0x0100);
        assert_eq!(
            (p.send_queue_depth, p.send_size, p.rdma_size),
            (128, 8276, 65536)
        );
        assert_eq!(p.op_cap_mask, OpCapMask(0x2b));
        assert_eq!(p.id_str(), "Linux SRP target");
        for (slot, st) in [
            (0, DmStatus::INVALID_FIELD),
            (17, DmStatus::INVALID_FIELD),
            (3, DmStatus::NO_IOC),
        ] {
            let r = answer(
                &req(Method::GET, DmAttributeId::IO_CONTROLLER_PROFILE, slot),
                &i,
            );
            assert_eq!(r.header.status.0, st.0, "slot {slot}");
        }

        let m = |slot: u32, hi: u32, lo: u32| slot << 16 | hi << 8 | lo;
        let r = answer(
            &req(Method::GET, DmAttributeId::SERVICE_ENTRIES, m(1, 0, 0)),
            &i,
        );
        let s = ServiceEntriesRepr::parse(&r.data[ATTR..]).expect("svc");
        assert_eq!(s.entries[0].name_str(), "SRP.T10:505400fffe770001");
        assert_eq!(s.entries[0].id, i.guid);
        for (am, st) in [
            (m(0, 0, 0), DmStatus::INVALID_FIELD),
            (m(3, 0, 0), DmStatus::NO_IOC),
            (m(1, 0, 1), DmStatus::NO_IOC),
            (m(1, 2, 0), DmStatus::NO_IOC),
        ] {
            let r = answer(&req(Method::GET, DmAttributeId::SERVICE_ENTRIES, am), &i);
            assert_eq!(r.header.status.0, st.0, "{am:#x}");
        }

        let r = answer(&req(Method::GET, DmAttributeId::DIAG_CODE, 0), &i);
        assert_eq!(r.header.status.0, 0x000c);
        let r = answer(&req(Method::SET, DmAttributeId::IO_UNIT_INFO, 0), &i);
        assert_eq!(r.header.status.0, 0x000c);
        let r = answer(&req(Method(0x05), DmAttributeId::IO_UNIT_INFO, 0), &i);
        assert_eq!(r.header.status.0, 0x0008);
        assert_eq!(r.header.method, Method::GET_RESP);
    }
}
