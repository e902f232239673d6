# Two rejections, one each way, REJ reason 8 (invalid service ID: no listener for the REQ's
# service ID):
# 1. `softrdma ucmatose -b 10.77.0.1` (a server on the default port 7471) owns 10.77.0.1:4791;
#    the guest's ucmatose client asks for port 9999, so our IB CM must answer REJ 8 and the
#    server must go on serving;
# 2. then, that server stopped (the device's UDP port is free again), `softrdma ucmatose -s
#    10.77.0.10 -b 10.77.0.1 -p 9999` to the guest, where nothing listens: the guest kernel's
#    REJ 8 must make our client print cmatose's REJECTED line and exit 8, like v44.
. ./lib.sh
stamp "softrdma ucmatose server on port 7471"
timeout 40 "$SOFTRDMA" ucmatose -b $HOST_IP > host-server.txt 2> host-server.err &
P=$!; sleep 1; touch host.ready
wait_flag A.done 45
# it never gets a connection: stop it (it must still be running)
stop_bg host-server $P 0
stamp "softrdma ucmatose client to port 9999 on A (nothing listens there)"
_t0=$SECONDS
run_to host-client timeout 20 "$SOFTRDMA" ucmatose -s $A_IP -b $HOST_IP -p 9999
# whole seconds the client took to fail
echo $(( SECONDS - _t0 )) > host-client.secs
stamp done; touch host.done
