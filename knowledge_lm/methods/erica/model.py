"""ERICA (Qin et al. 2021, "ERICA: Improving Entity and Relation Understanding for Pre-trained Language Models
via Contrastive Learning", §3): contrastive entity (ED) and relation (RD) discrimination pretraining + MLM.

Parts, in the order of this file:
1. Losses, pure functions on tensors: :func:`entity_discrimination_loss` (Eq. 2) and
   :func:`relation_discrimination_loss` (Eq. 3, four intra/cross terms).
2. :func:`build_corpus`: documents with linked entities + a KG → distantly supervised JSONL records
   (the data sources, packing and test-set removal are in ``methods/erica/corpus.py``).
3. :class:`EricaPretraining`: backbone + MLM head (masking: ``tasks.heads.mask_tokens``), L = L_ED + L_RD + L_MLM
   (Eq. 4), AdamW with warm-up.
4. Fine-tuning methods of the same six names (registered): the baseline, refused unless ``--backbone DIR``
   is an ERICA checkpoint pretrained with that objective set (``DIR/manifest.json``, ``"method"``).

The entity and relation representations: ``EricaPretraining``; the corpus JSONL format: ``build_corpus``.
"""

import hashlib
import json
import random
import time
from collections.abc import Iterable
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.nn import functional as F

from knowledge_lm.core.errors import KlmError
from knowledge_lm.methods.baseline import Baseline
from knowledge_lm.methods.optim import adamw_with_warmup
from knowledge_lm.methods.task_model import logs_this_step, trainer_of
from knowledge_lm.tasks.docre import token_span
from knowledge_lm.tasks.heads import IGNORE, MLMHead, mask_tokens, mean_pool_spans

TAU = 0.05
MAX_NEGATIVES = 64  # negatives per document (footnote 5: no_relation pairs included)
NO_RELATION = 0  # relation index of no_relation pairs
TERMS = (("intra", "intra"), ("intra", "cross"), ("cross", "intra"), ("cross", "cross"))
LR, WEIGHT_DECAY, WARMUP_RATIO = 3e-5, 1e-5, 0.2
# Documents per step. RD takes its positives (pairs of one relation) from the batch; at 8, a fifth of the batches of
# the Re-DocRED/FewRel corpus held no cross/cross positive; from 32 on, none lacked one. The paper's is 2,048.
BATCH_SIZE = 64

# Pretraining objective sets: ERICA and the ablations of Table 6/10, each of which keeps MLM ("-NSP + ...").
# name -> (losses, RD terms); the manifest records the name, and a fine-tuning method of that name
# accepts only a checkpoint pretrained with it.
OBJECTIVES = {
    "erica": (("ed", "rd", "mlm"), TERMS),
    "erica-mlm-only": (("mlm",), ()),
    "erica-ed": (("ed", "mlm"), ()),
    "erica-rd": (("rd", "mlm"), TERMS),
    "erica-rd-intra": (("rd", "mlm"), (("intra", "intra"),)),
    "erica-rd-cross": (("rd", "mlm"), (("cross", "cross"),)),
}
OBJECTIVE_WORDS = {
    "mlm": ({"mlm"}, ()),
    "ed": ({"ed"}, ()),
    "rd": ({"rd"}, TERMS),
    "rd-intra": ({"rd"}, (("intra", "intra"),)),
    "rd-cross": ({"rd"}, (("cross", "cross"),)),
}


def objective_set(spec: str) -> str:
    """The name in :data:`OBJECTIVES` of an objective set given by that name or as comma-separated words
    (``mlm``, ``ed``, ``rd``, ``rd-intra``, ``rd-cross``), e.g. ``mlm,ed,rd`` → ``erica``."""
    spec = (spec or "").strip()
    if spec in OBJECTIVES:
        return spec
    words = [word.strip() for word in spec.split(",") if word.strip()]
    unknown = [word for word in words if word not in OBJECTIVE_WORDS]
    if unknown or not words:
        raise KlmError(
            f"unknown ERICA objectives {spec!r}: give one of {', '.join(OBJECTIVES)} or a comma list of "
            f"{', '.join(OBJECTIVE_WORDS)}"
        )
    losses = set().union(*(OBJECTIVE_WORDS[word][0] for word in words))
    terms = tuple(term for term in TERMS if any(term in OBJECTIVE_WORDS[word][1] for word in words))
    for name, (named_losses, named_terms) in OBJECTIVES.items():
        if set(named_losses) == losses and tuple(named_terms) == terms:
            return name
    raise KlmError(
        f"ERICA objectives {spec!r} are none of the named sets: "
        + "; ".join(f"{name} = {'+'.join(OBJECTIVES[name][0])}" for name in OBJECTIVES)
    )


def objective_options(name: str) -> dict:
    """``EricaPretraining`` switches of an objective set."""
    losses, terms = OBJECTIVES[objective_set(name)]
    return {"use_ed": "ed" in losses, "use_rd": "rd" in losses, "use_mlm": "mlm" in losses, "rd_terms": terms}


