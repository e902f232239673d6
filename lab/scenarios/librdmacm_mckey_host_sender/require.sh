# Debian's udaddy on the host over softrdma's librdmacm.so.1 (`softrdma run` finds it beside
# libibverbs.so.1: cargo build -p softrdma-verbs -p softrdma-rdmacm); SKIP (77) without them
[ -x "$SOFTRDMA" ] || { echo "no softrdma binary at $SOFTRDMA"; exit 77; }
[ -x /usr/bin/mckey ] || { echo "no /usr/bin/mckey on the host (rdmacm-utils)"; exit 77; }
"$SOFTRDMA" run -v -- true 2>&1 | grep -q "librdmacm.so.1 from" \
    || { echo "softrdma run finds no librdmacm.so.1 (build softrdma-rdmacm)"; exit 77; }
