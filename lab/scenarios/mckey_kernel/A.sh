# mckey receiver on guest A (kernel rdma_cm + rxe): joins 239.77.0.1 on rxe0, waits for 10
# SENDs with immediate of 100 bytes from the group
. ./lib.sh
stamp "mckey receiver -m 239.77.0.1 -b $A_IP -C 10"
timeout 40 mckey -m 239.77.0.1 -b $A_IP -C 10 > guest-receiver.txt 2> guest-receiver.err &
P=$!
wait_mcast 239.77.0.1 30 && touch A.ready
wait $P; echo $? > guest-receiver.rc
cat guest-receiver.txt guest-receiver.err; echo "guest-receiver rc=$(cat guest-receiver.rc)"
stamp done; touch A.done
