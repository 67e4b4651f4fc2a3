# Sourced by the bench scripts: sets `here` (bench/) and `bench_bin` (the conveyor-bench
# binary: $CONVEYOR_BENCH, else the first one built in the usual build folders; empty if none).
# shellcheck shell=bash
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# A script's --build-dir (its `build_dir`, when it sets one) names where to look first.
if [[ -n ${build_dir:-} && -z ${CONVEYOR_BENCH:-} ]]; then
    for b in "$build_dir/bench/conveyor-bench" "$build_dir/conveyor-bench"; do
        if [[ -x $b ]]; then export CONVEYOR_BENCH=$b; break; fi
    done
fi
bench_bin=${CONVEYOR_BENCH:-}
if [[ -z $bench_bin ]]; then
    for b in "$here/../build/bench/bench/conveyor-bench" "$here/../build/default/bench/conveyor-bench" \
             "$here/../build/bench/conveyor-bench"; do
        if [[ -x $b ]]; then bench_bin=$b; break; fi
    done
fi
