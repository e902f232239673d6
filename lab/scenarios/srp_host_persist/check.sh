# srp_host_persist: persistent reservations through two I_T nexuses of one guest (initiator_ext
# 1 and 2), as SPC-4 specifies and sg_persist (sg3-utils 1.46) prints them; the state kept
# across a target restart with APTPL.
. "$LABDIR/scenarios/checklib.sh"
S=share
# pr_is NAME REGEX [COUNT]: sg_persist call NAME printed lines matching REGEX
pr_is() { has "$S/pr-$1.txt" "$2" "${3:-1}"; }
# keys_are NAME GEN KEY...: READ KEYS printed generation GEN and exactly the keys KEY..., in order
keys_are() {
  _f=$S/pr-$1.txt; _g=$2; shift 2
  grep -qE "PR generation=$_g, " "$_f" &&
    [ "$(grep -E '^ +0x[0-9a-f]+$' "$_f" | tr -d ' ' | tr '\n' ' ')" = "$* " ]
}
# conflict NAME: the write through that nexus got RESERVATION CONFLICT (sg_raw's status) and
# the block layer's write failed; allowed NAME: both went through
conflict() { has "$S/wr-$1.txt" 'Reservation Conflict' && has "$S/wr-$1.txt" '^dd rc=[1-9]'; }
allowed() { has "$S/wr-$1.txt" '^sg_raw rc=0$' && has "$S/wr-$1.txt" '^dd rc=0$' && ! has "$S/wr-$1.txt" 'Conflict'; }
expect "four logins, each with its disk" has $S/A.out '^disk: sd[a-z]+$' 4
expect "two nexuses, two disks" has $S/A.out '^nexus 1 \(initiator_ext 1\): sd[a-z]+, nexus 2 \(initiator_ext 2\): sd[a-z]+$' 2
expect "REPORT CAPABILITIES: PTPL_C (APTPL possible)" pr_is caps 'Persist Through Power Loss Capable ?\(PTPL_C\): 1'
expect "REGISTER 0xa1 through nexus 1" has $S/A.out '^reg1 rc=0$'
expect "REGISTER 0xb2 through nexus 2" has $S/A.out '^reg2 rc=0$'
expect "READ KEYS: generation 2, keys 0xa1 0xb2" keys_are keys2 0x2 0xa1 0xb2
expect "RESERVE Write Exclusive through nexus 1" has $S/A.out '^resv1 rc=0$'
expect "READ RESERVATION (nexus 2): key 0xa1, Write Exclusive" pr_is rr1 'Key=0xa1$'
expect "READ RESERVATION: LU_SCOPE, Write Exclusive" pr_is rr1 'scope: LU_SCOPE, +type: Write Exclusive$'
expect "the holder (nexus 1) writes" allowed holder1
expect "nexus 2 writes: RESERVATION CONFLICT" conflict other2
expect "nexus 2 reads (Write Exclusive lets it)" has $S/A.out '^read other2 rc=0$'
expect "PREEMPT 0xa1 from nexus 2" has $S/A.out '^preempt rc=0$'
expect "the preempted nexus 1 is told: UNIT ATTENTION, registrations preempted" has $S/ua1.txt 'Registrations preempted'
expect "READ KEYS after PREEMPT: generation 3, key 0xb2 only" keys_are keys3 0x3 0xb2
expect "READ RESERVATION after PREEMPT: key 0xb2, Write Exclusive" pr_is rr3 'Key=0xb2$'
expect "READ FULL STATUS: one registration, 0xb2, the holder" pr_is full3 'Key=0xb2$'
expect "READ FULL STATUS: the holder marked" pr_is full3 'Reservation holder'
expect "READ FULL STATUS: SRP TransportID with initiator_ext 2" pr_is full3 '^ +00 00 00 00 00 00 00 02  50 54 00 ff fe 77 00 0a$'
expect "the preempted nexus 1 writes: RESERVATION CONFLICT" conflict preempted1
expect "the new holder (nexus 2) writes" allowed holder2
expect "REGISTER again through nexus 1" has $S/A.out '^reg1b rc=0$'
expect "REGISTER AND IGNORE with APTPL through nexus 2" has $S/A.out '^reg2aptpl rc=0$'
expect "REPORT CAPABILITIES: PTPL_A 1" pr_is caps5 'Persist Through Power Loss Active ?\(PTPL_A\): 1'
expect "READ KEYS before the restart: generation 5, 0xb2 0xa1" keys_are keys5 0x5 0xb2 0xa1
expect "the target kept the state in <file>.pr" has $S/aptpl-file.txt '^register [0-9a-f]{32} 1 00000000000000b2$'
expect "the target was restarted" [ -f $S/srpt2.txt ] && rc_is $S/srpt1.rc 0
expect "READ KEYS after the restart: generation 5, 0xb2 0xa1" keys_are keysR 0x5 0xb2 0xa1
expect "READ RESERVATION after the restart: key 0xb2, Write Exclusive" pr_is rrR 'Key=0xb2$'
expect "READ RESERVATION after the restart: Write Exclusive" pr_is rrR 'type: Write Exclusive$'
expect "READ FULL STATUS after the restart: both registrations, 0xb2 the holder" [ "$(grep -E 'Key=|holder' $S/pr-fullR.txt | tr -s ' ' | tr '\n' '|')" = " Key=0xb2| << Reservation holder >>| Key=0xa1| not reservation holder|" ]
expect "READ FULL STATUS after the restart: nexus 1's TransportID (initiator_ext 1)" pr_is fullR '^ +00 00 00 00 00 00 00 01  50 54 00 ff fe 77 00 0a$'
expect "after the restart nexus 1 (registered, not the holder) writes: RESERVATION CONFLICT" conflict after1
expect "after the restart the holder (nexus 2) writes" allowed after2
expect "guest kernel logged the conflicts" grep -qi "reservation conflict" $S/dmesg.txt
expect "target exit 0 on SIGTERM" rc_is $S/srpt2.rc 0
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
expect "CM: four logins (REQ REP RTU) and four logouts (DREQ DREP)" [ "$(echo "$attrs" | grep -o 'RTU' | wc -l)" -ge 4 ]
# The wire, read by the project's decoder: the PR commands in SRP_CMDs, the conflicts in SRP_RSPs
"$SOFTRDMA" decode --json --only-roce capture.pcap 2>/dev/null | python3 -c '
import json, sys
from collections import Counter
ops, st = Counter(), Counter()
for line in sys.stdin:
    ib = json.loads(line).get("infiniband", {})
    ops[ib.get("srp_cmd", {}).get("cdb", "")[:2]] += 1
    st[ib.get("srp_rsp", {}).get("status")] += 1
print("pr_out=%d pr_in=%d conflicts=%d" % (ops["5f"], ops["5e"], st[0x18]))
' > srp-wire.txt
cat srp-wire.txt
read -r PRO PRI CONF < <(sed 's/[a-z_]*=//g' srp-wire.txt)
expect "wire: the 6 PERSISTENT RESERVE OUTs in SRP_CMDs" [ "$PRO" = 6 ]
expect "wire: the 11 PERSISTENT RESERVE INs in SRP_CMDs" [ "${PRI:-0}" -ge 11 ]
expect "wire: SRP_RSPs with RESERVATION CONFLICT (>= the 6 refused writes)" [ "${CONF:-0}" -ge 6 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
finish
