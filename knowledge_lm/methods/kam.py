"""KAM-BERT (papers/001, §3; METHODS.md): knowledge maps mixed into every layer's attention logits.

Per layer, per head, with the logits ``A_sa = QKᵀ/√d`` (before mask and softmax):

1. **Maps** ``M_1..k ∈ [0,1]^{n×n}`` over the sub-word tokens, built once per batch from the prepared
   features (``batch["knowledge"]``) as a dense ``b × k × n × n`` tensor on the device:

   * ``entity``: 1 where both tokens lie inside the same linked mention (``links[*].tokens``);
   * ``phrase``: 1 where both tokens lie inside the same phrase segment (``phrases[*].tokens``);
   * ``pmi``: ``max(0, PMI(w_i; w_j)) / Z`` of the two tokens' whole words (1 within one word), read
     from the feature ``pmi_pairs``: ``[[word_i, word_j, value], ...]`` over the indices of ``words``
     (what ``CorpusStatistics.normalised_pmi_matrix`` gives, kept sparse; ``klm prepare`` stores it
     since features version 2). Without it the map is all zeros and a warning says so once
     (``missing_pmi="error"`` raises instead).
   * ``kg`` (Eq. 8, optional, not in the default maps): 1 where the two tokens' linked entities (each
     mention's top candidate) are adjacent in the KG (an edge either way). Tokens of one mention are not
     adjacent to themselves unless the KG has a self-loop. The KG is the one the data module prepared,
     loaded in the ``setup`` hook (as KnowBERT finds its entity table), or ``load_kg``.

   Spans carry sub-word indices already (a sub-word takes its word's value); indices truncated away
   (≥ n) are dropped.
2. **Attention** (``KamSelfAttention``, which replaces each layer's ``attention.self`` and keeps the
   original's ``query``/``key``/``value`` modules, so the state-dict names of the backbone's weights do
   not change): ``L_i = A_sa + A_{i−1}`` (the skip; ``A_{−1} = 0``, or no skip), the channel-wise
   concatenation ``[L_i (m heads) | M (k maps)]`` → ``Conv2d(m+k → m, 3×3, padding 1)`` → ``A_sem``,
   ``A_i = softmax(α·A_sem + (1−α)·L_i + mask)``, output ``A_i V``. Layer i hands its result map ``A_i``
   (after the softmax, before dropout) to layer i+1, as §3.3 says ("a skip connection from the result
   attention map in the i-th layer to the self-attention map of the i+1 layer", A^i being Eq. 3's softmax).
   Why not Evolving Attention's pre-softmax hand-over: summed over layers, pre-softmax logits grow with
   depth, and a pretrained backbone fine-tuned that way collapsed to chance on the generated task (every
   kam cell at 50%, α = 0 included); a probability map adds at most 1 to a logit.
   Choices the paper leaves open: the conv reads the logits with the rows and columns of padding
   positions zeroed, so padding never leaks into real positions through the 3×3 window (an example's
   states do not depend on how long the batch is padded); one conv per layer; under mixed precision the
   maps, logits and result maps stay in the compute dtype (bf16), the softmax accumulating in float32 inside
   (as SDPA's kernels do), since these b × m × n × n passes are KAM's cost where the GPU is busy.
   ``use_conv=False`` (the w/o-conv ablation) replaces ``A_sem`` by the mean of the k maps, the same for
   every head.
3. **PMI expansion** (``expansion_k``, §3.4): the sub-words of the first ``expansion_k`` words that ``klm
   prepare`` stored per example (``pmi_expansion``: words absent from the sentence with the highest
   mean PMI with its words, each as ``ids`` of the backbone's sub-words and ``pmi``: ``[[word_index,
   max(0, PMI)/Z], ...]`` with the sentence's ``words``) are appended after the N rows (K sub-words in
   all, padded to the batch's largest K and masked). Every map becomes ``(N+K)²`` with zeros outside
   the sentence block, except the PMI map, which holds 1 within an expansion word and its stored PMI
   with the sentence's words (expansion words among themselves: 0). The N+K rows make the logits, the
   conv and the skip; the output keeps the N sentence rows (``A[:N] V``), which equals running the
   whole layer on N+K rows and trimming, as the rest of a layer is position-wise.
   Reading of "trimmed, and a new round of augmentation in the next layer": the auxiliary rows' hidden
   states are the backbone's embeddings of their sub-words (positions right after the example's last
   real token, segment 0), the same at every layer, which projects them with its own query/key/value;
   no layer's output for them is kept.
   Default ``expansion_k = 0`` (off): the paper includes the expansion in KAM-BERT but gives no k and no
   ablation of it, so a value would be ours; off keeps ``kam`` the method its earlier results measured.
   The expansion needs the ``pmi`` map (the only one that says anything about the auxiliary words).
4. **Invariant** (tested): α = 0 without skip and without expansion gives the backbone's hidden states
   exactly.

``kam+si``: selective injection (``sisr.SelectiveInjection``, Eq. 4 of papers/000) filters the linked
mentions that build the entity (and kg) map, in training only, as ``knowbert+si`` does.

Needs ``attn_implementation = "eager"``: the wrapper computes the logits itself, and eager is the
implementation whose 4D additive mask (b × 1 × n × n, or None without padding) it reads.
"""

