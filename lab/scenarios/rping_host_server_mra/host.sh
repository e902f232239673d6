# `softrdma rping -s --accept-delay 9000` on the host (10.77.0.1): the REQ is left unanswered
# until the kernel retransmits it (~6.4 s), which draws our delayed MRA (service timeout 24);
# then REP. Our IB CM + RDMA CM answer
# the guest kernel's REQ, then the rping loop (RDMA READ / SEND / RDMA WRITE) runs 3 times.
. ./lib.sh
stamp "softrdma rping server"
timeout 40 "$SOFTRDMA" rping -s -a $HOST_IP -C 3 -v --accept-delay 9000 > rping-server.txt 2>&1 &
P=$!; sleep 1; touch host.ready
wait_flag A.done 45
# the server exits by itself after the client's DREQ; give it a moment, then stop it
_i=0; while kill -0 $P 2>/dev/null && [ $_i -lt 25 ]; do sleep 0.2; _i=$((_i + 1)); done
kill $P 2>/dev/null; wait $P; echo $? > server.rc
cat rping-server.txt; echo "server rc=$(cat server.rc)"; stamp done
