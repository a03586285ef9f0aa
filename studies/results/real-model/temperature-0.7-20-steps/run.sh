#!/usr/bin/env bash
# grpo on SmolLM2 at temperature 0.7, otherwise the command of every-module-20-steps/run.sh for grpo (Math-v0 word
# problems, 2 prompts x 4, twenty steps, held out on 32 test-split episodes at steps 0, 10 and 20, seed 0, one
# torch thread), beside the test suite. Compare with every-module-20-steps/grpo (temperature 1.0).
cd "$(git rev-parse --show-toplevel)"
mkdir -p runs/smol20-t07
OMP_NUM_THREADS=1 .venv/bin/creditgym train --env creditgym/Math-v0 --env-kw difficulty=7 --credit grpo \
  --model smollm2-135m --steps 20 --prompts-per-step 2 --group-size 4 --eval-every 10 --eval-episodes 32 \
  --checkpoint-every 10 --seed 0 --temperature 0.7 --out runs/smol20-t07/grpo
