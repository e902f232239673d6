# One guest: the RDMA device is there and active, and the host side of the bridge answers.
. ./lib.sh
stamp "ibv_devices / ibv_devinfo"
ibv_devices
ibv_devinfo -d rxe0 > devinfo.txt 2>&1; echo "ibv_devinfo rc=$?"; cat devinfo.txt
rdma link show
stamp "ping $HOST_IP"
run_rc ping ping -c 2 -W 2 $HOST_IP
stamp done
