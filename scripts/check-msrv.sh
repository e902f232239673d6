#!/usr/bin/env bash
# Fails if a locked dependency declares a higher `rust-version` than the workspace does, or if
# the README's "Rust ≥ X" is not the workspace's rust-version. Reads `cargo metadata` (the resolved graph of Cargo.lock,
# every platform and dev-dependencies included, since `cargo test` builds those too).
# Needs cargo and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
"${CARGO:-cargo}" metadata --format-version 1 --locked | python3 -c '
import json, sys

def ver(s):
    # "1.85" and "1.85.0" are the same version: pad to three parts.
    t = [int(x) for x in s.split(".")]
    return tuple(t + [0] * (3 - len(t)))

m = json.load(sys.stdin)
members = set(m["workspace_members"])
used = {n["id"] for n in m["resolve"]["nodes"]}
pkgs = [p for p in m["packages"] if p["id"] in used]
ours = {p["rust_version"] for p in pkgs if p["id"] in members}
if len(ours) != 1 or None in ours:
    sys.exit(f"check-msrv: workspace members must all declare one rust-version, found {sorted(map(str, ours))}")
ws = ours.pop()
over = sorted(
    (ver(p["rust_version"]), p["name"], p["version"], p["rust_version"])
    for p in pkgs
    if p["id"] not in members and p.get("rust_version") and ver(p["rust_version"]) > ver(ws)
)
if over:
    for _, name, v, rv in over:
        print(f"check-msrv: {name} {v} needs Rust {rv}", file=sys.stderr)
    sys.exit(f"check-msrv: the workspace declares rust-version = \"{ws}\" (Cargo.toml); raise it to {over[-1][3]} and the README with it, or lock older versions")
readme = open("README.md", encoding="utf-8").read()
if f"Rust ≥ {ws}" not in readme:
    sys.exit(f"check-msrv: README.md does not say \"Rust ≥ {ws}\" (the workspace rust-version)")
top = max((ver(p["rust_version"]), p["rust_version"]) for p in pkgs if p.get("rust_version"))
print(f"check-msrv: rust-version {ws}; highest declared by a locked dependency: {top[1]}")
'
