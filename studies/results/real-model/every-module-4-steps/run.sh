#!/usr/bin/env bash
# Every credit module on SmolLM2 (named model smollm2-135m, its defaults), a few steps each: no NaN, no crash.
cd "$(git rev-parse --show-toplevel)"
mkdir -p runs/smol-all
for m in grpo rloo gae cort cast compo pact vine; do
  if [ "$m" = cort ]; then env=(--env creditgym/Rubric-v0 --env-kw preset='"hard"'); else env=(--env creditgym/Math-v0 --env-kw difficulty=7); fi
  start=$(date +%s)
  OMP_NUM_THREADS=1 .venv/bin/creditgym train "${env[@]}" --credit $m --model smollm2-135m --steps 4 \
    --prompts-per-step 2 --group-size 4 --eval-every 4 --eval-episodes 16 --seed 0 --out runs/smol-all/$m \
    > runs/smol-all/$m.log 2>&1
  echo "$m rc=$? $(( $(date +%s) - start ))s" >> runs/smol-all/summary.txt
done
