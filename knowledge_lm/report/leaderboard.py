"""Leaderboards regenerated from the results store alone: ``leaderboards/<dataset>.md`` and the answer at a glance,
``leaderboards/README.md`` (``knowledge_lm.report.glance``).

The stages, one module each: ``knowledge_lm.report.frame`` (results → frame, kept predictions and groups, degenerate
cells), ``knowledge_lm.report.papers`` (the papers' tables and figures, ``leaderboards/papers/``),
``knowledge_lm.report.protocol`` (versions, commits, selection and degenerate cells as the pages say them),
``knowledge_lm.report.claims`` (the papers' claims judged from the store, ``leaderboards/claims.md``),
``knowledge_lm.report.comparisons`` (t-tests, bootstrap comparisons, per-family scores, knowledge used against the
controls, frequency buckets), ``knowledge_lm.report.references`` (the † rows) and ``knowledge_lm.report.pages`` (the
markdown and figures) and ``knowledge_lm.report.glance`` (the README).
"""

import hashlib
import json
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from knowledge_lm.core.caches import read_cached_json
from knowledge_lm.core.paths import benchmarks_dir, project_path
from knowledge_lm.core.results import PRETRAINING_DIR, PROBES_DIR, predictions_path, result_files, write_json_atomic
from knowledge_lm.report.claims import claims_path, judged_claims, render_claims
from knowledge_lm.report.coverage import all_coverage, coverage_files, read_coverage
from knowledge_lm.report.derived import keeping_derived
from knowledge_lm.report.frame import (
    degenerate_reason,
    kept_groups,
    kept_predictions,
    kept_run,
    results_frame,
    table_backbone,
)
from knowledge_lm.report.glance import render_glance
from knowledge_lm.report.gold import stored_gold
from knowledge_lm.report.pages import dataset_notes, render_dataset, render_probes
from knowledge_lm.report.papers import papers_frame, report_split_cells, write_papers
from knowledge_lm.report.pretraining import render_pretraining, store_runs
from knowledge_lm.report.sanity import SANITY_NUMBERS

# The backbones whose results the committed leaderboards show, the base size first: a smoke run on another (tiny, a
# local directory) renders only when asked for (``klm leaderboard --backbones``).
DEFAULT_BACKBONES = ("mpnet-base", "minilm")
REPORT_CODE = sorted(Path(__file__).parent.glob("*.py"))

console = Console(stderr=True)


