# librdmacm_cmtime_host_server (Debian's cmtime over softrdma's librdmacm; otherwise as cmtime_host_server): the guest kernel's cmtime client (-c 200) against `softrdma cmtime -b
# 10.77.0.1`: the client exits 0, prints v44's progress lines and step table (no bind row: no
# -b) and no error line; our server was still serving when stopped (v44's never exits); at
# least 200 REQ RTU DREQ (client) and REP DREP (ours), 200 distinct connections, no REJ; our
# REPs as rdma_accept(id, NULL); every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
expect "client (guest cmtime) exit 0" rc_is share/guest-client.rc 0
expect "client stdout: progress lines and the step table, every step timed" cmtime_is share/guest-client.txt
expect "client stderr empty" [ -f share/guest-client.err -a ! -s share/guest-client.err ]
expect "server (softrdma cmtime) still running when stopped" [ "$(cat share/host-server.end 2>/dev/null)" = killed ]
# SIGTERM: v44 dies of it (143); a softrdma server may instead stop cleanly (0)
expect "server exit on SIGTERM 0 or 143 ($(cat share/host-server.rc 2>/dev/null))" \
  [ "$(cat share/host-server.rc 2>/dev/null)" = 0 -o "$(cat share/host-server.rc 2>/dev/null)" = 143 ]
expect "server printed no error" [ -f share/host-server.txt -a ! -s share/host-server.txt ]
cmtime_wire 10.77.0.1 10.77.0.10 200
expect "our REPs as rdma_accept(id, NULL): responder resources 1, initiator depth 1, RNR retry 7" \
  [ "$(cm_count REP 10.77.0.1 '!(infiniband.cm.rep.respres == 1 && infiniband.cm.rep.initdepth == 1 && infiniband.cm.rep.rnrretrcount == 7)')" = 0 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
finish
