# fstrim through ib_srp to `softrdma srpt`: an ext4 filesystem (e2fsprogs' mkfs.ext4) on a file
# LUN, files written, some deleted, `fstrim -v` on the mount; the host's backing file loses the
# deleted files' blocks (the host measures it at each step), the files kept read back intact
# after a remount.
. ./lib.sh
modprobe ib_srp
wait_flag host.ready 60
OPTS=$(sed -n 's/^add_target: //p' srpt.txt | head -1)
# measure N: the host notes the backing file's allocation now
measure() { sync; touch measure.$1; wait_flag measured.$1 30; cat alloc.$1.txt; }
srp_login "$OPTS"; DEV=$SRP_DEV
[ -n "$DEV" ] || { dmesg | tail -30; touch A.done; exit 1; }
echo "provisioning_mode=$(cat /sys/block/$DEV/device/scsi_disk/*/provisioning_mode)"
stamp "mkfs.ext4 /dev/$DEV"
# everything initialised now (no lazy init thread writing blocks between the measurements), and
# no discard of the whole device: every UNMAP on the wire is then fstrim's
mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0,nodiscard /dev/$DEV > mkfs.txt 2>&1
echo "mkfs.ext4 rc=$?"; cat mkfs.txt
mkdir -p /mnt/d
mount -t ext4 /dev/$DEV /mnt/d; echo "mount rc=$?"
grep " /mnt/d " /proc/mounts
measure 1
stamp "write"
# 32 MiB to delete, ~2.5 MiB to keep; random data, so nothing compresses or dedups
for i in 1 2 3 4; do dd if=/dev/urandom of=/mnt/d/del$i bs=1M count=8 2>/dev/null; done
mkdir /mnt/d/keep
dd if=/dev/urandom of=/mnt/d/keep/a bs=1M count=2 2>/dev/null
dd if=/dev/urandom of=/mnt/d/keep/b bs=4k count=129 2>/dev/null
echo "kept over fstrim" > /mnt/d/keep/c
(cd /mnt/d/keep && md5sum a b c) > sums1.txt; cat sums1.txt
measure 2
stamp "rm + fstrim"
rm /mnt/d/del1 /mnt/d/del2 /mnt/d/del3 /mnt/d/del4
sync
fstrim -v /mnt/d > fstrim.txt 2>&1; echo "fstrim rc=$?" >> fstrim.txt; cat fstrim.txt
measure 3
umount /mnt/d; echo "umount rc=$?"
echo 3 > /proc/sys/vm/drop_caches
mount -t ext4 /dev/$DEV /mnt/d; echo "mount again rc=$?"
(cd /mnt/d/keep && md5sum a b c) > sums2.txt; cat sums2.txt
cmp sums1.txt sums2.txt && echo "KEPT FILES INTACT"
umount /mnt/d
srp_logout_all
dmesg | grep -iE 'srp|scsi|sd[a-z]|ext4' > dmesg.txt; cat dmesg.txt
stamp done; touch A.done
