"""Entity embeddings trained on a knowledge graph's triples on the CPU: TransE (Bordes et al. 2013), the default,
and RotatE (Sun et al. 2019), which tells apart relations that join the same pair of types (``train_rotate``).

A triple (h, r, t) should satisfy e_h + w_r ≈ e_t: training lowers the margin loss
``max(0, margin + ‖e_h + w_r − e_t‖₂ − ‖e_h' + w_r − e_t'‖₂)`` against a corrupted triple whose head
or tail (each with probability ½) is replaced by an entity drawn uniformly ("unif" sampling; a corrupted
triple that happens to be true is kept). Entity vectors are renormalised to unit L2 norm before every
batch and at the end, as in the paper; (sparse) Adam replaces the paper's plain SGD to converge in few epochs.

``cached_transe(kg, cache_dir)`` (``cached_embeddings(kind, ...)`` for either kind) trains once per (triples,
hyper-parameters) and loads afterwards.
"""

import hashlib
import json
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from knowledge_lm.core.caches import set_aside_cache
from knowledge_lm.core.errors import KlmError

DEFAULT_HPARAMS = dict(dim=100, epochs=50, margin=1.0, lr=0.01, batch_size=1024, seed=0)
CACHE_FORMAT = "transe-v1"
# RotatE's dim counts complex numbers: its entity vectors have 2 × dim real entries (100 here, knowbert's entity_dim).
# 64 negatives a triple: with 8 a two-hop ceiling fell to 92.5 in a v3 world (benchmarks/notes/kg_embeddings.md).
ROTATE_HPARAMS = dict(dim=50, epochs=100, gamma=6.0, lr=0.01, negatives=64, batch_size=512, seed=0)
ROTATE_FORMAT = "rotate-v1"
KINDS = {"transe": (DEFAULT_HPARAMS, CACHE_FORMAT), "rotate": (ROTATE_HPARAMS, ROTATE_FORMAT)}


@dataclass
class EntityEmbeddings:
    """Trained entity vectors by entity id (``kind``: "transe", or "rotate": the real parts, then the imaginary
    parts, and relations as phases), with a label fallback.

    Entities without a trained vector (outside the KG's triples, e.g. linked from another source) get a
    fallback from ``EntityEmbeddings.lookup(qid, label)``: a deterministic embedding of the label text, the
    mean of one fixed pseudo-random Gaussian vector per character trigram of the lower-cased label, scaled
    to the trained vectors' norm. Labels sharing trigrams get similar vectors; the fallback carries no
    graph knowledge, and without a label the lookup fails rather than returning zeros.
    """

    qids: list[str]
    matrix: torch.Tensor  # entities × dim, rows of unit L2 norm, row i is qids[i]
    relation_pids: list[str]
    relation_matrix: torch.Tensor  # relations × dim, row i is relation_pids[i]
    hparams: dict
    losses: list[float] = field(default_factory=list)  # mean margin loss of each epoch
    kind: str = "transe"

    def __post_init__(self):
        self.index = {qid: row for row, qid in enumerate(self.qids)}
        self.relation_index = {pid: row for row, pid in enumerate(self.relation_pids)}

    @property
    def dim(self) -> int:
        return self.matrix.shape[1]

    def __contains__(self, qid) -> bool:
        return qid in self.index

    def lookup(self, qid: str | None, label: str | None = None) -> torch.Tensor:
        """The trained vector of ``qid``, else the label fallback (see the class docstring)."""
        if qid in self.index:
            return self.matrix[self.index[qid]]
        if label and label.strip():
            return label_embedding(label, self.dim) * self.matrix.norm(dim=1).mean()
        raise KlmError(f"entity {qid!r} has no trained embedding and no label for the fallback embedding")

    def score(self, head: str, pid: str, tail: str) -> float:
        """Plausibility of a triple, higher is more plausible: TransE's −‖e_h + w_r − e_t‖₂, RotatE's
        −Σ |e_h ∘ r − e_t| (complex moduli)."""
        return self.path_score(head, (pid,), tail)

    def path_score(self, head: str, pids, tail: str) -> float:
        """Plausibility that ``tail`` lies along the relations ``pids`` from ``head``: the relations composed (TransE:
        translations added; RotatE: rotations, their phases added), then scored as one (``score``)."""
        relation = sum(self.relation_matrix[self.relation_index[pid]] for pid in pids)
        head_vector, tail_vector = self.lookup(head), self.lookup(tail)
        if self.kind == "rotate":
            return -float(rotate_distance(head_vector, relation, tail_vector))
        return -float((head_vector + relation - tail_vector).norm())

    def save(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + f".{os.getpid()}.partial")
        torch.save(
            {
                "format": KINDS[self.kind][1],
                "qids": self.qids,
                "matrix": self.matrix,
                "relation_pids": self.relation_pids,
                "relation_matrix": self.relation_matrix,
                "hparams": self.hparams,
                "losses": self.losses,
            },
            partial,
        )
        os.replace(partial, path)
        return path

    @classmethod
    def load(cls, path) -> "EntityEmbeddings":
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise KlmError(f"{path}: no such embeddings file") from None
        except Exception as error:
            raise KlmError(f"{path}: not a saved EntityEmbeddings file ({type(error).__name__}: {error})") from None
        kinds = {format_: kind for kind, (_, format_) in KINDS.items()}
        if not isinstance(saved, dict) or saved.get("format") not in kinds:
            raise KlmError(f"{path}: not a {' or '.join(kinds)} EntityEmbeddings file")
        return cls(
            saved["qids"],
            saved["matrix"],
            saved["relation_pids"],
            saved["relation_matrix"],
            saved["hparams"],
            saved["losses"],
            kinds[saved["format"]],
        )


