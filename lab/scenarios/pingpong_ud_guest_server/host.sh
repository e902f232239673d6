# `softrdma pingpong ud` client on the host (inside the netns) -> guest A
. ./lib.sh; . ./pp.env
pp_client host $A_IP
