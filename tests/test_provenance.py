"""Provenance a result records: the package's version, a dirty flag over code and configs, hashes of the data read."""

import subprocess
from importlib import metadata

import pytest

from knowledge_lm.run import provenance
from knowledge_lm.run.provenance import git_commit, package_version, project_version, records_sha256, versions


def test_the_package_version_is_recorded_without_package_metadata(monkeypatch):
    """A tree copied to a GPU machine and run without ``pip install`` has no distribution metadata: the version comes
    from the tree's pyproject.toml, which is what left it null in every result before."""
    expected = project_version(provenance.REPO_ROOT / "pyproject.toml")
    assert expected is not None and versions()["knowledge-lm"] == expected

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(provenance.metadata, "version", not_installed)
    assert package_version() == expected


def test_the_package_version_falls_back_to_the_installed_distribution(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)  # installed: no pyproject.toml above the package
    monkeypatch.setattr(provenance.metadata, "version", lambda name: "9.9" if name == "knowledge-lm" else None)
    assert package_version() == "9.9"


def test_project_version_reads_only_the_knowledge_lm_project(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[build-system]\nrequires = ["setuptools"]\n\n[project]\nname = "knowledge-lm"\nversion = "1.2.3"\n'
        'dependencies = [\n    "torch",\n]\n\n[tool.other]\nversion = "7"\n'
    )
    assert project_version(pyproject) == "1.2.3"
    pyproject.write_text('[project]\nname = "another"\nversion = "1.0"\n')
    assert project_version(pyproject) is None
    assert project_version(tmp_path / "missing.toml") is None


def git(root, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True, capture_output=True
    )


@pytest.mark.parametrize(
    "change, dirty",
    [
        ("knowledge_lm/code.py", True),
        ("benchmarks/sweep.yaml", True),
        ("benchmarks/new_sweep.yaml", True),  # untracked
        ("pyproject.toml", True),
        ("README.md", False),
        (None, False),
    ],
)
def test_the_dirty_flag_covers_code_benchmarks_and_configs(tmp_path, monkeypatch, change, dirty):
    monkeypatch.delenv("KLM_GIT_COMMIT", raising=False)
    for name in ("knowledge_lm/code.py", "benchmarks/sweep.yaml", "pyproject.toml", "README.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("committed\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "initial")
    if change is not None:
        (tmp_path / change).write_text("changed\n")
    found = git_commit(tmp_path)
    assert len(found["commit"]) == 40 and found["dirty"] is dirty


def test_records_sha256_is_the_canonical_json_digest_results_stored():
    """The digest stored results hold: each record as ``json.dumps(sort_keys, default=str, compact)``, a line each."""
    import hashlib
    import json
    from pathlib import Path

    records = [{"id": "é", "label": 0.5, "path": Path("a/b"), "spans": [[1, 2]]}, {"text_a": "x\ny", "id": "b"}]
    lines = "".join(json.dumps(r, sort_keys=True, default=str, separators=(",", ":")) + "\n" for r in records)
    assert records_sha256(records) == hashlib.sha256(lines.encode()).hexdigest()


def test_records_sha256_changes_with_any_record_and_not_with_key_order():
    records = [{"id": "a", "text_a": "x", "label": 0}, {"id": "b", "text_a": "y", "label": 1}]
    digest = records_sha256(records)
    assert len(digest) == 64 and digest == records_sha256([dict(reversed(list(r.items()))) for r in records])
    assert records_sha256([records[0], {**records[1], "label": 0}]) != digest
    assert records_sha256(records[::-1]) != digest  # the order read is part of what was read
    assert records_sha256(records[:1]) != digest
