//! DM layouts against the kernel's `struct ib_dm_*` (ib_dm_mad.h) and what `srpt_get_iou`,
//! `srpt_get_ioc`, `srpt_get_svc_entries` write; the kernel sends no DM MADs on RoCE, so
//! there is no capture.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::dissect::Dissect;

/// The IOControllerProfile ib_srpt builds for rxe in the lab (node GUID 5054:00ff:fe77:000a,
/// rxe vendor_id 0xffffff, no SRQ: queue depth min(128, max_qp_wr), srp_max_req_size 8276,
/// srp_max_rdma_size 65536), written out byte by byte from `struct ib_dm_ioc_profile`.
fn srpt_ioc_bytes() -> Vec<u8> {
    let mut b = vec![0u8; 128];
    b[0..8].copy_from_slice(&0x5054_00ff_fe77_000au64.to_be_bytes()); // guid
    b[8..12].copy_from_slice(&0x00ff_ffffu32.to_be_bytes()); // vendor_id
    b[12..16].copy_from_slice(&0u32.to_be_bytes()); // device_id
    b[16..18].copy_from_slice(&0u16.to_be_bytes()); // device_version
    b[20..24].copy_from_slice(&0x00ff_ffffu32.to_be_bytes()); // subsys_vendor_id
    b[28..30].copy_from_slice(&0x0100u16.to_be_bytes()); // io_class
    b[30..32].copy_from_slice(&0x609eu16.to_be_bytes()); // io_subclass
    b[32..34].copy_from_slice(&0x0108u16.to_be_bytes()); // protocol
    b[34..36].copy_from_slice(&0x0001u16.to_be_bytes()); // protocol_version
    b[40..42].copy_from_slice(&128u16.to_be_bytes()); // send_queue_depth
    b[43] = 4; // rdma_read_depth
    b[44..48].copy_from_slice(&8276u32.to_be_bytes()); // send_size
    b[48..52].copy_from_slice(&65536u32.to_be_bytes()); // rdma_size
    b[52] = 0x2b; // op_cap_mask ST|SF|RF|WF
    b[54] = 1; // num_svc_entries
    b[64..80].copy_from_slice(b"Linux SRP target");
    b
}

#[test]
fn ioc_profile_layout() {
    let b = srpt_ioc_bytes();
    let r = IocProfileRepr::parse(&b).unwrap();
    assert_eq!(r.guid.0, 0x5054_00ff_fe77_000a);
    assert_eq!(r.vendor_id, 0xffffff);
    assert_eq!(r.io_class, ioc_profile::SRP_IO_CLASS_REV16A);
    assert_eq!(r.io_subclass, ioc_profile::SRP_IO_SUBCLASS);
    assert_eq!(r.protocol, ioc_profile::SRP_PROTOCOL);
    assert_eq!(r.protocol_version, ioc_profile::SRP_PROTOCOL_VERSION);
    assert_eq!(r.send_queue_depth, 128);
    assert_eq!(r.rdma_read_depth, 4);
    assert_eq!(r.send_size, 8276);
    assert_eq!(r.rdma_size, 65536);
    assert_eq!(r.op_cap_mask, OpCapMask::SRPT);
    assert_eq!(r.num_svc_entries, 1);
    assert_eq!(r.id_str(), "Linux SRP target");
    assert_eq!(r.to_bytes(), b);
    let mut r2 = IocProfileRepr::default();
    r2.set_id_str("Linux SRP target");
    assert_eq!(r2.id_string, r.id_string);
    let t = r.to_tree();
    assert_eq!(t.uint("dm_ioc_profile.send_size"), Some(8276));
}

#[test]
fn iou_info_like_srpt() {
    let r = IouInfoRepr::srpt();
    let b = r.to_bytes();
    assert_eq!(&b[..4], &[0x00, 0x01, 16, 0]);
    // Slot 1 present (high nibble of byte 0 of the list), slots 2..16 not installed.
    assert_eq!(b[4], 0x10);
    assert!(b[5..].iter().all(|&x| x == 0));
    let p = IouInfoRepr::parse(&b).unwrap();
    assert_eq!(p, r);
    assert_eq!(p.slot(1), Some(ControllerSlot::PRESENT));
    assert_eq!(p.slot(2), Some(ControllerSlot::NOT_INSTALLED));
    assert_eq!(p.slot(0), None);
    assert_eq!(p.slot(257), None);
    let mut q = p.clone();
    q.set_slot(2, ControllerSlot::NO_SLOT);
    q.set_slot(256, ControllerSlot::PRESENT);
    q.diag_device_id = true;
    q.option_rom = true;
    let qb = q.to_bytes();
    assert_eq!(qb[3], 0x03);
    assert_eq!(qb[4], 0x1f);
    assert_eq!(qb[131], 0x01);
    let v = IouInfoPacket::new_checked(&qb[..]).unwrap();
    assert_eq!(v.slot(2), Some(ControllerSlot::NO_SLOT));
    assert_eq!(v.slot(256), Some(ControllerSlot::PRESENT));
    assert!(v.diag_device_id() && v.option_rom());
    assert_eq!(IouInfoRepr::parse(&qb).unwrap(), q);
}

