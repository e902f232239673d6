# ucmatose_no_listener: REJ reason 8 (invalid service ID) both ways, with ucmatose -p 9999.
# Guest -> host: our IB CM answers the REQ for port 9999 (our server listens on 7471) with REJ 8,
# local comm ID 0, message rejected REQ; v44's client prints the REJECTED line and exits 8 at
# once; our server goes on. Host -> guest: our client's REQ (cmatose's parameters, service ID
# of port 9999) draws the kernel's REJ 8; our client prints what v44 prints and exits 8.
. "$LABDIR/scenarios/checklib.sh"
REJ8='infiniband.cm.rej.reason == 8 && infiniband.cm.rej.localcommid == 0 && infiniband.cm.rej.msgrej == 0'
# 1. guest client -> softrdma (server on 7471)
expect "guest client exit 8 (v44: the REJ status)" rc_is share/guest-client.rc 8
expect "guest client stdout is v44's, line for line" out_is share/guest-client.txt "${UCM_CLIENT_REJ8[@]}"
expect "guest client failed within 5 s ($(cat share/guest-client.secs 2>/dev/null)s)" [ "$(cat share/guest-client.secs 2>/dev/null || echo 99)" -le 5 ]
expect "our server was still running after the stray REQ" [ "$(cat share/host-server.end 2>/dev/null)" = killed ]
expect "our server printed 'cmatose: starting server' first" [ "$(head -1 share/host-server.txt 2>/dev/null)" = "cmatose: starting server" ]
# 2. softrdma client -> guest (nothing listens)
expect "our client exit 8" rc_is share/host-client.rc 8
expect "our client stdout is v44's, line for line" out_is share/host-client.txt "${UCM_CLIENT_REJ8[@]}"
expect "our client failed within 5 s ($(cat share/host-client.secs 2>/dev/null)s)" [ "$(cat share/host-client.secs 2>/dev/null || echo 99)" -le 5 ]
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
expect "CM sequence REQ REJ REQ REJ" [ "$attrs" = "REQ REJ REQ REJ " ]
expect "the guest's REQ asks for port 9999" [ "$(cm_count REQ 10.77.0.10 'infiniband.cm.req.serviceid == 0x106270f')" = 1 ]
expect "our REJ: reason 8, local comm ID 0, message rejected REQ" [ "$(cm_count REJ 10.77.0.1 "$REJ8")" = 1 ]
expect "our REQ: port 9999 (service ID 0x106270f), responder resources 1, initiator depth 1, retry count 5, RNR retry 0" \
  [ "$(cm_count REQ 10.77.0.1 'infiniband.cm.req.serviceid == 0x106270f && infiniband.cm.req.responderres == 1 && infiniband.cm.req.initdepth == 1 && infiniband.cm.req.retrcount == 5 && infiniband.cm.req.rnrretrcount == 0')" = 1 ]
expect "the guest kernel's REJ: reason 8" [ "$(cm_count REJ 10.77.0.10 "$REJ8")" = 1 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
if [ -s softrdma-decode.txt ]; then
  expect "softrdma decode reads both REJs (reason 8)" has softrdma-decode.txt 'Reason: invalid service ID \(0x0008\)' 2
fi
finish
