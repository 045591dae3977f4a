"""KnowBERT-KAR (Peters et al. 2019, "Knowledge Enhanced Contextual Word Representations") and its SI / SI+SR
variants (the SI+SR paper, §4): a Knowledge Attention and Recontextualization component (KAR) after one
layer of the backbone rewrites its hidden states with the KG embeddings of the entities linked in the text.

KAR, its steps and the choices the paper leaves open: ``KnowledgeAttentionRecontextualization``; the entity
table: ``EntityTable``; the linking loss: ``linking_loss``; the batch tensors: ``entity_collate``; the
insertion: ``encode_with_kar``; the new modules' rate: ``KnowBert``; knowledge pretraining:
``KnowBertPretraining``.
"""

import json
import math
from dataclasses import dataclass, fields, replace
from functools import partial
from pathlib import Path
from typing import Literal

import pytorch_lightning as pl
import torch
from torch import nn
from torch.nn import functional as F

from knowledge_lm.core.backbones import encoder_layers
from knowledge_lm.core.errors import KlmError
from knowledge_lm.knowledge.kg import KnowledgeGraph
from knowledge_lm.knowledge.kg_embeddings import EntityEmbeddings, cached_embeddings
from knowledge_lm.knowledge.prepare import KnowledgeConfig, knowledge_graph_dir
from knowledge_lm.methods.optim import adamw_with_warmup
from knowledge_lm.methods.sisr import (
    SelectiveInjection,
    SelectiveInjectionOptions,
    SelectivelyInjected,
    SpectralRegularizationOptions,
    spectral_penalty,
)
from knowledge_lm.methods.task_model import MethodOptions, TaskModel, logs_this_step, trainer_of
from knowledge_lm.tasks.base import ENCODER_INPUTS
from knowledge_lm.tasks.heads import IGNORE, MLMHead, mask_tokens


# -- the knowledge of a batch as tensors ---------------------------------------------------------
@dataclass
class KnowledgeTensors:
    span_mask: torch.Tensor  # b × S × n bool: the tokens of each span
    span_valid: torch.Tensor  # b × S bool
    candidate_ids: torch.Tensor  # b × S × C long, rows of the entity table (0: padding/unknown)
    priors: torch.Tensor  # b × S × C float
    candidate_mask: torch.Tensor  # b × S × C bool
    gold: torch.Tensor  # b × S bool: the span is a gold link (one candidate, prior 1.0)
    df: torch.Tensor  # b × S long: the entity's document frequency (selective injection reads it)
    close: torch.Tensor  # b × S long: the text's other entities within K_hop of it (ditto)

    def to(self, device, non_blocking: bool = False) -> "KnowledgeTensors":
        """On ``device`` (Lightning's batch transfer calls this: it moves objects that have a ``to``)."""
        return KnowledgeTensors(
            *(getattr(self, field.name).to(device, non_blocking=non_blocking) for field in fields(self))
        )


