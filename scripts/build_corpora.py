"""Rebuild the ``corpora/`` folder of long documents used by simulated users.

This script documents the provenance of every file in ``corpora/`` and can
rebuild the whole corpus from the Debian packages it was taken from.  It is
not run in CI.

Usage::

    apt-get update
    mkdir -p /tmp/debs && cd /tmp/debs
    apt-get download debian-handbook debian-reference-en debian-reference-es \
        debian-reference-zh-cn python3.11-doc
    python scripts/build_corpora.py /tmp/debs [--out corpora]

The .deb files are unpacked with ``dpkg -x`` into a temporary folder (nothing
is installed).  HTML is converted to plain text with :mod:`html.parser` from
the standard library: navigation, banners, index anchors and permalink markers
are dropped, paragraphs are separated by blank lines, preformatted blocks
(commands, program listings) are kept verbatim and large tables are dropped.

Sources (bookworm versions used for the committed corpus):

* ``debian-handbook`` 11.20220922 -- "The Debian Administrator's Handbook",
  Raphaël Hertzog and Roland Mas (and Freexian SARL, and the translators);
  GPL-2.0-or-later or CC-BY-SA-3.0.  Chapters in en-US, es-ES, zh-CN, pl-PL.
* ``debian-reference-{en,es,zh-cn}`` 2.100 -- "Debian Reference", Osamu Aoki
  and translators; GPL-2.0-or-later.
* ``python3.11-doc`` 3.11.2-6+deb12u9 -- Python HOWTO documents, Python
  Software Foundation and the HOWTO authors; PSF License Agreement v2.
* ``manpages-pl`` 1:4.18.1-1 -- Polish man pages bc(1), grep(1) and
  bootparam(7) rendered with ``groff -Tutf8 -man`` and ``col -bx``;
  originals GPL-2+/GPL-3+, Polish translations GPL-3+.

In the es, zh and pl documents, paragraphs that the translation left in
English are removed (see ``drop_english``); the output files carry no
header so they can be pasted into chats as they are.

See ``corpora/NOTICE`` for the per-file list and licences.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

BLOCK_TAGS = {
    "p",
    "div",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "li",
    "dt",
    "dd",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "dl",
    "table",
    "section",
    "article",
    "figure",
    "caption",
    "title",
    "br",
    "hr",
}
VOID_TAGS = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "param",
    "source",
    "track",
    "wbr",
}
# Elements whose whole subtree is dropped (matched on tag, class or id).
SKIP_TAGS = {"head", "script", "style", "noscript", "img", "object", "svg"}
SKIP_CLASSES = {
    "docnav",
    "indexterm",
    "headerlink",
    "navheader",
    "navfooter",
    "toc",
    "sphinxsidebar",
    "related",
    "footer",
    "mobile-nav",
    "menu-wrapper",
    "inline-search",
    "language_switcher_placeholder",
    "clearer",
    "version_switcher_placeholder",
    "list-of-tables",
    "list-of-examples",
    "list-of-figures",
    "mediaobject",
    "figure-contents",
    "table",  # DocBook formal tables: package lists, option matrices
}
SKIP_IDS = {"banner", "title", "sidebarbutton", "search-results"}
MAX_TABLE_ROWS = 12
MAX_TABLE_COLS = 3


@dataclass
class _Node:
    tag: str
    skip: bool


@dataclass
class _Table:
    rows: list[list[str]] = field(default_factory=list)
    cell: list[str] | None = None


class HtmlToText(HTMLParser):
    """Turn (X)HTML documentation pages into blank-line separated paragraphs."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self._cur: list[str] = []
        self._stack: list[_Node] = []
        self._pre = 0
        self._tables: list[_Table] = []
        self._list_item_pending = False

    # -- helpers -----------------------------------------------------------
    def _skipping(self) -> bool:
        return bool(self._stack) and self._stack[-1].skip

    def _flush(self) -> None:
        if self._pre:
            return
        text = "".join(self._cur)
        self._cur = []
        text = re.sub(r"[ \t\r\f\v\n]+", " ", text).strip()
        if text:
            if self._list_item_pending:
                text = "- " + text
                self._list_item_pending = False
            self.blocks.append(text)

    # -- parser callbacks ---------------------------------------------------
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        amap = {k: (v or "") for k, v in attrs}
        classes = set(amap.get("class", "").split())
        skip = (
            self._skipping()
            or tag in SKIP_TAGS
            or bool(classes & SKIP_CLASSES)
            or amap.get("id", "") in SKIP_IDS
        )
        if tag not in VOID_TAGS:
            self._stack.append(_Node(tag, skip))
        if skip:
            return
        if self._tables:
            table = self._tables[-1]
            if tag == "table":
                self._tables.append(_Table())
            elif tag == "tr":
                table.rows.append([])
            elif tag in {"td", "th"}:
                table.cell = []
            return
        if tag == "table":
            self._flush()
            self._tables.append(_Table())
            return
        if tag == "pre":
            self._flush()
            self._pre += 1
            return
        if tag in BLOCK_TAGS and not self._pre:
            self._flush()
            if tag == "li":
                self._list_item_pending = True

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID_TAGS:
            return
        # Pop up to and including the matching open tag.
        idx = None
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i].tag == tag:
                idx = i
                break
        if idx is None:
            return
        node = self._stack[idx]
        del self._stack[idx:]
        if node.skip:
            return
        if self._tables:
            table = self._tables[-1]
            if tag in {"td", "th"} and table.cell is not None:
                cell = re.sub(r"\s+", " ", "".join(table.cell)).strip()
                if table.rows:
                    table.rows[-1].append(cell)
                table.cell = None
            elif tag == "table":
                self._tables.pop()
                if not self._tables:
                    self._emit_table(table)
            return
        if tag == "pre" and self._pre:
            text = "".join(self._cur).strip("\n")
            self._cur = []
            self._pre -= 1
            lines = [ln.rstrip() for ln in text.split("\n")]
            text = "\n".join(lines).strip("\n")
            if text.strip():
                self.blocks.append(text)
            return
        if tag in BLOCK_TAGS and not self._pre:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._skipping():
            return
        if self._tables:
            table = self._tables[-1]
            if table.cell is not None:
                table.cell.append(data)
            return
        self._cur.append(data)

    def _emit_table(self, table: _Table) -> None:
        rows = [[c for c in r if c] for r in table.rows]
        rows = [r for r in rows if r]
        if not rows or len(rows) > MAX_TABLE_ROWS:
            return
        if max(len(r) for r in rows) > MAX_TABLE_COLS:
            return
        self.blocks.append("\n".join(" | ".join(r) for r in rows))

    def text(self) -> str:
        self._flush()
        out: list[str] = []
        for block in self.blocks:
            if out and block == out[-1]:
                continue
            out.append(block)
        return "\n\n".join(out)


