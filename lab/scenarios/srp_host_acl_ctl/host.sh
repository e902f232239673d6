# `softrdma srpt` admitting only the guest's nexus with initiator_ext 1 (its port identifier:
# initiator_ext, then rxe0's GID interface ID), with a control socket. When the guest asks
# (acl.req), `softrdma srpt ctl SOCKET acl add` admits initiator_ext 2 while the first session
# does I/O; `show` before and after.
. ./lib.sh
I1=0x0000000000000001505400fffe77000a
I2=0x0000000000000002505400fffe77000a
SOCK=$(mktemp -u /tmp/srpt-ctl.XXXXXX)
stamp "softrdma srpt --allow $I1 --ctl $SOCK"
srpt_start srpt -a $HOST_IP --lun mem:16M --allow $I1 --ctl "$SOCK"; P=$SRPT_PID
touch host.ready
wait_flag acl.req 110
"$SOFTRDMA" srpt ctl "$SOCK" show > ctl-show1.txt 2>&1; echo "show rc=$?" >> ctl-show1.txt
stamp "ctl acl add $I2"
"$SOFTRDMA" srpt ctl "$SOCK" acl add $I2 > ctl-add.txt 2>&1; echo "acl add rc=$?" >> ctl-add.txt
cat ctl-show1.txt ctl-add.txt
touch acl.done
wait_flag show.req 110
"$SOFTRDMA" srpt ctl "$SOCK" show > ctl-show2.txt 2>&1; echo "show rc=$?" >> ctl-show2.txt
cat ctl-show2.txt; touch show.done
wait_flag A.done 110
stop_bg srpt $P 0
rm -f "$SOCK"; stamp done
