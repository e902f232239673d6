# rping server (kernel rdma_cm + rxe) on A
. ./lib.sh
stamp "rping server"
rping -s -a $A_IP -v -C 3 > rping-server.txt 2>&1 &
P=$!; sleep 1; touch A.ready
wait_flag B.done 45; sleep 1; kill $P 2>/dev/null; wait $P
cat rping-server.txt; stamp done
