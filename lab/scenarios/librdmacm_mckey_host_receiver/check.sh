# librdmacm_mckey_host_receiver: the guest kernel's mckey sends 10 messages to 239.77.0.2;
# Debian's mckey over softrdma's libraries on the host receives them (the mckey_kernel checks:
# exit status and lines of both, IGMP report from the host's group socket, the guest's UD
# SENDs to the group with QPN 0xffffff and Q_Key 0x01234567, no CM MAD, ICRCs right).
. "$LABDIR/scenarios/checklib.sh"
mckey_check share/host-receiver share/guest-sender 10.77.0.1 10.77.0.10 239.77.0.2
finish
