# rej_no_listener: the guest's rping REQ targets a port nobody listens on while our IB CM owns
# 10.77.0.1:4791. The IB CM must answer REJ reason 8 (invalid service ID) with local comm ID 0
# and "message rejected: REQ" (like cm_match_req failing in the kernel), and the guest's rping
# must fail at once with RDMA_CM_EVENT_REJECTED, status 8.
. "$LABDIR/scenarios/checklib.sh"
expect "client (guest rping) exit non-zero, not the 30 s timeout" [ -f share/client.rc -a "$(cat share/client.rc 2>/dev/null)" != 0 -a "$(cat share/client.rc 2>/dev/null)" != 124 ]
expect "client failed within 5 s ($(cat share/client.secs 2>/dev/null)s)" [ "$(cat share/client.secs 2>/dev/null || echo 99)" -le 5 ]
expect "client saw RDMA_CM_EVENT_REJECTED, error 8" has share/rping-client.txt 'RDMA_CM_EVENT_REJECTED, error 8$'
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
expect "CM sequence REQ REJ" [ "$attrs" = "REQ REJ " ]
expect "our REJ: reason 8, local comm ID 0, message rejected REQ" \
  [ "$(count_frames 'ip.src == 10.77.0.1 && infiniband.cm.rej.reason == 8 && infiniband.cm.rej.localcommid == 0 && infiniband.cm.rej.msgrej == 0')" = 1 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
expect "softrdma decode reads our REJ (reason 8)" has softrdma-decode.txt 'Reason: invalid service ID \(0x0008\)'
finish
