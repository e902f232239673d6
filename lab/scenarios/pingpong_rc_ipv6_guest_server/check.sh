# pingpong_rc_ipv6_guest_server: ibv_rc_pingpong server in guest A (fd77::10) <- softrdma pingpong rc client on the host (fd77::1),
# RoCEv2 over IPv6. rxe sends RoCEv2/IPv6 with UDP checksum 0, which a Linux UDP/IPv6 socket
# drops unless it set UDP_NO_CHECK6_RX (the driver does): the zero-checksum check below makes
# sure this scenario keeps exercising that path.
. "$LABDIR/scenarios/checklib.sh"
. "$SCEN/pp.env"
pp_check
pp_check_ipv6
finish
