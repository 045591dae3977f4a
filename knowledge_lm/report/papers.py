"""The papers' tables and figures as pages, ``leaderboards/papers/<slug>.md``, and their status, ``README.md``.

One page per table or figure of the seed papers (``PAPER_TABLES``), in the paper's layout: the paper's columns
(dataset, metric, train fraction), our methods' rows (mean ± sample std over seeds, from the results store only)
beside the paper's own rows, marked †, from ``benchmarks/references.yaml``. A column the suite cannot fill (a
dataset that is not here, the GLUE test server) still shows the paper's numbers; our cells there are "—". A page
whose table needs data or compute the suite lacks lists the paper's rows, says what is missing and gives the
command that would run it with the user's data. Every reference row renders on some page
(``unrendered_references``). Output is deterministic: the same results give the same bytes.
"""

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import read_yaml
from knowledge_lm.core.paths import benchmarks_dir
from knowledge_lm.core.registry import METHODS, cannot_run
from knowledge_lm.core.results import predictions_path
from knowledge_lm.report.claims import Judged, claim_rows, claims_of_table
from knowledge_lm.report.frame import (
    MISSING,
    degenerate_reason,
    fraction_label,
    frame_memo,
    kept_run,
    results_frame,
    rows_where,
    table_backbone,
)
from knowledge_lm.report.pages import seeds_text
from knowledge_lm.report.protocol import TASK_RECIPES, current_protocol

PAPERS = {
    "000": "SI+SR: Drop Redundant, Shrink Irrelevant",
    "001": "KAM-BERT: Knowledge-Assisted Attention Maps",
    "003": "ERICA: Entity and Relation Understanding via Contrastive Learning",
}
BACKBONE = "MiniLM-L6 (nreimers/MiniLM-L6-H384-uncased: 6 layers, hidden 384)"
COVERED, PARTIAL, NOT_RUNNABLE, NOT_COVERED, NO_NUMBERS, NOT_RUN = (
    "covered",
    "partial",
    "not runnable here",
    "not covered",
    "no numbers",
    "not run",
)
# Why a paper's dataset has no column of ours, by the paper's dataset name (``Column.paper``).
ABSENT_DATASETS = {
    "tacred": "TACRED is LDC-licensed (needs the user's data)",
    "squad_format": "SearchQA / Quasar-T need the user's data",
    "figer": "FIGER needs the user's data",
    "wikihop_masked": "WikiHop is not a dataset of the suite",
    "lama": "no LAMA probe of ours is recorded",
}
ABSENT_METHOD = "no such method in the suite"  # a paper row (ERNIE, MTB, …) with no method of ours beside it
ABSENT_METHODS = ("ERNIE",)  # a paper row named so is of a method the suite lacks, whatever its backbone
# The paper's rows that references.yaml does not record (no method of ours stands beside them), by page.
UNRECORDED_ROWS = {
    "erica-table1": ("CNN", "BiLSTM", "HINBERT", "CorefBERT", "SpanBERT", "ERNIE", "MTB", "CP"),
    "erica-table2": ("MTB", "CP"),
}


@dataclass(frozen=True)
class Column:
    """One column of a paper's table: the paper's ``(dataset, task, metric)`` at ``fraction``, and ours
    (None where the suite has no such data) in ``variant`` ("" for none); ``split``: an evaluation split other than
    the report split (MNLI's ``test_mismatched``: the paper's number under the reference's ``metrics_by_split``),
    "" for the report split."""

    label: str
    fraction: float
    paper: tuple[str, str, str] | None
    ours: tuple[str, str, str] | None = None
    variant: str = ""
    split: str = ""


@dataclass(frozen=True)
class Row:
    """One of our rows: ``method`` (each of its pretraining checkpoints a row of its own) in ``variant``; None
    (the default): each column's variant."""

    method: str
    variant: str | None = None
    label: str = ""


@dataclass(frozen=True)
class Section:
    title: str
    columns: tuple[Column, ...]
    rows: tuple[Row, ...] = ()
    average: bool = False  # GLUE's Avg column: the mean over the section's columns, where a row has them all
    params: bool = False  # GLUE's #Params column


@dataclass(frozen=True)
class PaperTable:
    """A table or figure of a seed paper, its page and its status. ``sources``: the prefixes of the reference rows'
    ``source`` it shows, all rows of the first, of the others only those of a method the page runs."""

    slug: str
    paper: str
    name: str
    caption: str
    status: str
    why: str
    sources: tuple[str, ...] = ()
    sections: tuple[Section, ...] = ()
    differs: str = ""
    command: str = ""
    spectra: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (dataset, task, methods) whose spectra it shows


def glue_columns(
    tasks: list[tuple[str, ...]], fraction: float = 1.0, variants: dict[str, str] | None = None
) -> tuple[Column, ...]:
    """GLUE's columns from ``(label, task, metric[, split])``; ``variants``: a task's sweep variant where its cells
    have one (MRPC's ``balanced`` recipe in the method × dataset matrix)."""
    variants = variants or {}
    return tuple(
        Column(label, fraction, ("glue", task, metric), ("glue", task, metric), variants.get(task, ""), *split)
        for label, task, metric, *split in tasks
    )


# The matrix's GLUE cells (benchmarks/matrix_glue.yaml, matrix_mrpc.yaml, erica_glue.yaml): MRPC under its own recipe.
MATRIX_GLUE_VARIANTS = {task: variant for (dataset, task), (variant, _) in TASK_RECIPES.items() if dataset == "glue"}


