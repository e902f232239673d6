# librdmacm_rping_host_server: the guest kernel's rping client against Debian's rping -s over
# softrdma's librdmacm: both exit
# 0, the same 3 ping lines on both sides, the CM exchange REQ REP RTU ... DREQ DREP, the RC
# data traffic, and every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
rping_check "guest rping" "Debian rping over softrdma"
finish
