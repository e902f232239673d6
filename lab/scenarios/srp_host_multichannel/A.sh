# ib_srp in a 2-CPU guest logs in with ch_count=2 (the second channel with the MULTI action);
# direct I/O from each CPU goes out on that CPU's channel (blk-mq hardware queue = channel).
. ./lib.sh
modprobe ib_srp
wait_flag host.ready 60
OPTS="$(sed -n 's/^add_target: //p' srpt.txt | head -1),ch_count=2"
disk() { ls /sys/block | grep '^sd' | head -1; }
stamp "add_target $OPTS"
echo "$OPTS" > /sys/class/infiniband_srp/srp-rxe0-1/add_target; echo "add_target rc=$?"
for _i in $(seq 100); do [ -n "$(disk)" ] && [ -b /dev/$(disk) ] && break; sleep 0.2; done
DEV=$(disk); echo "disk: $DEV"; echo "cpus: $(grep -c ^processor /proc/cpuinfo)"
ls /sys/block/$DEV/mq/ 2>/dev/null | tr '\n' ' '; echo
dd if=/dev/urandom of=/tmp/p0 bs=64k count=16 2>/dev/null
dd if=/dev/urandom of=/tmp/p1 bs=64k count=16 2>/dev/null
for cpu in 0 1; do
  (
    if command -v taskset >/dev/null; then T="taskset -c $cpu"; else T=""; fi
    for k in 1 2 3 4; do
      $T dd if=/tmp/p$cpu of=/dev/$DEV bs=64k seek=$((cpu * 64)) oflag=direct 2>/dev/null
      $T dd if=/dev/$DEV of=/tmp/b$cpu bs=64k skip=$((cpu * 64)) count=16 iflag=direct 2>/dev/null
    done
    cmp /tmp/p$cpu /tmp/b$cpu && echo "CPU $cpu READBACK OK"
  ) &
done
wait
for h in /sys/class/srp_remote_ports/*; do echo 1 > $h/delete; done
for _i in $(seq 100); do [ -z "$(disk)" ] && break; sleep 0.2; done
dmesg | grep -iE 'srp' > dmesg.txt; cat dmesg.txt
stamp done; touch A.done
