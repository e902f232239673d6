# mckey sender on guest A (kernel rdma_cm + rxe) -> group 239.77.0.2, which the host joined
. ./lib.sh
wait_flag host.ready 45
stamp "mckey sender -m 239.77.0.2 -b $A_IP -s -C 10"
run_to guest-sender timeout 30 mckey -m 239.77.0.2 -b $A_IP -s -C 10
stamp done; touch A.done
