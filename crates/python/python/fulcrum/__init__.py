"""Fulcrum's simulators from Python.

    import fulcrum
    r = fulcrum.sim("scenarios/seed-000.toml", set={"clients.requests": 1000})
    r.summary            # one row per algorithm and seed (pandas)
    f = fulcrum.fabric("scenarios/fabric/large-scale-ecnsharp.toml", seed=3)
    f.flows              # one row per flow: FCT, slowdown, ...
    f.report             # the JSON of `fulcrum fabric --json`, as a dict

A scenario is a path or a dict (the TOML file's structure); `set` takes the
`--set KEY=VALUE` overrides (a list of strings or a dict). Sweeps: build
`Spec`s (`Spec.sim`, `Spec.fabric`, `grid`) and `run_all(specs, executor)`
with any `concurrent.futures.Executor` (a process pool, dask's, Ray's,
submitit's): a `Spec` is plain text and numbers, so it pickles.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any, Iterable, Mapping, Sequence, Union

import numpy as np
import pandas as pd

from . import _fulcrum
from ._fulcrum import COMMIT, ScenarioError, __version__

__all__ = [
    "COMMIT",
    "Result",
    "ScenarioError",
    "Spec",
    "__version__",
    "fabric",
    "grid",
    "run_all",
    "run_spec",
    "sim",
]

Scenario = Union[str, "os.PathLike[str]", Mapping[str, Any]]
Sets = Union[Sequence[str], Mapping[str, Any], None]


def _toml_value(value: Any) -> str:
    """`value` as the VALUE of a `--set KEY=VALUE`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str, list, tuple, dict)):
        text = json.dumps(value)
        if isinstance(value, dict):
            return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
        return text
    raise TypeError(f"cannot write {value!r} as a scenario value")


def _sets(sets: Sets) -> tuple[str, ...]:
    if sets is None:
        return ()
    if isinstance(sets, Mapping):
        return tuple(f"{k}={_toml_value(v)}" for k, v in sets.items())
    if isinstance(sets, str):
        return (sets,)
    return tuple(sets)


def _source(scenario: Scenario, base_dir: str | None) -> tuple[str, str, str]:
    """(TOML text, origin for messages, directory of its relative files)."""
    if isinstance(scenario, Mapping):
        text = _fulcrum.json_to_toml(json.dumps(scenario))
        return text, "<dict>", os.path.abspath(base_dir or os.getcwd())
    path = os.fspath(scenario)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return text, path, os.path.abspath(base_dir or os.path.dirname(path) or ".")


@dataclasses.dataclass(frozen=True)
class Spec:
    """One invocation of a simulator: picklable plain data."""

    kind: str  # "sim" or "fabric"
    text: str  # the scenario's TOML text
    origin: str  # what error messages call it (its path, or "<dict>")
    base_dir: str  # where its relative files (CDFs, flow lists) are read
    sets: tuple[str, ...] = ()
    seed: int | None = None  # None: the scenario's seed
    runs: int = 1  # seeds seed, seed+1, ...
    threads: int | None = None  # None: one per core

    @classmethod
    def sim(cls, scenario: Scenario, set: Sets = None, seed: int | None = None, runs: int = 1,
            threads: int | None = None, base_dir: str | None = None) -> "Spec":
        """A request-simulator run (`fulcrum sim`)."""
        return cls("sim", *_source(scenario, base_dir), _sets(set), seed, runs, threads)

    @classmethod
    def fabric(cls, scenario: Scenario, set: Sets = None, seed: int | None = None, runs: int = 1,
               threads: int | None = None, base_dir: str | None = None) -> "Spec":
        """A fabric-simulator run (`fulcrum fabric`)."""
        return cls("fabric", *_source(scenario, base_dir), _sets(set), seed, runs, threads)

    def with_(self, set: Sets = None, **changes: Any) -> "Spec":
        """This spec with more overrides and other fields changed."""
        return dataclasses.replace(self, sets=self.sets + _sets(set), **changes)

    def run(self) -> "Result":
        """Run it here (the interpreter is released while it runs)."""
        out = _fulcrum.run(self.kind, self.text, self.origin, self.base_dir, list(self.sets), self.seed, self.runs, self.threads)
        return Result(self.kind, out["json"], out["tables"])


