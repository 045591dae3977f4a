"""Leaderboards regenerated from the results store alone: ``leaderboards/<dataset>.md`` and the answer at a glance,
``leaderboards/README.md`` (``knowledge_lm.report.glance``).

Paper-style tables: rows are methods, one column group per train fraction, each cell the mean ±
sample std over seeds of the task's main metric on the reported split, with n. Best mean per column
in bold. A cell with no result is "—", never averaged over. Each method is compared with the baseline
seed by seed (same seed, same train subset): a paired t-test over the seeds both ran; ↑ / ↓ after a
cell mark a difference whose Benjamini–Hochberg q over the page's comparisons is below 0.05, and a
table per task gives Δ with its interval, n, p and q, and, where both kept their predictions, the paired bootstrap
over test examples (``knowledge_lm.report.bootstrap``: 95 % interval of Δ and its p). Degenerate cells (one class
predicted, or selected at their first evaluation) are flagged and left out of every comparison, and only the newest
split and scorer version of a task is shown (``knowledge_lm.report.protocol``). A cell's predictions count as kept where
the reported split's gold, recomputed from the data directory (``knowledge_lm.report.gold``), has the sha256 its
predictions file holds. The papers' own numbers appear only as reference rows marked †, from
``benchmarks/references.yaml``. Output is deterministic: the same results and data give the same bytes.

A page whose examples fall in groups (the generated task's statement families: text, answered from the sentence
alone, and type, one_hop, two_hop, which need the knowledge graph) opens with each method's score per family, a
bootstrap interval over the family's examples, marked where it lies above chance: does a method use the graph at
all? Each method also stands against its counterfactual controls (``comparisons.KNOWLEDGE_CONTROLS``: the same cells
with the knowledge shuffled or zeroed, or ERICA's MLM-only checkpoint): Δ with a paired bootstrap interval over the
examples, in the family table where there is one, else in a table per task where a control was run.

The stages, one module each: ``knowledge_lm.report.frame`` (results → frame, kept predictions and groups, degenerate
cells), ``knowledge_lm.report.protocol`` (versions, commits, selection and degenerate cells as the pages say them),
``knowledge_lm.report.comparisons`` (t-tests, bootstrap comparisons, per-family scores, knowledge used against the
controls, frequency buckets), ``knowledge_lm.report.references`` (the † rows) and ``knowledge_lm.report.pages`` (the
markdown and figures) and ``knowledge_lm.report.glance`` (the README).
"""

import json
from pathlib import Path

from knowledge_lm.report.frame import degenerate_reason, kept_groups, kept_predictions, kept_run, results_frame
from knowledge_lm.report.glance import render_glance
from knowledge_lm.report.pages import render_dataset, render_probes
from knowledge_lm.results import PROBES_DIR, result_files


def write_leaderboards(results_dir=Path("results"), out_dir=Path("leaderboards"), data_dir=None) -> list[Path]:
    """Every dataset's page (and the speed and LAMA pages) from ``results_dir``; ``data_dir`` gives the gold
    that kept predictions are checked against and scored with, and their examples' groups."""
    kept_run.cache_clear()  # predictions files may have changed since the last regeneration in this process
    files = result_files(results_dir)
    predictions, golds = kept_predictions(files, data_dir)
    groups, groupings = kept_groups(files, predictions, golds, data_dir)
    degenerate = [degenerate_reason(path, result) for path, result in files]
    frame = results_frame([result for _, result in files], predictions, groups, degenerate)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for dataset, group in [] if frame.empty else frame.groupby("dataset"):
        path = out_dir / f"{dataset}.md"
        path.write_text(render_dataset(dataset, group, out_dir / "figures", golds, groupings))
        written.append(path)
    if not frame.empty:
        path = out_dir / "README.md"
        path.write_text(render_glance(frame, golds, groupings))
        written.append(path)
    speed_records = sorted((Path(results_dir) / "speed").glob("*.json"))
    if speed_records:
        from knowledge_lm.tools.speed import render_speed  # torch: loaded only where speed was measured

        path = out_dir / "speed.md"
        path.write_text(render_speed([json.loads(p.read_text()) for p in speed_records]))
        written.append(path)
    probes = sorted((Path(results_dir) / PROBES_DIR).glob("lama-*.json"))
    if probes:
        path = out_dir / "lama.md"
        path.write_text(render_probes([json.loads(p.read_text()) for p in probes]))
        written.append(path)
    return written
