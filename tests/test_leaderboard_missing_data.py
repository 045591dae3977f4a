"""Pages never degrade silently (issue 29, item 6): without the data a page needs, `klm leaderboard` fails in one
line (rc 2) instead of writing thinner pages; its incremental state is per output folder."""

from test_leaderboard import kept_result

from knowledge_lm.cli import main
from knowledge_lm.core.io import default_cache_dir
from knowledge_lm.report.leaderboard import leaderboard_state_file


def results_with_predictions(tmp_path):
    results = tmp_path / "results"
    for method in ("baseline", "better"):
        for seed in (1, 2):
            kept_result(results, method, seed, 50.0 + seed if method == "baseline" else 90.0 + 2 * seed, list)
    return results


def leaderboard(results, out, *args) -> int:
    return main(["leaderboard", "--results-dir", str(results), "--out", str(out), "--backbones", "tiny", *args])


def test_without_the_data_a_page_needs_the_leaderboard_fails_in_one_line(tmp_path, capsys):
    from knowledge_lm.report.gold import split_gold

    results = results_with_predictions(tmp_path)
    frozen = tmp_path / "data" / "generated"  # the dataset without its dev and test splits: no gold
    frozen.mkdir(parents=True)
    (frozen / "train.jsonl").write_text("")
    split_gold.cache_clear()
    out = tmp_path / "pages"
    assert leaderboard(results, out, "--data-dir", str(tmp_path / "data")) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: no gold for generated/facts") and "--data-dir" in line
    assert not list(out.glob("*.md"))
    split_gold.cache_clear()
    assert leaderboard(results, out) == 0  # the data back: the pages are written, not "up to date"
    assert (out / "generated.md").is_file()


def test_the_incremental_state_is_per_output_folder_and_force_drops_its_own(tmp_path, capsys):
    results = results_with_predictions(tmp_path)
    first, second = tmp_path / "first", tmp_path / "second"
    assert leaderboard(results, first) == 0 and leaderboard(results, second) == 0
    states = [leaderboard_state_file(folder, default_cache_dir()) for folder in (first, second)]
    assert states[0] != states[1] and all(state.is_file() for state in states)
    capsys.readouterr()
    assert leaderboard(results, first) == 0 and "every page up to date" in capsys.readouterr().out
    second_state = states[1].read_text()
    assert leaderboard(results, first, "--force") == 0
    assert "wrote" in capsys.readouterr().out
    assert states[1].read_text() == second_state
    assert leaderboard(results, second) == 0 and "every page up to date" in capsys.readouterr().out
