# guest A (kernel rxe): ibv_rc_pingpong client of the host's server, then the server for the host's client
. ./lib.sh; . ./dv.env
dv_client guest 1 $HOST_IP
dv_server guest 2
stamp done
