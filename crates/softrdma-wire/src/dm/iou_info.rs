//! IOUnitInfo (attribute 0x0010; IBTA vol 1 §16.3.3.3, table 282; `struct ib_dm_iou_info`):
//! ChangeID, MaxControllers, the DiagDeviceID and OptionROM bits, and the ControllerList of
//! 4-bit slot entries, slot 1 in the high nibble of byte 0 (as `srpt_set_ioc` writes it).

use crate::dissect::{Dissect, Tree};
use crate::field::{read_array, read_u16, write_u16};
use crate::Result;

code_point! {
    /// One ControllerList entry.
    pub struct ControllerSlot(u8) {
        NOT_INSTALLED = 0x0 => "IOC not installed",
        PRESENT = 0x1 => "IOC present",
        NO_SLOT = 0xf => "Slot does not exist",
    }
}

/// Byte offsets of IOUnitInfo.
pub mod field {
    pub const CHANGE_ID: usize = 0;
    pub const MAX_CONTROLLERS: usize = 2;
    /// Bit 1 DiagDeviceID, bit 0 OptionROM.
    pub const DIAG_ROM: usize = 3;
    pub const CONTROLLER_LIST: usize = 4;
    /// 128 bytes, 256 four-bit slots.
    pub const CONTROLLER_LIST_LEN: usize = 128;
    pub const LEN: usize = 132;
    pub const DIAG_DEVICE_ID_BIT: u8 = 0x02;
    pub const OPTION_ROM_BIT: u8 = 0x01;
}

fixed_view! {
    /// A view of IOUnitInfo.
    struct Packet(field::LEN, "dm.iou_info");
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn change_id(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHANGE_ID)
    }
    pub fn max_controllers(&self) -> u8 {
        self.buffer.as_ref()[field::MAX_CONTROLLERS]
    }
    pub fn diag_device_id(&self) -> bool {
        self.buffer.as_ref()[field::DIAG_ROM] & field::DIAG_DEVICE_ID_BIT != 0
    }
    pub fn option_rom(&self) -> bool {
        self.buffer.as_ref()[field::DIAG_ROM] & field::OPTION_ROM_BIT != 0
    }
    /// The entry of 1-based `slot` (1..=256); `None` outside.
    pub fn slot(&self, slot: usize) -> Option<ControllerSlot> {
        let i = slot.checked_sub(1)?;
        let b = *self.buffer.as_ref().get(field::CONTROLLER_LIST + i / 2)?;
        if i >= 2 * field::CONTROLLER_LIST_LEN {
            return None;
        }
        Some(ControllerSlot(if i % 2 == 0 { b >> 4 } else { b & 0x0f }))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_change_id(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::CHANGE_ID, v)
    }
    pub fn set_max_controllers(&mut self, v: u8) {
        self.buffer.as_mut()[field::MAX_CONTROLLERS] = v
    }
    pub fn set_diag_rom(&mut self, diag_device_id: bool, option_rom: bool) {
        let b = &mut self.buffer.as_mut()[field::DIAG_ROM];
        *b &= !(field::DIAG_DEVICE_ID_BIT | field::OPTION_ROM_BIT);
        if diag_device_id {
            *b |= field::DIAG_DEVICE_ID_BIT;
        }
        if option_rom {
            *b |= field::OPTION_ROM_BIT;
        }
    }
    /// Sets the entry of 1-based `slot` (ignored outside 1..=256).
    pub fn set_slot(&mut self, slot: usize, v: ControllerSlot) {
        let Some(i) = slot.checked_sub(1) else { return };
        if i >= 2 * field::CONTROLLER_LIST_LEN {
            return;
        }
        if let Some(b) = self.buffer.as_mut().get_mut(field::CONTROLLER_LIST + i / 2) {
            *b = if i % 2 == 0 {
                (*b & 0x0f) | (v.0 << 4)
            } else {
                (*b & 0xf0) | (v.0 & 0x0f)
            };
        }
    }
}

/// IOUnitInfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub change_id: u16,
    pub max_controllers: u8,
    pub diag_device_id: bool,
    pub option_rom: bool,
    /// The 128-byte controller list (two slots per byte, slot 1 in the high nibble of byte 0);
    /// use [`Repr::slot`] / [`Repr::set_slot`].
    pub controller_list: [u8; 128],
}

impl Default for Repr {
    fn default() -> Repr {
        Repr {
            change_id: 0,
            max_controllers: 0,
            diag_device_id: false,
            option_rom: false,
            controller_list: [0; 128],
        }
    }
}

impl Repr {
    /// What ib_srpt answers (`srpt_get_iou`): ChangeID 1, 16 controllers, slot 1 present and
    /// slots 2–16 not installed.
    pub fn srpt() -> Repr {
        let mut r = Repr {
            change_id: 1,
            max_controllers: 16,
            ..Repr::default()
        };
        r.set_slot(1, ControllerSlot::PRESENT);
        r
    }

    pub fn parse(buf: &[u8]) -> Result<Repr> {
        let p = Packet::new_checked(buf)?;
        Ok(Repr {
            change_id: p.change_id(),
            max_controllers: p.max_controllers(),
            diag_device_id: p.diag_device_id(),
            option_rom: p.option_rom(),
            controller_list: read_array(buf, field::CONTROLLER_LIST),
        })
    }

    pub fn buffer_len(&self) -> usize {
        field::LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), field::LEN, "dm.iou_info: emit buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(&mut *buf);
        p.set_change_id(self.change_id);
        p.set_max_controllers(self.max_controllers);
        p.set_diag_rom(self.diag_device_id, self.option_rom);
        buf[field::CONTROLLER_LIST..].copy_from_slice(&self.controller_list);
    }

    to_bytes!();

    /// The entry of 1-based `slot`.
    pub fn slot(&self, slot: usize) -> Option<ControllerSlot> {
        let i = slot.checked_sub(1)?;
        let b = *self.controller_list.get(i / 2)?;
        Some(ControllerSlot(if i % 2 == 0 { b >> 4 } else { b & 0x0f }))
    }

    pub fn set_slot(&mut self, slot: usize, v: ControllerSlot) {
        let Some(i) = slot.checked_sub(1) else { return };
        if let Some(b) = self.controller_list.get_mut(i / 2) {
            *b = if i % 2 == 0 {
                (*b & 0x0f) | (v.0 << 4)
            } else {
                (*b & 0xf0) | (v.0 & 0x0f)
            };
        }
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("dm_iou_info", "IOUnitInfo", |t| {
            t.dec("change_id", "ChangeID", self.change_id);
            t.dec("max_controllers", "MaxControllers", self.max_controllers);
            t.flag("diag_device_id", "DiagDeviceID", self.diag_device_id);
            t.flag("option_rom", "OptionROM", self.option_rom);
            t.list("controller_list", "ControllerList", |t| {
                for s in 1..=usize::from(self.max_controllers) {
                    if let Some(v) = self.slot(s) {
                        t.code("slot", &format!("Slot {s}"), v.0, v);
                    }
                }
            });
        });
    }
}