import warnings
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

from knowledge_lm.errors import KlmError
from knowledge_lm.backbones import encoder_layers
from knowledge_lm.methods.sisr import SelectiveInjection, train_knowledge_rows
from knowledge_lm.registry import register_method
from knowledge_lm.task_model import TaskModel

MAP_NAMES = ("entity", "phrase", "pmi", "kg")
DEFAULT_MAPS = ("entity", "phrase", "pmi")


# -- the knowledge maps of a batch ----------------------------------------------------------------
def _in_range(tokens, length: int) -> list[int]:
    return sorted({t for t in tokens if 0 <= t < length})


def _block_entries(spans, length: int):
    """(i, j) index lists setting a 1 for every pair of tokens inside the same span."""
    rows, cols = [], []
    for span in spans:
        tokens = _in_range(span.get("tokens") or [], length)
        for i in tokens:
            rows += [i] * len(tokens)
            cols += tokens
    return rows, cols


def expansion_words(example: dict, expansion_k: int) -> list[dict]:
    """The first ``expansion_k`` PMI expansion words ``klm prepare`` stored (ranked by mean PMI)."""
    if expansion_k <= 0:
        return []
    stored = example.get("pmi_expansion")
    if stored is None:
        raise KlmError("kam: the prepared features have no PMI expansion words (pmi_expansion); "
                       "run `klm prepare` again or set expansion_k=0")
    return stored[:expansion_k]


def auxiliary_ids(knowledge: list[dict], expansion_k: int) -> list[list[int]]:
    """Per example, the sub-word ids of its expansion words, in order: the K rows appended after N."""
    return [[piece for word in expansion_words(example, expansion_k) for piece in word["ids"]] for example in knowledge]


def _pair_entries(first_tokens, second_tokens, value: float):
    """(i, j, values) setting ``value`` (clipped to [0, 1]) from every token of one word to every token of another."""
    rows = [t for t in first_tokens for _ in second_tokens]
    cols = [u for _ in first_tokens for u in second_tokens]
    return rows, cols, [min(1.0, max(0.0, float(value)))] * len(rows)


@dataclass
class KamKnowledge:
    """A batch's knowledge as KAM reads it: the maps' nonzero entries (sparse, built on the CPU, by the data
    loader where ``Kam.setup`` could ask it to) and the expansion sub-words; densified on the device."""

    entries: torch.Tensor  # 4 × E long: example, map, row, column
    values: torch.Tensor  # E float
    size: int  # n + K: the maps' side
    auxiliary_ids: torch.Tensor  # b × K long, 0-padded: the expansion sub-words, in order
    auxiliary_real: torch.Tensor  # b × K bool

    def to(self, device, non_blocking: bool = False) -> "KamKnowledge":
        """On ``device`` (Lightning's batch transfer calls this)."""
        move = lambda tensor: tensor.to(device, non_blocking=non_blocking)  # noqa: E731
        return KamKnowledge(move(self.entries), move(self.values), self.size, move(self.auxiliary_ids),
                            move(self.auxiliary_real))

    def maps(self, batch_size: int, num_maps: int) -> torch.Tensor:
        dense = torch.zeros(batch_size, num_maps, self.size, self.size, device=self.values.device)
        # accumulate=False: overlapping spans of one map set the same value (the last write wins for PMI)
        return dense.index_put_(tuple(self.entries), self.values)


