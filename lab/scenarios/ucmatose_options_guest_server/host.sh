# `softrdma ucmatose -s 10.77.0.10 -b 10.77.0.1 -c 2 -C 10 -S 100 -t 0x48 -a 14`: TOS and ACK
# timeout set on each id once its address resolved, as cmatose does
. ./lib.sh
wait_flag A.ready 45
stamp "softrdma ucmatose client -c 2 -C 10 -S 100 -t 0x48 -a 14 -> A"
run_to host-client timeout 30 "$SOFTRDMA" ucmatose -s $A_IP -b $HOST_IP -c 2 -C 10 -S 100 -t 0x48 -a 14
stamp done; touch host.done
