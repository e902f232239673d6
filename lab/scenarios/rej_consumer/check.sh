# rej_consumer: `softrdma rping -s --reject` answers the guest's CONNECT_REQUEST with
# rdma_reject + private data "softrdma-reject": REJ reason 28 (consumer defined) carrying those
# bytes, and the guest's rping fails at once with RDMA_CM_EVENT_REJECTED, status 28.
. "$LABDIR/scenarios/checklib.sh"
expect "client (guest rping) exit non-zero, not the 30 s timeout" [ -f share/client.rc -a "$(cat share/client.rc 2>/dev/null)" != 0 -a "$(cat share/client.rc 2>/dev/null)" != 124 ]
expect "client failed within 5 s ($(cat share/client.secs 2>/dev/null)s)" [ "$(cat share/client.secs 2>/dev/null || echo 99)" -le 5 ]
expect "client saw RDMA_CM_EVENT_REJECTED, error 28" has share/rping-client.txt 'RDMA_CM_EVENT_REJECTED, error 28$'
expect "server rejected the request" has share/rping-server.txt '^rejected connect request'
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
expect "CM sequence REQ REJ" [ "$attrs" = "REQ REJ " ]
expect "our REJ: reason 28, message rejected REQ" \
  [ "$(count_frames 'ip.src == 10.77.0.1 && infiniband.cm.rej.reason == 28 && infiniband.cm.rej.msgrej == 0 && infiniband.cm.rej.localcommid != 0')" = 1 ]
# "softrdma-reject", then zero padding to the REJ's 148 bytes of private data
pd=$(tshark -r capture.pcap -Y 'infiniband.cm.rej.reason == 28' -T fields -e infiniband.cm.rej.private 2>/dev/null | tr -d ':\n')
echo "REJ private data: $pd"
want=$(printf 'softrdma-reject' | od -An -tx1 | tr -d ' \n')
expect "REJ private data starts with \"softrdma-reject\" ($want)" [ "${pd#"$want"}" != "$pd" ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
expect "softrdma decode reads our REJ (reason 28)" has softrdma-decode.txt 'Reason: .*\(0x001c\)'
finish
