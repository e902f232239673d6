# Helpers sourced by check.sh (bash, on the host, cwd = the run's OUTDIR; the share is ./share).
# A check accumulates failures with `fail` and ends with `finish`: exit 0 = PASS, 1 = FAIL.
FAILS=0
ok()   { echo "ok   $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
# expect NAME CONDITION...: ok/fail on a shell test
expect() { _n=$1; shift; if "$@"; then ok "$_n"; else fail "$_n"; fi; }
# rc_is FILE WANT: an exit status file (A.rc, server.rc, ...) holds WANT
rc_is() { [ -f "$1" ] && [ "$(tr -d ' \n' < "$1")" = "$2" ]; }
# has FILE REGEX [COUNT]: FILE has at least COUNT (1) lines matching REGEX
has() { [ -f "$1" ] && [ "$(grep -cE "$2" "$1")" -ge "${3:-1}" ]; }
# mad_attrs [PCAP]: the CM attribute names of the MADs in the capture, in order
mad_attrs() {
  tshark -r "${1:-capture.pcap}" -Y infiniband.mad -T fields -e infiniband.mad.attributeid 2>/dev/null |
    while read -r a; do
      case $((a)) in
        16) echo REQ ;; 17) echo MRA ;; 18) echo REJ ;; 19) echo REP ;; 20) echo RTU ;;
        21) echo DREQ ;; 22) echo DREP ;; 23) echo SIDR_REQ ;; 24) echo SIDR_REP ;; *) echo "$a" ;;
      esac
    done
}
# count_frames FILTER [PCAP]: frames matching a display filter
count_frames() { tshark -r "${2:-capture.pcap}" -Y "$1" 2>/dev/null | wc -l; }
# softrdma_decode [PCAP]: decode the capture with the project's own decoder when it has one.
# Returns 0 (decoded, or skipped because `softrdma decode` does not exist yet), 1 on a decode failure.
softrdma_decode() {
  _p=${1:-capture.pcap}
  if [ ! -x "${SOFTRDMA:-}" ]; then ok "softrdma decode: skipped (no binary at ${SOFTRDMA:-?})"; return 0; fi
  if ! "$SOFTRDMA" decode --help >/dev/null 2>&1; then ok "softrdma decode: skipped (binary has no decode yet)"; return 0; fi
  if "$SOFTRDMA" decode "$_p" > softrdma-decode.txt 2> softrdma-decode.err && [ -s softrdma-decode.txt ]; then
    ok "softrdma decode $_p: $(wc -l < softrdma-decode.txt) lines (softrdma-decode.txt)"
  else
    fail "softrdma decode $_p failed: $(tail -1 softrdma-decode.err)"
    return 1
  fi
}
finish() { if [ "$FAILS" = 0 ]; then echo "PASS"; exit 0; else echo "FAIL ($FAILS checks failed)"; exit 1; fi; }
