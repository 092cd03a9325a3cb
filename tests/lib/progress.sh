# Progress for long test runs (sourced by tests/run-all.sh and infra/test.sh): every step prints
# a line with the time since the start, every long command prints a line at least every 15 s
# with its last output, and `timing_summary` prints how long each step took.
#
#   step "what comes next"     ends the previous step (printing its duration) and starts one
#   long "what" CMD ARGS...    runs CMD with its output in a log; on failure, shows the log's end
#   timing_summary "title"     ends the last step and prints every step's duration and the total

PROGRESS_T0=${PROGRESS_T0:-$SECONDS}
PROGRESS_MARK=${PROGRESS_MARK:-==>}
PROGRESS_STEPS=()
_progress_step=
_progress_step_t0=0

progress_clock() {
  local s=$((SECONDS - PROGRESS_T0))
  printf '%d:%02d' $((s / 60)) $((s % 60))
}

step_end() {
  if [ -n "$_progress_step" ]; then
    local took=$((SECONDS - _progress_step_t0))
    PROGRESS_STEPS+=("$took"$'\t'"$_progress_step")
    printf '    (%s: %d s)\n' "$_progress_step" "$took"
    _progress_step=
  fi
}

step() {
  step_end
  _progress_step=$*
  _progress_step_t0=$SECONDS
  printf '\n%s [%s] %s\n' "$PROGRESS_MARK" "$(progress_clock)" "$*"
}

long() {
  local what=$1
  shift
  local log t0=$SECONDS next=15 pid rc
  log=$(mktemp "${TMPDIR:-/tmp}/shareplane-long.XXXXXX.log")
  printf '    %s ... (log: %s)\n' "$what" "$log"
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ $((SECONDS - t0)) -ge "$next" ]; then
      printf '    ... %s: %d s so far: %s\n' "$what" $((SECONDS - t0)) "$(tail -n 1 "$log" | tr -d '\r' | cut -c1-100)"
      next=$((next + 15))
    fi
  done
  if wait "$pid"; then
    printf '    %s: done in %d s\n' "$what" $((SECONDS - t0))
    rm -f "$log"
  else
    rc=$?
    tail -n 40 "$log" >&2
    printf '    %s: FAILED (exit %d) after %d s; whole log: %s\n' "$what" "$rc" $((SECONDS - t0)) "$log" >&2
    return "$rc"
  fi
}

timing_summary() {
  step_end
  printf '\n%s, time per step:\n' "$1"
  local e
  for e in "${PROGRESS_STEPS[@]}"; do
    printf '  %6d s  %s\n' "${e%%$'\t'*}" "${e#*$'\t'}"
  done
  printf '  %6d s  in all\n' $((SECONDS - PROGRESS_T0))
}
