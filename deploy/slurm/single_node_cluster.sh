#!/usr/bin/env bash
# Starts (or stops) a real single-node Slurm cluster from Debian's slurm-wlm and munge, with
# every file in one folder, for tests and for trying the sbatch script on one machine.
#
#   eval "$(deploy/slurm/single_node_cluster.sh start DIR)"   # exports SLURM_CONF
#   deploy/slurm/single_node_cluster.sh stop DIR
#
# Needs root (slurmd runs jobs as their user). Uses its own munge key, socket and ports.
set -euo pipefail
action=${1:?start or stop}
dir=${2:?folder}

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

stop() {
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munged.pid"; do
    [[ -f "$pidfile" ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  for _ in $(seq 1 50); do
    alive=0
    for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munged.pid"; do
      [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null && alive=1
    done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
  done
}

if [[ "$action" == stop ]]; then stop; exit 0; fi

mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
host=$(hostname -s)
mungekey --create --keyfile="$dir/munge/munge.key" --force 2>/dev/null
chmod 0400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"
# The cores slurmd finds: nproc alone would give OMP_NUM_THREADS when that is set (GNU nproc
# honours it), and slurmd then never starts a job that asks for more tasks.
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
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
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
NodeName=$host CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 1 300); do
  sinfo -h -o '%T' 2>/dev/null | grep -q '^idle' && break
  sleep 0.1
done
sinfo -h -o '%T' | grep -q '^idle' || { echo "slurm node not idle: $(sinfo 2>&1)" >&2; stop; exit 1; }
echo "export SLURM_CONF=$SLURM_CONF"
