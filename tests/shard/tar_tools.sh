#!/bin/bash
# Shards written by conveyor (through examples/make_shards) read by other tools: GNU tar
# lists and extracts them, Python's tarfile (/usr/bin/python3) extracts the same bytes,
# both agree with the input files; long member names (ustar prefix, pax path over 100 and
# over 255 bytes) come back whole; the bytes are reproducible; shard boundaries follow
# --maxcount and --maxsize; an index of paths with a classes file gives the file's ids;
# and ImageNet's layout (a tar of per-class tars, made here by
# GNU tar) shards to the same bytes as the extracted folder, and with --shuffle to a full
# permutation that is the same for a seed whatever --workers is.
#
#   tar_tools.sh path/to/make_shards
set -euo pipefail
MS=${1:?usage: tar_tools.sh path/to/make_shards}
PY=${CONVEYOR_PYTHON:-/usr/bin/python3}
T=$(mktemp -d "${TMPDIR:-/tmp}/conveyor-tar-tools.XXXXXX")
trap 'chmod -R u+w "$T"; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# An ImageFolder: 3 classes, random sizes, and three names that ustar cannot hold plainly.
$PY - "$T/folder" <<'PY'
import os, random, sys
root = sys.argv[1]
rnd = random.Random(7)
classes = ["n01", "n02", "c" * 120]          # the 120-byte class makes names that need ustar's prefix
for c in classes:
    os.makedirs(os.path.join(root, c))
    for i in range(6):
        with open(os.path.join(root, c, f"{c[:3]}_{i}.JPEG"), "wb") as f:
            f.write(rnd.randbytes(rnd.randint(1, 20000)))
for name in ["p" * 110 + ".JPEG", "q" * 250 + ".JPEG"]:   # pax path: > 100 with no split, > 255
    with open(os.path.join(root, "n02", name), "wb") as f:
        f.write(rnd.randbytes(3000))
PY

"$MS" --folder "$T/folder" --output "$T/a/shard-%06d.tar" --maxcount 5 --index "$T/a/index.json" >/dev/null 2>"$T/log" || { cat "$T/log"; fail "make_shards --folder"; }
"$MS" --folder "$T/folder" --output "$T/a2/shard-%06d.tar" --maxcount 5 --workers 1 >/dev/null 2>>"$T/log"
ls "$T/a"/shard-*.tar >/dev/null || fail "no shards"
for s in "$T/a"/shard-*.tar; do cmp "$s" "$T/a2/$(basename "$s")" || fail "not reproducible: $s"; done
[ -z "$(ls -A "$T/a" | grep -v '^shard-[0-9]*\.tar$' | grep -v '^index.json$')" ] || fail "files left beside the shards: $(ls -A "$T/a")"

# GNU tar lists and extracts; Python's tarfile extracts; both agree with each other.
mkdir -p "$T/gnu" "$T/py"
for s in "$T/a"/shard-*.tar; do
  tar -tvf "$s" >>"$T/listing" || fail "tar -tvf $s"
  tar -xf "$s" -C "$T/gnu" || fail "tar -xf $s"
done
grep -q -- '-r--r--r-- 0/0' "$T/listing" || fail "mode or owner not as written: $(head -2 "$T/listing")"
$PY - "$T/a" "$T/py" <<'PY'
import glob, sys, tarfile
for s in sorted(glob.glob(sys.argv[1] + "/shard-*.tar")):
    with tarfile.open(s) as t:
        t.extractall(sys.argv[2])
PY
diff -r "$T/gnu" "$T/py" >/dev/null || fail "GNU tar and Python extract different trees"

# The extracted samples are the input files (jpg) and their class ids (cls).
$PY - "$T/folder" "$T/gnu" "$T/a" <<'PY'
import glob, json, os, sys, tarfile
folder, out, shards = sys.argv[1:4]
classes = sorted(os.listdir(folder))
n = 0
for cid, c in enumerate(classes):
    for f in os.listdir(os.path.join(folder, c)):
        key = c + "/" + f[: f.rindex(".")]
        with open(os.path.join(folder, c, f), "rb") as a, open(os.path.join(out, key + ".jpg"), "rb") as b:
            assert a.read() == b.read(), key
        with open(os.path.join(out, key + ".cls")) as b:
            assert b.read() == str(cid), key
        n += 1
extracted = sum(len(fs) for _, _, fs in os.walk(out))
assert extracted == 2 * n, (extracted, n)
names = [m.name for s in sorted(glob.glob(shards + "/shard-*.tar")) for m in tarfile.open(s).getmembers()]
assert max(len(x) for x in names) > 255 and any(100 < len(x) <= 255 for x in names)
# The index's offsets are where Python finds each member's data.
idx = json.load(open(shards + "/index.json"))
for sh in idx["shards"]:
    with tarfile.open(os.path.join(shards, sh["url"])) as t:
        members = {m.name: m for m in t.getmembers()}
        assert sh["samples"] == len(sh["entries"]) and sh["bytes"] == os.path.getsize(os.path.join(shards, sh["url"]))
        for e in sh["entries"]:
            for field, ext in e["fields"].items():
                m = members[e["key"] + "." + field]
                assert m.offset_data == ext["offset"] and m.size == ext["size"], (e["key"], field)
assert len(idx["shards"]) == (n + 4) // 5 and all(s["samples"] == 5 for s in idx["shards"][:-1])
PY
[ $? -eq 0 ] || fail "extracted samples differ from the input"

