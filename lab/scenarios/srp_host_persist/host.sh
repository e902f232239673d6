# `softrdma srpt` with a 16 MiB file LUN for the persistent reservation scenario; the guest's
# address is its ACL entry (both of its logins, whatever their initiator_ext). When the guest
# asks (restart.req), srpt is stopped (SIGTERM) and started again on the same file: with APTPL
# set, the registrations and the reservation come back from <file>.pr.
. ./lib.sh
IMG=$(mktemp /tmp/srp-pr.XXXXXX); truncate -s 16M "$IMG"
stamp "softrdma srpt (1)"
srpt_start srpt1 -a $HOST_IP --lun "file:$IMG" --allow $A_IP; P=$SRPT_PID
touch host.ready
wait_flag restart.req 140
stop_bg srpt1 $P 0
{ echo "--- $IMG.pr after the first srpt exited:"; cat "$IMG.pr"; } | tee aptpl-file.txt
stamp "softrdma srpt (2), same file"
srpt_start srpt2 -a $HOST_IP --lun "file:$IMG" --allow $A_IP; P=$SRPT_PID
touch restart.done
wait_flag A.done 140
stop_bg srpt2 $P 0
rm -f "$IMG" "$IMG.pr"; stamp done
