"""API keys: read from the environment or a file the user names, and scrubbed everywhere.

A key is never taken from a scenario file (the loader refuses one). Once read, its value is
registered with the process-wide redactor, which every writer (run files, headless output,
error lines) passes text through, so a server that echoes the key, or an exception that
contains it, cannot leak it into a log, report, manifest or the screen.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import html
import json
import os
import re
import stat
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote, urlsplit, urlunsplit

import orjson

from stress.core.errors import SecretError

MASK = "***"
MIN_SECRET_LEN = 8
"""Shorter keys are refused: a 3-character key cannot be scrubbed from output without
mangling ordinary text and numbers (and would be guessed anyway)."""
MAX_KEY_FILE_BYTES = 64 << 10
"""A key file holds one key: a JWT is a few KiB, and no server takes a header of 64 KiB."""
_KEY_FIELD = "target.api_key_file"
_KEY_FILE_FIX = f"fix: point {_KEY_FIELD} at a regular file that holds only the key"
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+"(\s*:)?', re.DOTALL)
"""A JSON string, and the colon after it when it is an object key. Every string is
matched, keys too, so the scan never starts inside one."""


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
        self._strong: list[str] = []
        """The forms of secrets unlike ordinary words: masked in JSON object keys too."""

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
        if _unlike_text(secret):
            self._strong = sorted({*self._strong, *encoded_forms(secret)}, key=len, reverse=True)
        # written inside a JSON string, any form may be escaped once more (an HTML-escaped
        # key in an error message keeps its backslashes doubled)
        raw = {b for s in self._secrets for b in (s, *_json_forms(s))}
        self._bsecrets = [b.encode() for b in sorted(raw, key=len, reverse=True)]

    def text(self, s: str) -> str:
        return _masked(s, self._secrets)

    def bytes(self, b: bytes) -> bytes:
        for secret in self._bsecrets:
            if secret in b:
                b = b.replace(secret, MASK.encode())
        return b

    def found(self, b: builtins.bytes) -> bool:
        """Whether any form of a secret occurs in ``b`` (the cheap test before a scrub)."""
        return any(secret in b for secret in self._bsecrets)

    def json(self, doc: builtins.bytes) -> builtins.bytes:
        """Serialized JSON (one document or JSON Lines) with the secrets masked in its
        strings: numbers, whitespace and punctuation are never touched, so the output
        parses to the same structure whatever the secret is. Object keys are masked only
        for secrets unlike ordinary text (a server that echoes the key as a field name);
        a URL password that is an ordinary word, ``requests``, would otherwise rename the
        summary's fields."""
        if not self.found(doc):
            return doc
        return _JSON_STRING.sub(self._json_value, doc)

    def _json_value(self, m: re.Match[builtins.bytes]) -> builtins.bytes:
        raw = m.group(0)
        if not self.found(raw):
            return raw
        colon = m.group(1)
        string = raw if colon is None else raw[: len(raw) - len(colon)]
        try:
            value = orjson.loads(string)
        except orjson.JSONDecodeError:  # not from orjson: mask the bytes as they stand
            return self.bytes(raw) if colon is None else raw
        masked = _masked(value, self._secrets if colon is None else self._strong)
        return raw if masked == value else orjson.dumps(masked) + (colon or b"")

    @property
    def active(self) -> bool:
        return bool(self._secrets)


def _masked(s: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret in s:
            s = s.replace(secret, MASK)
    return s


def _unlike_text(secret: str) -> bool:
    """Whether ``secret`` cannot be an ordinary word, number or run of spaces: the rule
    ``check_key`` holds every API key to (URL passwords are not held to it)."""
    return secret.strip() == secret and not (secret.replace(" ", "").isalpha() or secret.isdigit())


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
        source = f"API key file {key_file} ({_KEY_FIELD})"
        key = read_key_file(key_file)
    if key:
        check_key(key, source)
        REDACTOR.add(key)
    return key


def key_file_problem(path: Path) -> str | None:
    """What keeps ``path`` from being a key file (a folder, a device, a FIFO, too large,
    missing), from its ``stat`` alone: opening a FIFO would block until a writer comes,
    and ``/dev/zero`` would be read forever. None when it is a readable regular file."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder"
    if not stat.S_ISREG(st.st_mode):
        return f"is not a regular file (a {_file_kind(st.st_mode)})"
    if st.st_size > MAX_KEY_FILE_BYTES:
        return f"is {st.st_size:,} bytes; a key file holds at most {MAX_KEY_FILE_BYTES:,}"
    if not os.access(path, os.R_OK):
        return "is not readable"
    return None


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
    )
    return next((name for test, name in kinds if test(mode)), "special file")


def read_key_file(path: Path) -> str:
    """The key in ``path``, stripped; ``SecretError`` naming the file, the field and the
    fix. The file is checked before it is opened, opened without blocking (it may have
    been swapped for a FIFO since) and read to at most ``MAX_KEY_FILE_BYTES``."""
    where = f"the API key file {path} ({_KEY_FIELD})"
    problem = key_file_problem(path)
    data = b""
    if problem is None:
        try:
            data = _read_bounded(path)
        except OSError as e:
            problem = f"cannot be read ({e.strerror or e})"
        except ValueError as e:
            problem = str(e)
    if problem is not None:
        raise SecretError(f"{where} {problem} -- {_KEY_FILE_FIX}")
    try:
        key = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise SecretError(f"{where} is not UTF-8 text -- fix: put the key in it as text") from None
    if not key:
        raise SecretError(f"{where} is empty -- fix: put the key in it")
    return key


def _read_bounded(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 16):
            size += len(chunk)
            if size > MAX_KEY_FILE_BYTES:
                raise ValueError(f"holds more than {MAX_KEY_FILE_BYTES:,} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


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
    if key.strip() != key:
        raise SecretError(
            f"the key in {source} starts or ends with a space or tab, which servers strip "
            "from a header -- fix: remove the spaces around the key"
        )
    if key.replace(" ", "").isalpha() or key.isdigit():
        raise SecretError(
            f"the key in {source} is only letters or only digits, like ordinary words and "
            "numbers: masking it would rewrite them in every log and report -- fix: give "
            "the server a key that mixes letters and digits (e.g. `openssl rand -hex 16`)"
        )


def redact_auth_header(value: str) -> None:
    """Register the secrets of an ``Authorization`` header as ``load_api_key`` and
    ``split_url_credentials`` register them: a worker process gets the header, not the
    key, and must scrub what it sends its parent as the parent scrubs what it writes."""
    scheme, _, token = value.partition(" ")
    token = token.strip()
    REDACTOR.add(token)
    if scheme.lower() == "basic":
        try:
            plain = base64.b64decode(token, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return
        _, _, password = plain.partition(":")
        for secret in (plain, password, quote(password, safe="")):
            REDACTOR.add(secret)


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
