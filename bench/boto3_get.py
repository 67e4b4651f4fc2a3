#!/usr/bin/python3
"""boto3_get.py: the Python baseline for `conveyor-bench s3-get`.

boto3 `get_object(...)["Body"].read()` for every key, from a ThreadPoolExecutor of N
threads sharing one client (a connection pool of N). Prints ONE JSON line on stdout with the
same fields as `conveyor-bench s3-get` ("engine":"boto3") and a human summary on stderr.

    /usr/bin/python3 bench/boto3_get.py --endpoint URL --bucket B (--index F | --prefix P)
        --concurrency N [--limit N] [--region R] [--max-attempts 3]

--index F: a JSON array of keys relative to the bucket (a key may repeat: it is fetched each
time). --prefix P: the keys ListObjectsV2 returns under P (listing is not timed).
Credentials come from the usual AWS environment variables (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE...); the region from --region, else
AWS_REGION / AWS_DEFAULT_REGION, else us-east-1. Path-style addressing, SigV4.

Measured: seconds is the wall time of the GETs alone (client made and keys listed first);
latency is per GET, from the call to the last byte read; cpu_s is the process's CPU time
(all threads, user + system) over the same interval; retries is the sum of botocore's
ResponseMetadata.RetryAttempts (standard retry mode, --max-attempts attempts in all);
errors counts GETs that failed after their retries (the run goes on; the exit status is 1
if any failed). part_size is null: boto3's get_object reads an object in one request.
Run it with Debian's /usr/bin/python3 (package python3-boto3).
"""
import argparse
import json
import os
import resource
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

try:
    import boto3
    from botocore.config import Config
except ImportError as e:  # pragma: no cover
    sys.exit(f"boto3_get.py: {e}; install Debian's python3-boto3 and run with /usr/bin/python3")


def percentile(sorted_values, q):
    """Nearest-rank percentile of an ascending list (q in [0, 100])."""
    if not sorted_values:
        return 0.0
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil(n * q / 100)
    return sorted_values[min(len(sorted_values), int(rank)) - 1]


def cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", required=True, help="e.g. http://127.0.0.1:9000")
    ap.add_argument("--bucket", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--index", help="JSON array of keys relative to the bucket")
    src.add_argument("--prefix", help="GET every key under this prefix (ListObjectsV2)")
    ap.add_argument("--concurrency", type=int, required=True, help="threads = pooled connections")
    ap.add_argument("--limit", type=int, default=0, help="GET only the first N keys (0: all)")
    ap.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1")
    ap.add_argument("--max-attempts", type=int, default=3, help="botocore attempts per GET, first included")
    args = ap.parse_args()
    if args.concurrency < 1:
        ap.error("--concurrency must be at least 1")

    config = Config(
        max_pool_connections=args.concurrency,
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"max_attempts": args.max_attempts, "mode": "standard"},
    )
    client = boto3.session.Session().client("s3", endpoint_url=args.endpoint, region_name=args.region, config=config)

    if args.index:
        with open(args.index) as f:
            keys = json.load(f)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            sys.exit(f"boto3_get.py: {args.index} is not a JSON array of strings")
    else:
        keys = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=args.bucket, Prefix=args.prefix):
            keys.extend(o["Key"] for o in page.get("Contents", []))
    if args.limit > 0:
        keys = keys[: args.limit]
    if not keys:
        sys.exit("boto3_get.py: no keys to GET")

    lock = threading.Lock()
    totals = {"bytes": 0, "retries": 0, "errors": 0}
    first_error = []

    def get(key):
        t0 = time.perf_counter()
        try:
            resp = client.get_object(Bucket=args.bucket, Key=key)
            n = len(resp["Body"].read())
            retries = resp["ResponseMetadata"].get("RetryAttempts", 0)
            failed = False
        except Exception as e:  # noqa: BLE001 - any failure counts as an error
            n = 0
            retries = (getattr(e, "response", None) or {}).get("ResponseMetadata", {}).get("RetryAttempts", 0)
            failed = True
            with lock:
                if not first_error:
                    first_error.append(f"{key}: {e!r}")
        dt = time.perf_counter() - t0
        with lock:
            totals["bytes"] += n
            totals["retries"] += retries
            totals["errors"] += failed
        return dt

    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        # Open the pool's threads before timing (boto3 opens connections lazily either way).
        list(pool.map(lambda _: None, range(args.concurrency)))
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        latencies = list(pool.map(get, keys))
        seconds = time.perf_counter() - t0
        cpu = cpu_seconds() - cpu0

    latencies.sort()
    n = len(keys)
    result = {
        "bench": "s3-get",
        "engine": "boto3",
        "endpoint": args.endpoint,
        "bucket": args.bucket,
        "concurrency": args.concurrency,
        "part_size": None,
        "objects": n,
        "bytes": totals["bytes"],
        "seconds": round(seconds, 4),
        "objects_per_s": round(n / seconds, 1),
        "MB_per_s": round(totals["bytes"] / seconds / 1e6, 2),
        "p50_ms": round(percentile(latencies, 50) * 1e3, 3),
        "p99_ms": round(percentile(latencies, 99) * 1e3, 3),
        "max_ms": round(latencies[-1] * 1e3, 3),
        "retries": totals["retries"],
        "errors": totals["errors"],
        "cpu_s": round(cpu, 3),
        "cpu_us_per_get": round(cpu / n * 1e6, 1),
    }
    print(json.dumps(result), flush=True)
    print(
        f"boto3 x{args.concurrency}: {n} GETs, {totals['bytes'] / 1e6:.1f} MB in {seconds:.2f} s: "
        f"{result['objects_per_s']:.0f} objects/s, {result['MB_per_s']:.0f} MB/s, "
        f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, max {result['max_ms']:.1f} ms, "
        f"{result['retries']} retries, {result['errors']} errors, CPU {cpu:.2f} s ({result['cpu_us_per_get']:.0f} us/GET)",
        file=sys.stderr,
    )
    if first_error:
        print(f"boto3_get.py: first error: {first_error[0]}", file=sys.stderr)
    return 1 if totals["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
