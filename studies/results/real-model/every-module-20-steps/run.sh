#!/usr/bin/env bash
# Every credit module on SmolLM2 (named model smollm2-135m, its defaults: lr 1e-6, temperature 1.0, 48 new
# tokens), twenty steps on its home task (the hard rubric for cort, Math-v0 word problems for the others), 2
# prompts x 4, held out on 32 test-split episodes at steps 0, 10 and 20: no NaN, no crash. One torch thread per
# run; the runs went two to four at a time beside other jobs (cort was killed at step 19 and went on from its
# step-10 checkpoint: the same command with --resume). Then:
#   python studies/scripts/every_module.py studies/results/real-model/every-module-20-steps
cd "$(git rev-parse --show-toplevel)"
mkdir -p runs/smol20
for m in vine grpo cort pact cast compo gae rloo; do
  if [ "$m" = cort ]; then env=(--env creditgym/Rubric-v0 --env-kw preset='"hard"'); else env=(--env creditgym/Math-v0 --env-kw difficulty=7); fi
  start=$(date +%s)
  OMP_NUM_THREADS=1 .venv/bin/creditgym train "${env[@]}" --credit $m --model smollm2-135m --steps 20 \
    --prompts-per-step 2 --group-size 4 --eval-every 10 --eval-episodes 32 --checkpoint-every 10 --seed 0 \
    --out runs/smol20/$m > runs/smol20/$m.log 2>&1
  echo "$m rc=$? $(( $(date +%s) - start ))s" >> runs/smol20/wall-times.txt
done
