# `softrdma rping -c` on the host (inside the netns, fd77::1), RoCEv2 over IPv6, -> the guest kernel's rping -s
. ./lib.sh
wait_flag A.ready 45
stamp "softrdma rping client -C 3 -v -> A"
run_rc client timeout 30 "$SOFTRDMA" rping -c -a $A_IP6 -I $HOST_IP6 -v -C 3 > rping-client.txt 2>&1
cat rping-client.txt
stamp done; touch host.done
