# ibv_rc_pingpong server in guest A <- softrdma pingpong rc client on the host
. "$LABDIR/scenarios/checklib.sh"
. "$SCEN/pp.env"
pp_check
finish
