# ibv_rc_pingpong client on guest A -> the host
. ./lib.sh; . ./pp.env
pp_client guest $HOST_IP
stamp done
