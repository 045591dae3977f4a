"""``klm --version`` and ``klm list``: answered from the registries' entries, importing no method (nor torch)."""

import json

import pytest

from knowledge_lm.cli import main


def test_version(capsys):
    with pytest.raises(SystemExit) as ended:
        main(["--version"])
    assert ended.value.code == 0 and capsys.readouterr().out.startswith("klm (knowledge-lm) ")


def test_list_describes_methods_and_their_options(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("methods: baseline, ")
    kam = out.index(next(line for line in out if line.startswith("  kam: ")))
    assert out[kam].endswith("(needs klm prepare)") and "alpha" in out[kam + 1]
    assert any(line.startswith("dataset glue: tasks ") for line in out)


def test_list_json(capsys):
    assert main(["list", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert entries["methods"]["kam"]["needs_prepare"] and not entries["methods"]["baseline"]["needs_prepare"]
    assert "alpha" in entries["methods"]["kam"]["options"] and entries["methods"]["baseline"]["description"]
    assert "rte" in entries["datasets"]["glue"]["tasks"]
