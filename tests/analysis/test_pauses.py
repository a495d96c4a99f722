"""Server-wide pauses from tokens.bin (issue 35): planted pauses are found and totalled
exactly, silences that do not line up across streams are not pauses, and the causes,
summary.json and the report say so (llama.cpp: the host-RAM prompt cache, --cache-ram 0)."""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from stress.analysis import itl as itl_mod
from stress.analysis import pauses as pauses_mod
from stress.analysis.analyze import analyze
from stress.analysis.causes import Cause, name_causes
from stress.analysis.itl import server_pauses
from stress.analysis.pauses import Pause, shared_silences
from stress.analysis.rundata import RunData, load_run
from stress.report.build import make_report
from stress.report.render_md import render_md
from stress.report.summary import build_summary
from stress.store.token_times import FILE_NAME, MAGIC, encode_frame
from tests.report.synth import manifest, request, write_run

STEP = 0.02
"""Decode: a chunk every 20 ms (ITL p50 0.02 s: the threshold is the 1 s floor)."""
PAUSES = ((10.0, 12.5), (30.0, 32.5))
"""Planted pauses: nothing arrives on any stream inside them."""


def chunks(
    first: float, last: float, silent: Sequence[tuple[float, float]] = PAUSES, step: float = STEP
) -> Any:
    """Chunk times every ``STEP`` from ``first`` to ``last``, none strictly inside a
    silence, one at each end of a silence the stream runs across (a batched server
    delivers its last step before and its first step after to every stream)."""
    t = np.arange(first, last, step)
    keep = np.ones(t.size, dtype=bool)
    ends: list[float] = [first, last]
    for a, b in silent:
        keep &= ~((t > a) & (t < b))
        if first < a and b < last:
            ends += [a, b]
    return np.unique(np.concatenate([t[keep], ends]))


Stream = tuple[int, float, float, float]
"""(user, t_start, ttft, last chunk) of one request."""


def write_paused_run(
    root: Path,
    streams: Sequence[Stream],
    *,
    silent: Sequence[tuple[float, float]] = PAUSES,
    prompt_ms: float | None = None,
    probe: dict[str, Any] | None = None,
    slo: dict[str, float] | None = None,
    step: float = STEP,
) -> Path:
    """A run directory whose tokens.bin holds each stream's chunks (``chunks``)."""
    man = manifest(users=len({s[0] for s in streams}), slo=slo)
    if probe is not None:
        man["probe"] = probe
    reqs: list[dict[str, Any]] = []
    frames = []
    for i, (user, start, ttft, last) in enumerate(streams):
        times = chunks(start + ttft, last, silent, step)
        r = request(user, i + 1, start, ttft=ttft, e2e=last - start)
        r["request_id"] = f"p-{i}"
        if prompt_ms is not None:
            r["server_timings"] = {"prompt_ms": prompt_ms, "prompt_n": 1000, "cache_n": 0}
        reqs.append(r)
        frames.append(encode_frame(f"p-{i}", ttft, array("d", times.tolist())))
    d = write_run(root, man, reqs)
    (d / FILE_NAME).write_bytes(MAGIC + b"".join(frames))
    return d


RUNNING: list[Stream] = [(u, 0.0, 0.5, 50.0) for u in range(4)]
"""Four streams decoding across both pauses."""
WAITING: list[Stream] = [(4 + k, 9.5, 3.0, 20.0) for k in range(5)] + [
    (9 + k, 29.5, 3.0, 40.0) for k in range(5)
]
"""Ten requests whose first token waited across a pause (2.5 s of a 3 s TTFT)."""
OUTSIDE: list[Stream] = [(14, 0.0, 0.5, 9.0), (15, 13.0, 0.5, 29.0)]
"""Two streams that never ran across a pause: they are not counted as frozen."""


def paused(tmp_path: Path, **kw: Any) -> RunData:
    return load_run(write_paused_run(tmp_path, RUNNING + WAITING + OUTSIDE, **kw))


