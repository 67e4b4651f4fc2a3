#!/usr/bin/python3
"""A SigV4-verifying reverse proxy for conveyor's S3 integration tests.

It sits in front of an S3-compatible test server that does not check signatures (s3rver) and
recomputes every request's AWS Signature Version 4 with AWS's own signer (botocore's
S3SigV4Auth / S3SigV4QueryAuth, Debian's python3-botocore). Any difference is answered the
way S3 answers it (403 SignatureDoesNotMatch with S3's XML error body); accepted requests are
forwarded to the server and its answer streamed back. It can also inject faults (error
statuses, connection resets, truncated bodies, delays) for retry tests, and counts requests.

Run it with /usr/bin/python3 (python3-botocore is installed for Debian's python only). See
README.md in this directory for the admin API; with_s3_server.sh starts it.
"""

import argparse
import base64
import calendar
import datetime
import email.utils
import hashlib
import hmac
import http.client
import http.server
import io
import itertools
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import urllib.parse
import uuid
from xml.sax.saxutils import escape as xml_escape

try:
    from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth, SIGV4_TIMESTAMP, UNSIGNED_PAYLOAD
    from botocore.awsrequest import AWSRequest
    from botocore.compat import HTTPHeaders
    from botocore.credentials import Credentials
except ImportError as exc:  # pragma: no cover - environment problem
    sys.stderr.write(
        "sigv4_proxy: cannot import botocore (%s). Install Debian's python3-botocore "
        "(scripts/install-deps.sh) and run this with /usr/bin/python3.\n" % exc)
    sys.exit(2)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import s3_checksums  # noqa: E402  (beside this file)

ADMIN_PREFIX = "/__conveyor"
MAX_SKEW_S = 15 * 60
MAX_PRESIGN_EXPIRES_S = 7 * 24 * 3600
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "trailers", "transfer-encoding", "upgrade",
}
# Query parameters that carry a presigned URL's authentication (not forwarded upstream).
PRESIGN_PARAMS = {
    "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
    "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token",
}
SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}$")
AMZ_DATE_RE = re.compile(r"^\d{8}T\d{6}Z$")
EMPTY_RANGE_RE = re.compile(r"^bytes \d+-\d+/0$")
UPSTREAM_IDLE_S = 2.0  # Node's keep-alive timeout is 5 s; reconnect well before it.

