# pingpong client on guest B -> A
. ./lib.sh; . ./pp.env
pp_client guest $A_IP
stamp done
