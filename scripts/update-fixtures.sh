#!/usr/bin/env bash
# Regenerates tshark's decode of every capture in fixtures/captures/:
# - fixtures/tshark/*.tsv: one row per RoCEv2 frame, one column per InfiniBand field tshark
#   decoded (columns empty in a whole capture are dropped to keep the files small);
# - fixtures/tshark-text/*.txt: `tshark -V` of the MAD frames (the labelled tree the CM tests
#   compare label by label).
# Tests compare our decoder against these; they never run tshark themselves.
#
# Needs tshark (Debian: apt-get install tshark) and python3. Made with tshark 4.0.17.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v tshark >/dev/null || { echo "update-fixtures: tshark not found (apt-get install tshark)" >&2; exit 1; }

# Every infiniband.* field this tshark knows except the byte dumps of whole headers and of the
# MAD data (large, and covered field by field).
mapfile -t FIELDS < <(tshark -G fields 2>/dev/null | awk -F'\t' '
  $1 == "F" && $3 ~ /^infiniband\.(bth|deth|reth|aeth|atomiceth|atomicacketh|immdt|ieth|invariant|mad|cm)\./ {
    if ($3 == "infiniband.mad.data" || $3 == "infiniband.cm.req.ip_cm") next
    print $3
  }
  $1 == "F" && $3 == "infiniband.cm.req" { print $3 }
  $1 == "F" && $3 == "infiniband.cm.rep" { print $3 }')
ARGS=(-e frame.number -e ip.src -e ip.dst -e udp.srcport -e udp.dstport)
for f in "${FIELDS[@]}"; do ARGS+=(-e "$f"); done

for cap in fixtures/captures/*.pcap fixtures/captures/*.pcapng; do
  out="fixtures/tshark/$(basename "$cap").tsv"
  tshark -r "$cap" -Y infiniband -T fields -E header=y -E separator=/t -E occurrence=a \
      -E aggregator=, "${ARGS[@]}" 2>/dev/null |
    python3 -c '
import sys
rows = [l.rstrip("\n").split("\t") for l in sys.stdin]
if not rows:
    sys.exit(0)
keep = [i for i in range(len(rows[0])) if i == 0 or any(len(r) > i and r[i] for r in rows[1:])]
for r in rows:
    print("\t".join(r[i] if i < len(r) else "" for i in keep))
' > "$out"
  echo "$out: $(($(wc -l < "$out") - 1)) frames, $(wc -c < "$out") bytes"
done
for cap in fixtures/captures/*.pcap; do
  out="fixtures/tshark-text/$(basename "$cap" .pcap).txt"
  # g_tools (1,000+ CM MADs, 4.6 MB of text) is covered field by field by its .tsv instead.
  case "$cap" in *g_tools.pcap) continue ;; esac
  tshark -r "$cap" -V -Y infiniband.mad 2>/dev/null > "$out"
  [ -s "$out" ] || rm -f "$out"
done
echo "tshark: $(tshark --version | head -1)" > fixtures/tshark/VERSION
