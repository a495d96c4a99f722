"""Figures are registered units (issue 34): each one a function in
``stress.analysis.figures`` whose docstring holds its population and formula, or a
definition naming the function elsewhere that computes it; and no output computes a
figure itself, which an AST scan of the output modules holds."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from stress.analysis import figures

ROOT = Path(__file__).resolve().parents[2]

# ---- the registry ----------------------------------------------------------------------


def test_every_figure_has_a_population_a_formula_and_a_unique_name() -> None:
    names = [f.name for f in figures.FIGURES]
    assert len(names) == len(set(names)), "two figures share a name"
    for f in figures.FIGURES:
        assert f.population.strip(), f"{f.name}: no population"
        assert f.formula.strip(), f"{f.name}: no formula"
        assert f.where, f"{f.name}: no function named as computing it"


def test_every_registered_figure_is_in_the_table_as_registered() -> None:
    """A registered function's definition is what the report and docs/metrics.md show."""
    shown = {f.name: f for f in figures.FIGURES}
    for name, d in figures.REGISTRY.items():
        assert shown.get(name) == d, f"{name} is registered but not in FIGURES as registered"
        assert d.where.startswith("stress.analysis.figures:"), d.where


@pytest.mark.parametrize("d", figures.FIGURES, ids=lambda d: d.name)
def test_where_names_a_function_that_exists(d: figures.FigureDef) -> None:
    module, _, qualname = d.where.partition(":")
    obj: object = importlib.import_module(module)
    for part in qualname.split("."):
        assert hasattr(obj, part), f"{d.name}: {d.where} does not exist"
        obj = getattr(obj, part)
    assert callable(obj) or isinstance(obj, property), f"{d.name}: {d.where} is not a function"


def test_a_definition_is_read_from_the_docstrings_paragraphs() -> None:
    def fig() -> None:
        """Summary line.

        Population: every request,
        warm-up included.

        Formula: a / b.

        Notes that are neither."""

    assert figures._paragraph(fig, "Population:") == "every request, warm-up included"
    assert figures._paragraph(fig, "Formula:") == "a / b"
    with pytest.raises(ValueError, match="no 'Where:' paragraph"):
        figures._paragraph(fig, "Where:")


def test_a_name_registers_once() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        figures.figure("TTFT p95 (the SLO's figure)")(figures.ttft_p95)


# ---- no output computes a figure itself ------------------------------------------------

PLOTTING = {
    "stress/report/charts.py": "draws the charts: bins a series for a plot, shows no figure",
    "stress/report/capacity_chart.py": "draws the capacity chart from the analysis's buckets",
    "stress/report/series.py": "per-window series for the charts (tokens per window), "
    "not a figure a table or summary shows",
}
"""Output modules the scan skips, with why."""

KNOWN: dict[tuple[str, str], str] = {}
"""Computations still in an output module, each to move into figures; an entry that no
longer occurs fails the scan, so the list only shrinks."""

STATS = {
    "average",
    "fmean",
    "mean",
    "median",
    "nanmean",
    "nanmedian",
    "nanpercentile",
    "nanquantile",
    "nanstd",
    "nanvar",
    "percentile",
    "pstdev",
    "quantile",
    "quantiles",
    "std",
    "stdev",
    "var",
    "variance",
}
"""numpy's and statistics' figure functions; as methods (an array's ``.mean()``), those that
are not ``percentile``/``quantile`` (the analysis's own histograms have a ``percentile``)."""
METHODS = STATS - {"percentile", "quantile", "quantiles"}
TOKEN_KEYS = {"completion_tokens", "prompt_tokens", "cached_tokens"}
STAT_MODULES = ("numpy", "statistics")


def output_modules() -> list[Path]:
    found = [
        *(ROOT / "stress" / "report").glob("*.py"),
        *(ROOT / "stress" / "live").glob("*.py"),
        *(ROOT / "stress" / "tui").rglob("*.py"),
        *(ROOT / "stress" / "cli").glob("*.py"),
    ]
    return sorted(p for p in found if p.relative_to(ROOT).as_posix() not in PLOTTING)


def _token_keys(node: ast.AST) -> set[str]:
    return {
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in TOKEN_KEYS
    }


def violations(source: str) -> list[tuple[str, str]]:
    """(what, where) for each figure computed in ``source``: a numpy or statistics
    percentile/median/mean/std call, or a sum (``sum``, ``+=``) of a record's token counts."""
    tree = ast.parse(source)
    modules: set[str] = set()
    functions: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            modules |= {a.asname or a.name for a in n.names if a.name.split(".")[0] in STAT_MODULES}
        elif isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in STAT_MODULES:
            functions |= {a.asname or a.name for a in n.names if a.name in STATS}
    found: list[tuple[str, str]] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f, call = n.func, ast.unparse(n.func)
            if isinstance(f, ast.Attribute) and f.attr in STATS:
                receiver = ast.unparse(f.value)
                if receiver in modules or (f.attr in METHODS and receiver != "figures"):
                    found.append((call, f"line {n.lineno}"))
            elif isinstance(f, ast.Name) and f.id in functions:
                found.append((call, f"line {n.lineno}"))
            if call in ("sum", "math.fsum", "np.sum", "numpy.sum") and _token_keys(n):
                found.append((f"sum of {', '.join(sorted(_token_keys(n)))}", f"line {n.lineno}"))
        elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and _token_keys(n.value):
            keys = ", ".join(sorted(_token_keys(n.value)))
            found.append((f"sum of {keys}", f"line {n.lineno}"))
    return found


@pytest.mark.parametrize(
    "source",
    [
        "import numpy as np\nx = np.percentile(v, 95)",
        "import numpy\nx = numpy.median(v)",
        "import statistics\nx = statistics.quantiles(v)",
        "from statistics import median as med\nx = med(v)",
        "from numpy import std\nx = std(v)",
        "x = a.mean()",
        "x = sum(r['completion_tokens'] for r in rs)",
        "x = sum(r.get('prompt_tokens') or 0 for r in rs)",
        "t = 0\nfor r in rs:\n    t += r.get('cached_tokens') or 0",
    ],
)
def test_the_scan_finds_a_figure_computed_in_an_output(source: str) -> None:
    assert violations(source)


@pytest.mark.parametrize(
    "source",
    [
        "from stress.analysis import figures\nx = figures.median(v)",
        "x = h.percentile(95)",  # an analysis histogram's own percentile
        "x = describe(v).mean",
        "x = sum(1 for r in rs if r.get('warmup'))",
        "x = r.get('completion_tokens')",
    ],
)
def test_the_scan_passes_an_output_that_calls_the_figures(source: str) -> None:
    assert not violations(source)


def test_no_output_module_computes_a_figure_itself() -> None:
    """Outputs show figures; ``stress.analysis.figures`` computes them."""
    found: list[str] = []
    seen: set[tuple[str, str]] = set()
    for path in output_modules():
        rel = path.relative_to(ROOT).as_posix()
        for what, where in violations(path.read_text()):
            if what.startswith("sum of ") or (rel, what) not in KNOWN:
                found.append(f"{rel} {where}: {what}")
            else:
                seen.add((rel, what))
    assert not found, (
        "outputs computing a figure themselves (call a function of stress.analysis.figures, "
        "registered with @figure, instead):\n" + "\n".join(found)
    )
    assert seen == set(KNOWN), f"no longer found, remove from KNOWN: {set(KNOWN) - seen}"
