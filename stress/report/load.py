"""A run directory read into memory once, for every part of the report.

The report needs the same files in several places (verdict, tables, charts, capacity), so
they are read here once. Memory grows with the number of requests and telemetry samples,
never with stream chunks: ``requests.jsonl`` has one line per request. Files a run does not
have (no GPU telemetry, no server metrics, a run killed before its summary) are simply
empty here; every consumer copes with that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.recorder import read_jsonl, read_manifest
from stress.summary import rescale_record

Record = dict[str, Any]


@dataclass(slots=True)
class RunData:
    """The files of one run directory, parsed."""

    path: Path
    manifest: dict[str, Any]
    requests: list[Record]
    events: list[Record]
    server: list[Record] = field(default_factory=list)
    gpu_cards: list[Record] = field(default_factory=list)
    gpu_samples: list[Record] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id") or self.path.name)

    @property
    def scenario(self) -> dict[str, Any]:
        sc = self.manifest.get("scenario")
        return sc if isinstance(sc, dict) else {}

    @property
    def scenario_name(self) -> str:
        return str(self.scenario.get("name") or "?")

    @property
    def main(self) -> list[Record]:
        """Requests that count for headline figures (warm-up excluded, field note 7)."""
        return [r for r in self.requests if not r.get("warmup")]

    @property
    def complete(self) -> bool:
        return self.manifest.get("end_time") is not None

    @property
    def duration_s(self) -> float:
        """The run's length: the manifest's, or (killed run) the last request's end."""
        d = self.manifest.get("duration_s")
        if isinstance(d, int | float) and d > 0:
            return float(d)
        return max((end_time(r) for r in self.requests), default=0.0)

    def collector(self, name: str) -> dict[str, Any]:
        c = self.manifest.get("collectors")
        got = c.get(name) if isinstance(c, dict) else None
        return got if isinstance(got, dict) else {}


def end_time(r: Record) -> float:
    """When a request ended, seconds since run start."""
    return float(r.get("t_start") or 0.0) + float(r.get("e2e_s") or 0.0)


def load_run(run_dir: Path) -> RunData:
    """Read every file of a run directory; a missing optional file reads as empty."""
    manifest = read_manifest(run_dir)
    gpu = read_jsonl(run_dir / "gpu.jsonl")
    cards: list[Record] = []
    samples: list[Record] = []
    for rec in gpu:
        if rec.get("type") == "cards":
            cards = [c for c in rec.get("cards") or [] if isinstance(c, dict)]
        elif rec.get("type") == "sample":
            samples.append(rec)
    requests = read_jsonl(run_dir / "requests.jsonl")
    events = read_jsonl(run_dir / "events.jsonl")
    server = read_jsonl(run_dir / "server.jsonl")
    scale = float(manifest.get("time_scale") or 1.0)
    if scale != 1.0:  # a time-scaled simulator run: show simulated seconds, like summary.json
        manifest = {**manifest, "duration_s": float(manifest.get("duration_s") or 0) * scale}
        requests = [rescale_record(r, scale) for r in requests]
        events = [{**e, "t": float(e.get("t") or 0) * scale} for e in events]
        server = [_rescale_sample(s, scale) for s in server]
    return RunData(
        path=run_dir,
        manifest=manifest,
        requests=requests,
        events=events,
        server=server,
        gpu_cards=cards,
        gpu_samples=samples,
    )


def _rescale_sample(s: Record, scale: float) -> Record:
    """A server sample on the simulated clock: times multiplied, per-time rates divided."""
    out = {**s, "t": float(s.get("t") or 0) * scale}
    for key, value in s.items():
        if isinstance(value, int | float) and (key.endswith("_tok_s") or key.endswith("_per_min")):
            out[key] = value / scale
    rates = s.get("rates")
    if isinstance(rates, dict):
        out["rates"] = {k: v / scale if isinstance(v, int | float) else v for k, v in rates.items()}
    return out
