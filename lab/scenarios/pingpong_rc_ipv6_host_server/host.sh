# `softrdma pingpong rc` server on the host (inside the netns), device fd77::1
. ./lib.sh; . ./pp.env
pp_server host
