"""Smoke tests of the benchmarks: the package's kernel benchmarks run and print well-formed
JSON lines; the peer comparisons under benchmarks/ import, parse ``--help`` and keep their
examples true.

Timings are never asserted (shared, noisy machines); only the output format and the
correctness checks the benchmark does itself (hand-written numpy == rlblocks).
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import importlib.util
import io
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rlblocks.benchmarking import BENCHMARKS, atari
from rlblocks.benchmarking import preprocessors as bench
from rlblocks.benchmarking.preprocessor_cases import build_cases
from rlblocks.train.tuned import load_tuned

SCRIPTS = Path(__file__).resolve().parents[1] / "benchmarks"

KEYS = {"case", "method", "us_per_item", "items_per_s", "batch", "threads", "extra", "ratio"}


def _json_rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _cli_in_process(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``rlblocks ARGS`` in this process, as ``bench_suites._cli`` returns it."""
    from rlblocks.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def test_quick_subset_prints_json_lines(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "rows.jsonl"
    bench.main(
        [
            "--quick",
            "--cases",
            "discrete,dict",
            "--batches",
            "1,4",
            "--min-time",
            "0.002",
            "--json",
            str(out_file),
        ]
    )
    rows = _json_rows(capsys.readouterr().out)
    assert rows, "no JSON lines printed"
    for row in rows:
        assert set(row) == KEYS
        assert row["us_per_item"] > 0
    methods = {r["method"] for r in rows}
    assert {
        "rlblocks t=1",
        "rlblocks t=2",
        "rlblocks transform",
        "numpy reference",
        "numpy hand-written",
        "gymnasium flatten loop",
    } <= methods
    assert {r["case"] for r in rows} == {
        "Discrete(100) list",
        "Discrete(100) batched",
        "nested Dict list",
        "nested Dict batched",
    }
    assert all(r["ratio"] is not None for r in rows if r["method"].startswith("rlblocks"))
    assert all(r["extra"].get("matches_rlblocks", True) for r in rows)
    assert _json_rows(out_file.read_text()) == rows


def test_repeated_and_bound_rows(capsys: pytest.CaptureFixture[str]) -> None:
    rows = bench.run(
        ["repeated", "multidiscrete"], [2], [1], min_time=0.002, repeats=1, progress=False
    )
    assert {r.case for r in rows} == {
        "Repeated(Dict) len~U(0,32) list",
        "MultiDiscrete([10]*16) list",
        "MultiDiscrete([10]*16) batched",
    }
    bench.report_rows(rows)
    assert "target checks" in capsys.readouterr().out


def test_sequence_and_graph_rows_check_every_numpy_variant() -> None:
    rows = bench.run(["sequence", "graph"], [1, 3], [1], min_time=0.002, repeats=1, progress=False)
    cases = {
        "Sequence(Box(2)) len~U(0,16) list",
        "Sequence(Dict) len~U(0,16) list",
        "Graph(F=8,E=4) N~U(5,32) list",
    }
    assert {r.case for r in rows} == cases
    for case in cases:
        for batch in (1, 3):
            methods = {r.method for r in rows if r.case == case and r.batch == batch}
            assert {"rlblocks t=1", "numpy reference", "numpy hand-written"} <= methods
    # every variant was asserted equal to rlblocks' output before it got a time
    variants = [r.extra["variants_us_per_item"] for r in rows if r.method == "numpy hand-written"]
    assert all("per-row slices" in v and len(v) >= 2 for v in variants)
    assert all(r.extra.get("matches_rlblocks", True) for r in rows)


def test_a_numpy_variant_that_pads_wrongly_is_refused() -> None:
    case = build_cases(["graph"], 2)[0]
    rows = case.variants["per-row slices"]

    def drops_the_links(obs: list) -> np.ndarray:
        out = rows(obs)
        out[:, -256:] = 0.0
        return out

    case.variants = {"per-row slices": drops_the_links}
    with pytest.raises(AssertionError, match="hand-written 'per-row slices' != rlblocks"):
        bench.run_case(case, 2, [1], min_time=0.001, repeats=1)


def test_the_structure_samples_fit_their_padding() -> None:
    graphs = build_cases(["graph"], 256)[0].observations
    nodes = [len(g.nodes) for g in graphs]
    edges = [len(g.edge_links) for g in graphs]
    assert min(nodes) >= 5 and max(nodes) <= 32 and max(edges) <= 128
    assert 2.5 < sum(edges) / sum(nodes) < 3.5  # about 3 edges per node
    for case in build_cases(["sequence"], 256):
        lengths = [len(o) for o in case.observations]
        assert min(lengths) == 0 and max(lengths) == 16


def test_bench_structures_quick(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    module = importlib.import_module("bench_structures")
    module.main(["--quick", "--batches", "2", "--min-time", "0.001"])
    out = capsys.readouterr().out
    rows = _json_rows(out)
    assert rows and all(set(row) == KEYS for row in rows)
    methods = {r["method"] for r in rows}
    assert {
        "rlblocks C++ t=1",
        "numpy twin (IMPL=numpy)",
        "numpy per-row slices",
        "torch pad_sequence",
    } <= methods
    if importlib.util.find_spec("torch_geometric") is None:
        assert "torch_geometric" in out and "skipped" in out
    else:
        assert {"PyG from_data_list", "PyG Data + from_data_list"} <= methods
    assert all(r["extra"].get("matches_rlblocks", True) for r in rows)
    assert "µs per observation" in out


def test_bound_row_arithmetic() -> None:
    case = build_cases(["discrete"], 4)[1]  # batched: int64 in, 100 float32 out
    ours = bench.Result(case.name, "rlblocks t=1", 0.1, 1e7, 4, 1)
    row = bench.bound_row(case, 4, 1e9, [ours])
    assert row.extra["bytes_in_per_item"] == 8
    assert row.extra["bytes_out_per_item"] == 400
    assert row.us_per_item == pytest.approx(0.408)
    assert row.extra["rlblocks_t=1_over_bound"] == pytest.approx(0.1 / 0.408, rel=1e-2)


def test_the_atari_kernel_rows_compare_with_the_numpy_twin() -> None:
    rows = atari.kernel_results([1], min_time=0.002)
    methods = {r.method for r in rows if r.case == atari.KERNEL_1}
    assert {"rlblocks C++", "numpy twin"} <= methods
    assert all(r.us_per_item > 0 for r in rows)


def test_the_package_table_holds_only_its_own_benchmarks() -> None:
    for module in BENCHMARKS.values():
        assert module.startswith("rlblocks.benchmarking.")
        assert callable(importlib.import_module(module).main)


# The peer comparisons are scripts under benchmarks/ (they import their shared helpers).
@pytest.mark.parametrize(
    "name",
    [
        "_harness",
        "_ppo_runs",
        "bench_goals",
        "bench_multiagent",
        "bench_offpolicy",
        "bench_ppo_heads",
        "bench_replay",
        "bench_structures",
        "bench_train",
        "bench_suites",
        "bench_td3_update",
        "bench_tuned",
        "bench_turns",
        "learn_multiagent",
    ],
)
def test_script_examples(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    failed, tried = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert tried and not failed


@pytest.mark.parametrize(
    "name",
    [
        "bench_atari_pipeline",
        "bench_distributions",
        "bench_export",
        "bench_goals",
        "bench_cli",
        "bench_models",
        "bench_multiagent",
        "bench_offpolicy",
        "bench_ppo_heads",
        "bench_replay",
        "bench_structures",
        "bench_train",
        "bench_suites",
        "bench_td3_update",
        "bench_tuned",
        "bench_turns",
        "learn_multiagent",
    ],
)
def test_script_help(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(name).main(["--help"])
    assert exit_info.value.code == 0
    assert "--quick" in capsys.readouterr().out


def test_bench_multiagent_quick(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pettingzoo")
    pytest.importorskip("mpe2")
    import rlblocks.train

    monkeypatch.syspath_prepend(str(SCRIPTS))
    module = importlib.import_module("bench_multiagent")
    rows = module.main(["--quick", "--frameworks", "env", "rlblocks", "sb3"])  # subprocesses
    assert [r["framework"] for r in rows] == ["env", "rlblocks", "sb3"]
    must_run = {
        "env": True,
        "rlblocks": hasattr(rlblocks.train, "MultiAgentPPOTrainer"),
        "sb3": all(importlib.util.find_spec(m) for m in ("stable_baselines3", "supersuit")),
    }
    for row in rows:
        if "skipped" in row and not must_run[row["framework"]]:
            continue
        assert "skipped" not in row, row
        assert row["agent_steps"] == row["iters"] * row["agent_steps_per_iter"] == 96
        assert row["agent_steps_per_s"] > 0 and row["episode_return_mean"] < 0
    out = capsys.readouterr().out
    assert _json_rows(out) == rows
    assert "agent steps/s" in out


def test_bench_ppo_heads_tiny(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One PPO iteration of 128 steps per head (the Discrete baseline added), fast paths
    and the reference: every row trained, the table relates each to its baseline."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    module = importlib.import_module("bench_ppo_heads")
    table = module.main(["--steps", "128", "--repeats", "1", "--kinds", "tuple,masked"])
    runs = _json_rows(capsys.readouterr().out)
    assert sorted((r["case"], r["method"]) for r in runs) == sorted(
        (f"PPO {k}", m)
        for k in ("discrete", "tuple", "masked")
        for m in ("rlblocks", "reference (fast_paths=False)")
    )
    assert all(r["steps"] >= 128 and r["steps_per_s"] > 0 for r in runs)
    base = [r for r in table if r["case"] == "PPO discrete"]
    assert base and all(r["vs_discrete"] == 1.0 for r in base)


def test_bench_replay_quick(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    rows = importlib.import_module("bench_replay").main(["--quick"])
    methods = [r.method for r in rows]
    assert methods[:4] == [
        "rlblocks",
        "rlblocks out=",
        "rlblocks numpy twin",
        "rlblocks numpy twin out=",
    ]
    assert all(r.us_per_item > 0 and r.batch == 32 for r in rows)
    assert rows[0].extra["bytes_per_step"] <= 7100
    if importlib.util.find_spec("stable_baselines3"):
        sb3 = {r.method: r.extra["bytes_per_step"] for r in rows[4:]}
        assert sb3["sb3 optimize_memory_usage"] > 28_000
    out = capsys.readouterr().out
    assert [r["method"] for r in _json_rows(out)] == methods
    assert "bytes/step" in out


def test_bench_offpolicy_quick(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("stable_baselines3")
    monkeypatch.syspath_prepend(str(SCRIPTS))
    module = importlib.import_module("bench_offpolicy")
    # a 2 s cap instead of --quick's 10 s: each worker still trains (rlblocks: at least one
    # 1000-step iteration; SB3 stops at its first step past the cap)
    monkeypatch.setitem(module.TASKS["DQN"], "quick_cap_s", 2.0)
    rows = module.main(["--quick", "--algos", "DQN", "--impls", "rlblocks,sb3"])  # subprocesses
    assert [(r["algo"], r["impl"], r["runs"]) for r in rows] == [
        ("DQN", "rlblocks", 1),
        ("DQN", "sb3", 1),
    ]
    runs = _json_rows(capsys.readouterr().out)
    assert [r["impl"] for r in runs] == ["rlblocks", "sb3"]
    for run in runs:
        assert run["steps"] > 0 and run["wall_s"] > 0 and run["torch_threads"] == 1
        assert run["reached"] == (run["final_return"] >= 150.0)


def test_bench_suites_quick_row_and_its_docs_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    suites = importlib.import_module("bench_suites")
    results = tmp_path / "suites.jsonl"
    args = ["--quick", "--rows", "cartpole_dqn", "--results", str(results)]
    assert suites.main(args) == 0
    (run,) = _json_rows(capsys.readouterr().out)
    assert (run["row"], run["method"], run["steps"], run["episodes"]) == (
        "cartpole_dqn",
        "tuned",
        2000,
        2,
    )
    assert suites.read_results(results) == [run]
    text = suites.table([run], {})
    (line,) = [ln for ln in text.splitlines() if "| cartpole_dqn |" in ln]
    assert f"{run['eval_mean']:.1f} ± 0.0 (1; 2,000 steps) | 500.0 |" in line
    assert all(f"| {name} |" in text for name in suites.ROWS)  # every row, run or not
    # "MuJoCo is not installed here" exactly where mujoco does not import (issue 46)
    mujoco_rows = [ln for ln in text.splitlines() if "| Walker2d-v5 | PPO |" in ln]
    missing = importlib.util.find_spec("mujoco") is None
    assert len(mujoco_rows) == 1
    assert ("MuJoCo is not installed here" in mujoco_rows[0]) == missing, mujoco_rows
    for name, row in suites.ROWS.items():  # the zoo's numbers are the tuned configs' own
        zoo = load_tuned(name).zoo
        assert (row.zoo_return, row.zoo_budget) == (zoo or (None, row.zoo_budget)), name
        assert row.budget <= row.zoo_budget or row.zoo_budget == 0  # 0: the zoo has no entry
    doc = tmp_path / "doc.md"
    doc.write_text(f"head\n{suites.BEGIN}\nold\n{suites.END}\ntail\n")
    suites.write_docs(text, doc)
    assert doc.read_text() == f"head\n{suites.BEGIN}\n{text}\n{suites.END}\ntail\n"


def test_bench_suites_minigrid_rows_train_to_the_budget_and_evaluate_both_ways(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # issue 46: a MiniGrid run stopped once its training return (sampled actions) passed 0.9,
    # and the greedy policy of that checkpoint then often turned in place until the step
    # limit; the MiniGrid rows now train to the budget and are evaluated greedy and sampled
    import dataclasses

    monkeypatch.syspath_prepend(str(SCRIPTS))
    suites = importlib.import_module("bench_suites")
    # the CLI in this process (test_bench_suites_quick_row_and_its_docs_table runs it in
    # fresh ones, as the script does)
    monkeypatch.setattr(suites, "_cli", _cli_in_process)
    minigrid = [row for name, row in suites.ROWS.items() if name.startswith("minigrid_")]
    assert len(minigrid) == 4 and all(row.to_budget and row.sampled for row in minigrid)
    # a target the first iteration passes: the stop ends the run there unless it is lifted
    base = dataclasses.replace(suites.ROWS["cartpole_ppo"], zoo_return=0.0)
    lifted = dataclasses.replace(base, to_budget=True, sampled=True)
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    # 512 steps: two of cartpole_ppo's 256-step iterations, the stop passed after the first
    early = suites.run_rlblocks(base, 0, "tuned", 1, tmp_path / "a", 512)
    full = suites.run_rlblocks(lifted, 0, "tuned", 1, tmp_path / "b", 512)
    assert early["steps"] < 512 <= full["steps"], (early, full)
    assert "sampled_mean" not in early and 0.0 < full["sampled_mean"] <= 500.0
    # a run that stopped short of its budget (the rows' old protocol) is left out of the row
    short = {**early, "row": "minigrid_empty8x8_ppo"}
    text = suites.table([{**full, "row": "minigrid_doorkey8x8_ppo"}, short], {})
    (line,) = [ln for ln in text.splitlines() if "| minigrid_doorkey8x8_ppo |" in ln]
    assert "| 500,000 (-) |" in line  # the zoo has no DoorKey-8x8 entry
    assert f"; sampled actions {full['sampled_mean']:.3f} ± 0.000 |" in line
    (line,) = [ln for ln in text.splitlines() if "| minigrid_empty8x8_ppo |" in ln]
    assert "not run yet" in line


def test_bench_suites_sb3_column_wraps_minigrid_as_the_zoo_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the zoo trains MiniGrid through its FlatObsWrapper and VecNormalize; without them
    # SB3's MlpPolicy refuses the Dict observation (issue 46: the SB3 column's MiniGrid rows)
    pytest.importorskip("minigrid")
    run = _tiny_sb3_run(monkeypatch, "minigrid_empty8x8_ppo", envs=2)
    assert importlib.import_module("bench_suites").ROWS["minigrid_empty8x8_ppo"].sb3_wrapper
    assert (run["row"], run["method"], run["steps"]) == ("minigrid_empty8x8_ppo", "sb3", 32)
    assert 0.0 <= run["eval_mean"] <= 1.0  # MiniGrid's return lies in [0, 1]


def test_bench_suites_sb3_column_makes_the_env_as_the_tuned_config_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ant_ppo leaves Ant-v5's 78 contact forces out of the observation (env_config), as the
    # zoo's Ant-v3 saw none; SB3 must train and be evaluated on that same 27-dim env
    pytest.importorskip("mujoco")
    assert _tiny_sb3_run(monkeypatch, "ant_ppo", envs=1)["obs_shape"] == [27]


def _tiny_sb3_run(monkeypatch: pytest.MonkeyPatch, name: str, envs: int) -> dict[str, Any]:
    """``bench_suites.run_sb3`` on the PPO row ``name`` shrunk to 16-step rollouts of
    ``envs`` envs, one epoch, ``16 * envs`` steps (the zoo's wrappers and env kept)."""
    pytest.importorskip("stable_baselines3")
    import dataclasses

    monkeypatch.syspath_prepend(str(SCRIPTS))
    suites = importlib.import_module("bench_suites")
    row = suites.ROWS[name]
    assert row.sb3 is not None
    sb3 = {**row.sb3, "n_steps": 16, "batch_size": 16, "n_epochs": 1}
    tiny = dataclasses.replace(row, sb3=sb3, sb3_envs=envs)
    run: dict[str, Any] = suites.run_sb3(tiny, seed=0, episodes=1, budget=16 * envs)
    return run


def test_bench_suites_budget_probes_stay_out_of_the_table(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # issue 46: hopper_ppo's side-by-side at 300k (--budget) must neither replace the row's
    # 1M run of the same seed nor enter its cells
    monkeypatch.syspath_prepend(str(SCRIPTS))
    suites = importlib.import_module("bench_suites")
    full = {"row": "hopper_ppo", "method": "tuned", "seed": 0, "budget": 1_000_000,
            "steps": 1_000_000, "wall_s": 10.0, "eval_mean": 1000.0}  # fmt: skip
    probe = {**full, "budget": 300_000, "steps": 300_000, "eval_mean": 50.0, "probe": True}
    sb3_probe = {**probe, "method": "sb3"}
    # a run of a config since changed, marked so, is read as no run at all
    old = {**full, "seed": 1, "eval_mean": 5.0, "superseded": "entropy_coeff 0"}
    results = tmp_path / "suites.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in (full, probe, sb3_probe, old)))
    runs = suites.read_results(results)
    assert len(runs) == 3 and old not in runs
    (line,) = [ln for ln in suites.table(runs, {}).splitlines() if "| hopper_ppo |" in ln]
    assert "1000.0 ± 0.0 (1; 1,000,000 steps)" in line and "50.0" not in line
    assert suites.ROWS["hopper_ppo"].sb3 is not None  # --sb3 runs the zoo's Hopper entry
    # a row with no run at its own budget shows its largest probe, marked so (issue 46:
    # "rows this machine cannot run to budget marked as such, with the largest budget run")
    corridor = {**probe, "row": "minigrid_keycorridors3r1_ppo", "eval_mean": 0.95}
    smaller = {**corridor, "budget": 50_000, "steps": 50_000, "eval_mean": 0.1}
    (line,) = [
        ln
        for ln in suites.table([corridor, smaller], {}).splitlines()
        if "| minigrid_keycorridors3r1_ppo |" in ln
    ]
    assert "| run to 300,000 steps, the largest budget that fitted here: 0.950 ± 0.000 (1;" in line
    assert "| yes at 300,000 |" in line and "0.100" not in line
    # the defaults' probe at that budget fills the defaults cell, scaled against it; one at
    # another budget does not
    same = {**corridor, "method": "defaults", "eval_mean": 0.475}
    other = {**smaller, "method": "defaults", "eval_mean": 0.2}
    for defaults, cell in ((same, "| 0.475 ± 0.000 (1; 300,000 steps), 50% |"), (other, "| - |")):
        (line,) = [
            ln
            for ln in suites.table([corridor, defaults], {corridor["row"]: 0.0}).splitlines()
            if "| minigrid_keycorridors3r1_ppo |" in ln
        ]
        assert cell in line, line
    # and `rlblocks tuned` shows the same figures (suites.json)
    figures = suites.tuned_figures([corridor, smaller, full, probe])
    assert figures["minigrid_keycorridors3r1_ppo"] == {
        "mean": 0.95, "std": 0.0, "seeds": 1, "target": 0.9, "reached": "1/1", "steps": 300_000,
    }  # fmt: skip
    assert figures["hopper_ppo"]["steps"] == 1_000_000  # the row's own budget wins
