# librdmacm_send_bw_host_server: the guest kernel's ib_send_bw -R client against Debian's
# ib_send_bw -R server over softrdma's librdmacm: both exit 0 and print their result line (200 iterations of
# 4096 bytes), the connections went through the RDMA CM (REQ REP RTU), every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
expect "client (guest ib_send_bw) exit 0" rc_is share/client.rc 0
expect "server (Debian ib_send_bw over softrdma) exit 0" rc_is share/server.rc 0
expect "client result line" has share/bw-client.txt '^ 4096 +200 '
expect "server result line" has share/bw-server.txt '^ 4096 +200 '
expect "rdma_cm QPs on both sides" has share/bw-server.txt 'rdma_cm QPs.*ON'
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
expect "RDMA CM connections (REQ REP RTU)" [ "$(echo "$attrs" | grep -c 'REQ REP RTU')" -ge 1 ]
expect "RC SENDs" [ "$(count_frames 'infiniband.bth.opcode <= 0x05')" -ge 200 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
finish
