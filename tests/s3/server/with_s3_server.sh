#!/usr/bin/env bash
# Runs CMD [ARGS...] against a real S3-compatible server on loopback:
#   s3rver 3.7.1 (npm; installed once into the cache dir) on a free 127.0.0.1 port, behind
#   sigv4_proxy.py, which checks every request's SigV4 signature with botocore.
# CMD gets CONVEYOR_TEST_S3_* variables (see README.md here); its exit code is this script's.
# Both servers are stopped afterwards; only a temp dir and the cache dir are written.
#
#   bash tests/s3/server/with_s3_server.sh ./build/tests/s3/conveyor-s3-server-tests
#
# Environment: CONVEYOR_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/conveyor),
# CONVEYOR_S3_KEEP_TMP=1 keeps the temp dir (data and logs) for a look afterwards.
# Under with_fake_aws.sh (CONVEYOR_TEST_FAKE_AWS_MASTER set), the proxy also takes the fake's
# derived temporary credentials, and refuses them once expired (ExpiredToken).
# shellcheck disable=SC2317,SC2094  # functions called from traps; the proxy's stderr joins its log
set -euo pipefail

readonly S3RVER_VERSION=3.7.1
readonly PY=${CONVEYOR_PYTHON:-/usr/bin/python3}  # CMake passes the interpreter it found; Debian's python: python3-botocore is installed for it only
readonly BUCKET=conveyor-test
readonly PUBLIC_BUCKET=conveyor-public
readonly ACCESS_KEY=conveyor-test-key
readonly SECRET_KEY='conveyor-test-secret/with+odd=chars'
readonly SESSION_ACCESS_KEY=conveyor-session-key
readonly SESSION_SECRET_KEY='conveyor-session-secret'
readonly SESSION_TOKEN='conveyor-session-token/+=='
readonly REGION=us-east-1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
me=with_s3_server

# shellcheck source-path=SCRIPTDIR source=servers.sh
source "$here/servers.sh"  # die, stop_group, show_tail, wait_for

