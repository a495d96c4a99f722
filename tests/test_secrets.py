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
