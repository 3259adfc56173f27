#!/usr/bin/env bash
# Idle footprint of one sidecar (with the counter app registered) heartbeating a Lease on the
# real test control plane: resident memory and CPU over a quiet minute. The figure sizes the
# default requests the operator renders (BENCHMARKS.md, "Sidecar idle footprint").
#
# Usage: scripts/measure-sidecar-idle.sh [BIN_DIR] [SECONDS]
#   BIN_DIR: where sigx-sidecar and counter-app are (default target/release; build them with
#            `cargo build --release -p sigx-sidecar -p counter-app`)
#   SIGX_CONTROLPLANE: the control plane binary (default .tools/bin/sigx-controlplane)
# Needs kubectl and curl.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/release}
secs=${2:-60}
cp_bin=${SIGX_CONTROLPLANE:-$root/.tools/bin/sigx-controlplane}
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

mkfifo "$dir/cp.out" "$dir/cp.in"
sleep infinity > "$dir/cp.in" & # holds the control plane's stdin open (EOF stops it)
pids+=($!)
"$cp_bin" --kubeconfig "$dir/kubeconfig" --data-dir "$dir/data" < "$dir/cp.in" > "$dir/cp.out" 2> "$dir/cp.log" &
pids+=($!)
read -r line < "$dir/cp.out"
[[ $line == ready* ]] || { echo "control plane failed: $line" >&2; tail "$dir/cp.log" >&2; exit 1; }

# The sidecar's Lease is owned by its Pod (the garbage collector removes the Lease of a Pod
# that does not exist), so a Pod object stands in for the one a kubelet would run.
export KUBECONFIG=$dir/kubeconfig
kubectl create -f - >/dev/null <<POD
apiVersion: v1
kind: Pod
metadata: {name: host-a, namespace: default}
spec: {containers: [{name: app, image: none}]}
POD
uid=$(kubectl get pod host-a -o jsonpath='{.metadata.uid}')

SIGX_MEMBERSHIP=kubernetes SIGX_INSECURE=true SIGX_CLUSTER=demo SIGX_ROLE=engine \
POD_NAME=host-a POD_NAMESPACE=default POD_UID=$uid NODE_NAME=node-1 \
KUBECONFIG=$dir/kubeconfig RUST_LOG=info \
  "$bin/sigx-sidecar" --socket "$dir/s.sock" --health-addr 127.0.0.1:19090 \
  --mesh-addr 127.0.0.1:17311 --advertise 127.0.0.1:17311 --beat-ms 5000 --ttl-ms 15000 \
  > "$dir/sidecar.log" 2>&1 &
sidecar=$!
pids+=($sidecar)
for _ in $(seq 200); do [[ -S $dir/s.sock ]] && break; sleep 0.05; done
SIGX_SOCKET=$dir/s.sock "$bin/counter-app" > "$dir/app.log" 2>&1 &
pids+=($!)
for _ in $(seq 900); do
  curl -fs http://127.0.0.1:19090/readyz >/dev/null 2>&1 && break; sleep 0.1
done
curl -fs http://127.0.0.1:19090/readyz >/dev/null || { echo "sidecar never ready" >&2; head -n 8 "$dir/app.log" >&2; exit 1; }
sleep 10 # past start-up allocations
ticks() { awk '{print $14 + $15}' "/proc/$sidecar/stat"; }
hz=$(getconf CLK_TCK)
t0=$(ticks)
peak=0
for _ in $(seq "$secs"); do
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$sidecar/status")
  (( rss > peak )) && peak=$rss
  sleep 1
done
t1=$(ticks)
echo "sidecar idle over ${secs}s: VmRSS now $(awk '/VmRSS/ {print $2}' "/proc/$sidecar/status") KiB, peak ${peak} KiB, VmHWM $(awk '/VmHWM/ {print $2}' "/proc/$sidecar/status") KiB"
echo "cpu: $(( t1 - t0 )) ticks of 1/${hz}s in ${secs}s = $(awk -v t=$((t1 - t0)) -v hz="$hz" -v s="$secs" 'BEGIN {printf "%.2f", 1000 * t / hz / s}') millicores"
