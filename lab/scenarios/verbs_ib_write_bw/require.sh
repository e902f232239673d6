# Debian's ib_write_bw on the host, and a softrdma that can run it over its libibverbs.so.1
[ -x /usr/bin/ib_write_bw ] || { echo "/usr/bin/ib_write_bw is not installed on the host"; exit 77; }
[ -x "$SOFTRDMA" ] || { echo "no softrdma binary at $SOFTRDMA"; exit 77; }
"$SOFTRDMA" run -- true || { echo "softrdma run finds no libibverbs.so.1 (cargo build -p softrdma-verbs)"; exit 1; }
