#!/usr/bin/env bash
# s3_smoke_test.sh — a smoke test of conveyor-bench's S3 subcommands, run by ctest inside
# tests/s3/server/with_s3_server.sh (s3rver behind the SigV4-checking proxy): s3-put
# uploads a small generated file set, s3-get reads it back by prefix and by index, and the
# counts and byte totals in their JSON lines must agree with the files.
# usage: s3_smoke_test.sh CONVEYOR_BENCH
set -euo pipefail
bench=${1:?usage: s3_smoke_test.sh CONVEYOR_BENCH}
: "${CONVEYOR_TEST_S3_ENDPOINT:?run inside tests/s3/server/with_s3_server.sh}"
export AWS_ACCESS_KEY_ID=$CONVEYOR_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CONVEYOR_TEST_S3_SECRET_KEY
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$bench" gen-files --dir "$work/files" --count 60 --classes 3 --mean-bytes 20000 --write-index "$work/index.json" 2>/dev/null
files=$(find "$work/files" -type f | wc -l)
bytes=$(find "$work/files" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
common=(--endpoint "$CONVEYOR_TEST_S3_ENDPOINT" --bucket "$CONVEYOR_TEST_S3_BUCKET" --region "$CONVEYOR_TEST_S3_REGION")

field() { # field NAME JSON-LINE
  "${CONVEYOR_PYTHON:-/usr/bin/python3}" -c 'import json, sys; print(json.loads(sys.argv[2])[sys.argv[1]])' "$1" "$2"
}
check() { # check WHAT JSON-LINE
  local objects got_bytes errors
  objects=$(field objects "$2"); got_bytes=$(field bytes "$2"); errors=$(field errors "$2")
  if [[ "$objects" != "$files" || "$got_bytes" != "$bytes" || "$errors" != 0 ]]; then
    echo "s3_smoke_test: $1: $objects objects, $got_bytes bytes, $errors errors; expected $files objects, $bytes bytes, 0 errors" >&2
    echo "$2" >&2
    exit 1
  fi
  echo "s3_smoke_test: $1 ok ($objects objects, $got_bytes bytes)"
}

put=$("$bench" s3-put "${common[@]}" --dir "$work/files" --prefix smoke/ --concurrency 8)
check s3-put "$put"
get=$("$bench" s3-get "${common[@]}" --prefix smoke/ --concurrency 16)
check "s3-get --prefix" "$get"
verified=$(field checksums_verified "$get")
[[ "$verified" == "$files" ]] || { echo "s3_smoke_test: s3-get verified $verified checksums, expected $files" >&2; echo "$get" >&2; exit 1; }
get=$("$bench" s3-get "${common[@]}" --index "$work/index.json" --prefix smoke/ --concurrency 16 --ordered)
check "s3-get --index" "$get"
get=$("$bench" s3-get "${common[@]}" --prefix smoke/ --concurrency 16 --no-checksums)
check "s3-get --no-checksums" "$get"
[[ $(field checksums_verified "$get") == 0 && $(field checksums "$get") == off ]] ||
  { echo "s3_smoke_test: --no-checksums still verified checksums" >&2; echo "$get" >&2; exit 1; }
# An object altered at rest (the checksum the store keeps no longer matches): fetched twice,
# then named in the error; with --on-error skip, counted and skipped.
first_key=$("${CONVEYOR_PYTHON:-/usr/bin/python3}" -c 'import json, sys; print(json.load(open(sys.argv[1]))[0])' "$work/index.json")
curl -fsS -X POST "$CONVEYOR_TEST_S3_ENDPOINT/__conveyor/checksums" \
  -d "{\"bucket\": \"$CONVEYOR_TEST_S3_BUCKET\", \"key\": \"smoke/$first_key\", \"algorithm\": \"crc32c\", \"value\": \"AAAAAA==\"}" >/dev/null
echo "[\"smoke/$first_key\"]" > "$work/altered.json"
if "$bench" s3-get "${common[@]}" --index "$work/altered.json" >"$work/altered.out" 2>"$work/altered.err"; then
  echo "s3_smoke_test: s3-get of an object failing its checksum exited 0" >&2
  exit 1
fi
grep -q "smoke/$first_key.*checksum" "$work/altered.err" ||
  { echo "s3_smoke_test: the checksum error does not name the object:" >&2; cat "$work/altered.err" >&2; exit 1; }
"$bench" s3-get "${common[@]}" --index "$work/altered.json" --on-error skip >"$work/altered.out" 2>"$work/altered.err" || true
[[ $(field errors "$(tail -1 "$work/altered.out")") == 1 && $(field checksum_failures "$(tail -1 "$work/altered.out")") == 2 ]] ||
  { echo "s3_smoke_test: --on-error skip did not count the object" >&2; cat "$work/altered.out" "$work/altered.err" >&2; exit 1; }
echo "s3_smoke_test: checksums verified, and an altered object named ok"
# A key that does not exist: counted as an error, and the exit status says so.
echo '["smoke/no-such-key"]' > "$work/missing.json"
if "$bench" s3-get "${common[@]}" --index "$work/missing.json" --attempts 1 >"$work/missing.out" 2>"$work/missing.err"; then
  echo "s3_smoke_test: s3-get of a missing key exited 0" >&2
  exit 1
fi
grep -q "NoSuchKey" "$work/missing.err" || { echo "s3_smoke_test: no NoSuchKey in s3-get's error output:" >&2; cat "$work/missing.err" >&2; exit 1; }
echo "s3_smoke_test: missing key reported ok"
