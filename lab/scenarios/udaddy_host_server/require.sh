# runs only once the project's binary has a `udaddy` subcommand; SKIP (77) until then
[ -x "$SOFTRDMA" ] || { echo "no softrdma binary at $SOFTRDMA"; exit 77; }
"$SOFTRDMA" udaddy --help >/dev/null 2>&1 || { echo "softrdma has no udaddy subcommand yet"; exit 77; }
