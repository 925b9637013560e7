#!/usr/bin/env bash
# fashion_mlp under `mpirun -np 2` (per-rank batch 64, dropout off) against one process with
# batch 128 on the same 2,000 samples: the test accuracy after each epoch must be the same to
# the printed digits (the weights differ only by summation order); only rank 0 prints; a
# checkpoint written by 2 ranks resumes on 1 and on 2 to the same result as the 2-epoch runs.
# Usage: distributed_example.sh MPIEXEC FASHION_MLP DATA_DIR
set -euo pipefail
mpiexec=$1 mlp=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--limit 2000 --dropout 0 --threads 1 --data-dir "$data")
acc() { grep -o 'Final test accuracy: [0-9.]*' "$1"; }
"$mpiexec" -np 2 "$mlp" "${common[@]}" --epochs 2 --batch-size 64 > "$tmp/two.txt" 2>&1
"$mlp" "${common[@]}" --epochs 2 --batch-size 128 > "$tmp/one.txt" 2>&1
echo "2 ranks, batch 64 each: $(acc "$tmp/two.txt"); 1 process, batch 128: $(acc "$tmp/one.txt")"
[ "$(acc "$tmp/two.txt")" = "$(acc "$tmp/one.txt")" ] || { echo "accuracies differ"; exit 1; }
# Rank 0 alone prints: one header per epoch, one final line.
[ "$(grep -c 'Epoch 2/2' "$tmp/two.txt")" = 1 ] || { cat "$tmp/two.txt"; echo "not rank 0 alone"; exit 1; }
[ "$(grep -c 'Final test accuracy' "$tmp/two.txt")" = 1 ] || { echo "final line twice"; exit 1; }
grep -q '2 processes (MPI)' "$tmp/two.txt" || { echo "no MPI launch detected"; exit 1; }
# A checkpoint of epoch 1 written by 2 ranks, resumed on 1 (batch 128) and on 2 (batch 64).
"$mpiexec" -np 2 "$mlp" "${common[@]}" --epochs 1 --batch-size 64 --save "$tmp/ck.npz" > /dev/null 2>&1
"$mlp" "${common[@]}" --epochs 2 --batch-size 128 --load "$tmp/ck.npz" > "$tmp/r1.txt" 2>&1
"$mpiexec" -np 2 "$mlp" "${common[@]}" --epochs 2 --batch-size 64 --load "$tmp/ck.npz" > "$tmp/r2.txt" 2>&1
echo "resumed on 1: $(acc "$tmp/r1.txt"); on 2: $(acc "$tmp/r2.txt")"
[ "$(acc "$tmp/r1.txt")" = "$(acc "$tmp/one.txt")" ] || { echo "resume on 1 differs"; exit 1; }
[ "$(acc "$tmp/r2.txt")" = "$(acc "$tmp/one.txt")" ] || { echo "resume on 2 differs"; exit 1; }
echo "ok"
