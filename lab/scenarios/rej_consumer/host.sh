# `softrdma rping -s -a 10.77.0.1 -p 7474 --reject` on the host: the RDMA CM gets the guest's
# CONNECT_REQUEST and answers rdma_reject with private data "softrdma-reject" (REJ reason 28).
. ./lib.sh
stamp "softrdma rping server --reject"
timeout 40 "$SOFTRDMA" rping -s -a $HOST_IP -p 7474 -C 1 -v --reject > rping-server.txt 2>&1 &
P=$!; sleep 1; touch host.ready
wait_flag A.done 45
# --reject never accepts: stop it
kill $P 2>/dev/null; wait $P; echo $? > server.rc
cat rping-server.txt; echo "server rc=$(cat server.rc)"; stamp done
