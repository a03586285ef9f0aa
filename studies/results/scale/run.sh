#!/usr/bin/env bash
# The probe across model scale (docs/study/scale.md), as it ran: every module and the positive control
# (oracle:noise=0.5; the default entries) on the bundled tiny model and on SmolLM2-135M-Instruct (smollm2-135m),
# the same tasks and probe settings, one torch thread per job, two to four jobs at a time on a 2-core machine.
# Critic modules are rescored with critics warmed up by a 4-step run of each module (the same command for both
# models) on the same batch and A* (--reuse, --warm). Wall times: wall-times.txt. Then:
#   python studies/scripts/scale_probe.py
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
export OMP_NUM_THREADS=1
o=runs/scale
rubric=(--env creditgym/Rubric-v0 --env-kw preset='"hard"' --prompts 4 --group 4 --k 8)
sums=(--env creditgym/Math-v0 --prompts 8 --group 4 --k 8)                         # level 2, the default
word=(--env creditgym/Math-v0 --env-kw difficulty=7 --temperature 0.7 --prompts 8 --group 4 --k 8)
probe() { creditgym probe "$@" || true; }  # a refusal exits 1 and leaves its continuations in probe.json

# the tiny model: every probe reached the default target 0.5, or was refused outright (word problems: reward 0)
probe "${rubric[@]}" --model creditgym/tiny --max-k 32 --out $o/tiny-rubric
probe "${word[@]}" --model creditgym/tiny --max-k 32 --out $o/tiny-word
probe "${sums[@]}" --model creditgym/tiny --max-k 128 --out $o/tiny-sums

# SmolLM2, hard rubric: refused at K = 32 (lower bound 0.480), resumed to K = 36 (0.479: refused again; the bound
# stopped moving with K), then scored at target 0.3 from the same continuations (only the control was sampled)
probe "${rubric[@]}" --model smollm2-135m --max-k 32 --out $o/smollm2-rubric-refused-k32
probe "${rubric[@]}" --model smollm2-135m --max-k 36 --reuse $o/smollm2-rubric-refused-k32/probe.json \
  --out $o/smollm2-rubric-refused-k36
probe "${rubric[@]}" --model smollm2-135m --max-k 36 --target 0.3 --reuse $o/smollm2-rubric-refused-k36/probe.json \
  --out $o/smollm2-rubric
# SmolLM2, word problems: refused at K = 28 (budget 32), then at K = 96 (budget 128: lower bound below 0)
probe "${word[@]}" --model smollm2-135m --max-k 32 --out $o/smollm2-word-refused-k32
probe "${word[@]}" --model smollm2-135m --max-k 128 --out $o/smollm2-word
# SmolLM2, level 2: refused at K = 64 (lower bound 0.124), then scored at that K with a fixed K (--target none)
probe "${sums[@]}" --model smollm2-135m --max-k 128 --out $o/smollm2-sums-refused-k64
probe "${sums[@]}" --model smollm2-135m --max-k 64 --target none --reuse $o/smollm2-sums-refused-k64/probe.json \
  --out $o/smollm2-sums

# the warm-ups (4 steps, 2 prompts x 4, each model's defaults; word problems: none, no probe there completed)
for m in creditgym/tiny smollm2-135m; do
  tag=${m##*/}; tag=${tag%%-*}
  for t in rubric sums; do
    case $t in rubric) env=(--env creditgym/Rubric-v0 --env-kw preset='"hard"') ;; sums) env=(--env creditgym/Math-v0) ;; esac
    for c in gae compo pact; do
      creditgym train "${env[@]}" --credit $c --model $m --steps 4 --prompts-per-step 2 --group-size 4 \
        --eval-every 4 --eval-episodes 16 --seed 0 --out $o/warm/$tag-$t-$c
    done
  done
done
warm() { for c in gae compo pact; do echo --warm $o/warm/$1-$c; done; }
probe "${rubric[@]}" --model creditgym/tiny --max-k 32 --credit gae,compo,pact --reuse $o/tiny-rubric/probe.json \
  $(warm tiny-rubric) --out $o/tiny-rubric-warm
probe "${sums[@]}" --model creditgym/tiny --max-k 128 --credit gae,compo,pact --reuse $o/tiny-sums/probe.json \
  $(warm tiny-sums) --out $o/tiny-sums-warm
probe "${rubric[@]}" --model smollm2-135m --max-k 36 --target 0.3 --credit gae,compo,pact \
  --reuse $o/smollm2-rubric/probe.json $(warm smollm2-rubric) --out $o/smollm2-rubric-warm
probe "${sums[@]}" --model smollm2-135m --max-k 64 --target none --credit gae,compo,pact \
  --reuse $o/smollm2-sums/probe.json $(warm smollm2-sums) --out $o/smollm2-sums-warm
