# A two-port `softrdma srpt`: a second address on the bridge (10.77.0.2, this namespace only),
# a device and a target port on each (relative target port identifiers 1 and 2, one ALUA target
# port group), one 16 MiB memory LUN behind both. It prints an add_target line per port.
. ./lib.sh
PORT2_IP=10.77.0.2
ip addr add $PORT2_IP/24 dev br0
stamp "softrdma srpt, two ports"
srpt_start srpt -a $HOST_IP -a $PORT2_IP --lun mem:16M --allow $A_IP; P=$SRPT_PID
touch host.ready
wait_flag A.done 110
stop_bg srpt $P 0
stamp done
