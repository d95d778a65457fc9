# check.sh: the counters and the check of the test scripts (sourced).
# check NAME CMD...: runs CMD and prints "ok   NAME" or "FAIL NAME"; the
# script ends with [ "$fail" -eq 0 ].
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
