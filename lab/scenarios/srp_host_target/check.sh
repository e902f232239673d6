# srp_host_target: the guest kernel's ib_srp logs in to `softrdma srpt`, the disk appears with
# the LUN's size, a filesystem is made, written, read back after a logout and a new login with
# the same checksums, raw direct I/O reads back, blkdiscard frees the file LUN's second half;
# the target exits 0 on SIGTERM.
. "$LABDIR/scenarios/checklib.sh"
S=share
expect "target printed its add_target line" has $S/srpt.txt '^add_target: id_ext=[0-9a-f]{16},ioc_guid=[0-9a-f]{16},dest=10\.77\.0\.1:5555$'
expect "two logins accepted by the target" has $S/srpt.err 'login accepted' 2
expect "the guest saw the SRP disk twice" has $S/A.out '^disk: sd[a-z]' 2
expect "disk of 64 MiB (131072 sectors)" has $S/size.txt '^size_sectors=131072$'
expect "mke2fs exit 0" has $S/mkfs.txt '^mke2fs rc=0$'
expect "mounted twice" [ "$(grep -cE '^mount( again)? rc=0$' $S/A.out)" = 2 ]
expect "checksums match after logout and login" has $S/A.out '^CHECKSUMS MATCH$'
expect "raw 512 KiB direct I/O read back" has $S/A.out '^RAW READBACK OK$'
expect "raw 512-byte direct I/O read back" has $S/A.out '^RAW 512 READBACK OK$'
expect "sd uses UNMAP for discards (thin provisioning)" has $S/A.out '^provisioning_mode=unmap$'
expect "blkdiscard exit 0" has $S/A.out '^blkdiscard rc=0$'
expect "discarded blocks read back as zeroes" has $S/A.out '^DISCARDED READS ZEROES$'
expect "the file LUN's second half was punched out" has $S/holes.txt '^SECOND HALF IS A HOLE$'
expect "guest kernel logged the SRP host" has $S/dmesg.txt 'scsi host[0-9]+: ib_srp'
expect "channel states logged (connecting -> live ...)" has $S/srpt.err 'channel state connecting -> live' 2
expect "logouts logged" has $S/srpt.err 'logout by the initiator' 2
expect "target exit 0 on SIGTERM" rc_is $S/srpt.rc 0
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
expect "CM: two logins (REQ REP RTU), two logouts (DREQ DREP)" [ "$(echo "$attrs" | grep -o 'REP' | wc -l)" -ge 2 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
finish
