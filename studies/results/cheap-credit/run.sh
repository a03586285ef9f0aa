#!/usr/bin/env bash
# Cheap credit (docs/study/cheap-credit.md), as it ran on a 2-core CPU shared with other jobs. Then the step times
# (step-times.json; one torch thread each, beside the probes) and the table:
#   OMP_NUM_THREADS=1 python studies/scripts/cheap_credit.py time --models creditgym/tiny
#   OMP_NUM_THREADS=1 python studies/scripts/cheap_credit.py time --models smollm2-135m --tasks rubric-hard \
#     --repeats 1 --prompts-per-step 2 --group-size 4     # a SmolLM2 step took about a minute on one core
#   python studies/scripts/cheap_credit.py filler       # filler.json: why the slots lead the response
#   python studies/scripts/cheap_credit.py              # table.json and docs/study/cheap-credit.md
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
export OMP_NUM_THREADS=2
o=studies/results/cheap-credit
s=studies/results/scale
every=grpo,rloo,forking,ktae,prime,cast,gae,compo,pact,vine:every=4,oracle:noise=0.5  # cort: Planted has no criteria
planted=(--env creditgym/Planted-v0 --env-kw match='"parity"' --max-new-tokens 16 --every 1 --prompts 8 --group 4 --k 8 --max-k 64)
t() { local s0; s0=$(date +%s); creditgym probe "$@" > /dev/null; echo "$* : $(( $(date +%s) - s0 )) s" >> $o/wall-times.txt; }

# 1. the exact testbed: every module, the nulls and the positive control against the exact truth and against A*
t "${planted[@]}" --model creditgym/tiny --credit $every --out $o/tiny-planted
# SmolLM2: at K = 8 A*'s pooled reliability was 0.770 with its lower bound 0.497, just below the target 0.5; the
# K = 16 round ran at about 1.5 rollouts/s on the shared cores and was stopped (Ctrl-C; resuming it with --reuse
# also went on at K = 16, stopped again). The probe is scored at K = 8 from the first 8 continuations of every
# prefix (the complete K = 8 round), fixed K; no positive control (8192 more rollouts at that rate: the exact
# truth checks A* here), vine sampled.
t "${planted[@]}" --model smollm2-135m --credit $every --out $o/smollm2-planted-interrupted || true
python - <<'PY'
import json
src = "studies/results/cheap-credit/smollm2-planted-interrupted/probe.json"
r = json.load(open(src))
for row in r["responses"]:
    row["continuation_rewards"] = [c[:8] for c in row["continuation_rewards"]]
json.dump(r, open("runs/smollm2-planted-k8.json", "w"))
PY
t "${planted[@]}" --model smollm2-135m --credit ${every%,oracle*} --max-k 8 --target none \
  --reuse runs/smollm2-planted-k8.json --out $o/smollm2-planted

# 2. the new modules on the batches (and A*) of the scale probes: the hard rubric and level-2 sums, both models
new=grpo,forking,ktae,prime
rubric=(--env creditgym/Rubric-v0 --env-kw preset='"hard"' --prompts 4 --group 4 --k 8)
sums=(--env creditgym/Math-v0 --prompts 8 --group 4 --k 8)
t "${rubric[@]}" --model creditgym/tiny --max-k 32 --credit $new --reuse $s/tiny-rubric/probe.json --out $o/tiny-rubric
t "${rubric[@]}" --model smollm2-135m --max-k 36 --target 0.3 --credit $new --reuse $s/smollm2-rubric/probe.json \
  --out $o/smollm2-rubric
t "${sums[@]}" --model creditgym/tiny --max-k 128 --credit $new --reuse $s/tiny-sums/probe.json --out $o/tiny-sums
t "${sums[@]}" --model smollm2-135m --max-k 64 --target none --credit $new --reuse $s/smollm2-sums/probe.json \
  --out $o/smollm2-sums
