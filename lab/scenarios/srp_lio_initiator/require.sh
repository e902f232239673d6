# runs only once the project's binary has an `srp` subcommand; SKIP (77) until then
[ -x "$SOFTRDMA" ] || { echo "no softrdma binary at $SOFTRDMA"; exit 77; }
"$SOFTRDMA" srp --help >/dev/null 2>&1 || { echo "softrdma has no srp subcommand yet"; exit 77; }