def test_planted_pauses_are_found_and_totalled_exactly(tmp_path: Path) -> None:
    p = server_pauses(paused(tmp_path))
    assert p.available and p.itl_p50_s == pytest.approx(STEP, rel=0.01)
    assert p.threshold_s == 1.0
    assert p.count == 2
    for got, (a, b) in zip(p.pauses, PAUSES, strict=True):
        assert (got.start, got.end) == (pytest.approx(a, abs=1e-4), pytest.approx(b, abs=1e-4))
        assert got.streams == 4  # the four running; the waiting and the outside ones not
    assert p.total_s == pytest.approx(5.0, abs=1e-3)
    assert p.longest_s == pytest.approx(2.5, abs=1e-3)
    assert p.share == pytest.approx(5.0 / 100.0, abs=1e-4)
    running = 4 * 49.5 + 10 * 7.5 + 9.0 - 0.5 + 29.0 - 13.5
    assert p.stream_s == pytest.approx(running, abs=1e-3)
    assert p.decode_share == pytest.approx(2 * 2.5 * 4 / running, abs=1e-4)


def test_silences_that_do_not_line_up_are_not_pauses(tmp_path: Path) -> None:
    """Three streams each silent 2.5 s, overlapping two by two but never all at once for
    over a second: each request's own ITL shows a long gap, the run has no pause."""
    staggered = [(10.0, 12.5), (11.0, 13.5), (12.0, 14.5)]
    streams: list[Stream] = [(u, 0.0, 0.5, 30.0) for u in range(3)]
    man = manifest(users=3)
    reqs, frames = [], []
    for i, (user, start, ttft, last) in enumerate(streams):
        times = chunks(start + ttft, last, [staggered[i]])
        assert np.diff(times).max() == pytest.approx(2.5, abs=1e-6)
        r = request(user, 1, start, ttft=ttft, e2e=last - start)
        r["request_id"] = f"s-{i}"
        reqs.append(r)
        frames.append(encode_frame(f"s-{i}", ttft, array("d", times.tolist())))
    d = write_run(tmp_path, man, reqs)
    (d / FILE_NAME).write_bytes(MAGIC + b"".join(frames))
    p = server_pauses(load_run(d))
    assert p.available and p.count == 0 and p.total_s == 0.0 and p.longest_s is None
    assert "server_pause" not in {c.code for c in name_causes(load_run(d))}


def test_one_stream_alone_and_short_shared_silences_are_not_pauses() -> None:
    spans = [(0.0, 50.0), (0.0, 50.0)]
    # both silent together 0.9 s only (a gap each of 2 s, offset by 1.1 s)
    assert shared_silences(spans, [(10.0, 12.0), (11.1, 13.1)], 1.0) == []
    # one stream running alone through a 5 s silence: slow, not a server-wide pause
    assert shared_silences([(0.0, 50.0)], [(10.0, 15.0)], 1.0) == []
    # the same silence on both: one pause, both streams frozen
    assert shared_silences(spans, [(10.0, 15.0), (10.0, 15.0)], 1.0) == [Pause(10.0, 15.0, 2)]
    # the bar is the threshold: a 1.5 s shared silence under a 2 s threshold is not one
    assert shared_silences(spans, [(10.0, 11.5), (10.0, 11.5)], 2.0) == []


def test_the_threshold_follows_a_slow_servers_itl(tmp_path: Path) -> None:
    """ITL p50 0.2 s: the bar is 2 s, so a shared 1.5 s silence is that server's pace."""
    silent = [(10.0, 11.5), (30.0, 32.5)]
    run = load_run(write_paused_run(tmp_path, RUNNING, silent=silent, step=0.2))
    p = server_pauses(run)
    assert p.threshold_s == pytest.approx(2.0, rel=0.01)
    assert [(round(x.start, 3), round(x.end, 3)) for x in p.pauses] == [(30.0, 32.5)]


def test_memory_holds_only_long_gaps(tmp_path: Path) -> None:
    """The pass over tokens.bin keeps each stream's span and its gaps over 1 s, not its
    chunks: 14 streams of up to 2,500 chunks leave 10 gaps (4 streams x 2 pauses, and the
    two outside streams none) plus the waiting requests' none."""
    run = paused(tmp_path)
    _, one, report = itl_mod._pass(run)
    assert report.frames == 16
    assert len(one.streams.spans) == 16 and len(one.streams.gaps) == 8
    assert not one.batches._pending  # the ITL batch was added and let go
    assert not one.diverged  # the pause bar's gaps are ITL's own


