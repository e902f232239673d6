#!/usr/bin/env bash
# Export the capture of a finished lab run into the repo's fixtures:
#   lab/export.sh SCENARIO [NAME] [RUNDIR]
# writes fixtures/captures/NAME.pcap (classic pcap, as captured on the bridge) and NAME.txt
# (`tshark -V -Y infiniband`, the field-by-field reference the wire tests compare against).
# NAME defaults to SCENARIO, RUNDIR to $LAB/out/SCENARIO.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LAB=${LAB:-/var/cache/softrdma-lab}
S=${1:?usage: export.sh SCENARIO [NAME] [RUNDIR]}; N=${2:-$S}; R=${3:-$LAB/out/$S}
D=${CAPTURES:-$HERE/../fixtures/captures}
[ "$(cat "$R/verdict" 2>/dev/null)" = PASS ] || { echo "$R: run did not PASS; not exporting"; exit 1; }
mkdir -p "$D"
cp "$R/capture.pcap" "$D/$N.pcap"; chmod 644 "$D/$N.pcap"
tshark -r "$D/$N.pcap" -V -Y infiniband 2>/dev/null > "$D/$N.txt"
python3 "$HERE/icrc_check.py" "$D/$N.pcap"
ls -la "$D/$N.pcap" "$D/$N.txt"