def knowledge_maps(knowledge: list[dict], length: int, maps=DEFAULT_MAPS, device=None,
                   missing_pmi: str = "zeros", kg=None, expansion_k: int = 0) -> torch.Tensor:
    """``b × k × (n+K) × (n+K)`` float maps in [0, 1] (see the module docstring), densified on ``device``;
    K = 0 without expansion."""
    return map_entries(knowledge, length, maps, missing_pmi, kg, expansion_k).to(device).maps(len(knowledge), len(maps))


def map_entries(knowledge: list[dict], length: int, maps=DEFAULT_MAPS, missing_pmi: str = "zeros", kg=None,
                expansion_k: int = 0) -> KamKnowledge:
    """The nonzero entries of every map of ``knowledge`` (the per-example features of a batch padded to
    ``length``), and its expansion sub-words."""
    for name in maps:
        if name not in MAP_NAMES:
            raise KlmError(f"kam: unknown map {name!r}; known: {', '.join(MAP_NAMES)}")
        if name == "kg" and kg is None:
            raise KlmError("kam: the kg map needs the prepared knowledge graph (run under a Trainer with a "
                           "prepared data module, or call load_kg)")
    expansions = [expansion_words(example, expansion_k) for example in knowledge]
    size = length + max((len(ids) for ids in auxiliary_ids(knowledge, expansion_k)), default=0)
    batch, channel, rows, cols, values = [], [], [], [], []

    def add(b, c, r, s, v=None):
        batch.extend([b] * len(r))
        channel.extend([c] * len(r))
        rows.extend(r)
        cols.extend(s)
        values.extend([1.0] * len(r) if v is None else v)

    for b, example in enumerate(knowledge):
        for c, name in enumerate(maps):
            if name == "entity":
                add(b, c, *_block_entries(example.get("links") or [], length))
            elif name == "phrase":
                add(b, c, *_block_entries(example.get("phrases") or [], length))
            elif name == "pmi":
                words = [_in_range(word.get("tokens") or [], length) for word in example.get("words") or []]
                pairs = example.get("pmi_pairs")
                if pairs is None:
                    if missing_pmi == "error":
                        raise KlmError("kam: the prepared features have no pairwise PMI (pmi_pairs); "
                                       "use kam-no-pmi or prepare them with pairwise PMI")
                    # Python's default filter shows this once per call site, not once per batch.
                    warnings.warn("kam: prepared features have no pmi_pairs; the PMI map is all zeros", stacklevel=2)
                else:
                    add(b, c, *_block_entries([{"tokens": tokens} for tokens in words], length))  # 1 within a word
                    for first, second, value in pairs:
                        for i, j in ((first, second), (second, first)):
                            if i < len(words) and j < len(words) and i != j:
                                add(b, c, *_pair_entries(words[i], words[j], value))
                position = length
                for word in expansions[b]:
                    pieces = list(range(position, position + len(word["ids"])))
                    position += len(pieces)
                    add(b, c, *_block_entries([{"tokens": pieces}], size))
                    for index, value in word["pmi"]:
                        if index < len(words):
                            add(b, c, *_pair_entries(words[index], pieces, value))
                            add(b, c, *_pair_entries(pieces, words[index], value))
            elif name == "kg":
                mentions = [(link["candidates"][0][0], _in_range(link.get("tokens") or [], length))
                            for link in example.get("links") or [] if link.get("candidates")]
                for first, first_tokens in mentions:
                    if first not in kg:
                        continue
                    adjacent = kg.neighbours(first)
                    for second, second_tokens in mentions:
                        if second in adjacent:  # neighbours are undirected: ``second`` adds the reverse pairs
                            add(b, c, [t for t in first_tokens for _ in second_tokens],
                                [u for _ in first_tokens for u in second_tokens])
    ids = auxiliary_ids(knowledge, expansion_k)
    width = max((len(row) for row in ids), default=0)
    return KamKnowledge(torch.tensor([batch, channel, rows, cols], dtype=torch.long).view(4, -1),
                        torch.tensor(values, dtype=torch.float), size,
                        torch.tensor([row + [0] * (width - len(row)) for row in ids], dtype=torch.long).view(len(ids), width),
                        torch.tensor([[True] * len(row) + [False] * (width - len(row)) for row in ids],
                                     dtype=torch.bool).view(len(ids), width))


