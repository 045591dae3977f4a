"""``--set``: cells trained with settings other than their config's are cells of their own (an automatic variant),
never counted as the stored cells of the config's settings."""

from pathlib import Path

from knowledge_lm.cli import main
from knowledge_lm.run.config import load_sweep, settings_tag, with_overrides

REPO = Path(__file__).resolve().parents[1]


def dry_run(capsys, *args) -> list[str]:
    code = main(["bench", "--config", str(REPO / "benchmarks" / "glue.yaml"), "--dry-run", *args,
                 "--results-dir", str(REPO / "results"), "--runs-dir", str(REPO / "runs")])  # fmt: skip
    assert code == 0
    return capsys.readouterr().out.splitlines()


def test_readme_set_example_runs_new_cells(capsys):
    stored = dry_run(capsys)
    assert "45 cells: 45 already done, 0 to run" in stored
    overridden = dry_run(capsys, "--set", "lr=3e-5", "--set", "epochs=5")
    assert "45 cells: 0 already done, 45 to run" in overridden
    tag = settings_tag({"epochs": 5, "lr": 3e-5})
    assert any(f"/minilm/{tag}/f1-s1" in line for line in overridden)


def test_override_equal_to_the_config_keeps_the_keys(capsys):
    assert "45 cells: 45 already done, 0 to run" in dry_run(capsys, "--set", "lr=5e-5")


def test_execution_settings_keep_the_keys():
    sweep = load_sweep(REPO / "benchmarks" / "glue.yaml")
    assert with_overrides(sweep, {"checkpoint_minutes": 1, "logger": "none"}) is sweep


def test_named_variants_keep_their_name_and_settings():
    sweep = load_sweep(REPO / "benchmarks" / "glue.yaml")
    sweep.variants = {"noisy": {"method_options": {"alpha": 0.2}}}
    changed = with_overrides(sweep, {"dropout": 0.2})
    tag = settings_tag({"dropout": 0.2})
    assert list(changed.variants) == [f"noisy-{tag}"] and changed.overrides == {"dropout": 0.2}
    assert changed.train_config("rte", {"dropout": 0.2}, f"noisy-{tag}").method_options == {"alpha": 0.2}
