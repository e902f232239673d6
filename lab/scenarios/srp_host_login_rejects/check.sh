# srp_host_login_rejects: each refusal reaches the guest kernel as REJ 28 with the SRP
# reason, printed by ib_srp; the target logs why; no disk appears.
. "$LABDIR/scenarios/checklib.sh"
S=share
expect "every add_target failed" [ "$(grep -c '^add_target rc=[1-9]' $S/A.out)" = 3 ]
expect "guest: max_it_iu_len too large (0x00010002)" has $S/dmesg.txt 'SRP_LOGIN_REJ: requested max_it_iu_len too large'
expect "guest: reason 0x00010006 (ACL)" has $S/dmesg.txt 'SRP LOGIN REJECTED, reason 0x00010006'
expect "guest: reason 0x00010003 (target port id)" has $S/dmesg.txt 'SRP LOGIN REJECTED, reason 0x00010003'
expect "target logged the IU length refusal" has $S/srpt1.err 'reason 0x00010002'
expect "target logged the ACL refusal" has $S/srpt2.err 'reason 0x00010006.*no ACL entry'
expect "target said it is closed (no ACL)" has $S/srpt2.err 'no ACL: every login is refused'
expect "target logged the port id refusal" has $S/srpt2.err 'reason 0x00010003.*target port identifier'
expect "no disk" [ "$(grep -c 'UNEXPECTED DISK' $S/A.out)" = 0 ]
attrs=$(mad_attrs | tr '\n' ' ')
echo "CM MADs: $attrs"
expect "CM: REQ REJ three times" [ "$attrs" = "REQ REJ REQ REJ REQ REJ " ]
expect "three REJs from the target, reason 28 (consumer defined)" [ "$(count_frames 'ip.src == 10.77.0.1 && infiniband.cm.rej.reason == 28')" = 3 ]
expect "target exits 0" [ "$(cat $S/srpt1.rc)$(cat $S/srpt2.rc)" = 00 ]
finish
