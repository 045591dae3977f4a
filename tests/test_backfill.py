"""The provenance back-fill: a stored result's missing version and data hashes, filled in only where the data
directory holds the examples the cell read."""

import json
from pathlib import Path

import pytest

from knowledge_lm.sweep.backfill import backfill

RESULTS = Path(__file__).resolve().parents[1] / "results"
WITH_HASHES = RESULTS / "openentity/main/kam/minilm/f0.1-s2.json"  # written with every field, at 10 % train
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

pytestmark = pytest.mark.skipif(
    not (WITH_HASHES.is_file() and (DATA / "openentity").is_dir()), reason="needs OpenEntity"
)


def stripped(tmp_path: Path, drop_split_hashes: bool) -> tuple[dict, Path]:
    original = json.loads(WITH_HASHES.read_text())
    result = json.loads(WITH_HASHES.read_text())
    result["versions"]["knowledge-lm"] = None
    del result["data"]["data_hashes"]
    if drop_split_hashes:
        del result["data"]["split_hashes"]
    path = tmp_path / "f0.1-s2.json"
    path.write_text(json.dumps(result))
    return original, path


@pytest.mark.parametrize("drop_split_hashes, check", [(False, "split_hashes"), (True, "subset_hash+eval_sizes")])
def test_backfill_restores_what_the_cell_recorded(tmp_path, drop_split_hashes, check):
    original, path = stripped(tmp_path, drop_split_hashes)
    assert backfill(path, DATA) == f"version, data hashes ({check})"
    filled = json.loads(path.read_text())
    assert filled["data"]["data_hashes"] == original["data"]["data_hashes"]
    assert filled["data"]["data_hashes_backfilled"]["check"] == check
    assert filled["versions"]["knowledge-lm"] == original["versions"]["knowledge-lm"]
    assert backfill(path, DATA) == "nothing missing"


def test_backfill_leaves_a_result_of_other_data_alone(tmp_path):
    _, path = stripped(tmp_path, drop_split_hashes=True)
    result = json.loads(path.read_text())
    result["data"]["subset_hash"] = "0" * 16
    path.write_text(json.dumps(result))
    before = path.read_text()
    assert backfill(path, DATA) == "data differs from what the cell read: left as it is"
    assert path.read_text() == before
