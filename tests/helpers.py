"""Small helpers shared by the tests (pytest puts this folder on the import path)."""

import gzip
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"  # ../shared/data beside the checkout
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is not here")


def write(path: Path, text: str, compress: bool = False) -> Path:
    """Write ``text`` to ``path`` (``path.gz`` when ``compress``), making its folders; returns the file written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path
