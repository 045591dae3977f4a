import os
from pathlib import Path

import pytest
from helpers import SHARED as SHARED_DATA

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests train tiny models: one thread each is faster than two threads synchronising over 32-wide matrices,
# and cell processes started by the tests inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# A klm bench the tests start as a program starts no background server (tests/test_serve.py starts its own).
os.environ["KLM_SERVE"] = "0"


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