class EntityTable(nn.Module):
    """The fixed entity embeddings: row 0 zeros (padding/unknown), then the TransE rows, then fallbacks.

    **Entity table.** Fixed: a table read with ``F.embedding`` (a frozen ``nn.Embedding`` in all but
    name: a plain tensor outside the state dict, since it grows, see below). Row 0 is padding/unknown (zeros).
    The rows are the KG embedding vectors (knowledge option kg_embedding: TransE, or RotatE) of the prepared KG (found
    in the ``knowledge_collate`` hook through the set-up data module, as ``prepare`` found it):
    ``cached_embeddings`` into ``<cache_dir>/kg_embeddings``, which loads what ``klm prepare --kg-embeddings``
    trained there (else trains once), or the file named by the ``entity_embeddings`` option.
    A candidate absent from the table gets ``EntityEmbeddings.lookup(qid, label)`` (the label-trigram
    fallback), computed once when a batch first needs it and appended as a new row; one without a label
    either is masked like padding. Rows are read at the norm of the LayerNorm'd span they are added to, √e
    (option ``entity_scale``: None for that, or a fixed factor): TransE's rows have unit norm, a tenth of
    the span's at e = 100, and ``LN(s + ẽ)`` then kept almost nothing of the entity. Under the
    ``zero_knowledge`` control every entity vector reads as zeros.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        # A plain tensor, not a buffer: it grows when new qids are added (fallback rows), so it stays out of
        # the state dict and out of DDP's buffer broadcast. It moves with the module (``_apply``), so that a
        # compiled forward finds it on the ids' device and does not move it itself.
        self.weight = torch.zeros(1, dim)
        self.index: dict[str, int] = {}
        self.labels: dict[str, str | None] = {}
        self.embeddings = None
        self.zeroed = False  # the counterfactual control: every entity vector reads as zeros
        self.scale: float | None = None  # None: rows read at the LayerNorm'd spans' norm, √dim (see ``load``)

    @property
    def loaded(self) -> bool:
        return self.embeddings is not None

    def load(self, embeddings, labels: dict[str, str | None] | None = None):
        """Use ``embeddings`` (an ``EntityEmbeddings``); ``labels`` (qid → label) serve the fallback."""
        if embeddings.dim != self.dim:
            raise KlmError(
                f"knowbert: the entity embeddings have dimension {embeddings.dim}, the model {self.dim}: "
                f"pass method option entity_dim={embeddings.dim}"
            )
        self.embeddings, self.labels = embeddings, dict(labels or {})
        self.index = {qid: row + 1 for row, qid in enumerate(embeddings.qids)}
        self.weight = torch.cat([torch.zeros(1, self.dim), embeddings.matrix.float().cpu()])
        if self.scale is None:
            # ẽ is added to a LayerNorm'd span (norm √dim): TransE's unit rows would be a tenth of it at dim 100,
            # and the sum's LayerNorm all but erases them (the type of a linked entity stayed at chance).
            norms = embeddings.matrix.float().norm(dim=-1)
            self.scale = math.sqrt(self.dim) / float(norms[norms > 0].mean()) if bool((norms > 0).any()) else 1.0

    def add(self, qids) -> dict[str, int]:
        """Rows for ``qids``: one without a TransE row gets its fallback vector appended once (row 0, masked
        like padding, if it has neither). Returns the whole qid → row index."""
        new = []
        for qid in dict.fromkeys(qids):
            if qid in self.index:
                continue
            try:
                vector = self.embeddings.lookup(qid, self.labels.get(qid))
            except KlmError:
                self.index[qid] = 0
                continue
            self.index[qid] = len(self.weight) + len(new)
            new.append(vector.float())
        if new:
            self.weight = torch.cat([self.weight, torch.stack(new).to(self.weight.device)])
        return self.index

    def _apply(self, fn, recurse=True):
        self.weight = fn(self.weight)
        return super()._apply(fn, recurse)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.weight.device != ids.device:  # a table loaded after the module moved
            self.weight = self.weight.to(ids.device)
        if self.zeroed:
            return self.weight.new_zeros(*ids.shape, self.dim)
        return F.embedding(ids, self.weight) * (1.0 if self.scale is None else self.scale)


def batch_qids(knowledge: list[dict]) -> list[str]:
    return [qid for example in knowledge for link in example["links"] for qid, _ in link["candidates"]]


def knowledge_tensors(knowledge: list[dict], length: int, index: dict[str, int]) -> KnowledgeTensors:
    """Padded span masks, candidate rows (``index``: qid → table row, 0 when absent), priors and masks from
    ``batch["knowledge"]``. Runs in the data loader (see ``KnowBert.knowledge_collate``), so it is plain CPU work."""
    spans = []
    for example in knowledge:
        links = [link for link in example["links"] if link["tokens"] and link["candidates"]]
        spans.append([link for link in links if max(link["tokens"]) < length])
    b, s = len(knowledge), max([len(links) for links in spans] + [0])
    c = max([len(link["candidates"]) for links in spans for link in links] + [1])
    span_mask = torch.zeros(b, s, length, dtype=torch.bool)
    ids = torch.zeros(b, s, c, dtype=torch.long)
    priors = torch.zeros(b, s, c)
    gold, df, close = (
        torch.zeros(b, s, dtype=torch.bool),
        torch.zeros(b, s, dtype=torch.long),
        torch.zeros(b, s, dtype=torch.long),
    )
    rows, columns, tokens = [], [], []
    for i, links in enumerate(spans):
        for m, link in enumerate(links):
            rows += [i] * len(link["tokens"])
            columns += [m] * len(link["tokens"])
            tokens += link["tokens"]
            candidates = link["candidates"]
            ids[i, m, : len(candidates)] = torch.tensor([index.get(qid, 0) for qid, _ in candidates])
            priors[i, m, : len(candidates)] = torch.tensor([float(prior) for _, prior in candidates])
            gold[i, m] = len(candidates) == 1 and float(candidates[0][1]) == 1.0
            df[i, m], close[i, m] = link.get("df", 0), link.get("close", 0)
    span_mask[rows, columns, tokens] = True
    candidate_mask = ids > 0
    return KnowledgeTensors(
        span_mask, span_mask.any(-1), ids, priors, candidate_mask, gold & candidate_mask[..., 0], df, close
    )


# -- KAR -----------------------------------------------------------------------------------------
class SelfAttentiveSpanPooling(nn.Module):
    """Each span as the attention-weighted mean of its tokens (Lee et al. 2017; allennlp's extractor)."""

    def __init__(self, dim: int):
        super().__init__()
        self.score = nn.Linear(dim, 1)

    def forward(self, tokens: torch.Tensor, span_mask: torch.Tensor) -> torch.Tensor:
        # tokens b × n × e, span_mask b × S × n → b × S × e
        logits = self.score(tokens).squeeze(-1).unsqueeze(1).expand(-1, span_mask.shape[1], -1)
        logits = logits.masked_fill(~span_mask, torch.finfo(logits.dtype).min)
        weights = logits.softmax(-1) * span_mask  # an empty (padding) span pools to zeros
        return weights @ tokens


class Attention(nn.Module):
    """Multi-head attention from ``queries`` to ``keys`` (the keys also give the values) through
    ``F.scaled_dot_product_attention``: what ``nn.MultiheadAttention`` computes, without its per-call
    Python checks (KAR's step time is launch- and overhead-bound at MiniLM's size)."""

    def __init__(self, dim: int, num_heads: int, dropout: float):
        super().__init__()
        self.num_heads, self.dropout = num_heads, dropout
        self.query = nn.Linear(dim, dim)
        self.key_value = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """``key_mask`` b × S, True where a key may be attended to (every row needs one)."""
        b, n, dim = queries.shape
        heads = lambda x: x.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)  # noqa: E731
        key, value = self.key_value(keys).chunk(2, dim=-1)
        attended = F.scaled_dot_product_attention(
            heads(self.query(queries)),
            heads(key),
            heads(value),
            attn_mask=key_mask[:, None, None, :],
            dropout_p=self.dropout if self.training else 0.0,
        )
        return self.out(attended.transpose(1, 2).reshape(b, n, dim))


