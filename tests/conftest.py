"""Shared pytest fixtures for creditgym.

Docker: tests that need an engine take the ``docker_client`` / ``base_image``
fixtures. With no engine (or no base image) they are skipped locally, with a
hint to run ``make engine``; under ``CI=true`` they fail instead, so a broken
CI engine can never turn into a silently green run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

BASE_IMAGE = os.environ.get("CREDITGYM_BASE_IMAGE", "creditgym-base:bookworm")
MANAGED_LABEL = "org.creditgym.managed"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def require(what: str) -> None:
    """Skip a test that lacks ``what`` on this machine; under ``CI=true`` (where `make test` provides it) fail."""
    if _in_ci():
        pytest.fail(f"required under CI=true: {what}", pytrace=False)
    pytest.skip(f"needs {what}")


def _no_docker(reason: str):
    require(f"a Docker engine: {reason} (run `make engine` to start a local engine and build {BASE_IMAGE})")


@pytest.fixture(scope="session")
def docker_client():
    """A ``docker.DockerClient`` whose engine answered a ping."""
    # Skip/fail outside the except blocks, so no chained traceback is printed.
    client, problem = None, None
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
    except ImportError as exc:
        problem = f"the docker SDK is not installed ({exc}); install the [swe] extra"
    except Exception as exc:  # DockerException, requests errors, missing socket...
        problem = f"no Docker engine answers ({type(exc).__name__}: {exc})"
    if problem:
        _no_docker(problem)
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    """Tag of the local base image (``CREDITGYM_BASE_IMAGE``), checked to exist."""
    import docker

    try:
        docker_client.images.get(BASE_IMAGE)
        missing = False
    except docker.errors.ImageNotFound:
        missing = True
    if missing:
        _no_docker(f"base image {BASE_IMAGE} is missing")
    return BASE_IMAGE


@pytest.fixture
def scratch_registry() -> Iterator[None]:
    """Lets a test register throwaway credit modules, signals and providers; all three are restored afterwards.

    Registering at import time would leak into tests collected later (``available()`` parametrizes some).
    """
    from creditgym.agents.providers import base as signals
    from creditgym.credit import base

    saved = (dict(base._REGISTRY), dict(base._SIGNALS), dict(signals.PROVIDERS))
    yield
    for live, old in zip((base._REGISTRY, base._SIGNALS, signals.PROVIDERS), saved, strict=True):
        live.clear()
        live.update(old)


@pytest.fixture(name="needs", scope="session")
def needs_fixture():
    """``needs(what)``: skip a test that lacks ``what`` here; under ``CI=true`` (where `make test` provides it) fail."""
    return require
