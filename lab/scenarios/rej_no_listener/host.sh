# `softrdma rping -s -a 10.77.0.1 -p 7471` on the host: our IB CM owns 10.77.0.1:4791 with a
# listener on port 7471 only. The guest's REQ for port 9999 matches no listener, so the IB CM
# answers REJ reason 8 (invalid service ID, local comm ID 0, message rejected: REQ).
. ./lib.sh
stamp "softrdma rping server on port 7471"
timeout 40 "$SOFTRDMA" rping -s -a $HOST_IP -p 7471 -C 1 -v > rping-server.txt 2>&1 &
P=$!; sleep 1; touch host.ready
wait_flag A.done 45
# the server never gets a connection: stop it
kill $P 2>/dev/null; wait $P; echo $? > server.rc
cat rping-server.txt; echo "server rc=$(cat server.rc)"; stamp done
