"""API keys: read from the environment or a file the user names, and scrubbed everywhere.

A key is never taken from a scenario file (the loader refuses one). Once read, its value is
registered with the process-wide redactor, which every writer (run files, headless output,
error lines) passes text through, so a server that echoes the key, or an exception that
contains it, cannot leak it into a log, report, manifest or the screen.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from stress.errors import SecretError

MASK = "***"


class Redactor:
    def __init__(self) -> None:
        self._secrets: list[str] = []
        self._bsecrets: list[bytes] = []

    def add(self, secret: str) -> None:
        if len(secret) >= 4 and secret not in self._secrets:
            self._secrets.append(secret)
            self._bsecrets.append(secret.encode())

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
    if env_name:
        key = os.environ.get(env_name)
        if not key:
            if not required:
                return None
            raise SecretError(
                f"target.api_key_env names {env_name}, but that environment variable is "
                f"empty or unset -- fix: export {env_name}=... before running"
            )
    elif key_file is not None:
        try:
            key = key_file.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise SecretError(
                f"cannot read the API key file {key_file} ({e.strerror}) -- fix: check the path"
            ) from None
        if not key:
            raise SecretError(f"the API key file {key_file} is empty -- fix: put the key in it")
    if key:
        REDACTOR.add(key)
    return key


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