if (($# == 0)); then
  echo "usage: $0 CMD [ARGS...]" >&2
  exit 2
fi

# ---- prerequisites
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  die "node and npm are needed to run s3rver; install Debian's nodejs and npm (scripts/install-deps.sh does)"
fi
[[ -x $PY ]] || die "$PY not found; install Debian's python3 and python3-botocore (scripts/install-deps.sh)"
"$PY" -c 'import botocore.auth' 2>/dev/null ||
  die "$PY cannot import botocore; install Debian's python3-botocore (scripts/install-deps.sh)"
command -v setsid >/dev/null 2>&1 || die "setsid not found; install util-linux"

node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null) || die "node does not run"
node_options=${NODE_OPTIONS:-}
# s3rver's ListObjectsV2 continuation tokens use DES, which OpenSSL 3 (Node >= 17) keeps in its
# legacy provider; older Node rejects the flag.
if ((node_major >= 17)); then
  node_options="${node_options:+$node_options }--openssl-legacy-provider"
fi

# ---- s3rver, installed once
if [[ -n ${CONVEYOR_CACHE_DIR:-} ]]; then
  cache_root=$CONVEYOR_CACHE_DIR
elif [[ -n ${XDG_CACHE_HOME:-} ]]; then
  cache_root=$XDG_CACHE_HOME/conveyor
elif [[ -n ${HOME:-} ]]; then
  cache_root=$HOME/.cache/conveyor
else
  cache_root=${TMPDIR:-/tmp}/conveyor-cache-$(id -u)
fi
s3rver_dir=$cache_root/s3rver-$S3RVER_VERSION
s3rver_js=$s3rver_dir/node_modules/s3rver/bin/s3rver.js

install_s3rver() {
  if ! mkdir -p "$cache_root" 2>/dev/null || [[ ! -w $cache_root ]]; then
    [[ -z ${CONVEYOR_CACHE_DIR:-} ]] || die "cannot write to CONVEYOR_CACHE_DIR=$cache_root"
    echo "$me: cannot write to $cache_root; using ${TMPDIR:-/tmp}/conveyor-cache-$(id -u) instead" >&2
    cache_root=${TMPDIR:-/tmp}/conveyor-cache-$(id -u)
    s3rver_dir=$cache_root/s3rver-$S3RVER_VERSION
    s3rver_js=$s3rver_dir/node_modules/s3rver/bin/s3rver.js
    [[ -f $s3rver_dir/.installed && -f $s3rver_js ]] && return 0
    mkdir -p "$cache_root" || die "cannot create $cache_root (set CONVEYOR_CACHE_DIR)"
  fi
  (
    # Another run may be installing at the same time: one installs, the other waits.
    flock 9 || die "cannot lock $cache_root/.s3rver.lock"
    [[ -f $s3rver_dir/.installed ]] && exit 0
    echo "$me: installing s3rver@$S3RVER_VERSION with npm into $s3rver_dir (once)"
    rm -rf "$s3rver_dir"
    staging=$(mktemp -d "$cache_root/.s3rver-install.XXXXXX")
    if ! npm_config_cache="$cache_root/npm-cache" npm_config_update_notifier=false \
        npm install --prefix "$staging" "s3rver@$S3RVER_VERSION" --no-audit --no-fund \
        --loglevel=error >"$staging.log" 2>&1; then
      cat "$staging.log" >&2
      rm -rf "$staging" "$staging.log"
      die "npm install s3rver@$S3RVER_VERSION failed (it needs the npm registry once;" \
        "or point CONVEYOR_CACHE_DIR at a cache that holds s3rver-$S3RVER_VERSION)"
    fi
    rm -f "$staging.log"
    [[ -f $staging/node_modules/s3rver/bin/s3rver.js ]] || die "npm install left no s3rver.js in $staging"
    chmod 755 "$staging"
    touch "$staging/.installed"
    mv -T "$staging" "$s3rver_dir"
  ) 9>"$cache_root/.s3rver.lock"
}
[[ -f $s3rver_dir/.installed && -f $s3rver_js ]] || install_s3rver

# ---- temp dir, servers and cleanup
tmp=$(mktemp -d "${TMPDIR:-/tmp}/conveyor-s3.XXXXXX")
s3rver_log=$tmp/s3rver.log
proxy_log=$tmp/proxy.log
s3rver_pid=
proxy_pid=
cmd_pid=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $cmd_pid ]] && kill -0 "$cmd_pid" 2>/dev/null; then
    kill -TERM "$cmd_pid" 2>/dev/null || true
    wait "$cmd_pid" 2>/dev/null || true
  fi
  stop_group "$proxy_pid" "the SigV4 proxy"
  stop_group "$s3rver_pid" "s3rver"
  if [[ -f $proxy_log ]]; then
    summary=$(grep -a 'sigv4-proxy summary:' "$proxy_log" | tail -n 1 | sed 's/^[^ ]* //' || true)
    [[ -n $summary ]] && echo "$me: $summary"
  fi
  if ((rc != 0)); then
    show_tail "$proxy_log" "SigV4 proxy"
    show_tail "$s3rver_log" "s3rver"
  fi
  if [[ ${CONVEYOR_S3_KEEP_TMP:-0} == 1 ]]; then
    echo "$me: kept $tmp"
  else
    rm -rf "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# s3rver picks its own free port (-p 0) and prints it; nothing else can take it in between.
