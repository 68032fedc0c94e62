#!/usr/bin/env bash
# TEST DOUBLE, used only by bins/pod-attach/tests/pod_attach.rs (attach_happy_path_with_shim_nsys).
#
# No real nsys available here lists `--attach-pid` (2023.4.4 and the H200's 2025.3.1 do not), so the attach
# strategy's happy path cannot run against a real nsys. This shim stands for a future nsys that has the flag:
#   * `profile --help`           the real nsys's text plus one option line `--attach-pid=`;
#   * `profile --attach-pid=PID ... --duration=N -o OUT`
#                                checks that PID is a live process, appends its argv to $SHIM_LOG, waits N s,
#                                and writes $SHIM_REPORT (a real nsys 2023.4 report) as OUT.nsys-rep. It does NOT
#                                profile PID: what it tests is pod-attach's side (probe, argv, sidecar, copy-out,
#                                gate, cleanup), not nsys;
#   * anything else              runs the real nsys ($REAL_NSYS): --version, --help, export, stats.
set -euo pipefail
real=${REAL_NSYS:?REAL_NSYS is the real nsys}
if [[ ${1:-} == profile && ${2:-} == --help ]]; then
  "$real" profile --help
  printf '\t--attach-pid=\n\n\t   (test shim) Attach to the running process PID.\n\n'
  exit 0
fi
if [[ ${1:-} == profile ]]; then
  pid='' dur='' out=''
  prev=''
  for a in "$@"; do
    case $a in
      --attach-pid=*) pid=${a#--attach-pid=} ;;
      --duration=*) dur=${a#--duration=} ;;
    esac
    [[ $prev == -o ]] && out=$a
    prev=$a
  done
  if [[ -n $pid ]]; then
    [[ -d /proc/$pid ]] || { echo "shim: no process $pid" >&2; exit 1; }
    printf '%s\n' "$*" >> "${SHIM_LOG:?}"
    sleep "${dur:-1}"
    cp "${SHIM_REPORT:?}" "$out.nsys-rep"
    echo "shim: wrote $out.nsys-rep" >&2
    exit 0
  fi
fi
exec "$real" "$@"
