#!/usr/bin/env bash
# test_timeline.sh SHARDC: `shardc timeline` (compiler/timeline.c) on two
# small synthetic traces in runtime/trace.c's format: the SVG is well-formed
# XML with the expected boxes, microbatch labels, rank labels, bubble figures
# and legend; usage errors exit 2; missing or corrupt traces exit 1 with one
# line. With TIMELINE_PNG=FILE.png set and rsvg-convert (or ImageMagick)
# present, the picture is also rendered there to look at.
#
# Prints one line per check, ends with "N passed, M failed"; exit 1 on failure.
set -u
SHARDC=${1:?usage: test_timeline.sh SHARDC}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0
failn=0
ok() { echo "ok   - $1"; pass=$((pass + 1)); }
bad() { echo "FAIL - $1"; failn=$((failn + 1)); }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

mkdir -p "$T/tr"
# Two pipeline ranks, two steps. Step 1 (the one drawn by default), times in us:
# rank 0 runs 1F1B with full backwards, rank 1 the split backward (B and W),
# so every kind has a box; the pipeline makespan is 1000..1705 = 705 us.
# rank 0 busy 600 us -> bubble 105/705 = 14.9%; rank 1 busy 590 -> 16.3%.
# SHIFT moves a rank's clock (integer us); ORIGIN, when set, is the trace's
# time 0 on the shared monotonic clock (otherData, as runtime/trace.c can
# record it).
SHIFT=0
ORIGIN=
ev() { # name tid ts dur [info]
    local info=""
    [ -n "${5:-}" ] && info=",\"args\":{\"info\":\"$5\"}"
    printf ',\n{"name":"%s","ph":"X","pid":%d,"tid":%d,"ts":%d.000,"dur":%s%s}' "$1" "$R" "$2" \
        $(($3 + SHIFT)) "$4" "$info"
}
head_() {
    local other=""
    [ -n "$ORIGIN" ] && other="\"otherData\":{\"host\":\"node1\",\"clock_origin_monotonic_us\":$ORIGIN.000,\"clock_origin_realtime_us\":1.7e15},"
    printf '{"displayTimeUnit":"ms",%s"traceEvents":[\n' "$other"
    printf '{"name":"process_name","ph":"M","pid":%d,"args":{"name":"rank %d"}}' "$R" "$R"
    printf ',\n{"name":"thread_name","ph":"M","pid":%d,"tid":0,"args":{"name":"compute"}}' "$R"
    printf ',\n{"name":"mark","ph":"i","pid":%d,"tid":0,"ts":5.000}' "$R"
}
rank0() {
    R=0
    head_
    ev forward 0 0 100 "mb 0"
    ev optimizer 0 900 50.000
    ev forward 0 1000 100 "mb 0"
    ev send 2 1100 5 "mb 0"
    ev forward 0 1105 100 "mb 1"
    ev send 2 1205 5 "mb 1"
    ev recv 2 1210 90 "mb 0"
    ev backward 0 1300 200 "mb 0"
    ev recv 2 1500 5 "mb 1"
    ev backward 0 1505 200 "mb 1"
    ev all-reduce 1 1705 45 "gradients"
    ev optimizer 0 1750 50.000
    printf '\n]}\n'
}
rank1() {
    R=1
    head_
    ev forward 0 100 100 "mb 0"
    ev optimizer 0 900 50.000
    ev recv 2 1000 100 "mb 0"
    ev forward 0 1100 100 "mb 0"
    ev backward-input 0 1200 100 "mb 0"
    ev send 2 1300 2 "mb 0"
    ev recv 2 1302 1 "mb 1"
    ev forward 0 1303 100 "mb 1"
    ev backward-input 0 1403 100 "mb 1"
    ev send 2 1503 2 "mb 1"
    ev backward-weight 0 1505 100 "mb 0"
    ev backward-weight 0 1605 90 "mb 1"
    ev all-reduce 1 1705 45 "gradients"
    ev optimizer 0 1750 50.000
    printf '\n]}\n'
}
rank0 >"$T/tr/trace-rank0.json"
rank1 >"$T/tr/trace-rank1.json"
echo "not a trace" >"$T/tr/notes.txt" # other files in DIR are ignored

"$SHARDC" timeline "$T/tr" -o "$T/step1.svg" >"$T/out" 2>"$T/err"
rc=$?
check "timeline exits 0 (got $rc: $(head -c 300 "$T/err"))" "[ $rc -eq 0 ]"
check "it says what it wrote" "grep -q 'wrote .*step1.svg: 2 ranks, step 1' '$T/out'"

