# rping_guest_server: `softrdma rping -c` against the guest kernel's rping -s: both exit
# 0, the same 3 ping lines on both sides, the CM exchange REQ REP RTU ... DREQ DREP, the RC
# data traffic, and every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
rping_check "softrdma rping" "guest rping"
finish
