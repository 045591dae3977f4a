"""Knowledge coverage: what the knowledge methods receive on each dataset, and the gate below which a knowledge
method's verdict on that dataset reads "untestable with this KG" instead of "no difference".

The coverage is measured by ``klm prepare --coverage`` (``knowledge_lm.knowledge.coverage``) into
``results/coverage/<dataset>.json``: per task and split, the share of examples with a linked entity and with a KG
triple, the triples per example, the share of the pairs the task asks about that a KG edge joins, and the alias
linker's precision and recall against the dataset's gold links where it has some. The gate reads the reported split
(test, else dev) of each task.
"""

from pathlib import Path

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import read_json
from knowledge_lm.core.registry import METHODS
from knowledge_lm.core.results import COVERAGE_DIR

# The gate: a task's knowledge reaches the methods when at least half of its examples receive a KG triple and a KG
# edge joins at least 5 % of the pairs it asks about. Below either, a knowledge method has almost nothing to use, so
# its "no difference" says nothing about knowledge injection.
MIN_WITH_TRIPLE = 0.5
MIN_JOINED = 0.05
UNTESTABLE = "untestable with this KG"


def read_coverage(results_dir, dataset: str) -> dict | None:
    """``results/coverage/<dataset>.json``, None where it was not measured or does not read."""
    path = Path(results_dir) / COVERAGE_DIR / f"{dataset}.json"
    if not path.is_file():
        return None
    try:
        coverage = read_json(path)
    except KlmError:
        return None
    return coverage if isinstance(coverage, dict) and isinstance(coverage.get("tasks"), dict) else None


def coverage_files(results_dir, dataset: str | None = None) -> list[Path]:
    """The coverage file of ``dataset`` (every dataset's where None), those that exist: a page's inputs."""
    folder = Path(results_dir) / COVERAGE_DIR
    return sorted(folder.glob(f"{dataset or '*'}.json")) if folder.is_dir() else []


def all_coverage(results_dir) -> dict[str, dict]:
    """Every measured dataset's coverage (``read_coverage``), by dataset."""
    found = {path.stem: read_coverage(results_dir, path.stem) for path in coverage_files(results_dir)}
    return {dataset: coverage for dataset, coverage in found.items() if coverage is not None}


def reported(task_coverage: dict) -> tuple[str, dict] | None:
    """``(split, its coverage)`` of the split a task reports (test, else dev); None where neither was measured."""
    splits = task_coverage.get("splits") or {}
    for split in ("test", "dev"):
        if split in splits:
            return split, splits[split]
    return None


def coverage_words(split: dict) -> str:
    """A split's coverage in a few words: the share of examples with a triple, the median triples per example and
    the share of asked pairs a KG edge joins."""
    return (
        f"{split['with_triple']:.0%} of examples with a triple, median {split['triples_median']:g} per example, "
        f"{split['joined']:.1%} of {split['asked']} joined"
    )


def task_untestable(task_coverage: dict) -> str | None:
    """Why a knowledge verdict on this task cannot be given (its reported split below the gate), else None."""
    found = reported(task_coverage)
    if found is None:
        return None
    split, measured = found
    if measured["with_triple"] >= MIN_WITH_TRIPLE and measured["joined"] >= MIN_JOINED:
        return None
    return f"{UNTESTABLE} (coverage on {split}: {coverage_words(measured)})"


def dataset_untestable(coverage: dict | None) -> str | None:
    """Why a knowledge verdict on the dataset cannot be given: every measured task below the gate (the reason of
    its one task, or a count of them); None where a task passes or nothing was measured."""
    tasks = (coverage or {}).get("tasks") or {}
    reasons = {task: task_untestable(measured) for task, measured in sorted(tasks.items())}
    if not reasons or not all(reasons.values()):
        return None
    if len(set(reasons.values())) == 1:  # one task, or tasks reading the same examples (FewRel's two)
        return next(iter(reasons.values()))
    best = max(tasks, key=lambda task: reported(tasks[task])[1]["joined"])
    split, measured = reported(tasks[best])
    return (
        f"{UNTESTABLE} (coverage on all {len(reasons)} tasks below the gate; the most joined, {best} on {split}: "
        f"{coverage_words(measured)})"
    )


