# Sourced by side suites. Two helpers for the steps that can fail for reasons outside the code under test:
#   report_failed_step   a failing command names itself and its line on stderr (set -e alone ends a suite
#                        without a word when the command was quiet, e.g. an npm told --silent)
#   with_retries N CMD   runs CMD up to N times, saying why each failed try failed; for downloads from the
#                        registries, whose transient failures (a reset, a timeout) are not the product's
report_failed_step() {
  set -E
  # Said by the suite's own shell only: inside $(...) and ( ... ) a failure may be expected (set -e is off
  # in a substitution), and one that is not fails the command around it, which is then said here.
  trap '__step_status=$?; [ "$BASH_SUBSHELL" -eq 0 ] && echo "${BASH_SOURCE[0]:-?}:${LINENO}: \"${BASH_COMMAND}\" failed (exit $__step_status)" >&2' ERR
}

with_retries() {
  local attempts=$1 try=1 status
  shift
  while true; do
    status=0
    "$@" || status=$?
    [ "$status" -eq 0 ] && return 0
    if [ "$try" -ge "$attempts" ]; then
      echo "gave up after $try tries (exit $status): $*" >&2
      return "$status"
    fi
    echo "try $try of $attempts failed (exit $status), trying again in $((try * 5)) s: $*" >&2
    sleep $((try * 5))
    try=$((try + 1))
  done
}
