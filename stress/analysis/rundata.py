"""A run directory read into memory once, for every part of the report.

The report needs the same files in several places (verdict, tables, charts, capacity), so
they are read here once. Memory grows with the number of requests and telemetry samples,
never with stream chunks: ``requests.jsonl`` has one line per request. Files a run does not
have (no GPU telemetry, no server metrics, a run killed before its summary) are simply
empty here; every consumer copes with that. The files are read and checked by
:mod:`stress.analysis.runfiles`, the same reader ``summary.json`` uses: lines that cannot be
read and impossible values are counted there, never silently dropped. A time-scaled
simulator run is on the simulated clock here, all of it: requests, events, server and GPU
samples, so every chart shares one time axis.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stress.analysis.manifest import Manifest
from stress.analysis.rows import EventRow, RequestRow
from stress.analysis.runfiles import (
    Accounting,
    Quality,
    RunFiles,
    read_run_files,
    rescale_sample,
)
from stress.analysis.runfiles import end_time as end_time

Record = RequestRow
"""A request as read (the typed row of ``requests.jsonl``)."""
Sample = dict[str, Any]
"""A telemetry line (server.jsonl, gpu.jsonl) as read."""


@dataclass(slots=True)
class RunData:
    """The files of one run directory, parsed."""

    path: Path
    manifest: Manifest
    requests: list[RequestRow]
    events: list[EventRow]
    files: RunFiles
    server: list[Sample] = field(default_factory=list)
    gpu_cards: list[Sample] = field(default_factory=list)
    gpu_samples: list[Sample] = field(default_factory=list)
    gpu_server_cards: list[str] | None = None
    """The server's cards as the GPU collector recorded them (None: not recorded)."""

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def scenario(self) -> Mapping[str, Any]:
        return self.manifest.scenario

    @property
    def scenario_name(self) -> str:
        return self.manifest.scenario_name

    @property
    def peak_users(self) -> int:
        """The most users (closed loop) or sessions (open loop) at once in any step: the
        run plan's figure as the manifest holds it; for a run directory without one, the
        busiest step's users as the scenario and the records show them."""
        if self.manifest.plan_peak is not None:
            return self.manifest.plan_peak
        sc = self.scenario
        counts = [(sc.get("users") or {}).get("count")]
        counts += [ph.get("users") for ph in sc.get("phases") or () if isinstance(ph, dict)]
        per_step: dict[str, set[object]] = {}
        for r in self.requests:
            per_step.setdefault(str(r.get("phase") or "main"), set()).add(r.get("user"))
        seen = max((len(u - {None}) for u in per_step.values()), default=0)
        return max([seen, *(int(c) for c in counts if isinstance(c, int | float))])

    @property
    def main(self) -> list[Record]:
        """Requests that count for headline figures (warm-up excluded, field note 7)."""
        return [r for r in self.requests if not r.get("warmup")]

    @property
    def complete(self) -> bool:
        return self.files.finished

    @property
    def duration_s(self) -> float:
        """How long the run lived: the manifest's duration, or (killed run) state.json's
        last sign of life, never less than the last request's end."""
        return self.files.duration_s

    @property
    def quality(self) -> Quality:
        return self.files.quality

    @property
    def accounting(self) -> Accounting:
        return self.files.accounting

    @property
    def server_cards(self) -> list[str] | None:
        """The server's cards: the GPU collector's summary, else its cards record."""
        keys = self.collector("gpu").get("server_cards")
        return [str(k) for k in keys] if isinstance(keys, list) and keys else self.gpu_server_cards

    def collector(self, name: str) -> dict[str, Any]:
        """One collector's end-of-run results ({} when the run has none: killed, off)."""
        got = self.files.collectors.get(name)
        return got if isinstance(got, dict) else {}


def load_run(run_dir: Path, files: RunFiles | None = None) -> RunData:
    """Read every file of a run directory (or take ``files`` already read for
    ``summary.json``); a missing optional file reads as empty.

    ``RunDirError`` (one line) when the run's files are damaged beyond use.
    """
    files = files or read_run_files(run_dir)
    cards: list[Sample] = []
    samples: list[Sample] = []
    server_cards: list[str] | None = None
    manifest, server, gpu = files.manifest, files.server, files.gpu
    scale = files.time_scale
    if scale != 1.0:  # a time-scaled simulator run: show simulated seconds, like summary.json
        manifest = replace(manifest, duration_s=(manifest.duration_s or 0.0) * scale)
        server = [rescale_sample(s, scale) for s in server]
        gpu = [rescale_sample(g, scale) for g in gpu]  # on the same clock as every other chart
    for rec in gpu:
        if rec.get("type") == "cards":
            cards = rec["cards"]
            if isinstance(rec.get("server_cards"), list):
                server_cards = [str(k) for k in rec["server_cards"]]
        elif rec.get("type") == "sample":
            samples.append(rec)
    return RunData(
        path=run_dir,
        manifest=manifest,
        requests=files.requests,
        events=files.events,
        files=files,
        server=server,
        gpu_cards=cards,
        gpu_samples=samples,
        gpu_server_cards=server_cards,
    )
