# librdmacm_ucmatose_guest_server (Debian's ucmatose over softrdma's librdmacm; otherwise as ucmatose_guest_server): `softrdma ucmatose -s 10.77.0.10 -c 4 -C 10 -S 100` against the
# guest kernel's ucmatose server: both exit 0 and print exactly what v44's cmatose.c prints;
# our 4 REQs carry cmatose's connection parameters; per connection REQ REP RTU, 10 SENDs of
# 100 bytes each way (the server's first), the server's DREQ, our DREP; every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
ucmatose_guest_server_check "Debian ucmatose over softrdma"
finish
