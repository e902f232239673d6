# Persistent reservations (SPC-4) through two I_T nexuses of one host: ib_srp logs in to
# `softrdma srpt` twice with initiator_ext 1 and 2 (two SRP initiator port identifiers, two
# disks of one LUN). sg_persist registers a key through each, reserves Write Exclusive through
# the first, a write through the second gets RESERVATION CONFLICT (reads pass), the second
# preempts the first; READ KEYS / READ RESERVATION / READ FULL STATUS show each state. Then
# both register again, the last REGISTER with APTPL, the target is restarted and the keys and
# the reservation are still there.
. ./lib.sh
modprobe ib_srp
wait_flag host.ready 60
OPTS=$(sed -n 's/^add_target: //p' srpt1.txt | head -1)
P="sg_persist --no-inquiry"
# pr NAME ARGS...: one sg_persist call; its output in NAME.txt, exit status as "NAME rc=N"
pr() { _n=$1; shift; stamp "sg_persist $*"; $P "$@" > "pr-$_n.txt" 2>&1; _rc=$?; cat "pr-$_n.txt"; echo "$_n rc=$_rc"; }
# wr NAME DEV: WRITE(10) of one block at LBA 16 with sg_raw (its SCSI status), then the same
# through the block layer (dd, direct): what each says, and its exit status
wr() {
  sg_raw -s 512 -i /tmp/blk /dev/$2 2a 00 00 00 00 10 00 00 01 00 > "wr-$1.txt" 2>&1
  echo "sg_raw rc=$?" >> "wr-$1.txt"
  dd if=/tmp/blk of=/dev/$2 bs=512 count=1 seek=16 oflag=direct >> "wr-$1.txt" 2>&1
  echo "dd rc=$?" >> "wr-$1.txt"
  echo "--- write $1 (/dev/$2):"; cat "wr-$1.txt"
}
rd() { dd if=/dev/$2 of=/tmp/rd bs=512 count=1 skip=16 iflag=direct 2>/dev/null; echo "read $1 rc=$?"; }
both_in() {
  srp_login "$OPTS,initiator_ext=1"; D1=$SRP_DEV
  srp_login "$OPTS,initiator_ext=2"; D2=$SRP_DEV
  echo "nexus 1 (initiator_ext 1): $D1, nexus 2 (initiator_ext 2): $D2"
}
both_in
[ -n "$D1" ] && [ -n "$D2" ] || { dmesg | tail -30; touch A.done; exit 1; }
dd if=/dev/urandom of=/tmp/blk bs=512 count=1 2>/dev/null
pr caps --in --report-capabilities /dev/$D1
pr reg1 --out --register --param-sark=0xa1 /dev/$D1
pr reg2 --out --register --param-sark=0xb2 /dev/$D2
pr keys2 --in --read-keys /dev/$D1
pr resv1 --out --reserve --param-rk=0xa1 --prout-type=1 /dev/$D1
pr rr1 --in --read-reservation /dev/$D2
wr holder1 $D1
wr other2 $D2
rd other2 $D2
pr preempt --out --preempt --param-rk=0xb2 --param-sark=0xa1 --prout-type=1 /dev/$D2
# nexus 1's next command gets the UNIT ATTENTION "registrations preempted" (SPC-4 §5.13.11.2.3)
sg_turs -v /dev/$D1 > ua1.txt 2>&1; echo "sg_turs rc=$?" >> ua1.txt; cat ua1.txt
pr keys3 --in --read-keys /dev/$D1
pr rr3 --in --read-reservation /dev/$D1
pr full3 --in --read-full-status /dev/$D2
wr preempted1 $D1
wr holder2 $D2
# APTPL: both register again, the last REGISTER with APTPL set
pr reg1b --out --register --param-sark=0xa1 /dev/$D1
pr reg2aptpl --out --register-ignore --param-sark=0xb2 --param-aptpl /dev/$D2
pr caps5 --in --report-capabilities /dev/$D1
pr keys5 --in --read-keys /dev/$D1
srp_logout_all
stamp "target restart"; touch restart.req
wait_flag restart.done 60
OPTS=$(sed -n 's/^add_target: //p' srpt2.txt | head -1)
both_in
[ -n "$D1" ] && [ -n "$D2" ] || { dmesg | tail -30; touch A.done; exit 1; }
pr keysR --in --read-keys /dev/$D1
pr rrR --in --read-reservation /dev/$D1
pr fullR --in --read-full-status /dev/$D1
wr after1 $D1
wr after2 $D2
srp_logout_all
dmesg | grep -iE 'srp|scsi|sd[a-z]|reservation' > dmesg.txt; cat dmesg.txt
stamp done; touch A.done
