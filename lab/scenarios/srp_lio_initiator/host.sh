# `softrdma srp` on the host against guest A's ib_srpt: login (two channels), a read of the
# data the guest wrote, a write the guest then finds in its backing file, a verified random
# read/write workload.
. ./lib.sh
wait_flag A.ready 90 || exit 1
T="$(cat target.opts),src=$HOST_IP"
stamp "softrdma srp login $T,ch_count=2"
run_to login "$SOFTRDMA" srp login "$T,ch_count=2" -v
stamp "softrdma srp read"
run_to read "$SOFTRDMA" srp read "$T" --offset 0 --length 64k -o host-read.bin
cmp guest-pattern.bin host-read.bin && echo "HOST READS GUEST DATA" | tee readback.txt
head -c 65536 /dev/urandom > host-pattern.bin
stamp "softrdma srp write"
run_to write "$SOFTRDMA" srp write "$T" --offset 1m -i host-pattern.bin
touch host.wrote
wait_flag A.checked 60
stamp "softrdma srp bench"
run_to bench "$SOFTRDMA" srp bench "$T,ch_count=2" --rw randrw --bs 4k --iodepth 16 --runtime 5 --offset 4m --verify --json
stamp done; touch host.done