mkdir -p "$tmp/data"
(
  cd "$tmp"
  export NODE_OPTIONS="$node_options"
  exec setsid node "$s3rver_js" --directory "$tmp/data" --address 127.0.0.1 --port 0 --silent \
    --no-vhost-buckets --configure-bucket "$BUCKET" --configure-bucket "$PUBLIC_BUCKET"
) </dev/null >"$s3rver_log" 2>&1 &
s3rver_pid=$!
s3rver_port() { sed -n 's/^S3rver listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$s3rver_log"; }
s3rver_ready() { [[ -n $(s3rver_port) ]]; }
wait_for 60 "$s3rver_pid" s3rver s3rver_ready
upstream_port=$(s3rver_port)

cat >"$tmp/credentials.json" <<EOF
[{"access_key": "$ACCESS_KEY", "secret_key": "$SECRET_KEY"},
 {"access_key": "$SESSION_ACCESS_KEY", "secret_key": "$SESSION_SECRET_KEY",
  "session_token": "$SESSION_TOKEN"}]
EOF

(
  cd "$tmp"
  export PYTHONDONTWRITEBYTECODE=1  # write nothing outside the temp dir, not even .pyc files
  exec setsid "$PY" "$here/sigv4_proxy.py" --listen 127.0.0.1 --port 0 --port-file "$tmp/proxy.port" \
    --upstream "127.0.0.1:$upstream_port" --credentials "$tmp/credentials.json" --region "$REGION" \
    --public-bucket "$PUBLIC_BUCKET" --log "$proxy_log" \
    ${CONVEYOR_TEST_FAKE_AWS_MASTER:+--derived-credentials "$CONVEYOR_TEST_FAKE_AWS_MASTER"} \
    --watch-parent --upstream-pgid "$s3rver_pid" --orphan-cleanup-dir "$tmp"
) </dev/null >>"$proxy_log" 2>&1 &
proxy_pid=$!
wait_for 30 "$proxy_pid" "the SigV4 proxy" test -s "$tmp/proxy.port"
proxy_port=$(<"$tmp/proxy.port")

# Both answer: the proxy's health check, and s3rver through the proxy (an anonymous read of
# the public bucket, which s3rver answers with a listing).
probe() {
  PYTHONDONTWRITEBYTECODE=1 "$PY" - "$proxy_port" "$PUBLIC_BUCKET" <<'EOF'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
c.request("GET", "/__conveyor/health"); r = c.getresponse(); r.read()
if r.status != 200: sys.exit(1)
c.request("GET", "/%s?list-type=2&max-keys=1" % sys.argv[2]); r = c.getresponse(); r.read()
sys.exit(0 if r.status == 200 else 1)
EOF
}
wait_for 30 "$proxy_pid" "s3rver behind the SigV4 proxy" probe
echo "$me: s3rver $S3RVER_VERSION on 127.0.0.1:$upstream_port behind the SigV4 proxy on" \
  "127.0.0.1:$proxy_port (logs in $tmp)"

export CONVEYOR_TEST_S3_ENDPOINT=http://127.0.0.1:$proxy_port
export CONVEYOR_TEST_S3_ACCESS_KEY=$ACCESS_KEY
export CONVEYOR_TEST_S3_SECRET_KEY=$SECRET_KEY
export CONVEYOR_TEST_S3_SESSION_ACCESS_KEY=$SESSION_ACCESS_KEY
export CONVEYOR_TEST_S3_SESSION_SECRET_KEY=$SESSION_SECRET_KEY
export CONVEYOR_TEST_S3_SESSION_TOKEN=$SESSION_TOKEN
export CONVEYOR_TEST_S3_REGION=$REGION
export CONVEYOR_TEST_S3_BUCKET=$BUCKET
export CONVEYOR_TEST_S3_PUBLIC_BUCKET=$PUBLIC_BUCKET
export CONVEYOR_TEST_S3_ADMIN=http://127.0.0.1:$proxy_port/__conveyor
export CONVEYOR_TEST_S3_PROXY_LOG=$proxy_log

# CMD runs in the background so that INT/TERM reach the traps at once (cleanup stops it).
"$@" &
cmd_pid=$!
rc=0
wait "$cmd_pid" || rc=$?
cmd_pid=
if ((rc != 0)); then
  echo "$me: $1 exited with status $rc" >&2
fi
exit "$rc"
