# Debian's unmodified rping -s on the host (inside the netns, 10.77.0.1) over softrdma's
# librdmacm.so.1 + libibverbs.so.1: the guest kernel's rping client connects, 3 pings.
. ./lib.sh
stamp "Debian rping server over softrdma run"
timeout 40 "$SOFTRDMA" run -- rping -s -a $HOST_IP -C 3 -v > rping-server.txt 2>&1 &
P=$!; sleep 1; touch host.ready
wait_flag A.done 45
# the server exits by itself after the client's DREQ; give it a moment, then stop it
_i=0; while kill -0 $P 2>/dev/null && [ $_i -lt 25 ]; do sleep 0.2; _i=$((_i + 1)); done
kill $P 2>/dev/null; wait $P; echo $? > server.rc
cat rping-server.txt; echo "server rc=$(cat server.rc)"; stamp done
