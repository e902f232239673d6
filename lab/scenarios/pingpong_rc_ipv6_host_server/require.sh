# runs only once the project's binary has a `pingpong` subcommand; SKIP (77) until then
[ -x "$SOFTRDMA" ] || { echo "no softrdma binary at $SOFTRDMA"; exit 77; }
"$SOFTRDMA" pingpong --help >/dev/null 2>&1 || { echo "softrdma has no pingpong subcommand yet"; exit 77; }
