# An ACL entry added through `softrdma srpt ctl` while another session does I/O: the nexus
# with initiator_ext 1 is admitted and runs a verified direct-I/O loop (write, read back,
# compare, one 64 KiB block after another); a login with initiator_ext 2 is refused (no ACL
# entry: SRP_LOGIN_REJ 0x00010006 in the kernel log); the host adds its entry with `ctl acl
# add`; the next login gets in and its disk does verified I/O; the first session's loop never
# stopped (its iterations' times, kept in io.log).
. ./lib.sh
modprobe ib_srp
wait_flag host.ready 60
OPTS=$(sed -n 's/^add_target: //p' srpt.txt | head -1)
srp_login "$OPTS,initiator_ext=1"; D1=$SRP_DEV
[ -n "$D1" ] || { dmesg | tail -30; touch A.done; exit 1; }
for k in 0 1 2 3; do dd if=/dev/urandom of=/tmp/p$k bs=64k count=1 2>/dev/null; done
# the I/O loop: "N uptime ok|BAD" per iteration, until /tmp/stop
(
  i=0
  while [ ! -e /tmp/stop ]; do
    k=$((i % 4)); b=$((i % 128))
    dd if=/tmp/p$k of=/dev/$D1 bs=64k seek=$b oflag=direct 2>/dev/null &&
      dd if=/dev/$D1 of=/tmp/r bs=64k skip=$b count=1 iflag=direct 2>/dev/null &&
      cmp -s /tmp/p$k /tmp/r && r=ok || r=BAD
    echo "$i $(cut -d' ' -f1 /proc/uptime) $r" >> /tmp/io.log
    i=$((i + 1))
  done
) &
LOOP=$!
sleep 2
stamp "login with initiator_ext 2 (no ACL entry)"
echo "$OPTS,initiator_ext=2" > $SRP_ADD 2>/dev/null; echo "refused add_target rc=$?"
sleep 1
echo "disks: $(srp_disks | tr '\n' ' ')"
stamp "ctl acl add"; echo "acl add at $(cut -d' ' -f1 /proc/uptime)"
touch acl.req; wait_flag acl.done 30
srp_login "$OPTS,initiator_ext=2"; D2=$SRP_DEV
echo "second session: $D2 at $(cut -d' ' -f1 /proc/uptime)"
if [ -n "$D2" ]; then
  dd if=/tmp/p1 of=/dev/$D2 bs=64k seek=200 oflag=direct 2>/dev/null
  dd if=/dev/$D2 of=/tmp/r2 bs=64k skip=200 count=1 iflag=direct 2>/dev/null
  cmp /tmp/p1 /tmp/r2 && echo "SECOND SESSION I/O OK"
fi
touch show.req; wait_flag show.done 30
sleep 2
touch /tmp/stop; wait $LOOP
cp /tmp/io.log io.log
echo "io loop: $(wc -l < io.log) iterations, $(grep -c ' ok$' io.log) ok, $(grep -c ' BAD$' io.log) bad"
srp_logout_all
dmesg | grep -iE 'srp|scsi|sd[a-z]' > dmesg.txt; cat dmesg.txt
stamp done; touch A.done
