"""Keys come from the environment or a named file and are scrubbed from everything."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.errors import SecretError
from stress.secrets import Redactor, load_api_key, safe_url


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
    with pytest.raises(SecretError, match="cannot read"):
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
    from stress.secrets import REDACTOR, split_url_credentials

    assert split_url_credentials("http://h:1/x") == ("http://h:1/x", None)
    url, auth = split_url_credentials("https://alice:s3cret-pw%40x@h:8443/p")
    assert url == "https://h:8443/p" and auth is not None and auth.startswith("Basic ")
    assert REDACTOR.text(f"{auth} alice:s3cret-pw@x s3cret-pw@x") == "Basic *** *** ***"
    with pytest.raises(ValueError, match="shorter than 8") as e:
        split_url_credentials("http://a:b@h")
    assert "a:b" not in str(e.value)
