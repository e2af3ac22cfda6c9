#!/usr/bin/env bash
# The whole test suite (`make test`) RUNS times in a row under load, as a new
# user's busy or freshly booted machine would run it:
#   - one busy-loop process per core (two on this project's 2-core machines),
#     at normal priority, for the whole soak;
#   - Ray's worker processes at that priority too (RAY_worker_niceness=0):
#     Ray nices its workers by default, and under the busy loops they got
#     3-6 % of a core each, so the verl tests took most of an hour;
#   - inside a Linux time namespace whose CLOCK_MONOTONIC reads about one
#     minute, as on a host booted a minute ago (skipped, with the reason,
#     where time namespaces are not permitted; --no-fresh-clock turns it off).
#
#   scripts/soak_tests.sh [RUNS] [--no-fresh-clock]     (RUNS defaults to 5)
#
# Logs: build/soak/run_<i>.log. Prints one line per run (PASS/FAIL, seconds)
# and a summary; exits 1 if any run failed. Tests must pass every time here:
# one that depends on the machine being quiet is a bug in the test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

runs=5
fresh_clock=1
for arg in "$@"; do
  case $arg in
    --no-fresh-clock) fresh_clock=0 ;;
    ''|*[!0-9]*) echo "usage: $0 [RUNS] [--no-fresh-clock]" >&2; exit 2 ;;
    *) runs=$arg ;;
  esac
done
logs=build/soak
mkdir -p "$logs"

export RAY_worker_niceness=0

hogs=()
stop_hogs() { ((${#hogs[@]})) && kill "${hogs[@]}" 2>/dev/null; wait 2>/dev/null || true; }
trap stop_hogs EXIT
for _ in $(seq "$(nproc)"); do
  bash -c 'while :; do :; done' &
  hogs+=($!)
done

# A namespace offset is taken from the host's clock: -(uptime - 60 s) makes
# the suite's clock read ~60 s. The kernel refuses an offset that would put
# the clock below zero, so a host up for less than a minute runs as it is.
prefix=()
clock_note="host clock"
if ((fresh_clock)); then
  uptime_s=$(cut -d. -f1 /proc/uptime)
  offset=$((60 - uptime_s))
  if ((offset >= 0)); then
    clock_note="host clock (up ${uptime_s} s already)"
  elif err=$(unshare --fork --time --monotonic "$offset" true 2>&1); then
    prefix=(unshare --fork --kill-child=SIGTERM --time --monotonic "$offset")
    clock_note="CLOCK_MONOTONIC ~60 s (time namespace, offset ${offset} s)"
  else
    clock_note="host clock (time namespaces not permitted: ${err})"
  fi
fi
echo "soak: ${runs} run(s) of make test; ${#hogs[@]} busy-loop process(es); ${clock_note}; logs in ${logs}"

passed=0
times=()
for i in $(seq "$runs"); do
  start=$(date +%s)
  if "${prefix[@]}" make test >"$logs/run_$i.log" 2>&1; then
    result=PASS
    passed=$((passed + 1))
  else
    result=FAIL
  fi
  took=$(($(date +%s) - start))
  times+=("$took")
  summary=$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$logs/run_$i.log" | tail -1 || true)
  echo "run $i: $result in ${took} s ${summary:+($summary)}"
  if [[ $result == FAIL ]]; then
    grep -E '^(FAILED|ERROR) ' "$logs/run_$i.log" | sed 's/^/    /' || true
  fi
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
echo "soak: ${passed}/${runs} passed; suite time min $(head -1 <<<"$sorted") s, median $(sed -n "$(((runs + 1) / 2))p" <<<"$sorted") s, max $(tail -1 <<<"$sorted") s"
((passed == runs))
