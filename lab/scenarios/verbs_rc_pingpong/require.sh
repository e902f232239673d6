# Debian's ibv_rc_pingpong on the host, and a softrdma that can run it over its libibverbs.so.1
[ -x /usr/bin/ibv_rc_pingpong ] || { echo "/usr/bin/ibv_rc_pingpong is not installed on the host"; exit 77; }
[ -x "$SOFTRDMA" ] || { echo "no softrdma binary at $SOFTRDMA"; exit 77; }
"$SOFTRDMA" run -- true || { echo "softrdma run finds no libibverbs.so.1 (cargo build -p softrdma-verbs)"; exit 1; }