def untestable_reason(results_dir: Path, dataset: str) -> str | None:
    """Why a knowledge verdict on ``dataset`` cannot be given with the KG the cells used (its coverage below the
    gate), in a few words; None where the coverage passes the gate or was not measured."""
    return dataset_untestable(read_coverage(results_dir, dataset))


def is_knowledge_method(method: str) -> bool:
    """Whether ``method`` (a registered name) reads knowledge features; False for a name no class registers."""
    return method in METHODS.names() and METHODS.entry(method).needs_knowledge


def gated(said: str, method: str, reason: str | None) -> str:
    """A verdict as a page says it: a knowledge method's "no difference" reads ``reason`` where the gate gives one."""
    return reason if reason and said == "no difference" and is_knowledge_method(method) else said


def gate_text() -> str:
    """The gate, as the pages state it."""
    return (
        f'A knowledge method\'s "no difference" reads "{UNTESTABLE} (coverage …)" where, on the reported split, fewer '
        f"than {MIN_WITH_TRIPLE:.0%} of the examples receive a KG triple or a KG edge joins fewer than "
        f"{MIN_JOINED:.0%} of the entity pairs the task asks about: the methods then had almost no knowledge to use."
    )


def percent(share) -> str:
    return "—" if share is None else f"{share:.1%}"


def coverage_section(coverage: dict | None) -> list[str]:
    """A dataset page's coverage table: per task and split, what of the KG reached the knowledge methods."""
    if not coverage:
        return []
    lines = [
        "## Knowledge coverage",
        "",
        f"What the knowledge methods received (`klm prepare --coverage`; KG: {coverage.get('kg', '?')}; evaluation "
        f"answers {coverage.get('answers', '?')}; {coverage.get('sample', 'every example')}). Linked: examples with "
        "≥ 1 linked entity; triple: examples whose linked entities touch ≥ 1 KG triple; asked pairs: the two marked "
        "entities (relation classification), each gold fact's entities (document-level RE), else every two linked "
        "entities of an example; joined: the share of them a KG edge joins. Links, precision / recall: the "
        "alias-table linker against the dataset's gold links (OpenEntity's: TAGME's), a mention right where its "
        "span is a gold link's and its top candidate that link's entity; its mentions from every n-gram (the "
        "default, knowledge option mentions=ngrams) or from spaCy's entity spans (mentions=entities). " + gate_text(),
        "",
        "| task | split | examples | linked | with a triple | triples per example (median / mean) | asked pairs "
        "| joined | links from n-grams | links from entity spans | gate |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, measured in sorted(coverage["tasks"].items()):
        verdict = task_untestable(measured)
        gate = "below: " + UNTESTABLE if verdict else "passes"
        for split, row in measured["splits"].items():
            examples = f"{row['examples']:,}" + (
                f" ({row['measured']:,} measured)" if row.get("measured", row["examples"]) < row["examples"] else ""
            )
            lines.append(
                f"| {task} | {split} | {examples} | {percent(row['linked'])} | {percent(row['with_triple'])} | "
                f"{row['triples_median']:g} / {row['triples_mean']:.1f} | {row['asked']}: {row['asked_pairs']:,} | "
                f"{percent(row['joined'])} | {links_text(row, 'ngrams')} | {links_text(row, 'entities')} | "
                f"{gate if reported(measured)[0] == split else ''} |"
            )
    return lines + [""]


def links_text(row: dict, source: str) -> str:
    """A linker's precision / recall against the gold links, "—" where the dataset has none."""
    agreement = (row.get("links") or {}).get(source)
    if not agreement or agreement.get("link_precision") is None:
        return "—"
    return f"{percent(agreement['link_precision'])} / {percent(agreement['link_recall'])}"


def glance_coverage(coverage: dict | None) -> str:
    """A dataset's coverage in the README's row: its reported split's, per task where several; "not measured"."""
    if not coverage or not coverage.get("tasks"):
        return "not measured"
    tasks = coverage["tasks"]
    texts = []
    for task, measured in sorted(tasks.items()):
        found = reported(measured)
        if found is None:
            continue
        _, split = found
        words = f"triple {split['with_triple']:.0%}, joined {split['joined']:.1%}"
        texts.append(f"{task}: {words}" if len(tasks) > 1 else words)
    gate = "below the gate" if dataset_untestable(coverage) else "passes the gate"
    return "; ".join(texts) + f" ({gate})"
