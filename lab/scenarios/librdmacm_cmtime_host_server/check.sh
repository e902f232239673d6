# librdmacm_cmtime_host_server (Debian's cmtime over softrdma's librdmacm; otherwise as cmtime_host_server): the guest kernel's cmtime client (-c 200) against `softrdma cmtime -b
# 10.77.0.1`: the client exits 0, prints v44's progress lines and step table (no bind row: no
# -b) and no error line; our server was still serving when stopped (v44's never exits); at
# least 200 REQ RTU DREQ (client) and REP DREP (ours), 200 distinct connections, no REJ; our
# REPs as rdma_accept(id, NULL); every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
cmtime_host_server_check "Debian cmtime over softrdma"
finish
