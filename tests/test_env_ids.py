"""Third-party env ids without ``module:`` and old-gym-API envs (issue 46, item 3).

An id registered by an installed package is found by its family (MiniGrid) or by the
package's ``gymnasium.envs`` entry point, in a fresh process (as the CLI, async workers and
Ray's workers start); an id of a package that is not installed names the ``pip install``
and the ``module:EnvId`` form; an env written for the old gym API is refused with the
shimmy hint (shimmy is not installed here), without importing ``gym``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import rlblocks
from rlblocks.train.env_ids import importable_id, is_old_api_env
from rlblocks.train.envs import check_env, make_env_creator
from rlblocks.train.trainer_config import PPOConfig

PYTHONPATH = str(Path(rlblocks.__file__).resolve().parents[1])
needs_minigrid = pytest.mark.skipif(
    importlib.util.find_spec("minigrid") is None, reason="needs minigrid"
)
no_shimmy = pytest.mark.skipif(
    importlib.util.find_spec("shimmy") is not None, reason="shimmy installed: it wraps instead"
)


def _fresh(code: str, cwd: Path, extra_path: str = "") -> str:
    """Runs ``code`` in a new interpreter (nothing imported yet) and returns its stdout."""
    path = os.pathsep.join(p for p in (PYTHONPATH, extra_path) if p)
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@needs_minigrid
def test_minigrid_id_is_found_without_its_module(tmp_path: Path) -> None:
    out = _fresh(
        """
        import sys
        from rlblocks.train.envs import env_spec, evaluation_env, vector_env_from_config
        from rlblocks.train.env_ids import importable_id
        from rlblocks.train.trainer_config import PPOConfig

        assert "minigrid" not in sys.modules
        config = PPOConfig(env="MiniGrid-DoorKey-5x5-v0", num_envs=2)
        print(env_spec(config.env).id)
        venv = vector_env_from_config(config)
        obs, _ = venv.reset(seed=0)
        print(sorted(obs), venv.num_envs)
        venv.close()
        print(evaluation_env(config).reset(seed=0)[0]["mission"])
        print(importable_id(config.env))
        """,
        tmp_path,
    )
    assert out.splitlines() == [
        "MiniGrid-DoorKey-5x5-v0",
        "['direction', 'image', 'mission'] 2",
        "use the key to open the door and then get to the goal",
        "minigrid:MiniGrid-DoorKey-5x5-v0",
    ]
    # What Ray's workers get: a form gym.make takes in a process that never imported minigrid.
    made = _fresh(
        "import gymnasium as gym; print(gym.make('minigrid:MiniGrid-DoorKey-5x5-v0').spec.id)",
        tmp_path,
    )
    assert made.strip() == "MiniGrid-DoorKey-5x5-v0"


@needs_minigrid
def test_an_unknown_id_of_an_installed_family_suggests_its_ids() -> None:
    with pytest.raises(ValueError) as err:
        check_env("MiniGrid-DoorKey-5x6-v0")
    assert str(err.value).startswith(
        "unknown gymnasium environment 'MiniGrid-DoorKey-5x6-v0' (importing 'minigrid' did "
        "not register it); did you mean "
    )
    assert "'MiniGrid-DoorKey-5x5-v0'" in str(err.value)


@pytest.mark.parametrize(
    "env_id, module, package",
    [
        ("highway-fast-v0", "highway_env", '"rlblocks[highway]"'),
        ("PointMaze_UMaze-v3", "gymnasium_robotics", '"rlblocks[robotics]"'),
    ],
)
def test_an_id_of_a_missing_package_names_the_install(
    env_id: str, module: str, package: str
) -> None:
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed")
    with pytest.raises(ValueError) as err:
        check_env(env_id)
    assert str(err.value) == (
        f"unknown gymnasium environment {env_id!r} ({env_id} is registered by the {module} "
        f"package, which is not installed: pip install {package}, then --env {env_id} or "
        f"'{module}:{env_id}')"
    )
    assert "\n" not in str(err.value)


def test_an_mpe_name_points_to_the_callable_form() -> None:
    with pytest.raises(ValueError, match=r"write 'mpe2\.simple_spread_v3:parallel_env'"):
        check_env("simple_spread_v3")


def test_an_entry_point_plugin_registers_its_id(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "corridor_plugin").mkdir(parents=True)
    (site / "corridor_plugin" / "__init__.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym

            def register():
                gym.register("PluginCorridor-v0", entry_point="gymnasium.envs."
                             "classic_control:CartPoleEnv")
            """
        )
    )
    info = site / "corridor_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: corridor-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[gymnasium.envs]\ncorridor = corridor_plugin:register\n"
    )
    out = _fresh(
        """
        from rlblocks.train.envs import check_env, env_spec
        check_env("PluginCorridor-v0")
        print(env_spec("PluginCorridor-v0").entry_point)
        """,
        tmp_path,
        str(site),
    )
    assert out.strip() == "gymnasium.envs.classic_control:CartPoleEnv"


class PlainOldEnv:
    """Like crafter.Env: no base class, reset returns the observation, step 4 values."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self) -> np.ndarray:
        return np.zeros(2, np.float32)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        return np.zeros(2, np.float32), 1.0, True, {}


class OldSignatureEnv(gym.Env):
    """A gymnasium.Env subclass still written the old way (``reset`` takes no seed)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self) -> np.ndarray:  # type: ignore[override]
        return np.zeros(2, np.float32)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, dict[str, Any]]:  # type: ignore[override]
        return np.zeros(2, np.float32), 1.0, True, {}


GymPackageEnv = type("Env", (PlainOldEnv,), {"__module__": "gym.core"})  # gym's own class


@no_shimmy
@pytest.mark.parametrize("cls", [PlainOldEnv, OldSignatureEnv, GymPackageEnv])
def test_an_old_gym_api_env_is_refused_with_the_shimmy_hint(cls: type) -> None:
    gym_loaded = "gym" in sys.modules
    config = PPOConfig(env=lambda env_config: cls())
    with pytest.raises(ValueError) as err:
        make_env_creator(config)()
    name = config.env_name
    assert str(err.value) == (
        f"env {name!r} makes a {cls.__name__}, written for the old gym API (reset returns the "
        "observation alone, step returns 4 values): pip install shimmy, which wraps it as a "
        "gymnasium env, or port it to gymnasium's API"
    )
    assert ("gym" in sys.modules) == gym_loaded  # told without importing gym


def test_gymnasium_envs_and_multiagent_envs_are_not_old_api() -> None:
    assert not is_old_api_env(gym.make("CartPole-v1"))
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    config = PPOConfig(env="mpe2.simple_spread_v3:parallel_env")
    with pytest.raises(ValueError, match="it is a multi-agent env"):
        make_env_creator(config)()
    assert simple_spread_v3 is not None


def test_importable_id_forms() -> None:
    assert importable_id("CartPole-v1") == "CartPole-v1"
    assert importable_id("my_pkg.envs:MyEnv-v0") == "my_pkg.envs:MyEnv-v0"
    assert importable_id("rlblocks/RepeatAfterMe-v0") == "rlblocks.envs:rlblocks/RepeatAfterMe-v0"
