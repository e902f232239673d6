# runs only once the project's binary has a `ucmatose` subcommand; SKIP (77) until then
[ -x "$SOFTRDMA" ] || { echo "no softrdma binary at $SOFTRDMA"; exit 77; }
"$SOFTRDMA" ucmatose --help >/dev/null 2>&1 || { echo "softrdma has no ucmatose subcommand yet"; exit 77; }
