# srp_host_multichannel: a ch_count=2 login gets two channels (SINGLE then MULTI, "existing
# channels maintained"), and SRP_CMDs arrive on both target QPs.
. "$LABDIR/scenarios/checklib.sh"
S=share
expect "add_target with ch_count=2 succeeded" has $S/A.out '^add_target rc=0$'
expect "two logins accepted" has $S/srpt.err 'login accepted' 2
expect "the second channel kept the first (MULTI)" has $S/srpt.err 'login accepted.*Existing channels maintained'
expect "both CPUs read back what they wrote" [ "$(grep -c 'READBACK OK' $S/A.out)" = 2 ]
qps=$(tshark -r capture.pcap -Y 'ip.src == 10.77.0.10 && infiniband.bth.opcode == 4' -T fields -e infiniband.bth.destqp 2>/dev/null | sort | uniq -c | awk '$1 >= 8' | wc -l)
echo "target QPs with >= 8 SEND-only packets from the guest: $qps"
tshark -r capture.pcap -Y 'ip.src == 10.77.0.10 && infiniband.bth.opcode == 4' -T fields -e infiniband.bth.destqp 2>/dev/null | sort | uniq -c
expect "I/O on both channels" [ "$qps" -ge 2 ]
expect "target exit 0 on SIGTERM" rc_is $S/srpt.rc 0
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
finish
