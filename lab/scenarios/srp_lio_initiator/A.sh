# The kernel SRP target (LIO FILEIO + ib_srpt, scenarios/srpt_lio.sh) in guest A for
# `softrdma srp` on the host: the guest writes 64 KiB into its backing file before the host
# reads them; after the host's write, the guest looks for it in the backing file.
. ./lib.sh
. ./srpt_lio.sh
IMG=/tmp/lio-disk0.img
# 6.1 quirk (srpt_lio.sh): an RDMA CM login is matched against the target's own address.
srpt_lio_target 5555 16777216 $A_IP
dd if=/dev/urandom of=guest-pattern.bin bs=64k count=1 2>/dev/null
dd if=guest-pattern.bin of=$IMG bs=64k conv=notrunc 2>/dev/null; sync
echo "id_ext=$SRPT_GUID,ioc_guid=$SRPT_GUID,dest=$A_IP:5555" > target.opts
touch A.ready
wait_flag host.wrote 80 || { touch A.checked A.done; exit 1; }
# the host wrote host-pattern.bin at 1 MiB (block 16 of 64 KiB)
dd if=$IMG of=/tmp/got bs=64k skip=16 count=1 2>/dev/null
cmp host-pattern.bin /tmp/got && echo "GUEST FINDS HOST WRITE"
touch A.checked
wait_flag host.done 80
dmesg | grep -iE 'srpt|target' | tail -20
stamp done
