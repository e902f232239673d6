# pingpong server on guest A (kernel rxe, rdma-core ibv_rc_pingpong)
. ./lib.sh; . ./pp.env
pp_server guest
stamp done
