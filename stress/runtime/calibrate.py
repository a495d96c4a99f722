"""Paste budgets in the server's own tokens.

Budgets in a scenario are meant in the tokens the server counts. Where the server exposes
a tokenize endpoint (vLLM ``/tokenize``, SGLang ``/v1/tokenize``, llama.cpp ``/tokenize``)
we count a sample of the corpus both ways once and scale the local budgets by the ratio.
Otherwise the local tiktoken count stands, and the manifest says which was used.
"""

from __future__ import annotations

from typing import Any

from stress.net.fetch import Fetcher, FetchError


async def server_token_count(
    session: Fetcher, base_url: str, headers: dict[str, str], model: str, text: str
) -> tuple[int, str] | None:
    """(count, endpoint) from the first tokenize endpoint that answers, else None."""
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False}),
        ("/v1/tokenize", {"model": model, "prompt": text, "add_special_tokens": False}),
        ("/tokenize", {"content": text, "add_special": False}),
    ]
    for path, body in attempts:
        try:
            # never follows a redirect: it would carry the key (and the sample) elsewhere
            resp = await session.request("POST", base_url + path, headers, 10.0, body)
            if resp.status != 200:
                continue
            obj = resp.json()
        except (FetchError, ValueError):
            continue
        if isinstance(obj, dict):
            count = obj.get("count")
            if not isinstance(count, int) and isinstance(obj.get("tokens"), list):
                count = len(obj["tokens"])
            if isinstance(count, int) and count > 0:
                return count, path
    return None
