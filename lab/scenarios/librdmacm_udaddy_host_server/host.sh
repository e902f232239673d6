# `Debian udaddy over softrdma run` server on the host (inside the netns, 10.77.0.1), as rdma-core's
# `udaddy -b ADDR -c 2 -C 10 -S 100`: answer 2 SIDR REQs (QPN, Q_Key 0x01234567), take 10
# SENDs with immediate on each, reply with 10 on an AH made from the first one's GRH, exit 0
# (docs/tools.md)
. ./lib.sh
stamp "Debian udaddy over softrdma run server -c 2 -C 10 -S 100"
timeout 40 "$SOFTRDMA" run -- udaddy -b $HOST_IP -c 2 -C 10 -S 100 > host-server.txt 2> host-server.err &
P=$!; sleep 1; touch host.ready
wait_flag A.done 45
# it exits by itself once its replies completed: allow 5 s, then stop it
stop_bg host-server $P 5
stamp done