#[test]
fn service_entries_like_srpt() {
    let mut r = ServiceEntriesRepr::default();
    r.entries[0] = ServiceEntry::srp(0x5054_00ff_fe77_000a);
    let b = r.to_bytes();
    assert_eq!(b.len(), 192);
    assert_eq!(&b[..24], b"SRP.T10:505400fffe77000a");
    assert!(b[24..40].iter().all(|&x| x == 0));
    assert_eq!(&b[40..48], &0x5054_00ff_fe77_000au64.to_be_bytes());
    assert!(b[48..].iter().all(|&x| x == 0));
    let p = ServiceEntriesRepr::parse(&b).unwrap();
    assert_eq!(p, r);
    assert_eq!(p.entries[0].name_str(), "SRP.T10:505400fffe77000a");
    // The attribute modifier: slot 1, entries 0..0.
    let m = ServiceEntriesModifier::from_attr_mod(0x0001_0000);
    assert_eq!(
        m,
        ServiceEntriesModifier {
            slot: 1,
            hi: 0,
            lo: 0
        }
    );
    assert_eq!(m.to_attr_mod(), 0x0001_0000);
    assert!(m.is_valid_range());
    assert!(!ServiceEntriesModifier::from_attr_mod(0x0001_0001 | 0x0000_0002).is_valid_range());
}

#[test]
fn dm_body_roundtrip_and_codes() {
    let mut body = vec![0u8; 232];
    body[0] = 0xaa; // reserved bytes are echoed
    body[40..40 + 128].copy_from_slice(&srpt_ioc_bytes());
    let r = Repr::parse(DmAttributeId::IO_CONTROLLER_PROFILE, &body).unwrap();
    assert_eq!(r.reserved[0], 0xaa);
    assert!(matches!(r.attribute, Attribute::IocProfile(_)));
    assert_eq!(r.to_bytes(), body);
    assert_eq!(r.attribute.id(), DmAttributeId::IO_CONTROLLER_PROFILE);

    // Unknown attribute IDs are kept with their data.
    body[40] = 7;
    let u = Repr::parse(DmAttributeId(0xff01), &body).unwrap();
    assert_eq!(u.attribute.id(), DmAttributeId(0xff01));
    assert_eq!(u.to_bytes(), body);

    let d = Repr {
        reserved: [0; 40],
        attribute: Attribute::DiagnosticTimeout(5000),
    };
    assert_eq!(
        Repr::parse(DmAttributeId::DIAGNOSTIC_TIMEOUT, &d.to_bytes()).unwrap(),
        d
    );
    let c = Repr {
        reserved: [0; 40],
        attribute: Attribute::DiagCode(0),
    };
    assert_eq!(
        Repr::parse(DmAttributeId::DIAG_CODE, &c.to_bytes()).unwrap(),
        c
    );

    assert_eq!(DmAttributeId::SERVICE_ENTRIES.0, 0x12);
    assert_eq!(DmAttributeId::TEST_DEVICE_LOOP.0, 0x23);
    assert_eq!(DmStatus::NO_IOC.0, 0x0100);
    assert_eq!(DmStatus::INVALID_FIELD.0, 0x001c);
    assert_eq!(
        DmStatus::UNSUP_METHOD_ATTR.to_string(),
        "Method/attribute combination not supported"
    );
    assert!(!DmStatus(0x4000).is_known());
    let _ = r.to_tree().to_text(0);
}

#[test]
fn dm_truncated_never_panics() {
    let mut body = vec![0u8; 232];
    body[40..40 + 132].copy_from_slice(&IouInfoRepr::srpt().to_bytes());
    for id in [0x01u16, 0x10, 0x11, 0x12, 0x20, 0x24, 0xffff] {
        for n in 0..body.len() {
            assert!(Repr::parse(DmAttributeId(id), &body[..n]).is_err());
            let _ = Attribute::parse(DmAttributeId(id), &body[..n.min(191)]);
        }
        assert!(Repr::parse(DmAttributeId(id), &body).is_ok());
    }
    for n in 0..132 {
        assert!(IouInfoRepr::parse(&body[40..40 + n]).is_err());
    }
    for n in 0..128 {
        assert!(IocProfileRepr::parse(&srpt_ioc_bytes()[..n]).is_err());
    }
    for n in 0..192 {
        assert!(ServiceEntriesRepr::parse(&vec![0xff; n]).is_err());
    }
    // Garbage decodes to values, never panics.
    let g: Vec<u8> = (0..232u32).map(|i| (i * 37 + 11) as u8).collect();
    for id in 0..0x30u16 {
        let r = Repr::parse(DmAttributeId(id), &g).unwrap();
        crate::test_support::render(&r.to_tree());
    }
}
