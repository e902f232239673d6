# librdmacm_udaddy_guest_server (Debian's udaddy over softrdma's librdmacm; otherwise as udaddy_guest_server): `softrdma udaddy -s 10.77.0.10 -c 2 -C 10 -S 100` against the guest
# kernel's udaddy server: both exit 0 and print exactly what v44's udaddy.c prints; our SIDR
# REQs (service ID 0x1111c06, the IP header) answered by the kernel's SIDR REPs (status 0,
# Q_Key 0x01234567); our 10 SENDs with immediate per connection go to the QPNs those REPs
# named, the kernel replies to our QPs; every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
expect "client (softrdma udaddy) exit 0" rc_is share/host-client.rc 0
expect "client stdout is v44's, line for line" out_is share/host-client.txt "${UDA_CLIENT_OK[@]}"
expect "server (guest udaddy) exited by itself" [ "$(cat share/guest-server.end 2>/dev/null)" = exited ]
expect "server exit 0" rc_is share/guest-server.rc 0
expect "server stdout is v44's, line for line" out_is share/guest-server.txt "${UDA_SERVER_OK[@]}"
expect "server stderr empty" [ -f share/guest-server.err -a ! -s share/guest-server.err ]
ud_wire 10.77.0.10 10.77.0.1 2 10 100
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
softrdma_decode capture.pcap
finish
