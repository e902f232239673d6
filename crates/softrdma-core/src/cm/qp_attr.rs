//! `ib_cm_init_qp_attr`: the QP attributes for INIT, RTR and RTS from what the CM
//! negotiated (`cm_init_qp_init_attr`, `cm_init_qp_rtr_attr`, `cm_init_qp_rts_attr`).

use softrdma_wire::cm::TransportType;

use super::{CmEndpoint, CmError, CmId, CmState};
use crate::device::{Mtu, PORT_NUM};
use crate::verbs::{
    required_mask, AccessFlags, AddressVector, QpAttr, QpAttrMask, QpState, QpType,
};

impl CmEndpoint {
    /// `ib_cm_init_qp_attr`: the attributes and mask for moving the QP to `target`.
    /// - INIT (from REQ_SENT to ESTABLISHED): remote write, plus remote read and atomic
    ///   when we have responder resources — nothing else (no local write);
    /// - RTR (from REQ_RCVD to ESTABLISHED, not before the REP on the active side): the
    ///   path, MTU, the peer's QPN, our RQ's PSN; RC adds the responder resources and an
    ///   RNR timer of 0;
    /// - RTS (same states): our SQ's PSN; RC adds the retry and RNR retry counts (the
    ///   active side's RNR retry count is the REP's, the passive side's the REQ's), the
    ///   initiator depth and the ACK timeout (`av.timeout`).
    pub fn init_qp_attr(
        &self,
        id: &CmId,
        target: QpState,
    ) -> Result<(QpAttr, QpAttrMask), CmError> {
        use CmState as S;
        let c = self.conn(id)?;
        let st = c.state.kind();
        let n = &c.neg;
        let rc = n.qp_type == TransportType::RC;
        // The masks are the verbs table's required attributes for each step (what
        // cm_init_qp_*_attr set by hand in the kernel comes to the same).
        let ty = if rc { QpType::Rc } else { QpType::Uc };
        let connected = matches!(
            st,
            S::ReqRcvd
                | S::MraReqSent
                | S::RepRcvd
                | S::MraRepSent
                | S::RepSent
                | S::MraRepRcvd
                | S::Established
        );
        let mut a = QpAttr {
            qp_state: target,
            ..QpAttr::default()
        };
        match target {
            QpState::Init if connected || matches!(st, S::ReqSent | S::MraReqRcvd) => {
                let mut f = AccessFlags::REMOTE_WRITE.0;
                if n.responder_resources > 0 {
                    f |= AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_ATOMIC.0;
                }
                a.qp_access_flags = AccessFlags(f);
                a.pkey_index = 0;
                a.port_num = PORT_NUM;
                Ok((a, required_mask(QpState::Reset, QpState::Init, ty)))
            }
            QpState::Rtr if connected => {
                a.ah_attr = AddressVector {
                    dgid: n.path.remote_gid,
                    hop_limit: n.path.hop_limit,
                    traffic_class: n.path.traffic_class,
                    flow_label: n.path.flow_label,
                    sl: n.path.sl,
                    port_num: PORT_NUM,
                    ..AddressVector::default()
                };
                a.path_mtu = Mtu::from_enum(n.path_mtu.0).unwrap_or(Mtu::Mtu1024);
                a.dest_qp_num = c.remote_qpn;
                a.rq_psn = n.rq_psn;
                if rc {
                    a.max_dest_rd_atomic = n.responder_resources;
                    a.min_rnr_timer = 0;
                }
                Ok((a, required_mask(QpState::Init, QpState::Rtr, ty)))
            }
            QpState::Rts if connected => {
                a.sq_psn = n.sq_psn;
                if rc {
                    a.retry_cnt = n.retry_count;
                    a.rnr_retry = n.rnr_retry_count;
                    a.max_rd_atomic = n.initiator_depth;
                    a.timeout = n.av_timeout;
                }
                Ok((a, required_mask(QpState::Rtr, QpState::Rts, ty)))
            }
            _ => Err(CmError::InvalidState(st)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::verbs::{required_mask, QpAttrMask as M, QpState as S, QpType};

    /// The table's required masks are the ones cm.c's `cm_init_qp_*_attr` set by hand.
    #[test]
    fn required_masks_are_cm_cs() {
        assert_eq!(
            required_mask(S::Reset, S::Init, QpType::Rc),
            M::STATE | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PORT
        );
        assert_eq!(
            required_mask(S::Init, S::Rtr, QpType::Rc),
            M::STATE
                | M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER
        );
        assert_eq!(
            required_mask(S::Rtr, S::Rts, QpType::Rc),
            M::STATE | M::SQ_PSN | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC | M::TIMEOUT
        );
        assert_eq!(
            required_mask(S::Init, S::Rtr, QpType::Uc),
            M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN
        );
        assert_eq!(
            required_mask(S::Rtr, S::Rts, QpType::Uc),
            M::STATE | M::SQ_PSN
        );
    }
}