DEFAULT_FAULT_CODES = {
    400: ("BadRequest", "Bad Request"),
    403: ("AccessDenied", "Access Denied"),
    404: ("NoSuchKey", "The specified key does not exist."),
    409: ("OperationAborted", "A conflicting conditional operation is currently in progress."),
    429: ("SlowDown", "Please reduce your request rate."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
    501: ("NotImplemented", "A header you provided implies functionality that is not implemented."),
    502: ("BadGateway", "Bad Gateway"),
    503: ("SlowDown", "Please reduce your request rate."),
    504: ("GatewayTimeout", "Gateway Timeout"),
}


class S3Error(Exception):
    """An error answered to the client in S3's XML format."""

    def __init__(self, status, code, message, **extra):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra  # further <Name>value</Name> elements, as S3 adds them
        self.log_detail = None


def check_content_sha256(body, content_sha):
    """Raises S3's 400 XAmzContentSHA256Mismatch when the body's SHA-256 is not the one signed."""
    actual = hashlib.sha256(body).hexdigest()
    if actual != content_sha.lower():
        raise S3Error(400, "XAmzContentSHA256Mismatch",
                      "The provided 'x-amz-content-sha256' header does not match what "
                      "was computed.", ClientComputedContentSHA256=content_sha,
                      S3ComputedContentSHA256=actual)


class BadFraming(Exception):
    """The request's body framing cannot be parsed; the connection must be closed."""


# --------------------------------------------------------------------------------------------
# Signature verification with botocore


class _ExactHeadersMixin:
    """Canonicalises exactly the headers the client listed in SignedHeaders.

    botocore's own headers_to_sign() drops a few headers it never signs itself (user-agent,
    expect, x-amzn-trace-id) and adds host when missing; a client may legitimately sign those,
    so the request handed to the signer here holds only the client's signed headers and this
    returns all of them (duplicates kept, joined with ',' by canonical_headers()).
    """

    def headers_to_sign(self, request):
        header_map = HTTPHeaders()
        for name, value in request.headers.items():
            header_map[name.lower()] = value
        return header_map


class HeaderVerifier(_ExactHeadersMixin, S3SigV4Auth):
    pass


class QueryVerifier(_ExactHeadersMixin, S3SigV4QueryAuth):
    pass


def _as_utf8(value):
    """http.server decodes header bytes as latin-1; SigV4 hashes the UTF-8 bytes."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def _parse_http_date(value):
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return email.utils.mktime_tz(parsed)


def _amz_date_to_epoch(value):
    if not value or not AMZ_DATE_RE.match(value):
        return None
    try:
        return calendar.timegm(time.strptime(value, SIGV4_TIMESTAMP))
    except ValueError:
        return None


def _split_target(raw_target):
    path, sep, query = raw_target.partition("?")
    return path, query if sep else None


class Identity:
    def __init__(self, access_key, secret_key, session_token=None, expiry_epoch=None):
        self.access_key = access_key
        self.secret_key = secret_key
        self.session_token = session_token
        self.expiry_epoch = expiry_epoch  # temporary credentials: refused after this time


# Derived temporary credentials, which fake_aws.py hands out through these same definitions
# (README.md describes the scheme): the key id ASIAFAKE<expiry epoch><2-letter provider tag>, the secret an
# HMAC-SHA256 of the key id under a master secret, the session token a function of the key id.
DERIVED_KEY_RE = re.compile(r"^ASIAFAKE(\d+)([A-Z]{2})$")


def derived_identity(master, access_key):
    """The Identity of a derived access key id, or None when the key id is not one."""
    m = DERIVED_KEY_RE.match(access_key)
    if m is None:
        return None
    secret = hmac.new(master.encode(), access_key.encode(), hashlib.sha256).hexdigest()[:40]
    return Identity(access_key, secret, "FAKETOKEN/" + access_key + "/+==", int(m.group(1)))


class Verifier:
    def __init__(self, identities, region, derived_master=None):
        self.identities = {i.access_key: i for i in identities}
        self.region = region
        self.derived_master = derived_master
        self.max_skew_s = MAX_SKEW_S  # a request time further than this from now is refused

    # The returned dict tells the forwarder what to do; S3Error is raised on any failure.
    def verify(self, method, raw_target, headers, body, now=None):
        now = time.time() if now is None else now
        path, query = _split_target(raw_target)
        query_pairs = [] if query is None else query.split("&")
        query_names = {urllib.parse.unquote(p.partition("=")[0]) for p in query_pairs}
        auth_header = headers.get("authorization")
        if auth_header is not None and "X-Amz-Algorithm" in query_names:
            raise S3Error(400, "InvalidArgument",
                          "Only one auth mechanism allowed; only the X-Amz-Algorithm query "
                          "parameter, Signature query string parameter or the Authorization "
                          "header should be specified",
                          ArgumentName="Authorization", ArgumentValue=auth_header)
        if auth_header is not None:
            return self._verify_header(method, raw_target, headers, body, auth_header, now)
        if "X-Amz-Algorithm" in query_names:
            return self._verify_query(method, path, query_pairs, headers, body, now)
        if "Signature" in query_names or "AWSAccessKeyId" in query_names:
            raise S3Error(400, "InvalidRequest",
                          "The authorization mechanism you have provided is not supported. "
                          "Please use AWS4-HMAC-SHA256.")
        return None  # anonymous

    def _identity(self, access_key):
        ident = self.identities.get(access_key)
        if ident is None and self.derived_master is not None:
            ident = derived_identity(self.derived_master, access_key)
        if ident is None:
            raise S3Error(403, "InvalidAccessKeyId",
                          "The AWS Access Key Id you provided does not exist in our records.",
                          AWSAccessKeyId=access_key)
        return ident

    def _check_scope(self, credential, amz_date, malformed_code, malformed_status):
        parts = credential.split("/")
        if len(parts) != 5:
            raise S3Error(malformed_status, malformed_code,
                          "Error parsing the X-Amz-Credential parameter; the Credential is "
                          "mal-formed; expecting \"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\".")
        access_key, date, region, service, terminator = parts
        ident = self._identity(access_key)
        if region != self.region:
            raise S3Error(malformed_status, malformed_code,
                          "The authorization header is malformed; the region '%s' is wrong; "
                          "expecting '%s'" % (region, self.region), Region=self.region)
        if service != "s3":
            raise S3Error(malformed_status, malformed_code,
                          "The authorization header is malformed; incorrect service \"%s\". "
                          "This endpoint belongs to \"s3\"." % service)
        if terminator != "aws4_request":
            raise S3Error(malformed_status, malformed_code,
                          "The authorization header is malformed; incorrect terminal \"%s\". "
                          "This endpoint uses \"aws4_request\"." % terminator)
        if date != amz_date[:8]:
            raise S3Error(malformed_status, malformed_code,
                          "The authorization header is malformed; Invalid credential date "
                          "\"%s\". This date is not the same as X-Amz-Date: \"%s\"."
                          % (date, amz_date[:8]))
        return ident

    @staticmethod
    def _signed_header_names(signed_headers, present, where):
        names = signed_headers.split(";") if signed_headers else []
        if not names or any(n != n.strip().lower() or not n for n in names):
            raise S3Error(403, "SignatureDoesNotMatch",
                          "SignedHeaders must be a ';'-separated list of lowercase header "
                          "names (%s): %r" % (where, signed_headers))
        if names != sorted(set(names)):
            raise S3Error(403, "SignatureDoesNotMatch",
                          "SignedHeaders must be sorted and without duplicates (%s): %r"
                          % (where, signed_headers))
        if "host" not in names:
            raise S3Error(403, "AccessDenied",
                          "The host header must be signed (SignedHeaders %r)." % signed_headers)
        missing = [n for n in names if n not in present]
        if missing:
            raise S3Error(403, "SignatureDoesNotMatch",
                          "Signed header(s) %s not present in the request." % ", ".join(missing))
        unsigned_amz = sorted(n for n in present if n.startswith("x-amz-") and n not in names)
        if unsigned_amz:
            raise S3Error(403, "AccessDenied",
                          "There were headers present in the request which were not signed",
                          HeadersNotSigned=", ".join(unsigned_amz))
        return names

    @staticmethod
    def _build_request(method, url, headers, names, body):
        request = AWSRequest(method=method, url=url, data=body)
        for name in names:
            for value in headers.get_all(name) or []:
                request.headers[name] = _as_utf8(value)
        return request

    def _compare(self, signer, request, provided, access_key):
        canonical = signer.canonical_request(request)
        string_to_sign = signer.string_to_sign(request, canonical)
        expected = signer.signature(string_to_sign, request)
        if not hmac.compare_digest(expected, provided.lower()) or provided != provided.lower():
            err = S3Error(403, "SignatureDoesNotMatch",
                          "The request signature we calculated does not match the signature "
                          "you provided. Check your key and signing method.",
                          AWSAccessKeyId=access_key,
                          StringToSign=string_to_sign,
                          SignatureProvided=provided,
                          StringToSignBytes=" ".join("%02x" % b for b in string_to_sign.encode()),
                          CanonicalRequest=canonical,
                          CanonicalRequestBytes=" ".join("%02x" % b for b in canonical.encode()))
            err.log_detail = "canonical_request=%r" % canonical
            raise err

    def _check_token(self, ident, token, now):
        if ident.session_token is None and token is None:
            return
        if ident.session_token is None or token != ident.session_token:
            raise S3Error(403, "InvalidToken",
                          "The provided token is malformed or otherwise invalid.")
        if ident.expiry_epoch is not None and now > ident.expiry_epoch:
            raise S3Error(400, "ExpiredToken", "The provided token has expired.",
                          **{"Token-0": token})

    def _verify_header(self, method, raw_target, headers, body, auth_header, now):
        algorithm, _, rest = auth_header.strip().partition(" ")
        if algorithm != "AWS4-HMAC-SHA256":
            if algorithm == "AWS":
                raise S3Error(400, "InvalidRequest",
                              "The authorization mechanism you have provided is not supported. "
                              "Please use AWS4-HMAC-SHA256.")
            raise S3Error(400, "InvalidArgument", "Unsupported Authorization Type",
                          ArgumentName="Authorization", ArgumentValue=auth_header)
        fields = {}
        for component in rest.split(","):
            key, eq, value = component.strip().partition("=")
            if not eq or key in fields:
                fields = None
                break
            fields[key] = value
        if fields is None or set(fields) != {"Credential", "SignedHeaders", "Signature"}:
            raise S3Error(400, "AuthorizationHeaderMalformed",
                          "The authorization header is malformed; the authorization header "
                          "requires three components: Credential, SignedHeaders, and Signature.")
        access_key = fields["Credential"].split("/")[0]
        self._identity(access_key)  # unknown key first, as S3 does

        amz_date = headers.get("x-amz-date")
        if amz_date is not None:
            epoch = _amz_date_to_epoch(amz_date)
            timestamp = amz_date
        else:
            date = headers.get("date")
            epoch = _parse_http_date(date) if date else None
            timestamp = (time.strftime(SIGV4_TIMESTAMP, time.gmtime(epoch))
                         if epoch is not None else None)
        if epoch is None:
            raise S3Error(403, "AccessDenied",
                          "AWS authentication requires a valid Date or x-amz-date header")
        if abs(now - epoch) > self.max_skew_s:
            raise S3Error(403, "RequestTimeTooSkewed",
                          "The difference between the request time and the current time is "
                          "too large.", RequestTime=amz_date or headers.get("date"),
                          ServerTime=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                          MaxAllowedSkewMilliseconds=str(int(self.max_skew_s * 1000)))
        ident = self._check_scope(fields["Credential"], timestamp,
                                  "AuthorizationHeaderMalformed", 400)

        content_sha = headers.get("x-amz-content-sha256")
        if content_sha is None:
            raise S3Error(400, "InvalidRequest",
                          "Missing required header for this request: x-amz-content-sha256")
        if content_sha.startswith("STREAMING-"):
            raise S3Error(501, "NotImplemented",
                          "x-amz-content-sha256 %s (aws-chunked uploads) is not supported by "
                          "this test proxy." % content_sha)
        if content_sha != UNSIGNED_PAYLOAD and not SHA256_RE.match(content_sha):
            raise S3Error(400, "InvalidArgument",
                          "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, "
                          "STREAMING-AWS4-HMAC-SHA256-PAYLOAD, or a valid sha256 value.",
                          ArgumentName="x-amz-content-sha256", ArgumentValue=content_sha)

        present = {k.lower() for k in headers.keys()}
        names = self._signed_header_names(fields["SignedHeaders"], present, "Authorization")
        if "x-amz-content-sha256" not in names:
            raise S3Error(403, "AccessDenied",
                          "There were headers present in the request which were not signed",
                          HeadersNotSigned="x-amz-content-sha256")
        if amz_date is None and "date" not in names:
            raise S3Error(403, "AccessDenied", "The date header (x-amz-date or date) must be signed.")

        signer = HeaderVerifier(Credentials(ident.access_key, ident.secret_key),
                                "s3", self.region)
        request = self._build_request(method, "http://proxy" + raw_target, headers, names, body)
        request.context["timestamp"] = timestamp
        self._compare(signer, request, fields["Signature"], access_key)
        self._check_token(ident, headers.get("x-amz-security-token"), now)

        if content_sha != UNSIGNED_PAYLOAD:
            check_content_sha256(body, content_sha)
        return {"mode": "header", "access_key": access_key, "content_sha256": content_sha}

    def _verify_query(self, method, path, query_pairs, headers, body, now):
        params = {}
        for pair in query_pairs:
            key, _, value = pair.partition("=")
            key = urllib.parse.unquote(key)
            if key in PRESIGN_PARAMS:
                params[key] = urllib.parse.unquote(value)
        if params.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
            raise S3Error(400, "AuthorizationQueryParametersError",
                          "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"")
        required = ["X-Amz-Credential", "X-Amz-Signature", "X-Amz-Date", "X-Amz-SignedHeaders",
                    "X-Amz-Expires"]
        if any(r not in params for r in required):
            raise S3Error(400, "AuthorizationQueryParametersError",
                          "Query-string authentication version 4 requires the X-Amz-Algorithm, "
                          "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, "
                          "and X-Amz-Expires parameters.")
        access_key = params["X-Amz-Credential"].split("/")[0]
        self._identity(access_key)
        amz_date = params["X-Amz-Date"]
        epoch = _amz_date_to_epoch(amz_date)
        if epoch is None:
            raise S3Error(400, "AuthorizationQueryParametersError",
                          "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
        try:
            expires = int(params["X-Amz-Expires"])
        except ValueError:
            expires = -1
        if expires < 1 or expires > MAX_PRESIGN_EXPIRES_S:
            raise S3Error(400, "AuthorizationQueryParametersError",
                          "X-Amz-Expires must be between 1 and 604800 seconds")
        ident = self._check_scope(params["X-Amz-Credential"], amz_date,
                                  "AuthorizationQueryParametersError", 400)
        if epoch - now > self.max_skew_s:
            raise S3Error(403, "AccessDenied", "Request is not valid yet",
                          XAmzDate=amz_date)
        if now > epoch + expires:
            raise S3Error(403, "AccessDenied", "Request has expired",
                          XAmzExpires=str(expires),
                          Expires=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch + expires)),
                          ServerTime=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))
        present = {k.lower() for k in headers.keys()}
        names = self._signed_header_names(params["X-Amz-SignedHeaders"], present,
                                          "X-Amz-SignedHeaders")
        # The canonical query string is every parameter as received except X-Amz-Signature.
        kept = [p for p in query_pairs
                if urllib.parse.unquote(p.partition("=")[0]) != "X-Amz-Signature"]
        url = "http://proxy" + path + ("?" + "&".join(kept) if kept else "")
        signer = QueryVerifier(Credentials(ident.access_key, ident.secret_key), "s3", self.region)
        request = self._build_request(method, url, headers, names, body)
        request.context["timestamp"] = amz_date
        self._compare(signer, request, params["X-Amz-Signature"], access_key)
        self._check_token(ident, params.get("X-Amz-Security-Token"), now)
        content_sha = headers.get("x-amz-content-sha256")
        if content_sha and "x-amz-content-sha256" in names and content_sha != UNSIGNED_PAYLOAD:
            check_content_sha256(body, content_sha)
        return {"mode": "query", "access_key": access_key, "content_sha256": UNSIGNED_PAYLOAD}


# --------------------------------------------------------------------------------------------
# Faults and statistics


FAULT_KINDS = ("status", "reset", "truncate", "delay", "reset_after", "hold", "corrupt", "stall",
               "content_length", "garbage")


class Fault:
    _ids = itertools.count(1)

    def __init__(self, spec):
        if not isinstance(spec, dict):
            raise ValueError("a fault is a JSON object")
        unknown = set(spec) - {"key", "method", "kind", "status", "code", "message", "count",
                               "delay_ms", "after_bytes", "delta", "seed"}
        if unknown:
            raise ValueError("unknown fault field(s): %s" % ", ".join(sorted(unknown)))
        self.key = spec.get("key", "")
        if not isinstance(self.key, str):
            raise ValueError("key must be a string")
        self.method = spec.get("method")
        if self.method is not None:
            if not isinstance(self.method, str):
                raise ValueError("method must be a string")
            self.method = self.method.upper()
        self.kind = spec.get("kind", "status")
        if self.kind not in FAULT_KINDS:
            raise ValueError("kind must be one of %s" % ", ".join(FAULT_KINDS))
        # corrupt: the answer's body is forwarded with one byte changed (in its middle): a
        # transfer that altered the bytes, which only a checksum can tell.
        # reset_after: the answer is forwarded until `after_bytes` bytes of its body have gone
        # out, then the connection is reset (a connection cut mid-body).
        self.after_bytes = int(spec.get("after_bytes", 0))
        if self.after_bytes < 0:
            raise ValueError("after_bytes must be >= 0")
        # status, code and message matter only to kind "status" (clients may send them anyway).
        self.status = int(spec.get("status") or 503)
        if self.kind == "status" and not 400 <= self.status <= 599:
            raise ValueError("status must be 400..599")
        default_code, default_message = DEFAULT_FAULT_CODES.get(
            self.status, ("InternalError", "We encountered an internal error. Please try again."))
        self.code = str(spec.get("code") or default_code)
        self.message = str(spec.get("message") or default_message)
        self.count = int(spec.get("count", 1))
        if self.count < 1:
            raise ValueError("count must be >= 1")
        # content_length: the answer announces `delta` bytes more (> 0: then the connection
        # closes before they come) or fewer (< 0: the whole body is sent anyway, and the
        # connection closed after it) than its body has. Default: a quarter of the body more.
        self.delta = int(spec.get("delta", 0))
        # garbage: a 200 answer whose body is as long as the object's but random bytes (from
        # `seed`), its header fields (a checksum included) those of the real object.
        self.seed = int(spec.get("seed", 0))
        # stall: nothing is answered for `delay_ms` (default 2000), then the connection is
        # closed: a server that hangs past the client's timeouts.
        default_delay = {"delay": 1000, "stall": 2000}.get(self.kind, 0)
        self.delay_ms = int(spec.get("delay_ms", default_delay))
        if self.delay_ms < 0:
            raise ValueError("delay_ms must be >= 0")
        # hold: the request waits until the test releases it (POST /release), or at most
        # `delay_ms` (default 30 s), then is forwarded: an order of events without a race.
        if self.kind == "hold" and "delay_ms" not in spec:
            self.delay_ms = 30000
        self.released = threading.Event()
        self.id = next(Fault._ids)
        self.injected = 0

    def matches(self, method, raw_path):
        if self.method is not None and self.method != method:
            return False
        return self.key in raw_path or self.key in urllib.parse.unquote(raw_path)

    def describe(self):
        return {"id": self.id, "key": self.key, "method": self.method, "kind": self.kind,
                "status": self.status, "code": self.code, "count": self.count,
                "delay_ms": self.delay_ms, "injected": self.injected}


# The kinds a fault plan draws from, each an ordinary fault (see Fault) with its settings.
PLAN_KINDS = ("status_500", "status_503", "reset", "reset_after", "stall", "truncate",
              "content_length_long", "content_length_short", "garbage", "corrupt")


class FaultPlan:
    """Faults drawn at random, reproducibly: request n (counted over the requests the plan
    matches, from 0) is faulted when a hash of (seed, n) falls under `rate`, and a second hash
    picks its kind by the weights. Which object a fault hits depends on the order requests
    arrive in; the sequence of draws depends on the seed only."""

    def __init__(self, spec):
        if not isinstance(spec, dict):
            raise ValueError("a fault plan is a JSON object")
        unknown = set(spec) - {"seed", "rate", "kinds", "keys", "methods", "stall_ms",
                               "after_bytes", "max_per_key"}
        if unknown:
            raise ValueError("unknown fault plan field(s): %s" % ", ".join(sorted(unknown)))
        self.seed = int(spec.get("seed", 0))
        self.rate = float(spec.get("rate", 0.1))
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError("rate must be in [0, 1]")
        kinds = spec.get("kinds") or {k: 1 for k in PLAN_KINDS if k != "corrupt"}
        if not isinstance(kinds, dict) or not kinds:
            raise ValueError("kinds is an object {kind: weight}")
        for k, w in kinds.items():
            if k not in PLAN_KINDS:
                raise ValueError("unknown plan kind %r (one of %s)" % (k, ", ".join(PLAN_KINDS)))
            if not isinstance(w, (int, float)) or w < 0:
                raise ValueError("weight of %s must be a number >= 0" % k)
        self.kinds = sorted((k, float(w)) for k, w in kinds.items() if w > 0)
        if not self.kinds:
            raise ValueError("kinds has no weight above 0")
        self.total_weight = sum(w for _, w in self.kinds)
        self.keys = spec.get("keys") or ""
        if not isinstance(self.keys, str):
            raise ValueError("keys must be a string")
        methods = spec.get("methods", ["GET"])
        self.methods = None if methods in (None, "*") else {str(m).upper() for m in methods}
        self.stall_ms = int(spec.get("stall_ms", 2000))
        self.after_bytes = int(spec.get("after_bytes", 1000))
        # At most this many faults per path (0: no limit): a test can bound how often one
        # object is hit (e.g. 1: its retry always succeeds).
        self.max_per_key = int(spec.get("max_per_key", 0))
        self.counter = 0
        self.matched = 0
        self.injected = {k: 0 for k, _ in self.kinds}
        self.per_key = {}

    def _unit(self, n, salt):
        digest = hashlib.sha256(("%d:%d:%s" % (self.seed, n, salt)).encode()).digest()
        return int.from_bytes(digest[:8], "big") / float(1 << 64)

    def draw(self, method, raw_path):
        """The fault for this request, or None. Called under the state's lock."""
        if self.methods is not None and method not in self.methods:
            return None
        if self.keys and self.keys not in raw_path and self.keys not in urllib.parse.unquote(raw_path):
            return None
        n = self.counter
        self.counter += 1
        self.matched += 1
        if self._unit(n, "hit") >= self.rate:
            return None
        if self.max_per_key and self.per_key.get(raw_path, 0) >= self.max_per_key:
            return None
        pick = self._unit(n, "kind") * self.total_weight
        kind = self.kinds[-1][0]
        for k, w in self.kinds:
            if pick < w:
                kind = k
                break
            pick -= w
        self.per_key[raw_path] = self.per_key.get(raw_path, 0) + 1
        self.injected[kind] += 1
        spec = {"status_500": {"kind": "status", "status": 500},
                "status_503": {"kind": "status", "status": 503},
                "reset": {"kind": "reset"},
                "reset_after": {"kind": "reset_after", "after_bytes": self.after_bytes},
                "stall": {"kind": "stall", "delay_ms": self.stall_ms},
                "truncate": {"kind": "truncate"},
                "content_length_long": {"kind": "content_length", "delta": 0},
                "content_length_short": {"kind": "content_length", "delta": -1},
                "garbage": {"kind": "garbage", "seed": n},
                "corrupt": {"kind": "corrupt"}}[kind]
        fault = Fault(spec)
        fault.plan_kind = kind
        fault.injected = 1
        return fault

    def describe(self):
        return {"seed": self.seed, "rate": self.rate, "kinds": dict(self.kinds), "keys": self.keys,
                "methods": sorted(self.methods) if self.methods is not None else "*",
                "stall_ms": self.stall_ms, "after_bytes": self.after_bytes,
                "max_per_key": self.max_per_key, "requests": self.matched,
                "injected": dict(self.injected), "faulted": sum(self.injected.values())}


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.faults = []
        self.holds = []  # hold faults armed and not yet released
        self.verified = 0
        self.rejected = 0
        self.anonymous = 0
        self.faults_injected = 0
        self.upstream_errors = 0
        self.by_method = {}
        self.rejected_by_code = {}
        self.expired_token = 0  # requests refused because their temporary credentials expired
        self.by_path = {}  # (method, raw path) -> count
        # S3's additional checksums: (bucket, key) -> (algorithm, base64 value, type), kept
        # from uploads that sent one or set through the admin API; (upload id) -> {part
        # number: (algorithm, crc, size)}; the algorithm computed for objects with none.
        self.checksums = {}
        self.upload_parts = {}
        self.default_checksum = None
        self.checksum_mismatches = 0
        self.plan = None  # the FaultPlan, or None
        self.skew_s = 0.0  # the proxy's clock is time.time() + skew_s (see /clock)
        self.max_skew_s = MAX_SKEW_S
        # Multipart uploads begun and neither completed nor aborted: upload id -> (bucket, key,
        # initiated); s3rver lists none (ListMultipartUploads 501) and refuses aborts (405),
        # so the proxy keeps them and answers both itself, as S3 does.
        self.uploads = {}
        self.uploads_aborted = 0
        self._request_ids = itertools.count(1)

    def request_id(self):
        return "%016X" % ((next(self._request_ids) << 40) ^ (uuid.uuid4().int & ((1 << 40) - 1)))

    def count_request(self, method, raw_path):
        with self.lock:
            self.by_method[method] = self.by_method.get(method, 0) + 1
            key = (method, raw_path)
            self.by_path[key] = self.by_path.get(key, 0) + 1

    def count_result(self, result, code=None):
        with self.lock:
            if result == "verified":
                self.verified += 1
            elif result == "anonymous":
                self.anonymous += 1
            elif result == "rejected":
                self.rejected += 1
                self.rejected_by_code[code] = self.rejected_by_code.get(code, 0) + 1
                if code == "ExpiredToken":
                    self.expired_token += 1

    def take_fault(self, method, raw_path):
        with self.lock:
            for fault in self.faults:
                if fault.count > 0 and fault.matches(method, raw_path):
                    fault.count -= 1
                    fault.injected += 1
                    self.faults_injected += 1
                    if fault.count == 0:
                        self.faults.remove(fault)
                    return fault
            if self.plan is not None:
                fault = self.plan.draw(method, raw_path)
                if fault is not None:
                    self.faults_injected += 1
                return fault
        return None

    def now(self):
        return time.time() + self.skew_s

    def path_counts(self, path):
        """{method: requests} for a path, compared as sent and percent-decoded."""
        with self.lock:
            counts = {}
            for (m, p), n in self.by_path.items():
                if p == path or urllib.parse.unquote(p) == path:
                    counts[m] = counts.get(m, 0) + n
            return counts

    def stats(self):
        with self.lock:
            return {"verified": self.verified, "rejected": self.rejected,
                    "anonymous": self.anonymous, "faults_injected": self.faults_injected,
                    "upstream_errors": self.upstream_errors,
                    "requests_by_method": dict(self.by_method),
                    "rejected_by_code": dict(self.rejected_by_code),
                    "expired_token": self.expired_token,
                    "faults_armed": [f.describe() for f in self.faults],
                    "fault_plan": self.plan.describe() if self.plan is not None else None,
                    "skew_s": self.skew_s,
                    "uploads_in_progress": len(self.uploads),
                    "uploads_aborted": self.uploads_aborted}

    def summary(self):
        s = self.stats()
        methods = " ".join("%s=%d" % kv for kv in sorted(s["requests_by_method"].items()))
        return ("sigv4-proxy summary: %d requests verified, %d rejected, %d anonymous, "
                "%d faults injected, %d upstream errors (%s)"
                % (s["verified"], s["rejected"], s["anonymous"], s["faults_injected"],
                   s["upstream_errors"], methods or "no requests"))


# --------------------------------------------------------------------------------------------
# The HTTP side


class Logger:
    def __init__(self, stream):
        self.stream = stream
        self.lock = threading.Lock()

    def line(self, text):
        stamp = datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        with self.lock:
            self.stream.write("%s %s\n" % (stamp, text))
            self.stream.flush()


def error_xml(code, message, request_id, extra=None, resource=None):
    parts = ['<?xml version="1.0" encoding="UTF-8"?>\n<Error>',
             "<Code>%s</Code>" % xml_escape(code),
             "<Message>%s</Message>" % xml_escape(message)]
    for name, value in (extra or {}).items():
        parts.append("<%s>%s</%s>" % (name, xml_escape(str(value)), name))
    if resource is not None:
        parts.append("<Resource>%s</Resource>" % xml_escape(resource))
    parts.append("<RequestId>%s</RequestId>" % request_id)
    parts.append("<HostId>%s</HostId></Error>" % base64.b64encode(os.urandom(24)).decode())
    return "".join(parts).encode("utf-8")


class _ReadBody:
    """An upstream response whose body was read already: the same interface as far as
    _forward uses it."""

    def __init__(self, response, data):
        self._response = response
        self._data = io.BytesIO(data)
        self.status = response.status
        self.reason = response.reason
        self.will_close = response.will_close
        self.length = len(data)

    def getheader(self, name, default=None):
        return self._response.getheader(name, default)

    def getheaders(self):
        return self._response.getheaders()

    def read(self, n=-1):
        return self._data.read(n)

    def isclosed(self):
        return self._response.isclosed()


class ProxyServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, config):
        self.config = config
        self.state = State()
        self.verifier = Verifier(config.identities, config.region, config.derived_master)
        self.log = config.logger
        super().__init__(address, ProxyHandler)


class ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "conveyor-sigv4-proxy"
    sys_version = ""
    timeout = 600  # an idle client connection is dropped after this long

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.upstream = None
        self.upstream_used = 0.0

    def finish(self):
        try:
            super().finish()
        finally:
            self._close_upstream()

    def date_time_string(self, timestamp=None):
        """The Date of an answer: the proxy's clock, skewed as /clock set it."""
        return super().date_time_string(self.server.state.now() if timestamp is None else timestamp)

    def log_message(self, fmt, *args):  # http.server's own messages (parse errors)
        self.server.log.line("%s %s" % (self.client_address[0], fmt % args))

    # Every method goes through one handler.
    def do_GET(self):
        self._handle()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = do_GET

    # ---- request reading

    def _raw_target(self):
        words = self.requestline.split()
        target = words[1] if len(words) >= 2 else self.path
        if target.startswith(("http://", "https://")):  # absolute-form
            rest = target.split("://", 1)[1]
            slash = rest.find("/")
            target = rest[slash:] if slash >= 0 else "/"
        return target

    def _read_exact(self, n):
        chunks = []
        while n > 0:
            chunk = self.rfile.read(min(n, 1 << 20))
            if not chunk:
                raise BadFraming("connection closed in the middle of the request body")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _read_body(self):
        te = self.headers.get_all("transfer-encoding") or []
        if te:
            codings = [c.strip().lower() for v in te for c in v.split(",") if c.strip()]
            if codings != ["chunked"]:
                raise BadFraming("unsupported Transfer-Encoding %r" % ", ".join(te))
            body = bytearray()
            while True:
                line = self.rfile.readline(65537)
                if not line.endswith(b"\n"):
                    raise BadFraming("bad chunk header")
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise BadFraming("bad chunk size %r" % line[:40])
                if size == 0:
                    break
                body += self._read_exact(size)
                if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                    raise BadFraming("chunk not followed by CRLF")
            while True:  # trailers
                line = self.rfile.readline(65537)
                if line in (b"\r\n", b"\n"):
                    break
                if not line:
                    raise BadFraming("connection closed in chunked trailers")
            return bytes(body)
        lengths = self.headers.get_all("content-length") or []
        if not lengths:
            return b""
        if len(set(v.strip() for v in lengths)) != 1 or not lengths[0].strip().isdigit():
            raise BadFraming("bad Content-Length %r" % lengths)
        return self._read_exact(int(lengths[0].strip()))

    # ---- responses

    def _send_error_response(self, err, request_id, resource, method, extra_headers=()):
        body = error_xml(err.code, err.message, request_id, err.extra, resource)
        self.send_response_only(err.status)
        for name, value in extra_headers:
            self.send_header(name, value)
        self.send_header("x-amz-request-id", request_id)
        self.send_header("x-amz-id-2", base64.b64encode(os.urandom(24)).decode())
        self.send_header("Date", self.date_time_string())
        self.send_header("Server", "conveyor-sigv4-proxy")
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(body)

    def _send_json(self, status, obj):
        body = (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Date", self.date_time_string())
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _reset_connection(self):
        """Closes the client connection abruptly: SO_LINGER 0 makes close() send a RST."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        for f in (self.wfile, self.rfile):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.connection.close()
        except OSError:
            pass

    # ---- upstream

    def _close_upstream(self):
        if self.upstream is not None:
            try:
                self.upstream.close()
            except OSError:
                pass
            self.upstream = None

    def _upstream_request(self, method, target, headers, body):
        cfg = self.server.config
        for attempt in (1, 2):
            reused = self.upstream is not None
            if reused and time.monotonic() - self.upstream_used > UPSTREAM_IDLE_S:
                self._close_upstream()
                reused = False
            if self.upstream is None:
                self.upstream = http.client.HTTPConnection(cfg.upstream_host, cfg.upstream_port,
                                                           timeout=cfg.upstream_timeout)
            conn = self.upstream
            try:
                conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                for name, value in headers:
                    conn.putheader(name, value)
                conn.endheaders(body)
                response = conn.getresponse()
                return response
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.BadStatusLine):
                self._close_upstream()
                if not reused or attempt == 2:
                    raise
            except Exception:
                self._close_upstream()
                raise
        raise AssertionError("unreachable")

    def _upstream_headers(self, auth, host):
        """The client's headers for s3rver: hop-by-hop and auth headers dropped, body framing
        replaced (the body was read in full), and a well-formed V4 Authorization for s3rver's
        own account (s3rver checks only the key id of V4 requests, which is why this proxy
        exists)."""
        drop = HOP_BY_HOP | {"content-length", "expect", "host"}
        connection_tokens = {t.strip().lower() for v in (self.headers.get_all("connection") or [])
                             for t in v.split(",")}
        drop |= connection_tokens
        if auth is not None:
            drop |= {"authorization", "x-amz-security-token", "x-amz-date", "x-amz-content-sha256"}
        out = [("Host", host)]
        for name, value in self.headers.items():
            if name.lower() not in drop:
                out.append((name, value))
        if auth is not None:
            now = time.strftime(SIGV4_TIMESTAMP, time.gmtime())
            cfg = self.server.config
            out.append(("X-Amz-Date", now))
            out.append(("X-Amz-Content-SHA256", auth["content_sha256"]))
            out.append(("Authorization",
                        "AWS4-HMAC-SHA256 Credential=%s/%s/%s/s3/aws4_request, "
                        "SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=%s"
                        % (cfg.upstream_access_key, now[:8], cfg.region, "0" * 64)))
        return out

    # ---- S3's additional checksums (s3rver keeps none: this proxy does, as S3 would)

    @staticmethod
    def _object_of(path):
        """(bucket, key) of a path-style path (a vhost request's path has its bucket put first)."""
        bucket, _, key = urllib.parse.unquote(path).lstrip("/").partition("/")
        return bucket, key

    def _sent_checksum(self):
        for alg in s3_checksums.ALGORITHMS:
            value = self.headers.get("x-amz-checksum-" + alg)
            if value:
                return alg, value.strip()
        return None

    def _bad_digest(self, alg, detail):
        with self.server.state.lock:
            self.server.state.checksum_mismatches += 1
        err = S3Error(400, "BadDigest", "The %s you specified did not match the calculated checksum." % alg.upper())
        err.log_detail = detail
        return err

    def _check_upload(self, method, raw_target, body):
        """Before an upload is forwarded: the checksum it sent against its bytes (400
        BadDigest, as S3 answers). Returns what to record once it succeeds, or None."""
        _, query = _split_target(raw_target)
        params = urllib.parse.parse_qs(query or "", keep_blank_values=True)
        sent = self._sent_checksum()
        state = self.server.state
        if method == "PUT" and "x-amz-copy-source" not in self.headers:
            if sent is None:
                return ("plain",) if "uploadId" not in params else None
            alg, value = sent
            actual = s3_checksums.digest(alg, body)
            if actual != value:
                raise self._bad_digest(alg, "x-amz-checksum-%s %s, the body gives %s" % (alg, value, actual))
            if "uploadId" in params and "partNumber" in params:
                if alg in s3_checksums.CRC_PARAMS:
                    with state.lock:
                        state.upload_parts.setdefault(params["uploadId"][0], {})[int(params["partNumber"][0])] = (
                            alg, s3_checksums.crc_value(alg, body), len(body))
                return None
            return ("put", alg, value)
        if method == "POST" and "uploadId" in params and sent is not None:
            alg, value = sent
            if (self.headers.get("x-amz-checksum-type") or "").upper() != "FULL_OBJECT":
                return None
            with state.lock:
                parts = dict(state.upload_parts.get(params["uploadId"][0], {}))
            numbers = [int(n) for n in re.findall(r"<PartNumber>\s*(\d+)\s*</PartNumber>", body.decode("utf-8", "replace"))]
            missing = [n for n in numbers if n not in parts or parts[n][0] != alg]
            if alg not in s3_checksums.CRC_PARAMS or missing:
                raise S3Error(400, "InvalidRequest",
                              "The upload was completed with a full-object %s checksum, but parts %s were uploaded without one"
                              % (alg.upper(), missing))
            crc = None
            for n in numbers:
                _, c, size = parts[n]
                crc = c if crc is None else s3_checksums.crc_combine(alg, crc, c, size)
            actual = s3_checksums.crc_base64(alg, crc)
            if actual != value:
                raise self._bad_digest(alg, "full-object x-amz-checksum-%s %s, the parts give %s" % (alg, value, actual))
            return ("put", alg, value)
        return None

    def _record_upload(self, raw_target, vhost_bucket, recorded):
        path, _ = _split_target(raw_target)
        if vhost_bucket is not None:
            path = "/" + vhost_bucket + path
        with self.server.state.lock:
            if recorded[0] == "plain":
                self.server.state.checksums.pop(self._object_of(path), None)
            else:
                self.server.state.checksums[self._object_of(path)] = (recorded[1], recorded[2], "FULL_OBJECT")

    def _checksum_fields(self, method, path, data, host, auth):
        """The x-amz-checksum-* fields of a whole-object GET or HEAD, if the object has one."""
        state = self.server.state
        key = self._object_of(path)
        with state.lock:
            stored = state.checksums.get(key)
            default = state.default_checksum
        if stored is not None:
            alg, value, kind = stored
        elif default is not None:
            if method == "HEAD":  # the bytes, for the checksum S3 would keep
                cfg = self.server.config
                conn = http.client.HTTPConnection(cfg.upstream_host, cfg.upstream_port, timeout=60)
                try:
                    headers = [(n, v) for n, v in self._upstream_headers(auth, host) if n.lower() != "if-match"]
                    conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
                    for n, v in headers:
                        conn.putheader(n, v)
                    conn.endheaders()
                    data = conn.getresponse().read()
                finally:
                    conn.close()
            alg, value, kind = default, s3_checksums.digest(default, data), "FULL_OBJECT"
        else:
            return []
        return [("x-amz-checksum-" + alg, value), ("x-amz-checksum-type", kind)]

    def _multipart_here(self, method, raw_target, vhost_bucket, request_id):
        """AbortMultipartUpload and ListMultipartUploads, answered here from the uploads this
        proxy saw begin (s3rver answers 405 and 501). Returns True when answered."""
        path, query = _split_target(raw_target)
        params = urllib.parse.parse_qs(query or "", keep_blank_values=True)
        if vhost_bucket is not None:
            path = "/" + vhost_bucket + path
        state = self.server.state
        if method == "DELETE" and "uploadId" in params:
            with state.lock:
                found = state.uploads.pop(params["uploadId"][0], None)
                if found is not None:
                    state.uploads_aborted += 1
            if found is None:
                err = S3Error(404, "NoSuchUpload", "The specified upload does not exist. The upload ID "
                              "may be invalid, or the upload may have been aborted or completed.",
                              UploadId=params["uploadId"][0])
                self._send_error_response(err, request_id, path, method)
                self._multipart_status, self._multipart_detail = 404, "NoSuchUpload (proxy)"
                return True
            self.send_response_only(204)
            self.send_header("x-amz-request-id", request_id)
            self.send_header("Date", self.date_time_string())
            self.send_header("Content-Length", "0")
            self.end_headers()
            self._multipart_status, self._multipart_detail = 204, "upload aborted (proxy)"
            return True
        bucket, key = self._object_of(path)
        if method == "GET" and "uploads" in params and not key:
            prefix = params.get("prefix", [""])[0]
            with state.lock:
                rows = sorted((k, uid, when) for uid, (b, k, when) in state.uploads.items()
                              if b == bucket and k.startswith(prefix))
            xml = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListMultipartUploadsResult '
                   'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
                   "<Bucket>%s</Bucket><Prefix>%s</Prefix><MaxUploads>1000</MaxUploads>"
                   "<IsTruncated>false</IsTruncated>" % (xml_escape(bucket), xml_escape(prefix))]
            for k, uid, when in rows:
                xml.append("<Upload><Key>%s</Key><UploadId>%s</UploadId><Initiated>%s</Initiated>"
                           "<StorageClass>STANDARD</StorageClass></Upload>"
                           % (xml_escape(k), xml_escape(uid), when))
            xml.append("</ListMultipartUploadsResult>")
            data = "".join(xml).encode()
            self.send_response_only(200)
            self.send_header("x-amz-request-id", request_id)
            self.send_header("Date", self.date_time_string())
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self._multipart_status, self._multipart_detail = 200, "ListMultipartUploads (proxy): %d" % len(rows)
            return True
        return False

    def _forward(self, method, raw_target, body, auth, vhost_bucket, fault, request_id, recorded=None):
        """Forwards to the upstream server and streams its answer back. Returns the status.
        `recorded`: an upload's checksum (from _check_upload), kept when the server took the
        upload, before the client hears of it."""
        cfg = self.server.config
        path, query = _split_target(raw_target)
        if auth is not None and auth["mode"] == "query":
            kept = [p for p in query.split("&")
                    if urllib.parse.unquote(p.partition("=")[0]) not in PRESIGN_PARAMS]
            query = "&".join(kept) if kept else None
        if vhost_bucket is not None:
            path = "/" + vhost_bucket + path
            host = "%s:%d" % (cfg.upstream_host, cfg.upstream_port)
        else:
            host = self.headers.get("host") or "%s:%d" % (cfg.upstream_host, cfg.upstream_port)
        target = path + ("?" + query if query is not None else "")
        headers = self._upstream_headers(auth, host)
        send_body = body if (body or method in ("PUT", "POST", "PATCH")) else None
        if send_body is not None:
            headers.append(("Content-Length", str(len(send_body))))
        try:
            response = self._upstream_request(method, target, headers, send_body)
        except (OSError, http.client.HTTPException) as exc:
            with self.server.state.lock:
                self.server.state.upstream_errors += 1
            err = S3Error(502, "ProxyUpstreamError",
                          "The test proxy could not reach the S3 server: %s" % exc)
            self._send_error_response(err, request_id, path, method)
            return 502, "upstream error %s" % exc

        if recorded is not None and response.status == 200:
            self._record_upload(raw_target, vhost_bucket, recorded)
        upload_params = urllib.parse.parse_qs(query or "", keep_blank_values=True)
        if method == "POST" and response.status == 200 and ("uploads" in upload_params or "uploadId" in upload_params):
            # CreateMultipartUpload / CompleteMultipartUpload: kept for ListMultipartUploads.
            data = response.read()
            response = _ReadBody(response, data)
            with self.server.state.lock:
                if "uploadId" in upload_params:
                    self.server.state.uploads.pop(upload_params["uploadId"][0], None)
                else:
                    m = re.search(r"<UploadId>([^<]+)</UploadId>", data.decode("utf-8", "replace"))
                    if m:
                        bucket, key = self._object_of(path)
                        self.server.state.uploads[m.group(1)] = (
                            bucket, key, time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()))
        content_range = response.getheader("Content-Range") or ""
        if response.status == 206 and EMPTY_RANGE_RE.match(content_range):
            # s3rver fix-up: a ranged GET of an empty object gets "206, Content-Range bytes 0-0/0,
            # Content-Length: 1" and no body from s3rver (the client would wait for a byte that
            # never comes). S3 answers 416 InvalidRange; so does this proxy.
            self._close_upstream()
            err = S3Error(416, "InvalidRange", "The requested range is not satisfiable",
                          RangeRequested=self.headers.get("range", ""), ActualObjectSize="0")
            self._send_error_response(err, request_id, path, method,
                                      extra_headers=[("Content-Range", "bytes */0")])
            return 416, "s3rver fix-up: ranged GET of an empty object answered 416"
        if_match = (self.headers.get("if-match") or "").strip()
        if if_match and if_match != "*" and 200 <= response.status < 300:
            # s3rver ignores If-Match; S3 answers 412 when the object's ETag is another.
            etag = (response.getheader("ETag") or "").strip()
            if etag != if_match:
                self._close_upstream()
                err = S3Error(412, "PreconditionFailed",
                              "At least one of the pre-conditions you specified did not hold",
                              Condition="If-Match")
                self._send_error_response(err, request_id, path, method)
                return 412, "If-Match %s, but the ETag is %s" % (if_match, etag)
        no_body = method == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200
        out_headers = []
        length = None
        for name, value in response.getheaders():
            lname = name.lower()
            if lname in HOP_BY_HOP:
                continue
            if lname == "content-length":
                length = value
            if lname == "date":  # the proxy's clock (skewed by /clock), as the server's
                value = self.date_time_string()
            out_headers.append((name, value))
        if not any(n.lower() == "x-amz-request-id" for n, _ in out_headers):
            out_headers.append(("x-amz-request-id", request_id))

        # Checksums go with whole-object replies only (S3 sends none with a ranged one).
        want_checksum = (method in ("GET", "HEAD") and response.status == 200
                         and (self.headers.get("x-amz-checksum-mode") or "").upper() == "ENABLED"
                         and "range" not in self.headers and "partNumber=" not in (query or ""))
        corrupt = fault is not None and fault.kind in ("corrupt", "garbage") and not no_body
        wrong_length = (fault is not None and fault.kind == "content_length" and not no_body
                        and response.status == 200)
        body_source = response  # where the body is read from
        note = None
        if want_checksum or corrupt or wrong_length:
            # The whole body first: its checksum goes in the header fields (and a corrupt
            # fault changes it); the faults below then apply to it as to any other.
            data = b"" if no_body else response.read()
            if want_checksum:
                out_headers.extend(self._checksum_fields(method, path, data, host, auth))
            if corrupt and data and fault.kind == "corrupt":
                i = len(data) // 2
                data = data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:]
                note = "fault corrupt (byte %d of %d changed)" % (i, len(data))
            elif corrupt and data:
                rng = random.Random(fault.seed)
                data = bytes(rng.getrandbits(8) for _ in range(len(data)))
                note = "fault garbage (%d random bytes)" % len(data)
            body_source = io.BytesIO(data)
            if wrong_length and data:
                delta = fault.delta or max(1, len(data) // 4)
                if delta < 0:
                    delta = -max(1, len(data) // 4)
                announced = max(0, len(data) + delta)
                if response.will_close:
                    self._close_upstream()
                self.send_response_only(response.status, response.reason)
                for name, value in out_headers:
                    if name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(announced))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                self.close_connection = True
                return response.status, "fault content_length (%d announced, %d sent)" % (announced, len(data))

        truncate = fault is not None and fault.kind == "truncate"
        if truncate:
            data = b"" if no_body else body_source.read()
            if response.will_close:
                self._close_upstream()
            if not data:
                self._reset_connection()
                return response.status, "fault truncate (empty body: reset)"
            self.send_response_only(response.status, response.reason)
            for name, value in out_headers:
                if name.lower() != "content-length":
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return response.status, "fault truncate (%d of %d bytes)" % (len(data) // 2, len(data))

        chunked = False
        if not no_body and length is None:
            if self.request_version == "HTTP/1.0":
                self.close_connection = True
            else:
                chunked = True
        self.send_response_only(response.status, response.reason)
        for name, value in out_headers:
            self.send_header(name, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        sent = 0
        reset_after = fault.after_bytes if fault is not None and fault.kind == "reset_after" else None
        if not no_body:
            while True:
                try:
                    chunk = body_source.read(256 * 1024)
                except (OSError, http.client.HTTPException):
                    chunk = b""
                if not chunk:
                    break
                if reset_after is not None and sent + len(chunk) >= reset_after:
                    part = chunk[:reset_after - sent]
                    if part:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                    self.wfile.flush()
                    self._close_upstream()
                    self._reset_connection()
                    # http.server flushes wfile after the handler: give it one that is open.
                    self.wfile = io.BytesIO()
                    return response.status, "fault reset_after %d bytes" % reset_after
                sent += len(chunk)
                if chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                else:
                    self.wfile.write(chunk)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        else:
            response.read()
        if response.will_close or not response.isclosed():
            self._close_upstream()
        else:
            self.upstream_used = time.monotonic()
        if not no_body and length is not None and length.isdigit() and sent != int(length):
            # The server sent less than it announced: pass that on as a cut connection.
            self.close_connection = True
            self._close_upstream()
            with self.server.state.lock:
                self.server.state.upstream_errors += 1
            return response.status, "upstream body cut short: %d of %s bytes" % (sent, length)
        return response.status, note

    # ---- admin API

    def _admin(self, method, raw_target, body):
        path, query = _split_target(raw_target)
        params = urllib.parse.parse_qs(query or "", keep_blank_values=True)
        state = self.server.state
        sub = path[len(ADMIN_PREFIX):].rstrip("/")
        if sub == "/faults":
            if method == "POST":
                try:
                    spec = json.loads(body.decode("utf-8") or "null")
                    specs = spec if isinstance(spec, list) else [spec]
                    faults = [Fault(s) for s in specs]
                except (ValueError, TypeError) as exc:
                    return self._send_json(400, {"error": str(exc)})
                with state.lock:
                    state.faults.extend(faults)
                    state.holds.extend(f for f in faults if f.kind == "hold")
                return self._send_json(200, {"armed": [f.describe() for f in faults]})
            if method == "DELETE":
                with state.lock:
                    n = len(state.faults)
                    state.faults.clear()
                    for f in state.holds:  # nothing stays held once the faults are cleared
                        f.released.set()
                    state.holds.clear()
                return self._send_json(200, {"cleared": n})
        elif sub == "/fault-plan":
            # POST {"seed", "rate", "kinds": {kind: weight}, "keys", "methods", "stall_ms",
            # "after_bytes", "max_per_key"}: faults drawn per request (FaultPlan); GET: the
            # plan and what it injected; DELETE: no plan.
            if method == "POST":
                try:
                    plan = FaultPlan(json.loads(body.decode("utf-8") or "null"))
                except (ValueError, TypeError) as exc:
                    return self._send_json(400, {"error": str(exc)})
                with state.lock:
                    state.plan = plan
                    return self._send_json(200, {"plan": plan.describe()})
            if method in ("GET", "DELETE"):
                with state.lock:
                    plan = state.plan.describe() if state.plan is not None else None
                    if method == "DELETE":
                        state.plan = None
                return self._send_json(200, {"plan": plan})
        elif sub == "/clock":
            # POST {"skew_s": S, "max_skew_s": M}: the proxy's clock runs S seconds ahead of
            # the machine's (its checks of request times and its Date fields), and a request
            # time further than M from it is 403 RequestTimeTooSkewed. GET: both.
            if method == "POST":
                try:
                    spec = json.loads(body.decode("utf-8") or "null")
                    if not isinstance(spec, dict):
                        raise ValueError("a JSON object")
                    with state.lock:
                        if "skew_s" in spec:
                            state.skew_s = float(spec["skew_s"])
                        if "max_skew_s" in spec:
                            self.server.verifier.max_skew_s = float(spec["max_skew_s"])
                except (ValueError, TypeError) as exc:
                    return self._send_json(400, {"error": str(exc)})
            if method in ("GET", "POST"):
                return self._send_json(200, {"skew_s": state.skew_s,
                                             "max_skew_s": self.server.verifier.max_skew_s})
        elif sub == "/uploads":
            # GET: the multipart uploads begun and neither completed nor aborted.
            if method == "GET":
                with state.lock:
                    return self._send_json(200, {
                        "uploads": [{"bucket": b, "key": k, "upload_id": uid, "initiated": w}
                                    for uid, (b, k, w) in sorted(state.uploads.items())],
                        "aborted": state.uploads_aborted})
        elif sub == "/release":
            if method == "POST":
                with state.lock:
                    n = len(state.holds)
                    for f in state.holds:
                        f.released.set()
                    state.holds.clear()
                return self._send_json(200, {"released": n})
            if method == "GET":
                with state.lock:
                    return self._send_json(200, {"faults": [f.describe() for f in state.faults]})
        elif sub == "/stats":
            if method == "GET":
                if "path" in params:
                    # "count" is how many times the object was fetched (GETs) unless method=
                    # names another method, or "*" for all of them.
                    m = (params.get("method", ["GET"])[0] or "GET").upper()
                    counts = state.path_counts(params["path"][0])
                    count = sum(counts.values()) if m in ("*", "ANY") else counts.get(m, 0)
                    return self._send_json(200, {"count": count, "method": m,
                                                 "by_method": counts})
                return self._send_json(200, state.stats())
            if method == "DELETE":
                with state.lock:
                    state.by_path.clear()
                return self._send_json(200, {"cleared": True})
        elif sub == "/checksums":
            # POST {"bucket", "key", "algorithm", "value", "type"}: the checksum S3 keeps with
            # an object (a wrong one stands for bytes altered at rest; "type": "COMPOSITE" and a
            # value "<base64>-<parts>" for a multipart upload's); POST {"default": "crc64nvme"}
            # (or null): computed for objects that have none, as S3 does for new objects.
            if method == "POST":
                try:
                    spec = json.loads(body.decode("utf-8") or "null")
                    if not isinstance(spec, dict):
                        raise ValueError("a JSON object")
                    with state.lock:
                        if "default" in spec:
                            if spec["default"] not in (None,) + s3_checksums.ALGORITHMS:
                                raise ValueError("default must be null or one of %s" % (s3_checksums.ALGORITHMS,))
                            state.default_checksum = spec["default"]
                        if "key" in spec:
                            alg = spec["algorithm"]
                            if alg not in s3_checksums.ALGORITHMS:
                                raise ValueError("unknown algorithm %r" % alg)
                            state.checksums[(spec["bucket"], spec["key"])] = (
                                alg, spec["value"], spec.get("type", "FULL_OBJECT"))
                except (ValueError, TypeError, KeyError) as exc:
                    return self._send_json(400, {"error": str(exc)})
                return self._send_json(200, {"ok": True})
            if method == "GET":
                with state.lock:
                    return self._send_json(200, {"default": state.default_checksum,
                                                 "mismatches": state.checksum_mismatches,
                                                 "objects": {"%s/%s" % k: v for k, v in state.checksums.items()}})
        elif sub == "/health" and method in ("GET", "HEAD"):
            return self._send_json(200, {"ok": True})
        return self._send_json(404, {"error": "unknown admin request %s %s" % (method, path)})

    # ---- the request

    def _bucket_of(self, raw_path):
        """(bucket, vhost_bucket): vhost_bucket is set for <bucket>.<vhost suffix> hosts."""
        host = (self.headers.get("host") or "").strip().lower()
        if host.startswith("["):
            hostname = host.split("]")[0] + "]"
        else:
            hostname = host.rsplit(":", 1)[0] if ":" in host else host
        for suffix in self.server.config.vhost_suffixes:
            if hostname.endswith("." + suffix) and len(hostname) > len(suffix) + 1:
                bucket = hostname[:-len(suffix) - 1]
                return bucket, bucket
        segment = raw_path.lstrip("/").split("/", 1)[0]
        return urllib.parse.unquote(segment), None

    def _handle(self):
        started = time.monotonic()
        state = self.server.state
        method = self.command
        raw_target = self._raw_target()
        raw_path, _ = _split_target(raw_target)
        request_id = state.request_id()
        try:
            body = self._read_body()
        except BadFraming as exc:
            self.close_connection = True
            err = S3Error(400, "BadRequest", "Cannot read the request body: %s" % exc)
            self._send_error_response(err, request_id, raw_path, method)
            self.server.log.line("%s %s -> 400 bad framing: %s"
                                 % (method, raw_target, exc))
            return

        if raw_path == ADMIN_PREFIX or raw_path.startswith(ADMIN_PREFIX + "/"):
            self._admin(method, raw_target, body)
            return

        state.count_request(method, raw_path)
        result = "?"
        status = 0
        detail = None
        try:
            if any(ord(c) <= 0x20 or ord(c) >= 0x7f for c in raw_target):
                raise S3Error(400, "InvalidURI", "Couldn't parse the specified URI.",
                              URI=raw_target)
            bucket, vhost_bucket = self._bucket_of(raw_path)
            auth = self.server.verifier.verify(method, raw_target, self.headers, body, now=state.now())
            if auth is None:
                if bucket in self.server.config.public_buckets and method in ("GET", "HEAD"):
                    result = "anonymous"
                else:
                    raise S3Error(403, "AccessDenied", "Access Denied")
            else:
                result = "verified (%s)" % auth["access_key"]
            state.count_result("anonymous" if auth is None else "verified")

            fault = state.take_fault(method, raw_path)
            if fault is not None:
                if fault.kind == "hold":
                    fault.released.wait(fault.delay_ms / 1000.0)
                elif fault.delay_ms:
                    time.sleep(fault.delay_ms / 1000.0)
                if fault.kind == "stall":
                    # The client has given up by now (its timeout is shorter): hang up.
                    self._reset_connection()
                    status, detail = 0, "fault stall %d ms" % fault.delay_ms
                elif fault.kind == "status":
                    err = S3Error(fault.status, fault.code, fault.message)
                    self._send_error_response(err, request_id, raw_path, method)
                    status, detail = fault.status, "fault status %s" % fault.code
                elif fault.kind == "reset":
                    self._reset_connection()
                    status, detail = 0, "fault reset"
                elif fault.kind == "corrupt" and method in ("PUT", "POST") and body:
                    # The upload's bytes arrive altered: checked (and stored) as they are.
                    i = len(body) // 2
                    body = body[:i] + bytes([body[i] ^ 0x01]) + body[i + 1:]
                    recorded = self._check_upload(method, raw_target, body)
                    status, detail = self._forward(method, raw_target, body, auth, vhost_bucket,
                                                   None, request_id, recorded)
                    detail = "fault corrupt (request byte %d of %d changed)" % (i, len(body))
                else:
                    status, detail = self._forward(method, raw_target, body, auth, vhost_bucket,
                                                   fault, request_id)
                    if fault.kind == "delay":
                        detail = "fault delay %d ms" % fault.delay_ms
                    elif fault.kind in ("garbage", "content_length", "corrupt") and detail is None:
                        detail = "fault %s (nothing to change)" % fault.kind
                    elif fault.kind == "hold":
                        detail = "fault hold (%s)" % ("released" if fault.released.is_set() else "timed out")
            elif self._multipart_here(method, raw_target, vhost_bucket, request_id):
                status, detail = self._multipart_status, self._multipart_detail
            else:
                recorded = self._check_upload(method, raw_target, body)
                status, detail = self._forward(method, raw_target, body, auth, vhost_bucket,
                                               None, request_id, recorded)
        except S3Error as err:
            state.count_result("rejected", err.code)
            result = "rejected %s" % err.code
            status = err.status
            detail = err.log_detail or err.message
            self._send_error_response(err, request_id, raw_path, method)
        except (ConnectionError, BrokenPipeError, socket.timeout) as exc:
            self.close_connection = True
            detail = "client connection error: %r" % exc
        except Exception as exc:  # a bug in this proxy: say so loudly, in the answer and the log
            self.close_connection = True
            status, result = 500, "proxy error"
            detail = "%s\n%s" % (exc, traceback.format_exc())
            try:
                err = S3Error(500, "ProxyInternalError", "sigv4_proxy.py failed: %r" % exc)
                self._send_error_response(err, request_id, raw_path, method)
            except OSError:
                pass
        elapsed = (time.monotonic() - started) * 1000
        self.server.log.line("%s %s -> %s %s%s (%.1f ms, %d bytes in)"
                             % (method, raw_target, status or "-", result,
                                " [%s]" % detail if detail else "", elapsed, len(body)))


# --------------------------------------------------------------------------------------------


class Config:
    pass


def load_identities(path):
    with open(path, "r", encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, dict):
        data = [data]
    identities = []
    for item in data:
        identities.append(Identity(item["access_key"], item["secret_key"],
                                   item.get("session_token")))
    return identities


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port (0: pick a free one)")
    parser.add_argument("--port-file", help="write the port actually bound here")
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the S3 server")
    parser.add_argument("--upstream-access-key", default="S3RVER",
                        help="access key id the upstream server knows (s3rver: S3RVER)")
    parser.add_argument("--upstream-timeout", type=float, default=120.0)
    parser.add_argument("--credentials",
                        help="JSON file: [{\"access_key\", \"secret_key\", \"session_token\"?}]")
    parser.add_argument("--derived-credentials", metavar="MASTER",
                        help="also accept the temporary credentials fake_aws.py derives from "
                             "this master secret (access key ids ASIAFAKE...)")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--public-bucket", action="append", default=[],
                        help="bucket whose GET/HEAD need no signature (repeatable)")
    parser.add_argument("--vhost-suffix", action="append", default=None,
                        help="Host suffix for virtual-hosted addressing (default: localhost)")
    parser.add_argument("--log", help="log file (default: stderr)")
    parser.add_argument("--watch-parent", action="store_true",
                        help="exit when the parent process goes away")
    parser.add_argument("--upstream-pgid", type=int,
                        help="process group to SIGTERM when exiting because the parent died")
    parser.add_argument("--orphan-cleanup-dir",
                        help="directory to remove (after stopping --upstream-pgid) when exiting "
                             "because the parent died")
    args = parser.parse_args(argv)
    if args.credentials is None and args.derived_credentials is None:
        parser.error("--credentials or --derived-credentials is required")

    log_stream = open(args.log, "a", encoding="utf-8") if args.log else sys.stderr
    cfg = Config()
    cfg.logger = Logger(log_stream)
    cfg.identities = load_identities(args.credentials) if args.credentials else []
    cfg.derived_master = args.derived_credentials
    cfg.region = args.region
    host, _, port = args.upstream.rpartition(":")
    cfg.upstream_host, cfg.upstream_port = host, int(port)
    cfg.upstream_access_key = args.upstream_access_key
    cfg.upstream_timeout = args.upstream_timeout
    cfg.public_buckets = set(args.public_bucket)
    cfg.vhost_suffixes = [s.lower() for s in (args.vhost_suffix or ["localhost"])]

    server = ProxyServer((args.listen, args.port), cfg)
    port = server.server_address[1]
    cfg.logger.line("sigv4-proxy listening on %s:%d, upstream %s, region %s, %d credential(s)%s, "
                    "public bucket(s): %s" % (args.listen, port, args.upstream, cfg.region,
                                              len(cfg.identities),
                                              " + derived" if cfg.derived_master else "",
                                              ", ".join(sorted(cfg.public_buckets)) or "none"))
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.port_file)

    stopping = threading.Event()

    def stop(reason):
        if not stopping.is_set():
            stopping.set()
            cfg.logger.line("sigv4-proxy stopping: %s" % reason)
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, lambda *_: stop("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *_: stop("SIGINT"))

    def orphan_cleanup():
        """The script that started us was killed (SIGKILL): stop the upstream server and remove
        the run's temp dir ourselves."""
        if args.upstream_pgid:
            try:
                os.killpg(args.upstream_pgid, signal.SIGTERM)
                for _ in range(50):
                    time.sleep(0.1)
                    os.killpg(args.upstream_pgid, 0)
                os.killpg(args.upstream_pgid, signal.SIGKILL)
                time.sleep(0.2)
            except OSError:
                pass
        if args.orphan_cleanup_dir:
            cfg.logger.line(server.state.summary())
            shutil.rmtree(args.orphan_cleanup_dir, ignore_errors=True)
            os._exit(1)

    if args.watch_parent:
        parent = os.getppid()

        def watch():
            while not stopping.is_set():
                if os.getppid() != parent:
                    cfg.logger.line("sigv4-proxy: parent process %d went away" % parent)
                    orphan_cleanup()
                    stop("parent process %d went away" % parent)
                    return
                time.sleep(0.5)

        threading.Thread(target=watch, daemon=True).start()

    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        cfg.logger.line(server.state.summary())
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
