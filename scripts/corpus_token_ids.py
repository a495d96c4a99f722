"""Write the bundled corpora's token ids (``stress.load.corpus.write_token_ids``).

Each folder of ``stress/data/corpora`` ships a ``token-ids.<tokenizer>.bin`` holding its
paragraphs' token ids, so ``stress run`` reads them instead of encoding the corpus on the
way to its first request. Run this after changing a bundled document or the tokenizer;
``tests/load/test_corpus.py`` fails while a shipped file does not match its corpus.

    .venv/bin/python scripts/corpus_token_ids.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stress.config.bundled import CORPORA
from stress.load.corpus import write_token_ids


def main() -> None:
    for root in sorted(p for p in CORPORA.iterdir() if p.is_dir() and p.name != "LICENSES"):
        path = write_token_ids(root)
        print(f"{path.relative_to(CORPORA.parent)}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
