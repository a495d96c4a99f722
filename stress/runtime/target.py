"""The target of a run: the HTTP session, the server (or the built-in simulator) and its model.

``open_target`` resolves a scenario's ``target:`` into a :class:`Target`: it starts the
simulator in its own process when the URL is ``sim``, reads the API key from where the user
named it, lists the server's models and checks that the scenario's model is served (one
line, exit 1, when it is not). ``make_session`` builds the :class:`~stress.net.fetch.Fetcher`
for everything but the chat requests, which have their own pool (``stress.net.client``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from stress.config.scenario import LoadedScenario
from stress.core.errors import TargetError
from stress.core.secrets import load_api_key, safe_url
from stress.net.fetch import Fetcher, FetchError


@dataclass(slots=True)
class Target:
    url: str
    headers: dict[str, str]
    model: str
    models: list[dict[str, Any]] = field(default_factory=list)
    sim: Any = None
    time_scale: float = 1.0
    """Simulated seconds per wall second (the built-in simulator only)."""


def make_session(connect_s: float) -> Fetcher:
    """The requests for everything but the chat requests (the model list, the probe, the
    tokenizer calibration, the server's metrics and health): a few at a time, kept alive.
    The chat requests have their own pool (``ChatClient``)."""
    return Fetcher(connect_s, limit=16)


@contextlib.asynccontextmanager
async def open_target(loaded: LoadedScenario, session: Fetcher) -> AsyncIterator[Target]:
    """Resolve the target: start the simulator if asked, read the key, find the model."""
    sc = loaded.scenario
    t = sc.target
    key_file = loaded.resolve(t.api_key_file) if t.api_key_file else None
    key = load_api_key(t.api_key_env, key_file, required=t.api_key_required)
    headers = dict(t.headers)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    sim = None
    url = t.url
    time_scale = 1.0
    if url == "sim":  # in its own process: its work never lands on the client's loop
        from stress.config.sim import SimConfig
        from stress.sim.process import start_sim_process

        sim_config = SimConfig.model_validate(t.sim)
        time_scale = sim_config.time_scale
        sim = await start_sim_process(sim_config)
        url = sim.url
    try:
        models = await list_models(session, url, headers)
        model = t.model
        if model == "auto":
            if not models:
                raise TargetError(
                    f"{safe_url(url)}/v1/models lists no model -- fix: set target.model"
                )
            model = str(models[0].get("id"))
        else:
            _check_model(url, model, models)
        yield Target(url, headers, model, models, sim, time_scale)
    finally:
        if sim is not None:
            await sim.close()


def _check_model(url: str, model: str, models: list[dict[str, Any]]) -> None:
    """A named model must be one the server lists: llama.cpp answers whatever the name,
    and a run would otherwise report a model that was never served."""
    served = [str(m.get("id")) for m in models if m.get("id") is not None]
    if served and model not in served:
        shown = ", ".join(served[:10]) + (
            f" and {len(served) - 10} more" if len(served) > 10 else ""
        )
        raise TargetError(
            f"model {model!r} is not served by {safe_url(url)} (it serves: {shown}) -- fix: "
            "set target.model to one of them, or auto"
        )


async def list_models(session: Fetcher, url: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    """The server's model cards (a redirect is not followed: it is the answer)."""
    where = safe_url(url)
    try:
        resp = await session.get(url + "/v1/models", headers, 30.0)
    except FetchError as e:
        raise TargetError(
            f"cannot reach {where} ({e.short}) -- fix: start the server, or pass "
            "--target URL (or --target sim for the built-in simulator)"
        ) from None
    if resp.status in (401, 403):
        if "Authorization" not in headers:
            raise TargetError(
                f"{where} wants an API key (HTTP {resp.status}) and none was sent -- "
                "fix: export the variable that target.api_key_env names (e.g. "
                "STRESS_API_KEY=...)"
            )
        raise TargetError(
            f"{where} refused the API key (HTTP {resp.status}) -- fix: set "
            "target.api_key_env to a variable holding a valid key"
        )
    if resp.status != 200:
        raise TargetError(
            f"{where}/v1/models answered HTTP {resp.status} -- fix: check that the "
            "target is an OpenAI-compatible server root (no /v1 suffix)"
        )
    try:
        obj = resp.json()
    except ValueError:
        raise TargetError(f"{where}/v1/models did not return JSON") from None
    data = obj.get("data") if isinstance(obj, dict) else None
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