# The SVG's structure, read back by an XML parser.
svg_facts() { # FILE -> "boxes labels ranks bubbles legend"
    python3 - "$1" <<'EOF'
import sys, xml.dom.minidom
d = xml.dom.minidom.parse(sys.argv[1])
def cls(e): return e.getAttribute("class").split()
def text(e): return "".join(n.data for n in e.childNodes if n.nodeType == n.TEXT_NODE)
rects = d.getElementsByTagName("rect")
texts = d.getElementsByTagName("text")
boxes = [r for r in rects if "box" in cls(r)]
kinds = sorted({c for r in boxes for c in cls(r) if c != "box"})
labels = sorted(text(t) for t in texts if "mb" in cls(t))
ranks = [text(t) for t in texts if "rank" in cls(t)]
bubbles = [text(t) for t in texts if "bubble" in cls(t)]
legend = [text(t) for t in texts if "legend-label" in cls(t)]
root = d.documentElement
print("boxes=%d" % len(boxes))
print("kinds=%s" % ",".join(kinds))
print("labels=%s" % ",".join(labels))
print("ranks=%s" % "|".join(ranks))
print("bubbles=%s" % "|".join(bubbles))
print("legend=%s" % "|".join(legend))
print("root=%s %s" % (root.tagName, root.getAttribute("xmlns")))
print("ticks=%d" % len([t for t in texts if "tick" in cls(t)]))
print("subtitle=%s" % "".join(text(t) for t in texts if "subtitle" in cls(t)))
EOF
}
if command -v python3 >/dev/null; then
    svg_facts "$T/step1.svg" >"$T/facts" 2>"$T/perr"
    prc=$?
    check "the SVG is well-formed XML ($(tail -1 "$T/perr"))" "[ $prc -eq 0 ]"
    fact() { sed -n "s/^$1=//p" "$T/facts"; }
    check "root is <svg> in the SVG namespace ($(fact root))" \
        "[ '$(fact root)' = 'svg http://www.w3.org/2000/svg' ]"
    check "22 boxes in step 1 (got $(fact boxes))" "[ '$(fact boxes)' = 22 ]"
    check "box kinds ($(fact kinds))" \
        "[ '$(fact kinds)' = 'backward,backward-input,backward-weight,comm,forward,optimizer' ]"
    check "a microbatch number on each pipeline box ($(fact labels))" \
        "[ '$(fact labels)' = '0,0,0,0,0,1,1,1,1,1' ]"
    check "one labelled row per rank ($(fact ranks))" "[ '$(fact ranks)' = 'rank 0|rank 1' ]"
    check "bubble per row: 105/705 and 115/705 ($(fact bubbles))" \
        "[ '$(fact bubbles)' = 'bubble 14.9%|bubble 16.3%' ]"
    check "legend ($(fact legend))" \
        "[ '$(fact legend)' = 'forward|backward|B (input grad)|W (weight grad)|communication|optimizer' ]"
    check "a time scale ($(fact ticks) ticks)" "[ '$(fact ticks)' -ge 4 ]"

    "$SHARDC" timeline "$T/tr" --step 0 -o "$T/step0.svg" >/dev/null 2>"$T/err"
    rc=$?
    check "--step 0 exits 0 (got $rc)" "[ $rc -eq 0 ]"
    svg_facts "$T/step0.svg" >"$T/facts" 2>/dev/null
    check "step 0: 4 boxes (got $(fact boxes))" "[ '$(fact boxes)' = 4 ]"
    check "step 0: bubbles 50% ($(fact bubbles))" "[ '$(fact bubbles)' = 'bubble 50.0%|bubble 50.0%' ]"

    # one file instead of a directory, written to stdout
    "$SHARDC" timeline "$T/tr/trace-rank1.json" -o - >"$T/one.svg" 2>"$T/err"
    rc=$?
    svg_facts "$T/one.svg" >"$T/facts" 2>/dev/null
    check "a single trace file to stdout (rc $rc, $(fact ranks))" "[ $rc -eq 0 ] && [ '$(fact ranks)' = 'rank 1' ]"

    # rank 1's trace started 400 us after rank 0's, so its times read 400 us
    # lower; with the clock origins recorded the picture is the one above
    mkdir -p "$T/clk" "$T/noclk"
    ORIGIN=5000 SHIFT=0
    rank0 >"$T/clk/trace-rank0.json"
    ORIGIN=5400 SHIFT=-400
    rank1 >"$T/clk/trace-rank1.json"
    ORIGIN=
    rank1 >"$T/noclk/trace-rank1.json"
    SHIFT=0
    rank0 >"$T/noclk/trace-rank0.json"
    "$SHARDC" timeline "$T/clk" -o "$T/clk.svg" >/dev/null 2>"$T/err"
    svg_facts "$T/clk.svg" >"$T/facts" 2>/dev/null
    check "clock origins align the ranks ($(fact bubbles))" \
        "[ '$(fact bubbles)' = 'bubble 14.9%|bubble 16.3%' ] && [ '$(fact boxes)' = 22 ]"
    check "the picture says the clocks are aligned" "grep -q 'one clock (monotonic' <<<'$(fact subtitle)'"
    "$SHARDC" timeline "$T/noclk" -o "$T/noclk.svg" >/dev/null 2>"$T/err"
    svg_facts "$T/noclk.svg" >"$T/facts" 2>/dev/null
    check "without origins the picture says the clocks are not aligned ($(fact bubbles))" \
        "grep -q 'not aligned' <<<'$(fact subtitle)' && [ '$(fact bubbles)' != 'bubble 14.9%|bubble 16.3%' ]"
