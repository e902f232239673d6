//! Segmentation by path MTU: how many packets a message takes and which RC opcode each
//! packet of it carries (IBTA 9.4; rxe `next_opcode_rc`).

use softrdma_wire::roce::Opcode;

use crate::verbs::SendOp;

/// Packets a message of `len` bytes takes at `mtu` (a zero-length message takes one).
pub fn packets(len: u32, mtu: u32) -> u32 {
    if len == 0 || mtu == 0 {
        1
    } else {
        len.div_ceil(mtu)
    }
}

/// The opcode of packet `index` of `count` of a SEND or WRITE message.
pub fn request_opcode(op: &SendOp, index: u32, count: u32) -> Opcode {
    let first = index == 0;
    let last = index + 1 >= count;
    match op {
        SendOp::Send => match (first, last) {
            (true, true) => Opcode::RC_SEND_ONLY,
            (true, false) => Opcode::RC_SEND_FIRST,
            (false, false) => Opcode::RC_SEND_MIDDLE,
            (false, true) => Opcode::RC_SEND_LAST,
        },
        SendOp::SendWithImm { .. } => match (first, last) {
            (true, true) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            (true, false) => Opcode::RC_SEND_FIRST,
            (false, false) => Opcode::RC_SEND_MIDDLE,
            (false, true) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        },
        SendOp::SendWithInv { .. } => match (first, last) {
            (true, true) => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
            (true, false) => Opcode::RC_SEND_FIRST,
            (false, false) => Opcode::RC_SEND_MIDDLE,
            (false, true) => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
        },
        SendOp::RdmaWrite { .. } => match (first, last) {
            (true, true) => Opcode::RC_RDMA_WRITE_ONLY,
            (true, false) => Opcode::RC_RDMA_WRITE_FIRST,
            (false, false) => Opcode::RC_RDMA_WRITE_MIDDLE,
            (false, true) => Opcode::RC_RDMA_WRITE_LAST,
        },
        SendOp::RdmaWriteWithImm { .. } => match (first, last) {
            (true, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            (true, false) => Opcode::RC_RDMA_WRITE_FIRST,
            (false, false) => Opcode::RC_RDMA_WRITE_MIDDLE,
            (false, true) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        },
        SendOp::RdmaRead { .. } => Opcode::RC_RDMA_READ_REQUEST,
        SendOp::AtomicCmpSwp { .. } => Opcode::RC_COMPARE_SWAP,
        SendOp::AtomicFetchAdd { .. } => Opcode::RC_FETCH_ADD,
    }
}

/// The opcode of READ response packet `index` of `count`.
pub fn read_response_opcode(index: u32, count: u32) -> Opcode {
    match (index == 0, index + 1 >= count) {
        (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segmentation() {
        assert_eq!(packets(0, 1024), 1);
        assert_eq!(packets(1024, 1024), 1);
        assert_eq!(packets(1025, 1024), 2);
        assert_eq!(packets(8192, 1024), 8);
        // g_pingpong: 8 KiB SEND = FIRST, 6 × MIDDLE, LAST.
        let ops: Vec<u8> = (0..8)
            .map(|i| request_opcode(&SendOp::Send, i, 8).0)
            .collect();
        assert_eq!(ops, [0, 1, 1, 1, 1, 1, 1, 2]);
        // g_tools: 3000-byte READ = response FIRST, MIDDLE, LAST.
        let r: Vec<u8> = (0..3).map(|i| read_response_opcode(i, 3).0).collect();
        assert_eq!(r, [13, 14, 15]);
        assert_eq!(
            read_response_opcode(0, 1),
            Opcode::RC_RDMA_READ_RESPONSE_ONLY
        );
    }
}