MISMATCHED = "test_mismatched"  # MNLI's mismatched evaluation split: every MNLI cell scores it beside ``test``
KAM_GLUE = [
    ("CoLA", "cola", "matthews"),
    ("SST-2", "sst2", "accuracy"),
    ("MRPC F1", "mrpc", "f1"),
    ("MRPC acc", "mrpc", "accuracy"),
    ("STS-B P", "stsb", "pearson"),
    ("STS-B S", "stsb", "spearman"),
    ("QQP F1", "qqp", "f1"),
    ("QQP acc", "qqp", "accuracy"),
    ("MNLI-m", "mnli", "accuracy"),
    ("MNLI-mm", "mnli", "accuracy", MISMATCHED),
    ("QNLI", "qnli", "accuracy"),
    ("RTE", "rte", "accuracy"),
]
ERICA_GLUE = [
    ("MNLI-m", "mnli", "accuracy"),
    ("MNLI-mm", "mnli", "accuracy", MISMATCHED),
    ("QQP", "qqp", "f1"),
    ("QNLI", "qnli", "accuracy"),
    ("SST-2", "sst2", "accuracy"),
    ("CoLA", "cola", "matthews"),
    ("STS-B S", "stsb", "spearman"),
    ("MRPC", "mrpc", "f1"),
    ("RTE", "rte", "accuracy"),
]
# SI+SR's Table 2 (no reference rows: garbled): one MNLI column, STS-B in Pearson as the README gives it.
SISR_GLUE = [
    ("STS-B P", "stsb", "pearson") if column[1] == "stsb" else column for column in ERICA_GLUE if column[0] != "MNLI-mm"
]
FRACTIONS = (0.01, 0.1, 1.0)
SISR_METHODS = tuple(Row(m) for m in ("baseline", "knowbert", "knowbert+si", "knowbert+si+sr"))
ERICA_ABLATIONS = tuple(
    Row(m) for m in ("baseline", "erica-mlm-only", "erica-ed", "erica-rd-cross", "erica-rd-intra", "erica-rd", "erica")
)
NOISE_LEVELS = ("noise0", "noise10", "noise20", "noise30", "noise40", "noise50")
SR_K = ("k1", "k2", "k4", "k8", "k16")
ERICA_PRETRAINING = (
    "ERICA pretrained on our corpus (Re-DocRED, FewRel, LAMA, generated: ~4k documents, batch 8, 800 steps) "
    "instead of ~1M Wikipedia documents at batch 2,048 for 2,500 steps; BERT-base in the paper."
)
REDOCRED_SAMPLE = (
    " Re-DocRED sub-sampled to 700 train / 200 test documents (its dev and test sets: 1 % of train = 7 documents), "
    "against DocRED's 3,053 train documents in the paper."
)
SISR_DIFFERS = (
    "KnowBERT-KAR on MiniLM with our Wikidata-derived KG and linker, not the paper's RoBERTa-initialised "
    "ERNIE/KnowBERT pretrained with Wikidata; the paper does not say dev or test."
)


def noise_section(dataset: str, task: str, metric: str, label: str) -> Section:
    return Section(
        f"{label}: {metric} at 100% by share of wrong links "
        "(the baseline reads no links: its 100% cells at every level)",
        tuple(Column(level, 1.0, None, (dataset, task, metric), level) for level in NOISE_LEVELS),
        (Row("baseline", ""), Row("knowbert", None), Row("knowbert+si+sr", None)),
    )


def k_section(dataset: str, task: str, metric: str, label: str) -> Section:
    return Section(
        f"{label}: {metric} of knowbert+si+sr by k, the number of smallest singular values penalised",
        tuple(
            Column(f"{fraction_label(f)} {k}", f, None, (dataset, task, metric), k) for f in (0.1, 1.0) for k in SR_K
        ),
        (Row("knowbert+si+sr", None),),
    )