else
    echo "skip - python3 not found: XML checks skipped"
    check "the SVG starts like one" "head -c 200 '$T/step1.svg' | grep -q '<svg'"
fi

# usage errors: exit 2
for args in "" "--bogus $T/tr" "$T/tr $T/tr" "$T/tr --step" "$T/tr --step x" "$T/tr --width 5"; do
    # shellcheck disable=SC2086
    "$SHARDC" timeline $args >/dev/null 2>"$T/err"
    rc=$?
    check "usage error exits 2: timeline $args (got $rc)" "[ $rc -eq 2 ]"
done
"$SHARDC" timeline --help >"$T/out" 2>&1
check "--help exits 0 and shows the usage" "[ $? -eq 0 ] && grep -q 'usage: shardc timeline' '$T/out'"

# missing or malformed traces: exit 1 with one line naming the problem
err1() { # description expected-substring args...
    local what=$1 want=$2
    shift 2
    "$SHARDC" timeline "$@" -o "$T/x.svg" >/dev/null 2>"$T/err"
    local rc=$?
    check "$what exits 1 with one line (rc $rc: $(head -c 200 "$T/err"))" \
        "[ $rc -eq 1 ] && [ \$(wc -l <'$T/err') -eq 1 ] && grep -q -- '$want' '$T/err'"
}
err1 "a missing directory" "cannot read trace directory" "$T/nope"
mkdir -p "$T/empty"
err1 "a directory without traces" "no trace-rank" "$T/empty"
mkdir -p "$T/corrupt" && cp "$T/tr/trace-rank0.json" "$T/corrupt/" && printf '{"traceEvents":[{"ph":"X",' >"$T/corrupt/trace-rank1.json"
err1 "a truncated trace" "trace-rank1.json" "$T/corrupt"
mkdir -p "$T/wrong" && echo '{"events":[]}' >"$T/wrong/trace-rank0.json"
err1 "JSON that is not a trace" "no traceEvents" "$T/wrong"
mkdir -p "$T/badev" && echo '{"traceEvents":[{"name":"forward","ph":"X","ts":"soon","dur":1}]}' >"$T/badev/trace-rank0.json"
err1 "an event without a numeric ts" "traceEvents\[0\]" "$T/badev"
err1 "a step the traces do not hold" "steps 0 to 1" "$T/tr" --step 7

# a picture to look at
if [ -n "${TIMELINE_PNG:-}" ]; then
    if command -v rsvg-convert >/dev/null; then
        rsvg-convert -o "$TIMELINE_PNG" "$T/step1.svg" && echo "rendered $TIMELINE_PNG (rsvg-convert)"
    elif convert -version 2>/dev/null | grep -q ImageMagick; then
        convert "$T/step1.svg" "$TIMELINE_PNG" && echo "rendered $TIMELINE_PNG (ImageMagick)"
    else
        echo "skip - no SVG renderer (apt-get install librsvg2-bin)"
    fi
fi

echo "$pass passed, $failn failed"
[ "$failn" -eq 0 ]
