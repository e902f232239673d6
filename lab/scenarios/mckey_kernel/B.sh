# mckey sender on guest B -> the group guest A joined
. ./lib.sh
wait_flag A.ready 45
stamp "mckey sender -m 239.77.0.1 -b $B_IP -s -C 10"
run_to guest-sender timeout 30 mckey -m 239.77.0.1 -b $B_IP -s -C 10
wait_flag A.done 45
stamp done
