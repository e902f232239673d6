# kernel_rping: two kernels complete rping -C 3, and the CM exchange is the full
# REQ/REP/RTU ... DREQ/DREP sequence on the wire. Then our own decoder reads the capture.
. "$LABDIR/scenarios/checklib.sh"
expect "client exit 0" rc_is share/client.rc 0
expect "client printed 3 pings" has share/rping-client.txt '^ping data: rdma-ping-[0-9]+: ' 3
expect "server printed 3 pings" has share/rping-server.txt '^server ping data: rdma-ping-[0-9]+: ' 3
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
expect "CM sequence REQ REP RTU DREQ DREP" [ "$attrs" = "REQ REP RTU DREQ DREP " ]
expect "RC data packets (RDMA READ/WRITE, SEND, ACK)" [ "$(count_frames 'infiniband.bth.opcode < 0x20')" -ge 12 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
finish
