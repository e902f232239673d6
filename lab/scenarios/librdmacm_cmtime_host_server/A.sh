# cmtime client (rdma-core v44, kernel rdma_cm + rxe) on guest A -> softrdma cmtime server:
# 200 connections set up and torn down step by step, then the per-step table
. ./lib.sh
wait_flag host.ready 45
stamp "cmtime client -c 200 -> host"
run_to guest-client timeout 40 cmtime -s $HOST_IP -c 200
stamp done; touch A.done
