#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the `slurm` tests (tests/test_slurm.py) and for trying
# `hydra/launcher=slurm` by hand:
#
#   scripts/slurm-local.sh start    # as root: installs slurm-wlm and munge if missing, writes
#                                   # /etc/slurm/slurm.conf for this machine, starts munged, slurmctld
#                                   # and slurmd, and waits until the node is idle
#   scripts/slurm-local.sh status   # sinfo; exit 0 when the node is up
#   scripts/slurm-local.sh stop     # stops the three daemons
#
# Each command is idempotent: `start` on a running cluster only checks it. The node's CPUs and memory
# are what `slurmd -C` reads from the machine; the one partition is `local`. A slurm.conf that this
# script did not write is never overwritten.
set -euo pipefail

PARTITION=local
CONF=/etc/slurm/slurm.conf
MARK="# written by attnx scripts/slurm-local.sh"
SPOOL=/var/spool/slurmctld
SLURMD_SPOOL=/var/spool/slurmd
LOGS=/var/log/slurm
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
MUNGE_PID=/run/munge/munged.pid

say() { echo "slurm-local: $*"; }
die() { echo "slurm-local: $*" >&2; exit 1; }

alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

node_state() { sinfo -h -N -p "$PARTITION" -o %T 2>/dev/null | head -n1 || true; }

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && return
    [[ $EUID -eq 0 ]] || die "slurm-wlm and munge are not installed, and installing them needs root"
    command -v apt-get >/dev/null || die "slurm-wlm and munge are not installed, and there is no apt-get"
    say "installing slurm-wlm and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurm-wlm munge >/dev/null
}

write_conf() {
    if [[ -f $CONF ]] && ! grep -qxF "$MARK" "$CONF"; then
        die "$CONF exists and was not written by this script; leaving it (and this cluster) alone"
    fi
    local node host
    host=$(hostname -s)
    # NodeName=<host> CPUs=... Boards=... SocketsPerBoard=... CoresPerSocket=... ThreadsPerCore=... RealMemory=...
    node=$(slurmd -C | grep '^NodeName=')
    mkdir -p "$(dirname "$CONF")"
    cat >"$CONF.tmp" <<EOF
$MARK
ClusterName=attnx-local
SlurmctldHost=$host
# one machine, run by root: no cgroups (containers rarely allow them), no accounting daemon
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a requeued job waits this long before it may start again (120 s by default)
AuthInfo=cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
# look at pending jobs (a requeued one) every 5 s instead of every 30-60 s
SchedulerParameters=sched_interval=5,bf_interval=5
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation=$SPOOL
SlurmdSpoolDir=$SLURMD_SPOOL
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
# a node that was down comes back by itself once its slurmd registers
ReturnToService=2
# SIGTERM to SIGKILL at a time limit
KillWait=10
# finished jobs stay visible to squeue/scontrol (submitit reads their state) for 5 minutes
MinJobAge=300
$node State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    if cmp -s "$CONF.tmp" "$CONF"; then
        rm "$CONF.tmp"
        return
    fi
    mv "$CONF.tmp" "$CONF"
    if alive "$CTLD_PID"; then
        say "slurm.conf changed: reconfiguring the running daemons"
        scontrol reconfigure
    fi
}

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
    install -d -o munge -g munge -m 0755 /run/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        mungekey --create --keyfile=/etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key
        chmod 0400 /etc/munge/munge.key
    fi
    runuser -u munge -- /usr/sbin/munged 9>&-
    for _ in $(seq 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return
        sleep 0.1
    done
    die "munged did not start (see /var/log/munge/munged.log)"
}

start() {
    if [[ $EUID -ne 0 ]]; then
        case $(node_state) in
            idle* | mix* | alloc*) say "already running: partition $PARTITION, node $(node_state)"; return ;;
        esac
        die "starting the daemons needs root"
    fi
    exec 9>/run/slurm-local.lock
    flock 9  # two test workers may start it at once; the daemons must not inherit it (9>&-), or the
             # next start, with the cluster already up, would wait for them forever
    install_packages
    write_conf
    mkdir -p "$SPOOL" "$SLURMD_SPOOL" "$LOGS"
    start_munge
    alive "$CTLD_PID" || slurmctld 9>&-
    alive "$SLURMD_PID" || slurmd 9>&-
    local state=""
    for _ in $(seq 120); do
        state=$(node_state)
        case $state in
            idle* | mix* | alloc*) say "up: partition $PARTITION, node $(hostname -s) $state"; return ;;
            down* | drain*) scontrol update NodeName="$(hostname -s)" State=RESUME 2>/dev/null || true ;;
        esac
        sleep 0.5
    done
    die "the node did not become idle (state: ${state:-none}); see $LOGS/slurmctld.log and $LOGS/slurmd.log"
}

stop() {
    local pidfile pid
    for pidfile in "$SLURMD_PID" "$CTLD_PID" "$MUNGE_PID"; do
        alive "$pidfile" || continue
        pid=$(cat "$pidfile")
        kill "$pid"
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    done
    say "stopped"
}

status() {
    local state
    state=$(node_state)
    if [[ -z $state ]]; then
        say "not running"
        return 1
    fi
    sinfo -p "$PARTITION"
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