# -- the attention -------------------------------------------------------------------------------
class KamState:
    """What the layers of one ``encode`` call share: the maps and the previous layer's result map."""

    def __init__(self):
        self.maps: torch.Tensor | None = None
        self.previous: torch.Tensor | None = None
        self.real: torch.Tensor | None = None  # b × (n+K) bool: which positions are tokens, not padding
        self.auxiliary: torch.Tensor | None = None  # b × K × hidden: the expansion sub-words' embeddings
        self.memos: dict | None = None  # per encode call: what every layer would otherwise rebuild

    def memo(self, key, build):
        """``build()`` once per ``encode`` call (each op costs host time, and a MiniLM step is bound by it)."""
        if self.memos is None:
            return build()
        if key not in self.memos:
            self.memos[key] = build()
        return self.memos[key]


class KamSelfAttention(nn.Module):
    """Drop-in for a BERT-family ``attention.self`` (transformers 5: ``forward(hidden_states,
    attention_mask=None, ...) -> (output b×n×(m·d), probabilities)``)."""

    def __init__(self, original: nn.Module, state: KamState, num_maps: int, alpha: float = 0.2, skip: bool = True,
                 use_conv: bool = True):
        super().__init__()
        for name in ("query", "key", "value"):
            if not isinstance(getattr(original, name, None), nn.Linear):
                raise KlmError(f"kam: {type(original).__name__} has no {name} projection to wrap")
        self.query, self.key, self.value = original.query, original.key, original.value
        self.dropout = original.dropout
        self.config = getattr(original, "config", None)
        self.num_attention_heads = original.num_attention_heads
        self.attention_head_size = original.attention_head_size
        self.scaling = getattr(original, "scaling", self.attention_head_size ** -0.5)
        self.kam_state, self.num_maps, self.alpha, self.skip = state, num_maps, alpha, skip
        self.conv = nn.Conv2d(self.num_attention_heads + num_maps, self.num_attention_heads, 3, padding=1) if use_conv else None

    def forward(self, hidden_states, attention_mask=None, *args, **kwargs):
        length = hidden_states.shape[1]
        auxiliary = self.kam_state.auxiliary
        if auxiliary is not None:
            auxiliary = self.kam_state.memo(("auxiliary", hidden_states.dtype), lambda: auxiliary.to(hidden_states.dtype))
        rows = hidden_states if auxiliary is None else torch.cat([hidden_states, auxiliary], 1)
        shape = (*rows.shape[:-1], -1, self.attention_head_size)
        query = self.query(rows).view(shape).transpose(1, 2)  # b × m × (n+K) × d
        key = self.key(rows).view(shape).transpose(1, 2)
        value = self.value(rows).view(shape).transpose(1, 2)
        state = self.kam_state
        if self.skip and state.previous is not None:  # L_i = A_sa + A_{i−1}: the scaling and the sum in the matmul
            logits = torch.baddbmm(state.previous.flatten(0, 1), query.flatten(0, 1), key.transpose(2, 3).flatten(0, 1),
                                   alpha=self.scaling).view_as(state.previous)
        else:
            logits = torch.matmul(query, key.transpose(2, 3)) * self.scaling  # A_sa
        dtype = logits.dtype
        if auxiliary is not None:  # the layer's mask covers the n sentence keys only
            attention_mask = state.real[:, None, None, :]
        if attention_mask is not None:
            mask = attention_mask
            attention_mask = state.memo(("additive mask", dtype), lambda: additive_mask(mask, dtype))
        maps = state.maps
        if maps is None:
            maps = logits.new_zeros(logits.shape[0], self.num_maps, *logits.shape[-2:])
        else:
            maps = state.memo(("maps", dtype), lambda: state.maps.to(dtype))
        if self.conv is not None:
            if attention_mask is not None:
                mask = attention_mask
                logits_padding = state.memo("padding pairs", lambda: self._padding_pairs(mask))
                visible = logits.masked_fill(logits_padding, 0.0)
            else:
                visible = logits
            semantic = self.conv(torch.cat([visible, maps], dim=1))  # A_sem
        elif self.num_maps:
            semantic = maps.mean(1, keepdim=True)  # w/o conv: the maps' mean, every head
        else:
            semantic = torch.zeros_like(logits)
        result = torch.lerp(logits, semantic, self.alpha)  # α·A_sem + (1−α)·L in one pass
        scores = result if attention_mask is None else result + attention_mask
        # In the logits' dtype (bf16 under mixed precision), the softmax accumulating in float32 inside: autocast
        # would return float32, and every b × m × n × n pass after it (the hand-over to the next layer, its
        # sum, the conv's input, the mix) would then move twice the bytes; those passes are KAM's step time
        # where the GPU is busy. The baseline's SDPA also multiplies bf16 probabilities with V.
        with torch.autocast(scores.device.type, enabled=False):
            attention = scores.softmax(-1)
        self.kam_state.previous = attention
        probabilities = F.dropout(attention, p=self.dropout.p, training=self.training)
        probabilities = probabilities[:, :, :length]  # trimmed back to the n sentence rows
        output = torch.matmul(probabilities, value).transpose(1, 2).contiguous()
        return output.reshape(*hidden_states.shape[:-1], -1), probabilities

    def _padding_pairs(self, attention_mask):
        """Where the row or the column is a padding position (the layer's mask masks columns only)."""
        real = self.kam_state.real
        if real is None:
            return attention_mask < 0
        return ~(real[:, None, :, None] & real[:, None, None, :])


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The layer's mask (bool: True where attended, or additive) as an additive mask in ``dtype``; a float
    mask's large negatives become ``dtype``'s lowest (float32's lowest overflows bf16 to −inf)."""
    if mask.dtype == torch.bool:
        return torch.zeros_like(mask, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)
    return mask.clamp(min=torch.finfo(dtype).min).to(dtype)


# -- the methods ---------------------------------------------------------------------------------
@register_method("kam")
class Kam(TaskModel):
    """The backbone with every layer's self-attention replaced by ``KamSelfAttention``."""

    needs_knowledge = True
    attn_implementation = "eager"
    default_maps: tuple[str, ...] = DEFAULT_MAPS
    default_use_conv = True
    selective_injection: SelectiveInjection | None = None

    def __init__(self, encoder, spec, alpha: float = 0.2, skip: bool = True, use_conv: bool | None = None,
                 maps=None, expansion_k: int = 0, missing_pmi: str = "zeros", **options):
        super().__init__(encoder, spec, **options)
        if missing_pmi not in ("zeros", "error"):
            raise KlmError(f"kam: missing_pmi {missing_pmi!r}: expected zeros or error")
        implementation = getattr(encoder.config, "_attn_implementation", "eager")
        if implementation not in (None, "eager"):
            raise KlmError(f"kam needs the backbone loaded with attn_implementation='eager', not {implementation!r}")
        self.maps = tuple(self.default_maps if maps is None else ([maps] if isinstance(maps, str) else maps))
        for name in self.maps:
            if name not in MAP_NAMES:
                raise KlmError(f"kam: unknown map {name!r}; known: {', '.join(MAP_NAMES)}")
        if not isinstance(expansion_k, int) or expansion_k < 0:
            raise KlmError(f"kam: expansion_k {expansion_k!r}: expected a whole number of words, 0 for none")
        if expansion_k and "pmi" not in self.maps:
            raise KlmError("kam: PMI expansion (expansion_k > 0) needs the pmi map")
        self.expansion_k = expansion_k
        self.kg = None
        self.missing_pmi = missing_pmi
        self.kam_state = KamState()
        use_conv = self.default_use_conv if use_conv is None else use_conv
        self.kam_layers = []
        for layer in encoder_layers(encoder):
            attention = getattr(layer, "attention", None)
            if attention is None or not hasattr(attention, "self"):
                raise KlmError(f"kam: {type(layer).__name__} has no attention.self to replace")
            attention.self = KamSelfAttention(attention.self, self.kam_state, len(self.maps), alpha, skip, use_conv)
            self.kam_layers.append(attention.self)

    def load_kg(self, kg):
        self.kg = kg

    def setup(self, stage=None):
        """Loads the prepared KG where the ``kg`` map needs it (see the module docstring), and has the data
        loader build the maps' entries (not with SI: its draw belongs to the training step)."""
        data = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if "kg" in self.maps and self.kg is None and data is not None:
            from knowledge_lm.knowledge.kg import KnowledgeGraph
            from knowledge_lm.methods.knowbert import prepared_kg_dir

            self.kg = KnowledgeGraph.load(prepared_kg_dir(data))
        if data is not None and getattr(data, "knowledge", None) is not None and self.selective_injection is None:
            data.knowledge_batch = partial(map_entries, maps=self.maps, missing_pmi=self.missing_pmi, kg=self.kg,
                                           expansion_k=self.expansion_k)

    def compiled_modules(self):
        # Its layers read and write the shared map state: compiled, each layer guards on that state and
        # recompiles, past dynamo's limit at MiniLM's six layers. They stay eager.
        return []

    def encode(self, batch):
        knowledge, input_ids = batch["knowledge"], batch["input_ids"]
        if not isinstance(knowledge, KamKnowledge):  # per-example dicts: SI, or a batch from elsewhere
            if self.training and self.selective_injection is not None:
                knowledge = self.selective_injection.filter_batch(knowledge, self.si_rng)
            knowledge = map_entries(knowledge, input_ids.shape[1], self.maps, self.missing_pmi, self.kg, self.expansion_k)
        if knowledge.values.device != input_ids.device:
            knowledge = knowledge.to(input_ids.device)
        self.kam_state.maps = knowledge.maps(len(input_ids), len(self.maps))
        self.kam_state.previous, self.kam_state.memos = None, {}
        real = batch["attention_mask"].bool() if "attention_mask" in batch else torch.ones_like(input_ids, dtype=torch.bool)
        self.kam_state.auxiliary = self.embed_auxiliary(knowledge.auxiliary_ids, real)
        self.kam_state.real = real if self.kam_state.auxiliary is None else torch.cat([real, knowledge.auxiliary_real], 1)
        try:
            return super().encode(batch)
        finally:
            self.kam_state.maps = self.kam_state.previous = self.kam_state.real = self.kam_state.auxiliary = None
            self.kam_state.memos = None

    def embed_auxiliary(self, padded, real):
        """The expansion sub-words (``padded``: b × K ids) through the backbone's embeddings (b × K × hidden);
        None when the batch has none."""
        width = padded.shape[1]
        if width == 0:
            return None
        device = real.device
        embeddings = self.encoder.embeddings
        # Right after each example's last real token; RoBERTa-style tables start counting after padding_idx.
        padding_idx = getattr(embeddings, "padding_idx", None)
        first = 0 if padding_idx is None else padding_idx + 1
        positions = (real.sum(1, keepdim=True) + torch.arange(width, device=device) + first).clamp(
            max=self.encoder.config.max_position_embeddings - 1)
        return embeddings(input_ids=padded, token_type_ids=torch.zeros_like(padded), position_ids=positions)


@register_method("kam+si")
class KamSI(Kam):
    """KAM-BERT whose training batches keep only the linked mentions selective injection draws (Eq. 4), on the
    host. ``si_k_thresh`` and ``si_seed`` as in ``KnowBertSI``."""

    def __init__(self, encoder, spec, si_lambda: float = 0.5, si_k_thresh: float | str = "auto", si_k_min: int = 5,
                 si_k_max: int = 20, si_seed: int | None = None, **options):
        super().__init__(encoder, spec, **options)
        self.selective_injection = SelectiveInjection(lam=si_lambda, k_thresh=si_k_thresh, k_min=si_k_min, k_max=si_k_max,
                                                      seed=torch.initial_seed() if si_seed is None else si_seed)
        self.si_rng = self.selective_injection.generator("cpu")

    def setup(self, stage=None):
        super().setup(stage)
        if self.selective_injection.k_thresh == "auto":
            self.selective_injection.set_k_thresh_from(train_knowledge_rows(self.trainer.datamodule))

    def method_stats(self):
        return {**super().method_stats(), **self.selective_injection.stats()}

    def on_save_checkpoint(self, checkpoint):
        super().on_save_checkpoint(checkpoint)
        checkpoint["selective_injection"] = self.selective_injection.state_dict()

    def on_load_checkpoint(self, checkpoint):
        super().on_load_checkpoint(checkpoint)
        self.selective_injection.load_state_dict(checkpoint.get("selective_injection", {}))


@register_method("kam-no-pmi")
class KamNoPmi(Kam):
    default_maps = ("entity", "phrase")


@register_method("kam-no-phrase")
class KamNoPhrase(Kam):
    default_maps = ("entity", "pmi")


@register_method("kam-no-entity")
class KamNoEntity(Kam):
    default_maps = ("phrase", "pmi")


@register_method("kam-no-conv")
class KamNoConv(Kam):
    default_use_conv = False
