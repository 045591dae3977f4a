"""Provenance fields a stored result predates, filled in afterwards and marked as filled in.

A result from before the fields existed lacks ``versions["knowledge-lm"]`` and ``data["data_hashes"]``. The
version is read from ``pyproject.toml`` at the result's own commit (git). The data hashes are those of the data
directory now, written only where the examples are provably the ones the cell read: the ids' hashes recomputed
now equal the ``split_hashes`` the cell recorded, or, for a result from before those, its train subset's hash
and its evaluation splits' sizes. ``data["data_hashes_backfilled"]`` says when, from where and by which check.

    python -m knowledge_lm.sweep.backfill [RESULTS_DIR] [--data-dir DIR] [--dry-run]
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

from knowledge_lm.core.errors import KlmError
from knowledge_lm.run.provenance import REPO_ROOT


def commit_version(commit: str) -> str | None:
    """The knowledge-lm version in ``pyproject.toml`` at ``commit``; None where git cannot show it."""
    from knowledge_lm.run.provenance import project_version_text

    shown = subprocess.run(
        ["git", "show", f"{commit}:pyproject.toml"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    return project_version_text(shown.stdout) if shown.returncode == 0 else None


def data_check(result: dict, data) -> str | None:
    """How ``data`` (the result's data module, its splits read) was checked to hold the examples the cell read:
    "split_hashes" or "subset_hash+eval_sizes"; None where it was not (the hashes would describe other data)."""
    from knowledge_lm.core.subsets import fraction_subset, subset_hash

    stored, splits = result["data"], data.read_labelled()
    if stored.get("split_hashes"):
        now = {split: subset_hash([r["id"] for r in records], range(len(records))) for split, records in splits.items()}
        return "split_hashes" if now == stored["split_hashes"] else None
    train = splits["train"]
    ids = [record["id"] for record in train]
    chosen = fraction_subset(ids, data.task_kind.strata(train), result["cell"]["fraction"], stored["subset_seed"])
    sizes = {split: len(splits[split]) for split in stored.get("eval_sizes", {}) if split in splits}
    same = subset_hash(ids, chosen) == stored["subset_hash"] and sizes == stored.get("eval_sizes")
    return "subset_hash+eval_sizes" if same else None


def result_data(result: dict, data_dir=None):
    """The data module of ``result``'s dataset, task and dataset options, its labelled splits read (no tokenizer:
    reading the records needs none)."""
    from knowledge_lm.core.registry import DATASETS

    options = {name: value for name, value in result["config"]["dataset_options"].items() if name != "knowledge"}
    data = DATASETS.get(result["cell"]["dataset"])(task=result["cell"]["task"], data_dir=data_dir, **options)
    data.read_labelled()
    return data


def backfill(path: Path, data_dir=None, dry_run: bool = False) -> str:
    """Fill in what ``path``'s result lacks; returns what happened, in a few words."""
    from knowledge_lm.core.results import write_json_atomic
    from knowledge_lm.run.provenance import git_commit, records_sha256

    result = json.loads(path.read_text())
    done = []
    if not (result.get("versions") or {}).get("knowledge-lm"):
        version = commit_version(result["git"]["commit"])
        if version:
            result.setdefault("versions", {})["knowledge-lm"] = version
            done.append("version")
    if not result["data"].get("data_hashes"):
        data = result_data(result, data_dir)
        check = data_check(result, data)
        if check is None:
            return "data differs from what the cell read: left as it is"
        result["data"]["data_hashes"] = {split: records_sha256(records) for split, records in data.splits.items()}
        result["data"]["data_hashes_backfilled"] = {
            "commit": git_commit()["commit"],
            "data_dir": str(data.data_dir) if data.data_dir else None,
            "check": check,
        }
        done.append(f"data hashes ({check})")
    if done and not dry_run:
        write_json_atomic(path, result)
    return ", ".join(done) or "nothing missing"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m knowledge_lm.sweep.backfill", description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", nargs="?", type=Path, default=REPO_ROOT / "results")
    parser.add_argument("--data-dir", help="data directory (or DATA_DIR)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be filled in; write nothing")
    args = parser.parse_args(argv)
    from knowledge_lm.core.results import SUPERSEDED_DIR

    paths = sorted(
        path
        for path in args.results_dir.rglob("f*-s*.json")
        if SUPERSEDED_DIR not in path.relative_to(args.results_dir).parts and "predictions" not in path.name
    )
    outcomes: dict[str, int] = {}
    for path in paths:
        try:
            outcome = backfill(path, args.data_dir, args.dry_run)
        except KlmError as error:
            outcome = f"not filled in: {error}"
        if outcome != "nothing missing":
            print(f"{path.relative_to(args.results_dir)}: {outcome}")
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    for outcome, count in sorted(outcomes.items()):
        print(f"{count:5d}  {outcome}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
