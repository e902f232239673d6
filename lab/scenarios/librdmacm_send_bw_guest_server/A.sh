# perftest ib_send_bw -R server (kernel rdma_cm + rxe) on guest A <- Debian's ib_send_bw -R
# over softrdma's librdmacm on the host. perftest connects twice (parameter exchange, then
# the test's QP) and its server listens anew in between; a client that wins that race is
# rejected (REJ 8, invalid service ID) by this kernel. The host then asks for another round
# (host.retry.N): a fresh server, up to 3 rounds.
# Without a delay every round is lost against this TCG guest (the capture shows our second
# REQ 0.7 ms after the exchange's last ACK, REJ 8 at once: a native client beats the emulated
# server's re-listen, and perftest's own retry loop reuses the ids it destroyed), so host.sh
# sets SOFTRDMA_CONNECT_DELAY_MS=300 (a test aid of softrdma's librdmacm).
. ./lib.sh
for n in 1 2 3; do
    stamp "ib_send_bw -R server, round $n"
    ib_send_bw -R -d rxe0 -n 200 -s 4096 > bw-server.$n.txt 2>&1 &
    P=$!; sleep 2; touch A.ready.$n
    wait_flag host.done.$n 60
    _i=0; while kill -0 $P 2>/dev/null && [ $_i -lt 25 ]; do sleep 0.2; _i=$((_i + 1)); done
    kill $P 2>/dev/null; wait $P; echo $? > server.rc
    cp bw-server.$n.txt bw-server.txt
    [ -f host.retry.$n ] || break
done
cat bw-server.txt; echo "server rc=$(cat server.rc)"; stamp done
