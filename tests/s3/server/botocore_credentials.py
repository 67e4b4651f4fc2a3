#!/usr/bin/python3
"""Prints what botocore's default credential chain resolves in the current environment.

    /usr/bin/python3 botocore_credentials.py [--botocore-sleeps]

One JSON line on stdout, for a test to compare with what conveyor resolves:
    {"method": "iam-role", "access_key": "ASIA...", "secret_sha256": "<hex>",
     "token_sha256": "<hex>" | null, "expiration": "YYYY-MM-DDTHH:MM:SSZ" | null}
{"method": null} when no provider finds credentials, {"error": "<type>: <message>"} when
resolving raises (the exit status is 0 in all three cases: the caller compares). The secret
and the token are never printed, only their SHA-256.

It is botocore.session.Session().get_credentials() followed by get_frozen_credentials()
(which is what makes the deferred providers, web identity and assume role, call STS), with
two adjustments for tests against local fakes:
  - AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, is the endpoint of the STS clients the
    credential providers create (botocore 1.29 knows neither variable; newer SDKs do).
  - The container provider does not sleep 1 s between its 3 attempts (its timeouts, attempt
    counts and outcome are unchanged). --botocore-sleeps keeps botocore's sleeps.
Run it with /usr/bin/python3 (Debian's python3-botocore).
"""

import datetime
import hashlib
import json
import os
import sys


def _sha256(text):
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def _iso_utc(value):
    if value is None:
        return None
    if value.tzinfo is None:  # botocore parses with dateutil; a naive time is UTC
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _sts_endpoint_session(session):
    """Makes every STS client the session creates use AWS_ENDPOINT_URL_STS / AWS_ENDPOINT_URL
    unless its creator names an endpoint itself.

    The credential resolver's AssumeRole and AssumeRoleWithWebIdentity fetchers get their STS
    client from botocore.credentials._get_client_creator(session, region), a closure that calls
    session.create_client(...) when the fetcher runs; the attribute is looked up then, so an
    instance attribute set here takes effect for them (and for any other client)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_STS") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        return
    original = session.create_client

    def create_client(service_name, *args, **kwargs):
        if service_name == "sts" and not kwargs.get("endpoint_url") and len(args) < 4:
            # positional order: region_name, api_version, use_ssl, verify, endpoint_url
            kwargs["endpoint_url"] = endpoint
        return original(service_name, *args, **kwargs)

    session.create_client = create_client


def resolve(botocore_sleeps=False):
    import botocore.session
    import botocore.utils

    if not botocore_sleeps:
        botocore.utils.ContainerMetadataFetcher.SLEEP_TIME = 0
    session = botocore.session.Session()
    _sts_endpoint_session(session)
    creds = session.get_credentials()
    if creds is None:
        return {"method": None}
    frozen = creds.get_frozen_credentials()
    # RefreshableCredentials keep their expiry privately; static credentials have none.
    expiry = getattr(creds, "_expiry_time", None)
    return {"method": creds.method, "access_key": frozen.access_key,
            "secret_sha256": _sha256(frozen.secret_key), "token_sha256": _sha256(frozen.token),
            "expiration": _iso_utc(expiry)}


def main(argv):
    args = argv[1:]
    if args not in ([], ["--botocore-sleeps"]):
        sys.stderr.write("usage: botocore_credentials.py [--botocore-sleeps]\n")
        return 2
    try:
        import botocore  # noqa: F401
    except ImportError as exc:
        sys.stderr.write("botocore_credentials: cannot import botocore (%s); install Debian's "
                         "python3-botocore and run this with /usr/bin/python3\n" % exc)
        return 2
    try:
        result = resolve(botocore_sleeps=bool(args))
    except Exception as exc:  # the caller compares errors too
        message = " ".join(str(exc).split())
        result = {"error": "%s: %s" % (type(exc).__name__, message)}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
