# SIDR REP status 1 (service ID not supported: no listener for the SIDR REQ's service ID),
# one each way:
# 1. `softrdma ucmatose -b 10.77.0.1` (an RC server on 7471) owns 10.77.0.1:4791; the guest's
#    udaddy client asks for UDP port 7174, so our IB CM must answer SIDR REP status 1 and the
#    server must go on;
# 2. then, that server stopped, `softrdma udaddy -s 10.77.0.10 -b 10.77.0.1` to the guest,
#    where nothing listens: the kernel's SIDR REP status 1 must make our client print
#    udaddy's UNREACHABLE line and exit 1, like v44.
. ./lib.sh
stamp "softrdma ucmatose server on port 7471 (no UD listener)"
timeout 40 "$SOFTRDMA" ucmatose -b $HOST_IP > host-server.txt 2> host-server.err &
P=$!; sleep 1; touch host.ready
wait_flag A.done 45
stop_bg host-server $P 0
stamp "softrdma udaddy client to A (nothing listens there)"
_t0=$SECONDS
run_to host-client timeout 20 "$SOFTRDMA" udaddy -s $A_IP -b $HOST_IP
echo $(( SECONDS - _t0 )) > host-client.secs
stamp done; touch host.done
