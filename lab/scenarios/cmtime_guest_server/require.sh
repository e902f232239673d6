# runs only once the project's binary has a `cmtime` subcommand; SKIP (77) until then
[ -x "$SOFTRDMA" ] || { echo "no softrdma binary at $SOFTRDMA"; exit 77; }
"$SOFTRDMA" cmtime --help >/dev/null 2>&1 || { echo "softrdma has no cmtime subcommand yet"; exit 77; }