def test_tokens_bin_is_read_once_for_itl_and_the_pauses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One analysis reads the file once: the causes, the summary and the report ask for
    the pauses and the token timing, and the pause bar is token timing's own ITL p50."""
    reads: list[Path] = []
    real = itl_mod.read_frames

    def counted(path: Path, report: Any = None) -> Any:
        reads.append(path)
        return real(path, report)

    monkeypatch.setattr(itl_mod, "read_frames", counted)
    monkeypatch.setattr(pauses_mod, "read_frames", counted)
    a = analyze(write_paused_run(tmp_path, RUNNING + WAITING + OUTSIDE))
    assert len(reads) == 1
    assert a.pauses is not None and a.pauses.count == 2
    assert a.pauses.itl_p50_s == a.tokens.overall.itl.percentile(50)
    assert server_pauses(a.run) is a.pauses and itl_mod.token_timing(a.run) is a.tokens
    assert len(reads) == 1


def test_damaged_and_repeated_frames_keep_the_pause_bar_as_it_was(tmp_path: Path) -> None:
    """ITL leaves out a damaged frame's bad values, the pauses the whole frame; ITL counts
    a request's first frame, the pauses its first with chunks. Where that makes the two
    populations differ, the bar is read again from the pauses' own: 4 streams at 0.2 s
    (bar 2 s, the 1.5 s silence is no pause) beside 6 requests of 400 gaps of 10 ms, 2 with
    a NaN TTFT, 2 with a negative gap (ITL: p50 10 ms) and 2 whose first frame is empty."""
    d = write_paused_run(tmp_path, RUNNING, silent=[(10.0, 11.5), (30.0, 32.5)], step=0.2)
    lines, frames = [], []
    for k in range(6):
        r = request(20 + k, 1, 1.0, ttft=0.5, e2e=5.0)
        r["request_id"] = rid = f"bad-{k}"
        lines.append(orjson.dumps(r) + b"\n")
        f = bytearray(encode_frame(rid, 0.5, array("d", (1.5 + 0.01 * np.arange(400)).tolist())))
        head = 8 + len(rid)
        if k < 2:
            struct.pack_into("<f", f, head, float("nan"))
        elif k < 4:
            struct.pack_into("<f", f, head + 4 * 7, -0.01)
        else:
            f[:0] = encode_frame(rid, 0.5, array("d"))
        frames.append(bytes(f))
    with (d / "requests.jsonl").open("ab") as out:
        out.writelines(lines)
    with (d / FILE_NAME).open("ab") as out:
        out.writelines(frames)
    run = load_run(d)
    assert itl_mod._pass(run)[1].diverged
    t = itl_mod.token_timing(run)
    assert t.overall.itl.percentile(50) == pytest.approx(0.01, rel=0.01)
    p = server_pauses(run)
    assert p.itl_p50_s == pytest.approx(0.2, rel=0.01)
    assert p.threshold_s == pytest.approx(2.0, rel=0.01)
    assert [(round(x.start, 3), round(x.end, 3)) for x in p.pauses] == [(30.0, 32.5)]


def test_a_run_without_tokens_bin_has_no_pauses(tmp_path: Path) -> None:
    d = write_run(tmp_path, manifest(), [request(0, 1, 0.0)])
    p = server_pauses(load_run(d))
    assert not p.available and p.count == 0 and p.share is None


# --- the cause ------------------------------------------------------------------------


def llamacpp(slots: int) -> dict[str, Any]:
    return {"kind": "llamacpp", "slots": slots, "slot_n_ctx": [8192] * slots}


def by_code(causes: list[Cause]) -> dict[str, Cause]:
    return {c.code: c for c in causes}


