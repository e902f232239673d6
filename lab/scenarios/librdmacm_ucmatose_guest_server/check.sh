# librdmacm_ucmatose_guest_server (Debian's ucmatose over softrdma's librdmacm; otherwise as ucmatose_guest_server): `softrdma ucmatose -s 10.77.0.10 -c 4 -C 10 -S 100` against the
# guest kernel's ucmatose server: both exit 0 and print exactly what v44's cmatose.c prints;
# our 4 REQs carry cmatose's connection parameters; per connection REQ REP RTU, 10 SENDs of
# 100 bytes each way (the server's first), the server's DREQ, our DREP; every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
expect "client (softrdma ucmatose) exit 0" rc_is share/host-client.rc 0
expect "client stdout is v44's, line for line" out_is share/host-client.txt "${UCM_CLIENT_OK[@]}"
expect "server (guest ucmatose) exited by itself" [ "$(cat share/guest-server.end 2>/dev/null)" = exited ]
expect "server exit 0" rc_is share/guest-server.rc 0
expect "server stdout is v44's, line for line" out_is share/guest-server.txt "${UCM_SERVER_OK[@]}"
expect "server stderr empty" [ -f share/guest-server.err -a ! -s share/guest-server.err ]
ucm_wire 10.77.0.10 10.77.0.1 4 10 100
expect "our 4 REQs as cmatose's rdma_connect: port 7471 (service ID 0x1061d2f), responder resources 1, initiator depth 1, retry count 5, RNR retry 0" \
  [ "$(cm_count REQ 10.77.0.1 'infiniband.cm.req.serviceid == 0x1061d2f && infiniband.cm.req.responderres == 1 && infiniband.cm.req.initdepth == 1 && infiniband.cm.req.retrcount == 5 && infiniband.cm.req.rnrretrcount == 0')" = 4 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
finish