def run_spec(spec: Spec) -> "Result":
    """`spec.run()`, as a module-level function for executors."""
    return spec.run()


class Result:
    """What a run produced: the CLI's JSON and its tables as DataFrames.

    Request simulator: `summary`, `requests_per_server`, `cdf`, `share`;
    fabric: `flows`, `queues`, `queue_series`, `throughput` (columns as the
    CSV files of `--csv`). Plain data, so it pickles back from a worker.
    """

    def __init__(self, kind: str, json_text: str, tables: dict):
        self.kind = kind
        self.json = json_text
        self._tables = tables

    @property
    def report(self) -> dict:
        """The JSON report (what `--json` prints), parsed."""
        return json.loads(self.json)

    @property
    def provenance(self) -> dict:
        return self.report["provenance"]

    def table(self, name: str) -> pd.DataFrame:
        """The table `name` as a DataFrame."""
        if name not in self._tables:
            raise KeyError(f"{name!r}: this {self.kind} result has {', '.join(self._tables)}")
        columns = {}
        for col, data in self._tables[name].items():
            if isinstance(data, tuple):
                dtype, raw = data
                columns[col] = np.frombuffer(raw, dtype=dtype).copy()
            else:
                columns[col] = data
        return pd.DataFrame(columns)

    def __getattr__(self, name: str) -> pd.DataFrame:
        tables = self.__dict__.get("_tables", {})
        if name in tables:
            return self.table(name)
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"<fulcrum.Result {self.kind} {self.report.get('scenario')!r}: {', '.join(self._tables)}>"


def sim(scenario: Scenario, set: Sets = None, seed: int | None = None, runs: int = 1,
        threads: int | None = None, base_dir: str | None = None) -> Result:
    """Run a request-simulator scenario (a path or a dict)."""
    return Spec.sim(scenario, set, seed, runs, threads, base_dir).run()


def fabric(scenario: Scenario, set: Sets = None, seed: int | None = None, runs: int = 1,
           threads: int | None = None, base_dir: str | None = None) -> Result:
    """Run a fabric scenario (a path or a dict)."""
    return Spec.fabric(scenario, set, seed, runs, threads, base_dir).run()


def grid(base: Spec, params: Mapping[str, Iterable[Any]] | None = None,
         seeds: Iterable[int] | None = None) -> list[Spec]:
    """`base` at every combination of `params` ({"workload.load": [0.3, 0.5], ...},
    as `--set`s) and every seed of `seeds` (one run each), in order."""
    specs = [base]
    for key, values in (params or {}).items():
        specs = [s.with_({key: v}) for s in specs for v in values]
    if seeds is not None:
        specs = [s.with_(seed=seed, runs=1) for s in specs for seed in seeds]
    return specs


class _Progress:
    """tqdm when it is installed, else one line on stderr."""

    def __init__(self, total: int, shown: bool):
        self.total, self.done, self.bar = total, 0, None
        self.shown = shown
        if shown:
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, desc="fulcrum", unit="run")
            except ImportError:
                self.bar = None

    def step(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.shown:
            end = "\n" if self.done == self.total else ""
            print(f"\rfulcrum: {self.done}/{self.total} runs", end=end, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_all(specs: Sequence[Spec], executor=None, progress: bool = True) -> list[Result]:
    """Run `specs` on `executor` (any `concurrent.futures.Executor`; none:
    one after another here) and return their results in order."""
    specs = list(specs)
    shown = _Progress(len(specs), progress)
    try:
        if executor is None:
            results = []
            for s in specs:
                results.append(s.run())
                shown.step()
            return results
        from concurrent.futures import as_completed

        futures = [executor.submit(run_spec, s) for s in specs]
        for _ in as_completed(futures):
            shown.step()
        return [f.result() for f in futures]
    finally:
        shown.close()
