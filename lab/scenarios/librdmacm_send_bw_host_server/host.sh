# Debian's unmodified ib_send_bw -R server on the host (inside the netns, 10.77.0.1) over
# softrdma's librdmacm.so.1 + libibverbs.so.1 (a wildcard listener: every device of the netns)
. ./lib.sh
stamp "Debian ib_send_bw -R server over softrdma run"
timeout 60 "$SOFTRDMA" run -- ib_send_bw -R -d softrdma_br0 -n 200 -s 4096 > bw-server.txt 2>&1 &
# Ready once the program's device holds UDP 4791 (it listens right after), and a second more:
# under load the program can take longer than a fixed sleep to start, and a REQ before the
# listen is rejected (reason 8) as by the kernel's CM.
P=$!; wait_udp 4791 30 $P; sleep 1; touch host.ready
wait_flag A.done 60
_i=0; while kill -0 $P 2>/dev/null && [ $_i -lt 25 ]; do sleep 0.2; _i=$((_i + 1)); done
kill $P 2>/dev/null; wait $P; echo $? > server.rc
cat bw-server.txt; echo "server rc=$(cat server.rc)"; stamp done
