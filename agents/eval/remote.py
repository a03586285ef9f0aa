"""An agent behind any OpenAI-compatible chat endpoint (a vLLM server, a hosted API), for evaluation."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from creditgym.envs.core import Source, TokenEnv
from creditgym.verifiers.rubric.chat_client import EndpointError, chat_completion, messages_payload

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


class AgentError(RuntimeError):
    """The agent could not answer (its endpoint failed): an infrastructure fault, not a wrong answer."""


def conversation(env: TokenEnv) -> list[dict[str, str]]:
    """The episode as chat messages: ``env.messages`` for multi-turn envs, else the prompt as one user turn."""
    messages = getattr(env, "messages", None)
    if messages:
        return [dict(m) for m in messages]
    prompt = env.ledger.token_id[env.ledger.source == Source.PROMPT].tolist()
    return [{"role": "user", "content": env.tokenizer.decode(prompt, skip_special_tokens=True).strip()}]


class OpenAIAgent:
    """Asks ``POST {base_url}/chat/completions`` for each turn; the reply is tokenized with the env's tokenizer.

    Args:
        model: The model name the endpoint serves.
        base_url: The endpoint (default ``$OPENAI_BASE_URL`` or a local vLLM server at port 8000).
        api_key: Bearer token (default ``$OPENAI_API_KEY``; none for a local server).
        temperature: Sampling temperature (0 = greedy).
        timeout: Seconds per request.
        retries: Extra attempts per turn before :class:`AgentError`.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float = 0.0,
        timeout: float = 120.0,
        retries: int = 2,
    ) -> None:
        self.name = f"openai:{model}"
        self.model = model
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL", DEFAULT_BASE_URL)
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.temperature, self.timeout, self.retries = temperature, timeout, retries

    def respond(self, env: TokenEnv) -> list[int]:
        payload = messages_payload(
            self.model,
            conversation(env),
            max_tokens=env.max_new_tokens,
            temperature=self.temperature,
        )
        try:
            text = chat_completion(
                self.base_url, payload, api_key=self.api_key, timeout=self.timeout, retries=self.retries
            )
        except EndpointError as e:
            raise AgentError(f"{self.name}: {e}") from e
        ids = env.tokenizer(text, add_special_tokens=False)["input_ids"]
        return [*ids, env.end_of_turn_id]

    def respond_batch(
        self, envs: Sequence[TokenEnv], rng: np.random.Generator
    ) -> tuple[list[list[int]], None]:
        if len(envs) == 1:
            return [self.respond(envs[0])], None
        with ThreadPoolExecutor(max_workers=min(8, len(envs))) as pool:
            return list(pool.map(self.respond, envs)), None
