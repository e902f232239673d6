# rping server (kernel rdma_cm + rxe) on guest A <- Debian rping -c over softrdma's librdmacm on the host
. ./lib.sh
stamp "rping server"
rping -s -a $A_IP -v -C 3 > rping-server.txt 2>&1 &
P=$!; sleep 1; touch A.ready
wait_flag host.done 45
_i=0; while kill -0 $P 2>/dev/null && [ $_i -lt 25 ]; do sleep 0.2; _i=$((_i + 1)); done
kill $P 2>/dev/null; wait $P; echo $? > server.rc
cat rping-server.txt; echo "server rc=$(cat server.rc)"; stamp done
