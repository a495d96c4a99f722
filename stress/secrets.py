"""API keys: read from the environment or a file the user names, and scrubbed everywhere.

A key is never taken from a scenario file (the loader refuses one). Once read, its value is
registered with the process-wide redactor, which every writer (run files, headless output,
error lines) passes text through, so a server that echoes the key, or an exception that
contains it, cannot leak it into a log, report, manifest or the screen.
"""

from __future__ import annotations

import base64
import html
import json
import os
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote, urlsplit, urlunsplit

from stress.errors import SecretError

MASK = "***"
MIN_SECRET_LEN = 8
"""Shorter keys are refused: a 3-character key cannot be scrubbed from output without
mangling ordinary text and numbers (and would be guessed anyway)."""


def _json_forms(text: str) -> set[str]:
    return {json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]}


def encoded_forms(secret: str) -> list[str]:
    """The ways a secret can appear in our output, longest first: raw, JSON-escaped (with
    and without ``ensure_ascii``; twice, for a server's JSON error body quoted inside a
    JSON record), URL-encoded and HTML-escaped."""
    once = _json_forms(secret)
    forms = {
        secret,
        *once,
        *(twice for form in once for twice in _json_forms(form)),
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        html.escape(secret),
        html.escape(secret, quote=False),
    }
    return sorted(forms, key=len, reverse=True)


class Redactor:
    def __init__(self) -> None:
        self._secrets: list[str] = []
        self._bsecrets: list[bytes] = []

    def add(self, secret: str) -> None:
        """Scrub ``secret`` (in every encoded form) from everything written from now on.

        Secrets shorter than ``MIN_SECRET_LEN`` are ignored here: callers refuse them
        first (``load_api_key``, the scenario's URL check) with a line naming the source.
        """
        if len(secret) < MIN_SECRET_LEN:
            return
        for form in encoded_forms(secret):
            if form not in self._secrets:
                self._secrets.append(form)
        self._secrets.sort(key=len, reverse=True)
        self._bsecrets = [s.encode() for s in self._secrets]

    def text(self, s: str) -> str:
        for secret in self._secrets:
            if secret in s:
                s = s.replace(secret, MASK)
        return s

    def bytes(self, b: bytes) -> bytes:
        for secret in self._bsecrets:
            if secret in b:
                b = b.replace(secret, MASK.encode())
        return b

    @property
    def active(self) -> bool:
        return bool(self._secrets)


REDACTOR = Redactor()


def load_api_key(
    env_name: str | None, key_file: Path | None, *, required: bool = True
) -> str | None:
    """The key, or None when none was configured. Raises ``SecretError`` (no key in text).

    With ``required=False`` an unset variable means "send no key" (the shipped scenarios
    name STRESS_API_KEY for servers that need one; most local servers do not); a server
    that then refuses the request says so in one line.
    """
    key: str | None = None
    source = ""
    if env_name:
        source = f"environment variable {env_name} (target.api_key_env)"
        key = os.environ.get(env_name)
        if not key:
            if not required:
                return None
            raise SecretError(
                f"target.api_key_env names {env_name}, but that environment variable is "
                f"empty or unset -- fix: export {env_name}=... before running"
            )
    elif key_file is not None:
        source = f"API key file {key_file} (target.api_key_file)"
        try:
            if key_file.is_dir():
                raise SecretError(
                    f"the API key file {key_file} is a folder -- fix: point "
                    "target.api_key_file at the file that holds the key"
                )
            key = key_file.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise SecretError(
                f"cannot read the API key file {key_file} ({e.strerror}) -- fix: check the path "
                "and that you may read it"
            ) from None
        except UnicodeDecodeError:
            raise SecretError(
                f"the API key file {key_file} is not UTF-8 text -- fix: put the key in it as text"
            ) from None
        if not key:
            raise SecretError(f"the API key file {key_file} is empty -- fix: put the key in it")
    if key:
        check_key(key, source)
        REDACTOR.add(key)
    return key


def check_key(key: str, source: str) -> None:
    """Refuse keys we could not send or could not scrub; the message names ``source``,
    never the key."""
    if len(key) < MIN_SECRET_LEN:
        raise SecretError(
            f"the key in {source} is shorter than {MIN_SECRET_LEN} characters, too short to "
            "scrub reliably from logs and reports -- fix: give the server a longer key"
        )
    if any(c in key for c in "\r\n\0"):
        raise SecretError(
            f"the key in {source} contains a line break or NUL, which cannot be sent in an "
            "HTTP header -- fix: remove it (e.g. the trailing newline of `echo`)"
        )


def split_url_credentials(url: str) -> tuple[str, str | None]:
    """``http://user:pw@host/x`` -> (``http://host/x``, ``"Basic ..."``), the credentials
    registered with the redactor in every form they may take. A URL without credentials
    comes back unchanged with ``None``. Raises ``ValueError`` (no secret in its text) when
    the credentials are too short to scrub."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    plain = f"{unquote(user)}:{unquote(password)}"
    if len(plain) < MIN_SECRET_LEN:
        raise ValueError(
            f"the user:password in the URL is shorter than {MIN_SECRET_LEN} characters, too "
            "short to scrub from logs -- fix: use a longer password"
        )
    token = base64.b64encode(plain.encode()).decode()
    for secret in (userinfo, plain, token, unquote(password), password):
        REDACTOR.add(secret)
    return urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment)), (
        f"Basic {token}"
    )


def safe_url(url: str) -> str:
    """The URL without user:password and without query parameters that carry secrets."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    query = "&".join(
        q
        for q in parts.query.split("&")
        if q and q.split("=", 1)[0].lower() not in {"key", "api_key", "token", "access_token"}
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
