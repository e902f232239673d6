# librdmacm_rping_guest_server: Debian's rping -c over softrdma's librdmacm against the guest
# kernel's rping -s: both exit
# 0, the same 3 ping lines on both sides, the CM exchange REQ REP RTU ... DREQ DREP, the RC
# data traffic, and every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
rping_check "Debian rping over softrdma" "guest rping"
finish
