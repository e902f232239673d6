# Debian's unmodified rping -c on the host (inside the netns, 10.77.0.1) over softrdma's
# librdmacm.so.1 + libibverbs.so.1 -> the guest kernel's rping -s
. ./lib.sh
wait_flag A.ready 45
stamp "Debian rping client -C 3 -v -V over softrdma run -> A"
run_rc client timeout 30 "$SOFTRDMA" run -- rping -c -a $A_IP -I $HOST_IP -v -V -C 3 > rping-client.txt 2>&1
cat rping-client.txt
stamp done; touch host.done
