"""klm attention: a sentence's attention maps, baseline beside KAM, drawn to a PNG; bad input gives one error line."""

import pytest
import torch

from knowledge_lm.cli import main

TEXT = "The Academy of Fine Arts is located in Northern Maidan."
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("backbone", ["tiny", "tiny-mpnet"])
def test_attention_writes_a_png_for_the_tiny_backbone(backbone, tmp_path, capsys):
    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.data.generated import GeneratedDataModule
    from knowledge_lm.methods.kam import Kam

    # A KAM cell's checkpoint holds its encoder's weights (the convs included) under "encoder.".
    trained = Kam(load_backbone(backbone, attn_implementation="eager", seed=3)[0], GeneratedDataModule.spec("facts"))
    checkpoint = tmp_path / "kam.ckpt"
    torch.save({"state_dict": trained.state_dict()}, checkpoint)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["the academy of fine arts teaches painting"] * 5 + ["painting in the north"] * 5))
    out = tmp_path / "maps" / "academy.png"
    code = main(
        [
            "attention",
            "--text",
            TEXT,
            "--backbone",
            backbone,
            "--out",
            str(out),
            "--layer",
            "0",
            "--head",
            "1",
            "--option",
            "expansion_k=2",
            "--pmi-corpus",
            str(corpus),
            "--kam-checkpoint",
            str(checkpoint),
        ]
    )
    assert code == 0 and f"wrote {out}" in capsys.readouterr().out
    assert out.stat().st_size > 1000 and out.read_bytes().startswith(PNG_SIGNATURE)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--text", "  "], "--text is empty"),
        (["--text", TEXT, "--method", "nope"], "unknown method 'nope'"),
        (["--text", TEXT, "--method", "baseline"], "is not a KAM method"),
        (["--text", TEXT, "--head", "first"], "expected a head index or mean"),
        (["--text", TEXT, "--layer", "7"], "outside the backbone's 2 layers"),
        (["--text", TEXT, "--kam-checkpoint", "/does/not/exist.ckpt"], "does not exist"),
    ],
)
def test_attention_bad_input(tmp_path, capsys, args, message):
    code = main(["attention", "--backbone", "tiny", "--out", str(tmp_path / "a.png"), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert not (tmp_path / "a.png").exists()
