# runs only once the project's binary has an `rping` subcommand; SKIP (77) until then
[ -x "$SOFTRDMA" ] || { echo "no softrdma binary at $SOFTRDMA"; exit 77; }
"$SOFTRDMA" rping --help >/dev/null 2>&1 || { echo "softrdma has no rping subcommand yet"; exit 77; }
