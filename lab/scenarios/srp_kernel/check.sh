# srp_kernel: the configfs recipe (srpt_lio.sh) gives a working kernel SRP target: guest B's
# ib_srp logs in over the RDMA CM, the disk appears, direct I/O reads back.
. "$LABDIR/scenarios/checklib.sh"
expect "add_target rc=0" has share/B.out '^add_target rc=0$'
expect "disk appeared" has share/B.out '^disk: sd[a-z]'
expect "direct I/O read back" has share/B.out '^READBACK OK$'
expect "ICRC of every RoCEv2 packet" python3 "$LABDIR/icrc_check.py" capture.pcap
finish
