#!/usr/bin/env bash
# Golden diagnostics: every tests/diag/*.model is checked with shardc and its
# stderr and exit status must equal tests/diag/NAME.expected exactly.
#
#   run.sh SHARDC                 run every test
#   run.sh SHARDC NAME...         run only these (NAME or NAME.model)
#   run.sh SHARDC --update [NAME...]
#                                 rewrite the expectations (review the diff
#                                 before committing it)
#
# A first line `# ARGS: ...` gives extra flags. Helper modules that are not
# tests themselves live in tests/diag/modules/. The source directory is
# written as $SRC in the expectations, so they do not depend on the checkout.
# A crash, an internal compiler error or a clean exit is never a good golden
# output: such a test fails even under --update.
set -u
if [ $# -lt 1 ]; then
  echo "usage: $0 SHARDC [--update] [NAME...]" >&2
  exit 2
fi
shardc=$(realpath "$1"); shift
update=
if [ "${1:-}" = "--update" ]; then update=1; shift; fi
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
cd "$here"
# the output must not depend on the caller's environment
unset SHARDC_STDLIB
export LC_ALL=C

if [ $# -gt 0 ]; then
  tests=()
  for n in "$@"; do tests+=("${n%.model}.model"); done
else
  tests=(*.model)
fi

pass=0; fail=0; updated=0
for f in "${tests[@]}"; do
  if [ ! -f "$f" ]; then
    echo "FAIL $f: no such test"; fail=$((fail+1)); continue
  fi
  args=$(sed -n '1s/^# ARGS: //p' "$f")
  # shellcheck disable=SC2086
  out=$(timeout 20 "$shardc" check "$f" $args 2>&1 >/dev/null; echo "exit: $?")
  out=${out//$src/\$SRC}
  status=${out##*exit: }
  bad=
  case "$status" in
    0) bad="shardc accepted an invalid program" ;;
    1|2) ;;
    124) bad="shardc timed out" ;;
    *) bad="shardc crashed (exit $status)" ;;
  esac
  if [[ "$out" == *"internal compiler error"* ]]; then bad="internal compiler error"; fi
  exp="${f%.model}.expected"
  if [ -n "$bad" ]; then
    fail=$((fail+1))
    echo "FAIL $f: $bad"
    printf '%s\n' "$out" | head -20
    continue
  fi
  if [ -n "$update" ]; then
    if [ ! -f "$exp" ] || [ "$out" != "$(cat "$exp")" ]; then
      printf '%s\n' "$out" > "$exp"
      echo "updated $exp"
      updated=$((updated+1))
    fi
    pass=$((pass+1))
    continue
  fi
  if [ -f "$exp" ] && [ "$out" = "$(cat "$exp")" ]; then
    pass=$((pass+1))
  else
    fail=$((fail+1))
    if [ -f "$exp" ]; then
      echo "FAIL $f (< got, > expected)"
      diff <(printf '%s\n' "$out") "$exp" | head -20
    else
      echo "FAIL $f: no $exp (run with --update, then review it)"
    fi
  fi
done

# an expectation without its test is stale
if [ $# -eq 0 ]; then
  for e in *.expected; do
    [ -e "$e" ] || continue
    if [ ! -f "${e%.expected}.model" ]; then
      echo "FAIL $e: no ${e%.expected}.model"
      fail=$((fail+1))
    fi
  done
fi

[ -n "$update" ] && echo "$updated expectation(s) rewritten"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
