#!/usr/bin/env bash
# A real Slurm on this machine, for the tests marked `slurm` (tests/test_slurm_real.py).
#
#   scripts/slurm_local.sh up [--nodes=N]   install (as root, with apt) and start an N-node Slurm (1 or 2)
#   scripts/slurm_local.sh run CMD...       run CMD on its login node, e.g. `run srun -n3 hostname`
#   scripts/slurm_local.sh down             stop every process `up` started, by PID
#   scripts/slurm_local.sh status           sinfo, or exit 1 when it is not up
#
# Everything runs in private network namespaces, as the launcher's simulated hosts do, so no
# daemon or task listens where anything else on this machine can reach it and the machine's own
# network is untouched: a login namespace holds a bridge (10.88.0.1, host name ptf-login, where
# slurmctld and srun run) and each node sn<i> (10.88.0.<i+1>) is a namespace of its own, with its
# own host name, running one slurmd. A private mount namespace gives them one /etc/hosts that
# names them all. munge keeps its packaged key and its socket under /run/munge.
# State, logs and PIDs live in $SLURM_LOCAL_DIR (default: .slurm-local in the repository).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${SLURM_LOCAL_DIR:-$REPO/.slurm-local}"
SUBNET=10.88.0
BRIDGE=ptfslurm0
CPUS_PER_NODE=6 # declared, not real: the sbatch example's 3 tasks x 2 CPUs fill a node; they share the cores

die() {
  echo "slurm_local: $*" >&2
  exit 1
}

holder() { cat "$STATE/$1.pid" 2>/dev/null; }

# Up: the login namespace exists and slurmctld answers there.
is_up() {
  local login
  login="$(holder login)" && [[ -d /proc/$login ]] && in_login sinfo -h >/dev/null 2>&1
}

in_login() {
  nsenter -t "$(holder login)" --net --mount --uts -- env SLURM_CONF="$STATE/slurm.conf" "$@"
}

install_slurm() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return
  [[ $EUID -eq 0 ]] || die "Slurm is not installed and only root can install it (apt-get install slurm-wlm)"
  command -v apt-get >/dev/null || die "Slurm is not installed and there is no apt-get to install it with"
  echo "slurm_local: installing slurm-wlm with apt-get" >&2
  timeout 120 apt-get update -qq >/dev/null || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive timeout 120 apt-get install -y -qq slurm-wlm >/dev/null || die "apt-get install failed"
}

start_munge() {
  if munge -n </dev/null >/dev/null 2>&1; then return; fi # a munged is already serving
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- munged
  cp /run/munge/munged.pid "$STATE/munged.pid"
}

write_config() {
  local nodes=$1 i
  {
    echo "127.0.0.1 localhost"
    echo "$SUBNET.1 ptf-login"
    for ((i = 1; i <= nodes; i++)); do echo "$SUBNET.$((i + 1)) sn$i"; done
  } >"$STATE/hosts"
  cat >"$STATE/slurm.conf" <<EOF
ClusterName=parallel_tf
SlurmctldHost=ptf-login($SUBNET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd-%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=DEFAULT CPUs=$CPUS_PER_NODE State=UNKNOWN
EOF
  for ((i = 1; i <= nodes; i++)); do echo "NodeName=sn$i NodeAddr=$SUBNET.$((i + 1))" >>"$STATE/slurm.conf"; done
  echo "PartitionName=local Nodes=sn[1-$nodes] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE" \
    >>"$STATE/slurm.conf"
}

# A process that only holds namespaces open; its PID names them for nsenter.
start_holder() {
  local name=$1
  shift
  setsid "$@" sleep infinity </dev/null >/dev/null 2>&1 &
  echo $! >"$STATE/$name.pid"
  sleep 0.2
  [[ -d /proc/$! ]] || die "could not create the namespaces of $name (unshare $*)"
}

start_network() {
  local nodes=$1 login i node
  start_holder login unshare --net --mount --uts --propagation private
  login="$(holder login)"
  nsenter -t "$login" --uts hostname ptf-login
  nsenter -t "$login" --mount mount --bind "$STATE/hosts" /etc/hosts
  nsenter -t "$login" --net sh -e -c "ip link set lo up; ip link add $BRIDGE type bridge;
    ip addr add $SUBNET.1/24 dev $BRIDGE; ip link set $BRIDGE up"
  for ((i = 1; i <= nodes; i++)); do
    start_holder "sn$i" nsenter -t "$login" --mount -- unshare --net --uts
    node="$(holder "sn$i")"
    nsenter -t "$node" --uts hostname "sn$i"
    nsenter -t "$login" --net ip link add "vsn$i" type veth peer name eth0 netns "$node"
    nsenter -t "$login" --net ip link set "vsn$i" master "$BRIDGE" up
    nsenter -t "$node" --net sh -e -c "ip link set lo up; ip addr add $SUBNET.$((i + 1))/24 dev eth0;
      ip link set eth0 up"
  done
}

up() {
  local nodes=1 i
  for arg in "$@"; do
    case $arg in
    --nodes=1 | --nodes=2) nodes=${arg#--nodes=} ;;
    *) die "up takes --nodes=1 or --nodes=2, not $arg" ;;
    esac
  done
  if is_up; then
    echo "slurm_local: already up ($STATE)" >&2
    return
  fi
  [[ $EUID -eq 0 ]] || die "needs root: it creates network namespaces and runs Slurm's daemons"
  down 2>/dev/null || true
  rm -rf "$STATE" # the state of a cluster that is gone: its jobs, its logs
  install_slurm
  command -v nsenter >/dev/null && command -v ip >/dev/null || die "needs util-linux's nsenter and iproute2's ip"
  mkdir -p "$STATE/slurmctld"
  write_config "$nodes"
  start_munge
  start_network "$nodes"
  SLURM_CONF="$STATE/slurm.conf" nsenter -t "$(holder login)" --net --mount --uts -- slurmctld
  for ((i = 1; i <= nodes; i++)); do
    SLURM_CONF="$STATE/slurm.conf" nsenter -t "$(holder "sn$i")" --net --mount --uts -- slurmd -N "sn$i"
  done
  for _ in $(seq 100); do
    if is_up && [[ $(in_login sinfo -h -o %D -t idle 2>/dev/null) == "$nodes" ]]; then
      echo "slurm_local: up, $nodes node(s): $(in_login sinfo -h -o '%P %D %T %N')" >&2
      return
    fi
    sleep 0.2
  done
  die "slurmctld or slurmd did not come up in 20 s; see $STATE/*.log"
}

stop_pid_file() {
  local file=$1 pid _
  [[ -f $file ]] || return 0
  pid="$(cat "$file")"
  if [[ -d /proc/$pid ]]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do [[ -d /proc/$pid ]] || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

down() {
  local file
  [[ -d $STATE ]] || return 0
  for file in "$STATE"/slurmd-*.pid "$STATE/slurmctld.pid" "$STATE"/sn*.pid "$STATE/login.pid" "$STATE/munged.pid"; do
    stop_pid_file "$file"
  done
  echo "slurm_local: down" >&2
}

case "${1:-}" in
up) shift && up "$@" ;;
down) down ;;
status) is_up || die "not up"; in_login sinfo ;;
run)
  shift
  is_up || die "not up: scripts/slurm_local.sh up"
  exec nsenter -t "$(holder login)" --net --mount --uts --wd="$PWD" -- env SLURM_CONF="$STATE/slurm.conf" "$@"
  ;;
*) die "usage: $0 up [--nodes=1|2] | run CMD... | down | status" ;;
esac
