# `softrdma pingpong ud` server on the host (inside the netns, 10.77.0.1)
. ./lib.sh; . ./pp.env
pp_server host
