//! `ClassPortInfo` (IBTA Vol 1 13.4.8.1, table 156; Linux `struct ib_class_port_info`): the
//! 72-byte attribute every management class answers with, telling where to redirect and
//! where to send traps. The CM carries it as the SIDR_REP / APR "additional information" when
//! it redirects.
//!
//! ```text
//! byte 0  BaseVersion  1 ClassVersion  2 CapabilityMask (16)
//!      4  CapabilityMask2 (27) | RespTimeValue (5)
//!      8  RedirectGID (128)
//!     24  RedirectTC (8) | RedirectSL (4) | RedirectFL (20)
//!     28  RedirectLID (16)     30 RedirectP_Key (16)
//!     32  reserved (8) | RedirectQP (24)
//!     36  RedirectQ_Key (32)
//!     40  TrapGID (128)
//!     56  TrapTC (8) | TrapSL (4) | TrapFL (20)
//!     60  TrapLID (16)         62 TrapP_Key (16)
//!     64  TrapHL (8) | TrapQP (24)
//!     68  TrapQ_Key (32)
//! ```

use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits};
use crate::types::Gid;

/// Size of the attribute.
pub const LEN: usize = 72;

/// Field locations, bytes from the start of the attribute.
pub mod fields {
    use super::Bits;
    pub const BASE_VERSION: Bits = Bits::new(0, 0, 8);
    pub const CLASS_VERSION: Bits = Bits::new(1, 0, 8);
    pub const CAPABILITY_MASK: Bits = Bits::new(2, 0, 16);
    pub const CAPABILITY_MASK2: Bits = Bits::new(4, 0, 27);
    pub const RESP_TIME_VALUE: Bits = Bits::new(7, 3, 5);
    pub const REDIRECT_GID: usize = 8;
    pub const REDIRECT_TC: Bits = Bits::new(24, 0, 8);
    pub const REDIRECT_SL: Bits = Bits::new(25, 0, 4);
    pub const REDIRECT_FL: Bits = Bits::new(25, 4, 20);
    pub const REDIRECT_LID: Bits = Bits::new(28, 0, 16);
    pub const REDIRECT_PKEY: Bits = Bits::new(30, 0, 16);
    pub const REDIRECT_QP: Bits = Bits::new(33, 0, 24);
    pub const REDIRECT_QKEY: Bits = Bits::new(36, 0, 32);
    pub const TRAP_GID: usize = 40;
    pub const TRAP_TC: Bits = Bits::new(56, 0, 8);
    pub const TRAP_SL: Bits = Bits::new(57, 0, 4);
    pub const TRAP_FL: Bits = Bits::new(57, 4, 20);
    pub const TRAP_LID: Bits = Bits::new(60, 0, 16);
    pub const TRAP_PKEY: Bits = Bits::new(62, 0, 16);
    pub const TRAP_HOP_LIMIT: Bits = Bits::new(64, 0, 8);
    pub const TRAP_QP: Bits = Bits::new(65, 0, 24);
    pub const TRAP_QKEY: Bits = Bits::new(68, 0, 32);
}

fixed_view! {
    /// A view of a ClassPortInfo attribute.
    struct Packet(LEN, "class_port_info");
}

