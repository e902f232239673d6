# runs only once the project's binary has an `srpt` subcommand; SKIP (77) until then
[ -x "$SOFTRDMA" ] || { echo "no softrdma binary at $SOFTRDMA"; exit 77; }
"$SOFTRDMA" srpt --help >/dev/null 2>&1 || { echo "softrdma has no srpt subcommand yet"; exit 77; }
