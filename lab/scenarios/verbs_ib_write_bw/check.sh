# Debian's ib_write_bw: host (softrdma's libibverbs) <-> guest A (kernel rxe), both directions
. "$LABDIR/scenarios/checklib.sh"
. "$SCEN/dv.env"
dv_check
finish