bit_accessors! {
    base_version / set_base_version: u8 = fields::BASE_VERSION;
    class_version / set_class_version: u8 = fields::CLASS_VERSION;
    capability_mask / set_capability_mask: u16 = fields::CAPABILITY_MASK;
    /// CapabilityMask2: 27 bits.
    capability_mask2 / set_capability_mask2: u32 = fields::CAPABILITY_MASK2;
    /// RespTimeValue: 5 bits, 4.096 µs × 2^value.
    resp_time_value / set_resp_time_value: u8 = fields::RESP_TIME_VALUE;
    redirect_tc / set_redirect_tc: u8 = fields::REDIRECT_TC;
    redirect_sl / set_redirect_sl: u8 = fields::REDIRECT_SL;
    redirect_fl / set_redirect_fl: u32 = fields::REDIRECT_FL;
    redirect_lid / set_redirect_lid: u16 = fields::REDIRECT_LID;
    redirect_pkey / set_redirect_pkey: u16 = fields::REDIRECT_PKEY;
    redirect_qp / set_redirect_qp: u32 = fields::REDIRECT_QP;
    redirect_qkey / set_redirect_qkey: u32 = fields::REDIRECT_QKEY;
    trap_tc / set_trap_tc: u8 = fields::TRAP_TC;
    trap_sl / set_trap_sl: u8 = fields::TRAP_SL;
    trap_fl / set_trap_fl: u32 = fields::TRAP_FL;
    trap_lid / set_trap_lid: u16 = fields::TRAP_LID;
    trap_pkey / set_trap_pkey: u16 = fields::TRAP_PKEY;
    trap_hop_limit / set_trap_hop_limit: u8 = fields::TRAP_HOP_LIMIT;
    trap_qp / set_trap_qp: u32 = fields::TRAP_QP;
    trap_qkey / set_trap_qkey: u32 = fields::TRAP_QKEY;
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn redirect_gid(&self) -> Gid {
        Gid(field::read_array(
            self.buffer.as_ref(),
            fields::REDIRECT_GID,
        ))
    }

    pub fn trap_gid(&self) -> Gid {
        Gid(field::read_array(self.buffer.as_ref(), fields::TRAP_GID))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_redirect_gid(&mut self, g: Gid) {
        let o = fields::REDIRECT_GID;
        self.buffer.as_mut()[o..o + 16].copy_from_slice(&g.0);
    }

    pub fn set_trap_gid(&mut self, g: Gid) {
        let o = fields::TRAP_GID;
        self.buffer.as_mut()[o..o + 16].copy_from_slice(&g.0);
    }
}

/// A decoded ClassPortInfo. The reserved byte before RedirectQP is not kept (emitted as 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub base_version: u8,
    pub class_version: u8,
    pub capability_mask: u16,
    /// 27 bits.
    pub capability_mask2: u32,
    /// 5 bits.
    pub resp_time_value: u8,
    pub redirect_gid: Gid,
    pub redirect_tc: u8,
    /// 4 bits.
    pub redirect_sl: u8,
    /// 20 bits.
    pub redirect_fl: u32,
    pub redirect_lid: u16,
    pub redirect_pkey: u16,
    /// 24 bits.
    pub redirect_qp: u32,
    pub redirect_qkey: u32,
    pub trap_gid: Gid,
    pub trap_tc: u8,
    /// 4 bits.
    pub trap_sl: u8,
    /// 20 bits.
    pub trap_fl: u32,
    pub trap_lid: u16,
    pub trap_pkey: u16,
    pub trap_hop_limit: u8,
    /// 24 bits.
    pub trap_qp: u32,
    pub trap_qkey: u32,
}