PAPER_TABLES = (
    # The SI+SR paper
    PaperTable(
        "sisr-table1",
        "000",
        "Table 1",
        "Results on OpenEntity, TACRED, SearchQA and Quasar-T",
        PARTIAL,
        "OpenEntity is run; TACRED, SearchQA and Quasar-T need the user's data",
        ("SI+SR, Table 1",),
        (
            Section(
                "Table 1 (100% of train)",
                (
                    Column(
                        "OpenEntity P",
                        1.0,
                        ("openentity", "main", "micro_precision"),
                        ("openentity", "main", "micro_precision"),
                    ),
                    Column(
                        "OpenEntity Ma-F1 (= R)",
                        1.0,
                        ("openentity", "main", "micro_recall"),
                        ("openentity", "main", "micro_recall"),
                    ),
                    Column(
                        "OpenEntity Mi-F1", 1.0, ("openentity", "main", "micro_f1"), ("openentity", "main", "micro_f1")
                    ),
                    Column("TACRED P", 1.0, ("tacred", "main", "micro_precision")),
                    Column("TACRED R", 1.0, ("tacred", "main", "micro_recall")),
                    Column("TACRED F1", 1.0, ("tacred", "main", "micro_f1")),
                    Column("SearchQA EM", 1.0, ("squad_format", "searchqa", "exact_match")),
                    Column("SearchQA F1", 1.0, ("squad_format", "searchqa", "f1")),
                    Column("Quasar-T EM", 1.0, ("squad_format", "quasart", "exact_match")),
                    Column("Quasar-T F1", 1.0, ("squad_format", "quasart", "f1")),
                ),
                SISR_METHODS,
            ),
        ),
        SISR_DIFFERS
        + " The paper's 'Ma-F1' column is ERNIE's micro recall (Mi-F1 is the harmonic mean of P and it); ours is "
        "micro recall.",
        "klm bench --table sisr-table1; TACRED: klm bench --dataset tacred --method "
        "baseline,knowbert,knowbert+si,knowbert+si+sr --data-dir DIR; SearchQA / Quasar-T: klm bench --dataset "
        "squad_format --tasks searchqa,quasart "
        "--method baseline,knowbert,knowbert+si,knowbert+si+sr --data-dir DIR",
    ),
    PaperTable(
        "sisr-table2",
        "000",
        "Table 2",
        "Results on GLUE dev",
        PARTIAL,
        "our GLUE tasks are run for knowbert±SI±SR by the matrix configs (MRPC under its balanced recipe); the "
        "extraction of the paper's table is garbled, so it has no reference rows",
        ("SI+SR, Table 2",),
        (
            Section(
                "GLUE dev (100%)",
                glue_columns(SISR_GLUE, variants=MATRIX_GLUE_VARIANTS),
                SISR_METHODS,
                average=True,
                params=True,
            ),
        ),
        SISR_DIFFERS + " Our GLUE runs use the tasks and splits of benchmarks/matrix_glue.yaml.",
        "klm bench --config benchmarks/matrix_glue.yaml --method baseline,knowbert,knowbert+si,knowbert+si+sr; "
        "the same with benchmarks/matrix_mrpc.yaml",
    ),
    PaperTable(
        "sisr-fig1",
        "000",
        "Figure 1",
        "Negative knowledge infusion: (a) F1 by entity frequency, (b) influence of irrelevant knowledge",
        PARTIAL,
        "a figure (no numbers in the text); (a) is the frequency-bucket table of the dataset pages, (b) the noise "
        "curve of sisr-fig5",
        command="klm bench --table sisr-fig5d",
    ),
    PaperTable(
        "sisr-fig2",
        "000",
        "Figure 2",
        "Cosine of the corresponding angles between the fine-tuned and pretrained weights",
        NOT_COVERED,
        "the suite does not measure principal angles between weight matrices",
    ),
    PaperTable(
        "sisr-fig3",
        "000",
        "Figure 3",
        "Singular values of the feature matrices at different fine-tuning ratios",
        PARTIAL,
        "a figure; drawn here as a table of the singular values that the cells kept with their predictions, "
        "per train fraction (cells run before spectra were kept have none)",
        differs=SISR_DIFFERS + " Features: the task head's input on the reported split, not the paper's layer.",
        command="klm bench --table sisr-table1",
        spectra=(
            ("openentity", "main", ("baseline", "knowbert", "knowbert+si", "knowbert+si+sr")),
            ("semeval2010", "main", ("baseline", "knowbert", "knowbert+si", "knowbert+si+sr")),
        ),
    ),
    PaperTable(
        "sisr-fig4",
        "000",
        "Figure 4",
        "Knowledge infusion with selective injection and spectral regularisation (a diagram)",
        NO_NUMBERS,
        "an illustration of the method",
    ),
    PaperTable(
        "sisr-fig5",
        "000",
        "Figure 5",
        "(a) selective injection by frequency, (b) singular values with / without SR, (c) sensitivity to k, "
        "(d) noise tolerance",
        PARTIAL,
        "a figure (no numbers in the text): (c) and (d) as tables below, (a) and (b) on the dataset pages",
        (),
        (
            k_section("openentity", "main", "micro_f1", "(c) OpenEntity"),
            k_section("semeval2010", "main", "semeval_macro_f1", "(c) SemEval-2010"),
            noise_section("generated", "facts", "accuracy", "(d) generated"),
            noise_section("openentity", "main", "micro_f1", "(d) OpenEntity"),
        ),
        SISR_DIFFERS + " Noise: a wrong linker's top candidate of another type (link_noise), not the paper's "
        "replaced entities.",
        "klm bench --table sisr-fig5c; klm bench --table sisr-fig5d",
    ),
    # The KAM-BERT paper
    PaperTable(
        "kam-fig1",
        "001",
        "Figure 1",
        "BERT's attention map for a query-ad case",
        NO_NUMBERS,
        "an illustration on proprietary ad data",
    ),
    PaperTable(
        "kam-fig2",
        "001",
        "Figure 2",
        "KAM-BERT's calculation flow (a diagram)",
        NO_NUMBERS,
        "an illustration of the method",
    ),
    PaperTable(
        "kam-table1",
        "001",
        "Table 1",
        "Comparison of model backbones on GLUE",
        PARTIAL,
        "the paper reports the GLUE test server, which is not reachable here; ours are on our GLUE evaluation "
        "split, and only the tasks benchmarks/glue.yaml runs",
        ("KAM-BERT, Table 1",),
        (
            Section(
                "GLUE (100%)",
                glue_columns(KAM_GLUE, variants=MATRIX_GLUE_VARIANTS),
                (Row("baseline"), Row("kam")),
                average=True,
                params=True,
            ),
        ),
        "Our split, not GLUE test (MNLI-m and MNLI-mm: GLUE's matched and mismatched dev sets); WNLI is not a task "
        "here. MRPC under its balanced recipe (benchmarks/matrix_mrpc.yaml), as on the README and the GLUE page.",
        "klm bench --table kam-table1",
    ),
    PaperTable(
        "kam-table2",
        "001",
        "Table 2",
        "Results for question answering (SearchQA, Quasar-T, CosmosQA)",
        PARTIAL,
        "CosmosQA is run; SearchQA and Quasar-T need the user's data",
        ("KAM-BERT, Table 2",),
        (
            Section(
                "Table 2 (100%)",
                (
                    Column("SearchQA EM", 1.0, ("squad_format", "searchqa", "exact_match")),
                    Column("SearchQA F1", 1.0, ("squad_format", "searchqa", "f1")),
                    Column("Quasar-T EM", 1.0, ("squad_format", "quasart", "exact_match")),
                    Column("Quasar-T F1", 1.0, ("squad_format", "quasart", "f1")),
                    Column("CosmosQA", 1.0, ("cosmosqa", "main", "accuracy"), ("cosmosqa", "main", "accuracy")),
                ),
                (Row("baseline"), Row("kam")),
            ),
        ),
        "BERT-Large / RoBERTa-Large in the paper. The paper's SearchQA and Quasar-T cells are not shown as † cells: "
        "they are printed as unlabelled pairs 'a/b' whose metrics (EM / F1 presumably) the paper does not name.",
        "klm bench --config benchmarks/cosmosqa.yaml --method baseline,kam; SearchQA / Quasar-T: klm bench "
        "--dataset squad_format --tasks searchqa,quasart --method baseline,kam --data-dir DIR",
    ),
    PaperTable(
        "kam-table3",
        "001",
        "Table 3",
        "LAMA knowledge probing",
        NOT_RUN,
        "no LAMA probe of ours is recorded (`klm probe` writes leaderboards/lama.md where one is); the paper probes a "
        "KAM-BERT-Large masked LM, and KAM here is fine-tuned per task, with no masked-LM head to probe",
        ("KAM-BERT, Table 3",),
        (
            Section(
                "LAMA (precision@1)",
                tuple(
                    Column(label, 1.0, ("lama", task, "precision_at_1"))
                    for label, task in (
                        ("SQuAD", "squad"),
                        ("Google-RE", "google_re"),
                        ("T-REx", "trex"),
                        ("ConceptNet", "conceptnet"),
                    )
                ),
            ),
        ),
        "BERT-Large / RoBERTa-Large in the paper; our probes are of the masked-LM checkpoints we have.",
        "klm probe --backbone DIR",
    ),
    PaperTable(
        "kam-table4",
        "001",
        "Table 4",
        "The α sweep (caption misprinted as 'Results for Ad Relevance')",
        PARTIAL,
        "CoLA is run per α; SearchQA needs the user's data, Google-RE is a LAMA probe",
        ("KAM-BERT, Table 4",),
        (
            Section(
                "α sweep (100%)",
                (
                    Column("CoLA", 1.0, ("glue", "cola", "matthews"), ("glue", "cola", "matthews")),
                    Column("Google-RE", 1.0, ("lama", "google_re", "precision_at_1")),
                ),
                tuple(Row("kam", f"alpha{a}", f"kam α={a}") for a in ("0", "0.1", "0.2", "0.4")),
            ),
        ),
        "The paper's SearchQA column is not recorded as reference rows.",
        "klm bench --table kam-table4",
    ),
    PaperTable(
        "kam-table5",
        "001",
        "Table 5",
        "Query-ad relevance AUC, #Params and #FLOPs",
        NOT_RUNNABLE,
        "proprietary ad relevance data",
    ),
    PaperTable(
        "kam-table6",
        "001",
        "Table 6",
        "Ablation study on GLUE",
        PARTIAL,
        "the ablations are run on our GLUE tasks and split (the paper's split is not stated)",
        ("KAM-BERT, Table 6", "KAM-BERT, Table 1"),
        (
            Section(
                "GLUE (100%)",
                glue_columns(KAM_GLUE),
                tuple(
                    Row(m) for m in ("baseline", "kam", "kam-no-pmi", "kam-no-phrase", "kam-no-entity", "kam-no-conv")
                ),
                average=True,
            ),
        ),
        "BERT-Base in the paper. MRPC under the shared GLUE recipe, the only one the ablations ran: its baseline "
        "and kam cells are not those of the README and kam-table1 (MRPC's balanced recipe there).",
        "klm bench --table kam-table6",
    ),
    PaperTable(
        "kam-fig3",
        "001",
        "Figure 3",
        "Attention maps of BERT and KAM-BERT",
        NO_NUMBERS,
        "a qualitative figure; `klm attention-maps` draws ours",
    ),
    # The ERICA paper
    *(
        PaperTable(f"erica-fig{n}", "003", f"Figure {n}", caption, NO_NUMBERS, "an illustration")
        for n, caption in (
            (1, "An example document and its relational graph"),
            (2, "The entity discrimination task"),
            (3, "The relation discrimination task"),
        )
    ),
    PaperTable(
        "erica-table1",
        "003",
        "Table 1",
        "Document-level RE (DocRED) at 1 / 10 / 100%",
        PARTIAL,
        "run on Re-DocRED (the revised DocRED); the paper's DocRED test server is not reachable",
        ("ERICA, Table 1",),
        (
            Section(
                "DocRED (paper) / Re-DocRED revised (ours)",
                tuple(
                    Column(
                        f"{fraction_label(f)} {label}",
                        f,
                        ("redocred", "docred", metric),
                        ("redocred", "revised", metric),
                    )
                    for f in FRACTIONS
                    for label, metric in (("F1", "f1"), ("IgF1", "ign_f1"))
                ),
                (Row("baseline"), Row("erica")),
            ),
        ),
        ERICA_PRETRAINING + REDOCRED_SAMPLE + " Ours: Re-DocRED's revised test split.",
        "klm bench --table erica-table1",
    ),
    PaperTable(
        "erica-table2",
        "003",
        "Table 2",
        "Sentence-level RE (TACRED, SemEval-2010 Task 8) at 1 / 10 / 100%",
        PARTIAL,
        "SemEval-2010 is run; TACRED needs the user's data (LDC)",
        ("ERICA, Table 2",),
        (
            Section(
                "Test F1",
                tuple(Column(f"TACRED {fraction_label(f)}", f, ("tacred", "main", "micro_f1")) for f in FRACTIONS)
                + tuple(
                    Column(
                        f"SemEval {fraction_label(f)}",
                        f,
                        ("semeval2010", "mean_pool", "semeval_macro_f1"),
                        ("semeval2010", "mean_pool", "semeval_macro_f1"),
                    )
                    for f in FRACTIONS
                ),
                (Row("baseline"), Row("erica")),
            ),
        ),
        ERICA_PRETRAINING,
        "klm bench --table erica-table2; TACRED: klm bench --dataset tacred --tasks mean_pool --method erica "
        "--backbone checkpoints/erica-minilm --data-dir DIR",
    ),
    PaperTable(
        "erica-table3",
        "003",
        "Table 3",
        "Entity typing (FIGER)",
        NOT_RUNNABLE,
        "FIGER needs the user's data; OpenEntity stands in on leaderboards/openentity.md",
        ("ERICA, Table 3",),
        (
            Section(
                "FIGER test (100%)",
                (
                    Column("Ma-F1", 1.0, ("figer", "main", "loose_macro_f1")),
                    Column("Mi-F1", 1.0, ("figer", "main", "loose_micro_f1")),
                    Column("OpenEntity Mi-F1 (ours, stand-in)", 1.0, None, ("openentity", "main", "micro_f1")),
                ),
                (Row("baseline"), Row("erica")),
            ),
        ),
        ERICA_PRETRAINING,
        "klm bench --dataset figer --method erica --backbone checkpoints/erica-minilm --data-dir DIR",
    ),
    PaperTable(
        "erica-table4",
        "003",
        "Table 4",
        "WikiHop (standard and masked) at 1 / 10 / 100%",
        NOT_RUNNABLE,
        "WikiHop is not a dataset of the suite",
    ),
    PaperTable(
        "erica-table5",
        "003",
        "Table 5",
        "Extractive QA (SQuAD, TriviaQA, NaturalQA) at 10 / 100%",
        NOT_RUNNABLE,
        "SQuAD / TriviaQA / NQ in the paper's MRQA form need the user's data",
        command="klm bench --dataset squad_format --tasks squad --method erica --backbone checkpoints/erica-minilm "
        "--data-dir DIR",
    ),
    PaperTable(
        "erica-table6",
        "003",
        "Table 6",
        "Ablation study (DocRED 10%, FIGER, WikiHop masked 10%)",
        PARTIAL,
        "DocRED as Re-DocRED at 10%, FIGER as OpenEntity; WikiHop is not here",
        ("ERICA, Table 6",),
        (
            Section(
                "Ablations",
                (
                    Column("DocRED 10% IgF1", 0.1, ("redocred", "docred", "ign_f1"), ("redocred", "revised", "ign_f1")),
                    Column("FIGER Mi-F1", 1.0, ("figer", "main", "loose_micro_f1")),
                    Column("OpenEntity 10% Mi-F1 (ours, stand-in)", 0.1, None, ("openentity", "main", "micro_f1")),
                    Column("WikiHop (m) 10%", 0.1, ("wikihop_masked", "main", "accuracy")),
                ),
                ERICA_ABLATIONS,
            ),
        ),
        ERICA_PRETRAINING + REDOCRED_SAMPLE,
        "klm bench --table erica-table6",
    ),
    PaperTable(
        "erica-table7",
        "003",
        "Table 7",
        "Effects of the pretraining data's entity distribution",
        NOT_COVERED,
        "needs ERICA pretraining on entity-shifted corpora",
    ),
    PaperTable(
        "erica-fig4",
        "003",
        "Figure 4",
        "Impacts of relation distribution shifting",
        NOT_COVERED,
        "needs ERICA pretraining on relation-shifted corpora",
    ),
    PaperTable(
        "erica-fig5",
        "003",
        "Figure 5",
        "Impacts of the pretraining data's size",
        NOT_COVERED,
        "needs ERICA pretraining on shares of the corpus",
    ),
    PaperTable(
        "erica-table8",
        "003",
        "Table 8",
        "Entity encoding strategies",
        NOT_COVERED,
        "the suite has one entity encoding per task (mean-pooled mentions)",
    ),
    PaperTable(
        "erica-fig6",
        "003",
        "Figure 6",
        "t-SNE of entity and relation embeddings",
        NO_NUMBERS,
        "a qualitative figure",
    ),
    PaperTable(
        "erica-table9",
        "003",
        "Table 9",
        "GLUE dev",
        PARTIAL,
        "our GLUE evaluation splits (MNLI, QNLI and QQP from samples) and MRPC under the matrix's balanced recipe",
        ("ERICA, Table 9",),
        (
            Section(
                "GLUE dev (100%)",
                glue_columns(ERICA_GLUE, variants=MATRIX_GLUE_VARIANTS),
                (Row("baseline"), Row("erica")),
                average=True,
                params=True,
            ),
        ),
        ERICA_PRETRAINING + " The paper's CoLA column (BERT 57.2, ERICA_BERT 57.9) is not shown as † cells: its "
        "caption calls it accuracy, which the values do not look like (CoLA is scored in Matthews correlation), so "
        "its metric is unclear. STS-B in Spearman, as the paper reports it (Pearson on the README).",
        "klm bench --config benchmarks/erica_glue.yaml; klm bench --config benchmarks/matrix_mrpc.yaml --method erica",
    ),
    PaperTable(
        "erica-table10",
        "003",
        "Table 10",
        "Full ablation study at 1 / 10 / 100%",
        PARTIAL,
        "DocRED as Re-DocRED, FIGER as OpenEntity; WikiHop is not here",
        ("ERICA, Table 10", "ERICA, Table 6", "ERICA, Table 1"),
        (
            Section(
                "Ablations",
                tuple(
                    Column(
                        f"DocRED {fraction_label(f)}",
                        f,
                        ("redocred", "docred", "ign_f1"),
                        ("redocred", "revised", "ign_f1"),
                    )
                    for f in FRACTIONS
                )
                + tuple(
                    Column(f"WikiHop (m) {fraction_label(f)}", f, ("wikihop_masked", "main", "accuracy"))
                    for f in FRACTIONS
                )
                + (
                    Column("FIGER 100%", 1.0, ("figer", "main", "loose_micro_f1")),
                    Column("OpenEntity 100% (ours, stand-in)", 1.0, None, ("openentity", "main", "micro_f1")),
                ),
                ERICA_ABLATIONS,
            ),
        ),
        ERICA_PRETRAINING + REDOCRED_SAMPLE,
        "klm bench --table erica-table10",
    ),
    PaperTable(
        "erica-table11",
        "003",
        "Table 11",
        "Extractive QA at 1%",
        NOT_RUNNABLE,
        "SQuAD / TriviaQA / NQ need the user's data",
        command="klm bench --dataset squad_format --tasks squad --fractions 0.01 --method baseline,erica "
        "--backbone checkpoints/erica-minilm --data-dir DIR",
    ),
    PaperTable(
        "erica-table12",
        "003",
        "Table 12",
        "Joint NER and RE (CoNLL04, ADE) with SpERT",
        NOT_RUNNABLE,
        "CoNLL04 / ADE and a SpERT head are not in the suite",
    ),
)


