# librdmacm_ucmatose_host_server (Debian's ucmatose over softrdma's librdmacm; otherwise as ucmatose_host_server): the guest kernel's ucmatose client (-c 4 -C 10 -S 100) against
# `softrdma ucmatose` on the host: both exit 0 and print exactly what v44's cmatose.c prints;
# per connection REQ REP RTU, 10 SENDs of 100 bytes each way (ours first), our DREQ after the
# last SEND, the client's DREP; every ICRC right; `softrdma decode` reads it all.
. "$LABDIR/scenarios/checklib.sh"
expect "client (guest ucmatose) exit 0" rc_is share/guest-client.rc 0
expect "client stdout is v44's, line for line" out_is share/guest-client.txt "${UCM_CLIENT_OK[@]}"
expect "client stderr empty" [ -f share/guest-client.err -a ! -s share/guest-client.err ]
expect "server (softrdma ucmatose) exited by itself" [ "$(cat share/host-server.end 2>/dev/null)" = exited ]
expect "server exit 0" rc_is share/host-server.rc 0
expect "server stdout is v44's, line for line" out_is share/host-server.txt "${UCM_SERVER_OK[@]}"
ucm_wire 10.77.0.1 10.77.0.10 4 10 100
expect "our 4 REPs as librdmacm's rdma_accept(id, NULL): responder resources 1, initiator depth 1, RNR retry 7" \
  [ "$(cm_count REP 10.77.0.1 'infiniband.cm.rep.respres == 1 && infiniband.cm.rep.initdepth == 1 && infiniband.cm.rep.rnrretrcount == 7')" = 4 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
finish
