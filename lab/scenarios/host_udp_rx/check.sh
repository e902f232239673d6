# host_udp_rx: a host program inside the netns, bound to 10.77.0.1:4791, receives the guest
# kernel's RoCEv2 datagrams (a CM REQ: UD SEND only to QP1, MAD attribute 0x0010) -- the path
# every `softrdma` host-side scenario relies on.
. "$LABDIR/scenarios/checklib.sh"
cat share/host-rx.txt 2>/dev/null
expect "the host program received the CM REQ on 10.77.0.1:4791" has share/host-rx.txt 'from 10\.77\.0\.10:[0-9]+ .*opcode 0x64 dest_qp 1 mad_attr 0x0010'
expect "the capture shows the REQ to 10.77.0.1" [ "$(count_frames 'ip.dst == 10.77.0.1 && infiniband.mad.attributeid == 0x0010')" -ge 1 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
finish
