"""Capture a real server's payloads as test fixtures (stdlib only).

    python scripts/realserver/capture_payloads.py URL OUT_DIR [--model NAME] [--note TEXT]

Writes, byte for byte as served: ``metrics.txt`` (/metrics), ``props.json`` (/props),
``slots.json`` (/slots), ``v1_models.json``, ``health.txt``, ``version.json`` (those that
answer 200), and ``sse_chat_stream.txt``: the raw SSE body of a streamed chat completion with
``stream_options.include_usage``, sent twice with the same long prompt so that the second
reply reports cached tokens. ``capture.json`` records the URL, time, status of each endpoint
and the note (versions, flags).
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from pathlib import Path

ENDPOINTS = {
    "/metrics": "metrics.txt",
    "/props": "props.json",
    "/slots": "slots.json",
    "/v1/models": "v1_models.json",
    "/health": "health.txt",
    "/version": "version.json",
}

PROMPT = (
    "Below is a list of maintenance notes for a small web service. Read them and answer.\n"
    + "\n".join(
        f"Note {i}: the cache layer was restarted after the nightly job {i} finished, and the "
        f"operator checked that the queue length went back under {10 * i} items."
        for i in range(1, 25)
    )
    + "\nQuestion: in one sentence, what do these notes have in common?"
)


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return 0, str(e).encode()


def chat_stream(url: str, model: str, max_tokens: int) -> bytes:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        data: bytes = resp.read()
        return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("url")
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default=None, help="model id (default: first of /v1/models)")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    url = args.url.rstrip("/")
    args.out.mkdir(parents=True, exist_ok=True)
    status: dict[str, int] = {}
    model = args.model
    chat_first = chat_stream(url, model or "x", 4) if model else b""
    for ep, name in ENDPOINTS.items():
        code, body = get(url + ep)
        status[ep] = code
        if code == 200:
            (args.out / name).write_bytes(body)
            if ep == "/v1/models" and model is None:
                model = json.loads(body)["data"][0]["id"]
    assert model is not None, "no model id: pass --model"
    if not chat_first:
        chat_stream(url, model, 4)  # warm the prefix so the recorded stream shows a hit
    sse = chat_stream(url, model, args.max_tokens)
    (args.out / "sse_chat_stream.txt").write_bytes(sse)
    _, metrics_after = get(url + "/metrics")
    if status.get("/metrics") == 200:
        (args.out / "metrics_after_chat.txt").write_bytes(metrics_after)
    (args.out / "capture.json").write_text(
        json.dumps(
            {
                "url": url,
                "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "model": model,
                "status": status,
                "note": args.note,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"captured {sorted(p.name for p in args.out.iterdir())} into {args.out}")


if __name__ == "__main__":
    main()
