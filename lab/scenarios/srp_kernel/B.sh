# ib_srp in guest B logs in to the kernel target in A; direct I/O reads back.
. ./lib.sh
modprobe ib_srp
wait_flag A.ready 60
OPTS=$(cat target.opts)
stamp "add_target $OPTS"
echo "$OPTS" > /sys/class/infiniband_srp/srp-rxe0-1/add_target; echo "add_target rc=$?"
for _i in $(seq 100); do ls /sys/block | grep -q '^sd' && break; sleep 0.2; done
DEV=$(ls /sys/block | grep '^sd' | head -1); echo "disk: $DEV"
dd if=/dev/urandom of=/tmp/p bs=64k count=4 2>/dev/null
dd if=/tmp/p of=/dev/$DEV bs=64k oflag=direct 2>/dev/null
dd if=/dev/$DEV of=/tmp/b bs=64k count=4 iflag=direct 2>/dev/null
cmp /tmp/p /tmp/b && echo "READBACK OK"
for h in /sys/class/srp_remote_ports/*; do echo 1 > $h/delete; done
sleep 1; stamp done; touch B.done
