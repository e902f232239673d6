# softrdma pingpong ud server on the host <- ibv_ud_pingpong client in guest A
. "$LABDIR/scenarios/checklib.sh"
. "$SCEN/pp.env"
pp_check
finish
