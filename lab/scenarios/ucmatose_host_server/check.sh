# ucmatose_host_server: the guest kernel's ucmatose client (-c 4 -C 10 -S 100) against
# `softrdma ucmatose` on the host: both exit 0 and print exactly what v44's cmatose.c prints;
# per connection REQ REP RTU, 10 SENDs of 100 bytes each way (ours first), our DREQ after the
# last SEND, the client's DREP; every ICRC right; `softrdma decode` reads it all.
. "$LABDIR/scenarios/checklib.sh"
ucmatose_host_server_check "softrdma ucmatose"
finish
