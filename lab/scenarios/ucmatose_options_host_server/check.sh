# ucmatose_options_host_server: the kernel's ucmatose client with -t 0x48 (TOS) and -a 14 (ACK
# timeout) against `softrdma ucmatose -a 16`: the run is ucmatose_host_server's (both exit 0,
# v44's lines, REQ REP RTU / SENDs / DREQ DREP); the kernel's REQs say what the options do on
# RoCE — primary traffic class 0x48, packet lifetime 14 − 1 = 13, so a local ACK timeout of
# cm_ack_timeout(15, 13) = 16 — and its MADs and data carry IP TOS 0x48; our QPs take the
# REQ's traffic class: our RC SENDs and ACKs leave with TOS 0x48 too.
. "$LABDIR/scenarios/checklib.sh"
expect "client (guest ucmatose) exit 0" rc_is share/guest-client.rc 0
expect "client stdout is v44's, line for line" out_is share/guest-client.txt "${UCM_CLIENT_OK[@]}"
expect "client stderr empty" [ -f share/guest-client.err -a ! -s share/guest-client.err ]
expect "server (softrdma ucmatose) exited by itself" [ "$(cat share/host-server.end 2>/dev/null)" = exited ]
expect "server exit 0" rc_is share/host-server.rc 0
expect "server stdout is v44's, line for line" out_is share/host-server.txt "${UCM_SERVER_OK[@]}"
ucm_wire 10.77.0.1 10.77.0.10 2 10 100
expect "the kernel's 2 REQs: primary traffic class 0x48, local ACK timeout 16" \
  [ "$(cm_count REQ 10.77.0.10 'infiniband.cm.req.prim_tfcclass == 0x48 && infiniband.cm.req.prim_localacktout == 16')" = 2 ]
expect "the kernel's REQs leave with IP TOS 0x48" [ "$(cm_count REQ 10.77.0.10 'ip.dsfield == 0x48')" = 2 ]
_g=$(count_frames 'ip.src == 10.77.0.10 && infiniband.bth.opcode <= 17 && infiniband.bth.destqp != 1')
_g48=$(count_frames 'ip.src == 10.77.0.10 && infiniband.bth.opcode <= 17 && infiniband.bth.destqp != 1 && ip.dsfield == 0x48')
expect "the kernel's RC packets all with TOS 0x48 ($_g48 of $_g)" [ "$_g" -gt 0 -a "$_g48" = "$_g" ]
_h=$(count_frames 'ip.src == 10.77.0.1 && infiniband.bth.opcode <= 17 && infiniband.bth.destqp != 1')
_h48=$(count_frames 'ip.src == 10.77.0.1 && infiniband.bth.opcode <= 17 && infiniband.bth.destqp != 1 && ip.dsfield == 0x48')
expect "our RC packets (SENDs, ACKs) all with TOS 0x48 ($_h48 of $_h)" [ "$_h" -gt 0 -a "$_h48" = "$_h" ]
echo "our MADs' IP TOS (the kernel copies the REQ's; softrdma cannot read it): $(tshark -r capture.pcap -Y 'ip.src == 10.77.0.1 && infiniband.bth.destqp == 1' -T fields -e ip.dsfield 2>/dev/null | sort | uniq -c | tr '\n' ' ')"
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
finish
