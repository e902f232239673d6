# mckey_kernel: rdma-core v44's mckey between two 6.1 kernels (rxe), A receiver, B sender, group
# 239.77.0.1: both exit 0 with mckey's lines ("joined dgid: ::ffff:239.77.0.1 mlid 0x0 sl 0");
# on the wire no CM MAD at all (no SA on RoCE), an IGMP membership report for the group from
# each full member, and B's 10 UD SENDs with immediate of 100 bytes to IP 239.77.0.1 (Ethernet
# 01:00:5e:4d:00:01), BTH destination QP 0xffffff, DETH Q_Key 0x01234567; every ICRC right.
. "$LABDIR/scenarios/checklib.sh"
mckey_check share/guest-receiver share/guest-sender 10.77.0.10 10.77.0.11 239.77.0.1
finish
