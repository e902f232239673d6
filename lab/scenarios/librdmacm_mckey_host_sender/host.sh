# Debian's mckey over softrdma's librdmacm on the host (10.77.0.1) as the sender to group
# 239.77.0.3, which the guest kernel's mckey joined
. ./lib.sh
wait_flag A.ready 45
stamp "Debian mckey over softrdma run, sender -m 239.77.0.3 -b $HOST_IP -s -C 10"
run_to host-sender timeout 30 "$SOFTRDMA" run -- mckey -m 239.77.0.3 -b $HOST_IP -s -C 10
touch host.done
stamp done
