#!/usr/bin/env bash
# fashion_mlp under `mpirun -np 2` (per-rank batch 64, dropout off) against one process with
# batch 128 on the same 2,051 samples (2,051 = 16 x 128 + 3: the last global batch splits 2 + 1,
# and the ranks' loss weights make it the mean over its 3 samples): the test loss and accuracy
# after each epoch must agree to 4 decimals (the weights differ only by summation order); only
# rank 0 prints; a checkpoint written by 2 ranks resumes on 1 and on 2 to the same result as the
# 2-epoch runs.
# Usage: distributed_example.sh MPIEXEC FASHION_MLP DATA_DIR
set -euo pipefail
mpiexec=$1 mlp=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--limit 2051 --dropout 0 --threads 1 --data-dir "$data")
acc() {  # the final accuracy line; fails when there is none
  grep -o 'Final test accuracy: [0-9.]*' "$1" || { cat "$1"; echo "no accuracy in $1"; exit 1; }
}
val() {  # epoch, val_loss and val_acc of each epoch of a history CSV, to 4 decimals
  awk -F, 'NR > 1 { printf "%s %.4f %.4f\n", $1, $4, $5 }' "$1"
}
"$mpiexec" -np 2 "$mlp" "${common[@]}" --epochs 2 --batch-size 64 --history "$tmp/two.csv" \
  > "$tmp/two.txt" 2>&1
"$mlp" "${common[@]}" --epochs 2 --batch-size 128 --history "$tmp/one.csv" > "$tmp/one.txt" 2>&1
echo "2 ranks, batch 64 each: $(acc "$tmp/two.txt"); 1 process, batch 128: $(acc "$tmp/one.txt")"
echo "per epoch (epoch val_loss val_acc):"; val "$tmp/two.csv"; val "$tmp/one.csv"
[ "$(val "$tmp/two.csv" | wc -l)" = 2 ] || { echo "no 2-epoch history"; exit 1; }
[ "$(val "$tmp/two.csv")" = "$(val "$tmp/one.csv")" ] || { echo "epochs differ"; exit 1; }
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
