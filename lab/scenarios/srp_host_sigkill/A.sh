# The reference for `tests/srp_reconnect.rs`'s SIGKILL tests: what Linux 6.1's ib_srp over rxe
# does when `softrdma srpt` dies without a word. ib_srp logs in with tl_retry_count=2 (its
# smallest RC retry count; the rport's reconnect_delay 1 s, fast_io_fail_tmo 4 s through sysfs;
# sd's command timeout 10 s instead of 30, to keep the run short), a direct-I/O loop runs, the
# target is SIGKILLed. The kernel log's times (uptime) against the moment this guest saw the
# kill flag: does the QP fail ("failed SEND status"), when does the SCSI error handler step in
# ("SRP abort called" ... "reset_host"), when is the target reached again once it is back?
. ./lib.sh
modprobe ib_srp
wait_flag host.ready 60
OPTS=$(sed -n 's/^add_target: //p' srpt1.txt | head -1)
srp_login "$OPTS,tl_retry_count=2"; DEV=$SRP_DEV
[ -n "$DEV" ] || { dmesg | tail -30; touch A.done; exit 1; }
RP=$(ls -d /sys/class/srp_remote_ports/port-* | head -1)
echo 1 > $RP/reconnect_delay; echo 4 > $RP/fast_io_fail_tmo
echo 10 > /sys/block/$DEV/device/timeout
echo "rport: reconnect_delay $(cat $RP/reconnect_delay), fast_io_fail_tmo $(cat $RP/fast_io_fail_tmo), dev_loss_tmo $(cat $RP/dev_loss_tmo); sd timeout $(cat /sys/block/$DEV/device/timeout)"
dd if=/dev/urandom of=/tmp/p bs=64k count=1 2>/dev/null
(
  i=0
  while [ ! -e /tmp/stop ]; do
    dd if=/tmp/p of=/dev/$DEV bs=64k seek=$((i % 64)) oflag=direct 2>/dev/null && r=ok || r=err
    echo "$i $(cut -d' ' -f1 /proc/uptime) $r" >> /tmp/io.log
    i=$((i + 1))
  done
) &
LOOP=$!
sleep 2
touch kill.req; wait_flag killed 30
echo "kill seen at $(cut -d' ' -f1 /proc/uptime)"
# the first sign of the loss in the kernel log: a failed completion or the error handler
for _i in $(seq 150); do dmesg | grep -qE 'failed (SEND|RECV) status|SRP abort called' && break; sleep 0.2; done
stamp "target back"; touch restart.req; wait_flag restarted 30
echo "restart seen at $(cut -d' ' -f1 /proc/uptime)"
for _i in $(seq 150); do dmesg | grep -q 'reconnect succeeded' && break; sleep 0.2; done
sleep 2
touch /tmp/stop; wait $LOOP; cp /tmp/io.log io.log
echo "io loop: $(grep -c ' ok$' io.log) ok, $(grep -c ' err$' io.log) failed"
srp_logout_all
dmesg | grep -iE 'srp|scsi|sd[a-z]|rport|reconnect|fast_io' > dmesg.txt; cat dmesg.txt
stamp done; touch A.done
