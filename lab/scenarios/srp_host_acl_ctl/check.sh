# srp_host_acl_ctl: a login without an ACL entry is refused (0x00010006), `srpt ctl acl add`
# admits the next one, and the session already running kept doing verified I/O throughout.
. "$LABDIR/scenarios/checklib.sh"
S=share
expect "first session (initiator_ext 1) got its disk" has $S/A.out '^disk: sd[a-z]+$' 2
expect "the login without an ACL entry failed" has $S/A.out '^refused add_target rc=[1-9]'
expect "guest: SRP LOGIN REJECTED, reason 0x00010006" has $S/dmesg.txt 'SRP LOGIN REJECTED, reason 0x00010006'
expect "target: refused for no ACL entry" has $S/srpt.err 'reason 0x00010006.*no ACL entry'
expect "ctl acl add exit 0" has $S/ctl-add.txt '^acl add rc=0$'
expect "ctl show before: one session, initiator_ext 1's" [ "$(grep -cE '^channel ch[0-9]+: live, initiator 0x0000000000000001505400fffe77000a$' $S/ctl-show1.txt)$(grep -c '^channel ' $S/ctl-show1.txt)" = 11 ]
expect "ctl acl add answered" has $S/ctl-add.txt '^acl 0x0000000000000002505400fffe77000a added$'
expect "ctl show after: the new entry, both initiators live" has $S/ctl-show2.txt '^acl: 0x0000000000000002505400fffe77000a$' &&
  has $S/ctl-show2.txt '^channel ch[0-9]+: live, initiator 0x0000000000000001505400fffe77000a$' &&
  has $S/ctl-show2.txt '^channel ch[0-9]+: live, initiator 0x0000000000000002505400fffe77000a$'
expect "the next login got in (initiator_ext 2)" has $S/A.out '^second session: sd[a-z]+ at '
expect "its I/O verified" has $S/A.out '^SECOND SESSION I/O OK$'
expect "two logins accepted by the target" has $S/srpt.err 'login accepted' 2
# The first session's loop: every iteration verified, iterations before the refused login and
# after the second login, and never a gap over 3 s (a 64 KiB write + read takes well under 1 s)
L=$S/io.log
expect "io loop: every iteration verified" [ -s $L ] && ! grep -q BAD $L
T_ACL=$(sed -n 's/^acl add at //p' $S/A.out)
T_2=$(sed -n 's/^second session: sd[a-z]* at //p' $S/A.out)
echo "io loop: $(wc -l < $L) iterations from $(head -1 $L | cut -d' ' -f2) s to $(tail -1 $L | cut -d' ' -f2) s; acl add at $T_ACL s, second session at $T_2 s"
expect "io loop ran before the ACL change and after the second login" awk -v a="$T_ACL" -v b="$T_2" '$2 < a {x=1} $2 > b {y=1} END {exit !(x && y)}' $L
GAP=$(awk 'NR > 1 && $2 - p > g {g = $2 - p} {p = $2} END {printf "%.2f", g}' $L)
expect "io loop never stopped (largest gap between iterations $GAP s < 3 s)" awk -v g="$GAP" 'BEGIN {exit !(g < 3)}'
expect "target exit 0 on SIGTERM" rc_is $S/srpt.rc 0
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
expect "CM: the refused REQ got a REJ, reason 28" [ "$(count_frames 'ip.src == 10.77.0.1 && infiniband.cm.rej.reason == 28')" = 1 ]
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
finish
