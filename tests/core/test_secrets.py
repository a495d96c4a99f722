"""Keys come from the environment or a named file and are scrubbed from everything."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.core.errors import SecretError
from stress.core.secrets import Redactor, load_api_key, safe_url


def test_key_from_env_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K1", "sk-from-env-123456")
    assert load_api_key("K1", None) == "sk-from-env-123456"
    f = tmp_path / "key"
    f.write_text("sk-from-file-98765\n")
    assert load_api_key(None, f) == "sk-from-file-98765"
    assert load_api_key(None, None) is None


def test_missing_key_errors_never_contain_a_key(tmp_path: Path) -> None:
    with pytest.raises(SecretError, match="UNSET_VAR_X"):
        load_api_key("UNSET_VAR_X", None)
    with pytest.raises(SecretError, match="cannot be read"):
        load_api_key(None, tmp_path / "nope")


def test_redactor_text_and_bytes() -> None:
    r = Redactor()
    r.add("sk-secret-value")
    assert r.text("bad key sk-secret-value!") == "bad key ***!"
    assert r.bytes(b'{"e": "sk-secret-value"}') == b'{"e": "***"}'


def test_safe_url_strips_credentials_and_key_params() -> None:
    assert safe_url("http://user:pw@host:8000/v1?api_key=abc&x=1") == "http://host:8000/v1?x=1"


WEIRD = 'sk-"quoted"\\back\tslash-7c1e'


def test_redactor_catches_escaped_and_encoded_forms() -> None:
    import html
    import json
    from urllib.parse import quote, quote_plus

    r = Redactor()
    r.add(WEIRD)
    forms = [
        WEIRD,
        json.dumps(WEIRD)[1:-1],
        json.dumps(json.dumps(WEIRD)[1:-1])[1:-1],  # a JSON error body quoted in a JSON record
        quote(WEIRD, safe=""),
        quote_plus(WEIRD),
        html.escape(WEIRD),
    ]
    for form in forms:
        assert r.text(f"x {form} y") == "x *** y", form
        assert r.bytes(f'{{"e": "{form}"}}'.encode()) == b'{"e": "***"}', form


@pytest.mark.parametrize("key", ["abc", "1234567"])
def test_short_keys_are_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    monkeypatch.setenv("SHORT_KEY_VAR", key)
    with pytest.raises(SecretError) as e:
        load_api_key("SHORT_KEY_VAR", None)
    assert "SHORT_KEY_VAR" in str(e.value) and "shorter than 8" in str(e.value)
    assert key not in str(e.value) and " -- fix: " in str(e.value)


def test_key_with_a_line_break_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NL_KEY_VAR", "sk-abcdef\nghijkl")
    with pytest.raises(SecretError, match=r"NL_KEY_VAR.*line break"):
        load_api_key("NL_KEY_VAR", None)
    with pytest.raises(SecretError, match="is a folder"):
        load_api_key(None, tmp_path)


def test_url_credentials_become_a_basic_header() -> None:
    from stress.core.secrets import REDACTOR, split_url_credentials

    assert split_url_credentials("http://h:1/x") == ("http://h:1/x", None)
    url, auth = split_url_credentials("https://alice:s3cret-pw%40x@h:8443/p")
    assert url == "https://h:8443/p" and auth is not None and auth.startswith("Basic ")
    assert REDACTOR.text(f"{auth} alice:s3cret-pw@x s3cret-pw@x") == "Basic *** *** ***"
    with pytest.raises(ValueError, match="shorter than 8") as e:
        split_url_credentials("http://a:b@h")
    assert "a:b" not in str(e.value)


# --- the scrubber on serialized JSON, key files, weak keys, a worker's header ------------


@pytest.mark.parametrize("weak", ["requests", " " * 8])
def test_json_scrub_masks_values_only_and_keeps_the_structure(weak: str) -> None:
    """A secret that is also ordinary text renamed ``requests`` keys and replaced the
    indentation of an indented document: only string values are masked now."""
    import orjson

    r = Redactor()
    r.add(weak)
    doc = {"requests": 3, "overall": {"requests": {"n": 1}}, "note": f"a{weak}b", "n": [1]}
    for data in (orjson.dumps(doc, option=orjson.OPT_INDENT_2), orjson.dumps(doc)):
        out = orjson.loads(r.json(data))
        assert out == {**doc, "note": "a***b"}, out
    lines = orjson.dumps(doc) + b"\n" + orjson.dumps({"e": weak}) + b"\n"
    assert [orjson.loads(x) for x in r.json(lines).splitlines()][1] == {"e": "***"}


def test_json_scrub_catches_every_form_inside_strings() -> None:
    import html
    import json
    from urllib.parse import quote

    import orjson

    r = Redactor()
    r.add(WEIRD)
    for form in (WEIRD, json.dumps(WEIRD)[1:-1], quote(WEIRD, safe=""), html.escape(WEIRD)):
        data = orjson.dumps({"error": f"bad key {form}!", WEIRD: 1})
        out = r.json(data)
        assert orjson.loads(out)["error"] == "bad key ***!", form
    assert r.json(b'{"a": 1}') == b'{"a": 1}'


def test_json_scrub_masks_a_strong_key_echoed_as_a_field_name() -> None:
    """A server that echoes the key as a JSON field name (a timings or props key) leaks it
    unless keys are masked too: they are, for a secret unlike ordinary text, and the
    document still parses."""
    import orjson

    r = Redactor()
    r.add(WEIRD)
    doc = {"timings": {WEIRD: 1.5, f"x_{WEIRD}": 2}, "requests": 3}
    out = r.json(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    assert WEIRD.encode() not in out
    assert orjson.loads(out) == {"timings": {"***": 1.5, "x_***": 2}, "requests": 3}


def test_key_files_that_are_devices_fifos_or_huge_are_refused_unopened(tmp_path: Path) -> None:
    import os
    import time

    from stress.core.secrets import MAX_KEY_FILE_BYTES, key_file_problem

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge"
    huge.write_bytes(b"k1" * MAX_KEY_FILE_BYTES)
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe-not-text")
    t0 = time.monotonic()
    for path, what in (
        (Path("/dev/zero"), "character device"),
        (fifo, "FIFO"),
        (huge, "at most 65,536"),
        (binary, "not UTF-8"),
    ):
        with pytest.raises(SecretError) as e:
            load_api_key(None, path)
        assert what in str(e.value) and "target.api_key_file" in str(e.value), str(e.value)
        assert " -- fix: " in str(e.value)
    assert time.monotonic() - t0 < 2, "a key file blocked"
    assert key_file_problem(fifo) is not None and key_file_problem(tmp_path / "none")
    ok = tmp_path / "key"
    ok.write_text("test-fine-key-123\n")
    assert key_file_problem(ok) is None


@pytest.mark.parametrize("key", ["requests", "passwordsecret", "12345678", "  sk-abc123  "])
def test_keys_that_are_ordinary_text_or_padded_are_refused(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    monkeypatch.setenv("WEAK_KEY_VAR", key)
    with pytest.raises(SecretError) as e:
        load_api_key("WEAK_KEY_VAR", None)
    assert "WEAK_KEY_VAR" in str(e.value) and key.strip() not in str(e.value)


def test_a_workers_redactor_is_built_from_the_header_it_is_sent() -> None:
    import base64

    from stress.core.secrets import REDACTOR, redact_auth_header

    fake = "-".join(("test", "worker", "unit", "not", "a", "key", "1"))
    redact_auth_header(f"Bearer {fake}")
    token = base64.b64encode(b"alice:pw-worker-unit-4Rt").decode()
    redact_auth_header(f"Basic {token}")
    text = f"{fake} {token} alice:pw-worker-unit-4Rt pw-worker-unit-4Rt"
    assert REDACTOR.text(text) == "*** *** *** ***"
