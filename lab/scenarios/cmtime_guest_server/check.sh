# cmtime_guest_server: `softrdma cmtime -s 10.77.0.10 -b 10.77.0.1 -c 200` against the guest
# kernel's cmtime server: our client exits 0, prints v44's progress lines and step table (with
# the bind row) and no error line; the guest server was still serving when stopped; at least
# 200 REQ RTU DREQ (ours) and REP DREP (the kernel's), 200 distinct connections, no REJ; our
# REQs carry cmtime's parameters; every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
cmtime_guest_server_check "softrdma cmtime"
finish