# The evaluation splits other than the report split that some column shows (their cells are rows of their own).
OTHER_SPLITS = frozenset(c.split for t in PAPER_TABLES for section in t.sections for c in section.columns if c.split)


def load_all_references() -> list[dict]:
    path = benchmarks_dir() / "references.yaml"
    return read_yaml(path) if path.is_file() else []


def page_references(table: PaperTable, references: list[dict]) -> list[tuple[int, dict]]:
    """``(index, reference)`` of the rows ``table`` shows: all of its first source's, of its other sources those of
    a method the page has a row for (a reference's source up to its first " (" names the table)."""
    methods = {row.method for section in table.sections for row in section.rows}
    chosen = []
    for index, ref in enumerate(references):
        source = ref["source"].split(" (")[0]  # "ERICA, Table 10 (Full results ...)": not Table 1's
        primary = bool(table.sources) and source == table.sources[0]
        secondary = source in table.sources[1:] and ref.get("method") in methods
        if primary or secondary:
            chosen.append((index, ref))
    return chosen


def reference_value(refs: list[dict], column: Column):
    if column.paper is None:
        return None
    dataset, task, metric = column.paper
    for ref in refs:
        if ref["dataset"] == dataset and ref.get("fraction") == column.fraction:
            metrics = ref.get("metrics_by_split", {}).get(column.split, {}) if column.split else ref["metrics"]
            value = metrics.get(task, {}).get(metric)
            if value is not None:
                return value
    return None


