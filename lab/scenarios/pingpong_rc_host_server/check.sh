# softrdma pingpong rc server on the host <- ibv_rc_pingpong client in guest A
. "$LABDIR/scenarios/checklib.sh"
. "$SCEN/pp.env"
pp_check
finish
