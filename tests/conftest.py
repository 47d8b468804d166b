"""One Ray instance for the whole test session (starting Ray costs ~4 s)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_session():
    import ray

    if not ray.is_initialized():
        # Workers inherit this: tests must not depend on the machine's thread count.
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
