#!/usr/bin/env bash
# Starts (or stops) a real Slurm cluster on this machine from Debian's slurm-wlm and munge, with
# every file in one folder, for tests and for trying the sbatch script on one machine: NODES
# nodes (default 1) named n1, n2, ..., each its own slurmd on its own port at 127.0.0.1, each
# with this machine's CPUs (at least 4, oversubscribed).
#
#   eval "$(deploy/slurm/local_cluster.sh start DIR [NODES])"   # exports SLURM_CONF
#   deploy/slurm/local_cluster.sh stop DIR
#
# Needs root (slurmd runs jobs as their user). Uses its own munge key, socket and ports.
set -euo pipefail
action=${1:?start or stop}
dir=${2:?folder}
nodes=${3:-1}

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

pidfiles() { echo "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munged.pid"; }

stop() {
  for pidfile in $(pidfiles); do
    [[ -f "$pidfile" ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  for _ in $(seq 1 50); do
    alive=0
    for pidfile in $(pidfiles); do
      [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null && alive=1
    done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
  done
}

if [[ "$action" == stop ]]; then stop; exit 0; fi
[[ $nodes =~ ^[1-9][0-9]*$ ]] || { echo "local_cluster.sh: NODES must be a positive number, got \"$nodes\"" >&2; exit 2; }

mkdir -p "$dir/state" "$dir/munge"
host=$(hostname -s)
mungekey --create --keyfile="$dir/munge/munge.key" --force 2>/dev/null
chmod 0400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"
# The cores slurmd finds: nproc alone would give OMP_NUM_THREADS when that is set (GNU nproc
# honours it), and slurmd then never starts a job that asks for more tasks.
# Each node is declared with at least 4 (config_overrides: slurmd then does not refuse a node
# that declares more than the machine has), so that uneven task counts fit on small machines.
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
cpus=$(( cpus < 4 ? 4 : cpus ))
node_lines=$(for i in $(seq 1 "$nodes"); do
  echo "NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port) CPUs=$cpus RealMemory=1000 State=UNKNOWN"
done)
cat > "$dir/slurm.conf" <<CONF
ClusterName=localsgd-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire: a requeued job may start again after 10 s (the default is 120 s).
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
SlurmctldPort=$(free_port)
$node_lines
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF"
for i in $(seq 1 "$nodes"); do
  mkdir -p "$dir/spool-n$i"
  slurmd -f "$SLURM_CONF" -N "n$i"
done
idle() { [[ $(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l) -eq $nodes ]]; }
for _ in $(seq 1 300); do idle && break; sleep 0.1; done
idle || { echo "slurm nodes not idle: $(sinfo -N 2>&1)" >&2; stop; exit 1; }
echo "export SLURM_CONF=$SLURM_CONF"
