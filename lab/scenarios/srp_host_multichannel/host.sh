# `softrdma srpt` with a 32 MiB memory LUN for a two-channel login (ch_count=2).
. ./lib.sh
stamp "softrdma srpt"
# --demo: any initiator may log in (srpt is closed by default).
"$SOFTRDMA" srpt -a $HOST_IP --lun mem:32M --demo > srpt.txt 2> srpt.err &
P=$!
for _i in $(seq 50); do grep -q '^add_target: ' srpt.txt 2>/dev/null && break; sleep 0.1; done
cat srpt.txt; touch host.ready
wait_flag A.done 110
stop_bg srpt $P 0
stamp done
