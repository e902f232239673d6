//! RTU — Ready To Use (IBTA Vol 1 table 111; kernel `CM_RTU_*`).
//!
//! ```text
//! off  field
//!   0  Local Communication ID (32)
//!   4  Remote Communication ID (32)
//!   8  Private Data (224 bytes)
//! ```

use super::{bit_accessors, fixed_view, pad, CM_DATA_LEN, RTU_PRIVATE_DATA_LEN};
use crate::dissect::{Dissect, Tree};
use crate::field::{self, Bits, Field};
use crate::Result;

/// Field locations, bytes from the start of the CM data.
pub mod fields {
    use super::{Bits, Field};
    pub const LOCAL_COMM_ID: Bits = Bits::new(0, 0, 32);
    pub const REMOTE_COMM_ID: Bits = Bits::new(4, 0, 32);
    pub const PRIVATE_DATA: Field = 8..232;
}

fixed_view! {
    /// A view of a RTU (the 232 bytes of MAD data).
    struct Packet(CM_DATA_LEN, "cm.rtu");
}

bit_accessors! {
    local_comm_id / set_local_comm_id: u32 = fields::LOCAL_COMM_ID;
    remote_comm_id / set_remote_comm_id: u32 = fields::REMOTE_COMM_ID;
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The whole 224-byte private data field.
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[fields::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[fields::PRIVATE_DATA]
    }
}

/// A decoded RTU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; RTU_PRIVATE_DATA_LEN],
}

impl Repr {
    /// Reads a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        Repr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            private_data: field::read_array(p.buffer.as_ref(), fields::PRIVATE_DATA.start),
        }
    }

    /// Parses the CM data of a RTU (at least 232 bytes).
    pub fn parse(buf: &[u8]) -> Result<Repr> {
        Ok(Repr::from_packet(&Packet::new_checked(buf)?))
    }

    /// Always 232.
    pub const fn buffer_len(&self) -> usize {
        CM_DATA_LEN
    }

    /// Writes the RTU into `buf` (exactly 232 bytes); reserved bits are zero.
    pub fn emit(&self, buf: &mut [u8]) {
        assert_eq!(buf.len(), CM_DATA_LEN, "cm.rtu: wrong buffer length");
        buf.fill(0);
        let mut p = Packet::new_unchecked(buf);
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.private_data_mut().copy_from_slice(&self.private_data);
    }

    /// The RTU as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; CM_DATA_LEN];
        self.emit(&mut v);
        v
    }

    /// A RTU with every field zero but the private data (filled from `pd`, zero-padded).
    pub fn with_private_data(pd: &[u8]) -> Repr {
        Repr {
            local_comm_id: 0,
            remote_comm_id: 0,
            private_data: pad(pd),
        }
    }
}

impl Default for Repr {
    fn default() -> Repr {
        Repr::with_private_data(&[])
    }
}

impl Dissect for Repr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("cm_rtu", "CM ReadyToUse", |t| {
            t.hex(
                "local_comm_id",
                "Local Communication ID",
                self.local_comm_id,
                8,
            );
            t.hex(
                "remote_comm_id",
                "Remote Communication ID",
                self.remote_comm_id,
                8,
            );
            t.bytes("private_data", "PrivateData", &self.private_data);
        });
    }
}
