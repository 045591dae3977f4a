import os
import tempfile
from pathlib import Path

import pytest
from helpers import SHARED as SHARED_DATA

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests train tiny models: one thread each is faster than two threads synchronising over 32-wide matrices,
# and cell processes started by the tests inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A klm bench the tests start as a program starts no background server (tests/test_serve.py starts its own).
os.environ["KLM_SERVE"] = "0"


# The test files that take a minute or more of one worker each: collected first, so that under make test's
# ``--dist loadfile`` (whole files to a worker, in collection order) neither starts last while the other worker idles.
LONGEST_FILES = ("test_leaderboard_committed.py", "test_configs.py")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.path.name not in LONGEST_FILES)  # stable: each file's tests keep their order


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not here")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tokenizer():
    from knowledge_lm.core.backbones import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Every test session tokenizes into its own cache, never the user's."""
    monkeypatch.setenv("KLM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "klm-cache"))


@pytest.fixture(autouse=True, scope="session")
def own_temporary_folder(tmp_path_factory):
    """The session (each pytest-xdist worker its own) keeps its temporary files in a folder of its own, as do the
    processes it starts: a `klm serve` one worker's test starts listens there (``socket_path``), unseen by the klm
    commands of another worker's tests, which would hand their work to it."""
    folder = tmp_path_factory.mktemp("tmp")
    previous = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    yield folder
    if previous is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = previous
    tempfile.tempdir = None
