#!/usr/bin/env bash
# Counts the duplicate pairs in library code (issue 20): the rows of
# `duplicates --seconds 120 --most 200` whose *both* sides are in `crates/*/src/` and in no test
# module. A test module is a file named `tests.rs`, `tests_more.rs` or `*_tests.rs` (this covers
# `flood_tests.rs`), a file that starts with `#![cfg(test)]`, or a file declared as
# `mod NAME;` under a `#[cfg(test)]` attribute (for example `cm_sim.rs`, `test_support.rs`); a
# file declared from inside a test module is one too. A place in a library file's inline
# `#[cfg(test)] mod NAME {` (from that line on: such modules close the file) is test code too.
# Not counted: `crates/*/tests`, examples, C fixtures, lab scripts.
#
# `duplicates` lists at most 200 rows, most shared first: that count is of library pairs among
# those rows, so a pair cut from the library can let one in from below row 200. `--complete`
# counts them all instead: it copies just the library files into a scratch folder (outside git,
# where `duplicates` reads every file) and takes the pair count `duplicates` prints for it. Runs
# that repeat in tests too are rarer there, so a few pairs show that the tree-wide run leaves out
# as "too common to list".
#
# Usage: scripts/dup-count.sh [--list] [--complete]
#   prints the count; with --list, the counted rows before it (with --complete, the first
#   200 of them, after the summary line of `duplicates`).
# Needs `duplicates` (/usr/local/bin, from the tool library) and git.
set -euo pipefail
cd "$(dirname "$0")/.."

list=false
complete=false
for arg in "$@"; do
  case "$arg" in
    --list) list=true ;;
    --complete) complete=true ;;
    *) echo "usage: $0 [--list] [--complete]" >&2; exit 2 ;;
  esac
done

# The directory in which `mod NAME;` in FILE looks for NAME.rs / NAME/mod.rs.
module_dir() {
  local file=$1 base
  base=$(basename "$file" .rs)
  case "$base" in
    lib | main | mod) dirname "$file" ;;
    *) echo "${file%.rs}" ;;
  esac
}

# Every test-module file, by name, by inner attribute, and by `#[cfg(test)] mod NAME;`,
# following `mod NAME;` declarations out of test modules until no new file turns up.
test_modules() {
  local -A seen=()
  local -a todo=()
  local f
  while IFS= read -r f; do
    todo+=("$f")
  done < <(
    git ls-files 'crates/*/src/*.rs' | grep -E '/(tests|tests_more|[a-z0-9_]+_tests)\.rs$' || true
    git ls-files -z 'crates/*/src/*.rs' | xargs -0 grep -l -m1 '^#!\[cfg(test)\]' || true
    git ls-files -z 'crates/*/src/*.rs' | xargs -0 awk '
      FNR == 1 { gated = 0 }
      /^[[:space:]]*#\[cfg\(test\)\]/ { gated = 1; next }
      /^[[:space:]]*#\[/ { next }
      gated && match($0, /mod [a-z0-9_]+;/) {
        name = substr($0, RSTART + 4, RLENGTH - 5)
        print FILENAME "\t" name
      }
      { gated = 0 }' | while IFS=$'\t' read -r parent name; do
        dir=$(module_dir "$parent")
        for c in "$dir/$name.rs" "$dir/$name/mod.rs"; do
          [[ -f $c ]] && echo "$c"
        done
      done
  )
  while ((${#todo[@]})); do
    f=${todo[-1]}
    unset 'todo[-1]'
    [[ -n ${seen[$f]:-} ]] && continue
    seen[$f]=1
    echo "$f"
    local dir name
    dir=$(module_dir "$f")
    while IFS= read -r name; do
      for c in "$dir/$name.rs" "$dir/$name/mod.rs"; do
        [[ -f $c ]] && todo+=("$c")
      done
    done < <(grep -oE '^[[:space:]]*(pub(\([a-z]+\))? )?mod [a-z0-9_]+;' "$f" | sed -E 's/.*mod ([a-z0-9_]+);/\1/')
  done
}

tests_file=$(mktemp)
inline_file=$(mktemp)
scratch=$(mktemp -d)
trap 'rm -rf "$tests_file" "$inline_file" "$scratch"' EXIT
test_modules | sort -u >"$tests_file"
# FILE<TAB>LINE: where the file's inline test module starts.
git ls-files -z 'crates/*/src/*.rs' | xargs -0 awk '
  FNR == 1 { gated = 0; done = 0 }
  done { next }
  /^#\[cfg\(test\)\]/ { gated = FNR; next }
  gated && /^(pub(\([a-z]+\))? )?mod [a-z0-9_]+ \{/ { print FILENAME "\t" gated; done = 1; next }
  /^[[:space:]]*#\[/ { next }
  { gated = 0 }' >"$inline_file"

if $complete; then
  git ls-files 'crates/*/src/*' | grep -vxF -f "$tests_file" | while IFS= read -r f; do
    mkdir -p "$scratch/$(dirname "$f")"
    from=$(awk -F'\t' -v f="$f" '$1 == f { print $2 }' "$inline_file")
    if [[ -n $from ]]; then
      head -n "$((from - 1))" "$f" >"$scratch/$f"
    else
      cp "$f" "$scratch/$f"
    fi
  done
  out=$(duplicates --repo "$scratch" --seconds 120 --most 200)
  if $list; then
    # The summary (how many pairs are alike by shape alone) and the first 200 rows.
    head -n1 <<<"$out"
    grep -E '^D[0-9]+ ' <<<"$out" || true
  fi
  grep -E '^incomplete:' <<<"$out" >&2 || true
  # The first line: "N pairs of places (…)", or "no duplicates (…)".
  head -n1 <<<"$out" | awk '/^no duplicates/ { print 0; exit } { print $1 }'
  exit 0
fi

duplicates --seconds 120 --most 200 | awk -v tests="$tests_file" -v inline="$inline_file" -v list="$list" '
  BEGIN {
    while ((getline t < tests) > 0) test[t] = 1
    while ((getline t < inline) > 0) { split(t, a, "\t"); inline_from[a[1]] = a[2] }
  }
  function library(place,   file, start) {
    file = place
    sub(/:[0-9]+-[0-9]+$/, "", file)
    start = place
    sub(/^.*:/, "", start)
    sub(/-.*$/, "", start)
    if (file in inline_from && start + 0 >= inline_from[file] + 0) return 0
    return file ~ /^crates\/[^\/]+\/src\// && !(file in test)
  }
  /^D[0-9]+ / && library($2) && library($4) {
    n++
    if (list == "true") print
  }
  /^incomplete:/ { print > "/dev/stderr" }
  END { print n + 0 }'
