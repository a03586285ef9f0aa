"""Policy: offline loading, seeded sampling, behaviour log-probs = teacher-forced log-probs, batching, extras."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from creditgym.agents.train.backends import GenerationBackend, HFBackend, VLLMBackend
from creditgym.agents.train.policy import Policy, load_policy
from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import ProceduralMath

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Policy]:
    # Offline, with an empty Hugging Face cache: any attempt to reach the hub would fail the load.
    env = {**OFFLINE, "HF_HOME": str(tmp_path_factory.mktemp("hf_home"))}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        torch.set_num_threads(2)
        yield load_policy("creditgym/tiny", device="cpu")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def prompts(policy: Policy) -> list[list[int]]:
    env = MathEnv(policy.tokenizer)
    tasks = ProceduralMath(levels=(1, 2, 3), split="test").take(6, seed=3)
    return [env.prompt_tokens(t) for t in tasks]  # different lengths


def plain_logprobs(policy: Policy, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """Reference: one unpadded sequence through the bare model, nothing shared with Policy's code."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0].float()  # (T, V)
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return logp.gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1)


def right_padded(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, T)`` right-padded ids (pad 0) and attention mask."""
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    att = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], att[i, : len(s)] = torch.tensor(s), 1
    return ids, att


def test_bundled_model_loads_offline(policy: Policy) -> None:
    assert policy.model.config.vocab_size == len(policy.tokenizer) == 2048
    assert policy.tokenizer.eos_token == "<|im_end|>"
    assert policy.stop_token_ids >= {policy.tokenizer.eos_token_id}
    assert policy.device.type == "cpu"
    assert isinstance(policy.backend, GenerationBackend)


def test_sampling_is_deterministic_under_a_seed_and_stops_at_eos(policy: Policy, prompts) -> None:
    a = policy.sample(prompts, max_new_tokens=64, generator=torch.Generator().manual_seed(7))
    b = policy.sample(prompts, max_new_tokens=64, generator=torch.Generator().manual_seed(7))
    assert a.tokens == b.tokens
    assert all(torch.equal(x, y) for x, y in zip(a.logprobs, b.logprobs, strict=True))
    torch.manual_seed(1)
    c = policy.sample(prompts, max_new_tokens=64)
    torch.manual_seed(1)
    d = policy.sample(prompts, max_new_tokens=64)
    assert c.tokens == d.tokens
    eos = policy.tokenizer.eos_token_id
    for seq, stopped in zip(a.tokens, a.stopped, strict=True):
        assert stopped and seq[-1] == eos
        assert not set(seq[:-1]) & policy.stop_token_ids  # ends at the *first* stop token
    # a budget cut: no stop token, exactly max_new_tokens tokens
    short = policy.sample(prompts[:2], max_new_tokens=3, generator=torch.Generator().manual_seed(0))
    assert [len(t) for t in short.tokens] == [3, 3] and short.stopped == [False, False]


def test_generator_does_not_disturb_the_global_rng(policy: Policy, prompts) -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    policy.sample(prompts[:2], max_new_tokens=8, generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_behaviour_logprobs_equal_teacher_forced_logprobs(
    policy: Policy, prompts, temperature: float
) -> None:
    out = policy.sample(
        prompts, max_new_tokens=48, temperature=temperature, generator=torch.Generator().manual_seed(3)
    )
    scored = policy.logprobs(prompts, out.tokens)
    for i, (p, seq) in enumerate(zip(prompts, out.tokens, strict=True)):
        assert out.logprobs[i].shape == (len(seq),)
        torch.testing.assert_close(out.logprobs[i], scored.rows()[i].cpu(), atol=1e-4, rtol=0)
        torch.testing.assert_close(out.logprobs[i], plain_logprobs(policy, p, seq), atol=1e-4, rtol=0)


def test_teacher_forced_logprobs_match_the_distribution_generate_sampled_from(
    policy: Policy, prompts
) -> None:
    """The raw logits ``generate`` used (KV cache, left padding) give the same log-probs as the scoring pass."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), policy.pad_token_id)
    att = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :], att[i, width - len(p) :] = torch.tensor(p), 1
    from transformers import GenerationConfig

    torch.manual_seed(0)
    gen = policy.model.generate(
        input_ids=ids,
        attention_mask=att,
        generation_config=GenerationConfig(
            do_sample=True,
            top_k=0,
            max_new_tokens=24,
            eos_token_id=sorted(policy.stop_token_ids),
            pad_token_id=policy.pad_token_id,
        ),
        return_dict_in_generate=True,
        output_logits=True,
    )
    logits = torch.stack(gen.logits, dim=1).float()  # (B, N, V)
    new = gen.sequences[:, width:]
    step_lp = torch.log_softmax(logits, -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)  # (B, N)
    conts = []
    for row in new.tolist():
        stop = next((j for j, t in enumerate(row) if t in policy.stop_token_ids), len(row) - 1)
        conts.append(row[: stop + 1])
    scored = policy.logprobs(prompts, conts)
    for i, c in enumerate(conts):
        torch.testing.assert_close(scored.rows()[i], step_lp[i, : len(c)], atol=1e-4, rtol=0)


