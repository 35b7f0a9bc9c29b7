"""Shared fixtures: run a test on both implementations (C++ core and numpy reference); one
local Ray for the RLlib tests and the command line run in the test's process; and, without
Ray, no doctest collection of the modules that need it (see pytest_configure)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, settings
from rlblocks import _impl

# small test models gain nothing from intra-op threads, and lose a lot on a busy machine
torch.set_num_threads(1)

settings.register_profile(
    "ci", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# RLBLOCKS_HYPOTHESIS_PROFILE picks one by name (CI's gymnasium lower-bound pass runs "dev":
# the full "ci" pass ran on the same code a step earlier)
settings.load_profile(
    os.environ.get("RLBLOCKS_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)


@pytest.fixture(params=["native", "numpy"])
def impl(request: pytest.FixtureRequest):
    """Runs the test once with the C++ kernels and once with the numpy reference."""
    before = _impl.native()
    _impl.use_numpy_reference(request.param == "numpy")
    yield request.param
    _impl.use_numpy_reference(not before)


def both_impls(fn, *args, **kwargs):
    """(native result, numpy-reference result) of ``fn(*args, **kwargs)``."""
    before = _impl.native()
    try:
        _impl.use_numpy_reference(False)
        native = fn(*args, **kwargs)
        _impl.use_numpy_reference(True)
        reference = fn(*args, **kwargs)
    finally:
        _impl.use_numpy_reference(not before)
    return native, reference


@pytest.fixture(scope="module")
def local_ray(request: pytest.FixtureRequest) -> Any:
    """A local 2-CPU Ray (tests/rllib). Started once and kept for the next modules (a start
    costs seconds); a module that needs another cluster shuts it down, and the next module
    that asks starts it again. Ray's workers cannot import test modules, so the module's
    functions and classes travel to them by value."""
    ray = pytest.importorskip("ray")
    from rlblocks.rllib.startup import LOCAL_RAY_SYSTEM_CONFIG

    ray.cloudpickle.register_pickle_by_value(request.module)
    if not ray.is_initialized():
        # address "local": a new Ray, never a cluster another process left on this machine;
        # its workers at the normal priority, as rlblocks starts one (CI runs beside them)
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            _system_config=LOCAL_RAY_SYSTEM_CONFIG,
        )
    return ray


class SharedExports:
    """Trainers and their exported artifacts, built once per session by name: an export
    costs seconds (torch.export, then ONNX), and the tests that share one only read it. A
    name holds one ``spec`` (the same object every time: two meanings under one name fail)."""

    def __init__(self, root: Path):
        self.root = root
        self._trainers: dict[str, tuple[Any, Any]] = {}
        self._paths: dict[tuple[str, str], Path] = {}

    def trainer(self, name: str, spec: tuple[Any, ...], build: Any) -> Any:
        """The trainer ``build(*spec)``, built on the first call for ``name``."""
        if name not in self._trainers:
            self._trainers[name] = (spec, build(*spec))
        held, trainer = self._trainers[name]
        assert held is spec, f"shared export {name!r}: two specs under one name"
        return trainer

    def artifact(
        self, name: str, spec: tuple[Any, ...], build: Any, fmt: str, export: Any, suffix: str
    ) -> Path:
        """``export(trainer, path, fmt)`` of that trainer, written on the first call."""
        if (name, fmt) not in self._paths:
            trainer = self.trainer(name, spec, build)
            self._paths[name, fmt] = export(trainer, self.root / f"{name}{suffix}", fmt)
        return self._paths[name, fmt]

    def close(self) -> None:
        for _, trainer in self._trainers.values():
            trainer.close()


@pytest.fixture(scope="session")
def shared_exports(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One :class:`SharedExports` for the session (tests/test_export*.py); closed at its end."""
    shared = SharedExports(tmp_path_factory.mktemp("shared_exports"))
    yield shared
    shared.close()


#: The user's package ``my_pkg`` (its envs, and the ``bad_envs`` that fail as real ones do).
USER_DIR = Path(__file__).parent / "fixtures" / "user_envs"


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``rlblocks ARGS`` in this process, in the user's package folder (``sys.path``, the
    working directory and the environment restored after the test); stdout and stderr are
    read at file descriptors 1 and 2, so what async env workers print is in them too."""
    monkeypatch.chdir(USER_DIR)
    monkeypatch.syspath_prepend(str(USER_DIR))  # sys.path (and what main adds) restored
    monkeypatch.delenv("RLBLOCKS_TRACEBACK", raising=False)
    from rlblocks.cli import main

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capfd.readouterr()
        code = main(list(args))
        out = capfd.readouterr()
        return subprocess.CompletedProcess(list(args), code, out.out, out.err)

    return run


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``rlblocks ARGS`` in this process, as ``subprocess.run(..., capture_output=True,
    text=True)`` would report it: the exit status, stdout and stderr. The RLlib backend joins
    the Ray this process already runs (:func:`local_ray`) instead of importing Ray and
    starting one per command, which costs more than the small runs of the tests."""
    from rlblocks.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as stop:  # argparse's refusals
            code = stop.code if isinstance(stop.code, int) else 1
    return subprocess.CompletedProcess(["rlblocks", *args], code, out.getvalue(), err.getvalue())


def pytest_configure(config: pytest.Config) -> None:
    """Without Ray, the ``rlblocks.rllib`` package and ``rlblocks.wrappers.ray_vector`` (the
    ``ray`` extra) are not collected for doctests, wherever rlblocks is imported from
    (``--pyargs rlblocks`` collects it from site-packages, where directory-scoped hooks do
    not reach: their paths are added to ``--ignore``); its tests in ``tests/rllib`` skip
    themselves."""
    if importlib.util.find_spec("ray") is not None:
        return
    spec = importlib.util.find_spec("rlblocks")
    if spec is None or not spec.submodule_search_locations:
        return
    needs_ray = [
        str(Path(p) / sub)
        for p in spec.submodule_search_locations
        for sub in ("rllib", "wrappers/ray_vector.py")
    ]
    config.option.ignore = [*(config.getoption("ignore") or []), *needs_ray]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``ray`` marker: every test of tests/rllib carries it, and a test elsewhere that
    needs the ray extra is marked by hand (tests/test_markers.py checks that none skips itself
    instead), so that CI's Ray step can select them all with ``-m ray``. Without Ray they
    skip."""
    rllib_dir = Path(__file__).parent / "rllib"
    has_ray = importlib.util.find_spec("ray") is not None
    for item in items:
        if rllib_dir in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.ray)
        if not has_ray and item.get_closest_marker("ray") is not None:
            item.add_marker(pytest.mark.skip(reason="marked ray: runs where Ray is installed"))
