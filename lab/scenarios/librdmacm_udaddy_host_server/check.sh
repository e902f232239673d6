# librdmacm_udaddy_host_server (Debian's udaddy over softrdma's librdmacm; otherwise as udaddy_host_server): the guest kernel's udaddy client (-c 2 -C 10 -S 100) against `softrdma
# udaddy` on the host: both exit 0 and print exactly what v44's udaddy.c prints; per
# connection SIDR REQ (service ID 0x1111c06) / SIDR REP (ours: status 0, our QPN, Q_Key
# 0x01234567) and nothing else on the CM; 10 SENDs with immediate of 100 bytes each way, the
# guest's first, to the QPNs our SIDR REPs named and back to the guest's QPs (our reply AH
# from the GRH, the QPN from the immediate); every ICRC right; `softrdma decode` reads it all.
. "$LABDIR/scenarios/checklib.sh"
expect "client (guest udaddy) exit 0" rc_is share/guest-client.rc 0
expect "client stdout is v44's, line for line" out_is share/guest-client.txt "${UDA_CLIENT_OK[@]}"
expect "client stderr empty" [ -f share/guest-client.err -a ! -s share/guest-client.err ]
expect "server (softrdma udaddy) exited by itself" [ "$(cat share/host-server.end 2>/dev/null)" = exited ]
expect "server exit 0" rc_is share/host-server.rc 0
expect "server stdout is v44's, line for line" out_is share/host-server.txt "${UDA_SERVER_OK[@]}"
ud_wire 10.77.0.1 10.77.0.10 2 10 100
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
if [ -s softrdma-decode.txt ]; then
  expect "softrdma decode reads the SIDR REQs and REPs" has softrdma-decode.txt 'CM ServiceIDResReqResp' 2
fi
finish
