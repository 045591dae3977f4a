#!/usr/bin/env bash
# A one-node SLURM on this machine for the tests marked `slurm` (as root; Debian's slurm-wlm and munge):
#   .ci/slurm.sh start [--accounting]       install the packages where missing, write the configuration, start
#                                           munged, slurmctld and slurmd, wait until the node is idle; rc != 0
#                                           (stopped again) where it cannot. --accounting: with SLURM's accounting
#                                           too (Debian's slurmdbd and mariadb-server; `sacct` answers): a fresh
#                                           mariadbd and slurmdbd, started first, the cluster registered
#   .ci/slurm.sh stop                       stop the daemons it started, by the PIDs it recorded
#   .ci/slurm.sh run [--accounting] CMD...  start, run CMD with SLURM_CONF set, stop whatever CMD's outcome; CMD's
#                                           exit status
# Everything lives in $KLM_SLURM_DIR (default /tmp/klm-slurm): the configuration (SLURM_CONF points there, so no
# /etc/slurm is written), munge's key and socket, the database, the daemons' state, logs and PID files.
set -uo pipefail
DIR=${KLM_SLURM_DIR:-/tmp/klm-slurm}
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF
ACCOUNTING=""
DAEMONS="slurmd slurmctld slurmdbd mariadbd munged"  # the order they stop in

fail() { echo "slurm.sh: $*" >&2; stop; exit 1; }

install_packages() {
    local packages="slurm-wlm munge" programs="slurmctld slurmd munged" program missing=""
    [ -n "$ACCOUNTING" ] && packages="$packages slurmdbd mariadb-server" programs="$programs slurmdbd mariadbd"
    for program in $programs; do command -v "$program" >/dev/null || missing=1; done
    [ -z "$missing" ] && return 0
    [ "$(id -u)" = 0 ] || { echo "slurm.sh: $packages are not all installed, and installing them needs root" >&2; return 1; }
    command -v apt-get >/dev/null || { echo "slurm.sh: $packages are not all installed, and there is no apt-get" >&2; return 1; }
    echo "slurm.sh: installing $packages" >&2
    # shellcheck disable=SC2086
    timeout 300 apt-get update -qq >"$DIR/apt.log" 2>&1 &&
        DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends $packages \
            >>"$DIR/apt.log" 2>&1 || { echo "slurm.sh: apt-get failed (see $DIR/apt.log)" >&2; return 1; }
}

write_configuration() {
    local host cpus min_job_age
    host=$(hostname -s)
    cpus=8  # more than the cores this machine may have (config_overrides): two jobs and a 2-task job run at once
    # How long the queue lists an ended job: long enough for the runner to see it end; with accounting, short (it
    # forgets them 10-20 s after they end), for the test of a job known by its accounting only not to wait a minute.
    min_job_age=30
    [ -z "$ACCOUNTING" ] || min_job_age=10
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
$(accounting_lines)
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
MinJobAge=$min_job_age
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=cpu Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

accounting_lines() {
    if [ -n "$ACCOUNTING" ]; then
        # AccountingStoragePass: for slurmdbd, munge's socket (the clients' AuthInfo does not reach it)
        printf '%s\n' AccountingStorageType=accounting_storage/slurmdbd AccountingStorageHost=127.0.0.1 \
            AccountingStoragePort=6920 "AccountingStoragePass=$DIR/munge.socket"
    else
        echo AccountingStorageType=accounting_storage/none
    fi
}

start_accounting() {
    # A database of its own (a fresh datadir each start, on 127.0.0.1:6919 and a socket here; never the system's),
    # a user for slurmdbd with a password made now, slurmdbd (its configuration mode 600, as slurmdbd demands), the
    # cluster registered. mariadbd does not detach itself: setsid, and its PID file is how stop finds it.
    local host password
    host=$(hostname -s)
    password=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
    rm -rf "$DIR/mysql"
    mariadb-install-db --no-defaults --datadir="$DIR/mysql" --user=root --auth-root-authentication-method=socket \
        --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1 ||
        fail "mariadb-install-db failed (see $DIR/log/mariadb-install.log)"
    setsid mariadbd --no-defaults --datadir="$DIR/mysql" --user=root --socket="$DIR/mysql.sock" \
        --pid-file="$DIR/mariadbd.pid" --bind-address=127.0.0.1 --port=6919 --skip-name-resolve \
        --log-error="$DIR/log/mariadb.log" </dev/null >/dev/null 2>&1 &
    for _ in $(seq 60); do  # ready in about 1 s; 30 s at most
        mariadb-admin --no-defaults --socket="$DIR/mysql.sock" ping >/dev/null 2>&1 && break
        sleep 0.5
    done
    mariadb --no-defaults --socket="$DIR/mysql.sock" -e "CREATE DATABASE slurm_acct_db;
        CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$password';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" 2>"$DIR/log/mariadb-setup.log" ||
        fail "mariadbd did not start or take the database (see $DIR/log/mariadb.log, $DIR/log/mariadb-setup.log)"
    (umask 077 && cat >"$DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$DIR/munge.socket
DbdHost=$host
DbdAddr=127.0.0.1
DbdPort=6920
SlurmUser=root
PidFile=$DIR/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=6919
StorageUser=slurm
StoragePass=$password
StorageLoc=slurm_acct_db
EOF
    )
    slurmdbd || fail "slurmdbd did not start (see $DIR/log/slurmdbd.log)"  # its configuration beside SLURM_CONF
    for _ in $(seq 60); do  # it makes its tables first: a few seconds
        timeout 5 sacctmgr -n list cluster >/dev/null 2>&1 && break
        sleep 0.5
    done
    timeout 10 sacctmgr -i add cluster klm >"$DIR/log/sacctmgr.log" 2>&1 ||
        fail "slurmdbd did not answer or register the cluster (see $DIR/log/slurmdbd.log, $DIR/log/sacctmgr.log)"
}

start() {
    mkdir -p "$DIR" && chmod 700 "$DIR" || { echo "slurm.sh: cannot create $DIR" >&2; return 1; }
    stop  # daemons of an earlier start
    install_packages || return 1
    write_configuration
    munged --force --key-file="$DIR/munge.key" --socket="$DIR/munge.socket" --pid-file="$DIR/munged.pid" \
        --seed-file="$DIR/munge.seed" --log-file="$DIR/log/munged.log" || fail "munged did not start"
    [ -z "$ACCOUNTING" ] || start_accounting
    slurmctld -f "$CONF" || fail "slurmctld did not start (see $DIR/log/slurmctld.log)"
    slurmd -f "$CONF" || fail "slurmd did not start (see $DIR/log/slurmd.log)"
    for _ in $(seq 60); do  # ready in about 2 s; 30 s at most
        [ "$(timeout 5 sinfo -h -o %t 2>/dev/null)" = idle ] &&
            { echo "slurm.sh: SLURM up${ACCOUNTING:+ with accounting} (SLURM_CONF=$CONF)" >&2; return 0; }
        sleep 0.5
    done
    fail "the node did not become idle in 30 s: $(timeout 5 sinfo -h -o '%t %E' 2>&1 | head -1)"
}

stop() {
    local name pid
    for name in $DAEMONS; do
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

action=${1:-}
shift
[ "${1:-}" = --accounting ] && [ "$action" != stop ] && { ACCOUNTING=1; shift; }
case "$action" in
    start) start ;;
    stop) stop ;;
    run)
        start || exit 1
        trap stop EXIT
        "$@"
        ;;
    *) echo "usage: $0 start [--accounting] | stop | run [--accounting] CMD..." >&2; exit 2 ;;
esac