def html_to_text(raw: str) -> str:
    parser = HtmlToText()
    parser.feed(raw)
    parser.close()
    return clean(parser.text())


def clean(text: str) -> str:
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\u00a0", " ").replace("\u00ad", "").replace("\ufeff", "")
    text = text.replace("\u200b", "").replace("\x00", "")
    text = "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) != "Cc")
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip() + "\n"


# -- sources -----------------------------------------------------------------

HANDBOOK = "usr/share/doc/debian-handbook/html"


def handbook_chapter(root: Path, lang: str, chapter: str) -> tuple[str, list[str]]:
    """Text of one handbook chapter page plus its ``sect.*`` pages, in order."""
    base = root / HANDBOOK / lang
    parts: list[str] = []
    paths: list[str] = []
    page: str | None = chapter
    while page:
        raw = (base / page).read_text(encoding="utf-8")
        parts.append(html_to_text(raw))
        paths.append(f"/{HANDBOOK}/{lang}/{page}")
        m = re.search(r'<link rel="next" href="([^"]+)"', raw)
        page = m.group(1) if m and m.group(1).startswith("sect.") else None
    return "\n".join(parts), paths


ENGLISH_WORDS = {"the", "and", "is", "of", "which", "are", "with", "this", "that"}


def looks_english(par: str) -> bool:
    """True for an (untranslated) English paragraph inside a translation."""
    if re.search(r"[\u3400-\u9fff]", par):
        return False
    words = re.findall(r"[A-Za-z']+", par)
    if len(words) < 8:
        return False
    hits = sum(w.lower() in ENGLISH_WORDS for w in words)
    return hits / len(words) > 0.08


