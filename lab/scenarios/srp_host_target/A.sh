# ib_srp initiator in guest A -> `softrdma srpt` on the host: log in with the add_target line
# the target printed, mke2fs, mount, write, unmount, log out, log in again, mount, compare
# checksums, then raw direct I/O, blkdiscard of the second half, and log out.
. ./lib.sh
modprobe ib_srp
wait_flag host.ready 60
OPTS=$(sed -n 's/^add_target: //p' srpt.txt | head -1)
ADD=/sys/class/infiniband_srp/srp-rxe0-1/add_target
disk() { ls /sys/block | grep '^sd' | head -1; }
login() {
  stamp "add_target $OPTS"
  # ib_srp removes a logged-out target port in the background: until it is gone, the same
  # add_target is refused ("Already connected"); try again for a few seconds.
  for _t in $(seq 25); do echo "$OPTS" > $ADD 2>/dev/null && break; sleep 0.2; done
  echo "add_target rc=$? (try $_t)"
  for _i in $(seq 100); do [ -n "$(disk)" ] && [ -b /dev/$(disk) ] && break; sleep 0.2; done
  DEV=$(disk); echo "disk: $DEV"
}
logout() {
  stamp "logout"
  for h in /sys/class/srp_remote_ports/*; do echo 1 > $h/delete; done
  for _i in $(seq 100); do [ -z "$(disk)" ] && break; sleep 0.2; done
  echo "disks after logout: [$(disk)]"
}
login
[ -n "$DEV" ] || { dmesg | tail -30; touch A.done; exit 1; }
echo "size_sectors=$(cat /sys/block/$DEV/size)" | tee size.txt
cat /sys/block/$DEV/device/vendor /sys/block/$DEV/device/model 2>/dev/null
stamp "mke2fs /dev/$DEV"
mke2fs /dev/$DEV > mkfs.txt 2>&1; echo "mke2fs rc=$?" | tee -a mkfs.txt; cat mkfs.txt
mkdir -p /mnt/d
mount -t ext2 /dev/$DEV /mnt/d; echo "mount rc=$?"
dd if=/dev/urandom of=/mnt/d/big bs=64k count=32 2>/dev/null
echo "hello from the guest over SRP" > /mnt/d/small
mkdir /mnt/d/dir; dd if=/dev/urandom of=/mnt/d/dir/mid bs=4k count=33 2>/dev/null
(cd /mnt/d && md5sum big small dir/mid) > sums1.txt; cat sums1.txt
umount /mnt/d; echo "umount rc=$?"
logout
login
[ -n "$DEV" ] || { dmesg | tail -30; touch A.done; exit 1; }
mount -t ext2 /dev/$DEV /mnt/d; echo "mount again rc=$?"
(cd /mnt/d && md5sum big small dir/mid) > sums2.txt; cat sums2.txt
cmp sums1.txt sums2.txt && echo "CHECKSUMS MATCH"
umount /mnt/d
stamp "raw direct I/O"
dd if=/dev/urandom of=/tmp/pat bs=64k count=8 2>/dev/null
dd if=/tmp/pat of=/dev/$DEV bs=64k seek=900 oflag=direct 2>&1 | tail -1
dd if=/dev/$DEV of=/tmp/back bs=64k skip=900 count=8 iflag=direct 2>&1 | tail -1
cmp /tmp/pat /tmp/back && echo "RAW READBACK OK"
dd if=/tmp/pat of=/dev/$DEV bs=512 count=1 seek=5 oflag=direct 2>&1 | tail -1
dd if=/dev/$DEV of=/tmp/b512 bs=512 count=1 skip=5 iflag=direct 2>&1 | tail -1
head -c 512 /tmp/pat | cmp - /tmp/b512 && echo "RAW 512 READBACK OK"
# Thin provisioning: sd chose UNMAP for discards (LBPME, VPD B0h/B2h); blkdiscard of the
# second half (where the raw write above landed) must punch it out of the host's file.
stamp "blkdiscard"
echo "provisioning_mode=$(cat /sys/block/$DEV/device/scsi_disk/*/provisioning_mode)"
echo "discard_max_bytes=$(cat /sys/block/$DEV/queue/discard_max_bytes)"
HALF=$(( $(cat /sys/block/$DEV/size) * 512 / 2 ))
blkdiscard -o $HALF -l $HALF /dev/$DEV; echo "blkdiscard rc=$?"
dd if=/dev/$DEV of=/tmp/z bs=64k skip=900 count=8 iflag=direct 2>&1 | tail -1
head -c 524288 /dev/zero | cmp - /tmp/z && echo "DISCARDED READS ZEROES"
logout
dmesg | grep -iE 'srp|scsi|sd[a-z]' > dmesg.txt; cat dmesg.txt
stamp done; touch A.done
