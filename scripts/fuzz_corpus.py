#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (see scripts/fuzz.sh and CONTRIBUTING.md's Fuzzing).

Usage: fuzz_corpus.py OUT_DIR

Seeds come from three places: files of the Debian package golang-1.19-src (Go's tar test
archives, valid and malformed, and its JPEG and PNG test images, also written as WebP by
PIL and as AVIF by avifenc, where they are installed: python3-pil, libavif-bin), AWS's SigV4 test suite
beside the checkout (../shared/testdata/aws-sigv4-suite, when present), and small inputs
made here (a pax header, a GNU long name, webdataset shards, S3 replies, AWS config
files, HTTP responses...). Nothing is copied into the repository: OUT_DIR/<target>/ is
rebuilt on each run (the fuzzers' own finds go to another directory; see scripts/fuzz.sh).
"""
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

GO = Path("/usr/share/go-1.19/src")
ROOT = Path(__file__).resolve().parent.parent
SIGV4_SUITE = ROOT.parent / "shared" / "testdata" / "aws-sigv4-suite"


class Corpus:
    def __init__(self, out: Path):
        self.out = out
        self.counts = {}

    def add(self, target: str, data: bytes):
        d = self.out / target
        d.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha1(data).hexdigest()
        (d / name).write_bytes(data)
        self.counts[target] = self.counts.get(target, 0) + 1


def tar_bytes(members, fmt=tarfile.PAX_FORMAT, pax_headers=None):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, pax_headers=pax_headers or {}) as t:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            else:
                if kind == tarfile.SYMTYPE:
                    info.linkname = "target"
                t.addfile(info)
    return buf.getvalue()


def hand_made_tars():
    wds = [("n01440764/img_0001.jpg", b"\xff\xd8jpegbytes\xff\xd9", tarfile.REGTYPE),
           ("n01440764/img_0001.cls", b"0", tarfile.REGTYPE),
           ("n01440764/img_0001.json", b'{"label": 0}', tarfile.REGTYPE),
           ("n01440764/img_0002.jpg", b"x" * 700, tarfile.REGTYPE),
           ("n01440764/img_0002.cls", b"1", tarfile.REGTYPE)]
    long_name = "d" * 120 + "/sample.with.dots.seg.png"
    yield tar_bytes(wds, tarfile.USTAR_FORMAT)
    yield tar_bytes(wds, tarfile.GNU_FORMAT)
    yield tar_bytes(wds, tarfile.PAX_FORMAT)
    # GNU long names ('L' members) and a pax header with a path and a size.
    yield tar_bytes([(long_name, b"long", tarfile.REGTYPE), ("short.txt", b"", tarfile.REGTYPE)], tarfile.GNU_FORMAT)
    yield tar_bytes([(long_name, b"long", tarfile.REGTYPE), ("dir", b"", tarfile.DIRTYPE),
                     ("link", b"", tarfile.SYMTYPE)], tarfile.PAX_FORMAT, {"comment": "global"})
    yield tar_bytes([("é/ünïcode.txt", b"utf8", tarfile.REGTYPE)], tarfile.PAX_FORMAT)
    # Metadata members webdataset leaves out, and names without a field.
    yield tar_bytes([("__key__", b"k", tarfile.REGTYPE), ("__meta__/x.json", b"{}", tarfile.REGTYPE),
                     ("noext", b"n", tarfile.REGTYPE), ("a/.hidden.txt", b"h", tarfile.REGTYPE)], tarfile.USTAR_FORMAT)
    whole = tar_bytes(wds, tarfile.USTAR_FORMAT)
    yield whole[: len(whole) - 1024]  # without its end-of-archive marker
    yield whole[:700]                  # cut inside a member
    yield b"\0" * 1024                 # an empty archive


def add_tars(c: Corpus):
    tars = []
    for p in sorted((GO / "archive/tar/testdata").glob("*.tar")):
        tars.append(p.read_bytes())
    tars.extend(hand_made_tars())
    for t in tars:
        c.add("tar", t)
        c.add("tar_gzip", gzip.compress(t, mtime=0))
    # gzip's framing: two members make one stream; zeros after the last are padding.
    first, second = tars[-10], tars[-9]
    c.add("tar_gzip", gzip.compress(first[:1024], mtime=0) + gzip.compress(first[1024:], mtime=0))
    c.add("tar_gzip", gzip.compress(second, mtime=0) + b"\0" * 512)
    c.add("tar_gzip", gzip.compress(second, mtime=0)[:-8])  # no trailer
    for t in tars:  # the names, one per line
        try:
            with tarfile.open(fileobj=io.BytesIO(t)) as f:
                names = [m.name for m in f.getmembers()]
        except Exception:
            continue
        if names:
            c.add("samples", "\n".join(names).encode("utf-8", "surrogateescape"))
    c.add("samples", b"a/b.jpg\na/b.cls\na/b.seg.png\nc.d/e.jpg\na/.x.jpg\n.x.jpg\n__key__\n__meta__/x\nnoext\nA/B.JPG\na/b.jpg")
    c.add("samples", b"\x01train/n01440764_10026.JPEG\ntrain/n01440764_10026.CLS\ntrain/n01440764_10027.jpeg")


def add_indexes(c: Corpus):
    index = {"format": "conveyor-shard-index", "version": 1, "shards": [
        {"url": "shard-000000.tar", "samples": 2, "bytes": 12288, "entries": [
            {"key": "n01440764_10026", "offset": 0, "size": 5120,
             "fields": {"jpg": {"offset": 512, "size": 3412}, "cls": {"offset": 4608, "size": 1}}},
            {"key": "n01440764_10027", "offset": 5120, "size": 2048,
             "fields": {"jpg": {"offset": 5632, "size": 100}}}]},
        {"url": "s3://bucket/shard-000001.tar", "samples": 0, "bytes": 1024, "entries": []}]}
    c.add("index_json", json.dumps(index).encode())
    c.add("index_json", json.dumps(index, indent=1).encode())
    c.add("index_json", b'{"format": "conveyor-shard-index", "version": 1, "shards": []}')
    c.add("index_json", json.dumps(["n01440764/a.JPEG", "n01443537/b.JPEG", "c.jpg", "d/../e.jpg"]).encode())
    c.add("index_json", b'["a", "b/c", "\\u00e9.jpg"]')
    c.add("index_json", b"[]")


def add_labels(c: Corpus):
    c.add("labels", json.dumps({str(i): (i * 7) % 1000 for i in range(20)}).encode())
    c.add("labels", json.dumps({"ILSVRC2012_val_00000001": 65, "ILSVRC2012_val_00000003": 230}).encode())
    c.add("labels", json.dumps({"n01440764": {"id": 0, "name": "tench"}, "n01443537": {"id": 1, "name": "goldfish"}}).encode())
    c.add("labels", b'{"label": 3, "annotations": [{"class": 2}], "a/b": [5]}')
    c.add("labels", b"7")


def add_aws_config(c: Corpus):
    config = (b"[default]\nregion = eu-west-1\ns3 =\n  endpoint_url = http://127.0.0.1:9000\n  addressing_style = path\n"
              b"[profile dev]\nrole_arn = arn:aws:iam::123456789012:role/r\nsource_profile = default\n"
              b"[profile a]\ncredential_process = /bin/true\nregion=us-east-2 # comment\n")
    creds = (b"[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = secret\n"
             b"; comment\n[dev]\naws_access_key_id=AKID2\naws_secret_access_key=s2\naws_session_token=t\n")
    c.add("aws_config", config + b"\n\x1f\n" + creds)
    c.add("aws_config", b"\xef\xbb\xbf[default]\nregion = us-west-2\n\n\x1f\n" + creds)
    c.add("aws_config", b"[profile dev]\nweb_identity_token_file = /tmp/token\nrole_arn = arn:aws:iam::1:role/x\n")
    c.add("aws_config", json.dumps({"aws_access_key_id": "AKID", "aws_secret_access_key": "s",
                                    "bucket_name": "b", "endpoint_url": "http://localhost:9000"}).encode())


def add_sigv4(c: Corpus):
    if SIGV4_SUITE.is_dir():
        for req in sorted(SIGV4_SUITE.glob("*/request.txt")):
            lines = req.read_bytes().split(b"\n")
            first = lines[0].split(b" ")
            method, target = first[0], b" ".join(first[1:-1]) if len(first) > 2 else b"/"
            path, _, query = target.partition(b"?")
            headers = [l for l in lines[1:] if l and b":" in l or l.startswith(b" ")]
            c.add("sigv4", b"\n".join([method, path, query] + headers))
    c.add("sigv4", b"GET\n/bucket/a%20b/c.jpg\nlist-type=2&prefix=a%2Fb&continuation-token=x+y\n"
                   b"Host:bucket.s3.amazonaws.com\nRange:bytes=0-99\nx-amz-meta-a:  b   c ")
    c.add("sigv4", b"PUT\n/./a/../b//c\nb=2&a=1&a&%zz=%\nhost:h\nX-Amz-Date:20150830T123600Z")


def add_s3_xml(c: Corpus):
    listing = (b'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
               b"<Name>bucket</Name><Prefix>train/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>"
               b"<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
               b"<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
               b"<Contents><Key>train/a+b%2F.tar</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified>"
               b"<ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag><Size>434234</Size>"
               b"<StorageClass>STANDARD</StorageClass></Contents>"
               b"<Contents><Key>train/c.tar</Key><Size>0</Size></Contents>"
               b"<CommonPrefixes><Prefix>train/sub/</Prefix></CommonPrefixes></ListBucketResult>")
    error = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchKey</Code>'
             b"<Message>The resource you requested does not exist</Message><Resource>/bucket/key</Resource>"
             b"<RequestId>4442587FB7D0A2F9</RequestId></Error>")
    initiate = (b'<?xml version="1.0" encoding="UTF-8"?>\n<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>'
                b"<UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId></InitiateMultipartUploadResult>")
    complete = (b"<CompleteMultipartUploadResult><Location>http://b.s3.amazonaws.com/k</Location><Bucket>b</Bucket>"
                b"<Key>k</Key><ETag>&quot;3858f62230ac3c915f300c664312c11f-9&quot;</ETag></CompleteMultipartUploadResult>")
    for which, body in [(0, listing), (1, error), (6, b"<html><body>502 Bad Gateway</body></html>"), (2, initiate),
                        (3, complete), (3, error), (4, b'"etag1"\n"etag<&>2"\n\x01')]:
        c.add("s3_xml", bytes([which]) + body)
    c.add("s3_xml", bytes([0]) + b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><ListBucketResult>&a;</ListBucketResult>')


def add_http(c: Corpus):
    responses = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"x\"\r\n\r\nhello",
        b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-4/10\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nx-amz-checksum-crc32: AAAAAA==\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nuntil the connection closes",
        b"HTTP/1.1 404 Not Found\r\nContent-Type: application/xml\r\nContent-Length: 62\r\n\r\n"
        b"<Error><Code>NoSuchKey</Code><Message>no</Message></Error>\r\n\r\n",
        b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
    ]
    for r in responses:
        c.add("http_response", r)


def add_images(c: Corpus):
    for p in sorted((GO / "image/testdata").glob("*")):
        if p.suffix == ".jpeg":
            c.add("jpeg", p.read_bytes())
        elif p.suffix == ".png":
            c.add("png", p.read_bytes())
    for p in sorted((GO / "image/png/testdata").rglob("*.png")):
        c.add("png", p.read_bytes())
    # WebP and AVIF made from a few of those pictures: colour, grey, alpha; lossy, lossless,
    # animated; 8, 10 and 12 bits, 4:2:0, 4:4:4 and 4:0:0.
    sources = [GO / "image/testdata/video-001.png"] + [GO / "image/png/testdata/pngsuite" / n
                                                       for n in ("basn2c08.png", "basn6a08.png", "basn0g08.png", "basn4a08.png")]
    try:
        from PIL import Image
    except ImportError:
        print("fuzz_corpus: no PIL (Debian python3-pil for /usr/bin/python3): no WebP seeds")
    else:
        for p in sources:
            im = Image.open(p)
            im = im.convert("RGBA" if "A" in im.mode or "transparency" in im.info else "RGB")
            for opts in ({"quality": 60}, {"lossless": True}):
                buf = io.BytesIO()
                im.save(buf, "WEBP", **opts)
                c.add("webp", buf.getvalue())
        buf = io.BytesIO()
        im.save(buf, "WEBP", save_all=True, append_images=[im.rotate(90)], duration=50)
        c.add("webp", buf.getvalue())
    if not shutil.which("avifenc"):
        print("fuzz_corpus: no avifenc (Debian libavif-bin): no AVIF seeds")
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "seed.avif"
        for p in sources:
            for args in (["-d", "8", "-y", "420"], ["-d", "10", "-y", "444"], ["-d", "12", "-y", "400"]):
                subprocess.run(["avifenc", "-s", "10", "--min", "20", "--max", "40", *args, str(p), str(out)],
                               check=True, capture_output=True)
                c.add("avif", out.read_bytes())


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: fuzz_corpus.py OUT_DIR")
    if not GO.is_dir():
        sys.exit(f"fuzz_corpus: {GO} not found: install golang-1.19-src")
    out = Path(sys.argv[1])
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    c = Corpus(out)
    add_tars(c)
    add_indexes(c)
    add_labels(c)
    add_aws_config(c)
    add_sigv4(c)
    add_s3_xml(c)
    add_http(c)
    add_images(c)
    print("fuzz_corpus: " + ", ".join(f"{t} {n}" for t, n in sorted(c.counts.items())))


if __name__ == "__main__":
    main()
