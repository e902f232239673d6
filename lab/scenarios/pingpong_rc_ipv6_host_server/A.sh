# ibv_rc_pingpong client on guest A -> the host, RoCEv2/IPv6 (GID index 2 = fd77::10); the
# side channel goes to the host's IPv4 address
. ./lib.sh; . ./pp.env
for i in 0 1 2; do echo "gid $i $(cat /sys/class/infiniband/rxe0/ports/1/gids/$i)"; done
pp_client guest $HOST_IP
stamp done
