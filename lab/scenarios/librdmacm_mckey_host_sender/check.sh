# librdmacm_mckey_host_sender: Debian's mckey over softrdma's libraries on the host sends 10
# messages to 239.77.0.3; the guest kernel's mckey receives them (the mckey_kernel checks,
# with our UD SENDs to the group: IP 239.77.0.3, QPN 0xffffff, Q_Key 0x01234567, ICRCs right).
. "$LABDIR/scenarios/checklib.sh"
mckey_check share/guest-receiver share/host-sender 10.77.0.10 10.77.0.1 239.77.0.3
finish