def average_text(values: list, averaged: list[int]) -> str:
    """The mean of ``values`` at the ``averaged`` columns, "—" where one is missing."""
    picked = [values[i] for i in averaged]
    return f"{sum(picked) / len(picked):.1f}" if picked and None not in picked else MISSING


def reference_rows(
    section: Section, chosen: list[tuple[int, dict]], averaged: list[int]
) -> tuple[list[list[str]], set[int]]:
    """The section's † rows (one per paper row: a method's rows of several sources together) and the indices of
    the references that gave one of their cells."""
    groups: dict[tuple, list[tuple[int, dict]]] = {}
    for index, ref in chosen:
        # A method's rows of several tables together (ERICA's Table 10 beside Table 6's 10% column); a sweep's by
        # the paper's row name (Table 4's α on CoLA and on Google-RE).
        on_page = any(row.method == ref.get("method") for row in section.rows)
        key = ("method", ref["method"]) if on_page and not ref.get("variant") else ("row", ref["row"], ref["backbone"])
        groups.setdefault(key, []).append((index, ref))
    lines, used = [], set()
    for members in groups.values():
        refs = [ref for _, ref in members]
        values = [reference_value(refs, column) for column in section.columns]
        if all(value is None for value in values):
            continue
        for index, ref in members:
            if any(reference_value([ref], column) is not None for column in section.columns):
                used.add(index)
        first = refs[0]
        label = f"† {first['row']} [{first['backbone']}, {splits_text(refs, section)}]"
        cells = [MISSING if value is None else f"{value:.1f}" for value in values]
        if section.average:  # the paper's own Avg as printed where it has one, else over the columns shown
            printed = next((ref["average"] for ref in refs if ref.get("average") is not None), None)
            cells.append(f"{printed:.1f} (paper's)" if printed is not None else average_text(values, averaged))
        if section.params:
            cells.append(str(first.get("params", MISSING)))
        lines.append([label] + cells)
    return lines, used


