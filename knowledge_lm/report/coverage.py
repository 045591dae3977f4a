"""Knowledge coverage: what the knowledge methods receive on each dataset, and the gate below which a knowledge
method's verdict on that dataset reads "untestable with this KG" instead of "no difference"."""

from pathlib import Path

COVERAGE_DIR = "coverage"  # results/coverage/<dataset>.json: the coverage `klm prepare` measured


def untestable_reason(results_dir: Path, dataset: str) -> str | None:
    """Why a knowledge verdict on ``dataset`` cannot be given with the KG the cells used (its coverage below the
    gate), in a few words; None where the coverage passes the gate or was not measured."""
    return None
