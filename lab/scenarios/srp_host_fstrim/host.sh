# `softrdma srpt` with a 64 MiB file LUN (sparse at the start); on each of the guest's
# measure.N flags the backing file's allocated blocks (stat %b, 512-byte units) and du go to
# alloc.N.txt, then measured.N.
. ./lib.sh
IMG=$(mktemp /tmp/srp-fstrim.XXXXXX); truncate -s 64M "$IMG"
stamp "softrdma srpt"
srpt_start srpt -a $HOST_IP --lun "file:$IMG" --allow $A_IP; P=$SRPT_PID
touch host.ready
for n in 1 2 3; do
  wait_flag measure.$n 140 || break
  { echo "allocated_blocks=$(stat -c %b "$IMG")"; echo "du_kib=$(du -k "$IMG" | cut -f1)"; } | tee alloc.$n.txt
  touch measured.$n
done
wait_flag A.done 140
stop_bg srpt $P 0
rm -f "$IMG"; stamp done