def splits_text(refs: list[dict], section: Section) -> str:
    """The split a † row's numbers are on, as the paper reports them: one, or each dataset's where its columns
    mix them (ERICA's ablations: DocRED and FIGER test, WikiHop dev)."""
    shown = [ref for ref in refs if any(reference_value([ref], column) is not None for column in section.columns)]
    splits = {ref["dataset"]: ref.get("split") or "split not stated" for ref in shown or refs}
    if len(set(splits.values())) == 1:
        return next(iter(splits.values()))
    return ", ".join(f"{dataset} {split}" for dataset, split in sorted(splits.items()))


def column_cells(frame: pd.DataFrame, name: str, row: Row, column: Column) -> pd.DataFrame:
    """The cells of method ``name`` (a checkpoint of ``row``'s method) in ``column``; none where the column has no
    data of ours."""
    if column.ours is None or not len(frame):
        return frame.iloc[:0]
    dataset, task, metric = column.ours
    variant = column.variant if row.variant is None else row.variant
    cells = rows_where(
        frame, method=name, variant=variant, dataset=dataset, task=task, metric=metric, fraction=column.fraction
    )
    if column.split:
        return rows_where(cells, split=column.split)
    return frame_memo(cells, ("not other splits",), lambda: cells[~cells.split.isin(OTHER_SPLITS)])


def section_has_results(section: Section, frame: pd.DataFrame, name: str, row: Row) -> bool:
    """Whether method ``name`` (a checkpoint of ``row``'s method) has a cell in any of ``section``'s columns."""
    return any(len(column_cells(frame, name, row, column)) for column in section.columns)


def our_rows(section: Section, frame: pd.DataFrame) -> tuple[list[list[str]], list[list]]:
    """Our rows of ``section``: per row, each checkpoint of its method ("erica ⟨erica-minilm⟩") with a result in
    the section a row, mean ± std over seeds per column (a method with no result in any column is still shown, all
    "—"); and their means (None: no result), without the Avg and #Params cells."""
    lines, all_means = [], []
    for row in section.rows:
        names = sorted({m for m in frame["method"].unique() if m.split(" ⟨")[0] == row.method}) if len(frame) else []
        names = [name for name in names if section_has_results(section, frame, name, row)]
        for name in names or [row.method]:
            cells, means, params = [], [], None
            for column in section.columns:
                text, mean = MISSING, None
                cells_of = column_cells(frame, name, row, column)
                if len(cells_of):
                    mean, text, _ = seeds_text(cells_of.sort_values("seed"))
                    params = params or cells_of["parameters"].iloc[0]
                cells.append(text)
                means.append(mean)
            all_means.append(means)
            if section.params:
                cells.append(f"{params / 1e6:.1f}M" if params else MISSING)
            label = row.label or name
            if row.label and name != row.method:
                label = f"{row.label} {name[len(row.method) :].strip()}"
            lines.append([label] + cells)
    return lines, all_means


def table_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def row_names(frame: pd.DataFrame, row: Row) -> list[str]:
    """The method labels of ``row``'s method in ``frame`` (each pretraining checkpoint its own), or the method."""
    names = sorted({m for m in frame["method"].unique() if m.split(" ⟨")[0] == row.method}) if len(frame) else []
    return names or [row.method]


def missing_cells(section: Section, frame: pd.DataFrame) -> tuple[int, list[str]]:
    """How many of ``section``'s (row, column of ours) pairs have cells, and each row's columns that have none,
    named with the reason: the method cannot run on the dataset, or it has not run there."""
    filled, missing = 0, []
    for row in section.rows:
        empty = []
        for column in section.columns:
            if column.ours is None:
                continue
            if any(len(column_cells(frame, name, row, column)) for name in row_names(frame, row)):
                filled += 1
            else:
                empty.append(column)
        if empty:
            reason = cannot_run(row.method, empty[0].ours[0]) if row.method in METHODS.names() else None
            label = row.label or row.method
            missing.append(f"{label} in {', '.join(c.label for c in empty)}: {reason or 'not run yet'}")
    return filled, missing


