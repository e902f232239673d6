# `softrdma pingpong rc` client on the host (device fd77::1) -> guest A; the side channel goes
# to A's IPv4 address (the tool listens on IPv4 only)
. ./lib.sh; . ./pp.env
pp_client host $A_IP
