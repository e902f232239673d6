# Debian's unmodified ib_send_bw -R on the host (inside the netns, 10.77.0.1) over softrdma's
# librdmacm.so.1 + libibverbs.so.1 -> the guest kernel's ib_send_bw -R server (rounds: A.sh).
# SOFTRDMA_CONNECT_DELAY_MS: each rdma_connect waits 300 ms, so that the second REQ does not
# overtake the TCG guest's re-listen (see A.sh).
. ./lib.sh
for n in 1 2 3; do
    wait_flag A.ready.$n 45
    stamp "Debian ib_send_bw -R client over softrdma run -> A, round $n"
    run_rc client timeout 50 env SOFTRDMA_CONNECT_DELAY_MS=300 "$SOFTRDMA" run -- ib_send_bw -R -d softrdma_br0 -n 200 -s 4096 $A_IP > bw-client.txt 2>&1
    cat bw-client.txt
    if [ "$(cat client.rc)" != 0 ] && [ $n -lt 3 ] \
        && grep -q "RDMA_CM_EVENT_REJECTED; error: 8\." bw-client.txt; then
        echo "lost perftest's re-listen race (REJ 8): another round"
        touch host.retry.$n host.done.$n
        continue
    fi
    touch host.done.$n
    break
done
stamp done