def table_status(table: PaperTable, frame: pd.DataFrame, references: list[dict]) -> tuple[str, list[str]]:
    """``table``'s status as its cells give it, and everything of the paper's table that has none of ours, each
    with its reason: a column of a dataset the suite lacks (``ABSENT_DATASETS``), a row of ours without cells, a
    paper row with no method of ours (``ABSENT_METHOD``). Covered: every runnable row and column has cells and no
    column is missing; partial: some; not run: none. A table without sections, or one not runnable here, keeps
    its declared status."""
    if not table.sections or table.status == NOT_RUNNABLE:
        return table.status, []
    filled, missing, absent = 0, [], {}
    for section in table.sections:
        section_filled, section_missing = missing_cells(section, frame)
        filled += section_filled
        missing += section_missing
        for column in section.columns:
            if column.ours is None and column.paper is not None:
                reason = ABSENT_DATASETS.get(column.paper[0], "not a dataset of ours")
                absent.setdefault(reason, []).append(column.label)
    columns = "; ".join(f"{', '.join(labels)} ({reason})" for reason, labels in absent.items())
    named = [f"columns without ours: {columns}"] if absent else []
    named += [f"rows without cells: {'; '.join(missing)}"] if missing else []
    named += unmatched_rows(table, references)
    if not filled:
        return NOT_RUN, named
    return (COVERED if not absent and not missing else PARTIAL), named


def unmatched_rows(table: PaperTable, references: list[dict]) -> list[str]:
    """The paper's rows on ``table``'s page with no row of ours beside them, with why: another backbone than the
    paper's BERT-base (ours is one backbone), or no such method in the suite (``UNRECORDED_ROWS`` too: rows
    references.yaml does not record). A row name that stands beside ours in another column (KAM's α) is none."""
    chosen = [ref for _, ref in page_references(table, references)]
    matched = {str(ref["row"]) for ref in chosen if ref.get("method")}
    other_backbone, no_method = set(), set(UNRECORDED_ROWS.get(table.slug, ()))
    for ref in chosen:
        if not ref.get("method") and str(ref["row"]) not in matched:
            lacking = str(ref["row"]).startswith(ABSENT_METHODS) or ref["backbone"] == "bert-base"
            (no_method if lacking else other_backbone).add(str(ref["row"]))
    said = (
        [f"paper rows of another backbone (ours is one): {', '.join(sorted(other_backbone))}"] if other_backbone else []
    )
    return said + ([f"paper rows without ours ({ABSENT_METHOD}): {', '.join(sorted(no_method))}"] if no_method else [])


def claims_lines(table: PaperTable, judged: list[Judged]) -> list[str]:
    """The rows of leaderboards/claims.md of the claims that rest on ``table`` (none: nothing)."""
    mine = claims_of_table(judged, table.paper, table.name)
    if not mine:
        return []
    return [
        "## The paper's claims on this table, tested",
        "",
        *claim_rows(mine),
        "",
        "Verdicts and their rule: [claims.md](../claims.md), where every claim is corrected together.",
        "",
    ]


def render_paper_table(
    table: PaperTable, frame: pd.DataFrame, references: list[dict], judged: list[Judged] = ()
) -> tuple[str, set[int]]:
    """``table``'s page, opening with its claims' rows (``judged``), then its status as its cells give it
    (``table_status``), and the indices of the reference rows it renders."""
    chosen = page_references(table, references)
    status, missing = table_status(table, frame, references)
    lines = [
        f"# {table.name} of {PAPERS[table.paper]}",
        "",
        *claims_lines(table, list(judged)),
        f"*{table.caption}.* Status: **{status}** ({table.why}).",
        "",
        *[f"- {named}." for named in missing],
        *([""] if missing else []),
        f"Our backbone: {BACKBONE}{backbone_parameters(frame)}; the paper's rows are marked †, copied from "
        "benchmarks/references.yaml, and never compared with ours.",
    ]
    if table.differs:
        lines += ["", f"What differs from the paper: {table.differs}"]
    if table.command:
        lines += ["", f"Run: `{table.command}`"]
    used: set[int] = set()
    for section in table.sections:
        header = ["row"] + [column.label for column in section.columns]
        header += ["Avg"] if section.average else []
        header += ["#Params"] if section.params else []
        ours, means = our_rows(section, frame)
        # Avg over the columns every one of our rows has (all columns where we have none), so that it compares
        averaged = [i for i in range(len(section.columns)) if all(m[i] is not None for m in means)]
        averaged = averaged or list(range(len(section.columns)))
        if section.average:
            ours = [
                row[: len(section.columns) + 1] + [average_text(m, averaged)] + row[len(section.columns) + 1 :]
                for row, m in zip(ours, means)
            ]
        refs, section_used = reference_rows(section, chosen, averaged)
        used |= section_used
        lines += ["", f"## {section.title}", ""] + table_lines(header, ours + refs)
        if section.average:
            names = ", ".join(section.columns[i].label for i in averaged)
            lines += [
                "",
                f"Avg: the mean over {names} (the columns all our rows have), for every row of ours and each † row "
                "without one; \"(paper's)\": the paper's own Avg column as printed, over its own tasks and metrics.",
            ]
        if section.params:
            lines += ["", "#Params: ours counts the backbone (the method's added modules are not recorded)."]
    if table.spectra:
        lines += spectra_lines(table.spectra, frame)
    if not table.sections and chosen:
        lines += ["", "## The paper's rows", ""]
        lines += [f"- † {ref['row']} ({ref['dataset']}): {ref['metrics']}" for _, ref in chosen]
        used |= {index for index, _ in chosen}
    if not table.sections and not table.spectra:
        lines += ["", "Nothing of this table or figure is rendered here: " + table.why + "."]
    return "\n".join(lines) + "\n", used


SPECTRUM_RANKS = (1, 2, 4, 8, 16, 32, 64, 128)


def spectra_lines(spectra: tuple[tuple[str, str, tuple[str, ...]], ...], frame: pd.DataFrame) -> list[str]:
    """Per dataset, a table of the singular values (descending) of the head's features on the reported split that
    each method's cells kept with their predictions: the i-th largest, mean over the seeds that kept one, per
    train fraction (the SI+SR paper's Fig. 3 draws them by fine-tuning ratio)."""
    lines = []
    for dataset, task, methods in spectra:
        header = ["method", "fraction", "n"] + [f"σ{rank}" for rank in SPECTRUM_RANKS] + ["σ last"]
        rows = []
        cells = (
            frame[(frame.dataset == dataset) & (frame.task == task) & (frame.variant == "")] if len(frame) else frame
        )
        for method in methods:
            for fraction in FRACTIONS:
                chosen = cells[(cells.method == method) & (cells.fraction == fraction)] if len(cells) else cells
                found = (
                    [s for s in chosen.drop_duplicates("seed").sort_values("seed")["spectrum"] if s]
                    if len(chosen)
                    else []
                )
                if not found:
                    continue
                width = min(len(s) for s in found)
                mean = [sum(s[i] for s in found) / len(found) for i in range(width)]
                values = [f"{mean[rank - 1]:.3g}" if rank <= width else MISSING for rank in SPECTRUM_RANKS]
                rows.append([method, fraction_label(fraction), str(len(found))] + values + [f"{mean[-1]:.3g}"])
        lines += ["", f"## {dataset} {task}: singular values of the features", ""]
        lines += table_lines(header, rows) if rows else ["No cell of these methods kept its spectrum yet."]
    return lines