class SpanTransformerLayer(nn.Module):
    """The entity linker's one transformer layer over a text's spans (post-norm, as BERT's)."""

    def __init__(self, dim: int, num_heads: int, dropout: float, layer_norm_eps: float):
        super().__init__()
        self.attention = Attention(dim, num_heads, dropout)
        self.attention_norm = nn.LayerNorm(dim, eps=layer_norm_eps)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(4 * dim, dim))
        self.mlp_norm = nn.LayerNorm(dim, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, spans: torch.Tensor, span_mask: torch.Tensor) -> torch.Tensor:
        spans = self.attention_norm(spans + self.dropout(self.attention(spans, spans, span_mask)))
        return self.mlp_norm(spans + self.dropout(self.mlp(spans)))


class KnowledgeAttentionRecontextualization(nn.Module):
    """The Knowledge Attention and Recontextualization component (KAR) rewrites the hidden states H_i that one
    layer of the backbone outputs, and the remaining layers read the rewritten states:

    1. ``H_proj = H_i W1 + b1`` into the entity dimension e.
    2. Each candidate mention span (the token indices ``klm prepare`` stored per link; both segments, the
       indices are absolute) is pooled by self-attentive span pooling over H_proj, then LayerNorm.
    3. Entity linker: one transformer layer (post-norm, as BERT's) over a text's spans; each candidate k of span m
       (≤ 30) is scored ``ψ_mk = MLP([s_m · e_mk / √e, p(e_mk | m)])``; padded candidates are masked.
    4. Candidates with ``ψ < δ`` are dropped, a softmax over the rest weighs their entity embeddings
       (for a span where none passes, see "What δ cuts off"), ``s'_m = LN(s_m + dropout(ẽ_m))``.
    5. Recontextualization, the official code's ``SpanAttentionLayer`` (a BERT layer whose keys/values are
       the spans): ``X = LN(H_proj + dropout(MHA(H_proj, S', S')))``, ``H'_proj = LN(X + dropout(MLP(X)))``;
       then ``H' = LN(H_i + dropout(H'_proj W2 + b2))``.

    Choices the paper leaves open, documented here:

    * **Round trip.** W2 starts as the pseudo-inverse W1⁺ (``torch.linalg.pinv``) and ``b2 = −W1⁺ b1``, so that
      ``(h W1 + b1) W2 + b2 = h P`` with ``P = W1 W1⁺`` the orthogonal projector onto what W1 keeps: the
      identity when e ≥ d (W1 of full rank), else the least-squares closest map to it. (The official code sets
      ``b2 = +W1⁺ b1``, which adds ``2 W1⁺ b1``; we take that for a sign slip.)
    * **Texts without a span** (none linked, all truncated, or all dropped by SI) pass through KAR unchanged:
      there is nothing to attend to, and the attention over zero keys is undefined.
    * **What δ cuts off** (option ``unlinked_spans``). Default ``"skip"``: a span none of whose candidates
      reaches δ carries no knowledge and is left out of the recontextualization's keys, so a text where no
      candidate passes leaves KAR unchanged and, with every candidate below δ, the states are the
      backbone's (tested). ``"null"`` is the paper's and allenai/kb's
      reading: such a span takes a learned null embedding and still recontextualizes the tokens (so the output
      depends on the spans even when no entity passes).
    """

    def __init__(
        self,
        hidden_size: int,
        *,
        entity_dim: int = 100,
        num_heads: int = 4,
        threshold: float = 0.0,
        scorer_hidden: int = 100,
        dropout: float = 0.1,
        layer_norm_eps: float = 1e-5,
        unlinked_spans: str = "skip",
    ):
        super().__init__()
        if entity_dim % num_heads:
            raise KlmError(f"knowbert: entity_dim {entity_dim} is not a multiple of num_heads {num_heads}")
        if unlinked_spans not in ("skip", "null"):
            raise KlmError(f"knowbert: unlinked_spans is 'skip' or 'null', not {unlinked_spans!r}")
        self.entity_dim, self.threshold, self.unlinked_spans = entity_dim, threshold, unlinked_spans
        self.dropout = nn.Dropout(dropout)
        # 1. projection into the entity dimension
        self.to_entity = nn.Linear(hidden_size, entity_dim)
        # 2. mention spans
        self.span_pooling = SelfAttentiveSpanPooling(entity_dim)
        self.span_norm = nn.LayerNorm(entity_dim, eps=layer_norm_eps)
        # 3. entity linker
        self.linker = SpanTransformerLayer(entity_dim, num_heads, dropout, layer_norm_eps)
        self.scorer = nn.Sequential(nn.Linear(2, scorer_hidden), nn.ReLU(), nn.Linear(scorer_hidden, 1))
        # 4. knowledge-enhanced spans
        self.entities = EntityTable(entity_dim)
        self.null_embedding = nn.Parameter(torch.randn(entity_dim) * 0.02) if unlinked_spans == "null" else None
        self.entity_span_norm = nn.LayerNorm(entity_dim, eps=layer_norm_eps)
        # 5. recontextualization: a BERT layer attending from the tokens to the spans
        self.attention = Attention(entity_dim, num_heads, dropout)
        self.attention_norm = nn.LayerNorm(entity_dim, eps=layer_norm_eps)
        self.mlp = nn.Sequential(
            nn.Linear(entity_dim, 4 * entity_dim), nn.GELU(), nn.Linear(4 * entity_dim, entity_dim)
        )
        self.mlp_norm = nn.LayerNorm(entity_dim, eps=layer_norm_eps)
        # back to the hidden size, with the residual H_i
        self.to_hidden = nn.Linear(entity_dim, hidden_size)
        self.output_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.init_round_trip()

    @torch.no_grad()
    def init_round_trip(self):
        """W2 = W1⁺ and b2 = −W1⁺ b1: projecting back undoes the projection as far as W1 keeps (see the class)."""
        inverse = torch.linalg.pinv(self.to_entity.weight.double())  # d × e
        self.to_hidden.weight.copy_(inverse.float())
        self.to_hidden.bias.copy_(-(inverse @ self.to_entity.bias.double()).float())

    def link(self, spans: torch.Tensor, knowledge: KnowledgeTensors):
        """Linking scores ψ (b × S × C, padded candidates −∞), the weighted entity embeddings ẽ (b × S × e)
        and which spans have a candidate at or above δ (b × S)."""
        embeddings = self.entities(knowledge.candidate_ids)  # b × S × C × e
        dot = (spans.unsqueeze(2) * embeddings).sum(-1) / math.sqrt(self.entity_dim)
        features = torch.stack([dot, knowledge.priors.to(dot.dtype)], dim=-1)
        scores = self.scorer(features).squeeze(-1).masked_fill(~knowledge.candidate_mask, float("-inf"))
        passing = scores >= self.threshold  # padded candidates (−∞) never pass
        # Softmax over the passing candidates; a finite fill keeps a span where none passes free of NaN
        # (its weights are then all zero).
        logits = torch.where(passing, scores, torch.full_like(scores, torch.finfo(scores.dtype).min))
        weighted = ((logits.softmax(-1) * passing).unsqueeze(-1) * embeddings).sum(2)
        linked = passing.any(-1) & knowledge.span_valid
        if self.null_embedding is not None:
            weighted = torch.where(linked.unsqueeze(-1), weighted, self.null_embedding.to(weighted.dtype))
        return scores, weighted, linked

    def forward(self, hidden: torch.Tensor, knowledge: KnowledgeTensors):
        """``(H', ψ)``: the rewritten hidden states (b × n × d) and the linking scores (b × S × C)."""
        if knowledge.span_mask.shape[1] == 0:  # no span in the whole batch: known on the host, no sync
            return hidden, None
        has_spans = knowledge.span_valid.any(-1)  # b
        # A text without spans gets every padded span unmasked (so no attention row is all −∞) and
        # its output replaced by H_i below; the same for the keys of step 5.
        span_padding = ~knowledge.span_valid & has_spans.unsqueeze(-1)
        projected = self.to_entity(hidden)  # 1
        spans = self.span_norm(self.span_pooling(projected, knowledge.span_mask))  # 2
        spans = self.linker(spans, ~span_padding)  # 3
        scores, entities, linked = self.link(spans, knowledge)
        spans = self.entity_span_norm(spans + self.dropout(entities))  # 4
        keys = linked if self.null_embedding is None else knowledge.span_valid
        has_keys = keys.any(-1)
        attended = self.attention(projected, spans, keys | ~has_keys.unsqueeze(-1))  # 5
        recontextualized = self.attention_norm(projected + self.dropout(attended))
        recontextualized = self.mlp_norm(recontextualized + self.dropout(self.mlp(recontextualized)))
        output = self.output_norm(hidden + self.dropout(self.to_hidden(recontextualized)))
        return torch.where(has_keys[:, None, None], output, hidden), scores


