#!/usr/bin/python3
"""Fake AWS credential endpoints for conveyor's credential-provider tests.

One HTTP/1.1 server on 127.0.0.1 answers like
  - the EC2 instance metadata service (IMDSv2: PUT /latest/api/token, then the role listing
    and the role's credentials under /latest/meta-data/iam/security-credentials/),
  - the container credentials endpoint (ECS / EKS Pod Identity: GET /v2/credentials/<any>,
    GET /container/<any>, optionally with a required Authorization header),
  - STS's Query API at / (AssumeRoleWithWebIdentity, unsigned; AssumeRole, SigV4-signed and
    checked with botocore's signer).

Every credential it hands out is derived from a master secret (see derive_credentials), so
sigv4_proxy.py --derived-credentials MASTER accepts them without being told about each one.
Modes make the next responses of one endpoint misbehave (HTML, truncated, expired, 500,
garbage, slow, IMDSv1-only, no role), for bad-input tests. An admin API under /__fake/ sets
modes, the credential lifetime and the container token, and reports what was requested.

Run it with /usr/bin/python3 (python3-botocore is installed for Debian's python only); see
README.md in this directory. with_fake_aws.sh starts it.
"""

import argparse
import calendar
import datetime
import hmac
import http.server
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
import urllib.parse
import uuid
from xml.sax.saxutils import escape as xml_escape

try:
    from botocore.auth import SigV4Auth, SIGV4_TIMESTAMP
    from botocore.awsrequest import AWSRequest
    from botocore.compat import HTTPHeaders
    from botocore.credentials import Credentials
except ImportError as exc:  # pragma: no cover - environment problem
    sys.stderr.write(
        "fake_aws: cannot import botocore (%s). Install Debian's python3-botocore "
        "(scripts/install-deps.sh) and run this with /usr/bin/python3.\n" % exc)
    sys.exit(2)

# The derived credentials' scheme is the SigV4 proxy's, which checks them at S3: one
# definition for both (and no __pycache__ written into the source tree).
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sigv4_proxy import DERIVED_KEY_RE, derived_identity  # noqa: E402

ACCOUNT = "123456789012"
ROLE_NAME = "fake-role"
CONTAINER_ROLE_ARN = "arn:aws:iam::%s:role/fake" % ACCOUNT
STS_NS = "https://sts.amazonaws.com/doc/2011-06-15/"
STS_VERSION = "2011-06-15"
IMDS_TOKEN_PATH = "/latest/api/token"
IMDS_CREDS_PATH = "/latest/meta-data/iam/security-credentials/"
ADMIN_PREFIX = "/__fake"
MAX_SKEW_S = 15 * 60
ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
SESSION_NAME_RE = re.compile(r"^[\w+=,.@-]{2,64}$")
AMZ_DATE_RE = re.compile(r"^\d{8}T\d{6}Z$")

ENDPOINTS = ("imds", "container", "sts")
COMMON_MODES = ("ok", "html", "truncated", "past", "error", "garbage", "slow")
MODES = {"imds": COMMON_MODES + ("v1", "no-role"), "container": COMMON_MODES, "sts": COMMON_MODES}
SLOW_S = 5.0
PAST_S = 3600


# --------------------------------------------------------------------------------------------
# Derived credentials: the scheme sigv4_proxy.py --derived-credentials checks (keep in step)


def iso8601(epoch):
    return time.strftime(ISO_FORMAT, time.gmtime(epoch))


