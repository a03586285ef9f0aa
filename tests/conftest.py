"""Shared pytest fixtures for creditgym.

Docker: tests that need an engine take the ``docker_client`` / ``base_image``
fixtures. With no engine (or no base image) they are skipped locally, with a
hint to run ``make engine``; under ``CI=true`` they fail instead, so a broken
CI engine can never turn into a silently green run.
"""

from __future__ import annotations

import os

import pytest

BASE_IMAGE = os.environ.get("CREDITGYM_BASE_IMAGE", "creditgym-base:bookworm")
MANAGED_LABEL = "org.creditgym.managed"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def _no_docker(reason: str):
    if _in_ci():
        pytest.fail(f"Docker is required under CI=true: {reason}", pytrace=False)
    pytest.skip(f"{reason} (run `make engine` to start a local engine and build {BASE_IMAGE})")


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