def test_llamacpp_pauses_explain_the_ttft_miss_not_slot_waiting(tmp_path: Path) -> None:
    """16 users on 4 slots: today's code reads the 2.8 s before prefill as waiting for a
    free slot; 2.5 s of it is the server-wide pause every stream froze in."""
    run = paused(tmp_path, prompt_ms=200.0, probe=llamacpp(4), slo={"ttft_p95": 2.0})
    causes = name_causes(run)
    found = by_code(causes)
    assert "queueing" not in found  # the 0.3 s left is not half of a 3 s TTFT
    pause = causes[0]
    assert pause.code == "server_pause" and not pause.minor
    assert pause.weight == pytest.approx(25.0 / 30.0, abs=1e-4)
    assert pause.text.startswith(
        "2 server-wide pauses, 5 s in all (5.0% of the run), the longest 2.5 s: every "
        "running stream (4 at a time) went silent together for over 1 s; 4 of 16 requests "
        "froze mid-stream"
    )
    assert (
        "10 of the 10 requests over the 2 s TTFT limit waited for their first token across "
        "a pause (25 s of their 30 s of TTFT, 83.3%)" in pause.text
    )
    assert "First at 10 s, 30 s into the run" in pause.text
    assert "host-RAM prompt cache" in pause.text and "try --cache-ram 0" in pause.text


def test_slot_waiting_beyond_the_pause_is_still_named_without_it(tmp_path: Path) -> None:
    """First tokens 6 s after the send, 2.5 s of it paused: 3.3 s of real waiting for a
    slot remains, and the text says the pauses were taken out (5.8 s before)."""
    waiting = [(4 + k, 6.5, 6.0, 20.0) for k in range(5)] + [
        (9 + k, 26.5, 6.0, 40.0) for k in range(5)
    ]
    run = load_run(
        write_paused_run(
            tmp_path,
            RUNNING + waiting + OUTSIDE,
            prompt_ms=200.0,
            probe=llamacpp(4),
            slo={"ttft_p95": 2.0},
        )
    )
    wait = by_code(name_causes(run))["queueing"]
    assert wait.text.startswith(
        "Median TTFT 6 s is 3.3 s of waiting before prefill started (server-wide pauses "
        "apart: 25 s of these requests' TTFT fell in them, named as their own cause)"
    )
    assert wait.weight == pytest.approx(3.3 / 6.0, abs=1e-4)


def test_without_a_miss_the_weight_is_the_frozen_share_and_vllm_gets_no_guess(
    tmp_path: Path,
) -> None:
    run = paused(tmp_path)
    run.files.collectors["server"] = {"dialect": "vllm"}
    pause = by_code(name_causes(run))["server_pause"]
    p = server_pauses(run)
    assert p.decode_share is not None and pause.weight == pytest.approx(p.decode_share)
    assert "--cache-ram" not in pause.text
    assert pause.text.endswith(
        "A server-wide pause: stress knows no usual cause for it on vLLM; its log at those "
        "times may say."
    )


# --- summary.json and the report ------------------------------------------------------


def test_summary_and_report_show_the_pauses_next_to_itl(tmp_path: Path) -> None:
    d = write_paused_run(tmp_path, RUNNING + WAITING + OUTSIDE)
    s = build_summary(d)["server_pauses"]
    assert s["count"] == 2 and s["threshold_s"] == 1.0
    assert s["total_s"] == pytest.approx(5.0, abs=1e-3)
    assert s["longest_s"] == pytest.approx(2.5, abs=1e-3)
    assert s["share_of_run"] == pytest.approx(0.05, abs=1e-4)
    assert s["streams_frozen"] == {"min": 4, "max": 4, "mean": 4.0}
    assert [round(x["start_s"], 3) for x in s["pauses"]] == [10.0, 30.0]
    md = render_md(make_report(d, charts=False))
    itl = md[md.index("Inter-token latency") :]
    assert "2 server-wide pauses, 5 s in all (5.0% of the run)" in itl
    assert "Server-wide pauses" in itl and "The longest pauses" in itl


def test_a_run_without_pauses_says_so_in_the_report(tmp_path: Path) -> None:
    d = write_paused_run(tmp_path, RUNNING, silent=[])
    assert build_summary(d)["server_pauses"]["count"] == 0
    md = render_md(make_report(d, charts=False))
    assert "No server-wide pause: at no moment did every running stream" in md