def derive_credentials(master, tag, lifetime, now=None, expiry_epoch=None):
    """The credentials provider `tag` (IM, CO, WI, AR) hands out now.

    Everyone asking within the same `lifetime`-long window gets the same credentials, which
    stay valid for at least `lifetime` more seconds: expiry = (floor(now / lifetime) + 2) *
    lifetime. The key id carries the expiry (ASIAFAKE<expiry epoch><tag>); the secret is an
    HMAC of the key id under the master secret, so a verifier needs only the master.
    """
    if expiry_epoch is None:
        now = time.time() if now is None else now
        expiry_epoch = (int(now // lifetime) + 2) * lifetime
    ident = derived_identity(master, "ASIAFAKE%d%s" % (expiry_epoch, tag))
    return {"AccessKeyId": ident.access_key, "SecretAccessKey": ident.secret_key,
            "Token": ident.session_token, "Expiration": iso8601(expiry_epoch),
            "expiry_epoch": expiry_epoch}


def parse_derived_key_id(key_id):
    """(expiry epoch, tag) of a derived key id, or None."""
    m = DERIVED_KEY_RE.match(key_id)
    return (int(m.group(1)), m.group(2)) if m else None


# --------------------------------------------------------------------------------------------
# State


class State:
    def __init__(self, master, lifetime, container_token, sts_key, sts_secret):
        self.lock = threading.Lock()
        self.master = master
        self.initial_lifetime = self.lifetime = lifetime
        self.initial_container_token = self.container_token = container_token
        self.sts_key = sts_key
        self.sts_secret = sts_secret
        self.imds_tokens = {}  # token -> monotonic expiry
        self.token_serial = 0
        self.reset()

    def reset(self):
        with self.lock:
            self.counts = dict.fromkeys(("imds_token", "imds_role", "imds_creds", "container",
                                         "sts_web_identity", "sts_assume_role"), 0)
            self.records = {"web_identity_tokens": [], "role_arns": [], "session_names": [],
                            "container_auth": []}
            self.modes = {e: None for e in ENDPOINTS}  # endpoint -> [mode, remaining or None]
            self.lifetime = self.initial_lifetime
            self.container_token = self.initial_container_token

    def count(self, name):
        with self.lock:
            self.counts[name] += 1

    def record(self, name, value):
        with self.lock:
            self.records[name].append(value)

    def stats(self):
        with self.lock:
            out = dict(self.counts)
            out.update({k: list(v) for k, v in self.records.items()})
            out["modes"] = {e: ({"mode": m[0], "remaining": m[1]} if m else None)
                            for e, m in self.modes.items()}
            out["lifetime"] = self.lifetime
            return out

    def set_mode(self, endpoint, mode, count):
        with self.lock:
            self.modes[endpoint] = None if mode == "ok" else [mode, count or None]

    def peek_mode(self, endpoint):
        """The endpoint's active mode (not consumed), or None."""
        with self.lock:
            m = self.modes[endpoint]
            return m[0] if m else None

    def take_mode(self, endpoint, applies_to=None):
        """Consumes one response of the endpoint's mode if it is active (and in applies_to)."""
        with self.lock:
            m = self.modes[endpoint]
            if m is None or (applies_to is not None and m[0] not in applies_to):
                return None
            if m[1] is not None:
                m[1] -= 1
                if m[1] <= 0:
                    self.modes[endpoint] = None
            return m[0]

    def issue_imds_token(self, ttl):
        with self.lock:
            self.token_serial += 1
            token = "imds-token-%d" % self.token_serial
            self.imds_tokens[token] = time.monotonic() + ttl
            return token

    def imds_token_valid(self, token):
        with self.lock:
            expiry = self.imds_tokens.get(token)
            return expiry is not None and time.monotonic() < expiry

    def credentials(self, tag, past=False):
        with self.lock:
            lifetime = self.lifetime
        if past:
            return derive_credentials(self.master, tag, lifetime,
                                      expiry_epoch=int(time.time()) - PAST_S)
        return derive_credentials(self.master, tag, lifetime)


class Logger:
    def __init__(self, stream):
        self.stream = stream
        self.lock = threading.Lock()

    def line(self, text):
        stamp = datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        with self.lock:
            self.stream.write("%s %s\n" % (stamp, text))
            self.stream.flush()


# --------------------------------------------------------------------------------------------
# STS helpers


class StsError(Exception):
    def __init__(self, status, code, message, sender=True):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.sender = sender


def sts_error_xml(code, message, request_id, sender=True):
    return ('<ErrorResponse xmlns="%s">\n  <Error>\n    <Type>%s</Type>\n    <Code>%s</Code>\n'
            '    <Message>%s</Message>\n  </Error>\n  <RequestId>%s</RequestId>\n'
            '</ErrorResponse>\n'
            % (STS_NS, "Sender" if sender else "Receiver", xml_escape(code),
               xml_escape(message), request_id)).encode()


def sts_credentials_xml(creds):
    return ("<Credentials><AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey>"
            "<SessionToken>%s</SessionToken><Expiration>%s</Expiration></Credentials>"
            % (creds["AccessKeyId"], creds["SecretAccessKey"], xml_escape(creds["Token"]),
               creds["Expiration"]))


def sts_success_xml(action, creds, session_name, request_id):
    user = ("<AssumedRoleUser><Arn>arn:aws:sts::%s:assumed-role/fake/%s</Arn>"
            "<AssumedRoleId>AROAFAKE:%s</AssumedRoleId></AssumedRoleUser>"
            % (ACCOUNT, xml_escape(session_name), xml_escape(session_name)))
    if action == "AssumeRoleWithWebIdentity":
        inner = ("<SubjectFromWebIdentityToken>fake</SubjectFromWebIdentityToken>" + user
                 + sts_credentials_xml(creds) + "<Audience>sts.amazonaws.com</Audience>")
    else:
        inner = user + sts_credentials_xml(creds)
    return ('<%sResponse xmlns="%s">\n  <%sResult>%s</%sResult>\n  <ResponseMetadata>'
            '<RequestId>%s</RequestId></ResponseMetadata>\n</%sResponse>\n'
            % (action, STS_NS, action, inner, action, request_id, action)).encode()


def validation_error(missing):
    msgs = ["Value null at '%s' failed to satisfy constraint: Member must not be null" % m
            for m in missing]
    n = len(msgs)
    return StsError(400, "ValidationError", "%d validation error%s detected: %s"
                    % (n, "" if n == 1 else "s", "; ".join(msgs)))


class _ExactHeadersSigV4(SigV4Auth):
    """Canonicalises exactly the headers the client signed (botocore's own headers_to_sign
    drops user-agent/expect and adds host; a client may sign those)."""

    def headers_to_sign(self, request):
        header_map = HTTPHeaders()
        for name, value in request.headers.items():
            header_map[name.lower()] = value
        return header_map


def _latin1_to_utf8(value):
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


# --------------------------------------------------------------------------------------------
# HTTP


class FakeServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address, state, logger):
        self.state = state
        self.log = logger
        super().__init__(address, Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "conveyor-fake-aws"

    def log_request(self, code="-", size="-"):  # _dispatch logs each request itself
        pass

    def log_message(self, fmt, *args):  # http.server's own messages (parse errors)
        self.server.log.line("http.server: " + (fmt % args))

    # ---- plumbing

    def _read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size_line = self.rfile.readline(1024)
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, status, body, content_type="text/plain", headers=()):
        if isinstance(body, str):
            body = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self._status = status

    def _send_json(self, status, obj, headers=()):
        self._send(status, json.dumps(obj), "application/json", headers)

    def _dispatch(self):
        self._status = 0
        started = time.monotonic()
        target = self.path
        path, _, query = target.partition("?")
        body = b""
        try:
            body = self._read_body()
            if path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/"):
                self._admin(path, body)
            elif path == IMDS_TOKEN_PATH or path.startswith("/latest/"):
                self._imds(path)
            elif path.startswith("/v2/credentials/") or path.startswith("/container/"):
                self._container()
            elif path == "/":
                self._sts(query, body)
            else:
                self._send_json(404, {"code": "NotFound", "message": "no such path: " + path})
        except (ConnectionError, BrokenPipeError):
            self.close_connection = True
        except Exception as exc:  # a bug here: say so in the answer and the log
            self.close_connection = True
            self.server.log.line("fake_aws error: %r" % exc)
            try:
                self._send_json(500, {"code": "FakeInternalError", "message": repr(exc)})
            except OSError:
                pass
        self.server.log.line("%s %s -> %s (%.1f ms, %d bytes in)"
                             % (self.command, path, self._status or "-",
                                (time.monotonic() - started) * 1000, len(body)))

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _dispatch

    # ---- misbehaviour shared by the endpoints

    def _misbehave(self, mode, kind, document, content_type):
        """Answers per `mode` for a document of `kind` (json/xml); False when mode is none of
        the document modes (the caller answers normally)."""
        if mode == "html":
            self._send(200, "<!DOCTYPE html>\n<html><head><title>Captive portal</title></head>"
                            "<body><h1>Please log in</h1></body></html>\n", "text/html")
        elif mode == "truncated":
            self._send(200, document[:max(1, len(document) // 2)], content_type)
        elif mode == "error":
            request_id = str(uuid.uuid4())
            if kind == "xml":
                self._send(500, sts_error_xml("InternalFailure", "fake failure", request_id,
                                              sender=False), "text/xml",
                           [("x-amzn-RequestId", request_id)])
            else:
                self._send_json(500, {"code": "InternalError", "message": "fake failure"})
        elif mode == "garbage":
            # 0xff and 0xfe never occur in UTF-8; the rest is random.
            self._send(200, b"\xff\xfe\xc3" + os.urandom(61), content_type)
        else:
            return False
        return True

    # ---- IMDS

    def _imds(self, path):
        state = self.server.state
        imds_mode = state.peek_mode("imds")
        if path == IMDS_TOKEN_PATH:
            if self.command != "PUT":
                return self._send(405, "Method Not Allowed", headers=[("Allow", "PUT")])
            state.count("imds_token")
            if imds_mode == "v1":
                return self._send(403, "Forbidden")
            ttl_text = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
            try:
                ttl = int(ttl_text)
            except (TypeError, ValueError):
                ttl = 0
            if not 1 <= ttl <= 21600:
                return self._send(400, "Bad Request")
            token = state.issue_imds_token(ttl)
            return self._send(200, token, headers=[("X-aws-ec2-metadata-token-ttl-seconds",
                                                    str(ttl))])
        if self.command != "GET":
            return self._send(405, "Method Not Allowed", headers=[("Allow", "GET")])
        if path == IMDS_CREDS_PATH:
            state.count("imds_role")
        elif path.startswith(IMDS_CREDS_PATH):
            state.count("imds_creds")
        if imds_mode != "v1" and not state.imds_token_valid(
                self.headers.get("X-aws-ec2-metadata-token")):
            return self._send(401, "Unauthorized")
        if path == IMDS_CREDS_PATH:
            if state.take_mode("imds", ("no-role",)):
                return self._send(404, "Not Found")
            return self._send(200, ROLE_NAME)
        if path == IMDS_CREDS_PATH + ROLE_NAME:
            mode = state.take_mode("imds", [m for m in MODES["imds"] if m != "no-role"])
            if mode == "slow":
                time.sleep(SLOW_S)
            creds = state.credentials("IM", past=(mode == "past"))
            doc = json.dumps({"Code": "Success", "LastUpdated": iso8601(time.time()),
                              "Type": "AWS-HMAC", "AccessKeyId": creds["AccessKeyId"],
                              "SecretAccessKey": creds["SecretAccessKey"],
                              "Token": creds["Token"], "Expiration": creds["Expiration"]},
                             indent=2).encode()
            if not self._misbehave(mode, "json", doc, "text/plain"):
                self._send(200, doc, "text/plain")  # IMDS serves its JSON as text/plain
            return None
        return self._send(404, "Not Found")

    # ---- container credentials

    def _container(self):
        state = self.server.state
        if self.command != "GET":
            return self._send(405, "Method Not Allowed", headers=[("Allow", "GET")])
        state.count("container")
        auth = self.headers.get("Authorization")
        state.record("container_auth", auth)
        with state.lock:
            required = state.container_token
        if required and auth != required:
            return self._send_json(401, {"code": "AccessDenied",
                                         "message": "Authorization header is missing or wrong"})
        mode = state.take_mode("container")
        if mode == "slow":
            time.sleep(SLOW_S)
        creds = state.credentials("CO", past=(mode == "past"))
        doc = json.dumps({"AccessKeyId": creds["AccessKeyId"],
                          "SecretAccessKey": creds["SecretAccessKey"], "Token": creds["Token"],
                          "Expiration": creds["Expiration"],
                          "RoleArn": CONTAINER_ROLE_ARN}).encode()
        if not self._misbehave(mode, "json", doc, "application/json"):
            self._send(200, doc, "application/json")
        return None

    # ---- STS

    def _sts(self, query, body):
        request_id = str(uuid.uuid4())
        try:
            params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
            if self.command == "POST":
                try:
                    text = body.decode("utf-8")
                except UnicodeDecodeError:
                    raise StsError(400, "MalformedInput", "The request body is not UTF-8.")
                params.update(urllib.parse.parse_qsl(text, keep_blank_values=True))
            elif self.command != "GET":
                raise StsError(405, "InvalidAction", "STS accepts GET and POST only.")
            action = params.get("Action")
            if action not in ("AssumeRoleWithWebIdentity", "AssumeRole"):
                raise StsError(400, "InvalidAction",
                               "Could not find operation %s for version %s"
                               % (action, params.get("Version", "NO_VERSION_SPECIFIED")))
            if params.get("Version") != STS_VERSION:
                raise StsError(400, "InvalidAction",
                               "Could not find operation %s for version %s"
                               % (action, params.get("Version", "NO_VERSION_SPECIFIED")))
            if action == "AssumeRoleWithWebIdentity":
                session_name = self._web_identity(params)
                tag = "WI"
            else:
                session_name = self._assume_role(params, query, body)
                tag = "AR"
        except StsError as err:
            return self._send(err.status, sts_error_xml(err.code, err.message, request_id,
                                                        err.sender),
                              "text/xml", [("x-amzn-RequestId", request_id)])
        state = self.server.state
        mode = state.take_mode("sts")
        if mode == "slow":
            time.sleep(SLOW_S)
        creds = state.credentials(tag, past=(mode == "past"))
        doc = sts_success_xml(action, creds, session_name, request_id)
        if not self._misbehave(mode, "xml", doc, "text/xml"):
            self._send(200, doc, "text/xml", [("x-amzn-RequestId", request_id)])
        return None

    @staticmethod
    def _check_role_params(params, extra=()):
        missing = [name for key, name in (("RoleArn", "roleArn"),
                                          ("RoleSessionName", "roleSessionName")) + tuple(extra)
                   if not params.get(key)]
        if missing:
            raise validation_error(missing)
        if not SESSION_NAME_RE.match(params["RoleSessionName"]):
            raise StsError(400, "ValidationError",
                           "1 validation error detected: Value '%s' at 'roleSessionName' failed "
                           "to satisfy constraint: Member must satisfy regular expression "
                           "pattern: [\\w+=,.@-]* and length 2..64" % params["RoleSessionName"])

    def _web_identity(self, params):
        state = self.server.state
        state.count("sts_web_identity")
        for key, name in (("WebIdentityToken", "web_identity_tokens"),
                          ("RoleArn", "role_arns"), ("RoleSessionName", "session_names")):
            if key in params:
                state.record(name, params[key])
        self._check_role_params(params, (("WebIdentityToken", "webIdentityToken"),))
        token = params["WebIdentityToken"]
        if token == "expired":
            raise StsError(400, "ExpiredTokenException",
                           "Token expired: current date/time %d must be before the expiration "
                           "date/time %d" % (int(time.time()), int(time.time()) - 60))
        if token == "invalid":
            raise StsError(400, "InvalidIdentityToken",
                           "The ID Token provided is not a valid JWT. (You may see this error "
                           "if you sent an Access Token)")
        return params["RoleSessionName"]

    def _assume_role(self, params, query, body):
        state = self.server.state
        state.count("sts_assume_role")
        for key, name in (("RoleArn", "role_arns"), ("RoleSessionName", "session_names")):
            if key in params:
                state.record(name, params[key])
        self._verify_sigv4(query, body)
        self._check_role_params(params)
        return params["RoleSessionName"]

    def _verify_sigv4(self, query, body):
        """Checks the request's SigV4 Authorization header the way STS does (service sts, any
        region): the key is --sts-access-key (with its secret) or a derived ASIAFAKE key (with
        its derived session token). Without --sts-access-key any signer is accepted."""
        state = self.server.state
        auth = self.headers.get("Authorization")
        if not auth:
            raise StsError(403, "MissingAuthenticationToken",
                           "Request is missing Authentication Token")
        algorithm, _, rest = auth.strip().partition(" ")
        fields = {}
        for component in rest.split(","):
            key, _, value = component.strip().partition("=")
            fields[key] = value
        if algorithm != "AWS4-HMAC-SHA256" or not {"Credential", "SignedHeaders",
                                                   "Signature"} <= set(fields):
            raise StsError(400, "IncompleteSignature",
                           "Authorization header requires 'Credential', 'SignedHeaders' and "
                           "'Signature' parameters (AWS4-HMAC-SHA256).")
        scope = fields["Credential"].split("/")
        if len(scope) != 5 or scope[3] != "sts" or scope[4] != "aws4_request":
            raise StsError(403, "SignatureDoesNotMatch",
                           "Credential should be scoped to correct service: 'sts'.")
        access_key, date, region = scope[0], scope[1], scope[2]
        amz_date = self.headers.get("X-Amz-Date")
        if not amz_date or not AMZ_DATE_RE.match(amz_date):
            raise StsError(400, "IncompleteSignature", "X-Amz-Date is missing or malformed.")
        epoch = calendar.timegm(time.strptime(amz_date, SIGV4_TIMESTAMP))
        if abs(time.time() - epoch) > MAX_SKEW_S:
            raise StsError(403, "SignatureDoesNotMatch",
                           "Signature expired: %s is now earlier or later than the allowed "
                           "15 minutes." % amz_date)
        if date != amz_date[:8]:
            raise StsError(403, "SignatureDoesNotMatch",
                           "Credential should be scoped to a valid date: %s." % date)
        token = self.headers.get("X-Amz-Security-Token")
        derived = parse_derived_key_id(access_key)
        if state.sts_key is None:
            return
        if access_key == state.sts_key:
            secret = state.sts_secret
        elif derived is not None:
            expected = derive_credentials(state.master, derived[1], 1, expiry_epoch=derived[0])
            secret = expected["SecretAccessKey"]
            if token != expected["Token"]:
                raise StsError(403, "InvalidClientTokenId",
                               "The security token included in the request is invalid.")
            if time.time() > derived[0]:
                raise StsError(400, "ExpiredToken",
                               "The security token included in the request is expired")
        else:
            raise StsError(403, "InvalidClientTokenId",
                           "The security token included in the request is invalid.")
        names = fields["SignedHeaders"].split(";")
        if "host" not in names:
            raise StsError(403, "SignatureDoesNotMatch", "'Host' must be a signed header.")
        request = AWSRequest(method=self.command,
                             url="http://%s%s" % (self.headers.get("Host", ""), self.path),
                             data=body)
        for name in names:
            for value in self.headers.get_all(name) or []:
                request.headers[name] = _latin1_to_utf8(value)
        request.context["timestamp"] = amz_date
        signer = _ExactHeadersSigV4(Credentials(access_key, secret), "sts", region)
        canonical = signer.canonical_request(request)
        string_to_sign = signer.string_to_sign(request, canonical)
        expected_sig = signer.signature(string_to_sign, request)
        if not hmac.compare_digest(expected_sig, fields["Signature"]):
            self.server.log.line("AssumeRole signature mismatch; canonical request %r" % canonical)
            raise StsError(403, "SignatureDoesNotMatch",
                           "The request signature we calculated does not match the signature "
                           "you provided. Check your AWS Secret Access Key and signing method. "
                           "Consult the service documentation for details.\n\nThe Canonical "
                           "String for this request should have been\n'%s'\n\nThe String-to-Sign "
                           "should have been\n'%s'\n" % (canonical, string_to_sign))

    # ---- admin

    def _admin(self, path, body):
        state = self.server.state
        sub = path[len(ADMIN_PREFIX):]
        try:
            data = json.loads(body.decode("utf-8")) if body.strip() else {}
        except (UnicodeDecodeError, ValueError) as exc:
            return self._send_json(400, {"error": "bad JSON: %s" % exc})
        if not isinstance(data, dict):
            return self._send_json(400, {"error": "expected a JSON object"})
        if sub == "/stats" and self.command == "GET":
            return self._send_json(200, state.stats())
        if sub == "/health" and self.command == "GET":
            return self._send_json(200, {"ok": True})
        if self.command != "POST":
            return self._send_json(405, {"error": "use POST (GET for /stats, /health)"})
        if sub == "/mode":
            endpoint, mode, count = data.get("endpoint"), data.get("mode"), data.get("count", 0)
            if endpoint not in MODES:
                return self._send_json(400, {"error": "endpoint must be one of %s"
                                                      % ", ".join(ENDPOINTS)})
            if mode not in MODES[endpoint]:
                return self._send_json(400, {"error": "mode for %s must be one of %s"
                                                      % (endpoint, ", ".join(MODES[endpoint]))})
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                return self._send_json(400, {"error": "count must be an integer >= 0"})
            state.set_mode(endpoint, mode, count)
            return self._send_json(200, {"endpoint": endpoint, "mode": mode, "count": count})
        if sub == "/lifetime":
            seconds = data.get("seconds")
            if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 1:
                return self._send_json(400, {"error": "seconds must be an integer >= 1"})
            with state.lock:
                state.lifetime = seconds
            return self._send_json(200, {"lifetime": seconds})
        if sub == "/container-token":
            token = data.get("token")
            if token is not None and not isinstance(token, str):
                return self._send_json(400, {"error": "token must be a string or null"})
            with state.lock:
                state.container_token = token or None
            return self._send_json(200, {"token_required": bool(token)})
        if sub == "/reset":
            state.reset()
            return self._send_json(200, {"reset": True})
        return self._send_json(404, {"error": "unknown admin path " + path})


# --------------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port (0: pick a free one)")
    parser.add_argument("--port-file", required=True, help="write the port actually bound here")
    parser.add_argument("--master", help="master secret of the derived credentials "
                                         "(default: random)")
    parser.add_argument("--lifetime", type=int, default=3600,
                        help="credential lifetime window in seconds (default 3600)")
    parser.add_argument("--container-token",
                        help="Authorization value the container endpoint requires")
    parser.add_argument("--sts-access-key", help="access key AssumeRole must be signed with")
    parser.add_argument("--sts-secret-key", help="its secret")
    parser.add_argument("--log", help="log file (default: stderr)")
    parser.add_argument("--watch-parent", action="store_true",
                        help="exit when the parent process goes away")
    parser.add_argument("--orphan-cleanup-dir",
                        help="directory to remove when exiting because the parent died")
    args = parser.parse_args(argv)
    if (args.sts_access_key is None) != (args.sts_secret_key is None):
        parser.error("--sts-access-key and --sts-secret-key go together")
    if args.lifetime < 1:
        parser.error("--lifetime must be >= 1")

    log_stream = open(args.log, "a", encoding="utf-8") if args.log else sys.stderr
    logger = Logger(log_stream)
    master = args.master if args.master is not None else os.urandom(16).hex()
    state = State(master, args.lifetime, args.container_token, args.sts_access_key,
                  args.sts_secret_key)
    server = FakeServer((args.listen, args.port), state, logger)
    port = server.server_address[1]
    logger.line("fake-aws listening on %s:%d (lifetime %d s, container token %s, AssumeRole "
                "signatures %s)" % (args.listen, port, args.lifetime,
                                    "required" if args.container_token else "not required",
                                    "checked" if args.sts_access_key else "not checked"))
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.replace(tmp, args.port_file)

    stopping = threading.Event()
    orphaned = threading.Event()

    def stop(reason):
        if not stopping.is_set():
            stopping.set()
            logger.line("fake-aws stopping: %s" % reason)
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, lambda *_: stop("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *_: stop("SIGINT"))

    if args.watch_parent:
        parent = os.getppid()

        def watch():
            while not stopping.is_set():
                if os.getppid() != parent:
                    orphaned.set()
                    stop("parent process %d went away" % parent)
                    return
                time.sleep(0.5)

        threading.Thread(target=watch, daemon=True).start()

    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        s = state.stats()
        logger.line("fake-aws summary: imds token %d, role %d, creds %d; container %d; sts web "
                    "identity %d, assume role %d"
                    % (s["imds_token"], s["imds_role"], s["imds_creds"], s["container"],
                       s["sts_web_identity"], s["sts_assume_role"]))
        server.server_close()
    if orphaned.is_set():
        if args.orphan_cleanup_dir:
            # The script that started us was killed: nobody else removes its temp dir.
            shutil.rmtree(args.orphan_cleanup_dir, ignore_errors=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
