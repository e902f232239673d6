# ucmatose_options_guest_server: `softrdma ucmatose -t 0x48 -a 14` against the kernel's
# ucmatose server (-a 16): the ucmatose_guest_server run, and our REQs as the kernel's
# (ucmatose_options_host_server): primary traffic class 0x48, local ACK timeout 16 (packet
# lifetime 14 − 1), sent with IP TOS 0x48 like all our MADs of the connection and all our RC
# packets; the kernel's QPs take the REQ's traffic class: its SENDs and ACKs carry 0x48 too.
. "$LABDIR/scenarios/checklib.sh"
expect "client (softrdma ucmatose) exit 0" rc_is share/host-client.rc 0
expect "client stdout is v44's, line for line" out_is share/host-client.txt "${UCM_CLIENT_OK[@]}"
expect "server (guest ucmatose) exited by itself" [ "$(cat share/guest-server.end 2>/dev/null)" = exited ]
expect "server exit 0" rc_is share/guest-server.rc 0
expect "server stdout is v44's, line for line" out_is share/guest-server.txt "${UCM_SERVER_OK[@]}"
expect "server stderr empty" [ -f share/guest-server.err -a ! -s share/guest-server.err ]
ucm_wire 10.77.0.10 10.77.0.1 2 10 100
expect "our 2 REQs: primary traffic class 0x48, local ACK timeout 16, cmatose's parameters" \
  [ "$(cm_count REQ 10.77.0.1 'infiniband.cm.req.prim_tfcclass == 0x48 && infiniband.cm.req.prim_localacktout == 16 && infiniband.cm.req.serviceid == 0x1061d2f && infiniband.cm.req.retrcount == 5 && infiniband.cm.req.rnrretrcount == 0')" = 2 ]
_m=$(count_frames 'ip.src == 10.77.0.1 && infiniband.bth.destqp == 1')
_m48=$(count_frames 'ip.src == 10.77.0.1 && infiniband.bth.destqp == 1 && ip.dsfield == 0x48')
expect "our MADs (REQ, RTU, DREP) all with IP TOS 0x48, as the kernel's ($_m48 of $_m)" [ "$_m" -gt 0 -a "$_m48" = "$_m" ]
_h=$(count_frames 'ip.src == 10.77.0.1 && infiniband.bth.opcode <= 17 && infiniband.bth.destqp != 1')
_h48=$(count_frames 'ip.src == 10.77.0.1 && infiniband.bth.opcode <= 17 && infiniband.bth.destqp != 1 && ip.dsfield == 0x48')
expect "our RC packets all with TOS 0x48 ($_h48 of $_h)" [ "$_h" -gt 0 -a "$_h48" = "$_h" ]
_g=$(count_frames 'ip.src == 10.77.0.10 && infiniband.bth.opcode <= 17 && infiniband.bth.destqp != 1')
_g48=$(count_frames 'ip.src == 10.77.0.10 && infiniband.bth.opcode <= 17 && infiniband.bth.destqp != 1 && ip.dsfield == 0x48')
expect "the kernel's RC packets all with TOS 0x48 ($_g48 of $_g)" [ "$_g" -gt 0 -a "$_g48" = "$_g" ]
echo "the kernel's MADs' IP TOS: $(tshark -r capture.pcap -Y 'ip.src == 10.77.0.10 && infiniband.bth.destqp == 1' -T fields -e ip.dsfield 2>/dev/null | sort | uniq -c | tr '\n' ' ')"
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
finish