def page_fingerprint(page: Path, inputs: list[Path], settings) -> str:
    """What a page is made of, cheaply: its input files' paths, sizes and modification times (results,
    predictions, the report's code, references and notes), ``settings`` (the data directory, the backbones)
    and the page as it was written; a page whose fingerprint is the one of its last build is not rebuilt."""
    stats = [(str(path), path.stat().st_mtime_ns, path.stat().st_size) for path in inputs if path.is_file()]
    written = hashlib.sha256(page.read_bytes()).hexdigest() if page.is_file() else None
    blob = json.dumps([stats, str(settings), written], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def leaderboard_state_file(out_dir: Path, cache_dir: Path) -> Path:
    """Where the incremental build of the pages in ``out_dir`` records their fingerprints (``write_leaderboards``'
    ``state_file``): one file per output folder, named by its resolved path, so that ``--force`` drops that folder's
    state alone."""
    folder = str(Path(out_dir).expanduser().resolve())
    return Path(cache_dir) / "leaderboards" / f"{hashlib.sha256(folder.encode()).hexdigest()[:16]}.json"


def chosen_files(results_dir, backbones, datasets, methods) -> list:
    """The stored results (``(path, result)``) the pages show: of ``datasets`` and ``methods`` where given (the
    baseline always); the backbones left out are named in one line (the dataset pages keep ``backbones`` alone)."""
    files = result_files(results_dir)
    left_out = sorted(
        {table_backbone(r) for _, r in files if backbones is not None and table_backbone(r) not in backbones}
    )
    if left_out:
        console.print(
            f"leaderboards: results of backbone(s) {', '.join(left_out)} left out (shown: {', '.join(backbones)}); "
            f"`klm leaderboard --backbones {','.join(left_out)} --out DIR` renders them"
        )
    if datasets is None and methods is None:
        return files
    return [
        (path, result)
        for path, result in files
        if (datasets is None or result["cell"]["dataset"] in datasets)
        and (methods is None or result["cell"]["method"] in (*methods, "baseline"))
    ]


def planned_pages(out_dir: Path, results_dir, by_dataset: dict, filtered: bool) -> dict[Path, tuple]:
    """Each page to build, ``path: (kind, name, inputs)``: the dataset pages, then (unless ``filtered``) the README,
    the speed, pretraining and LAMA pages where there are records for them."""
    pages = {out_dir / f"{dataset}.md": ("dataset", dataset, chosen) for dataset, chosen in sorted(by_dataset.items())}
    every_file = [file for chosen in by_dataset.values() for file in chosen]
    if by_dataset and not filtered:
        pages[out_dir / "README.md"] = ("glance", "README", every_file)
    speed_records = [] if filtered else sorted((Path(results_dir) / "speed").glob("*.json"))
    probes = [] if filtered else sorted((Path(results_dir) / PROBES_DIR).glob("lama-*.json"))
    pretraining = [] if filtered else sorted((Path(results_dir) / PRETRAINING_DIR).glob("*.json"))
    if speed_records:  # with every cell: the base size's cell times beside MiniLM's
        pages[out_dir / "speed.md"] = ("speed", "speed", (speed_records, every_file))
    if pretraining:
        pages[out_dir / "pretraining.md"] = ("pretraining", "pretraining", pretraining)
    if probes:
        pages[out_dir / "lama.md"] = ("lama", "lama", probes)
    return pages


def page_inputs(name: str, paths: list[Path]) -> list[Path]:
    """The files a page is made of (``page_fingerprint``): the report's code, the references, the page's notes,
    the stored sanity numbers (the generated page's table and the relational verdicts read them), its results and
    their predictions."""
    inputs = REPORT_CODE + [benchmarks_dir() / "references.yaml", benchmarks_dir() / "notes" / f"{name}.md"]
    inputs += [project_path("results") / SANITY_NUMBERS]
    inputs += [claims_path()] if name == "README" else []
    return inputs + paths + [predictions_path(path) for path in paths]


def write_leaderboards(
    results_dir=Path("results"),
    out_dir=Path("leaderboards"),
    data_dir=None,
    *,
    backbones: tuple[str, ...] | None = None,
    state_file: Path | None = None,
    datasets: tuple[str, ...] | None = None,
    methods: tuple[str, ...] | None = None,
    store_derived: bool = True,
) -> list[Path]:
    """Every dataset's page (and the speed and LAMA pages) from ``results_dir``, with a progress bar over the
    pages; returns the pages written. ``data_dir`` gives the gold that kept predictions are checked against and
    scored with, and their examples' groups, where the store keeps none (``knowledge_lm.report.gold``).
    ``backbones``: the backbones whose results the dataset pages show (by ``table_backbone``; None: all); the others
    are named in one line. With ``state_file``, a page whose inputs
    are unchanged since the build recorded there (``page_fingerprint``) is skipped. ``datasets`` and ``methods``
    (None: all) filter the dataset pages (the baseline always stays: every Δ is against it); a filtered build writes
    no README, speed or LAMA page. The numbers derived from the gold are kept in the store
    (``knowledge_lm.report.derived``) by an unfiltered build with ``store_derived`` alone: any other writes nothing
    outside ``out_dir``.

    Paper-style tables: rows are methods, one column group per train fraction, each cell the mean ± sample std over
    seeds of the task's main metric on the reported split, with n. Best mean per column in bold. A cell with no result
    is "—", never averaged over. Each method is compared with the baseline seed by seed (same seed, same train subset):
    a paired t-test over the seeds both ran; ↑ / ↓ after a cell mark a difference whose Benjamini–Hochberg q over the
    page's comparisons is below 0.05, and a table per task gives Δ with its interval, n, p and q, and, where both kept
    their predictions, the paired bootstrap over test examples (``knowledge_lm.report.bootstrap``: 95 % interval of Δ
    and its p). Degenerate cells (one class predicted, or selected at their first evaluation) are flagged and left out
    of every comparison, and only the newest split and scorer version of a task is shown
    (``knowledge_lm.report.protocol``). A cell's predictions count as kept where the reported split's gold (the
    store's, else recomputed from the data directory: ``knowledge_lm.report.gold``) has the sha256 its predictions
    file holds. The papers' own numbers appear only as reference rows marked †, from ``benchmarks/references.yaml``.
    Output is deterministic: the same results and data give the same bytes.

    A page whose examples fall in groups (the generated task's statement families: text, answered from the sentence
    alone, and type, one_hop, two_hop, which need the knowledge graph) opens with each method's score per family, a
    bootstrap interval over the family's examples, marked where it lies above chance: does a method use the graph at
    all? Each method also stands against its counterfactual controls (``comparisons.KNOWLEDGE_CONTROLS``: the same cells
    with the knowledge shuffled or zeroed, or ERICA's MLM-only checkpoint): Δ with a paired bootstrap interval over the
    examples, in the family table where there is one, else in a table per task where a control was run.
    """
    kept_run.cache_clear()  # predictions files may have changed since the last regeneration in this process
    stored_gold.cache_clear()
    out_dir = Path(out_dir)
    filtered = datasets is not None or methods is not None
    by_dataset = results_by_dataset(chosen_files(results_dir, backbones, datasets, methods), backbones)
    pages = planned_pages(out_dir, results_dir, by_dataset, filtered)

    state = (read_cached_json(state_file, lambda value: isinstance(value, dict)) if state_file else None) or {}
    out_dir.mkdir(parents=True, exist_ok=True)
    every_file = [file for chosen in by_dataset.values() for file in chosen]
    frame = papers_frame(every_file, store_runs(results_dir)) if by_dataset and not filtered else None
    judged = judged_claims(report_split_cells(frame), results_dir) if frame is not None else []
    with keeping_derived(results_dir, store=store_derived and not filtered) as derived:
        written = build_pages(
            pages,
            out_dir,
            state,
            options=(data_dir, backbones, datasets, methods),
            filtered=filtered,
            results_dir=results_dir,
            judged=judged,
        )
        # A dataset whose page was rendered again, beside the README, used every number of it still current: the
        # others are stale. (A page skipped as unchanged looked none up: its dataset's numbers stay.)
        if not filtered and out_dir / "README.md" in written:
            derived.prune = {pages[page][1] for page in written if pages[page][0] == "dataset"}
        if frame is not None:  # a filtered build writes the chosen dataset pages alone
            written += write_papers(every_file, out_dir / "papers", judged, frame)
            written += write_if_changed(out_dir / "claims.md", render_claims(judged))
    if state_file is not None:
        write_json_atomic(state_file, state)
    return written


def write_if_changed(path: Path, text: str) -> list[Path]:
    """Write ``text`` to ``path`` where it differs from what is there; ``[path]`` where it did."""
    if path.is_file() and path.read_text() == text:
        return []
    path.write_text(text)
    return [path]


def build_pages(
    pages: dict[Path, tuple],
    out_dir: Path,
    state: dict,
    *,
    options: tuple,
    filtered: bool,
    results_dir=None,
    judged: list = (),
) -> list[Path]:
    """Render each of ``pages`` (``planned_pages``) whose fingerprint is not the one ``state`` recorded, with a
    progress bar; records the new fingerprints in ``state``. Returns the pages written (an unchanged one is
    skipped). ``options``: the build's data directory, backbones, datasets and methods; ``results_dir``: where the
    measured knowledge coverage lies (``knowledge_lm.report.coverage``); ``judged``: the claims' verdicts
    (``claims.judged_claims``) the README opens with."""
    data_dir, backbones = options[:2]
    written = []
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console, transient=True
    ) as bar:
        overall = bar.add_task("leaderboards", total=len(pages))
        for page, (kind, name, inputs) in pages.items():
            bar.update(overall, description=f"leaderboards: {page.name}")
            paths = [path for path, _ in inputs] if kind in ("dataset", "glance") else inputs
            if kind == "speed":
                paths = inputs[0] + [path for path, _ in inputs[1]]
            inputs_read = page_inputs(name, paths)
            if results_dir is not None and kind in ("dataset", "glance"):  # which control pairs with which ERICA
                inputs_read += sorted((Path(results_dir) / PRETRAINING_DIR).glob("*.json"))
            if results_dir is not None and kind in ("dataset", "glance"):
                inputs_read += coverage_files(results_dir, name if kind == "dataset" else None)
            fingerprint = page_fingerprint(page, inputs_read, options if filtered else (data_dir, backbones))
            key = str(page.resolve())
            if state.get(key) != fingerprint:
                if kind == "dataset":  # its figures are all drawn again: none it no longer makes stays behind
                    for figure in (out_dir / "figures").glob(f"{name}-*.png"):
                        figure.unlink()
                text = render_page(kind, name, inputs, out_dir, data_dir, results_dir=results_dir, judged=judged)
                if text is not None:
                    page.write_text(text)
                    written.append(page)
                    state[key] = page_fingerprint(page, inputs_read, (data_dir, backbones))
            bar.advance(overall)
    return written


