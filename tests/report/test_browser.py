"""report.html in a real headless browser: it renders, has its charts, fetches nothing.

Uses Debian's chromium through playwright (playwright never downloads a browser here).
pip cannot install a browser, so on a machine without chromium the test skips and says why;
under CI (``CI`` set: .ci/run installs chromium) a missing browser is a failure.
STRESS_SKIP_BROWSER=1 skips it deliberately.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from stress.report.build import build_report
from tests.report.synth import gpu_records, manifest, request, server_records, write_run

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
EXPECTED_CHARTS = (
    "capacity",
    "ttft-over-time",
    "cache-kv-over-time",
    "preemptions-over-time",
    "retention-per-user",
    "gpu-over-time",
    "energy-per-token",
)


def _chromium() -> str:
    if os.environ.get("STRESS_SKIP_BROWSER") == "1":
        pytest.skip("STRESS_SKIP_BROWSER=1: browser check skipped on purpose")
    path = os.environ.get("STRESS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        if not os.environ.get("CI"):
            pytest.skip(
                "no chromium on this machine (pip cannot install a browser): "
                "apt-get install -y chromium to run the report's browser check"
            )
        pytest.fail(
            "chromium not found: install it (apt-get install -y chromium) or set "
            "STRESS_SKIP_BROWSER=1 to skip the browser check on purpose"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.fail("playwright is not installed: pip install 'stress[test]'")
    return path


def _report(tmp_path: Path) -> Path:
    reqs = [
        request(
            u,
            r,
            (r - 1) * 12.0 + u,
            ttft=0.5 + r / 4,
            conv=2000 * r,
            cached=1500 * (r - 1),
            reusable=1800 * (r - 1),
            warmup=r == 1,
        )
        for r in range(1, 6)
        for u in range(3)
    ]
    reqs.append(request(0, 6, 70.0, outcome="error", error_class="http_5xx"))
    reqs[-1]["error"] = "<script>alert('x')</script> from the server"
    man = manifest(users=3, duration_s=80.0, pool=20_000.0, slo={"ttft_p95": 1.5})
    man["model"] = "<img src=http://example.invalid/x.png>"
    d = write_run(
        tmp_path,
        man,
        reqs,
        server=server_records(80.0, 20_000.0, 0.6, preempt_every=7),
        gpu=gpu_records(80.0, 2),
    )
    return build_report(d)[2]


@dataclass
class PageVisit:
    requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    @property
    def outside(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(("file://", "data:"))]


def visit(html: Path, check: Callable[[Any], None]) -> PageVisit:
    """Open ``html`` in headless chromium, record every request, run ``check(page)``."""
    from playwright.sync_api import sync_playwright

    seen = PageVisit()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on("request", lambda req: seen.requests.append(req.url))
            page.on(
                "console",
                lambda msg: seen.console_errors.append(msg.text) if msg.type == "error" else None,
            )
            page.on("pageerror", lambda exc: seen.page_errors.append(str(exc)))
            # Record everything, let only local files through: nothing may leave the machine.
            page.route(
                "**/*",
                lambda route: (
                    route.continue_()
                    if route.request.url.startswith(("file://", "data:"))
                    else route.abort()
                ),
            )
            page.goto(html.as_uri())
            page.wait_for_load_state("load")
            check(page)
        finally:
            browser.close()
    return seen


@pytest.mark.slow
def test_report_html_in_headless_chromium(tmp_path: Path) -> None:
    _chromium()
    html = _report(tmp_path)

    def check(page: Any) -> None:
        assert page.title().startswith("stress report: synthetic")
        verdict = page.locator("#verdict")
        assert verdict.is_visible()
        assert "Verdict: FAIL" in verdict.inner_text()
        assert page.locator("#headline table").is_visible()
        for cid in EXPECTED_CHARTS:
            fig = page.locator(f"#chart-{cid}")
            assert fig.count() == 1, cid
            svg = fig.locator("svg")
            assert svg.count() == 1, cid
            box = svg.bounding_box()
            assert box is not None and box["width"] > 200 and box["height"] > 100, cid
        # server-supplied text stays text: no injected element exists
        assert page.locator("script").count() == 0
        assert page.locator("body img").count() == 0
        # the detail is folded at the end: closed until the reader opens it
        assert page.locator("#capacity").is_visible()
        assert not page.locator("#fingerprint-section table").is_visible()
        page.locator("#fingerprint-section summary").click()
        assert page.locator("#fingerprint-section table").is_visible()
        assert (
            "<img src=http://example.invalid/x.png>"
            in page.locator("#fingerprint-section").inner_text()
        )

    seen = visit(html, check)
    assert seen.console_errors == []
    assert seen.page_errors == []
    assert seen.outside == [], f"the report fetched {seen.outside}"
    assert seen.requests and seen.requests[0] == html.as_uri()


@pytest.mark.slow
def test_the_check_catches_an_external_fetch(tmp_path: Path) -> None:
    """The request recorder works: a page with a remote image is caught."""
    _chromium()
    html = tmp_path / "bad.html"
    html.write_text('<html><body><img src="http://example.invalid/x.png"></body></html>')
    seen = visit(html, lambda page: None)
    assert seen.outside == ["http://example.invalid/x.png"]
