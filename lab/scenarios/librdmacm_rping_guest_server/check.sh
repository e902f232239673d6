# librdmacm_rping_guest_server: Debian's rping -c over softrdma's librdmacm against the guest
# kernel's rping -s: both exit
# 0, the same 3 ping lines on both sides, the CM exchange REQ REP RTU ... DREQ DREP, the RC
# data traffic, and every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
expect "client (Debian rping over softrdma) exit 0" rc_is share/client.rc 0
expect "server (guest rping) exit 0" rc_is share/server.rc 0
expect "client printed 3 pings" has share/rping-client.txt '^ping data: rdma-ping-[0-9]+: ' 3
expect "server printed 3 pings" has share/rping-server.txt '^server ping data: rdma-ping-[0-9]+: ' 3
_c=$(grep -E '^ping data: ' share/rping-client.txt 2>/dev/null | sed 's/^ping data: //')
_s=$(grep -E '^server ping data: ' share/rping-server.txt 2>/dev/null | sed 's/^server ping data: //')
expect "ping data lines match on both sides" [ -n "$_c" -a "$_c" = "$_s" ]
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
expect "CM sequence REQ REP RTU DREQ DREP" [ "$attrs" = "REQ REP RTU DREQ DREP " ]
expect "RC data packets (RDMA READ/WRITE, SEND, ACK)" [ "$(count_frames 'infiniband.bth.opcode < 0x20')" -ge 12 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
finish
