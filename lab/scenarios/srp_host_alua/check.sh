# srp_host_alua: REPORT TARGET PORT GROUPS of a two-port softrdma srpt through each of the
# guest's paths: one group, active/optimized, both relative target ports in it.
. "$LABDIR/scenarios/checklib.sh"
S=share
expect "srpt printed an add_target line per port" [ "$(grep -cE '^add_target: id_ext=[0-9a-f]{16},ioc_guid=[0-9a-f]{16},dest=10\.77\.0\.[12]:5555$' $S/srpt.txt)" = 2 ]
expect "two logins accepted" has $S/srpt.err 'login accepted' 2
expect "two paths, two disks" has $S/A.out '^path 1: sd[a-z]+, path 2: sd[a-z]+$'
for n in 1 2; do
  expect "path $n: INQUIRY says TPGS=1 (implicit ALUA)" has $S/inq$n.txt 'TPGS=1'
  expect "path $n: device identification: relative target port 0x$n" has $S/vpd$n.txt "Relative target port: 0x$n\$"
  expect "path $n: device identification: target port group 0x0" has $S/vpd$n.txt 'Target port group: 0x0$'
  expect "path $n: sg_rtpg exit 0" has $S/rtpg$n.txt '^sg_rtpg rc=0$'
  expect "path $n: one target port group, id 0" [ "$(grep -c 'target port group id' $S/rtpg$n.txt)" = 1 ] && has $S/rtpg$n.txt 'target port group id : 0x0 '
  expect "path $n: active/optimized" has $S/rtpg$n.txt 'asymmetric access state : 0x00 \(active/optimized\)'
  expect "path $n: both ports in the group (0x01, 0x02)" has $S/rtpg$n.txt 'target port count : 0?2$' &&
    [ "$(sed -n '/Relative target port ids:/,$p' $S/rtpg$n.txt | grep -oE '^ +0x0[12]$' | tr -d ' ' | tr '\n' ' ')" = "0x01 0x02 " ]
done
expect "written through port 1, read back through port 2" has $S/A.out '^ONE LUN THROUGH BOTH PORTS$'
expect "target exit 0 on SIGTERM" rc_is $S/srpt.rc 0
expect "logins on both ports on the wire (REQs to 10.77.0.1 and 10.77.0.2)" [ "$(count_frames 'ip.dst == 10.77.0.1 && infiniband.mad.attributeid == 0x0010')" -ge 1 ] && [ "$(count_frames 'ip.dst == 10.77.0.2 && infiniband.mad.attributeid == 0x0010')" -ge 1 ]
# The wire, read by the project's decoder: a REPORT TARGET PORT GROUPS (A3h/0Ah) SRP_CMD to each port
RTPG=$("$SOFTRDMA" decode --json --only-roce capture.pcap 2>/dev/null | python3 -c '
import json, sys
to = set()
for line in sys.stdin:
    d = json.loads(line)
    if d.get("infiniband", {}).get("srp_cmd", {}).get("cdb", "").startswith("a30a"):
        to.add(d["ip"]["dst"])
print(" ".join(sorted(to)))')
expect "wire: REPORT TARGET PORT GROUPS sent to both ports ($RTPG)" [ "$RTPG" = "10.77.0.1 10.77.0.2" ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
finish
