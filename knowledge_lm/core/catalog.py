"""Every method, dataset and task kind of the suite by name, as plain data: one table per kind.

An entry names its class as ``"module:Class"`` and says what the suite needs to know of it before importing it
(``klm list``, a sweep's checks, the pages' empty cells): nothing here imports a method or a dataset, nor torch.
Adding a method or a dataset is one module and one entry here (docs/adding-a-method.md, docs/adding-a-dataset.md);
tests/test_registry.py imports every target and checks that the entry says what its class does.
"""

from dataclasses import dataclass

DESCRIPTION_CHARS = 120  # an entry's description: one line of ``klm list``


@dataclass(frozen=True)
class MethodEntry:
    """A method: its class, a one-line description, its options' names and whether it reads knowledge features
    (``klm prepare`` makes them; it cannot run on a dataset whose examples carry none)."""

    target: str  # "module:Class"
    description: str
    options: tuple[str, ...] = ()
    needs_knowledge: bool = False


@dataclass(frozen=True)
class DatasetEntry:
    """A dataset: its data module's class, a one-line description, its tasks (those a sweep runs when it names
    none: ``default_tasks``, empty for all), why no example can carry knowledge features (``no_knowledge``; None
    where they can) and whether its labels are KG facts (a knowledge method's result then records keep_answers)."""

    target: str
    description: str
    tasks: tuple[str, ...]
    default_tasks: tuple[str, ...] = ()
    no_knowledge: str | None = None
    labels_are_kg_facts: bool = False


@dataclass(frozen=True)
class TaskKindEntry:
    """A task kind (``knowledge_lm.tasks``): its class."""

    target: str


# The modules, one line each: where a method moves, its line here is the one to change.
BASELINE = "knowledge_lm.methods.baseline"
ERICA = "knowledge_lm.methods.erica.model"
KAM = "knowledge_lm.methods.kam"
KG_TEXT = "knowledge_lm.methods.kg_text"
KNOWBERT = "knowledge_lm.methods.knowbert"
SISR = "knowledge_lm.methods.sisr"

# The option names of ``klm list``: the fields of each method's options class (``MethodOptions`` first).
COMMON = ("new_module_lr", "zero_knowledge")
KAM_OPTIONS = (*COMMON, "alpha", "skip", "use_conv", "maps", "expansion_k", "missing_pmi", "entity_source")
SI = ("si_lambda", "si_k_thresh", "si_k_min", "si_k_max", "si_seed")  # selective injection
SR = ("sr_weight", "sr_k")  # spectral regularization
KNOWBERT_OPTIONS = (
    *COMMON,
    *("kar_layer", "entity_dim", "num_heads", "threshold", "unlinked_spans", "linking_loss_weight", "linking_margin"),
    *("entity_embeddings", "entity_scale"),
)

METHOD_ENTRIES = {
    "baseline": MethodEntry(f"{BASELINE}:Baseline", "Fine-tuned encoder without knowledge.", COMMON),
    "bert": MethodEntry(
        f"{BASELINE}:Baseline", "Fine-tuned encoder without knowledge (the baseline's other name).", COMMON
    ),
    "bert+sr": MethodEntry(
        f"{SISR}:SpectralRegularized",
        "The plain fine-tuned encoder with spectral regularization of its head's batch features.",
        (*COMMON, *SR),
    ),
    "erica": MethodEntry(
        f"{ERICA}:EricaFineTuning",
        "The baseline fine-tuned from an ERICA checkpoint (klm pretrain): --method erica --backbone DIR.",
        COMMON,
    ),
    "erica-mlm-only": MethodEntry(
        f"{ERICA}:EricaMLMOnlyFineTuning",
        'Ablation: fine-tuned from a checkpoint further pretrained with MLM only (Table 6 "-NSP").',
        COMMON,
    ),
    "erica-ed": MethodEntry(
        f"{ERICA}:EricaEDFineTuning", "Ablation: from a checkpoint pretrained with MLM + ED.", COMMON
    ),
    "erica-rd": MethodEntry(
        f"{ERICA}:EricaRDFineTuning", "Ablation: from a checkpoint pretrained with MLM + RD (all four terms).", COMMON
    ),
    "erica-rd-intra": MethodEntry(
        f"{ERICA}:EricaRDIntraFineTuning",
        "Ablation: from a checkpoint pretrained with MLM + RD over intra-sentence pairs only (L_RD^{Ts,Ts}).",
        COMMON,
    ),
    "erica-rd-cross": MethodEntry(
        f"{ERICA}:EricaRDCrossFineTuning",
        "Ablation: from a checkpoint pretrained with MLM + RD over cross-sentence pairs only (L_RD^{Tc,Tc}).",
        COMMON,
    ),
    "kam": MethodEntry(
        f"{KAM}:Kam",
        "KAM-BERT: every layer's self-attention adds knowledge-assisted attention maps.",
        KAM_OPTIONS,
        True,
    ),
    "kam+si": MethodEntry(
        f"{KAM}:KamSI",
        "KAM-BERT whose training batches keep only the linked mentions selective injection draws (Eq. 4).",
        (*KAM_OPTIONS, *SI),
        True,
    ),
    "kam-no-pmi": MethodEntry(f"{KAM}:KamNoPmi", "KAM-BERT ablation: without the PMI map.", KAM_OPTIONS, True),
    "kam-no-phrase": MethodEntry(f"{KAM}:KamNoPhrase", "KAM-BERT ablation: without the phrase map.", KAM_OPTIONS, True),
    "kam-no-entity": MethodEntry(f"{KAM}:KamNoEntity", "KAM-BERT ablation: without the entity map.", KAM_OPTIONS, True),
    "kam-no-conv": MethodEntry(
        f"{KAM}:KamNoConv", "KAM-BERT ablation: without the convolution over the maps.", KAM_OPTIONS, True
    ),
    "kam+kg": MethodEntry(
        f"{KAM}:KamKg", "KAM-BERT with a fourth map, of the entities the KG relates (Eq. 8).", KAM_OPTIONS, True
    ),
    "kg-text": MethodEntry(
        f"{KG_TEXT}:KgText",
        "The plain encoder reading the linked entities' verbalised KG facts after the text.",
        (*COMMON, "fact_tokens"),
        True,
    ),
    "knowbert": MethodEntry(
        f"{KNOWBERT}:KnowBert",
        "The backbone with KAR after layer kar_layer and the entity-linking loss on gold links.",
        KNOWBERT_OPTIONS,
        True,
    ),
    "knowbert+si": MethodEntry(
        f"{KNOWBERT}:KnowBertSI",
        "KnowBERT whose training batches keep only the links selective injection draws (Eq. 4).",
        (*KNOWBERT_OPTIONS, *SI),
        True,
    ),
    "knowbert+si+sr": MethodEntry(
        f"{KNOWBERT}:KnowBertSISR",
        "KnowBERT + SI + spectral regularization of the head's batch features (Eq. 5).",
        (*KNOWBERT_OPTIONS, *SI, *SR),
        True,
    ),
}