def test_left_padded_batch_equals_one_by_one_greedy(policy: Policy, prompts) -> None:
    batch = policy.sample(prompts, max_new_tokens=40, temperature=0.0)
    for p, seq in zip(prompts, batch.tokens, strict=True):
        assert policy.sample([p], max_new_tokens=40, temperature=0.0).tokens[0] == seq
    # and a generation batch size smaller than the number of prompts changes nothing
    small = Policy(
        policy.model, policy.tokenizer, backend=HFBackend(policy.model, pad_token_id=0, max_batch_size=4)
    )
    assert small.sample(prompts, max_new_tokens=40, temperature=0.0).tokens == batch.tokens
    # identical prompts share one prefill (cache rows copied): the same tokens, log-probs to float noise
    twice = policy.sample(prompts[:2] * 3, max_new_tokens=40, temperature=0.0)
    assert twice.tokens == batch.tokens[:2] * 3
    for a, b in zip(twice.logprobs, batch.logprobs[:2] * 3, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


def test_model_generation_config_does_not_change_sampling(policy: Policy, prompts) -> None:
    before = policy.sample(prompts, max_new_tokens=32, generator=torch.Generator().manual_seed(11))
    saved = policy.model.generation_config
    try:
        policy.model.generation_config = saved.__class__(top_k=1, repetition_penalty=5.0, do_sample=False)
        after = policy.sample(prompts, max_new_tokens=32, generator=torch.Generator().manual_seed(11))
    finally:
        policy.model.generation_config = saved
    assert after.tokens == before.tokens


def test_logprobs_of_a_ragged_batch_equal_per_row_calls(policy: Policy, prompts) -> None:
    conts = [
        p[len(p) - k :] for p, k in zip(prompts, [1, 5, 9, 2, 13, 0], strict=True)
    ]  # includes an empty one
    batch = policy.logprobs(prompts, conts)
    assert batch.logprobs.shape == batch.mask.shape == batch.entropies.shape == (len(prompts), 13)
    assert batch.mask.sum(1).tolist() == [len(c) for c in conts]
    for i, (p, c) in enumerate(zip(prompts, conts, strict=True)):
        one = policy.logprobs([p], [c])
        torch.testing.assert_close(batch.rows()[i], one.rows()[0], atol=1e-5, rtol=0)
        if c:
            torch.testing.assert_close(batch.rows()[i], plain_logprobs(policy, p, c), atol=1e-4, rtol=0)
    chunked = policy.logprobs(prompts, conts, batch_size=4)
    torch.testing.assert_close(chunked.logprobs, batch.logprobs, atol=1e-5, rtol=0)
    assert (batch.logprobs[~batch.mask] == 0).all() and (batch.entropies >= -1e-6).all()
    as_tensors = policy.logprobs([torch.tensor(prompts[1])], [torch.tensor(conts[1])])
    torch.testing.assert_close(as_tensors.rows()[0], batch.rows()[1], atol=1e-5, rtol=0)


def test_forward_logprobs_keeps_the_graph_and_aligns_tokens(policy: Policy, prompts) -> None:
    seqs = prompts[:3]
    ids, att = right_padded(seqs)
    width = ids.shape[1]
    out = policy.forward_logprobs(ids, att)
    assert out.logprobs.shape == out.entropies.shape == out.mask.shape == (3, width)
    assert out.logprobs.requires_grad
    assert not out.mask[:, 0].any() and (out.logprobs[:, 0] == 0).all()
    # index t is log p(x_t | x_<t)
    p = seqs[0]
    torch.testing.assert_close(
        out.logprobs[0, 1 : len(p)].detach(), plain_logprobs(policy, p[:1], p[1:]), atol=1e-4, rtol=0
    )
    (-(out.logprobs * out.mask).sum()).backward()
    grads = [q.grad for q in policy.model.parameters() if q.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    policy.model.zero_grad(set_to_none=True)
    # left padding gives the same numbers (position ids come from the mask)
    left_ids, left_att = torch.zeros_like(ids), torch.zeros_like(att)
    for i, s in enumerate(seqs):
        left_ids[i, width - len(s) :], left_att[i, width - len(s) :] = torch.tensor(s), 1
    with torch.no_grad():
        left = policy.forward_logprobs(left_ids, left_att)
    for i, s in enumerate(seqs):
        torch.testing.assert_close(
            left.logprobs[i, width - len(s) :], out.logprobs[i, : len(s)].detach(), atol=1e-4, rtol=0
        )


def test_attention_statistics_and_hidden_states(policy: Policy, prompts) -> None:
    seqs = [p + p[-6:] for p in prompts[:4]]
    width = max(len(s) for s in seqs)
    ids, att = torch.zeros(4, width, dtype=torch.long), torch.zeros(4, width, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], att[i, : len(s)] = torch.tensor(s), 1
    n, h = policy.num_layers, policy.model.config.hidden_size
    with torch.no_grad():
        plain = policy.forward_logprobs(ids, att)
        out = policy.forward_logprobs(ids, att, attention_layers=[0, -1], return_hidden=True)
    assert out.attention_entropy is not None and sorted(out.attention_entropy) == [0, n - 1]
    for stat in out.attention_entropy.values():
        assert stat.shape == (4, width)
        assert ((stat >= 0) & (stat <= 1 + 1e-5)).all()
        assert (stat[out.mask & (torch.arange(width) > 1)] > 0).all()  # two or more keys: some spread
        assert (stat[~out.mask] == 0).all()
    assert (
        out.hidden is not None
        and out.hidden.shape == (4, width, h)
        and out.middle_hidden.shape == (4, width, h)
    )
    assert policy.model.config._attn_implementation != "eager"  # restored after the call
    torch.testing.assert_close(out.logprobs, plain.logprobs, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="out of range"):
        policy.forward_logprobs(ids, att, attention_layers=[n])


def test_scoring_only_the_masked_tokens_gives_the_same_values_and_gradients(policy: Policy, prompts) -> None:
    """``score_mask`` runs the LM head on the masked tokens' positions only: same numbers, same gradients."""
    seqs = prompts[:3]
    ids, att = right_padded(seqs)
    width = ids.shape[1]
    wanted = torch.zeros(3, width, dtype=torch.bool)
    wanted[:, width // 2 :] = True  # a "response" half, padding included
    wanted[1, 0] = True  # token 0 has no predicting position: never scored

    def loss_and_grads(**kw):
        policy.model.zero_grad(set_to_none=True)
        out = policy.forward_logprobs(ids, att, **kw)
        lp, ent = out.logprobs * wanted, out.entropies * wanted
        (-(lp.sum()) - ent.sum()).backward()
        return (
            lp.detach(),
            ent.detach(),
            out.mask & wanted,
            [q.grad.clone() for q in policy.model.parameters()],
        )

    full = loss_and_grads()
    part = loss_and_grads(score_mask=wanted)
    assert torch.equal(part[2], full[2]) and not part[2][:, 0].any()
    torch.testing.assert_close(part[0], full[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(part[1], full[1], atol=1e-5, rtol=0)
    for a, b in zip(part[3], full[3], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    lone = policy.forward_logprobs(ids, att, score_mask=wanted, entropy_grad=False)
    assert lone.logprobs.requires_grad and not lone.entropies.requires_grad
    policy.model.zero_grad(set_to_none=True)


def test_missing_model_paths_raise_file_not_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="no-such-model") as err:
        load_policy(missing)
    assert "config.json" in str(err.value)
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        load_policy(tmp_path)  # exists, but holds no model
    for k, v in OFFLINE.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(FileNotFoundError, match="never downloads"):  # a hub id absent from the local cache
        load_policy("creditgym-test/not-a-model")


def test_vllm_backend_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here; examples/gpu_check.py exercises it on a GPU")
    assert "vllm" not in sys.modules  # importing creditgym.agents.train.backends did not import it
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with pytest.raises(ImportError, match=r"pip install 'creditgym\[gpu\]'"):
        VLLMBackend("creditgym/tiny")


class _FakeLLM:
    """Stands in for ``vllm.LLM``: records what the backend asks of it."""

    def __init__(self, **kwargs) -> None:
        self.kwargs, self.loaded, self.resets, self.params = kwargs, [], 0, []
        self.model = SimpleNamespace(load_weights=lambda weights: self.loaded.extend(n for n, _ in weights))

    def generate(self, requests, params, use_tqdm):
        self.params.extend(params)
        eos = params[0]["stop_token_ids"][0]
        outs = [  # a stop token kept in token_ids (tokens after it must go), and one reported only as stop_reason
            SimpleNamespace(token_ids=[7, 8, eos, 9], finish_reason="stop", stop_reason=None),
            SimpleNamespace(token_ids=[5], finish_reason="stop", stop_reason=eos),
            SimpleNamespace(token_ids=[1, 2, 3], finish_reason="length", stop_reason=None),
        ]
        return [SimpleNamespace(outputs=[outs[i % 3]]) for i, _ in enumerate(requests)]

    def apply_model(self, fn):
        return [fn(self.model)]

    def reset_prefix_cache(self) -> None:
        self.resets += 1


def test_vllm_backend_glue_with_a_fake_engine(policy: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    """What can be checked without a GPU: arguments, seeding, stop handling, and the weight-sync calls."""
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(LLM=_FakeLLM, SamplingParams=lambda **kw: kw))
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    backend = VLLMBackend("/models/tiny", dtype="bfloat16", max_model_len=512)
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    llm = backend.llm
    assert llm.kwargs["model"] == "/models/tiny" and llm.kwargs["tensor_parallel_size"] == 1
    assert llm.kwargs["max_model_len"] == 512 and llm.kwargs["dtype"] == "bfloat16"
    eos = policy.tokenizer.eos_token_id
    kwargs = {"max_new_tokens": 3, "temperature": 1.0, "top_p": 0.9, "stop_token_ids": [eos]}
    out = backend.generate([[1, 2], [3], [4]], generator=torch.Generator().manual_seed(0), **kwargs)
    assert out == [[7, 8, eos], [5, eos], [1, 2, 3]]
    first = [p["seed"] for p in llm.params]
    backend.generate([[1, 2], [3], [4]], generator=torch.Generator().manual_seed(0), **kwargs)
    assert [p["seed"] for p in llm.params[3:]] == first and len(set(first)) == 3
    assert llm.params[0]["top_p"] == 0.9 and llm.params[0]["max_tokens"] == 3
    backend.sync_weights(policy.model)
    assert set(llm.loaded) == set(policy.model.state_dict()) and llm.resets == 1
    assert isinstance(backend, GenerationBackend)
