"""Fixtures shared by the RLlib tests (each test module skips itself without Ray)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def local_ray(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A local 2-CPU Ray for one test module. Ray's workers cannot import test modules, so
    the module's functions and classes travel to them by value."""
    ray = pytest.importorskip("ray")
    ray.cloudpickle.register_pickle_by_value(request.module)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False, ignore_reinit_error=True)
    yield ray
    ray.shutdown()