def linking_loss(scores: torch.Tensor, knowledge: KnowledgeTensors, threshold: float, margin: float) -> torch.Tensor:
    """Margin ranking of the gold spans' candidates against δ (below).

    **Linking loss** where gold links exist (a link with exactly one candidate of prior 1.0, as ``prepare``
    stores a dataset's gold links): the official margin ranking loss against the threshold,
    ``mean max(0, margin − y (ψ − δ))`` over the span's real candidates with y = +1 for the gold one and −1
    for the others. With the single gold candidate it is a hinge that pushes ψ above δ + margin.
    Alias-linked spans (no gold) get no linking loss.
    """
    candidates = knowledge.candidate_mask & knowledge.gold.unsqueeze(-1)
    labels = -torch.ones_like(scores)
    labels[..., 0] = 1.0  # a gold link's only candidate is its first
    # A masked mean rather than boolean indexing: no host sync, and 0 for a batch without gold links.
    hinge = F.relu(margin - labels * (scores - threshold)).masked_fill(~candidates, 0.0)
    return hinge.sum() / candidates.sum().clamp(min=1)


# -- locating the prepared entity table ----------------------------------------------------------
def prepared_kg_dir(data_module) -> Path:
    """The KG the data module's prepared features link into (found again, not read from a manifest's
    absolute path, so a cache carried to another machine still works)."""

    if getattr(data_module, "knowledge", None) is None:
        raise KlmError("knowbert needs a data module with knowledge features (dataset option knowledge={})")
    config = KnowledgeConfig.from_dict(data_module.knowledge)
    return knowledge_graph_dir(data_module, config, data_module.cache_dir)


