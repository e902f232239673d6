# smoke: rxe0 exists, its port is PORT_ACTIVE over eth0, and the guest reaches 10.77.0.1.
. "$LABDIR/scenarios/checklib.sh"
expect "guest script ran to the end" rc_is share/A.rc 0
expect "ibv_devinfo lists rxe0" has share/devinfo.txt 'hca_id:[[:space:]]*rxe0'
expect "rxe0 port 1 is PORT_ACTIVE" has share/devinfo.txt 'state:[[:space:]]*PORT_ACTIVE'
expect "rxe0 sits on eth0" has share/A.out 'link rxe0/1 state ACTIVE.*netdev eth0'
expect "ping 10.77.0.1 answered" rc_is share/ping.rc 0
expect "capture holds the ICMP echo replies" [ "$(count_frames 'icmp.type == 0 && ip.src == 10.77.0.1')" -ge 2 ]
finish
