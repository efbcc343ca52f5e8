"""Text files written whole: to a temporary name beside the file, then renamed over it, so that
a reader -- or the next process, after this one was killed mid-write -- never finds half a
file under the file's name (a cached run, a tuning, a trial's journal, a checkpoint manifest, a
checkpoint's list of the clients' kept-state files)."""

from __future__ import annotations

import os
from pathlib import Path


def write_text(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` whole (``<name>.tmp`` first, then an atomic rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