def load_entity_table(kg_dir: Path | None, cache_dir, path: str | None = None, kind: str = "transe"):
    """``(EntityEmbeddings, qid → label)``: from ``path``, else the ``kind`` embeddings of the KG (knowledge option
    kg_embedding: TransE or RotatE; trained once, cached where ``klm prepare --kg-embeddings`` puts them)."""

    kg = KnowledgeGraph.load(kg_dir) if kg_dir is not None else None
    labels = {qid: entity.label for qid, entity in kg.entities.items()} if kg is not None else {}
    if path and Path(path).is_file():
        return EntityEmbeddings.load(path), labels
    if kg is None:
        raise KlmError(
            "knowbert: no entity embeddings (method option entity_embeddings) and no prepared KG to train them on"
        )
    return cached_embeddings(kind, kg, Path(cache_dir) / "kg_embeddings", progress=False), labels


# -- KAR in a backbone ---------------------------------------------------------------------------
KAR_SHAPE = ("kar_layer", "entity_dim", "num_heads", "threshold", "unlinked_spans")
CHECKPOINT_KAR = "kar.pt"
CHECKPOINT_ENTITIES = "entity_embeddings.pt"


def build_kar(
    encoder,
    kar_layer: int | None,
    *,
    entity_dim: int,
    num_heads: int,
    threshold: float,
    unlinked_spans: str,
    dropout: float,
) -> tuple[int, KnowledgeAttentionRecontextualization]:
    layers = encoder_layers(encoder)
    kar_layer = len(layers) - 2 if kar_layer is None else kar_layer
    if not 0 <= kar_layer < len(layers):
        raise KlmError(f"knowbert: kar_layer {kar_layer} outside the backbone's {len(layers)} layers (0-based)")
    return kar_layer, KnowledgeAttentionRecontextualization(
        encoder.config.hidden_size,
        entity_dim=entity_dim,
        num_heads=num_heads,
        threshold=threshold,
        dropout=dropout,
        unlinked_spans=unlinked_spans,
    )


