# Debian's mckey over softrdma's librdmacm (softrdma run) on the host (10.77.0.1) as the
# receiver of group 239.77.0.2: 10 messages from the guest kernel's mckey sender
. ./lib.sh
stamp "Debian mckey over softrdma run, receiver -m 239.77.0.2 -b $HOST_IP -C 10"
timeout 40 "$SOFTRDMA" run -- mckey -m 239.77.0.2 -b $HOST_IP -C 10 > host-receiver.txt 2> host-receiver.err &
P=$!
wait_mcast 239.77.0.2 30; touch host.ready
wait_flag A.done 45
stop_bg host-receiver $P 10
stamp done
