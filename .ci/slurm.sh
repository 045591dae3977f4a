#!/usr/bin/env bash
# A one-node SLURM on this machine for the tests marked `slurm` (as root; Debian's slurm-wlm and munge):
#   .ci/slurm.sh start          install the packages where missing, write the configuration, start munged, slurmctld
#                               and slurmd, wait until the node is idle; rc != 0 (stopped again) where it cannot
#   .ci/slurm.sh stop           stop the daemons it started, by the PIDs it recorded
#   .ci/slurm.sh run CMD...     start, run CMD with SLURM_CONF set, stop whatever CMD's outcome; CMD's exit status
# Everything lives in $KLM_SLURM_DIR (default /tmp/klm-slurm): the configuration (SLURM_CONF points there, so no
# /etc/slurm is written), munge's key and socket, the daemons' state, logs and PID files. No accounting (slurmdbd).
set -uo pipefail
DIR=${KLM_SLURM_DIR:-/tmp/klm-slurm}
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF

fail() { echo "slurm.sh: $*" >&2; stop; exit 1; }

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && return 0
    [ "$(id -u)" = 0 ] || { echo "slurm.sh: slurm-wlm and munge are not installed, and installing them needs root" >&2; return 1; }
    command -v apt-get >/dev/null || { echo "slurm.sh: slurm-wlm and munge are not installed, and there is no apt-get" >&2; return 1; }
    echo "slurm.sh: installing slurm-wlm and munge" >&2
    timeout 300 apt-get update -qq >"$DIR/apt.log" 2>&1 &&
        DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends slurm-wlm munge \
            >>"$DIR/apt.log" 2>&1 || { echo "slurm.sh: apt-get failed (see $DIR/apt.log)" >&2; return 1; }
}

write_configuration() {
    local host cpus
    host=$(hostname -s)
    cpus=8  # more than the cores this machine may have (config_overrides): two jobs and a 2-task job run at once
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
    [ -f "$DIR/munge.key" ] || { head -c 1024 /dev/urandom >"$DIR/munge.key" && chmod 400 "$DIR/munge.key"; }
    cat >"$CONF" <<EOF
ClusterName=klm
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=6917
SlurmdPort=6918
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
MinJobAge=30
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=cpu Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

start() {
    mkdir -p "$DIR" && chmod 700 "$DIR" || { echo "slurm.sh: cannot create $DIR" >&2; return 1; }
    stop  # daemons of an earlier start
    install_packages || return 1
    write_configuration
    munged --force --key-file="$DIR/munge.key" --socket="$DIR/munge.socket" --pid-file="$DIR/munged.pid" \
        --seed-file="$DIR/munge.seed" --log-file="$DIR/log/munged.log" || fail "munged did not start"
    slurmctld -f "$CONF" || fail "slurmctld did not start (see $DIR/log/slurmctld.log)"
    slurmd -f "$CONF" || fail "slurmd did not start (see $DIR/log/slurmd.log)"
    for _ in $(seq 60); do  # ready in about 2 s; 30 s at most
        [ "$(timeout 5 sinfo -h -o %t 2>/dev/null)" = idle ] && { echo "slurm.sh: SLURM up (SLURM_CONF=$CONF)" >&2; return 0; }
        sleep 0.5
    done
    fail "the node did not become idle in 30 s: $(timeout 5 sinfo -h -o '%t %E' 2>&1 | head -1)"
}

stop() {
    local name pid
    for name in slurmd slurmctld munged; do
        [ -f "$DIR/$name.pid" ] || continue
        pid=$(cat "$DIR/$name.pid" 2>/dev/null)
        if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
            for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
            kill -9 "$pid" 2>/dev/null
        fi
        rm -f "$DIR/$name.pid"
    done
    return 0
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    run)
        shift
        start || exit 1
        trap stop EXIT
        "$@"
        ;;
    *) echo "usage: $0 start | stop | run CMD..." >&2; exit 2 ;;
esac
