# librdmacm_cmtime_guest_server (Debian's cmtime over softrdma's librdmacm; otherwise as cmtime_guest_server): `softrdma cmtime -s 10.77.0.10 -b 10.77.0.1 -c 200` against the guest
# kernel's cmtime server: our client exits 0, prints v44's progress lines and step table (with
# the bind row) and no error line; the guest server was still serving when stopped; at least
# 200 REQ RTU DREQ (ours) and REP DREP (the kernel's), 200 distinct connections, no REJ; our
# REQs carry cmtime's parameters; every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
expect "client (softrdma cmtime) exit 0" rc_is share/host-client.rc 0
expect "client stdout: progress lines and the step table with bind addr, every step timed" cmtime_is share/host-client.txt bind
expect "server (guest cmtime) still running when stopped" [ "$(cat share/guest-server.end 2>/dev/null)" = killed ]
expect "server died of the SIGTERM (143)" rc_is share/guest-server.rc 143
# v44's server prints only on errors; its stdout is lost when it is killed, stderr (perror) is not
expect "server printed no error (stderr)" [ -f share/guest-server.err -a ! -s share/guest-server.err ]
cmtime_wire 10.77.0.10 10.77.0.1 200
expect "our REQs as cmtime's rdma_connect: port 7471 (service ID 0x1061d2f), responder resources 1, initiator depth 1, retry count 2 (-r default), RNR retry 0" \
  [ "$(cm_count REQ 10.77.0.1 '!(infiniband.cm.req.serviceid == 0x1061d2f && infiniband.cm.req.responderres == 1 && infiniband.cm.req.initdepth == 1 && infiniband.cm.req.retrcount == 2 && infiniband.cm.req.rnrretrcount == 0)')" = 0 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
finish