# -- 1. losses ----------------------------------------------------------------------------------
def unit_vectors(vectors: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit length in float32, so that their products are cosines (as F.cosine_similarity,
    without its broadcast n×n×d tensor: RD's pairs are hundreds per batch); float32 because a cosine over
    τ = 0.05 spans ±20 logits, where bf16 would round them by ~0.1."""
    return F.normalize(vectors.float(), dim=-1, eps=1e-8)


def entity_discrimination_loss(
    entities: torch.Tensor,
    entity_mask: torch.Tensor,
    head: torch.Tensor,
    tail: torch.Tensor,
    *,
    ignore: torch.Tensor | None = None,
    tau: float = TAU,
) -> torch.Tensor:
    """ED (Eq. 2), averaged over the batch's sampled triples (the paper sums)::

        L_ED = -mean_b log [ exp(cos(e_h, e_t)/τ) / Σ_{l ≠ h, l valid, l not ignored} exp(cos(e_h, e_l)/τ) ]

    ``entities`` b×E×d: the pooled entity representations of each document (the document encoded with
    "relation_name head_mention [SEP]" prepended; the prepended mention is *not* pooled into e_h — the
    caller pools over the document's mentions only). ``entity_mask`` b×E (true for real entities),
    ``head``/``tail`` b (indices into E). ``ignore`` b×E (optional): other valid tails of (head, relation),
    which the official code treats as neither positives nor negatives; the target tail is never ignored.
    """
    rows = torch.arange(entities.shape[0], device=entities.device)
    unit = unit_vectors(entities)
    logits = torch.einsum("bd,bed->be", unit[rows, head], unit) / tau  # b×E: cos(e_h, e_l)/τ for every entity l
    allowed = entity_mask.bool().clone()
    allowed[rows, head] = False
    if ignore is not None:
        allowed &= ~ignore.bool()
    allowed[rows, tail] = True
    logits = logits.masked_fill(~allowed, float("-inf"))
    return F.cross_entropy(logits, tail)


def negative_mask(
    relation: torch.Tensor,
    document: torch.Tensor,
    head: torch.Tensor,
    tail: torch.Tensor,
    max_negatives: int = MAX_NEGATIVES,
) -> torch.Tensor:
    """P×P bool: ``[A, C]`` true when C is a negative of anchor A in RD.

    C is a negative when r_C ≠ r_A (no_relation pairs included), C is not a pair of A's document sharing
    A's head or A's tail (``head_C == head_A`` or ``tail_C == tail_A``), and C is among the first
    ``max_negatives`` such pairs of its document (in the given order; the collate shuffles pairs)."""
    same_document = document[:, None] == document[None, :]
    shares = same_document & ((head[:, None] == head[None, :]) | (tail[:, None] == tail[None, :]))
    mask = (relation[:, None] != relation[None, :]) & ~shares
    if max_negatives is not None:
        # Rank of C among the negatives of A in C's document; keep rank < max_negatives.
        one_hot = (document[:, None] == torch.unique(document)[None, :]).to(torch.long)  # P×D
        per_document = mask.to(torch.long).unsqueeze(-1) * one_hot.unsqueeze(0)  # A×C×D
        rank = (per_document.cumsum(1) * one_hot.unsqueeze(0)).sum(-1)  # A×C: 1-based rank if negative
        mask &= rank <= max_negatives
    return mask


def relation_discrimination_loss(
    pairs: torch.Tensor,
    relation: torch.Tensor,
    document: torch.Tensor,
    head: torch.Tensor,
    tail: torch.Tensor,
    intra: torch.Tensor,
    *,
    terms: Iterable[tuple[str, str]] = TERMS,
    max_negatives: int = MAX_NEGATIVES,
    tau: float = TAU,
) -> torch.Tensor:
    """RD (Eq. 3): the sum over the enabled terms of each term's mean over its (t_A, t_B) pairs::

        L^{T1,T2} = -mean_{t_A ∈ T1, t_B ∈ T2, B ≠ A, r_B = r_A} log exp(s_AB) / (exp(s_AB) + Σ_{C ∈ N(A)} exp(s_AC))
        s_XY = cos(r_X, r_Y)/τ,   r_X = [e_head; e_tail] of pair X
        L_RD = L^{Ts,Ts} + L^{Ts,Tc} + L^{Tc,Ts} + L^{Tc,Tc}

    T_s / T_c are the relational (r ≠ no_relation) pairs that are intra- / cross-sentence; N(A) is
    :func:`negative_mask` (other relations incl. no_relation, ≤ ``max_negatives`` per document, pairs of
    A's document sharing its head or tail excluded). ``pairs`` P×2d; ``relation``, ``document``, ``head``,
    ``tail`` P (long; relation 0 = no_relation); ``intra`` P (bool). ``terms`` picks the terms by name
    ("intra", "cross") for ablations. A term without any (A, B) pair adds 0.
    """
    unit = unit_vectors(pairs)
    sims = unit @ unit.T / tau  # P×P
    negatives = negative_mask(relation, document, head, tail, max_negatives)
    negative_lse = torch.logsumexp(sims.masked_fill(~negatives, float("-inf")), dim=1)  # P; -inf if none
    positive = relation != NO_RELATION
    same = (relation[:, None] == relation[None, :]) & positive[:, None] & positive[None, :]
    same &= ~torch.eye(len(relation), dtype=torch.bool, device=relation.device)
    per_pair = torch.logaddexp(sims, negative_lse[:, None]) - sims  # -log exp(s_AB)/Z
    sets = {"intra": intra.bool(), "cross": ~intra.bool()}
    total = pairs.sum() * 0.0
    for first, second in terms:
        # A masked mean rather than boolean indexing: no host sync, and 0 for a term without pairs.
        selected = same & sets[first][:, None] & sets[second][None, :]
        total = total + per_pair.masked_fill(~selected, 0.0).sum() / selected.sum().clamp(min=1)
    return total


def term_positives(relation: list[int], intra: list[bool]) -> tuple[int, ...]:
    """The number of ordered (A, B) positive pairs of each RD term of :data:`TERMS` in one batch of pairs: the
    count each term of :func:`relation_discrimination_loss` averages over (B ≠ A, r_B = r_A ≠ no_relation,
    t_A in the term's first set, t_B in its second). A term with 0 adds nothing to the loss."""
    counts: dict[int, list[int]] = {}
    for label, inside in zip(relation, intra):
        if label != NO_RELATION:
            counts.setdefault(label, [0, 0])[0 if inside else 1] += 1
    sizes = {"intra": 0, "cross": 1}
    return tuple(
        sum(c[sizes[first]] * (c[sizes[second]] - (first == second)) for c in counts.values())
        for first, second in TERMS
    )


# -- 2. MLM masking -----------------------------------------------------------------------------
# -- 3. corpus ----------------------------------------------------------------------------------
def entity_keys(entity: dict, text: str) -> set[str]:
    """What names an entity when matching test-set pairs: its qid, and ``name:<casefolded surface>`` of its
    name and of every mention (so that unlinked entities, e.g. Re-DocRED's, are matched by name)."""
    surfaces = {entity.get("name") or ""} | {text[m["start"] : m["end"]] for m in entity.get("mentions", ())}
    keys = {f"name:{' '.join(surface.split()).casefold()}" for surface in surfaces if surface.strip()}
    return keys | ({entity["qid"]} if entity.get("qid") else set())


def build_corpus(
    documents: Iterable[dict],
    triples: Iterable[tuple[str, str, str]],
    *,
    relation_names: dict | None = None,
    test_pairs: set[tuple[str, str]] = frozenset(),
    min_entities: int = 4,
    min_relations: int = 4,
) -> list[dict]:
    """Distantly supervised ERICA records (the JSONL format below).

    ``documents``: dicts with ``text`` (or ``text_a``), ``entities`` each with ``qid`` (may be null),
    optional ``name`` and ``mentions`` (``start``, ``end``, ``sent_id``; a mention without ``sent_id``
    counts as sentence 0), optional ``id``, and optional annotated ``relations``
    (``{"head": int, "tail": int, "relation": pid}`` indexing ``entities``), which are added to the KG's.
    ``triples``: (head qid, pid, tail qid), e.g. ``KnowledgeGraph.load(dir).triples``. An ordered entity
    pair is dropped (as relations and as no_relation pairs) when some (head key, tail key) of
    :func:`entity_keys` is in ``test_pairs``, before the filters: a document is kept with
    ≥ ``min_entities`` entities and ≥ ``min_relations`` relations.

    Corpus JSONL format (one document a line)::

        {"id": str, "text": str,
         "entities": [{"qid": str|null, "name": str,
                       "mentions": [{"start": int, "end": int, "sent_id": int}, ...]}, ...],
         "relations": [{"head": int, "tail": int, "relation": pid, "name": str, "intra": bool}, ...],
         "no_relation": [{"head": int, "tail": int, "intra": bool}, ...]}

    ``head``/``tail`` index ``entities``; ``start``/``end`` are character offsets into ``text``; ``intra`` is
    true when some mention of the head and some mention of the tail share a sentence (T_s), else the pair is
    cross-sentence (T_c). ``relations`` are the KG triples (head qid, pid, tail qid) whose two entities both
    occur in the document (distant supervision); ``no_relation`` are the remaining ordered pairs.
    """
    names = relation_names or {}
    facts: dict[tuple[str, str], list[str]] = {}
    for head, pid, tail in triples:
        facts.setdefault((head, tail), [])
        if pid not in facts[(head, tail)]:
            facts[(head, tail)].append(pid)
    corpus = []
    for number, document in enumerate(documents):
        text = document.get("text", document.get("text_a"))
        entities, annotated = document_entities(document, text)
        relations, no_relation = entity_pairs(
            entities, annotated, text, facts=facts, names=names, test_pairs=test_pairs
        )
        if len(entities) >= min_entities and len(relations) >= min_relations:
            corpus.append(
                {
                    "id": str(document.get("id", number)),
                    "text": text,
                    "entities": entities,
                    "relations": relations,
                    "no_relation": no_relation,
                }
            )
    return corpus


def document_entities(document: dict, text: str) -> tuple[list[dict], dict[tuple[int, int], list[str]]]:
    """A document's entities that have mentions (``build_corpus``'s record form), and its annotated relations'
    pids by (head, tail) of those entities."""
    kept = [index for index, entity in enumerate(document["entities"]) if entity.get("mentions")]
    renumber = {old: new for new, old in enumerate(kept)}
    entities = []
    for index in kept:
        entity = document["entities"][index]
        first = entity["mentions"][0]
        entities.append(
            {
                "qid": entity.get("qid"),
                "name": entity.get("name") or text[first["start"] : first["end"]],
                "mentions": [
                    {"start": m["start"], "end": m["end"], "sent_id": m.get("sent_id", 0)} for m in entity["mentions"]
                ],
            }
        )
    annotated: dict[tuple[int, int], list[str]] = {}
    for fact in document.get("relations") or ():
        if fact["head"] in renumber and fact["tail"] in renumber:
            annotated.setdefault((renumber[fact["head"]], renumber[fact["tail"]]), []).append(fact["relation"])
    return entities, annotated


def entity_pairs(entities, annotated, text, *, facts, names, test_pairs) -> tuple[list[dict], list[dict]]:
    """Every ordered pair of ``entities`` not in ``test_pairs``: its relations (KG ``facts`` and ``annotated``),
    or a no_relation pair where it has none (``build_corpus``'s record form)."""
    keys = [entity_keys(entity, text) for entity in entities]
    relations, no_relation = [], []
    for h, head in enumerate(entities):
        for t, tail in enumerate(entities):
            if h == t or any((a, b) in test_pairs for a in keys[h] for b in keys[t]):
                continue
            intra = bool({m["sent_id"] for m in head["mentions"]} & {m["sent_id"] for m in tail["mentions"]})
            pids = facts.get((head["qid"], tail["qid"]), []) if head["qid"] and tail["qid"] else []
            pids = list(dict.fromkeys(pids + annotated.get((h, t), [])))
            relations += [
                {"head": h, "tail": t, "relation": pid, "name": names.get(pid, pid), "intra": intra} for pid in pids
            ]
            if not pids:
                no_relation.append({"head": h, "tail": t, "intra": intra})
    return relations, no_relation


def write_corpus(records: list[dict], path) -> str:
    """Write JSONL; returns the sha256 of the file (the ``corpus_hash`` of a checkpoint's manifest)."""
    data = "".join(json.dumps(record, sort_keys=True) + "\n" for record in records).encode()
    Path(path).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def read_corpus(path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise KlmError(f"ERICA corpus {path} does not exist")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def corpus_hash(records: list[dict]) -> str:
    return hashlib.sha256("".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode()).hexdigest()


# -- 4. pretraining -----------------------------------------------------------------------------
def relation_vocabulary(corpus: list[dict]) -> dict[str, int]:
    """pid → index, 0 being no_relation."""
    pids = sorted({relation["relation"] for record in corpus for relation in record["relations"]})
    return {"no_relation": NO_RELATION, **{pid: index + 1 for index, pid in enumerate(pids)}}


class EricaCollator:
    """Documents → one batch with an RD/MLM view (the document) and an ED view (prefix + document).

    Each document gives all its relational pairs and up to ``max_negatives`` sampled no_relation pairs;
    the ED view samples one triple per document (other valid tails of (head, relation) are ignored)."""

    def __init__(
        self,
        tokenizer,
        relations: dict[str, int],
        *,
        max_length: int = 512,
        max_negatives: int = MAX_NEGATIVES,
        mlm_probability: float = 0.15,
        seed: int = 0,
    ):
        if not getattr(tokenizer, "is_fast", False):
            raise KlmError("ERICA needs a fast tokenizer (character offsets of every token)")
        self.tokenizer, self.relations, self.max_length = tokenizer, relations, max_length
        self.max_negatives, self.mlm_probability = max_negatives, mlm_probability
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        """Restart the collator's random streams (pair sampling, ED triples, MLM masks) from ``seed``."""
        self.random = random.Random(seed)
        self.generator = torch.Generator().manual_seed(seed)

    def encode(self, texts: list[str], records: list[dict], shifts: list[int]):
        encoded = self.tokenizer(
            texts,
            truncation=True,
            max_length=self.max_length,
            padding=True,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
            return_tensors="pt",
        )
        size, length = encoded["input_ids"].shape
        most_mentions = max(1, max(sum(len(e["mentions"]) for e in r["entities"]) for r in records))
        most_entities = max(1, max(len(r["entities"]) for r in records))
        mention_mask = torch.zeros(size, most_mentions, length)
        entity_mentions = torch.zeros(size, most_entities, most_mentions)
        entity_mask = torch.zeros(size, most_entities, dtype=torch.bool)
        for row, (record, shift) in enumerate(zip(records, shifts)):
            offsets = encoded["offset_mapping"][row].tolist()
            mention = 0
            for index, entity in enumerate(record["entities"]):
                for m in entity["mentions"]:
                    span = token_span(offsets, m["start"] + shift, m["end"] + shift)
                    if span is not None:
                        mention_mask[row, mention, span[0] : span[1]] = 1
                        entity_mentions[row, index, mention] = 1
                        entity_mask[row, index] = True
                    mention += 1
        view = {name: encoded[name] for name in ("input_ids", "attention_mask", "token_type_ids") if name in encoded}
        view.update(
            mention_mask=mention_mask,
            entity_mentions=entity_mentions,
            entity_mask=entity_mask,
            special_tokens_mask=encoded["special_tokens_mask"].bool(),
        )
        return view

    def __call__(self, records: list[dict]) -> dict:
        rd = self.encode([r["text"] for r in records], records, [0] * len(records))
        protected = rd.pop("special_tokens_mask") | (rd["attention_mask"] == 0) | (rd["mention_mask"].sum(1) > 0)
        rd["input_ids"], rd["mlm_labels"] = mask_tokens(
            rd["input_ids"],
            protected,
            self.tokenizer.mask_token_id,
            len(self.tokenizer),
            self.mlm_probability,
            self.generator,
        )
        columns = {name: [] for name in ("pair_document", "pair_head", "pair_tail", "pair_relation", "pair_intra")}
        for row, record in enumerate(records):
            pairs = [
                (p["head"], p["tail"], self.relations.get(p["relation"], NO_RELATION), p["intra"])
                for p in record["relations"]
            ]
            unrelated = [(p["head"], p["tail"], NO_RELATION, p["intra"]) for p in record["no_relation"]]
            pairs += self.random.sample(unrelated, min(len(unrelated), self.max_negatives))
            self.random.shuffle(pairs)
            for head, tail, relation, intra in pairs:
                for name, value in zip(columns, (row, head, tail, relation, intra)):
                    columns[name].append(value)
        rd.update(
            {
                name: torch.tensor(values, dtype=torch.bool if name == "pair_intra" else torch.long)
                for name, values in columns.items()
            }
        )
        # Host ints, not a tensor: counted here, they cost the training step no device sync.
        rd["term_positives"] = term_positives(columns["pair_relation"], columns["pair_intra"])

        texts, shifts, heads, tails, ignores = [], [], [], [], []
        for record in records:
            triple = self.random.choice(record["relations"])
            prefix = f"{triple['name']} {record['entities'][triple['head']]['name']} {self.tokenizer.sep_token} "
            texts.append(prefix + record["text"])
            shifts.append(len(prefix))
            heads.append(triple["head"])
            tails.append(triple["tail"])
            ignores.append(
                {
                    p["tail"]
                    for p in record["relations"]
                    if p["head"] == triple["head"]
                    and p["relation"] == triple["relation"]
                    and p["tail"] != triple["tail"]
                }
            )
        ed = self.encode(texts, records, shifts)
        ed.pop("special_tokens_mask")
        ed["head"], ed["tail"] = torch.tensor(heads), torch.tensor(tails)
        ed["ignore"] = torch.zeros_like(ed["entity_mask"])
        for row, others in enumerate(ignores):
            ed["ignore"][row, list(others)] = True
        return {"rd": rd, "ed": ed}


class EricaBatches(torch.utils.data.IterableDataset):
    """The pretraining stream of collated micro-batches ``start``, ..., ``total - 1``.

    Micro-batch k is a function of (``seed``, k) alone: epoch e = k // (documents // size) draws its own
    permutation of the corpus from (seed, e), and the collator restarts its random streams from (seed, k).
    A run resumed at micro-batch s therefore sees exactly the batches an uninterrupted run sees from s on, with
    no sampler or collator state to restore (and, without a length, Lightning never ends an epoch and restarts
    the stream: the run ends at its max_steps). Each epoch drops its last incomplete batch (RD's positives and
    negatives come from the micro-batch, so every micro-batch has ``size`` documents); a corpus smaller than
    ``size`` gives batches of all its documents."""

    def __init__(
        self, corpus: list[dict], collator: EricaCollator, size: int, total: int, *, seed: int, start: int = 0
    ):
        self.corpus, self.collator, self.size = corpus, collator, min(size, len(corpus))
        self.total, self.seed, self.start = total, seed, start
        self.per_epoch = len(corpus) // self.size

    def documents(self, index: int) -> list[dict]:
        """The documents of micro-batch ``index`` (counted from the run's first)."""
        epoch, position = divmod(index, self.per_epoch)
        order = torch.randperm(len(self.corpus), generator=torch.Generator().manual_seed(self.seed * 100_003 + epoch))
        return [self.corpus[i] for i in order[position * self.size : (position + 1) * self.size].tolist()]

    def batch(self, index: int) -> dict:
        self.collator.reseed(self.seed * 1_000_003 + index)
        return self.collator(self.documents(index))

    def __iter__(self):
        # Loader worker w of n makes batches w, w + n, ...; the loader takes them from the workers in turn, in order.
        worker = torch.utils.data.get_worker_info()
        first, stride = (worker.id, worker.num_workers) if worker is not None else (0, 1)
        return (self.batch(index) for index in range(self.start + first, self.total, stride))


class EricaPretraining(pl.LightningModule):
    """Backbone + MLM head trained on L = L_ED + L_RD + L_MLM (Eq. 4); each loss can be switched off
    (``use_ed``, ``use_rd``, ``use_mlm``, ``rd_terms``) for the paper's ablations.

    ``save_checkpoint(dir)`` writes a ``save_pretrained`` directory that ``--backbone DIR`` loads;
    ``pretraining.py``'s :func:`pretrain_erica` runs it end to end over :class:`EricaBatches` (micro-batch k a
    function of the seed and k, so a run resumes exactly), resumable and deterministic, recording RD's positives
    per micro-batch (:func:`term_positives`). The objective sets (:data:`OBJECTIVES`):
    ``erica`` (ED + RD + MLM) and the ablations ``erica-mlm-only``, ``erica-ed``, ``erica-rd``,
    ``erica-rd-intra`` (L_RD^{Ts,Ts}), ``erica-rd-cross`` (L_RD^{Tc,Tc}), each with MLM as in Table 6.

    Entity representation (Eq. 1): mean of the hidden states over each mention's tokens, then mean over the
    entity's mentions (``heads.mean_pool_spans`` twice, as ``tasks/docre.py``). Relation representation:
    ``[e_head ; e_tail]``. Similarities are cosines divided by τ (default 0.05).
    """

    def __init__(
        self,
        backbone,
        tokenizer,
        total_steps: int,
        *,
        lr: float = LR,
        weight_decay: float = WEIGHT_DECAY,
        warmup_ratio: float = WARMUP_RATIO,
        tau: float = TAU,
        use_ed: bool = True,
        use_rd: bool = True,
        use_mlm: bool = True,
        rd_terms=TERMS,
        max_negatives: int = MAX_NEGATIVES,
        corpus_hash: str | None = None,
    ):
        super().__init__()
        self.backbone, self.tokenizer = backbone, tokenizer
        self.mlm_head = MLMHead(
            backbone.get_input_embeddings(),
            backbone.config.hidden_size,
            getattr(backbone.config, "layer_norm_eps", 1e-12),
        )
        self.total_steps, self.lr, self.weight_decay, self.warmup_ratio = total_steps, lr, weight_decay, warmup_ratio
        self.tau, self.use_ed, self.use_rd, self.use_mlm = tau, use_ed, use_rd, use_mlm
        self.rd_terms, self.max_negatives, self.corpus_hash = tuple(rd_terms), max_negatives, corpus_hash
        self.final_losses: dict[str, torch.Tensor] = {}  # the last step's, read (one device sync) at the end
        # What the run's record states, carried through resumes (on_save/on_load_checkpoint): the RD positives of
        # every micro-batch (the batch RD contrasts within), loss sums over micro-batches, and wall time.
        self.positive_totals, self.zero_positive_batches, self.rd_batches = [0] * len(TERMS), [0] * len(TERMS), 0
        self.loss_sums: dict[str, torch.Tensor] = {}
        self.loss_batches, self.wall_seconds, self.sessions, self.session_start = 0, 0.0, 0, None
        self.run_settings: dict = {}  # pretrain's: batch and micro-batch sizes, deterministic mode

    def encode(self, *views) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(hidden states, pooled entities)`` of each view, all views through one encoder call (padded to
        the longest and stacked): the RD/MLM and ED views of a step cost one pass of kernel launches, not two."""
        names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in views[0]]
        length = max(view["input_ids"].shape[1] for view in views)
        padding = {"input_ids": self.tokenizer.pad_token_id or 0}
        inputs = {
            name: torch.cat(
                [F.pad(view[name], (0, length - view[name].shape[1]), value=padding.get(name, 0)) for view in views]
            )
            for name in names
        }
        hidden = self.backbone(**inputs).last_hidden_state
        encoded, start = [], 0
        for view in views:
            size, view_length = view["input_ids"].shape
            view_hidden = hidden[start : start + size, :view_length]
            start += size
            encoded.append(
                (
                    view_hidden,
                    mean_pool_spans(mean_pool_spans(view_hidden, view["mention_mask"]), view["entity_mentions"]),
                )
            )
        return encoded

    def losses(self, batch) -> dict[str, torch.Tensor]:
        losses = {}
        rd, ed = batch["rd"], batch["ed"]
        views = ([rd] if self.use_rd or self.use_mlm else []) + ([ed] if self.use_ed else [])
        encoded = self.encode(*views)
        if self.use_rd or self.use_mlm:
            hidden, entities = encoded[0]
            if self.use_mlm:
                logits = self.mlm_head(hidden)
                labels = rd["mlm_labels"]
                # A sum over the masked tokens and a division, not the mean: no host sync, 0 without masked tokens.
                losses["mlm"] = F.cross_entropy(
                    logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=IGNORE, reduction="sum"
                ) / (labels != IGNORE).sum().clamp(min=1)
            if self.use_rd:
                document, head, tail = rd["pair_document"], rd["pair_head"], rd["pair_tail"]
                pairs = torch.cat([entities[document, head], entities[document, tail]], dim=-1)
                losses["rd"] = relation_discrimination_loss(
                    pairs,
                    rd["pair_relation"],
                    document,
                    head,
                    tail,
                    rd["pair_intra"],
                    terms=self.rd_terms,
                    max_negatives=self.max_negatives,
                    tau=self.tau,
                )
        if self.use_ed:
            _, entities = encoded[-1]
            losses["ed"] = entity_discrimination_loss(
                entities, ed["entity_mask"], ed["head"], ed["tail"], ignore=ed["ignore"], tau=self.tau
            )
        return losses

    def training_step(self, batch, batch_idx):
        losses = self.losses(batch)
        if logs_this_step(self):
            for name, value in losses.items():
                self.log(f"train_{name}", value, batch_size=len(batch["ed"]["head"]))
        self.final_losses = {name: value.detach() for name, value in losses.items()}
        for name, value in self.final_losses.items():
            self.loss_sums[name] = self.loss_sums.get(name, 0.0) + value
        self.loss_batches += 1
        if "term_positives" in batch["rd"]:
            self.rd_batches += 1
            for index, count in enumerate(batch["rd"]["term_positives"]):
                self.positive_totals[index] += int(count)
                self.zero_positive_batches[index] += int(count) == 0
        return sum(losses.values())

    def on_train_start(self):
        self.session_start, self.sessions = time.monotonic(), self.sessions + 1

    def on_train_end(self):
        self.wall_seconds, self.session_start = self.elapsed_seconds(), None

    def elapsed_seconds(self) -> float:
        """Training wall time over every session of the run (a resumed run adds its sessions')."""
        return self.wall_seconds + (time.monotonic() - self.session_start if self.session_start is not None else 0.0)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The resumable state beyond Lightning's (weights, optimiser, scheduler, loops): the record's counters and
        the global RNG streams that dropout draws from (tensors and plain data: the state loads weights-only)."""
        checkpoint["erica"] = {
            "positive_totals": list(self.positive_totals),
            "zero_positive_batches": list(self.zero_positive_batches),
            "rd_batches": self.rd_batches,
            "loss_sums": {name: torch.as_tensor(value).detach().cpu() for name, value in self.loss_sums.items()},
            "loss_batches": self.loss_batches,
            "wall_seconds": self.elapsed_seconds(),
            "sessions": self.sessions,
            "cpu_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("erica") or {}
        if not state:
            return
        self.positive_totals, self.zero_positive_batches = state["positive_totals"], state["zero_positive_batches"]
        self.rd_batches, self.loss_batches = state["rd_batches"], state["loss_batches"]
        self.loss_sums = dict(state["loss_sums"])
        self.wall_seconds, self.sessions = state["wall_seconds"], state["sessions"]
        torch.set_rng_state(state["cpu_rng"])
        if torch.cuda.is_available() and len(state["cuda_rng"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda_rng"])

    def on_fit_start(self):
        # Loss sums restored from a CPU state join this run's on its device.
        self.loss_sums = {name: torch.as_tensor(value).to(self.device) for name, value in self.loss_sums.items()}

    def rd_positives(self) -> dict:
        """The record of RD's positives: per term, the mean count of (A, B) positive pairs per micro-batch and the
        share of micro-batches without any (whose term then adds nothing to the loss)."""
        batches = max(self.rd_batches, 1)
        return {
            "micro_batches": self.rd_batches,
            **{
                "/".join(term): {
                    "mean_per_batch": self.positive_totals[index] / batches,
                    "zero_batches_share": self.zero_positive_batches[index] / batches,
                }
                for index, term in enumerate(TERMS)
            },
        }

    def configure_optimizers(self):
        return adamw_with_warmup(self, self.lr, self.weight_decay, self.warmup_ratio, self.total_steps)

    @property
    def objectives(self) -> str | None:
        """The :data:`OBJECTIVES` name of the switched-on losses (None for a set without a name)."""
        losses = {name for name, on in (("ed", self.use_ed), ("rd", self.use_rd), ("mlm", self.use_mlm)) if on}
        terms = tuple(term for term in TERMS if term in self.rd_terms) if self.use_rd else ()
        return next(
            (
                name
                for name, (named, named_terms) in OBJECTIVES.items()
                if set(named) == losses and tuple(named_terms) == terms
            ),
            None,
        )

    def save_checkpoint(self, directory, extra: dict | None = None) -> Path:
        """A ``save_pretrained`` directory (encoder + tokenizer; ``--backbone DIR`` loads it) + ``manifest.json``
        (``extra`` adds fields, e.g. the corpus sources)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        manifest = {
            "method": self.objectives or "erica-custom",
            "corpus_hash": self.corpus_hash,
            "steps": int(self.global_step),
            # The precision the trainer ran at ("auto": bf16-mixed on a GPU, as every cell), None if never trained.
            "precision": trainer_of(self).precision if trainer_of(self) else None,
            "final_losses": {name: float(value) for name, value in self.final_losses.items()},
            "mean_losses": {name: float(value) / max(self.loss_batches, 1) for name, value in self.loss_sums.items()},
            "rd_positives": self.rd_positives(),
            "wall_time_s": round(self.elapsed_seconds(), 1),
            "sessions": self.sessions,
            "tau": self.tau,
            "lr": self.lr,
            "weight_decay": self.weight_decay,
            "warmup_ratio": self.warmup_ratio,
            "losses": [n for n, on in (("ed", self.use_ed), ("rd", self.use_rd), ("mlm", self.use_mlm)) if on],
            "rd_terms": [list(term) for term in self.rd_terms],
            **self.run_settings,
            **(extra or {}),
        }
        (directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        return directory


# -- fine-tuning --------------------------------------------------------------------------------
def checkpoint_objectives(directory: Path) -> str | None:
    """The objective set an ERICA checkpoint was pretrained with (its manifest's ``method``), else None."""
    manifest = directory / "manifest.json"
    try:
        return json.loads(manifest.read_text()).get("method") if manifest.is_file() else None
    except (OSError, ValueError):
        return None


class EricaFineTuning(Baseline):
    """Downstream ERICA = the baseline fine-tuned from an ERICA checkpoint: ``--method erica --backbone DIR``
    where DIR is what :meth:`EricaPretraining.save_checkpoint` wrote (refused otherwise, so a result
    labelled ``erica`` always comes from ERICA weights). Entity-centred tasks read mean-pooled entity
    states as ERICA does where the dataset offers it (task ``mean_pool`` of semeval2010 and fewrel;
    Re-DocRED and Open Entity pool mentions already). The ablation methods below differ only in the
    objective set they require of the checkpoint."""

    objectives = "erica"

    def __init__(self, encoder, spec, **options):
        directory = Path(str(getattr(encoder.config, "_name_or_path", "") or ""))
        found = checkpoint_objectives(directory)
        if found != self.objectives:
            losses, terms = OBJECTIVES[self.objectives]
            wanted = "+".join(losses) + (
                f" (RD terms {', '.join('/'.join(term) for term in terms)})" if "rd" in losses else ""
            )
            got = f"pretrained as {found!r}" if found else f"{str(directory) or '(unnamed)'!r}, not an ERICA checkpoint"
            raise KlmError(
                f"method {self.objectives!r} needs --backbone DIR of an ERICA checkpoint pretrained with "
                f"{wanted} (DIR/manifest.json with method {self.objectives!r}; klm pretrain --method "
                f"{self.objectives}); got {got}"
            )
        super().__init__(encoder, spec, **options)


class EricaMLMOnlyFineTuning(EricaFineTuning):
    """Ablation: fine-tuned from a checkpoint further pretrained with MLM only (Table 6 "-NSP")."""

    objectives = "erica-mlm-only"


class EricaEDFineTuning(EricaFineTuning):
    """Ablation: from a checkpoint pretrained with MLM + ED."""

    objectives = "erica-ed"


class EricaRDFineTuning(EricaFineTuning):
    """Ablation: from a checkpoint pretrained with MLM + RD (all four terms)."""

    objectives = "erica-rd"


class EricaRDIntraFineTuning(EricaFineTuning):
    """Ablation: from a checkpoint pretrained with MLM + RD over intra-sentence pairs only (L_RD^{Ts,Ts})."""

    objectives = "erica-rd-intra"


class EricaRDCrossFineTuning(EricaFineTuning):
    """Ablation: from a checkpoint pretrained with MLM + RD over cross-sentence pairs only (L_RD^{Tc,Tc})."""

    objectives = "erica-rd-cross"
