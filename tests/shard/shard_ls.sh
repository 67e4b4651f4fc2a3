#!/bin/bash
# examples/shard_ls against Python's tarfile: shards made here by GNU tar (one of them
# gzip-compressed, one with a pax long name) listed by shard_ls give, per sample, the key,
# the shard and each field's size and SHA-256 that tarfile and hashlib compute, grouped by
# webdataset's rule; a dataset index lists the same; a missing shard fails naming it, or,
# with --skip-errors, is skipped and counted.
#
#   shard_ls.sh path/to/shard_ls
set -euo pipefail
LS=${1:?usage: shard_ls.sh path/to/shard_ls}
PY=${CONVEYOR_PYTHON:-/usr/bin/python3}
T=$(mktemp -d "${TMPDIR:-/tmp}/conveyor-shard-ls.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

$PY - "$T" <<'PY'
import os, random, sys
root = sys.argv[1]
rnd = random.Random(3)
for s in range(3):
    d = os.path.join(root, f"in{s}")
    os.makedirs(d)
    for k in range(5):
        key = f"s{s}_{k}" if not (s == 1 and k == 2) else "L" * 150
        for field, n in (("jpg", rnd.randint(1, 30000)), ("cls", 1), ("seg.png", rnd.randint(0, 700))):
            with open(os.path.join(d, f"{key}.{field}"), "wb") as f:
                f.write(rnd.randbytes(n))
PY
for s in 0 1 2; do
  (cd "$T/in$s" && ls | sort | tar --format=pax -cf "$T/shard-$s.tar" -T -)
done
gzip -n "$T/shard-2.tar"

$PY - "$T" > "$T/expected.jsonl" <<'PY'
import hashlib, json, sys, tarfile
root = sys.argv[1]
for url in (f"{root}/shard-0.tar", f"{root}/shard-1.tar", f"{root}/shard-2.tar.gz"):
    with tarfile.open(url) as tf:
        cur = None
        for m in tf.getmembers():
            key, field = m.name.split(".", 1)
            data = tf.extractfile(m).read()
            if cur is None or cur["key"] != key:
                if cur: print(json.dumps(cur, separators=(",", ":")))
                cur = {"key": key, "url": url, "fields": []}
            cur["fields"].append({"name": field, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        print(json.dumps(cur, separators=(",", ":")))
PY

"$LS" "$T/shard-{0..1}.tar" "$T/shard-2.tar.gz" > "$T/got.jsonl" 2> "$T/err.txt" || { cat "$T/err.txt"; fail "shard_ls failed"; }
$PY - "$T/expected.jsonl" "$T/got.jsonl" <<'PY' || fail "shard_ls and tarfile disagree"
import json, sys
exp = [json.loads(l) for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
assert len(exp) == 15, len(exp)
assert exp == got, (exp[:2], got[:2])
PY
grep -q "15 samples" "$T/err.txt" || fail "no summary: $(cat "$T/err.txt")"

# A missing shard: an error naming it; with --skip-errors, skipped and counted.
if "$LS" "$T/shard-0.tar" "$T/nope.tar" > /dev/null 2> "$T/err2.txt"; then fail "a missing shard did not fail"; fi
grep -q "nope.tar" "$T/err2.txt" || fail "the error does not name the shard: $(cat "$T/err2.txt")"
"$LS" --skip-errors "$T/shard-0.tar" "$T/nope.tar" > "$T/got2.jsonl" 2> "$T/err3.txt" || fail "--skip-errors failed"
[ "$(wc -l < "$T/got2.jsonl")" = 5 ] || fail "--skip-errors: expected shard-0's 5 samples"
grep -q "1 shard(s) skipped" "$T/err3.txt" || fail "--skip-errors: no count: $(cat "$T/err3.txt")"
echo "shard_ls.sh: ok"