# --maxsize: a shard ends once its data bytes reach the limit (webdataset's ShardWriter).
"$MS" --folder "$T/folder" --output "$T/m/shard-%06d.tar" --maxsize 30000 >/dev/null 2>>"$T/log"
$PY - "$T/m" 30000 <<'PY'
import glob, sys, tarfile
limit = int(sys.argv[2])
shards = sorted(glob.glob(sys.argv[1] + "/shard-*.tar"))
assert len(shards) > 2
for i, s in enumerate(shards):
    sizes = [m.size for m in tarfile.open(s).getmembers()]
    data = sum(sizes)
    if i + 1 < len(shards):
        assert data >= limit, (s, data)                      # full before the next began
    last = sizes[-2] + sizes[-1]                             # its last sample (jpg + cls)
    assert data - last < limit, (s, data, last)              # ...and not full before its last sample
PY
[ $? -eq 0 ] || fail "--maxsize boundaries"

# An index of paths and a classes file (the seeds' formats): ids from the file, not sorted order.
$PY - "$T/folder" <<'PY'
import json, os, sys
root = sys.argv[1]
classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
paths = sorted(os.path.join(c, f) for c in classes for f in os.listdir(os.path.join(root, c)) if not f.startswith("p"))
json.dump(paths, open(root + "/../list.json", "w"))
json.dump({c: {"id": len(classes) - 1 - i, "name": c} for i, c in enumerate(classes)}, open(root + "/../classes.json", "w"))
PY
"$MS" --list "$T/list.json" --root "$T/folder" --classes "$T/classes.json" --output "$T/l/shard-%06d.tar" >/dev/null 2>>"$T/log" || { cat "$T/log"; fail "make_shards --list"; }
$PY - "$T" <<'PY'
import glob, json, sys, tarfile
T = sys.argv[1]
paths = json.load(open(T + "/list.json"))
ids = {c: v["id"] for c, v in json.load(open(T + "/classes.json")).items()}
got = []
for s in sorted(glob.glob(T + "/l/shard-*.tar")):
    with tarfile.open(s) as t:
        for m in t.getmembers():
            if m.name.endswith(".cls"):
                got.append((m.name[:-4], t.extractfile(m).read().decode()))
want = [(p[: p.rindex(".")], str(ids[p.split("/")[0]])) for p in paths]
assert got == want, (got[:3], want[:3])
PY
[ $? -eq 0 ] || fail "--list with a classes file"

# ImageNet's layout: a tar of per-class tars (made by GNU tar), indexed in place.
mkdir -p "$T/classes"
for c in $(ls "$T/folder"); do
  (cd "$T/folder/$c" && tar --format=gnu -cf "$T/classes/$c.tar" $(ls))
done
(cd "$T/classes" && tar -cf "$T/train.tar" $(ls | sort -r))   # outer order is not class order
"$MS" --tar "$T/train.tar" --output "$T/b/shard-%06d.tar" --maxcount 5 >/dev/null 2>>"$T/log" || { cat "$T/log"; fail "make_shards --tar"; }
for s in "$T/a"/shard-*.tar; do cmp "$s" "$T/b/$(basename "$s")" || fail "tar of tars differs from the folder: $s"; done

# Full shuffle: every sample once, in another order, the same bytes for a seed at any --workers.
"$MS" --tar "$T/train.tar" --output "$T/s1/shard-%06d.tar" --maxcount 4 --shuffle --seed 5 --workers 1 >/dev/null 2>>"$T/log"
"$MS" --tar "$T/train.tar" --output "$T/s4/shard-%06d.tar" --maxcount 4 --shuffle --seed 5 --workers 4 >/dev/null 2>>"$T/log"
"$MS" --tar "$T/train.tar" --output "$T/s6/shard-%06d.tar" --maxcount 4 --shuffle --seed 6 --workers 4 >/dev/null 2>>"$T/log"
for s in "$T/s1"/shard-*.tar; do cmp "$s" "$T/s4/$(basename "$s")" || fail "shuffle depends on --workers: $s"; done
$PY - "$T" <<'PY'
import glob, sys, tarfile
T = sys.argv[1]
def samples(d):
    out = []
    for s in sorted(glob.glob(d + "/shard-*.tar")):
        with tarfile.open(s) as t:
            for m in t.getmembers():
                if m.name.endswith(".jpg"):
                    out.append((m.name[:-4], t.extractfile(m).read()))
    return out
plain, s5, s6 = samples(T + "/a"), samples(T + "/s1"), samples(T + "/s6")
assert sorted(plain) == sorted(s5) == sorted(s6)       # every sample once, bytes intact
assert len(set(k for k, _ in s5)) == len(s5)
assert [k for k, _ in s5] != [k for k, _ in plain]     # shuffled
assert [k for k, _ in s5] != [k for k, _ in s6]        # seeds differ
PY
[ $? -eq 0 ] || fail "shuffle"

# A failed run leaves no partial shard under a shard's name, and no temporary file: here
# shard 1 cannot be renamed into place (a folder holds its name; works as root too).
mkdir -p "$T/f/shard-000001.tar"
if "$MS" --folder "$T/folder" --output "$T/f/shard-%06d.tar" --maxcount 5 --workers 1 >/dev/null 2>"$T/flog"; then
  fail "make_shards wrote over a folder"
fi
grep -q "shard-000001.tar" "$T/flog" || fail "the error does not name the shard: $(cat "$T/flog")"
[ -d "$T/f/shard-000001.tar" ] || fail "the folder was replaced"
[ -z "$(ls -A "$T/f" | grep tmp)" ] || fail "temporary files left: $(ls -A "$T/f")"
echo "tar_tools: OK"
