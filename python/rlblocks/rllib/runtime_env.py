"""The user's code on Ray's workers: the modules a run's config names, shipped through Ray's
``runtime_env`` (``py_modules``) so that env runners on other nodes import them.

A config names user code as ``"module:Name"`` strings (``env="my_pkg.envs:MyEnv-v0"``,
``model.custom_model="my_pkg.models:Net"``, ``multiagent.policy_mapping``, any such string
in ``env_config`` or the ``rllib`` block), as classes or functions (their ``__module__``), or
as custom model / action distribution names registered with
:class:`~rlblocks.catalog.ModelCatalog`. :func:`user_code_paths` finds the top-level package
directory (or the single ``.py`` file) of each such module on the driver;
:func:`runtime_env_for` puts them in the job's ``py_modules``. Nothing is shipped for a module
that Python or pip installed (the standard library, ``site-packages``: those must be
installed on every node), for rlblocks itself, for ``__main__`` (cloudpickle sends its
objects by value) or for a compiled single-file module (``py_modules`` takes directories and
``.py`` files only); an editable install (``pip install -e``) lives in its source tree and
travels like any other directory. ``RLBLOCKS_SHIP_USER_CODE=0`` ships nothing.

Examples:
    >>> config_modules({"env": "my_pkg.envs:MyEnv-v0", "model": {"custom_model": None}})
    ['my_pkg.envs']
    >>> user_code_paths({"env": "CartPole-v1"})
    []
    >>> runtime_env_for({"env": "CartPole-v1"}, {"env_vars": {"OMP_NUM_THREADS": "1"}})
    {'env_vars': {'OMP_NUM_THREADS': '1'}}
"""

from __future__ import annotations

import importlib.util
import os
import re
import site
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["SHIP_ENV_VAR", "config_modules", "runtime_env_for", "user_code_paths"]

#: The environment variable that turns shipping off (``0``, ``false``, ``no``, ``off``).
SHIP_ENV_VAR = "RLBLOCKS_SHIP_USER_CODE"

#: ``package.module:Name`` (the name may hold ``-`` and ``.``, as gymnasium ids do).
_MODULE_PATH = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):[\w.\-/]+$")
#: Keys whose plain (no ``:``) string value may be a name registered with the catalog.
_REGISTERED_KEYS = ("custom_model", "custom_action_dist")


def _registered(key: str, name: str) -> Any:
    """The class registered under ``name`` for a catalog key (None if not registered)."""
    from rlblocks.catalog import ModelCatalog

    if key == "custom_model" and ModelCatalog.is_custom_model(name):
        return ModelCatalog.get_custom_model(name)
    if key == "custom_action_dist" and ModelCatalog.is_custom_action_dist(name):
        return ModelCatalog.get_custom_action_dist(name)
    return None


def config_modules(config: Any) -> list[str]:
    """The modules a config may name (module docstring), in order of appearance: every
    string shaped ``module:name`` counts (:func:`user_code_paths` drops those that are no
    module on the driver).

    ``config`` is an rlblocks config (anything with ``to_dict()``) or a mapping; nested
    mappings, lists and tuples are searched.
    """
    found: dict[str, None] = {}

    def visit(value: Any, key: str) -> None:
        if isinstance(value, str):
            match = _MODULE_PATH.match(value)
            if match:
                found[match.group(1)] = None
            elif key in _REGISTERED_KEYS:
                visit(_registered(key, value), "")
        elif isinstance(value, Mapping):
            for k, v in value.items():
                visit(v, str(k))
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v, key)
        elif isinstance(value, type) or callable(value):
            module = getattr(value, "__module__", None)
            if isinstance(module, str) and module != "__main__":
                found[module] = None

    to_dict = getattr(config, "to_dict", None)
    visit(to_dict() if callable(to_dict) else config, "")
    return list(found)


def _installed_roots() -> list[Path]:
    """Where Python and pip put what they install (never shipped)."""
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    roots.add(site.getusersitepackages())
    out = []
    for root in roots:
        try:
            out.append(Path(root).resolve())
        except OSError:
            continue
    return out


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _top_level_paths(top: str) -> list[Path]:
    """The package directories (or the ``.py`` file) of the top-level module ``top`` on the
    driver; [] when it cannot be found or cannot be shipped."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p).resolve() for p in spec.submodule_search_locations if Path(p).is_dir()]
    if spec.origin and spec.origin.endswith(".py") and Path(spec.origin).is_file():
        return [Path(spec.origin).resolve()]
    return []


def user_code_paths(config: Any) -> list[Path]:
    """The package directories and single-file modules to ship for ``config``
    (module docstring); [] when ``RLBLOCKS_SHIP_USER_CODE=0``.

    Examples:
        >>> user_code_paths({"env": "rlblocks.envs:rlblocks/RepeatAfterMe-v0"})
        []
    """
    if os.environ.get(SHIP_ENV_VAR, "1").strip().lower() in ("0", "false", "no", "off"):
        return []
    installed = _installed_roots()
    import rlblocks

    installed.extend(Path(p).resolve() for p in rlblocks.__path__)
    out: dict[Path, None] = {}
    for module in config_modules(config):
        top = module.split(".")[0]
        if top in ("__main__", "rlblocks") or top in sys.builtin_module_names:
            continue
        for path in _top_level_paths(top):
            if not _inside(path, installed):
                out[path] = None
    return list(out)


def runtime_env_for(config: Any, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``base`` (a Ray ``runtime_env``; None: empty) with :func:`user_code_paths` added to
    its ``py_modules`` (after those it lists; a path it already lists is not repeated)."""
    out = dict(base or {})
    modules = list(out.get("py_modules") or [])
    for path in user_code_paths(config):
        if str(path) not in {str(m) for m in modules}:
            modules.append(str(path))
    if modules:
        out["py_modules"] = modules
    return out
