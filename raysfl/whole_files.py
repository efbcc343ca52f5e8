"""Files written whole: to a temporary name beside the file, then renamed over it, so that a
reader -- or the next process, after this one was killed mid-write -- never finds half a file
under the file's name (a cached run, a tuning, a trial's journal, a checkpoint and its
manifest, a metrics Parquet file, a client's kept state). Every writer of such a file goes
through :func:`replacing`; the text and bytes helpers are its two common uses."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: Path | str, tmp: Path | str | None = None) -> Iterator[Path]:
    """Yield the temporary path to write (``<name>.tmp`` beside ``path`` unless ``tmp`` names
    another); on a clean exit rename it over ``path`` at once (atomic on one file system), on an
    exception remove it and re-raise, so ``path`` keeps its old content."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp") if tmp is None else Path(tmp)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def write_text(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` whole."""
    with replacing(path) as tmp:
        tmp.write_text(text)


def write_bytes(path: Path | str, data: bytes, tmp: Path | str | None = None) -> None:
    """Write ``data`` to ``path`` whole (``tmp``: as :func:`replacing`)."""
    with replacing(path, tmp) as t:
        t.write_bytes(data)
