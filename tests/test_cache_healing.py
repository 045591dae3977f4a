"""Caches that heal (issue 29, item 5): a corrupt cache file is named, set aside and rebuilt once; a dropped
checkpoint is said on the runner's console."""

import glob
import json
import shutil

import pytest
import torch

from knowledge_lm.core.caches import NOTICES_ENV, set_aside_cache, take_notices
from knowledge_lm.core.errors import KlmError
from knowledge_lm.data.generated import GeneratedDataModule
from knowledge_lm.knowledge import prepare as prepare_module
from knowledge_lm.knowledge.prepare import KnowledgeConfig, load_prepared, prepare, split_keys

SIZES = {"train_size": 30, "dev_size": 8, "test_size": 8}


@pytest.fixture(scope="module")
def prepared_once(tmp_path_factory, tokenizer):
    cache = tmp_path_factory.mktemp("prepared-once")
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=48, **SIZES)
    manifest = prepare(data, tokenizer, KnowledgeConfig(), cache, progress=False)
    return cache, manifest


@pytest.fixture
def prepared(prepared_once, tmp_path, tokenizer):
    """A copy of the prepared cache this test may spoil: its data module and the prepared folder."""
    cache = tmp_path / "cache"
    shutil.copytree(prepared_once[0], cache)
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=48, **SIZES)
    _, _, folder = split_keys(data, tokenizer, KnowledgeConfig(), cache)
    assert (folder / "manifest.json").is_file()
    return data, cache, folder


def set_aside_copies(path):
    return glob.glob(f"{glob.escape(str(path))}.corrupt-*")


