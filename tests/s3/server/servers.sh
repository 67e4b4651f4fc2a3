# tests/s3/server/servers.sh — what the scripts that run test servers share (with_s3_server.sh,
# with_fake_aws.sh): sourced after they set `me` (their name, for messages).
# shellcheck shell=bash disable=SC2154  # `me` is the sourcing script's

die() { echo "$me: error: $*" >&2; exit 1; }

stop_group() {  # stop_group PID NAME: TERM the process group, then KILL after 5 s
  local pid=$1 i
  [[ -n $pid ]] || return 0
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "$me: $2 did not stop on SIGTERM; killing it" >&2
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

show_tail() {  # show_tail FILE NAME
  if [[ -s $1 ]]; then
    echo "$me: ---- last 40 lines of the $2 log ($1) ----" >&2
    tail -n 40 "$1" >&2 || true
  else
    echo "$me: ---- the $2 log is empty ----" >&2
  fi
}

wait_for() {  # wait_for SECONDS PID NAME TEST-COMMAND...
  local seconds=$1 pid=$2 name=$3 i
  shift 3
  for ((i = 0; i < seconds * 10; i++)); do
    "$@" && return 0
    kill -0 "$pid" 2>/dev/null || die "$name exited while starting"
    sleep 0.1
  done
  die "$name did not start within $seconds s"
}
