# srp_lio_initiator: `softrdma srp` against Linux's ib_srpt (LIO) in the guest: login with two
# channels (SINGLE then MULTI), the LUN's INQUIRY and capacity, a read of the guest's data, a
# write the guest finds in its backing file, a verified random read/write workload, logouts.
. "$LABDIR/scenarios/checklib.sh"
S=share
expect "ib_srpt target configured in the guest" has $S/A.out '^ib_srpt: target port .*rdma_cm_port 5555'
expect "login exit 0" rc_is $S/login.rc 0
expect "channel 0 logged in (SINGLE)" has $S/login.txt '^channel 0: QP 0x[0-9a-f]+, RDMA CM SINGLE, req_it_iu_len 8260'
expect "channel 1 logged in (MULTI, existing channels maintained)" has $S/login.txt '^channel 1: QP .*RDMA CM MULTI.*\(Existing channels maintained\)'
expect "LUN 0 of the FILEIO backstore: 16 MiB (32768 blocks of 512 bytes)" has $S/login.txt '^LUN 0: LIO-ORG .*32768 blocks of 512 bytes'
expect "logged out" has $S/login.txt '^logged out$'
expect "read exit 0" rc_is $S/read.rc 0
expect "the host read the 64 KiB the guest wrote" has $S/readback.txt '^HOST READS GUEST DATA$'
expect "write exit 0" rc_is $S/write.rc 0
expect "the guest found the host's 64 KiB in its backing file" has $S/A.out '^GUEST FINDS HOST WRITE$'
expect "bench exit 0" rc_is $S/bench.rc 0
expect "verified workload: no errors" grep -q '"errors":0' $S/bench.txt
expect "verified workload: blocks checked" grep -qE '"checked":[1-9]' $S/bench.txt
expect "verified workload: reads and writes done" grep -qE '"total_ios":[1-9].*"total_ios":[1-9]' $S/bench.txt
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
n() { echo "$attrs" | tr ' ' '\n' | grep -cx "$1"; }
# login: 2 channels; read, write: 1 each; bench: 2  => 6 logins, 6 logouts
expect "CM: 6 logins (REQ REP RTU) and 6 logouts (DREQ DREP), no REJ" [ "$(n REQ)" -ge 6 -a "$(n REP)" -ge 6 -a "$(n RTU)" -ge 6 -a "$(n DREQ)" -ge 6 -a "$(n DREP)" -ge 6 -a "$(n REJ)" = 0 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
finish
