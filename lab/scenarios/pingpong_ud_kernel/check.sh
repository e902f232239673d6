# kernel <-> kernel ibv_ud_pingpong (A server, B client), size 984 (= MTU 1024 - 40 GRH)
. "$LABDIR/scenarios/checklib.sh"
. "$SCEN/pp.env"
pp_check
finish
