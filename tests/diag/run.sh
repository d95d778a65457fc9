#!/usr/bin/env bash
# Golden diagnostics: every tests/diag/*.model is checked with shardc and its
# stderr and exit status must equal tests/diag/NAME.expected exactly.
# A first line `# ARGS: ...` gives extra flags. `run.sh SHARDC --update`
# rewrites the expectations (review the diff before committing it).
set -u
shardc=$(realpath "$1"); update=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
cd "$here"
pass=0; fail=0
for f in *.model; do
  args=$(sed -n '1s/^# ARGS: //p' "$f")
  # shellcheck disable=SC2086
  out=$("$shardc" check "$f" $args 2>&1 >/dev/null; echo "exit: $?")
  out=${out//$src/\$SRC}
  exp="${f%.model}.expected"
  if [ "$update" = "--update" ]; then
    printf '%s\n' "$out" > "$exp"; continue
  fi
  if [ -f "$exp" ] && [ "$out" = "$(cat "$exp")" ]; then
    pass=$((pass+1))
  else
    fail=$((fail+1))
    echo "FAIL $f"
    diff <(printf '%s\n' "$out") "$exp" | head -20
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
