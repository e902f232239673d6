# ibv_rc_pingpong server on guest A, RoCEv2/IPv6 (GID index 2 = fd77::10)
. ./lib.sh; . ./pp.env
for i in 0 1 2; do echo "gid $i $(cat /sys/class/infiniband/rxe0/ports/1/gids/$i)"; done
pp_server guest
stamp done
