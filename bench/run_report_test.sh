#!/bin/bash
# conveyor-bench run end to end through its command line: a sweep on the synthetic source
# writes results.jsonl and report.html; the page must parse (tags balanced, each SVG
# well-formed XML, nothing fetched) and carry every figure (tests/bench/report_html_check.py).
# A configuration error must exit with status 2.
#   run_report_test.sh CONVEYOR_BENCH REPORT_HTML_CHECK_PY
set -euo pipefail
bench=$1
check=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$bench" run --set storage.type=synthetic --set storage.latency_ms=5 --set storage.items=100000 \
    --set seconds=0.3 --set stats_interval_ms=20 --set output="$out/report" \
    --sweep in_flight=1,4,16 > "$out/stdout.jsonl" 2> "$out/stderr.txt"
cat "$out/stderr.txt"
# One line per point's epoch, one per point, one summary; the same in results.jsonl.
test "$(wc -l < "$out/stdout.jsonl")" -eq 7
cmp "$out/stdout.jsonl" "$out/report/results.jsonl"
grep -q '"bench":"run-sweep","field":"in_flight"' "$out/stdout.jsonl"
grep -q 'knee' "$out/stderr.txt"
"${CONVEYOR_PYTHON:-/usr/bin/python3}" "$check" --file "$out/report/report.html" --ids throughput,latency-cdf,shares,sweep,summary,config,machine

set +e
"$bench" run --set storage.type=fs --set storage.dirs=/no/such/dir/here > /dev/null 2> "$out/err.txt"
rc=$?
set -e
test "$rc" -eq 2 || { echo "expected exit status 2 for a configuration error, got $rc"; exit 1; }
grep -q 'no such directory' "$out/err.txt"
echo "run_report_test: ok"
