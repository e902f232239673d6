# One LUN through two target ports: ib_srp logs in through each port of a two-port
# `softrdma srpt` (initiator_ext 1 and 2: ib_srp refuses a second login to the same id_ext/
# ioc_guid with the same initiator_ext, "Already connected"), two disks appear; sg_rtpg on
# each reports the one target port group, active/optimized, with both ports in it; the
# device identification VPD page tells the paths apart (relative target port 1, 2); data
# written through one port reads back through the other.
. ./lib.sh
modprobe ib_srp
wait_flag host.ready 60
L1=$(sed -n 's/^add_target: //p' srpt.txt | sed -n 1p)
L2=$(sed -n 's/^add_target: //p' srpt.txt | sed -n 2p)
echo "port 1: $L1"; echo "port 2: $L2"
srp_login "$L1,initiator_ext=1"; D1=$SRP_DEV
srp_login "$L2,initiator_ext=2"; D2=$SRP_DEV
echo "path 1: $D1, path 2: $D2"
[ -n "$D1" ] && [ -n "$D2" ] || { dmesg | tail -30; touch A.done; exit 1; }
for n in 1 2; do
  eval D=\$D$n
  stamp "path $n: /dev/$D"
  sg_inq /dev/$D > inq$n.txt 2>&1; echo "sg_inq rc=$?" >> inq$n.txt; cat inq$n.txt
  sg_vpd -p di /dev/$D > vpd$n.txt 2>&1; echo "sg_vpd rc=$?" >> vpd$n.txt; cat vpd$n.txt
  sg_rtpg -d /dev/$D > rtpg$n.txt 2>&1; echo "sg_rtpg rc=$?" >> rtpg$n.txt; cat rtpg$n.txt
done
stamp "write through port 1, read through port 2"
dd if=/dev/urandom of=/tmp/pat bs=64k count=4 2>/dev/null
dd if=/tmp/pat of=/dev/$D1 bs=64k seek=8 oflag=direct 2>&1 | tail -1
dd if=/dev/$D2 of=/tmp/back bs=64k skip=8 count=4 iflag=direct 2>&1 | tail -1
cmp /tmp/pat /tmp/back && echo "ONE LUN THROUGH BOTH PORTS"
srp_logout_all
dmesg | grep -iE 'srp|scsi|sd[a-z]' > dmesg.txt; cat dmesg.txt
stamp done; touch A.done