def results_by_dataset(files: list, backbones: tuple[str, ...] | None) -> dict[str, list]:
    """``files`` (``(path, result)``) of the ``backbones`` (by ``table_backbone``; None: all) by dataset, datasets in
    order."""
    by_dataset: dict[str, list] = {}
    for path, result in files:
        if backbones is None or table_backbone(result) in backbones:
            by_dataset.setdefault(result["cell"]["dataset"], []).append((path, result))
    return dict(sorted(by_dataset.items()))


def page_frame(inputs: list, data_dir, results_dir=None) -> tuple[pd.DataFrame, dict[str, list], dict[str, list[str]]]:
    """The frame of a page's ``(path, result)`` files (``results_frame``: their kept predictions, groups, degenerate
    cells and the pretraining runs of ``results_dir``'s records), with the gold answers and example groups of the
    kept predictions by their sha256."""
    predictions, golds = kept_predictions(inputs, data_dir)
    groups, groupings = kept_groups(inputs, predictions, golds, data_dir)
    degenerate = [degenerate_reason(path, result) for path, result in inputs]
    results = [result for _, result in inputs]
    return results_frame(results, predictions, groups, degenerate, runs=store_runs(results_dir)), golds, groupings


def render_page(
    kind: str, name: str, inputs: list, out_dir: Path, data_dir, *, results_dir=None, judged: list = ()
) -> str | None:
    """The text of one page of ``kind``: ``speed`` from its records, ``lama`` from its probes, ``dataset`` (``name``'s
    page) or ``glance`` (the README over every dataset) from its ``(path, result)`` files (None where they hold no
    metric), with the knowledge coverage measured in ``results_dir``."""
    if kind == "speed":
        from knowledge_lm.report.speed import render_speed

        notes = dataset_notes("speed")
        records, cells = inputs
        return render_speed([json.loads(p.read_text()) for p in records], [r for _, r in cells]) + "\n".join(notes)
    if kind == "lama":
        return render_probes([json.loads(p.read_text()) for p in inputs])
    if kind == "pretraining":
        records = [(path, json.loads(path.read_text())) for path in inputs]
        current = {
            (record.get("checkpoint_checksum"), record.get("recorded_at"))
            for path, record in records
            if path.stem == record.get("checkpoint")
        }
        return render_pretraining([record for _, record in records], current)
    frame, golds, groupings = page_frame(inputs, data_dir, results_dir)
    if frame.empty:
        return None
    if kind == "glance":
        coverage = all_coverage(results_dir) if results_dir else None
        return render_glance(frame, golds, groupings, coverage, judged=list(judged), figures=out_dir / "figures")
    coverage = read_coverage(results_dir, name) if results_dir else None
    return render_dataset(name, frame, out_dir / "figures", golds, groupings, coverage=coverage)
