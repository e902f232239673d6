# `softrdma srpt` on the host (10.77.0.1:5555) with a 64 MiB file LUN; it prints the
# add_target line the guest uses. Stopped with SIGTERM once the guest is done (it must
# disconnect, flush the file and exit 0).
. ./lib.sh
IMG=$(mktemp /tmp/srp-disk.XXXXXX); truncate -s 64M "$IMG"
stamp "softrdma srpt"
# srpt is closed by default: the guest's address is its ACL entry.
RUST_LOG=debug "$SOFTRDMA" srpt -a $HOST_IP --lun "file:$IMG" --allow $A_IP > srpt.txt 2> srpt.err &
P=$!
for _i in $(seq 50); do grep -q '^add_target: ' srpt.txt 2>/dev/null && break; sleep 0.1; done
cat srpt.txt; touch host.ready
wait_flag A.done 140
stop_bg srpt $P 0
md5sum "$IMG" | cut -d' ' -f1 > host-image.md5
# The discarded second half is a hole in the file now: no data from 32 MiB on.
python3 -c '
import os, sys
f = os.open(sys.argv[1], os.O_RDONLY)
try:
    print("data at", os.lseek(f, 32 << 20, os.SEEK_DATA))
except OSError:
    print("SECOND HALF IS A HOLE")
print("allocated_bytes=%d" % (os.fstat(f).st_blocks * 512))
' "$IMG" | tee holes.txt
rm -f "$IMG"; stamp done
