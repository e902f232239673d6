# ipv6_rping: rping between two kernels over RoCEv2 with IPv6 GIDs (fd77::10 <- fd77::11):
# the CM exchange and the RC data run in IPv6/UDP 4791, and every ICRC verifies with the IPv6
# masks (traffic class, flow label, hop limit).
. "$LABDIR/scenarios/checklib.sh"
expect "client exit 0" rc_is share/client.rc 0
expect "client printed 3 pings" has share/rping-client.txt '^ping data: rdma-ping-[0-9]+: ' 3
expect "server printed 3 pings" has share/rping-server.txt '^server ping data: rdma-ping-[0-9]+: ' 3
expect "A has the GID fd77::10" has share/A.out '^gid [0-9]+ fd77:0000:0000:0000:0000:0000:0000:0010'
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
expect "CM sequence REQ REP RTU DREQ DREP" [ "$attrs" = "REQ REP RTU DREQ DREP " ]
v6=$(count_frames 'ipv6 && udp.dstport == 4791'); v4=$(count_frames 'ip && udp.dstport == 4791')
echo "RoCEv2 frames: IPv6 $v6, IPv4 $v4"
expect "RoCEv2 over IPv6 carried the run (>= 20 frames)" [ "$v6" -ge 20 ]
expect "no RoCEv2 frame went over IPv4" [ "$v4" = 0 ]
gids=$(tshark -r capture.pcap -Y 'infiniband.mad.attributeid == 0x0010' -T fields -e infiniband.cm.req.prim_localgid -e infiniband.cm.req.prim_remotegid 2>/dev/null | head -1)
echo "REQ primary path GIDs: $gids"
expect "REQ carries the IPv6 GIDs fd77::11 -> fd77::10" [ "$gids" = "$(printf 'fd77::11\tfd77::10')" ]
expect "ICRC of every RoCEv2/IPv6 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
finish