def indexed_triples(kg, model: str) -> tuple[list[str], list[str], torch.Tensor]:
    """``kg``'s entities and relations in order of first appearance, and its triples as rows of (head, relation,
    tail) indices into them: what ``model`` (named in the error where ``kg`` has no triples) trains on."""
    if not kg.triples:
        raise KlmError(f"cannot train {model} on a knowledge graph without triples")
    qids = list(dict.fromkeys(qid for head, _, tail in kg.triples for qid in (head, tail)))
    pids = list(dict.fromkeys(pid for _, pid, _ in kg.triples))
    entity_row = {qid: row for row, qid in enumerate(qids)}
    relation_row = {pid: row for row, pid in enumerate(pids)}
    triples = torch.tensor([[entity_row[head], relation_row[pid], entity_row[tail]] for head, pid, tail in kg.triples])
    return qids, pids, triples


def train_transe(
    kg,
    dim: int = 100,
    epochs: int = 50,
    margin: float = 1.0,
    lr: float = 0.01,
    batch_size: int = 1024,
    seed: int = 0,
    progress: bool = True,
) -> EntityEmbeddings:
    """TransE on ``kg.triples``; entities that occur in no triple get no vector (they use the fallback)."""
    qids, pids, triples = indexed_triples(kg, "TransE")

    generator = torch.Generator().manual_seed(seed)
    bound = 6 / math.sqrt(dim)  # the paper's uniform initialisation
    entities = torch.empty(len(qids), dim).uniform_(-bound, bound, generator=generator)
    entities = torch.nn.Parameter(torch.nn.functional.normalize(entities, dim=1))
    relations = torch.empty(len(pids), dim).uniform_(-bound, bound, generator=generator)
    relations = torch.nn.Parameter(torch.nn.functional.normalize(relations, dim=1))
    # Sparse gradients and SparseAdam update only the rows of a batch: dense Adam would keep decaying
    # the moments of every untouched row, whose values turn subnormal and slow the CPU tenfold.
    optimizer = torch.optim.SparseAdam([entities, relations], lr=lr)

    losses = []
    columns = (TextColumn("TransE {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with one_torch_thread(), Progress(*columns, disable=not progress, transient=True) as bar:
        task = bar.add_task("", total=epochs)
        for epoch in range(epochs):
            order = torch.randperm(len(triples), generator=generator)
            total = 0.0
            for start in range(0, len(triples), batch_size):
                positive = triples[order[start : start + batch_size]]
                negative = positive.clone()
                corrupt_head = torch.rand(len(positive), generator=generator) < 0.5
                random_entities = torch.randint(len(qids), (len(positive),), generator=generator)
                negative[corrupt_head, 0] = random_entities[corrupt_head]
                negative[~corrupt_head, 2] = random_entities[~corrupt_head]
                loss = torch.relu(
                    margin
                    + transe_distance(entities, relations, positive)
                    - transe_distance(entities, relations, negative)
                ).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                # Only the batch's rows moved: renormalising them keeps every entity at unit norm
                # before each batch, as the paper does, at a fraction of renormalising all.
                with torch.no_grad():
                    moved = torch.cat([positive[:, 0], positive[:, 2], negative[:, 0], negative[:, 2]]).unique()
                    entities[moved] = torch.nn.functional.normalize(entities[moved], dim=1)
                total += loss.item() * len(positive)
            losses.append(total / len(triples))
            bar.update(task, advance=1, description=f"epoch {epoch + 1} loss {losses[-1]:.4f}")

    matrix = torch.nn.functional.normalize(entities.detach(), dim=1)
    hparams = dict(dim=dim, epochs=epochs, margin=margin, lr=lr, batch_size=batch_size, seed=seed)
    return EntityEmbeddings(qids, matrix.contiguous(), pids, relations.detach().clone(), hparams, losses)


@contextmanager
def one_torch_thread():
    # Measured on 2 shared CPU cores: 2 threads train an epoch in 0.25 s when the machine is idle but
    # 1 to 13 s when another process holds a core (each parallel op waits for the descheduled thread);
    # 1 thread takes 0.3 s idle and 0.5 s busy.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def transe_distance(entities: torch.Tensor, relations: torch.Tensor, triples: torch.Tensor) -> torch.Tensor:
    embed = torch.nn.functional.embedding
    return (
        embed(triples[:, 0], entities, sparse=True)
        + embed(triples[:, 1], relations, sparse=True)
        - embed(triples[:, 2], entities, sparse=True)
    ).norm(dim=1)


def rotate_distance(head: torch.Tensor, phases: torch.Tensor, tail: torch.Tensor) -> torch.Tensor:
    """Σ |h ∘ r − t| over the complex coordinates (the last dimension: real parts, then imaginary parts; ``phases``
    the rotation's angles), per row."""
    real, imaginary = head.chunk(2, dim=-1)
    cos, sin = torch.cos(phases), torch.sin(phases)
    rotated = torch.cat([real * cos - imaginary * sin, real * sin + imaginary * cos], dim=-1)
    difference_real, difference_imaginary = (rotated - tail).chunk(2, dim=-1)
    return (difference_real**2 + difference_imaginary**2 + 1e-12).sqrt().sum(-1)


def train_rotate(
    kg,
    dim: int = 50,
    epochs: int = 100,
    gamma: float = 6.0,
    lr: float = 0.01,
    negatives: int = 64,
    batch_size: int = 512,
    seed: int = 0,
    progress: bool = True,
) -> EntityEmbeddings:
    """RotatE on ``kg.triples``: a triple (h, r, t) should satisfy e_h ∘ r ≈ e_t (complex, |r_i| = 1), trained by
    the logistic loss ``−log σ(γ − d(h, r, t)) − log σ(d(h', r', t') − γ)`` against ``negatives`` corrupted triples
    each, whose head, tail or *relation* (a third each) is replaced by one drawn uniformly: corrupting relations
    teaches it to tell apart relations that join the same pair of types, which TransE's head/tail corruption does
    not. Rotations compose, so a two-hop claim scores as one rotation by the phases added (``path_score``)."""
    qids, pids, triples = indexed_triples(kg, "RotatE")
    generator = torch.Generator().manual_seed(seed)
    entities = torch.nn.Parameter(torch.randn(len(qids), 2 * dim, generator=generator) * 0.1)
    relations = torch.nn.Parameter(torch.rand(len(pids), dim, generator=generator) * 2 * math.pi)
    optimizer = torch.optim.Adam([entities, relations], lr=lr)
    sizes = torch.tensor([len(qids), len(pids), len(qids)])
    losses = []
    with one_torch_thread():
        for _ in range(epochs):
            order, total = torch.randperm(len(triples), generator=generator), 0.0
            for start in range(0, len(triples), batch_size):
                positive = triples[order[start : start + batch_size]]
                negative = positive.repeat(negatives, 1)
                column = torch.randint(3, (len(negative),), generator=generator)  # head, relation or tail
                drawn = (torch.rand(len(negative), generator=generator) * sizes[column]).long()
                negative[torch.arange(len(negative)), column] = drawn

                def distance(rows):
                    return rotate_distance(entities[rows[:, 0]], relations[rows[:, 1]], entities[rows[:, 2]])

                loss = (
                    torch.nn.functional.softplus(distance(positive) - gamma).mean()
                    + torch.nn.functional.softplus(gamma - distance(negative)).mean()
                )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total += loss.item() * len(positive)
            losses.append(total / len(triples))
    hparams = dict(dim=dim, epochs=epochs, gamma=gamma, lr=lr, negatives=negatives, batch_size=batch_size, seed=seed)
    return EntityEmbeddings(
        qids, entities.detach().clone(), pids, relations.detach().clone(), hparams, losses, kind="rotate"
    )


def transe_cache_path(kg, cache_dir, **hparams) -> Path:
    """Where ``cached_transe`` keeps the embeddings of ``kg`` trained with these hyper-parameters."""
    return embeddings_cache_path("transe", kg, cache_dir, **hparams)


def embeddings_cache_path(kind: str, kg, cache_dir, **hparams) -> Path:
    """Where ``cached_embeddings`` keeps the ``kind`` embeddings of ``kg`` trained with these hyper-parameters."""
    if kind not in KINDS:
        raise KlmError(f"unknown KG embedding {kind!r} (known: {', '.join(KINDS)})")
    defaults, format_ = KINDS[kind]
    unknown = sorted(set(hparams) - set(defaults))
    if unknown:
        name = {"transe": "TransE", "rotate": "RotatE"}[kind]
        raise KlmError(f"unknown {name} hyper-parameter {', '.join(unknown)} (known: {', '.join(defaults)})")
    return Path(cache_dir) / f"{kind}-{cache_key(kg, {**defaults, **hparams}, format_)}.pt"


def cached_transe(kg, cache_dir, progress: bool = True, **hparams) -> EntityEmbeddings:
    """TransE embeddings of ``kg`` from ``cache_dir`` if trained before with these hyper-parameters, else trained
    and saved."""
    return cached_embeddings("transe", kg, cache_dir, progress, **hparams)


def cached_embeddings(kind: str, kg, cache_dir, progress: bool = True, **hparams) -> EntityEmbeddings:
    """The ``kind`` ("transe" or "rotate") embeddings of ``kg`` from ``cache_dir`` if trained before with these
    hyper-parameters, else trained and saved."""
    path = embeddings_cache_path(kind, kg, cache_dir, **hparams)
    if path.is_file():
        try:
            return EntityEmbeddings.load(path)
        except KlmError as error:  # truncated or garbage: set aside and trained again
            set_aside_cache(path, str(error).removeprefix(f"{path}: "))
    train = train_transe if kind == "transe" else train_rotate
    embeddings = train(kg, progress=progress, **{**KINDS[kind][0], **hparams})
    embeddings.save(path)
    return embeddings


def cache_key(kg, hparams: dict, format_: str = CACHE_FORMAT) -> str:
    digest = hashlib.sha256(f"{format_}\n{json.dumps(hparams, sort_keys=True)}\n".encode())
    for head, pid, tail in kg.triples:
        digest.update(f"{head}\t{pid}\t{tail}\n".encode())
    return digest.hexdigest()[:20]


def label_embedding(label: str, dim: int) -> torch.Tensor:
    """Unit vector of a label: the normalised mean of its character trigrams' fixed random vectors."""
    text = "#" + " ".join(label.lower().split()) + "#"
    trigrams = [text[start : start + 3] for start in range(len(text) - 2)]
    if not trigrams:
        raise KlmError(f"label {label!r} is empty: no fallback embedding")
    return torch.nn.functional.normalize(
        torch.stack([trigram_vector(trigram, dim) for trigram in trigrams]).mean(0), dim=0
    )


@lru_cache(maxsize=65536)
def trigram_vector(trigram: str, dim: int) -> torch.Tensor:
    # blake2b, not hash(): Python salts str hashes per process, and the fallback must be reproducible.
    seed = int.from_bytes(hashlib.blake2b(f"{dim}:{trigram}".encode(), digest_size=8).digest(), "little") >> 1
    return torch.randn(dim, generator=torch.Generator().manual_seed(seed))
