# rping client on B: 3 iterations, verbose
. ./lib.sh
wait_flag A.ready 45
stamp "rping client -C 3 -v"
run_rc client rping -c -a $A_IP -v -C 3 > rping-client.txt 2>&1
cat rping-client.txt client.rc
stamp done; touch B.done
