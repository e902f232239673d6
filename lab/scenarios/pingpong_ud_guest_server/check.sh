# ibv_ud_pingpong server in guest A <- softrdma pingpong ud client on the host
. "$LABDIR/scenarios/checklib.sh"
. "$SCEN/pp.env"
pp_check
finish
