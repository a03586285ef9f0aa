#!/usr/bin/env bash
# The budgeted training study on SmolLM2 (docs/study/smollm2.md): grpo against vine on the hard rubric.
# The budget, entries and rule are in budget.md, written and committed before any of these runs started.
# Runs go into runs/smol-study (untracked: checkpoints are GBs); each run's small files (config, metrics.jsonl,
# summary, compare.json, credit.png) were copied after into run-files/<entry>/seed<k> (pilot/run-files likewise).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
common=(--env creditgym/Rubric-v0 --env-kw preset='"hard"' --model smollm2-135m --steps 10 --prompts-per-step 2
  --group-size 4 --eval-every 10 --eval-episodes 64 --checkpoint-every 5 --workers 2)
stage=${1:?pilot, study or probed}
if [ "$stage" = pilot ]; then  # grpo, seeds 0 and 1: sizes the study, and is its grpo arm's first two seeds
  OMP_NUM_THREADS=1 .venv/bin/creditgym compare --pilot --credit grpo --seeds 0,1 "${common[@]}" --out runs/smol-study/pilot
elif [ "$stage" = probed ]; then  # after the study, outside its budget: seed 0 again, probed at steps 0, 5 and 10
  # (the probe draws seeds of its own, so the training, and the held-out scores, are the study's seed 0)
  OMP_NUM_THREADS=1 .venv/bin/creditgym compare --credit grpo,vine --seeds 0, "${common[@]}" --probe-every 5 \
    --probe-prompts 4 --probe-k 8 --probe-stride 16 --out runs/smol-study/probed
else  # seeds as budget.md's rule gives them. As it ran: SEEDS=0,1,2,3,4 (design.md), stopped with SIGINT after
  # vine's first two steps (budget.md's addendum), then SEEDS=0,1,2 (the revised design), which resumed them.
  OMP_NUM_THREADS=1 .venv/bin/creditgym compare --credit grpo,vine --seeds "${SEEDS:?}" "${common[@]}" --out runs/smol-study/study
fi
