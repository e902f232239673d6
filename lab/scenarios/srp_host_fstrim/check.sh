# srp_host_fstrim: fstrim on an ext4 filesystem over ib_srp frees the deleted files' blocks in
# the target's backing file (UNMAP -> hole punching), the kept files read back intact.
. "$LABDIR/scenarios/checklib.sh"
S=share
blocks() { sed -n 's/^allocated_blocks=//p' "$S/alloc.$1.txt" 2>/dev/null; }
expect "the guest saw the SRP disk" has $S/A.out '^disk: sd[a-z]+$'
expect "sd uses UNMAP for discards" has $S/A.out '^provisioning_mode=unmap$'
expect "mkfs.ext4 exit 0" has $S/A.out '^mkfs.ext4 rc=0$'
expect "mounted as ext4" has $S/A.out '^/dev/sd[a-z]+ /mnt/d ext4 '
B1=$(blocks 1); B2=$(blocks 2); B3=$(blocks 3)
echo "backing file allocated (512-byte blocks): after mkfs $B1, after writing 34.5 MiB $B2, after rm + fstrim $B3"
expect "host measured three times" [ -n "$B1" ] && [ -n "$B2" ] && [ -n "$B3" ]
# the 32 MiB written then deleted is 65536 blocks: writing must add at least that, fstrim must
# give back at least 90 % of it (ext4 may keep a few blocks: its journal, bitmaps)
expect "writing allocated >= 32 MiB in the backing file" [ $((B2 - B1)) -ge 65536 ]
expect "fstrim freed >= 90 % of the deleted 32 MiB ($((B2 - B3)) blocks)" [ $((B2 - B3)) -ge 58982 ]
expect "fstrim -v exit 0" has $S/fstrim.txt '^fstrim rc=0$'
expect "fstrim -v reported bytes trimmed" has $S/fstrim.txt 'bytes trimmed'
expect "remounted" has $S/A.out '^mount again rc=0$'
expect "kept files intact (checksums)" has $S/A.out '^KEPT FILES INTACT$'
expect "target exit 0 on SIGTERM" rc_is $S/srpt.rc 0
# The wire, read by the project's decoder: fstrim's discards went out as UNMAP (0x42) SRP_CMDs
# (mkfs.ext4 ran with nodiscard: they are all fstrim's)
UNMAPS=$("$SOFTRDMA" decode --json --only-roce capture.pcap 2>/dev/null | python3 -c '
import json, sys
print(sum(json.loads(l).get("infiniband", {}).get("srp_cmd", {}).get("cdb", "").startswith("42") for l in sys.stdin))')
expect "wire: UNMAP commands in SRP_CMDs ($UNMAPS)" [ "${UNMAPS:-0}" -ge 1 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
finish
