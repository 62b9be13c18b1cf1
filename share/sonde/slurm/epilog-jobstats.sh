#!/bin/bash
# Slurm epilog: stores `sonde jobstats` of the finished job in its AdminComment, as Princeton's
# jobstats does, so that `sacct -j ID -o AdminComment%65535` keeps the job's efficiency after
# Prometheus has dropped its series. Install as slurmctld's epilog (it runs once per job, as
# SlurmUser, who may update AdminComment), in slurm.conf:
#
#   EpilogSlurmctld=/usr/share/sonde/slurm/epilog-jobstats.sh
#
# Configuration (environment, or /etc/sonde/epilog-jobstats.conf, a shell file setting them):
#   SONDE_PROMETHEUS_URL   Prometheus' URL (required), e.g. http://prometheus:9090
#   SONDE_BIN              the sonde binary (default: sonde in PATH)
#   SONDE_EPILOG_ARGS      more options for sonde jobstats, e.g. "--prometheus-token-file
#                          /etc/sonde/prom-token" or "--prometheus-user u
#                          --prometheus-password-file /etc/sonde/prom-pw --prometheus-ca F"
#   SONDE_EPILOG_DELAY     seconds to wait first, so that the job's last scrape is in
#                          Prometheus (default 30: two 15 s scrapes)
#   SONDE_EPILOG_MAX_BYTES longest AdminComment written (default 60000; slurmdbd keeps it in a
#                          MySQL TEXT column of 65,535 bytes)
#   SONDE_SCONTROL         the scontrol binary (default: scontrol in PATH)
#   SONDE_EPILOG_FOREGROUND=1  wait for the result (tests); by default the work runs in the
#                          background and the epilog returns at once
#
# What is stored: "SONDE1:" + base64(gzip(the JSON of `sonde jobstats ID --json`)); read it back
# with
#   sacct -n -X -j ID -o AdminComment%65535 | sed 's/^ *SONDE1://' | base64 -d | gunzip
# A summary too long for SONDE_EPILOG_MAX_BYTES loses its per-GPU lists, then its per-node
# list ("nodes_omitted"); the overall figures stay. An existing AdminComment is kept (not
# overwritten). Failures and sonde's warnings (its stderr) go to syslog (tag sonde-jobstats), never
# into AdminComment, and never fail the job.
set -u
conf=/etc/sonde/epilog-jobstats.conf
# shellcheck source=/dev/null
[[ -r $conf ]] && . "$conf"
job=${SLURM_JOB_ID:-}
url=${SONDE_PROMETHEUS_URL:-}
sonde=${SONDE_BIN:-sonde}
delay=${SONDE_EPILOG_DELAY:-30}
max_bytes=${SONDE_EPILOG_MAX_BYTES:-60000}
scontrol=${SONDE_SCONTROL:-scontrol}

log() { logger -t sonde-jobstats -- "job ${job:-?}: $*" 2>/dev/null || echo "sonde-jobstats: $*" >&2; }

[[ -n $job && -n $url ]] || { log "SLURM_JOB_ID and SONDE_PROMETHEUS_URL are required"; exit 0; }
[[ $job =~ ^[0-9]+$ ]] || { log "unexpected job id"; exit 0; }

work() {
  sleep "$delay"
  # The job's start as Slurm knows it (slurmctld sets SLURM_JOB_START_TIME since 22.05): the
  # efficiency is then over Slurm's elapsed time; else over the job's series.
  local from=()
  [[ ${SLURM_JOB_START_TIME:-} =~ ^[0-9]+$ ]] && from=(--from "$SLURM_JOB_START_TIME")
  local comment errors rc
  # Only stdout is the comment: sonde's warnings (stderr) go to syslog, never into AdminComment,
  # whose read-back expects "SONDE1:" and base64 alone.
  errors=$(mktemp) || { log "mktemp failed"; return 0; }
  # shellcheck disable=SC2086  # SONDE_EPILOG_ARGS is a list of options
  comment=$(timeout 300 "$sonde" jobstats "$job" --prometheus "$url" "${from[@]}" \
              --admin-comment --max-bytes "$max_bytes" ${SONDE_EPILOG_ARGS:-} 2>"$errors")
  rc=$?
  if [[ -s $errors ]]; then
    log "sonde jobstats: $(head -c 500 "$errors" | tr -c '[:print:]\n' '?' | tr '\n' ' ')"
  fi
  rm -f "$errors"
  if ((rc != 0)); then
    log "sonde jobstats failed (exit $rc)"
    return 0
  fi
  if [[ ! $comment =~ ^SONDE1:[A-Za-z0-9+/=]+$ ]]; then
    log "sonde jobstats printed no SONDE1 line; nothing stored"
    return 0
  fi
  local current
  current=$("$scontrol" show job "$job" 2>/dev/null | sed -n 's/^ *AdminComment=//p' | head -1)
  if [[ -n $current && $current != "(null)" ]]; then
    log "AdminComment already set; not overwritten"
    return 0
  fi
  if ! out=$("$scontrol" update job="$job" AdminComment="$comment" 2>&1); then
    log "scontrol update failed: ${out:0:500}"
  fi
  return 0
}

if [[ ${SONDE_EPILOG_FOREGROUND:-0} == 1 ]]; then
  work
else
  work </dev/null >/dev/null 2>&1 &
  disown
fi
exit 0
