# ibv_rc_pingpong server on guest A
. ./lib.sh; . ./pp.env
pp_server guest
stamp done
