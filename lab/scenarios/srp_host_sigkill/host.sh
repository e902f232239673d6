# `softrdma srpt` (16 MiB file LUN) SIGKILLed under the guest's I/O when the guest asks
# (kill.req: no DREQ, its sockets just close), started again on the same file when the guest
# asks (restart.req), so that ib_srp's reconnect finds it.
. ./lib.sh
IMG=$(mktemp /tmp/srp-kill.XXXXXX); truncate -s 16M "$IMG"
stamp "softrdma srpt (1)"
srpt_start srpt1 -a $HOST_IP --lun "file:$IMG" --allow $A_IP; P=$SRPT_PID
touch host.ready
wait_flag kill.req 100
stamp "kill -9 srpt"; kill -9 $P; wait $P; echo "srpt1 rc=$?" | tee srpt1.rc.txt
touch killed
wait_flag restart.req 100
stamp "softrdma srpt (2), same file"
srpt_start srpt2 -a $HOST_IP --lun "file:$IMG" --allow $A_IP; P=$SRPT_PID
touch restarted
wait_flag A.done 100
stop_bg srpt2 $P 0
rm -f "$IMG"; stamp done
