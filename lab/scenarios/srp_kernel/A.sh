# Kernel target: LIO + ib_srpt in guest A (srpt_lio.sh), for guest B's ib_srp.
. ./lib.sh
. ./srpt_lio.sh
srpt_lio_target 5555 16777216 $A_IP
echo "id_ext=$SRPT_GUID,ioc_guid=$SRPT_GUID,dest=$A_IP:5555" > target.opts
touch A.ready
wait_flag B.done 80
dmesg | grep -iE 'srpt' | tail -10
stamp done
