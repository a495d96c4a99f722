"""A capacity search as it runs: its rows, its passes, and how it ends.

The search holds SIGINT and SIGTERM for its whole life (``stress.core.signals.SIGNALS``); each
pass takes them while its engine runs. So the first Ctrl-C, wherever it lands, stops the
search once the pass in flight is drained and recorded (a pass still preparing stops as
it starts); a second one cancels that pass. A pass against a server that no longer takes
connections ends the search too. Either way ``capacity.json`` says how the search ended
(``state``) and gives no answer past the steps it judged; while it runs it says
``running``, so a search killed outright reads as such (``stress report`` then says
``killed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from stress.config.scenario import LoadedScenario, Scenario, SearchSpec
from stress.core.errors import TargetError
from stress.core.fmt import tokens
from stress.core.limits import EXIT_VERDICT_FAIL
from stress.core.signals import SIGNALS
from stress.report.search import settle, write_search_report
from stress.search.plan import estimate
from stress.search.runner import (
    Progress,
    Row,
    RunStep,
    answer_line,
    bound_by_slots,
    document,
    grid_lengths,
    make_search,
    map_text,
    read_pass,
    read_tier,
    row_tier_answer,
    settle_step,
    slo_text,
    slot_history,
    slot_sentence,
    step_rounds,
    step_scenario,
    step_text,
    stop_text,
    tier_answer,
    tier_criterion,
    tier_map_line,
    tier_searches,
)
from stress.search.steps import Search, Step, boundary
from stress.store.recorder import new_run_dir, write_json

State = Literal["running", "finished", "interrupted", "server lost", "failed"]
EXIT_INTERRUPTED = 130
"""A search stopped by Ctrl-C, SIGTERM or the live view's q: no answer (128 + SIGINT, as
shells report an interrupted command)."""
EXIT_SERVER_LOST = 1
"""The server stopped answering: an unusable target, as when a run cannot reach it."""
LOST_ERRORS = frozenset({"connect", "reset"})
"""Error classes of a server that went away; after a pass with any, the search checks
that the server still takes connections before it judges the step."""


async def run_search(
    loaded: LoadedScenario,
    out_dir: Path,
    settings: SearchSpec,
    run_pass: RunStep,
    say: Callable[[str], None] = print,
) -> SearchRun:
    """Search, writing each pass's run directory, ``capacity.json`` and the search's report
    (capacity.md, capacity.html) under a new directory in ``out_dir``."""
    root = new_run_dir(out_dir, f"capacity-{loaded.scenario.name}")
    search = SearchRun(loaded, root, settings, run_pass, say)
    await search.run()
    return search


def search_exit_code(search: SearchRun) -> int:
    """0 with an answer; ``EXIT_VERDICT_FAIL`` when no user count met the SLO;
    ``EXIT_INTERRUPTED`` or ``EXIT_SERVER_LOST`` when the search did not finish."""
    if search.state == "interrupted":
        return EXIT_INTERRUPTED
    if search.state != "finished":
        return EXIT_SERVER_LOST
    return 0 if any(r.search.met is not None for r in search.rows) else EXIT_VERDICT_FAIL


class SearchRun:
    """One search: its rows, where it stands (``state``) and the pass in flight."""

    def __init__(
        self,
        loaded: LoadedScenario,
        root: Path,
        settings: SearchSpec,
        run_pass: RunStep,
        say: Callable[[str], None],
    ) -> None:
        self.loaded, self.root, self.settings = loaded, root, settings
        self.run_pass, self.say = run_pass, say
        slo = loaded.scenario.slo
        self.criterion = slo_text(slo.ttft_p95, slo.decode_tok_s_p50)
        self.tier_criteria = {name: tier_criterion(loaded, name) for name in slo.tiers}
        self.grid = settings.axis == "grid"
        self.at = f" at {loaded.scenario.users.count} users" if settings.axis == "length" else ""
        self.rows: list[Row] = []
        self.progress = Progress(self.rows, self.grid)
        self.started = time.time()
        self.state: State = "running"
        self.why = ""
        self.in_flight = ""
        """The pass under way, for capacity.json ("8 users, pass 1/2")."""
        self.passes = 0
        self.signals = 0
        self.task: asyncio.Future[Any] | None = None
        self.slot: tuple[int, int] | None = None
        """llama.cpp: (a slot's context, the most history it holds), once a pass saw it."""

    @property
    def halted(self) -> bool:
        return self.state != "running"

    def halt(self, state: State, why: str) -> None:
        if not self.halted:
            self.state, self.why = state, why

    def on_signal(self) -> None:
        self.signals += 1
        if self.signals == 1:
            self.halt("interrupted", "Ctrl-C or SIGTERM")
            self.say(
                "Ctrl-C: the search stops once the pass in flight is recorded; Ctrl-C again "
                "stops that pass now"
            )
        elif self.task is not None:
            self.task.cancel()

    async def run(self) -> None:
        give_back = SIGNALS.take(self.on_signal)
        sc = self.loaded.scenario
        self.say(f"capacity search: {sc.name}, SLO {self.criterion}; writing {self.root}")
        try:
            if await self._rows():
                self.state, self.why = "finished", ""
        except BaseException as e:
            stopped = isinstance(e, KeyboardInterrupt | asyncio.CancelledError)
            self.halt("interrupted" if stopped else "failed", (str(e) or type(e).__name__))
            raise
        finally:
            give_back()
            self.in_flight = ""
            with contextlib.suppress(OSError):  # a full disk: the error itself is what counts
                self.save()
        self.conclude()

    def document(self) -> dict[str, Any]:
        sc = self.loaded.scenario
        doc = document(
            self.rows,
            self.settings,
            self.criterion,
            self.started,
            self.at,
            sc.name,
            self.tier_criteria,
        )
        doc |= {"pid": os.getpid(), "host": socket.gethostname(), "in_flight": self.in_flight}
        return settle(doc, self.state, self.why)

    def save(self) -> None:
        if not self.rows:
            return
        doc = self.document()
        write_json(self.root / "capacity.json", doc)
        write_search_report(self.root, doc)

    async def _rows(self) -> bool:
        """Every row in turn; True when the search ran to its end, False when halted."""
        lengths: list[int | None] = (
            list(grid_lengths(self.loaded, self.settings)) if self.grid else [None]
        )
        if self.grid:
            shown = ", ".join(tokens(n) for n in lengths if n)
            self.say(f"capacity map: a users search at {shown} tokens of history")
        for length in lengths:
            if self.halted:
                return False
            search = self._row_search(length)
            if search is None:
                break
            later = search if self.rows else None  # a grid's later row
            self.rows.append(Row(search, length, tier_searches(self.loaded, self.settings, later)))
            if len(self.rows) == 1:
                self.say(self._estimate(search, lengths))
                self.save()
            await self._row(self.rows[-1])
            if search.stop is None or self.halted:  # halted in a tier's steps: not finished
                return False
            if self.grid:
                self.say(f"{tokens(length or 0)} tokens of history: {search.answer()}")
                for name in self.rows[-1].tiers:
                    self.say(row_tier_answer(self.rows[-1], name, self.tier_criteria[name]))
        return True

    def _estimate(self, search: Search, lengths: list[int | None]) -> str:
        def rounds(users: int, start_tokens: int | None) -> int | None:
            return step_rounds(self.loaded.scenario, self.settings, users, start_tokens)

        return estimate(self.loaded, self.settings, search, lengths, rounds).line()

    def _row_search(self, length: int | None) -> Search | None:
        """The row's search, or None (said why) when the grid tries no longer history."""
        settings = self.settings
        if self.slot is not None and length is not None and length > self.slot[1]:
            self.say(f"{tokens(length)} tokens of history: not tried ({slot_sentence(*self.slot)})")
            return None
        if not (self.grid and self.rows):
            return make_search(self.loaded, settings)
        prev = self.rows[-1].search  # a longer history holds no more users: start there
        if prev.met is None:
            self.say(
                f"{tokens(length or 0)} tokens of history: not tried (the SLO was missed at a "
                "shorter history with the fewest users)"
            )
            return None
        return Search(prev.met.value, settings.factor, settings.max_users, settings.width)

    async def _row(self, row: Row) -> None:
        """The row's search, then each SLO tier's from where the passes so far leave it
        (a tier whose bracket the main steps already narrowed runs no step of its own)."""
        await self._walk(row, row.search)
        for name, tier in row.tiers.items():
            if self.halted:
                return
            tier.maximum, tier.bound = min(tier.maximum, row.search.maximum), row.search.bound
            await self._walk(row, tier, f" for SLO tier {name}")

    async def _walk(self, row: Row, search: Search, why: str = "") -> None:
        """Run ``search``'s steps until it has its answer; each step is judged for the
        main SLO and every tier, and recorded in all of their searches."""
        main = row.search
        while not self.halted and (value := search.next_value()) is not None:
            if value in {s.value for s in search.steps}:
                break  # passes that contradict each other point back at a tried step
            users, start_tokens = self._point(row, value)
            at_step = step_scenario(self.loaded, self.settings, users, start_tokens)
            tiers = {name: Step(value, length=start_tokens or 0) for name in row.tiers}
            step = await self._step(row, Step(value, length=start_tokens or 0), at_step, tiers)
            if step is None:
                break
            main.steps.append(step)
            for name, tier_step in tiers.items():
                row.tiers[name].steps.append(tier_step)
            where = f" at {tokens(row.length or 0)} tokens" if self.grid else self.at
            self.say(
                f"step {len(main.steps)}: {main.fmt(value)}{where}{why} -> {step_text(step)}"
                + "".join(f"; {n}: {step_text(t, reasons=False)}" for n, t in tiers.items())
            )
            if step.slot_context:
                self.slot = (step.slot_context, slot_history(at_step, step.slot_context))
                if bound_by_slots(main, *self.slot):
                    self.say(f"search bounded: {main.bound}")
                    for tier in row.tiers.values():
                        tier.maximum, tier.bound = main.maximum, main.bound
            self.save()

    def _point(self, row: Row, value: int) -> tuple[int, int | None]:
        """(users, tokens of history) of the row's step at ``value``."""
        if self.settings.axis == "length":
            return self.loaded.scenario.users.count, value
        return value, row.length

    async def _step(
        self, row: Row, step: Step, at_step: LoadedScenario, tiers: dict[str, Step]
    ) -> Step | None:
        """Run the step's passes: ``repeat``, then more while the step (or a tier's, in
        ``tiers``) is UNDECIDED, up to ``passes_max``. It is judged only when every pass ran
        to its end; else it is INTERRUPTED or SERVER LOST with the figures of the passes it
        recorded (None: not one pass started, the server being gone)."""
        summaries: list[dict[str, Any]] = []
        statuses: dict[str, list[str]] = {"": [], **{name: [] for name in tiers}}
        spec = self.settings
        repeat, most, cut = spec.repeat, spec.passes_max, False
        for k in range(most):
            if self.halted or (k >= repeat and not self._undecided(step, tiers, statuses)):
                break
            line = self.progress.line(row, step.value, k, repeat if k < repeat else most, self.at)
            self.say(line)
            self.in_flight = f"{row.search.fmt(step.value)}, pass {k + 1}/{repeat}"
            outcome = await self._pass(at_step, line)
            if outcome is None:
                cut = True
                break
            step.run_dirs.append(str(Path(outcome.run_dir).relative_to(self.root)))
            summaries.append(outcome.summary)
            statuses[""].append(health := read_pass(step, outcome.summary))
            for name, t in tiers.items():
                statuses[name].append(read_tier(t, outcome.summary, name, health, step))
            if outcome.exit_reason == "interrupted":
                self.halt(
                    "interrupted", f"Ctrl-C, SIGTERM or q during the pass at {self.in_flight}"
                )
                cut = True
            elif lost := await server_gone(at_step.scenario, outcome.summary):
                self.halt("server lost", lost)
        self.in_flight = ""
        if not summaries and self.state == "server lost":
            return None
        self._undecided(step, tiers, statuses)
        for s in (step, *tiers.values()):
            if self.state == "server lost":
                s.status = "SERVER LOST"
            elif cut or len(summaries) < repeat:
                s.status = "INTERRUPTED"
        return step

    def _undecided(
        self, step: Step, tiers: dict[str, Step], statuses: dict[str, list[str]]
    ) -> bool:
        """Settle the step and its tiers' on their passes so far; True while one of them
        is UNDECIDED (another pass may decide it)."""
        spec = self.settings
        settle_step(step, statuses[""], spec.confidence, spec.passes_max)
        for name, t in tiers.items():
            settle_step(t, statuses[name], spec.confidence, spec.passes_max)
        return any(s.status == "UNDECIDED" for s in (step, *tiers.values()))

    async def _pass(self, at_step: LoadedScenario, line: str) -> Any:
        """One pass's outcome; None when it never ran to a summary (cancelled, or the
        server it was to load stopped answering)."""
        self.save()
        task = self.task = asyncio.ensure_future(self.run_pass(at_step, self.root, line))
        try:
            await asyncio.wait([task])
        finally:
            self.task = None
            if not task.done():
                task.cancel()
        if task.cancelled():
            self.halt("interrupted", f"a second Ctrl-C cancelled the pass at {self.in_flight}")
            return None
        error = task.exception()
        if isinstance(error, TargetError) and self.passes:
            self.halt("server lost", str(error))
            return None
        if error is not None:
            raise error
        self.passes += 1
        return task.result()

    def conclude(self) -> None:
        """The search's last lines: its answer, or how it ended and what was judged."""
        doc = self.document()
        if self.state != "finished":
            self.say(f"\n{doc['state_text']}")
            self.say(str(doc["answer_line"]))
        else:
            if self.grid:
                self.say("\n" + map_text(self.rows, self.criterion))
            self.say(f"\n{answer_line(self.rows, self.criterion, self.at)}")
            for name, tier in self.rows[0].tiers.items():  # a grid: every row's, as the SLO's
                crit = self.tier_criteria[name]
                line = tier_answer(name, tier, crit)
                self.say(tier_map_line(self.rows, name, crit) if self.grid else line)
            slots = next((s for r in self.rows for s in r.search.steps if s.slots), None)
            if slots is not None:  # llama.cpp: the slots bound every answer
                self.say(
                    f"llama.cpp serves {slots.slots} slots of {tokens(slots.slot_context)} "
                    "tokens: at most that many requests run at once (others wait), and no "
                    "conversation grows past a slot's context"
                )
            for r in self.rows if not self.grid else ():
                if (b := boundary(r.search)) is not None:
                    self.say(b.text(r.search.fmt))
            stops = dict.fromkeys(stop_text(r.search) for r in self.rows)
            self.say(f"stopped: {'; '.join(stops)}")
        self.say(
            f"search directory: {self.root}  (each step's runs: stress ls {self.root}; the "
            f"search: {self.root / 'capacity.html'})"
        )


async def server_gone(sc: Scenario, summary: dict[str, Any]) -> str:
    """'' while the pass's server still takes connections; else why it does not. Checked
    only after a pass whose requests failed to connect or lost their connection (and
    never for the simulator, which each pass starts anew)."""
    url = sc.target.url
    classes = (summary.get("overall") or {}).get("error_classes") or {}
    if url == "sim" or (summary and not LOST_ERRORS & set(classes)):
        return ""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        connect = asyncio.open_connection(parts.hostname, port)
        _, writer = await asyncio.wait_for(connect, sc.timeouts.connect)
    except (OSError, TimeoutError) as e:
        why = getattr(e, "strerror", None) or type(e).__name__
        return f"{parts.hostname}:{port} no longer takes connections ({why})"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return ""
