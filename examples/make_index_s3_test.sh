#!/usr/bin/env bash
# make_index_s3_test.sh — make_index on an S3 prefix, run by ctest inside
# tests/s3/server/with_s3_server.sh (s3rver behind the SigV4-checking proxy).
#
# A small ImageFolder-like tree (three classes, mixed endings and cases, a nested folder, a
# class folder with no image, an image beside the classes, a sibling prefix that shares the
# prefix's first letters) is uploaded with conveyor-bench s3-put; make_index then lists it:
#   1. index and classes written locally: their JSON is what the tree says it must be, and
#      conveyor-bench s3-get --index (s3::read_index of the file) reads exactly those objects;
#   2. both uploaded to s3:// URLs in a folder under the prefix itself (where, listed, they
#      would make a class of their own): s3-get --index s3://... reads the same objects back,
#      the classes object is the same JSON, and a second run does not index its own outputs;
#   3. no class filter: objects beside the class folders are indexed too;
#   4. errors: no object has the ending (exit 3, naming the prefix and the filter), an empty
#      prefix (exit 3), a missing bucket (exit 1, naming it), a bad URL (exit 1).
# usage: make_index_s3_test.sh MAKE_INDEX CONVEYOR_BENCH
set -euo pipefail
make_index=${1:?usage: make_index_s3_test.sh MAKE_INDEX CONVEYOR_BENCH}
bench=${2:?usage: make_index_s3_test.sh MAKE_INDEX CONVEYOR_BENCH}
: "${CONVEYOR_TEST_S3_ENDPOINT:?run inside tests/s3/server/with_s3_server.sh}"
export AWS_ACCESS_KEY_ID=$CONVEYOR_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CONVEYOR_TEST_S3_SECRET_KEY
readonly PY=${CONVEYOR_PYTHON:-/usr/bin/python3}
bucket=$CONVEYOR_TEST_S3_BUCKET
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
me=make_index_s3_test

fail() { echo "$me: FAIL: $*" >&2; exit 1; }

# ---- the tree: every file holds its own name, repeated to a size of its own
tree=$work/tree
files=(n01/a.JPEG n01/b.jpeg n01/c.png n01/notes.txt n01/sub/d.JPEG
       n02/e.JPEG n02/f.JPG n02/g.txt
       n03/h.Png
       docs/readme.txt
       top.JPEG)
i=0
for f in "${files[@]}"; do
  mkdir -p "$(dirname "$tree/$f")"
  i=$((i + 1))
  for ((k = 0; k < i * 37; ++k)); do printf '%s\n' "$f"; done > "$tree/$f"
done
# Beside the prefix: "mi/training/" starts like "mi/train" but is not under it.
mkdir -p "$work/training/n01"
echo other > "$work/training/n01/z.JPEG"

common=(--endpoint "$CONVEYOR_TEST_S3_ENDPOINT" --region "$CONVEYOR_TEST_S3_REGION")
"$bench" s3-put "${common[@]}" --bucket "$bucket" --dir "$tree" --prefix mi/train/ --concurrency 4 >/dev/null
"$bench" s3-put "${common[@]}" --bucket "$bucket" --dir "$work/training" --prefix mi/training/ --concurrency 4 >/dev/null

# What make_index must keep with --ext .JPEG .png and --classes (sorted by key).
classed=(n01/a.JPEG n01/b.jpeg n01/c.png n01/sub/d.JPEG n02/e.JPEG n03/h.Png)
size_of() { local s=0 f; for f in "$@"; do s=$((s + $(stat -c %s "$tree/$f"))); done; echo "$s"; }
expect_keys() { # JSON array of mi/train/<each argument>
  "$PY" -c 'import json, sys; print(json.dumps(["mi/train/" + f for f in sys.argv[1:]]))' "$@"
}
same_json() { # same_json WHAT FILE EXPECTED-JSON
  "$PY" - "$1" "$2" "$3" <<'EOF' || exit 1
import json, sys
what, path, expected = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with open(path) as f:
    got = json.load(f)
if got != expected:
    sys.exit("make_index_s3_test: FAIL: %s is\n  %s\nexpected\n  %s" % (what, json.dumps(got), json.dumps(expected)))
print("make_index_s3_test: %s ok" % what)
EOF
}
field() { # field NAME JSON-LINE
  "$PY" -c 'import json, sys; print(json.loads(sys.argv[2])[sys.argv[1]])' "$1" "$2"
}
read_back() { # read_back WHAT INDEX EXPECTED-OBJECTS EXPECTED-BYTES: s3-get reads every key of the index
  local line objects bytes errors
  line=$("$bench" s3-get "${common[@]}" --bucket "$bucket" --index "$2" --concurrency 4 --attempts 1 2>"$work/get.err") ||
    { cat "$work/get.err" >&2; fail "$1: s3-get --index $2 failed"; }
  objects=$(field objects "$line"); bytes=$(field bytes "$line"); errors=$(field errors "$line")
  [[ $objects == "$3" && $bytes == "$4" && $errors == 0 ]] ||
    fail "$1: s3-get read $objects objects, $bytes bytes, $errors errors; expected $3 objects, $4 bytes, 0 errors"
  echo "$me: $1 ok ($objects objects, $bytes bytes read back)"
}
classes_json='{"n01": {"id": 0, "name": "n01"}, "n02": {"id": 1, "name": "n02"}, "n03": {"id": 2, "name": "n03"}}'

