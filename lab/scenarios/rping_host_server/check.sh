# rping_host_server: the guest kernel's rping client against `softrdma rping -s`: both exit
# 0, the same 3 ping lines on both sides, the CM exchange REQ REP RTU ... DREQ DREP, the RC
# data traffic, and every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
rping_check "guest rping" "softrdma rping"
finish
