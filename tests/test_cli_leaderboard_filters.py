"""``klm leaderboard --datasets ... --methods ...``: pages of the chosen datasets with the chosen methods (and the
baseline every Δ is against), written to their own folder."""

from helpers import stored_result

from knowledge_lm.cli import main
from knowledge_lm.core.results import Cell, write_json_atomic


def test_filters_choose_pages_and_rows(tmp_path, capsys, monkeypatch):
    results, out = tmp_path / "results", tmp_path / "pages"
    for dataset, task in (("glue", "rte"), ("generated", "facts")):
        for method in ("baseline", "kam", "knowbert"):
            cell = Cell(method, dataset, task, 1.0, 1, "minilm")
            write_json_atomic(cell.result_path(results), stored_result(cell))
    rendered = {}

    def render_page(kind, name, inputs, out_dir, data_dir, **options):
        rendered[name] = sorted({result["cell"]["method"] for _, result in inputs})
        return f"{name}\n"

    monkeypatch.setattr("knowledge_lm.report.leaderboard.render_page", render_page)
    monkeypatch.setenv("KLM_CACHE_DIR", str(tmp_path / "cache"))
    args = ["leaderboard", "--results-dir", str(results), "--out", str(out), "--datasets", "glue", "--methods", "kam"]
    assert main(args) == 0
    assert rendered == {"glue": ["baseline", "kam"]}  # no README, speed or LAMA page of a filtered build
    assert capsys.readouterr().out.strip() == f"wrote {out / 'glue.md'}"


def test_filters_need_their_own_folder_and_known_names(tmp_path, capsys):
    assert main(["leaderboard", "--datasets", "glue"]) == 2
    assert "name their own --out" in capsys.readouterr().err
    assert main(["leaderboard", "--methods", "nosuch", "--out", str(tmp_path)]) == 2
    assert "unknown method 'nosuch'" in capsys.readouterr().err
