//! ServiceEntries (attribute 0x0012; IBTA vol 1 §16.3.3.5, table 284; `struct
//! ib_dm_svc_entries`): up to four 48-byte entries, each a 40-byte name and an 8-byte service
//! ID. The attribute modifier selects the IOC slot (bits 31–16) and the entry range
//! (bits 15–8 last, bits 7–0 first), as `srpt_mgmt_method_get` decodes it. For SRP the name
//! is `"SRP.T10:"` followed by the 16 hex digits of the IOC GUID and the ID is that GUID
//! (`srpt_get_svc_entries`; SRP r16a table B.8).

use crate::dissect::{Dissect, Tree};
use crate::field::{read_array, read_u64, write_u64};
use crate::Result;

/// Byte offsets of ServiceEntries.
pub mod field {
    pub const ENTRY_LEN: usize = 48;
    pub const NAME_LEN: usize = 40;
    /// The service ID within an entry.
    pub const ID: usize = 40;
    pub const ENTRIES: usize = 4;
    pub const LEN: usize = 192;
}

/// The service name prefix of SRP (`SRP_SERVICE_NAME_PREFIX`).
pub const SRP_SERVICE_NAME_PREFIX: &str = "SRP.T10:";

/// The attribute modifier of a ServiceEntries query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct ServiceEntriesModifier {
    /// 1-based IOC slot (ib_srpt reads 16 bits).
    pub slot: u16,
    /// Last entry of the range.
    pub hi: u8,
    /// First entry of the range.
    pub lo: u8,
}

impl ServiceEntriesModifier {
    pub fn from_attr_mod(m: u32) -> ServiceEntriesModifier {
        ServiceEntriesModifier {
            slot: (m >> 16) as u16,
            hi: (m >> 8) as u8,
            lo: m as u8,
        }
    }

    pub fn to_attr_mod(self) -> u32 {
        u32::from(self.slot) << 16 | u32::from(self.hi) << 8 | u32::from(self.lo)
    }

    /// Whether the range is well formed: `lo <= hi`, at most four entries.
    pub fn is_valid_range(&self) -> bool {
        self.lo <= self.hi && self.hi - self.lo < 4
    }
}

/// One service entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServiceEntry {
    /// ServiceName, NUL padded.
    pub name: [u8; 40],
    pub id: u64,
}

impl Default for ServiceEntry {
    fn default() -> ServiceEntry {
        ServiceEntry {
            name: [0; 40],
            id: 0,
        }
    }
}

impl ServiceEntry {
    /// The entry ib_srpt returns for its IOC: `SRP.T10:<16 hex digits of guid>`, ID = guid.
    pub fn srp(ioc_guid: u64) -> ServiceEntry {
        let mut e = ServiceEntry {
            id: ioc_guid,
            ..ServiceEntry::default()
        };
        e.set_name(&format!("{SRP_SERVICE_NAME_PREFIX}{ioc_guid:016x}"));
        e
    }

    /// The name up to its first NUL.
    pub fn name_str(&self) -> String {
        super::nul_str(&self.name)
    }

    /// Sets the name, truncated to 39 bytes (it stays NUL-terminated, as `snprintf` leaves it).
    pub fn set_name(&mut self, s: &str) {
        super::set_nul_str(&mut self.name, s);
    }

    /// Whether the entry is empty (all zero).
    pub fn is_empty(&self) -> bool {
        self.id == 0 && self.name.iter().all(|&c| c == 0)
    }
}

fixed_view! {
    /// A view of ServiceEntries.
    struct Packet(field::LEN, "dm.service_entries");
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Entry `i` (0..4).
    pub fn entry(&self, i: usize) -> Option<ServiceEntry> {
        if i >= field::ENTRIES {
            return None;
        }
        let off = i * field::ENTRY_LEN;
        let b = self.buffer.as_ref();
        Some(ServiceEntry {
            name: read_array(b, off),
            id: read_u64(b, off + field::ID),
        })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_entry(&mut self, i: usize, e: &ServiceEntry) {
        if i >= field::ENTRIES {
            return;
        }
        let off = i * field::ENTRY_LEN;
        let b = self.buffer.as_mut();
        b[off..off + field::NAME_LEN].copy_from_slice(&e.name);
        write_u64(b, off + field::ID, e.id);
    }
}

/// ServiceEntries: always four slots on the wire; unused ones are zero.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Repr {
    pub entries: [ServiceEntry; 4],
}

impl Repr {
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        let p = Packet::new_checked(buf)?;
        let mut entries = [ServiceEntry::default(); 4];
        for (i, e) in entries.iter_mut().enumerate() {
            if let Some(x) = p.entry(i) {
                *e = x;
            }
        }
        Ok(Repr { entries })
    }

    pub fn buffer_len(&self) -> usize {
        field::LEN
    }

    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(
            buf.len(),
            field::LEN,
            "dm.service_entries: emit buffer length"
        );
        let mut p = Packet::new_unchecked(buf);
        for (i, e) in self.entries.iter().enumerate() {
            p.set_entry(i, e);
        }
    }

    to_bytes!();
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.list("dm_service_entries", "ServiceEntries", |t| {
            for (i, e) in self.entries.iter().enumerate() {
                if e.is_empty() {
                    continue;
                }
                t.subtree("entry", format!("ServiceEntry {i}"), |t| {
                    t.text("name", "ServiceName", e.name_str());
                    t.hex("id", "ServiceID", e.id, 16);
                });
            }
        });
    }
}
