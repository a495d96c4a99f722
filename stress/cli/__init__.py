"""The `stress` command: the parser and the subcommands (``main``), and `probe` and `gpus`.

``main`` is imported on call, so ``stress.cli`` itself stays as light as the package.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """The console script's entry point (``stress = "stress.cli:main"``)."""
    from stress.cli.main import main as run

    return run(argv)
