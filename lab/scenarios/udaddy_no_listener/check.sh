# udaddy_no_listener: SIDR REP status 1 (service ID not supported) both ways. Guest -> host:
# our IB CM answers the SIDR REQ for 0x1111c06 (our server listens on RC 7471 only) with
# status 1; v44's client prints `UNREACHABLE, error: 1` and exits 1 at once; our server goes
# on. Host -> guest: the kernel answers our SIDR REQ with status 1; our client prints what
# v44 prints and exits 1.
. "$LABDIR/scenarios/checklib.sh"
expect "guest client exit 1 (v44: the SIDR status)" rc_is share/guest-client.rc 1
expect "guest client stdout is v44's, line for line" out_is share/guest-client.txt "${UDA_CLIENT_UNREACH1[@]}"
expect "guest client failed within 5 s ($(cat share/guest-client.secs 2>/dev/null)s)" [ "$(cat share/guest-client.secs 2>/dev/null || echo 99)" -le 5 ]
expect "our server was still running after the SIDR REQ" [ "$(cat share/host-server.end 2>/dev/null)" = killed ]
expect "our server printed 'cmatose: starting server' first" [ "$(head -1 share/host-server.txt 2>/dev/null)" = "cmatose: starting server" ]
expect "our client exit 1" rc_is share/host-client.rc 1
expect "our client stdout is v44's, line for line" out_is share/host-client.txt "${UDA_CLIENT_UNREACH1[@]}"
expect "our client failed within 5 s ($(cat share/host-client.secs 2>/dev/null)s)" [ "$(cat share/host-client.secs 2>/dev/null || echo 99)" -le 5 ]
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
expect "CM sequence SIDR_REQ SIDR_REP SIDR_REQ SIDR_REP" [ "$attrs" = "SIDR_REQ SIDR_REP SIDR_REQ SIDR_REP " ]
sidr_msgs > sidr.txt; cat sidr.txt
if [ -s sidr.txt ]; then
  expect "both SIDR REQs for service ID 0x1111c06" [ "$(awk '$1 == "REQ" && $3 == "0x0000000001111c06"' sidr.txt | wc -l)" = 2 ]
  expect "our SIDR REP: status 1" [ "$(awk '$1 == "REP" && $2 == "10.77.0.1" && $4 == 1' sidr.txt | wc -l)" = 1 ]
  expect "the kernel's SIDR REP: status 1" [ "$(awk '$1 == "REP" && $2 == "10.77.0.10" && $4 == 1' sidr.txt | wc -l)" = 1 ]
  expect "our SIDR REP as the kernel's (QPN 0, Q_Key 0)" [ "$(awk '$1 == "REP" { print $5, $6 }' sidr.txt | sort -u)" = "0 0x00000000" ]
fi
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
finish