impl Repr {
    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            base_version: p.base_version(),
            class_version: p.class_version(),
            capability_mask: p.capability_mask(),
            capability_mask2: p.capability_mask2(),
            resp_time_value: p.resp_time_value(),
            redirect_gid: p.redirect_gid(),
            redirect_tc: p.redirect_tc(),
            redirect_sl: p.redirect_sl(),
            redirect_fl: p.redirect_fl(),
            redirect_lid: p.redirect_lid(),
            redirect_pkey: p.redirect_pkey(),
            redirect_qp: p.redirect_qp(),
            redirect_qkey: p.redirect_qkey(),
            trap_gid: p.trap_gid(),
            trap_tc: p.trap_tc(),
            trap_sl: p.trap_sl(),
            trap_fl: p.trap_fl(),
            trap_lid: p.trap_lid(),
            trap_pkey: p.trap_pkey(),
            trap_hop_limit: p.trap_hop_limit(),
            trap_qp: p.trap_qp(),
            trap_qkey: p.trap_qkey(),
        }
    }

    fixed_repr!(Packet, LEN);

    /// Writes the attribute into `buf`, which must be exactly 72 bytes long. Values wider
    /// than their field are cut to the field's width.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), LEN, "class_port_info: wrong buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(buf);
        p.set_base_version(self.base_version);
        p.set_class_version(self.class_version);
        p.set_capability_mask(self.capability_mask);
        p.set_capability_mask2(self.capability_mask2);
        p.set_resp_time_value(self.resp_time_value);
        p.set_redirect_gid(self.redirect_gid);
        p.set_redirect_tc(self.redirect_tc);
        p.set_redirect_sl(self.redirect_sl);
        p.set_redirect_fl(self.redirect_fl);
        p.set_redirect_lid(self.redirect_lid);
        p.set_redirect_pkey(self.redirect_pkey);
        p.set_redirect_qp(self.redirect_qp);
        p.set_redirect_qkey(self.redirect_qkey);
        p.set_trap_gid(self.trap_gid);
        p.set_trap_tc(self.trap_tc);
        p.set_trap_sl(self.trap_sl);
        p.set_trap_fl(self.trap_fl);
        p.set_trap_lid(self.trap_lid);
        p.set_trap_pkey(self.trap_pkey);
        p.set_trap_hop_limit(self.trap_hop_limit);
        p.set_trap_qp(self.trap_qp);
        p.set_trap_qkey(self.trap_qkey);
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("class_port_info", "ClassPortInfo", |t| {
            t.hex("base_version", "Base Version", self.base_version, 2);
            t.hex("class_version", "Class Version", self.class_version, 2);
            t.hex(
                "capability_mask",
                "Capability Mask",
                self.capability_mask,
                4,
            );
            t.hex(
                "capability_mask2",
                "Capability Mask 2",
                self.capability_mask2,
                7,
            );
            t.hex(
                "resp_time_value",
                "Response Time Value",
                self.resp_time_value,
                2,
            );
            t.gid("redirect_gid", "Redirect GID", self.redirect_gid);
            t.hex("redirect_tc", "Redirect TC", self.redirect_tc, 2);
            t.hex("redirect_sl", "Redirect SL", self.redirect_sl, 1);
            t.hex("redirect_fl", "Redirect FL", self.redirect_fl, 5);
            t.dec("redirect_lid", "Redirect LID", self.redirect_lid);
            t.hex("redirect_pkey", "Redirect P_Key", self.redirect_pkey, 4);
            t.hex("redirect_qp", "Redirect QP", self.redirect_qp, 6);
            t.hex("redirect_qkey", "Redirect Q_Key", self.redirect_qkey, 8);
            t.gid("trap_gid", "Trap GID", self.trap_gid);
            t.hex("trap_tc", "Trap TC", self.trap_tc, 2);
            t.hex("trap_sl", "Trap SL", self.trap_sl, 1);
            t.hex("trap_fl", "Trap FL", self.trap_fl, 5);
            t.dec("trap_lid", "Trap LID", self.trap_lid);
            t.hex("trap_pkey", "Trap P_Key", self.trap_pkey, 4);
            t.dec("trap_hop_limit", "Trap Hop Limit", self.trap_hop_limit);
            t.hex("trap_qp", "Trap QP", self.trap_qp, 6);
            t.hex("trap_qkey", "Trap Q_Key", self.trap_qkey, 8);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built attribute laid out after IBTA table 156 / `struct ib_class_port_info`
    /// (no capture carries one: the kernel CM never redirects on RoCE).
    fn sample() -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0] = 0x01; // base version
        b[1] = 0x02; // class version
        b[2..4].copy_from_slice(&[0x12, 0x34]); // capability mask
                                                // cap mask 2 = 0x5abcdef (27 bits), resp time value = 0x13 (5 bits):
                                                // (0x5abcdef << 5) | 0x13 = 0xb579bdf3
        b[4..8].copy_from_slice(&[0xb5, 0x79, 0xbd, 0xf3]);
        b[8..24].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 10]); // redirect GID ::ffff:10.77.0.10
                                                                                              // TC 0xa5, SL 0x9, FL 0xbcdef
        b[24..28].copy_from_slice(&[0xa5, 0x9b, 0xcd, 0xef]);
        b[28..30].copy_from_slice(&[0xff, 0xff]); // redirect LID
        b[30..32].copy_from_slice(&[0xff, 0xff]); // redirect P_Key
        b[32..36].copy_from_slice(&[0x00, 0x00, 0x00, 0x11]); // rsvd, redirect QP 0x11
        b[36..40].copy_from_slice(&[0x80, 0x01, 0x00, 0x00]); // redirect Q_Key
        b[40..56].copy_from_slice(&[
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x77, 0, 0x0b,
        ]); // trap GID fe80::5054:ff:fe77:b
        b[56..60].copy_from_slice(&[0x01, 0x20, 0x00, 0x01]); // TC 1, SL 2, FL 1
        b[60..62].copy_from_slice(&[0x00, 0x07]); // trap LID
        b[62..64].copy_from_slice(&[0x7f, 0xff]); // trap P_Key
        b[64..68].copy_from_slice(&[0x40, 0x00, 0x00, 0x01]); // hop limit 64, QP 1
        b[68..72].copy_from_slice(&[0x01, 0x23, 0x45, 0x67]); // trap Q_Key
        b
    }

    #[test]
    fn fields_at_table_156_offsets() {
        let b = sample();
        let r = Repr::parse(&b).expect("72 bytes");
        assert_eq!(r.base_version, 1);
        assert_eq!(r.class_version, 2);
        assert_eq!(r.capability_mask, 0x1234);
        assert_eq!(r.capability_mask2, 0x5ab_cdef);
        assert_eq!(r.resp_time_value, 0x13);
        assert_eq!(r.redirect_gid.to_string(), "10.77.0.10");
        assert_eq!(r.redirect_tc, 0xa5);
        assert_eq!(r.redirect_sl, 0x9);
        assert_eq!(r.redirect_fl, 0xbcdef);
        assert_eq!(r.redirect_lid, 0xffff);
        assert_eq!(r.redirect_pkey, 0xffff);
        assert_eq!(r.redirect_qp, 0x11);
        assert_eq!(r.redirect_qkey, 0x8001_0000);
        assert_eq!(r.trap_gid.to_string(), "fe80::5054:ff:fe77:b");
        assert_eq!((r.trap_tc, r.trap_sl, r.trap_fl), (1, 2, 1));
        assert_eq!(r.trap_lid, 7);
        assert_eq!(r.trap_pkey, 0x7fff);
        assert_eq!(r.trap_hop_limit, 64);
        assert_eq!(r.trap_qp, 1);
        assert_eq!(r.trap_qkey, 0x0123_4567);
        assert_eq!(r.to_bytes(), b);
        let t = r.to_tree();
        assert_eq!(t.uint("class_port_info.resp_time_value"), Some(0x13));
        assert_eq!(t.uint("class_port_info.trap_hop_limit"), Some(64));
    }

    #[test]
    fn truncated() {
        let b = sample();
        for n in 0..LEN {
            assert!(Repr::parse(&b[..n]).is_err());
        }
    }

    #[test]
    fn wide_values_are_cut_to_the_field() {
        let r = Repr {
            capability_mask2: u32::MAX,
            resp_time_value: 0xff,
            redirect_qp: u32::MAX,
            ..Repr::default()
        };
        let b = r.to_bytes();
        assert_eq!(&b[4..8], &[0xff; 4]);
        assert_eq!(&b[32..36], &[0x00, 0xff, 0xff, 0xff]);
        let back = Repr::parse(&b).expect("72 bytes");
        assert_eq!(back.capability_mask2, 0x7ff_ffff);
        assert_eq!(back.resp_time_value, 0x1f);
        assert_eq!(back.redirect_qp, 0xff_ffff);
    }
}
