"""``manifest.json`` as the analysis reads it: parsed once, each field the analysis and the
reports use typed and defaulted here, so no reader decides on its own what a missing or
null field means (``run_id`` fell back to the directory name in one reader and stayed
null in another).

The manifest is the run's provenance (the runtime writes it as a plain JSON object, see
``stress.runtime.provenance``); the scenario inside it stays the mapping it was recorded
as, because its schema belongs to ``stress.config`` and a run directory from an older
version must still read. ``runfiles.read_manifest_checked`` checks the types first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _obj(v: object) -> Mapping[str, Any]:
    return v if isinstance(v, dict) else _EMPTY


def _str(v: object) -> str | None:
    return v if isinstance(v, str) and v else None


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


@dataclass(frozen=True, slots=True)
class Manifest:
    """The fields of ``manifest.json`` that the analysis and the reports read."""

    run_id: str
    """The manifest's run id, else the run directory's name."""
    scenario: Mapping[str, Any]
    """The scenario as recorded ({} when absent)."""
    probe: Mapping[str, Any]
    """The pre-flight probe's findings ({} when the run had none)."""
    plan_peak: int | None
    """The run plan's peak users or sessions (None: a run directory from before the plan)."""
    server_kind: str | None
    exit_reason: str | None
    start_time: float | None
    end_time: float | None
    """Set when the run ended by itself (a killed run has none)."""
    duration_s: float | None
    time_scale: float
    """Simulated seconds per wall second (1 for a real server)."""
    tokenizer: str
    target_url: str | None
    model: str | None
    scenario_sha256: str | None
    models: tuple[Mapping[str, Any], ...] = ()
    versions: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    host: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    collectors: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """The collectors' results in the manifest itself (runs before collectors.json)."""

    @classmethod
    def of(cls, obj: Mapping[str, Any], run_dir: Path) -> Manifest:
        """The manifest object of ``run_dir``, its types already checked."""
        plan = _obj(obj.get("plan"))
        peak = plan.get("peak")
        return cls(
            run_id=_str(obj.get("run_id")) or run_dir.name,
            scenario=_obj(obj.get("scenario")),
            probe=_obj(obj.get("probe")),
            plan_peak=peak if isinstance(peak, int) and not isinstance(peak, bool) else None,
            server_kind=_str(obj.get("server_kind")),
            exit_reason=_str(obj.get("exit_reason")),
            start_time=_num(obj.get("start_time")),
            end_time=_num(obj.get("end_time")),
            duration_s=_num(obj.get("duration_s")),
            time_scale=_num(obj.get("time_scale")) or 1.0,
            tokenizer=_str(obj.get("tokenizer")) or "",
            target_url=_str(obj.get("target_url")),
            model=_str(obj.get("model")),
            scenario_sha256=_str(obj.get("scenario_sha256")),
            models=tuple(m for m in obj.get("models") or () if isinstance(m, dict)),
            versions=_obj(obj.get("versions")),
            host=_obj(obj.get("host")),
            collectors=_obj(obj.get("collectors")),
        )

    @property
    def scenario_name(self) -> str:
        return str(self.scenario.get("name") or "?")

    @property
    def slo(self) -> Mapping[str, Any]:
        """The scenario's ``slo:`` ({} when it sets none)."""
        return _obj(self.scenario.get("slo"))

    @property
    def cache_mode(self) -> str | None:
        """``conversation.cache`` (None when the scenario does not say)."""
        return _str(_obj(self.scenario.get("conversation")).get("cache"))

    @property
    def finished(self) -> bool:
        """The run wrote its end time (it ended by itself)."""
        return self.end_time is not None
