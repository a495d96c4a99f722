"""Where a run ran: the versions, the platform and the host, as the manifest records them.

Read on the way to the first request, so each is the cheap form of what the standard
library offers (the costs are in the docstrings).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import sys

import stress

PACKAGES = (
    "aiohttp",
    "httptools",
    "orjson",
    "numpy",
    "pydantic",
    "tiktoken",
    "uvloop",
    "nvidia-ml-py",
)


def versions() -> dict[str, str]:
    """The versions of stress, Python and ``PACKAGES`` as installed, for the manifest.

    Read from the installed ``NAME-VERSION.dist-info`` folders' names (the standard says
    the folder is named so), in ``sys.path`` order as an import would find them: one
    listing per folder. ``importlib.metadata`` (only where a package is installed another
    way) costs ~25 ms on a 2-core machine and ~50 on a slow host, on the way to the first
    request (issue 15)."""
    out = {"stress": stress.__version__, "python": platform.python_version()}
    wanted = {_canonical(name): name for name in PACKAGES}
    found: dict[str, str | None] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # a zip file, or gone
            continue
        for folder in names:
            stem, dot, kind = folder.rpartition(".")
            if not dot or kind not in ("dist-info", "egg-info"):
                continue
            name, _, tail = stem.partition("-")
            key = _canonical(name)
            if key in wanted and key not in found:
                # an egg-info folder's name may carry no version (or a Python tag after it)
                found[key] = tail if kind == "dist-info" and tail else None
    for key, version in found.items():
        name = wanted[key]
        if version is not None:
            out[name] = version
            continue
        import importlib.metadata

        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[name] = importlib.metadata.version(name)
    return {k: out[k] for k in ("stress", "python", *PACKAGES) if k in out}


def platform_text() -> str:
    """``platform.platform()``'s text for the manifest (``Linux-6.8.0-x86_64-with-glibc2.39``)
    without its ``libc_ver()``, which reads the whole Python binary looking for the glibc
    version (5-7 ms on a 2-core machine, more on a slow host, on the way to the first
    request): glibc says its version itself. Elsewhere, ``platform.platform()``."""
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.39"
    except (AttributeError, ValueError, OSError):  # not glibc, or not POSIX
        libc = None
    if sys.platform != "linux" or not libc:
        return platform.platform()
    u = os.uname()
    name, _, version = libc.partition(" ")
    return f"{u.sysname}-{u.release}-{u.machine}-with-{name}{version}"


def _canonical(name: str) -> str:
    """A distribution's name as the packaging standards compare them."""
    return re.sub(r"[-_.]+", "-", name).lower()