def drop_english(text: str) -> str:
    """Remove paragraphs a translation left in English (keeps code blocks)."""
    kept: list[str] = []
    for par in text.split("\n\n"):
        if not looks_english(par):
            kept.append(par)
            continue
        # Also drop a heading left without its (English) body.
        if kept and len(kept[-1]) < 100 and not re.search(r"[.:;!?。：；！？)]$", kept[-1]):
            kept.pop()
    return "\n\n".join(kept)


def man_to_text(gz: Path) -> str:
    """Render a gzipped man page with groff (one line per paragraph)."""
    zcat = subprocess.run(["zcat", str(gz)], check=True, capture_output=True)
    groff = subprocess.run(
        ["groff", "-k", "-Tutf8", "-man", "-rLL=3000n", "-rHY=0", "-rcR=1", "-P-cbou"],
        input=zcat.stdout,
        check=True,
        capture_output=True,
    )
    col = subprocess.run(["col", "-bx"], input=groff.stdout, check=True, capture_output=True)
    lines = col.stdout.decode("utf-8").split("\n")
    out: list[str] = []
    for line in lines:
        if re.search(r"\S {40,}\S", line):  # running header / footer
            continue
        line = line.rstrip()
        indent = len(line) - len(line.lstrip(" "))
        out.append(line[min(indent, 7) :])
    return clean("\n".join(out))


@dataclass
class Doc:
    lang: str
    name: str
    package: str
    kind: str  # "handbook", "html" or "man"
    source: str  # chapter file / path inside the package


HB = "debian-handbook"
PYHOWTO = "usr/share/doc/python3.11/html/howto"
REF = "usr/share/doc/debian-reference-{}/docs/{}"
MANPL = "usr/share/man/pl"

DOCS: list[Doc] = [
    # English
    Doc("en", "debian-handbook-ch06-apt", HB, "handbook", "en-US/apt.html"),
    Doc("en", "debian-handbook-ch09-unix-services", HB, "handbook", "en-US/unix-services.html"),
    Doc("en", "debian-handbook-ch14-security", HB, "handbook", "en-US/security.html"),
    Doc(
        "en",
        "debian-reference-ch01-gnu-linux-tutorials",
        "debian-reference-en",
        "html",
        REF.format("en", "ch01.en.html"),
    ),
    Doc("en", "python-howto-logging", "python3.11-doc", "html", f"{PYHOWTO}/logging.html"),
    Doc("en", "python-howto-regex", "python3.11-doc", "html", f"{PYHOWTO}/regex.html"),
    Doc("en", "python-howto-unicode", "python3.11-doc", "html", f"{PYHOWTO}/unicode.html"),
    Doc("en", "python-howto-functional", "python3.11-doc", "html", f"{PYHOWTO}/functional.html"),
    # Spanish
    Doc(
        "es",
        "debian-reference-cap01-tutoriales-gnu-linux",
        "debian-reference-es",
        "html",
        REF.format("es", "ch01.es.html"),
    ),
    Doc(
        "es",
        "debian-reference-cap02-gestion-de-paquetes",
        "debian-reference-es",
        "html",
        REF.format("es", "ch02.es.html"),
    ),
    Doc(
        "es",
        "debian-handbook-apendice-b-curso-breve",
        HB,
        "handbook",
        "es-ES/short-remedial-course.html",
    ),
    Doc(
        "es",
        "debian-handbook-cap07-resolucion-de-problemas",
        HB,
        "handbook",
        "es-ES/solving-problems.html",
    ),
    # Chinese (simplified)
    Doc(
        "zh",
        "debian-reference-ch01-gnu-linux-tutorials",
        "debian-reference-zh-cn",
        "html",
        REF.format("zh-cn", "ch01.zh-cn.html"),
    ),
    Doc(
        "zh",
        "debian-reference-ch02-package-management",
        "debian-reference-zh-cn",
        "html",
        REF.format("zh-cn", "ch02.zh-cn.html"),
    ),
    Doc(
        "zh",
        "debian-reference-ch09-system-tips",
        "debian-reference-zh-cn",
        "html",
        REF.format("zh-cn", "ch09.zh-cn.html"),
    ),
    # Polish
    Doc(
        "pl",
        "debian-handbook-rozdz01-projekt-debian",
        HB,
        "handbook",
        "pl-PL/the-debian-project.html",
    ),
    Doc("pl", "man-bc.1", "manpages-pl", "man", f"{MANPL}/man1/bc.1.gz"),
    Doc("pl", "man-grep.1", "manpages-pl", "man", f"{MANPL}/man1/grep.1.gz"),
    Doc("pl", "man-bootparam.7", "manpages-pl", "man", f"{MANPL}/man7/bootparam.7.gz"),
]