def entity_collate(kar, data, entity_embeddings: str | None):
    """A ``knowledge_collate`` hook: the entity table loaded from what the set-up data module ``data`` prepared
    (or the file ``entity_embeddings``), every qid of its knowledge features given its row, and the function the
    data loader builds the batch tensors with.

    **Batch tensors in the loader.** ``knowledge_collate`` gives every qid of the prepared features its table
    row once (fallbacks included) and returns ``knowledge_tensors`` for the data module (``wire_knowledge``),
    so span masks and candidate rows are built by the data loader (its workers, where there are any), not in
    the training step; SI then masks spans on the device (``SelectiveInjection.keep_mask``), and no step waits
    on the host.
    """
    if not kar.entities.loaded:
        kind = KnowledgeConfig.from_dict(data.knowledge).kg_embedding
        kar.entities.load(*load_entity_table(prepared_kg_dir(data), data.cache_dir, entity_embeddings, kind))
    # Rows fixed before the loaders start, so that loader workers share one qid → row index.
    index = kar.entities.add(batch_qids(data.knowledge_rows()))
    return partial(knowledge_tensors, index=dict(index))


def batch_knowledge(batch, kar) -> KnowledgeTensors:
    """``batch["knowledge"]`` as tensors on the batch's device (built here when the loader did not)."""
    if not kar.entities.loaded:
        raise KlmError(
            "knowbert: no entity table; wire the model to a prepared data module (wire_knowledge) or call "
            "kar.entities.load"
        )
    tensors = batch["knowledge"]
    if not isinstance(tensors, KnowledgeTensors):
        tensors = knowledge_tensors(tensors, batch["input_ids"].shape[-1], kar.entities.add(batch_qids(tensors)))
    if tensors.span_mask.device != batch["input_ids"].device:
        tensors = tensors.to(batch["input_ids"].device)
    return tensors


