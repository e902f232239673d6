# librdmacm_udaddy_guest_server (Debian's udaddy over softrdma's librdmacm; otherwise as udaddy_guest_server): `softrdma udaddy -s 10.77.0.10 -c 2 -C 10 -S 100` against the guest
# kernel's udaddy server: both exit 0 and print exactly what v44's udaddy.c prints; our SIDR
# REQs (service ID 0x1111c06, the IP header) answered by the kernel's SIDR REPs (status 0,
# Q_Key 0x01234567); our 10 SENDs with immediate per connection go to the QPNs those REPs
# named, the kernel replies to our QPs; every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
udaddy_guest_server_check "Debian udaddy over softrdma"
finish
