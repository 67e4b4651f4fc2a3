#!/usr/bin/env bash
# Runs CMD [ARGS...] with fake AWS credential endpoints on loopback: fake_aws.py (instance
# metadata IMDSv2, container credentials, STS AssumeRoleWithWebIdentity / AssumeRole) on a free
# 127.0.0.1 port, with a fresh random master secret for the credentials it derives.
# CMD gets CONVEYOR_TEST_FAKE_AWS* variables (see README.md here); its exit code is this
# script's. The fake is stopped afterwards; only a temp dir is written (and removed).
#
#   bash tests/s3/server/with_fake_aws.sh ./build/tests/s3/conveyor-s3-credential-tests
#
# Environment: CONVEYOR_PYTHON (default /usr/bin/python3), CONVEYOR_FAKE_AWS_KEEP_TMP=1 keeps
# the temp dir (the fake's log) for a look afterwards.
# shellcheck disable=SC2317,SC2094  # functions called from traps; the fake's stderr joins its log
set -euo pipefail

readonly PY=${CONVEYOR_PYTHON:-/usr/bin/python3}  # Debian's python: python3-botocore is installed for it only
readonly STS_ACCESS_KEY=conveyor-sts-key
readonly STS_SECRET_KEY='conveyor-sts-secret/+='

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
me=with_fake_aws

# shellcheck source-path=SCRIPTDIR source=servers.sh
source "$here/servers.sh"  # die, stop_group, show_tail, wait_for

if (($# == 0)); then
  echo "usage: $0 CMD [ARGS...]" >&2
  exit 2
fi

# ---- prerequisites
[[ -x $PY ]] || die "$PY not found; install Debian's python3 and python3-botocore (scripts/install-deps.sh)"
"$PY" -c 'import botocore.auth, botocore.session' 2>/dev/null ||
  die "$PY cannot import botocore; install Debian's python3-botocore (scripts/install-deps.sh)"
command -v setsid >/dev/null 2>&1 || die "setsid not found; install util-linux"
[[ -f $here/fake_aws.py ]] || die "$here/fake_aws.py is missing"
[[ -f $here/botocore_credentials.py ]] || die "$here/botocore_credentials.py is missing"

# ---- temp dir, the fake and cleanup
tmp=$(mktemp -d "${TMPDIR:-/tmp}/conveyor-fake-aws.XXXXXX")
fake_log=$tmp/fake_aws.log
fake_pid=
cmd_pid=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  trap '' PIPE  # a closed stdout (CMD | head) must not stop the cleanup half-way
  if [[ -n $cmd_pid ]] && kill -0 "$cmd_pid" 2>/dev/null; then
    kill -TERM "$cmd_pid" 2>/dev/null || true
    wait "$cmd_pid" 2>/dev/null || true
  fi
  stop_group "$fake_pid" "fake_aws.py"
  if [[ -f $fake_log ]]; then
    summary=$(grep -a 'fake-aws summary:' "$fake_log" | tail -n 1 | sed 's/^[^ ]* //' || true)
    [[ -z $summary ]] || echo "$me: $summary" 2>/dev/null || true
  fi
  ((rc == 0)) || show_tail "$fake_log" "fake's"
  if [[ ${CONVEYOR_FAKE_AWS_KEEP_TMP:-0} == 1 ]]; then
    echo "$me: kept $tmp" 2>/dev/null || true
  else
    rm -rf "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

master=$("$PY" -c 'import secrets; print(secrets.token_hex(16))') || die "$PY cannot make a random secret"

# The fake binds port 0 and writes the port it got; nothing else can take it in between.
(
  cd "$tmp"
  export PYTHONDONTWRITEBYTECODE=1  # write nothing outside the temp dir, not even .pyc files
  exec setsid "$PY" "$here/fake_aws.py" --port-file "$tmp/fake.port" --master "$master" \
    --sts-access-key "$STS_ACCESS_KEY" --sts-secret-key "$STS_SECRET_KEY" --log "$fake_log" \
    --watch-parent --orphan-cleanup-dir "$tmp"
) </dev/null >>"$fake_log" 2>&1 &
fake_pid=$!

probe() {
  PYTHONDONTWRITEBYTECODE=1 "$PY" - "$1" <<'EOF'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
c.request("GET", "/__fake/health"); r = c.getresponse(); r.read()
sys.exit(0 if r.status == 200 else 1)
EOF
}
port_answers() { [[ -s $tmp/fake.port ]] && probe "$(<"$tmp/fake.port")" 2>/dev/null; }
wait_for 30 "$fake_pid" "fake_aws.py" port_answers
port=$(<"$tmp/fake.port")
echo "$me: fake AWS credential endpoints on 127.0.0.1:$port (log in $tmp)"

export CONVEYOR_TEST_FAKE_AWS=http://127.0.0.1:$port
export CONVEYOR_TEST_FAKE_AWS_MASTER=$master
export CONVEYOR_TEST_FAKE_AWS_STS_KEY=$STS_ACCESS_KEY
export CONVEYOR_TEST_FAKE_AWS_STS_SECRET=$STS_SECRET_KEY
export CONVEYOR_TEST_FAKE_AWS_LOG=$fake_log
export CONVEYOR_TEST_BOTOCORE_CREDENTIALS=$here/botocore_credentials.py
export CONVEYOR_TEST_PYTHON=$PY

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
