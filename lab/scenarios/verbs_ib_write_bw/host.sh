# the host (inside the netns): Debian's ib_write_bw over softrdma's libibverbs (`softrdma run`)
. ./lib.sh; . ./dv.env
dv_server host 1
dv_client host 2 $A_IP
stamp done
