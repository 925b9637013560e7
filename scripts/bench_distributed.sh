#!/usr/bin/env bash
# Data-parallel scaling of the MLP and CNN training steps: bench_distributed as one process and
# under `mpirun -np N` (default 2), one kernel thread per process, the same batch per rank. Prints
# each step's median time and the scaling efficiency, t(1 process) / t(N processes): 1.0 when N
# ranks train N times the samples in the same time. Installs what is missing, builds in Release.
#   bash scripts/bench_distributed.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
ranks="${1:-2}"
bash scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target bench_distributed
# Open MPI refuses root without these, and more ranks than cores without oversubscription.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() {  # median real time (ms) per benchmark name, as "name time"
  "$@" --benchmark_format=csv --benchmark_report_aggregates_only=true |
    awk -F, '$1 ~ /_median"?$/ { gsub(/"/, "", $1); sub(/_median$/, "", $1); print $1, $3 }'
}
one=$(run ./build/bench/bench_distributed)
bind=core
[ "$ranks" -gt "$(nproc)" ] && bind=none  # oversubscribed: ranks share cores
many=$(run mpirun -np "$ranks" --bind-to "$bind" ./build/bench/bench_distributed)
echo "step (batch per rank)                       1 process   $ranks processes   efficiency"
join <(echo "$one" | sort) <(echo "$many" | sort) |
  awk '{ printf "%-42s %8.2f ms %10.2f ms %10.1f %%\n", $1, $2, $3, 100 * $2 / $3 }'