# ---- 1. local outputs; the prefix given without its slash
"$make_index" --root "s3://$bucket/mi/train" "${common[@]}" --ext .JPEG .png --workers 2 \
  --index "$work/index.json" --classes "$work/classes.json" 2>"$work/run1.err" || { cat "$work/run1.err" >&2; fail "make_index (local outputs) failed"; }
cat "$work/run1.err"
same_json "index (local)" "$work/index.json" "$(expect_keys "${classed[@]}")"
same_json "classes (local)" "$work/classes.json" "$classes_json"
grep -q "listed ${#files[@]} objects" "$work/run1.err" || fail "the summary does not say ${#files[@]} objects were listed"
grep -q "kept ${#classed[@]} " "$work/run1.err" || fail "the summary does not say ${#classed[@]} objects were kept"
grep -q ", 1 outside the class directories" "$work/run1.err" || fail "the summary does not count top.JPEG as outside the classes"
read_back "round trip (local index)" "$work/index.json" "${#classed[@]}" "$(size_of "${classed[@]}")"

# ---- 2. outputs uploaded under the prefix itself; a second run must not index them
for run in 1 2; do
  "$make_index" --root "s3://$bucket/mi/train/" "${common[@]}" --ext .JPEG .png .json --workers 3 \
    --index "s3://$bucket/mi/train/meta/index.json" --classes "s3://$bucket/mi/train/meta/classes.json" 2>"$work/up.err" ||
    { cat "$work/up.err" >&2; fail "make_index (s3:// outputs, run $run) failed"; }
  read_back "round trip (s3:// index, run $run)" "s3://$bucket/mi/train/meta/index.json" "${#classed[@]}" "$(size_of "${classed[@]}")"
done
cat "$work/up.err"
grep -q "listed $((${#files[@]} + 2)) objects" "$work/up.err" || fail "the second run does not list the tree and its 2 outputs"
grep -q ", 4 without .JPEG, .png, .json, 2 of this run's own outputs, 1 outside the class directories" "$work/up.err" ||
  fail "the second run's summary does not count what it left out and why"
# The uploaded classes object, fetched with AWS's own client.
"$PY" - "$CONVEYOR_TEST_S3_ENDPOINT" "$CONVEYOR_TEST_S3_REGION" "$bucket" mi/train/meta/classes.json > "$work/classes-s3.json" <<'EOF'
import os, sys
import botocore.session
endpoint, region, bucket, key = sys.argv[1:5]
c = botocore.session.get_session().create_client(
    "s3", endpoint_url=endpoint, region_name=region,
    aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"], aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"])
sys.stdout.write(c.get_object(Bucket=bucket, Key=key)["Body"].read().decode())
EOF
same_json "classes (s3://)" "$work/classes-s3.json" "$classes_json"

# The same tree indexed as a directory: the same classes file, byte for byte, and the same
# paths relative to the root.
"$make_index" --root "$tree" --ext .JPEG .png --index "$work/dir-index.json" --classes "$work/dir-classes.json" 2>/dev/null ||
  fail "make_index of the local tree failed"
cmp "$work/dir-classes.json" "$work/classes.json" || fail "the classes files of the directory and of the prefix differ"
"$PY" -c 'import json, sys; print(json.dumps(["mi/train/" + p for p in json.load(open(sys.argv[1]))]))' "$work/dir-index.json" > "$work/dir-keys.json"
same_json "directory index, as keys" "$work/dir-keys.json" "$(expect_keys "${classed[@]}")"

# ---- 3. no classes: everything with the ending, the image beside the classes included
"$make_index" --root "s3://$bucket/mi/train/" "${common[@]}" --ext .jpeg --index "$work/all.json" 2>"$work/run3.err" ||
  { cat "$work/run3.err" >&2; fail "make_index (no classes) failed"; }
same_json "index without classes" "$work/all.json" "$(expect_keys n01/a.JPEG n01/b.jpeg n01/sub/d.JPEG n02/e.JPEG top.JPEG)"

# ---- 4. errors
expect_error() { # expect_error WHAT STATUS PATTERN MAKE_INDEX-ARGS...
  local what=$1 want=$2 pattern=$3 rc=0
  shift 3
  "$make_index" "$@" >"$work/err.out" 2>"$work/err.err" || rc=$?
  [[ $rc == "$want" ]] || { cat "$work/err.err" >&2; fail "$what: exit status $rc, expected $want"; }
  grep -q -- "$pattern" "$work/err.err" || { cat "$work/err.err" >&2; fail "$what: the message does not match '$pattern'"; }
  echo "$me: $what ok (exit $rc): $(tail -n 1 "$work/err.err")"
}
rm -f "$work/none.json"
expect_error "no object with the ending" 3 "none of the .* objects under s3://$bucket/mi/train/ has .tiff, .bmp" \
  --root "s3://$bucket/mi/train/" "${common[@]}" --ext .tiff .bmp --index "$work/none.json"
[[ ! -e $work/none.json ]] || fail "an index was written although nothing matched"
expect_error "an empty prefix" 3 "no objects under s3://$bucket/no/such/prefix/" \
  --root "s3://$bucket/no/such/prefix/" "${common[@]}" --index "$work/none.json"
expect_error "a missing bucket" 1 "no-such-bucket-here" \
  --root "s3://no-such-bucket-here/x/" "${common[@]}" --index "$work/none.json"
expect_error "a bad URL" 1 "s3:/$bucket" --root "s3:/$bucket/x/" "${common[@]}" --index "$work/none.json"
echo "$me: all ok"
