# rping server on A over IPv6 (RoCEv2 with IPv6 GIDs): bound to fd77::10
. ./lib.sh
stamp "addresses and GIDs"
/usr/local/bin/ip -6 addr show dev eth0
for i in 0 1 2 3 4; do echo "gid $i $(cat /sys/class/infiniband/rxe0/ports/1/gids/$i) $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i 2>/dev/null)"; done
stamp "rping server -a $A_IP6"
rping -s -a $A_IP6 -v -C 3 > rping-server.txt 2>&1 &
P=$!; sleep 1; touch A.ready
wait_flag B.done 45; sleep 1; kill $P 2>/dev/null; wait $P
cat rping-server.txt; stamp done
