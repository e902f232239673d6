# ib_srp logins refused by `softrdma srpt`; the kernel log shows each SRP reason.
. ./lib.sh
modprobe ib_srp
ADD=/sys/class/infiniband_srp/srp-rxe0-1/add_target
try() { stamp "add_target $1"; echo "$1" > $ADD; echo "add_target rc=$? ($2)"; sleep 0.5; }
wait_flag host.ready1 60
O=$(sed -n 's/^add_target: //p' srpt1.txt | head -1)
try "$O" iu-length
touch A.done1
wait_flag host.ready2 60
O=$(sed -n 's/^add_target: //p' srpt2.txt | head -1)
try "$O" acl
G=$(echo "$O" | sed 's/.*ioc_guid=\([0-9a-f]*\).*/\1/')
try "id_ext=0000000000000bad,ioc_guid=$G,dest=10.77.0.1:5555" target-port-id
dmesg | grep -iE 'srp' > dmesg.txt; cat dmesg.txt
ls /sys/block | grep '^sd' && echo "UNEXPECTED DISK"
stamp done; touch A.done
