#!/usr/bin/env bash
# s3_smoke_test.sh — a smoke test of conveyor-bench's S3 subcommands, run by ctest inside
# tests/s3/server/with_s3_server.sh (s3rver behind the SigV4-checking proxy): s3-put
# uploads a small generated file set, s3-get reads it back by prefix and by index, and the
# counts and byte totals in their JSON lines must agree with the files; pipeline reads two
# tar shards of JPEGs from the bucket for two epochs.
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
# pipeline over s3:// shards (--endpoint, --timeout-ms): two epochs in one process, each
# delivering every sample, with the S3 client's counters and the process's state per epoch.
if "${CONVEYOR_PYTHON:-/usr/bin/python3}" -c 'import PIL' 2>/dev/null; then
  mkdir -p "$work/shards"
  "${CONVEYOR_PYTHON:-/usr/bin/python3}" - "$work/shards" <<'PY'
import io, sys, tarfile
from PIL import Image
for s in range(2):
    with tarfile.open("%s/shard-%06d.tar" % (sys.argv[1], s), "w", format=tarfile.USTAR_FORMAT) as t:
        for i in range(10):
            jpg = io.BytesIO()
            Image.new("RGB", (64, 48), (20 * i, 100, 40 * s)).save(jpg, "JPEG")
            for ext, data in (("jpg", jpg.getvalue()), ("cls", str(i % 3).encode())):
                info = tarfile.TarInfo("s%d-%02d.%s" % (s, i, ext))
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
PY
  "$bench" s3-put "${common[@]}" --dir "$work/shards" --prefix smoke-shards/ --concurrency 2 >/dev/null
  "$bench" pipeline "s3://$CONVEYOR_TEST_S3_BUCKET/smoke-shards/shard-{000000..000001}.tar" \
    --endpoint "$CONVEYOR_TEST_S3_ENDPOINT" --region "$CONVEYOR_TEST_S3_REGION" --timeout-ms 5000 \
    --epochs 2 --batch 8 --size 32 --threads 1 --decode-only 0 >"$work/pipeline.out" 2>"$work/pipeline.err" ||
    { echo "s3_smoke_test: pipeline over s3:// shards failed" >&2; cat "$work/pipeline.err" >&2; exit 1; }
  "${CONVEYOR_PYTHON:-/usr/bin/python3}" - "$work/pipeline.out" <<'PY' || { cat "$work/pipeline.out" >&2; exit 1; }
import json, sys
epochs = [json.loads(l) for l in open(sys.argv[1]) if '"bench":"pipeline","engine"' in l]
assert [e["epoch"] for e in epochs] == [0, 1], epochs
for e in epochs:
    assert e["images"] == 20, e
    assert e["requests"] >= 2 and e["retries"] == 0 and e["checksums_verified"] == 2, e
    assert e["fds_end"] > 0 and e["threads_end"] > 0 and e["rss_end_mb"] > 0 and e["pool_idle_mb"] >= 0, e
print("s3_smoke_test: pipeline over s3:// shards ok (2 epochs of 20 samples, %d requests)" % sum(e["requests"] for e in epochs))
PY
else
  echo "s3_smoke_test: pipeline over s3:// shards skipped: ${CONVEYOR_PYTHON:-/usr/bin/python3} has no PIL (Debian's python3-pil)"
fi
