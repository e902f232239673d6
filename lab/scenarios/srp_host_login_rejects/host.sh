# Three refusals, each with its SRP reason: `softrdma srpt --max-req-size 2048 --demo` (ib_srp
# asks for 8260: REQ_IT_IU_LENGTH_TOO_LARGE), then `softrdma srpt` without an ACL (closed by
# default, as LIO: CHANNEL_LIMIT_REACHED; a wrong id_ext: UNABLE_ASSOCIATE_CHANNEL).
. ./lib.sh
start() {
  "$SOFTRDMA" srpt -a $HOST_IP --lun mem:8M "$@" > srpt$N.txt 2> srpt$N.err &
  P=$!
  for _i in $(seq 50); do grep -q '^add_target: ' srpt$N.txt 2>/dev/null && break; sleep 0.1; done
  cat srpt$N.txt
}
N=1; stamp "srpt --max-req-size 2048"; start --max-req-size 2048 --demo; touch host.ready1
wait_flag A.done1 60; stop_bg srpt1 $P 0
N=2; stamp "srpt (no ACL)"; start; touch host.ready2
wait_flag A.done 60; stop_bg srpt2 $P 0
stamp done