def backbone_parameters(frame: pd.DataFrame) -> str:
    if not len(frame) or "parameters" not in frame:
        return ""
    counts = sorted(set(frame["parameters"].dropna()))
    return f", {counts[0] / 1e6:.1f}M parameters" if counts else ""


def render_readme(pages: dict[str, PaperTable], statuses: dict[str, tuple[str, list[str]]]) -> str:
    """The papers' README: each table's page, its status and what is missing (``statuses``: ``table_status`` by
    slug), with the reasons."""
    lines = [
        "# The papers' tables and figures",
        "",
        "One page per table or figure of the seed papers (`klm leaderboard` writes them from the results store): "
        "our rows beside the paper's, marked †. Status, from the cells: covered (every row and column of the paper "
        "that the suite can run has our cells, and no column is missing), partial (some do: what is missing is "
        "named with its reason), not run (none has cells yet); declared: not runnable here (data or compute the "
        "suite lacks), not covered (an analysis the suite does not make), no numbers (an illustration). The papers' "
        "claims, tested: [claims.md](../claims.md).",
        "",
        "| paper | table | what | status | why; what is missing |",
        "|---|---|---|---|---|",
    ]
    for slug, table in pages.items():
        status, missing = statuses[slug]
        why = "; ".join([table.why, *missing])
        lines.append(f"| {table.paper} | [{table.name}]({slug}.md) | {table.caption} | {status} | {why} |")
    counts = pd.Series([status for status, _ in statuses.values()]).value_counts().sort_index()
    lines += ["", "; ".join(f"{status}: {n}" for status, n in counts.items())]
    return "\n".join(lines) + "\n"


def papers_frame(files: list[tuple[Path, dict]]) -> pd.DataFrame:
    """The results of ``files`` as a frame of the current split and scorer versions, with each cell's backbone
    parameter count."""
    if not files:
        return pd.DataFrame()
    results = [result for _, result in files]
    degenerate = [degenerate_reason(path, result) for path, result in files]
    # A cell's scores on another evaluation split (MNLI mismatched) as rows of that split, the cell's verdict kept.
    others = [
        ({**result, "report_split": split}, reason)
        for result, reason in zip(results, degenerate)
        for split in sorted(OTHER_SPLITS)
        if split in result["metrics"]
    ]
    frame = results_frame(
        results + [result for result, _ in others], None, None, degenerate + [reason for _, reason in others]
    )
    counts = {}
    for result in results:
        counts[(result["cell"]["method"], table_backbone(result))] = result["backbone"].get("parameters")
    frame["parameters"] = [
        counts.get((cell_method, backbone)) for cell_method, backbone in zip(frame["cell_method"], frame["backbone"])
    ]
    wanted = {(dataset, task) for table in PAPER_TABLES for dataset, task, _ in table.spectra}
    spectra = {
        cell_key(result): kept_spectrum(path)
        for path, result in files
        if (result["cell"]["dataset"], result["cell"]["task"]) in wanted
    }
    keys = zip(frame.dataset, frame.task, frame.cell_method, frame.variant, frame.fraction, frame.seed, frame.backbone)
    frame["spectrum"] = [spectra.get(key) for key in keys]
    return current_protocol(frame)[0]


def cell_key(result: dict) -> tuple:
    cell = result["cell"]
    return (
        cell["dataset"],
        cell["task"],
        cell["method"],
        cell.get("variant", ""),
        cell["fraction"],
        cell["seed"],
        table_backbone(result),
    )


def kept_spectrum(path: Path) -> list[float] | None:
    """The singular values a cell's predictions file holds (they do not depend on the gold: read unchecked)."""
    sidecar = predictions_path(path)
    if not sidecar.is_file():
        return None
    try:
        return kept_run(str(sidecar)).get("singular_values") or None
    except KlmError:
        return None


def render_papers(
    files: list[tuple[Path, dict]], judged: list[Judged] = (), frame: pd.DataFrame | None = None
) -> tuple[dict[str, str], set[int]]:
    """Every paper page's text by file name (``README.md`` among them), each opening with its claims (``judged``),
    and the indices of the reference rows they render; ``frame``: ``papers_frame(files)`` where already made."""
    frame = papers_frame(files) if frame is None else frame
    references = load_all_references()
    texts, used = {}, set()
    for table in PAPER_TABLES:
        texts[f"{table.slug}.md"], page_used = render_paper_table(table, frame, references, judged)
        used |= page_used
    statuses = {table.slug: table_status(table, frame, references) for table in PAPER_TABLES}
    texts["README.md"] = render_readme({table.slug: table for table in PAPER_TABLES}, statuses)
    return texts, used


def unrendered_references(files: list[tuple[Path, dict]] = ()) -> list[str]:
    """The reference rows no paper page renders, as ``paper source: row (dataset)``."""
    _, used = render_papers(list(files))
    return [
        f"{ref['paper']} {ref['source']}: {ref['row']} ({ref['dataset']})"
        for index, ref in enumerate(load_all_references())
        if index not in used
    ]


def report_split_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """``papers_frame``'s cells on the report split alone (MNLI's mismatched rows aside): what a claim compares."""
    return frame[~frame.split.isin(OTHER_SPLITS)] if len(frame) else frame


def write_papers(
    files: list[tuple[Path, dict]], out_dir: Path, judged: list[Judged] = (), frame: pd.DataFrame | None = None
) -> list[Path]:
    """Write ``out_dir``/``<slug>.md`` and its README (``render_papers``); returns the pages whose text changed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    texts, _ = render_papers(files, judged, frame)
    written = []
    for name, text in texts.items():
        path = out_dir / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written