def unpack(debdir: Path, package: str, dest: Path) -> Path:
    """``dpkg -x`` the newest .deb of ``package`` found in ``debdir``."""
    target = dest / package
    if target.exists():
        return target
    debs = sorted(debdir.glob(f"{package}_*.deb"))
    if not debs:
        sys.exit(f"missing {package}_*.deb in {debdir}")
    subprocess.run(["dpkg", "-x", str(debs[-1]), str(target)], check=True)
    return target


def write_licenses(tmp: Path, debdir: Path, out: Path) -> None:
    """Copy the full licence texts that ``corpora/NOTICE`` refers to.

    The files have no ``.txt`` suffix so that a corpus loader, which reads
    every ``.txt``/``.md`` file under a folder, never pastes them.
    """
    lic = out / "LICENSES"
    lic.mkdir(parents=True, exist_ok=True)
    for name in ("GPL-2", "GPL-3"):
        shutil.copyfile(f"/usr/share/common-licenses/{name}", lic / name)
    # CC-BY-SA-3.0: the full text as shipped in debian-handbook's copyright file.
    copyright_file = unpack(debdir, HB, tmp) / "usr/share/doc/debian-handbook/copyright"
    body = copyright_file.read_text(encoding="utf-8").split("License: CC-BY-SA-3.0\n", 1)[1]
    lines = [ln[1:] if ln.startswith(" ") else ln for ln in body.split("\n")]
    text = "\n".join("" if ln == "." else ln for ln in lines).strip() + "\n"
    (lic / "CC-BY-SA-3.0").write_text(text, encoding="utf-8")
    # PSF-2.0 (+ 0BSD for code samples), from the Python docs' license page.
    page = unpack(debdir, "python3.11-doc", tmp) / "usr/share/doc/python3.11/html/license.html"
    text = html_to_text(page.read_text(encoding="utf-8"))
    psf = text[text.index("PSF LICENSE AGREEMENT") : text.index("BEOPEN.COM LICENSE")]
    bsd0 = text[text.index("ZERO-CLAUSE BSD") : text.index("Licenses and Acknowledgements")]
    (lic / "PSF-2.0").write_text(psf.strip() + "\n\n\n" + bsd0.strip() + "\n", encoding="utf-8")


def build(debdir: Path, out: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="corpora-"))
    try:
        for doc in DOCS:
            root = unpack(debdir, doc.package, tmp)
            if doc.kind == "handbook":
                lang, chapter = doc.source.split("/", 1)
                text, paths = handbook_chapter(root, lang, chapter)
            elif doc.kind == "man":
                text = man_to_text(root / doc.source)
                paths = ["/" + doc.source]
            else:
                text = html_to_text((root / doc.source).read_text(encoding="utf-8"))
                paths = ["/" + doc.source]
            if doc.lang != "en":
                text = drop_english(text)
            text = clean(text)
            target = out / doc.lang / f"{doc.name}.txt"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            size = len(text.encode("utf-8"))
            extra = f" (+{len(paths) - 1} sect.* pages)" if len(paths) > 1 else ""
            print(f"{target}: {size // 1024} KB from {doc.package} {paths[0]}{extra}")
        write_licenses(tmp, debdir, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("debdir", type=Path, help="folder holding the downloaded .deb files")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "corpora")
    args = ap.parse_args()
    build(args.debdir, args.out)
    print("now write their token ids: python scripts/corpus_token_ids.py")


if __name__ == "__main__":
    main()