def encode_with_kar(encoder, kar, kar_layer: int, inputs: dict, tensors: KnowledgeTensors):
    """``(last hidden states, ψ or None)`` of ``encoder`` on ``inputs`` with KAR rewriting layer ``kar_layer``'s
    output.

    **Insertion** without forking transformers: a forward hook on layer ``kar_layer`` (0-based) replaces
    its output for the duration of one ``encode`` call, so the backbone builds its own attention masks
    for every attention implementation. Default: the second-to-last layer (one layer follows KAR;
    KnowBERT-Wiki's own choice on a 12-layer BERT is index 9, after layer 10, which ``kar_layer`` can set).
    """
    captured = {}

    def rewrite(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        rewritten, captured["scores"] = kar(hidden, tensors)
        return (rewritten, *output[1:]) if isinstance(output, tuple) else rewritten

    handle = encoder_layers(encoder)[kar_layer].register_forward_hook(rewrite)
    try:
        hidden = encoder(**inputs).last_hidden_state
    finally:
        handle.remove()
    return hidden, captured.get("scores")


def read_pretrained(encoder) -> dict | None:
    """The manifest of a KnowBERT pretraining checkpoint the encoder was loaded from, else None."""
    directory = Path(str(getattr(encoder.config, "_name_or_path", "") or ""))
    manifest = directory / "manifest.json"
    try:
        found = json.loads(manifest.read_text()) if manifest.is_file() else None
    except (OSError, ValueError):
        return None
    return {**found, "directory": str(directory)} if found and found.get("method") == "knowbert-pretraining" else None


# -- the methods ---------------------------------------------------------------------------------
@dataclass
class KnowBertOptions(MethodOptions):
    """KnowBERT's options: KAR's shape (``kar_layer``: None for the second-to-last layer; ``entity_dim``,
    ``num_heads``, the linking ``threshold`` δ and ``unlinked_spans``; a pretrained checkpoint's own shape wins),
    the linking loss (``linking_loss_weight``, ``linking_margin``), and the entity table (``entity_embeddings``:
    a file, else what the data module prepared; ``entity_scale``: None to match the backbone's token norm, or a
    fixed factor)."""

    kar_layer: int | None = None
    entity_dim: int = 100
    num_heads: int = 4
    threshold: float = 0.0
    unlinked_spans: Literal["skip", "null"] = "skip"
    linking_loss_weight: float = 1.0
    linking_margin: float = 0.2
    entity_embeddings: str | None = None
    entity_scale: float | None = None


class KnowBert(TaskModel):
    """The backbone with KAR after layer ``kar_layer`` and the entity-linking loss on gold links. Started from
    a ``klm pretrain --method knowbert`` checkpoint (``--backbone DIR``), KAR's weights, shape and entity
    table come from there.

    **New modules' rate.** KAR is new (unless it comes from a pretraining checkpoint): ``new_modules`` hands it
    to the ``new_module_lr`` option, as allenai/kb trains KnowBERT's new layers at their own rate.
    """

    options_class = KnowBertOptions
    attn_implementation = None
    cuda_graphs = "reduce-overhead"
    selective_injection: SelectiveInjection | None = None

    def __init__(self, encoder, spec, **options):
        super().__init__(encoder, spec, **options)
        shape = {name: getattr(self.options, name) for name in KAR_SHAPE}
        entity_embeddings = self.options.entity_embeddings
        pretrained = read_pretrained(encoder)
        if pretrained is not None:  # the checkpoint's KAR, as it was pretrained
            shape = {name: pretrained["kar"][name] for name in KAR_SHAPE}
            entity_embeddings = entity_embeddings or str(Path(pretrained["directory"]) / CHECKPOINT_ENTITIES)
        self.kar_layer, self.kar = build_kar(encoder, dropout=self.dropout, **shape)
        self.kar_pretrained = pretrained is not None
        if pretrained is not None:
            self.kar.load_state_dict(
                torch.load(Path(pretrained["directory"]) / CHECKPOINT_KAR, map_location="cpu", weights_only=True)
            )
        self.linking_loss_weight, self.linking_margin = self.options.linking_loss_weight, self.options.linking_margin
        self.entity_embeddings_path = entity_embeddings
        self.kar.entities.zeroed = self.options.zero_knowledge  # the control: KAR runs, every entity vector is zero
        self.kar.entities.scale = None if self.options.entity_scale is None else float(self.options.entity_scale)
        self._linking = None

    def knowledge_collate(self, data):
        return entity_collate(self.kar, data, self.entity_embeddings_path)

    def new_modules(self):
        return [] if self.kar_pretrained else [self.kar]

    def method_stats(self) -> dict:
        """The entity scale the table's rows were read at: the option, or the one ``EntityTable.load`` derived."""
        scale = self.kar.entities.scale
        return {**super().method_stats(), "entity_scale": None if scale is None else round(float(scale), 6)}

    def compiled_modules(self):
        layers = super().compiled_modules()
        # Under CUDA graphs KAR runs eager between the layers' graphs: compiled there, its backward segfaulted
        # (torch 2.11, H100).
        return layers if self.cuda_graph_steps else layers + [self.kar]

    def encode(self, batch):
        tensors = batch_knowledge(batch, self.kar)
        if self.training and self.selective_injection is not None:
            kept = self.selective_injection.keep_mask(
                tensors.df, tensors.close, tensors.span_valid, entities=tensors.candidate_ids[..., 0]
            )  # the top candidate's row
            tensors = replace(
                tensors, span_valid=kept, span_mask=tensors.span_mask & kept.unsqueeze(-1), gold=tensors.gold & kept
            )
        hidden, scores = encode_with_kar(
            self.encoder, self.kar, self.kar_layer, {k: batch[k] for k in ENCODER_INPUTS if k in batch}, tensors
        )
        self._linking = (scores, tensors) if scores is not None else None
        return hidden

    def extra_losses(self, batch, features):
        if self._linking is None or not self.linking_loss_weight:
            return {}
        scores, tensors = self._linking
        return {
            "linking": self.linking_loss_weight * linking_loss(scores, tensors, self.kar.threshold, self.linking_margin)
        }


@dataclass
class KnowBertSIOptions(SelectiveInjectionOptions, KnowBertOptions):
    """KnowBERT's options and SI's."""


class KnowBertSI(SelectivelyInjected, KnowBert):
    """KnowBERT whose training batches keep only the links selective injection draws (Eq. 4), on the device
    (options: ``SelectiveInjectionOptions``)."""

    options_class = KnowBertSIOptions


@dataclass
class KnowBertSISROptions(SpectralRegularizationOptions, KnowBertSIOptions):
    """KnowBERT's options, SI's and SR's."""


class KnowBertSISR(KnowBertSI):
    """KnowBERT + SI + spectral regularization of the head's batch features (Eq. 5)."""

    options_class = KnowBertSISROptions

    def extra_losses(self, batch, features):
        sr = self.options.sr_weight * spectral_penalty(features, self.options.sr_k)
        return {**super().extra_losses(batch, features), "sr": sr}


# -- knowledge pretraining (MLM + linking) --------------------------------------------------------
class KnowBertPretraining(pl.LightningModule):
    """KnowBERT's knowledge pretraining (the paper's §4: the masked-LM loss and the entity-linking loss,
    jointly, with KAR inserted), here on the train texts of a prepared dataset, whose gold links (where it
    has them) supervise the linker. An MLM head initialised from the word embeddings serves backbones
    without one. Masking is BERT's (15 %, 80/10/10), special tokens and padding excluded; entity tokens
    may be masked (the model must then recover them from the linked entity).

    **Knowledge pretraining** (optional; the paper pretrains KAR with MLM + linking before any task):
    ``klm pretrain --method knowbert --corpus DATASET`` trains backbone + KAR + an MLM head on the train texts
    of a prepared dataset (gold links supervise the linker) and writes a checkpoint; ``knowbert`` started
    with ``--backbone`` that directory takes KAR's weights, shape and entity table from it.
    """

    def __init__(
        self,
        encoder,
        tokenizer,
        total_steps: int,
        *,
        kar_layer: int | None = None,
        entity_dim: int = 100,
        num_heads: int = 4,
        threshold: float = 0.0,
        unlinked_spans: str = "skip",
        linking_loss_weight: float = 1.0,
        linking_margin: float = 0.2,
        mask_probability: float = 0.15,
        lr: float = 5e-5,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        dropout: float = 0.1,
        entity_embeddings: str | None = None,
    ):
        super().__init__()
        self.encoder, self.tokenizer = encoder.train(), tokenizer
        self.kar_layer, self.kar = build_kar(
            encoder,
            kar_layer,
            entity_dim=entity_dim,
            num_heads=num_heads,
            threshold=threshold,
            unlinked_spans=unlinked_spans,
            dropout=dropout,
        )
        self.mlm_head = MLMHead(
            encoder.get_input_embeddings(), encoder.config.hidden_size, getattr(encoder.config, "layer_norm_eps", 1e-12)
        )
        self.shape = {
            "kar_layer": self.kar_layer,
            "entity_dim": entity_dim,
            "num_heads": num_heads,
            "threshold": threshold,
            "unlinked_spans": unlinked_spans,
        }
        self.linking_loss_weight, self.linking_margin, self.mask_probability = (
            linking_loss_weight,
            linking_margin,
            mask_probability,
        )
        self.total_steps, self.lr, self.weight_decay, self.warmup_ratio = total_steps, lr, weight_decay, warmup_ratio
        self.entity_embeddings_path = entity_embeddings
        self.final_losses: dict[str, torch.Tensor] = {}  # the last step's, read (one device sync) at the end

    def knowledge_fields(self, data) -> dict[str, list]:
        return {}

    def knowledge_collate(self, data):
        return entity_collate(self.kar, data, self.entity_embeddings_path)

    def losses(self, batch) -> dict[str, torch.Tensor]:
        tensors = batch_knowledge(batch, self.kar)
        input_ids = batch["input_ids"]
        protected = torch.isin(input_ids, torch.tensor(self.tokenizer.all_special_ids, device=input_ids.device))
        masked, labels = mask_tokens(
            input_ids,
            protected | (batch["attention_mask"] == 0),
            self.tokenizer.mask_token_id,
            self.encoder.config.vocab_size,
            self.mask_probability,
        )
        inputs = {**{k: batch[k] for k in ENCODER_INPUTS if k in batch}, "input_ids": masked}
        hidden, scores = encode_with_kar(self.encoder, self.kar, self.kar_layer, inputs, tensors)
        logits = self.mlm_head(hidden)
        losses = {"mlm": F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)}
        if scores is not None and self.linking_loss_weight:
            losses["linking"] = self.linking_loss_weight * linking_loss(
                scores, tensors, self.kar.threshold, self.linking_margin
            )
        return losses

    def training_step(self, batch, batch_idx):
        losses = self.losses(batch)
        if logs_this_step(self):
            self.log_dict(
                {f"train/{name}": value for name, value in losses.items()},
                batch_size=len(batch["input_ids"]),
                prog_bar=True,
            )
        self.final_losses = {name: value.detach() for name, value in losses.items()}
        return sum(losses.values())

    def configure_optimizers(self):
        return adamw_with_warmup(self, self.lr, self.weight_decay, self.warmup_ratio, self.total_steps)

    def save_checkpoint(self, directory, extra: dict | None = None) -> Path:
        """A ``save_pretrained`` directory (``--backbone DIR`` loads the encoder) with KAR's weights, the
        entity table it was trained with, and ``manifest.json`` (KAR's shape, steps, final losses)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.encoder.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        torch.save(self.kar.state_dict(), directory / CHECKPOINT_KAR)
        self.kar.entities.embeddings.save(directory / CHECKPOINT_ENTITIES)
        manifest = {
            "method": "knowbert-pretraining",
            "kar": self.shape,
            "steps": int(self.global_step),
            "precision": trainer_of(self).precision if trainer_of(self) else None,
            "final_losses": {name: float(value) for name, value in self.final_losses.items()},
            "lr": self.lr,
            "mask_probability": self.mask_probability,
            "linking_loss_weight": self.linking_loss_weight,
            **(extra or {}),
        }
        (directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        return directory
