# srp_host_sigkill: the reference behaviour of Linux 6.1's ib_srp over rxe when softrdma srpt is
# SIGKILLed (docs/srp-initiator.md): the outstanding RC SEND is retransmitted once, one ACK
# timeout (19: 2.147 s) after it went, and then never again — the QP does not fail, whatever
# tl_retry_count says — so the loss is noticed by the SCSI error handler after sd's command
# timeout (10 s here): SRP abort, LUN reset, host reset, which reconnects to the restarted
# target; the I/O waits meanwhile and goes on after it.
. "$LABDIR/scenarios/checklib.sh"
S=share
t() { grep -m1 -E "$1" $S/dmesg.txt | sed -n 's/^\[ *\([0-9.]*\)\].*/\1/p'; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "") print "none"; else printf "%.2f", a - b }'; }
within() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v != "none" && v >= lo && v <= hi) }'; }
K=$(sed -n 's/^kill seen at //p' $S/A.out); R=$(sed -n 's/^restart seen at //p' $S/A.out)
AB=$(t 'SRP abort called'); RH=$(t 'reset_host called'); OK=$(t 'reconnect succeeded')
echo "kill seen at $K s; SRP abort at $AB s (+$(sub "$AB" "$K")); target back at $R s; reset_host at $RH s; reconnected at $OK s (+$(sub "$OK" "$K") after the kill)"
expect "the login took tl_retry_count=2" has $S/A.out '^=== .* add_target .*tl_retry_count=2$'
expect "rport timers and sd timeout set" has $S/A.out '^rport: reconnect_delay 1, fast_io_fail_tmo 4, dev_loss_tmo [0-9]+; sd timeout 10$'
expect "the target was SIGKILLed (exit 137)" has $S/srpt1.rc.txt '^srpt1 rc=137$'
# The wire: the guest's RC packets sent again (same PSN and opcode) more than 0.5 s after the
# first time: retransmissions on timeout (the run has no other loss), i.e. towards the dead target
# (not the copies quoted in the host's ICMP port unreachable answers)
tshark -r capture.pcap -Y '!icmp && ip.src == 10.77.0.10 && udp.dstport == 4791 && infiniband.bth.destqp != 1' \
  -T fields -e frame.time_epoch -e infiniband.bth.psn -e infiniband.bth.opcode 2>/dev/null | python3 -c '
import sys
first, retx = {}, []
for line in sys.stdin.read().splitlines():
    ts, psn, op = line.split("\t")
    k, ts = (psn, op), float(ts)
    if k in first and ts > first[k] + 0.5:
        retx.append(ts - first[k])
    first.setdefault(k, ts)
print("retransmissions=%d first_after=%s" % (len(retx), "%.2f" % retx[0] if retx else "none"))
' > retx.txt
cat retx.txt
read -r NRETX FIRST < <(sed 's/[a-z_]*=//g' retx.txt)
expect "the outstanding SEND retransmitted one ACK timeout (2.147 s) later ($FIRST s)" within "$FIRST" 2.0 3.0
expect "and only once: rxe stops retrying ($NRETX retransmission(s))" [ "$NRETX" = 1 ]
expect "the QP never failed (no failed SEND/RECV status)" [ "$(grep -cE 'failed (SEND|RECV) status' $S/dmesg.txt)" = 0 ]
expect "no fast_io_fail (the rport was never blocked)" [ "$(grep -c 'fast_io_fail_tmo expired' $S/dmesg.txt)" = 0 ]
expect "noticed by the SCSI error handler after sd's timeout (10 s): SRP abort at +$(sub "$AB" "$K") s" within "$(sub "$AB" "$K")" 8.5 12.5
expect "then LUN reset and host reset" has $S/dmesg.txt 'SRP reset_device called' && [ -n "$RH" ]
expect "the host reset reconnected to the restarted target" [ -n "$OK" ] && within "$(sub "$OK" "$R")" 0 30
expect "no I/O error: the loop's write waited and went on" has $S/A.out '^io loop: [0-9]+ ok, 0 failed$' &&
  [ "$(awk -v r="$OK" '$2 > r && $3 == "ok"' $S/io.log | wc -l)" -ge 1 ]
expect "target (2) exit 0 on SIGTERM" rc_is $S/srpt2.rc 0
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
finish
