//! IB MTUs and how a RoCE device derives its active MTU from its network interface's MTU.
//!
//! rxe does it in `rxe_set_mtu` (drivers/infiniband/sw/rxe/rxe.c): `eth_mtu_int_to_enum`
//! (rxe_param.h) subtracts `RXE_MAX_HDR_LENGTH` (80 bytes, rxe_hdr.h: the largest header
//! stack it may put in front of the payload) and rounds down to an IB MTU; a result below 256
//! becomes 256; the result is capped at the port's max MTU (4096). So a 1500-byte netdev
//! gives 1420 → IB MTU 1024, which is what the lab's captures show (path MTU 3 in the REQ).

use core::fmt;

/// `RXE_MAX_HDR_LENGTH` (rxe_hdr.h): the header allowance rxe subtracts from the netdev MTU.
pub const RXE_MAX_HDR_LENGTH: u32 = 80;

/// An IB MTU, with the enum values of `enum ib_mtu` (include/rdma/ib_verbs.h) and IBTA
/// (the values that travel in the CM REQ's path MTU field).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
pub enum Mtu {
    /// 256 bytes (`IB_MTU_256` = 1).
    Mtu256 = 1,
    /// 512 bytes (`IB_MTU_512` = 2).
    Mtu512 = 2,
    /// 1024 bytes (`IB_MTU_1024` = 3).
    Mtu1024 = 3,
    /// 2048 bytes (`IB_MTU_2048` = 4).
    Mtu2048 = 4,
    /// 4096 bytes (`IB_MTU_4096` = 5).
    Mtu4096 = 5,
}

impl Mtu {
    /// All MTUs, smallest first.
    pub const ALL: [Mtu; 5] = [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ];

    /// The MTU from its enum value (1..=5); `None` for anything else.
    pub const fn from_enum(v: u8) -> Option<Mtu> {
        match v {
            1 => Some(Mtu::Mtu256),
            2 => Some(Mtu::Mtu512),
            3 => Some(Mtu::Mtu1024),
            4 => Some(Mtu::Mtu2048),
            5 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }

    /// The enum value (1..=5).
    pub const fn to_enum(self) -> u8 {
        self as u8
    }

    /// The MTU in bytes (`ib_mtu_enum_to_int`).
    pub const fn bytes(self) -> u32 {
        256 << (self as u32 - 1)
    }

    /// The largest IB MTU not above `bytes` (`ib_mtu_int_to_enum`: below 512 it is 256).
    pub const fn from_bytes_floor(bytes: u32) -> Mtu {
        if bytes >= 4096 {
            Mtu::Mtu4096
        } else if bytes >= 2048 {
            Mtu::Mtu2048
        } else if bytes >= 1024 {
            Mtu::Mtu1024
        } else if bytes >= 512 {
            Mtu::Mtu512
        } else {
            Mtu::Mtu256
        }
    }

    /// The active MTU of a RoCE port on a netdev of MTU `netdev_mtu`, capped at `max`
    /// (`rxe_set_mtu`: `eth_mtu_int_to_enum(ndev_mtu)`, 0 → 256, `min(mtu, max)`).
    pub fn from_netdev_mtu(netdev_mtu: u32, max: Mtu) -> Mtu {
        let payload = netdev_mtu.saturating_sub(RXE_MAX_HDR_LENGTH);
        // rxe_mtu_int_to_enum returns 0 below 256, which rxe_set_mtu turns into 256:
        // from_bytes_floor already gives 256 there.
        Mtu::from_bytes_floor(payload).min(max)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netdev_1500_gives_1024() {
        // The lab: virtio NIC with MTU 1500, REQ path MTU 3 (1024).
        assert_eq!(Mtu::from_netdev_mtu(1500, Mtu::Mtu4096), Mtu::Mtu1024);
        assert_eq!(Mtu::from_netdev_mtu(1500, Mtu::Mtu4096).to_enum(), 3);
    }

    #[test]
    fn netdev_mtu_table() {
        let cases = [
            (0, Mtu::Mtu256),
            (300, Mtu::Mtu256),
            (591, Mtu::Mtu256),
            (592, Mtu::Mtu512),
            (1103, Mtu::Mtu512),
            (1104, Mtu::Mtu1024),
            (2127, Mtu::Mtu1024),
            (2128, Mtu::Mtu2048),
            (4175, Mtu::Mtu2048),
            (4176, Mtu::Mtu4096),
            (9000, Mtu::Mtu4096),
            // Loopback's 65536 is capped at the port max.
            (65536, Mtu::Mtu4096),
        ];
        for (netdev, want) in cases {
            assert_eq!(
                Mtu::from_netdev_mtu(netdev, Mtu::Mtu4096),
                want,
                "netdev mtu {netdev}"
            );
        }
        assert_eq!(Mtu::from_netdev_mtu(9000, Mtu::Mtu2048), Mtu::Mtu2048);
    }

    #[test]
    fn enum_round_trip() {
        for m in Mtu::ALL {
            assert_eq!(Mtu::from_enum(m.to_enum()), Some(m));
            assert_eq!(Mtu::from_bytes_floor(m.bytes()), m);
        }
        assert_eq!(Mtu::from_enum(0), None);
        assert_eq!(Mtu::from_enum(6), None);
        assert_eq!(Mtu::Mtu1024.bytes(), 1024);
        assert_eq!(Mtu::Mtu4096.to_string(), "4096");
    }
}