# Why a knowledge method cannot run on a multiple-choice dataset, as `klm bench` refuses it and the README says it.
NO_KNOWLEDGE_MULTIPLE_CHOICE = (
    "multiple choice: no knowledge features (one token sequence per choice; klm prepare aligns one)"
)
RELATION_DATASET_TASKS = (
    "main",
    "mean_pool",
)  # a relation dataset's entity representations: markers, mean-pooled entities

DATASET_ENTRIES = {
    "cosmosqa": DatasetEntry(
        "knowledge_lm.data.cosmosqa:CosmosQADataModule",
        "Cosmos QA: commonsense reading comprehension, one of four answers.",
        ("main",),
        no_knowledge=NO_KNOWLEDGE_MULTIPLE_CHOICE,
    ),
    "fewrel": DatasetEntry(
        "knowledge_lm.data.fewrel:FewRelDataModule",
        "FewRel's validation file as train/dev/test of one relation-classification dataset.",
        RELATION_DATASET_TASKS,
        ("main",),
        labels_are_kg_facts=True,
    ),
    "figer": DatasetEntry("knowledge_lm.data.figer:FigerDataModule", "FIGER: fine-grained entity typing.", ("main",)),
    "generated": DatasetEntry(
        "knowledge_lm.data.generated:GeneratedDataModule",
        "Generated facts about invented entities, answerable only from the KG: the offline default.",
        ("facts",),
        ("facts",),
    ),
    "glue": DatasetEntry(
        "knowledge_lm.data.glue:GlueDataModule",
        "The nine GLUE tasks as one dataset, each task its own splits.",
        ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"),
        ("rte", "mrpc", "cola", "stsb", "sst2"),
    ),
    "openentity": DatasetEntry(
        "knowledge_lm.data.openentity:OpenEntityDataModule",
        "Open Entity: entity typing, nine general types.",
        ("main",),
    ),
    "redocred": DatasetEntry(
        "knowledge_lm.data.redocred:DocREDDataModule",
        "Re-DocRED (task revised) and DocRED (task docred) as document-level relation extraction.",
        ("revised", "docred"),
        ("revised",),
        labels_are_kg_facts=True,
    ),
    "semeval2010": DatasetEntry(
        "knowledge_lm.data.semeval:SemEvalDataModule",
        "SemEval-2010 Task 8 with a dev set held out of its train file.",
        RELATION_DATASET_TASKS,
        ("main",),
    ),
    "squad_format": DatasetEntry(
        "knowledge_lm.data.squad:SquadFormatDataModule",
        "Extractive QA in SQuAD v1.1's format: SearchQA, Quasar-T and SQuAD.",
        ("searchqa", "quasart", "squad"),
    ),
    "tacred": DatasetEntry(
        "knowledge_lm.data.tacred:TacredDataModule",
        "TACRED: sentence-level relation classification.",
        RELATION_DATASET_TASKS,
        ("main",),
    ),
}

TASK_KIND_ENTRIES = {
    "classification": TaskKindEntry("knowledge_lm.tasks.sequence:SequenceTask"),
    "regression": TaskKindEntry("knowledge_lm.tasks.sequence:SequenceTask"),
    "multiple_choice": TaskKindEntry("knowledge_lm.tasks.multiple_choice:MultipleChoiceTask"),
    "extractive_qa": TaskKindEntry("knowledge_lm.tasks.extractive_qa:ExtractiveQATask"),
    "relation": TaskKindEntry("knowledge_lm.tasks.relation:MarkerRelationTask"),
    "relation_mean": TaskKindEntry("knowledge_lm.tasks.relation:MeanPoolRelationTask"),
    "typing": TaskKindEntry("knowledge_lm.tasks.typing:TypingTask"),
    "typing_at_least_one": TaskKindEntry("knowledge_lm.tasks.typing:TypingTask"),
    "docre": TaskKindEntry("knowledge_lm.tasks.docre:DocumentRelationTask"),
}
