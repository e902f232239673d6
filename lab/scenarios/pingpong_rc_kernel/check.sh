# kernel <-> kernel ibv_rc_pingpong (A server, B client), sizes 8, 4096, 65536: validates the pingpong mechanics
. "$LABDIR/scenarios/checklib.sh"
. "$SCEN/pp.env"
pp_check
finish
