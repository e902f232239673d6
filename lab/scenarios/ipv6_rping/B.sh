# rping client on B to fd77::10
. ./lib.sh
/usr/local/bin/ip -6 addr show dev eth0
wait_flag A.ready 45
stamp "ping6 $HOST_IP6 and $A_IP6"
ping -6 -c 1 -W 2 $HOST_IP6; ping -6 -c 1 -W 2 $A_IP6
stamp "rping client -a $A_IP6 -C 3 -v"
run_rc client rping -c -a $A_IP6 -v -C 3 > rping-client.txt 2>&1
cat rping-client.txt
stamp done; touch B.done