@pytest.mark.parametrize(
    "name, spoil",
    [
        ("train.jsonl.xz", lambda data: data[: len(data) // 2]),
        ("pmi.npz", lambda data: b"\x80\x04garbage" * 10),
        ("manifest.json", lambda data: b"{not json"),
    ],
)
def test_a_corrupt_prepared_file_is_named_set_aside_and_rebuilt(prepared, tokenizer, capsys, name, spoil):
    data, cache, folder = prepared
    expected = load_prepared(data, tokenizer, KnowledgeConfig(), cache)
    path = folder / name
    path.write_bytes(spoil(path.read_bytes()))
    healed = load_prepared(data, tokenizer, KnowledgeConfig(), cache)
    assert [row["id"] for row in healed["train"]] == [row["id"] for row in expected["train"]]
    assert healed["train"][0]["pmi_pairs"] == expected["train"][0]["pmi_pairs"]
    assert len(set_aside_copies(folder)) == 1 and (folder / "manifest.json").is_file()
    err = capsys.readouterr().err
    assert name in err and "set aside" in err and "rebuilding" in err


def test_a_garbage_manifest_is_rebuilt_by_prepare(prepared, tokenizer, capsys):
    data, cache, folder = prepared
    manifest = (folder / "manifest.json").read_text()
    (folder / "manifest.json").write_text("garbage")
    rebuilt = prepare(data, tokenizer, KnowledgeConfig(), cache, progress=False)
    assert rebuilt["splits"] == json.loads(manifest)["splits"]
    assert len(set_aside_copies(folder)) == 1
    assert "manifest.json does not parse" in capsys.readouterr().err


def test_a_cache_that_stays_corrupt_fails_after_one_rebuild(prepared, tokenizer, monkeypatch):
    data, cache, folder = prepared
    (folder / "pmi.npz").write_bytes(b"garbage")
    builds = []
    monkeypatch.setattr(prepare_module, "prepare", lambda *args, **kwargs: builds.append(args))
    with pytest.raises(KlmError):  # the rebuild "wrote" nothing: no loop, one error
        load_prepared(data, tokenizer, KnowledgeConfig(), cache)
    assert len(builds) == 1


def test_a_corrupt_tokenized_split_is_set_aside_and_tokenized_again(tmp_path, tokenizer, capsys):
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=tmp_path, max_length=48, **SIZES)
    records = data.labelled_splits()["dev"]
    first = list(data.tokenize_on_disk(data._cache_path("dev", records), records)["input_ids"])
    path = data._cache_path("dev", records)
    (arrow,) = path.glob("*.arrow")
    arrow.write_bytes(arrow.read_bytes()[:100])
    again = data.tokenize_on_disk(path, records)
    assert list(again["input_ids"]) == first
    assert len(set_aside_copies(path)) == 1
    assert path.name in capsys.readouterr().err


def test_a_garbage_transe_file_is_set_aside_and_trained_again(tmp_path, capsys):
    from test_kg import tiny_world_triples

    from knowledge_lm.knowledge.kg import KnowledgeGraph
    from knowledge_lm.knowledge.kg_embeddings import cached_transe, transe_cache_path

    kg = KnowledgeGraph(tiny_world_triples())
    first = cached_transe(kg, tmp_path, dim=8, epochs=2, progress=False)
    path = transe_cache_path(kg, tmp_path, dim=8, epochs=2)
    path.write_bytes(b"not torch")
    again = cached_transe(kg, tmp_path, dim=8, epochs=2, progress=False)
    assert torch.allclose(again.matrix, first.matrix) and again.qids == first.qids
    assert len(set_aside_copies(path)) == 1 and path.is_file()
    assert path.name in capsys.readouterr().err


def test_a_dropped_checkpoint_reaches_the_runner_console(tmp_path, monkeypatch):
    from knowledge_lm.run.cell import readable_checkpoint

    notices = tmp_path / "slot-0.notices"
    monkeypatch.setenv(NOTICES_ENV, str(notices))
    checkpoint = tmp_path / "last.ckpt"
    checkpoint.write_bytes(b"half a checkpoint")
    assert not readable_checkpoint(checkpoint) and not checkpoint.exists()
    (line,) = take_notices(notices)
    assert "last.ckpt" in line and "dropped" in line
    assert take_notices(notices) == []  # taken once


def test_set_aside_cache_keeps_what_it_moves(tmp_path):
    folder = tmp_path / "cache-entry"
    folder.mkdir()
    (folder / "x").write_text("kept")
    moved = set_aside_cache(folder, "test")
    assert moved is not None and (moved / "x").read_text() == "kept" and not folder.exists()
    assert set_aside_cache(folder, "test") is None  # moved already by another process


def test_each_job_slot_has_its_own_notices_file(tmp_path):
    from knowledge_lm.sweep.runner import make_slots

    slots = make_slots(2, [], True, False, tmp_path / "runs")
    paths = [slot.env[NOTICES_ENV] for slot in slots]
    assert len(set(paths)) == 2 and all(path.endswith(".notices") for path in paths)


def test_a_truncated_cached_kg_is_set_aside_and_rebuilt(prepared, tokenizer, capsys):
    """A damaged ``kg/generated-*/triples.tsv`` gives the links an intact KG gives (it once gave close=0 to all)."""
    data, cache, _ = prepared
    noisy = KnowledgeConfig(link_noise=0.2)
    [kg_dir] = (cache / "kg").iterdir()
    assert set(json.loads((kg_dir / "manifest.json").read_text())["files"]) == {
        "triples.tsv",
        "relations.tsv",
        "entities.jsonl",
    }
    intact = shutil.copytree(cache, cache.with_name("intact"))
    triples = kg_dir / "triples.tsv"
    triples.write_bytes(triples.read_bytes()[:40])
    prepare(data, tokenizer, noisy, cache, progress=False)
    healed = load_prepared(data, tokenizer, noisy, cache)
    intact_data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=intact, max_length=48, **SIZES)
    prepare(intact_data, tokenizer, noisy, intact, progress=False)
    expected = load_prepared(intact_data, tokenizer, noisy, intact)
    assert [row["links"] for row in healed["train"]] == [row["links"] for row in expected["train"]]
    assert any(link["close"] for row in healed["train"] for link in row["links"])
    assert len(set_aside_copies(kg_dir)) == 1 and "triples.tsv is 40 bytes" in capsys.readouterr().err


def test_a_truncated_erica_corpus_is_set_aside_and_built_again(tmp_path, monkeypatch, capsys):
    from knowledge_lm.methods.erica import corpus as erica_corpus

    records = [{"text": f"document {i}", "entities": [], "relations": []} for i in range(20)]
    builds = []
    monkeypatch.setattr(erica_corpus, "build_erica_corpus", lambda *args, **kwargs: builds.append(args) or records)
    first, path = erica_corpus.cached_corpus("generated", tmp_path)
    assert erica_corpus.cached_corpus("generated", tmp_path)[0] == first == records and len(builds) == 1
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:5]))  # whole lines: it parses, short
    assert erica_corpus.cached_corpus("generated", tmp_path)[0] == records and len(builds) == 2
    assert len(set_aside_copies(path)) == 1 and "bytes," in capsys.readouterr().err


def test_a_garbage_json_cache_is_set_aside(tmp_path, capsys):
    from knowledge_lm.core.caches import read_cached_json

    path = tmp_path / "gold.json"
    assert read_cached_json(path) is None  # none yet
    path.write_text('{"gold": [1, 0')
    assert read_cached_json(path) is None and len(set_aside_copies(path)) == 1 and not path.exists()
    path.write_text('{"gold": 3}')
    assert read_cached_json(path, lambda value: isinstance(value["gold"], list)) is None
    path.write_text('{"gold": [1, 0]}')
    assert read_cached_json(path) == {"gold": [1, 0]}
    assert "gold.json: corrupt cache" in capsys.readouterr().err
