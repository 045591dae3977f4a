"""KAM-BERT (Bai et al., "Enhancing Self-Attention with Knowledge-Assisted Attention Maps", §3): knowledge
maps mixed into every layer's attention logits.

The maps: ``knowledge_maps``; the attention that mixes them in, and the invariant: ``KamSelfAttention``; the
conv's initial weights: ``initialise_conv``; PMI expansion: ``expansion_words``; the controls and the
attention implementation: ``Kam``; ``kam+si``: ``KamSI``.
"""

import hashlib
import math
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Literal, get_args

import torch
from torch import nn
from torch.nn import functional as F

from knowledge_lm.core.backbones import LAYOUTS, EncoderLayout, encoder_layers, encoder_layout, token_positions
from knowledge_lm.core.errors import KlmError
from knowledge_lm.knowledge.kg import KnowledgeGraph
from knowledge_lm.methods.knowbert import prepared_kg_dir
from knowledge_lm.methods.sisr import SelectiveInjection, SelectiveInjectionOptions, SelectivelyInjected
from knowledge_lm.methods.task_model import MethodOptions, TaskModel, compiled

MAP_NAMES = ("entity", "phrase", "pmi", "kg")
DEFAULT_MAPS = ("entity", "phrase", "pmi")
EntitySource = Literal["ner", "links"]  # the features whose spans can make the entity map
ENTITY_SOURCES = get_args(EntitySource)
MAP_INIT_STD = 1 / 3  # the map channels' initial weights: N(0, MAP_INIT_STD²) per tap (initialise_conv)


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
    """The first ``expansion_k`` PMI expansion words ``klm prepare`` stored (ranked by mean PMI).

    **PMI expansion** (``expansion_k``, §3.4; default 0, off: the paper gives no k): the sub-words of the
    first ``expansion_k`` words ``klm prepare`` stored per example (``pmi_expansion``: words absent from the
    sentence with the highest mean PMI with its words, each as ``ids`` and ``pmi``: ``[[word_index,
    max(0, PMI)/Z], ...]``) are appended after the N rows (K sub-words in all, padded to the batch's largest
    K and masked). Every map becomes ``(N+K)²``, zero outside the sentence block except in the PMI map:
    1 within an expansion word and its stored PMI with the sentence's words. The N+K rows make the logits,
    the conv and the skip; the output keeps the N sentence rows (``A[:N] V``: the same as trimming after the
    layer, the rest of which is position-wise). The auxiliary rows' states are the backbone's embeddings of
    their sub-words (positions right after the last real token, segment 0) at every layer ("a new round of
    augmentation in the next layer"). The expansion needs the ``pmi`` map.
    """
    if expansion_k <= 0:
        return []
    stored = example.get("pmi_expansion")
    if stored is None:
        raise KlmError(
            "kam: the prepared features have no PMI expansion words (pmi_expansion); "
            "run `klm prepare` again or set expansion_k=0"
        )
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
class LinkTable:
    """A batch's linked mentions as selective injection reads them (``SelectiveInjection.keep_mask``), b × S
    (S: the most links of an example, every link counted): each link's ``df``, ``close``, entity (its top
    candidate numbered per batch, 0 without one) and whether it exists (``valid``)."""

    df: torch.Tensor  # b × S long
    close: torch.Tensor  # b × S long
    entities: torch.Tensor  # b × S long
    valid: torch.Tensor  # b × S bool

    @classmethod
    def of(cls, knowledge: list[dict]) -> "LinkTable":
        size = max([len(example.get("links") or []) for example in knowledge] + [0])
        df, close, entities = (torch.zeros(len(knowledge), size, dtype=torch.long) for _ in range(3))
        valid = torch.zeros(len(knowledge), size, dtype=torch.bool)
        ids: dict[str, int] = {}
        for i, example in enumerate(knowledge):
            for j, link in enumerate(example.get("links") or []):
                df[i, j], close[i, j], valid[i, j] = link.get("df", 0), link.get("close", 0), True
                if link.get("candidates"):
                    entities[i, j] = ids.setdefault(link["candidates"][0][0], len(ids) + 1)
        return cls(df, close, entities, valid)


@dataclass
class KamKnowledge:
    """A batch's knowledge as KAM reads it: the maps' nonzero entries (sparse, built on the CPU, by the data
    loader where ``Kam.knowledge_collate`` could ask it to) and the expansion sub-words; densified on the device.

    Built with ``links=True`` (for selective injection), it also has the batch's ``LinkTable`` (which stays on
    the host, where SI draws) and, per entry, the links it comes from (``entry_links``: 2 × E indices into the
    flattened b × S links, b·S for none): dropping links then drops their entries in ``maps``, in one pass on
    the device, instead of building the entries again from the filtered features."""

    entries: torch.Tensor  # 4 × E long: example, map, row, column
    values: torch.Tensor  # E float
    size: int  # n + K: the maps' side
    auxiliary_ids: torch.Tensor  # b × K long, 0-padded: the expansion sub-words, in order
    auxiliary_real: torch.Tensor  # b × K bool
    entry_links: torch.Tensor | None = None  # 2 × E long (links=True)
    links: LinkTable | None = None  # on the host (links=True)

    def to(self, device, non_blocking: bool = False) -> "KamKnowledge":
        """On ``device`` (Lightning's batch transfer calls this); the link table stays on the host."""
        move = lambda tensor: None if tensor is None else tensor.to(device, non_blocking=non_blocking)  # noqa: E731
        return KamKnowledge(
            move(self.entries),
            move(self.values),
            self.size,
            move(self.auxiliary_ids),
            move(self.auxiliary_real),
            move(self.entry_links),
            self.links,
        )

    @classmethod
    def empty(cls, batch_size: int, length: int) -> "KamKnowledge":
        """No map entries and no expansion words: what ``zero_knowledge`` runs on."""
        return cls(
            torch.zeros(4, 0, dtype=torch.long),
            torch.zeros(0),
            length,
            torch.zeros(batch_size, 0, dtype=torch.long),
            torch.zeros(batch_size, 0, dtype=torch.bool),
        )

    def maps(self, batch_size: int, num_maps: int, kept_links: torch.Tensor | None = None) -> torch.Tensor:
        """The dense ``b × k × (n+K) × (n+K)`` maps; ``kept_links`` (b × S bool, needs ``entry_links``): only the
        entries of the kept links (and those of no link), the same maps as entries built from the kept links."""
        shape = (batch_size, num_maps, self.size, self.size)
        device = self.values.device
        if kept_links is None:
            dense = torch.zeros(shape, device=device)
            # accumulate=False: overlapping spans of one map set the same value (the last write wins for PMI)
            return dense.index_put_(tuple(self.entries), self.values)
        # A dropped link's entries are written to one spare element past the maps, so every kept entry is
        # written in its order as before (the last write still wins) and no shape depends on the draw.
        kept = torch.cat([kept_links.flatten(), kept_links.new_ones(1)]).to(device, non_blocking=True)
        example, channel, row, column = self.entries
        position = ((example * num_maps + channel) * self.size + row) * self.size + column
        numel = math.prod(shape)
        position = torch.where(kept[self.entry_links[0]] & kept[self.entry_links[1]], position, numel)
        flat = torch.zeros(numel + 1, device=device).index_put_((position,), self.values)
        return flat[:numel].view(shape)


def knowledge_maps(
    knowledge: list[dict],
    length: int,
    *,
    maps=DEFAULT_MAPS,
    device=None,
    missing_pmi: str = "zeros",
    kg=None,
    expansion_k: int = 0,
    entity_source: str = "ner",
) -> torch.Tensor:
    """``b × k × (n+K) × (n+K)`` float maps in [0, 1] (below), densified on ``device``;
    K = 0 without expansion.

    **Maps** ``M_1..k ∈ [0,1]^{n×n}`` over the sub-word tokens, built once per batch from the prepared
    features (``batch["knowledge"]``; spans carry sub-word indices, so a sub-word takes its word's value;
    indices truncated away are dropped), densified as ``b × k × n × n`` on the device:

    * ``entity``: 1 where both tokens lie in the same named entity (``ner[*].tokens``: the annotator's NER
      spans, the paper's source); ``entity_source="links"``: the same linked mention (``links[*].tokens``);
    * ``phrase``: 1 where both tokens lie in the same phrase segment (``phrases[*].tokens``);
    * ``pmi``: ``max(0, PMI(w_i; w_j)) / Z`` of the two tokens' words, 1 within a word, from ``pmi_pairs``
      (``[[word_i, word_j, value], ...]`` over the indices of ``words``). Without it the map is all zeros
      and a warning says so once (``missing_pmi="error"`` raises instead);
    * ``kg`` (Eq. 8; in ``kam+kg``, not in ``kam``): 1 where the two tokens' linked entities (each
      mention's top candidate) are adjacent in the KG, an edge either way (a mention's own tokens only
      through a self-loop). The KG is the one the data module prepared (loaded in ``knowledge_collate``), or
      ``load_kg``'s.
    """
    return (
        map_entries(
            knowledge,
            length,
            maps=maps,
            missing_pmi=missing_pmi,
            kg=kg,
            expansion_k=expansion_k,
            entity_source=entity_source,
        )
        .to(device)
        .maps(len(knowledge), len(maps))
    )


class MapEntries:
    """The nonzero map entries of a batch as they are found: the batch, channel, row, column and value of each,
    and (``links``) the flattened b × S index of the link(s) each comes from (``no_link``: of none)."""

    def __init__(self, links: bool, no_link: int):
        self.batch, self.channel, self.rows, self.cols, self.values = [], [], [], [], []
        self.first_links, self.second_links = [], []
        self.links, self.no_link = links, no_link

    def add(self, b, c, r, s, v=None, *, first=None, second=None):
        """Entries ``(r[i], s[i])`` of example ``b``'s map ``c``, of values ``v`` (default 1)."""
        self.batch.extend([b] * len(r))
        self.channel.extend([c] * len(r))
        self.rows.extend(r)
        self.cols.extend(s)
        self.values.extend([1.0] * len(r) if v is None else v)
        if self.links:
            self.first_links.extend([self.no_link if first is None else first] * len(r))
            self.second_links.extend([self.no_link if second is None else second] * len(r))


def check_map_options(maps, kg, entity_source: str):
    """A one-line error for an unknown map or entity source, or a kg map without its knowledge graph."""
    if entity_source not in ENTITY_SOURCES:
        raise KlmError(f"kam: entity_source {entity_source!r}: expected {' or '.join(ENTITY_SOURCES)}")
    for name in maps:
        if name not in MAP_NAMES:
            raise KlmError(f"kam: unknown map {name!r}; known: {', '.join(MAP_NAMES)}")
        if name == "kg" and kg is None:
            raise KlmError(
                "kam: the kg map needs the prepared knowledge graph (run under a Trainer with a "
                "prepared data module, or call load_kg)"
            )


def pmi_map_entries(add, example: dict, expansions: list[dict], *, length: int, size: int, missing_pmi: str):
    """``add`` the PMI map's entries of ``example``: 1 within a word, its words' pairwise PMI, and its expansion
    sub-words' (``expansions``, placed from ``length`` on in a map of ``size``) blocks and PMI with its words."""
    words = [_in_range(word.get("tokens") or [], length) for word in example.get("words") or []]
    pairs = example.get("pmi_pairs")
    if pairs is None:
        if missing_pmi == "error":
            raise KlmError(
                "kam: the prepared features have no pairwise PMI (pmi_pairs); "
                "use kam-no-pmi or prepare them with pairwise PMI"
            )
        # Python's default filter shows this once per call site (map_entries' caller), not once per batch.
        warnings.warn("kam: prepared features have no pmi_pairs; the PMI map is all zeros", stacklevel=3)
    else:
        add(*_block_entries([{"tokens": tokens} for tokens in words], length))  # 1 within a word
        for first, second, value in pairs:
            for i, j in ((first, second), (second, first)):
                if i < len(words) and j < len(words) and i != j:
                    add(*_pair_entries(words[i], words[j], value))
    position = length
    for word in expansions:
        pieces = list(range(position, position + len(word["ids"])))
        position += len(pieces)
        add(*_block_entries([{"tokens": pieces}], size))
        for index, value in word["pmi"]:
            if index < len(words):
                add(*_pair_entries(words[index], pieces, value))
                add(*_pair_entries(pieces, words[index], value))


def kg_map_entries(add, example: dict, kg, *, length: int, first_link: int):
    """``add`` the kg map's entries of ``example``: the sub-word pairs of its linked mentions whose top candidates
    are neighbours in ``kg`` (``first_link``: the flattened index of its first link)."""
    mentions = [
        (first_link + j, link["candidates"][0][0], _in_range(link.get("tokens") or [], length))
        for j, link in enumerate(example.get("links") or [])
        if link.get("candidates")
    ]
    for first_index, first, first_tokens in mentions:
        if first not in kg:
            continue
        adjacent = kg.neighbours(first)
        for second_index, second, second_tokens in mentions:
            if second in adjacent:  # neighbours are undirected: ``second`` adds the reverse pairs
                add(
                    [t for t in first_tokens for _ in second_tokens],
                    [u for _ in first_tokens for u in second_tokens],
                    first=first_index,
                    second=second_index,
                )


def map_entries(
    knowledge: list[dict],
    length: int,
    *,
    maps=DEFAULT_MAPS,
    missing_pmi: str = "zeros",
    kg=None,
    expansion_k: int = 0,
    entity_source: str = "ner",
    links: bool = False,
) -> KamKnowledge:
    """The nonzero entries of every map of ``knowledge`` (the per-example features of a batch padded to
    ``length``), and its expansion sub-words; ``links``: with the link table and the links of every entry (what
    selective injection drops entries by, see ``KamKnowledge``)."""
    check_map_options(maps, kg, entity_source)
    expansions = [expansion_words(example, expansion_k) for example in knowledge]
    ids = auxiliary_ids(knowledge, expansion_k)
    size = length + max((len(row) for row in ids), default=0)
    table = LinkTable.of(knowledge) if links else None
    link_width = 0 if table is None else table.valid.shape[1]
    entries = MapEntries(links, no_link=len(knowledge) * link_width)
    for b, example in enumerate(knowledge):
        for c, name in enumerate(maps):
            add = partial(entries.add, b, c)
            if name == "entity" and entity_source == "links":
                for j, link in enumerate(example.get("links") or []):
                    add(*_block_entries([link], length), first=b * link_width + j, second=b * link_width + j)
            elif name == "entity":
                add(*_block_entries(example.get(entity_source) or [], length))
            elif name == "phrase":
                add(*_block_entries(example.get("phrases") or [], length))
            elif name == "pmi":
                pmi_map_entries(add, example, expansions[b], length=length, size=size, missing_pmi=missing_pmi)
            elif name == "kg":
                kg_map_entries(add, example, kg, length=length, first_link=b * link_width)
    width = max((len(row) for row in ids), default=0)
    return KamKnowledge(
        torch.tensor([entries.batch, entries.channel, entries.rows, entries.cols], dtype=torch.long).view(4, -1),
        torch.tensor(entries.values, dtype=torch.float),
        size,
        torch.tensor([row + [0] * (width - len(row)) for row in ids], dtype=torch.long).view(len(ids), width),
        torch.tensor([[True] * len(row) + [False] * (width - len(row)) for row in ids], dtype=torch.bool).view(
            len(ids), width
        ),
        torch.tensor([entries.first_links, entries.second_links], dtype=torch.long).view(2, -1) if links else None,
        table,
    )


# -- the attention -------------------------------------------------------------------------------
class KamState:
    """What the layers of one ``encode`` call share: the maps and the previous layer's result map."""

    def __init__(self):
        self.maps: torch.Tensor | None = None
        self.previous: torch.Tensor | None = None
        self.real: torch.Tensor | None = None  # b × (n+K) bool: which positions are tokens, not padding
        self.auxiliary: torch.Tensor | None = None  # b × K × hidden: the expansion sub-words' embeddings
        self.memos: dict | None = None  # per encode call: what every layer would otherwise rebuild
        # Every layer's mix of logits and maps (``mix_attention``), torch.compile'd by ``Kam.compile_modules``: the
        # state reads stay outside, so one compiled graph serves every layer.
        self.mix = mix_attention

    def memo(self, key, build):
        """``build()`` once per ``encode`` call (each op costs host time, and a MiniLM step is bound by it)."""
        if self.memos is None:
            return build()
        if key not in self.memos:
            self.memos[key] = build()
        return self.memos[key]


def channel_generator(seed: int, layer: int, channel: str) -> torch.Generator:
    """A CPU generator of its own for one input channel (group) of one layer's conv."""
    digest = hashlib.sha256(f"{seed}/{layer}/{channel}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def initialise_conv(conv: nn.Conv2d, maps, seed: int, layer: int):
    """The conv's initial weights (below): the m logit channels and the bias from the generator of
    "logits", each map's channel from the generator of its name, so no draw depends on which other maps exist.

    **The conv's initial weights** (the paper gives none), so that the ablations differ by their maps only:
    one number drawn from the global RNG (seeded by the cell; the only draw, so the RNG then advances the
    same in every variant) seeds a generator per layer and input-channel group. The m logit channels and
    the bias take PyTorch's default for a conv over them alone (U(±1/√(9m))): the same in ``kam`` and every
    ablation of one seed. Each map's channel is drawn from its map's own generator, ``N(0, (1/3)²)`` per tap
    (``MAP_INIT_STD``): the same whichever other maps are present, and a 3×3 window of ones moves each
    head's ``A_sem`` by ~N(0, 1). Measured on MiniLM at initialisation (generated task, dev): zeroing the
    maps moves the [CLS] features by ~5% of their norm, another seed by ~15%; at PyTorch's default scale
    (std ≈ 0.05) the maps moved them by 0.7%, a seed by ~14%.
    """
    heads = conv.out_channels
    bound = (9 * heads) ** -0.5  # PyTorch's default bound for a 3×3 conv over the m logit channels alone
    logits = channel_generator(seed, layer, "logits")
    with torch.no_grad():
        conv.weight[:, :heads].copy_(torch.empty(heads, heads, 3, 3).uniform_(-bound, bound, generator=logits))
        conv.bias.copy_(torch.empty(heads).uniform_(-bound, bound, generator=logits))
        for channel, name in enumerate(maps, start=heads):
            conv.weight[:, channel].copy_(
                torch.empty(heads, 3, 3).normal_(0.0, MAP_INIT_STD, generator=channel_generator(seed, layer, name))
            )


def mix_attention(logits, maps, attention_mask, padding_pairs, *, weight, bias, alpha: float, num_maps: int):
    """One layer's attention probabilities from its logits L (b × m × n × n) and the maps (b × c × n × n):
    softmax(α·A_sem + (1−α)·L + mask), A_sem the conv over [L, maps] (``weight``/``bias``; padding pairs zeroed
    in L first), or without a conv the maps' mean. Tensors in, tensors out: what ``torch.compile`` replays."""
    if weight is not None:
        visible = logits if padding_pairs is None else logits.masked_fill(padding_pairs, 0.0)
        semantic = F.conv2d(torch.cat([visible, maps], dim=1), weight, bias, padding=1)  # A_sem
    elif num_maps:
        semantic = maps.mean(1, keepdim=True)  # w/o conv: the maps' mean, every head
    else:
        semantic = torch.zeros_like(logits)
    result = torch.lerp(logits, semantic, alpha)  # α·A_sem + (1−α)·L in one pass
    scores = result if attention_mask is None else result + attention_mask
    # In the logits' dtype (bf16 under mixed precision), the softmax accumulating in float32 inside: autocast
    # would return float32, and every b × m × n × n pass after it (the hand-over to the next layer, its
    # sum, the conv's input, the mix) would then move twice the bytes; those passes are KAM's step time
    # where the GPU is busy. The baseline's SDPA also multiplies bf16 probabilities with V.
    with torch.autocast(scores.device.type, enabled=False):
        return scores.softmax(-1)


class KamSelfAttention(nn.Module):
    """Drop-in for a layer's self-attention of the encoder ``layout`` (``core.backbones.LAYOUTS``: BERT's and
    RoBERTa's ``attention.self``, MPNet's ``attention.attn``; transformers 5: ``forward(hidden_states,
    attention_mask=None, ...) -> (output b×n×(m·d), probabilities)``); ``layer`` and ``seed`` pick the
    conv's initial weights.

    Per layer, per head, with the logits ``A_sa = QKᵀ/√d`` (before mask and softmax):

    **Attention** (``KamSelfAttention`` replaces each layer's self-attention and keeps its query, key, value
    (and MPNet's output) projections under their names, so the backbone's state-dict names do not change):
    ``L_i = A_sa + A_{i−1}`` (the skip, ``A_{−1} = 0``; MPNet's ``A_sa`` holds its relative position bias,
    zero for the pairs of an expansion word, which has no place in the sentence),
    ``A_sem = Conv2d(m+k → m, 3×3, padding 1)`` over the channels ``[L_i (m heads) | M (k maps)]``,
    ``A_i = softmax(α·A_sem + (1−α)·L_i + mask)``, output ``A_i V`` (MPNet: through its output projection).
    The skip hands layer i+1 the result map ``A_i`` after the softmax (§3.3's "result attention map"), not
    Evolving Attention's pre-softmax logits, which grow with depth. Choices the paper leaves open: one conv
    per layer; the conv reads the logits with padding rows and columns zeroed, so padding never leaks into
    real positions through the 3×3 window; under mixed precision maps, logits and result maps stay in the
    compute dtype (bf16), the softmax accumulating in float32 inside (as SDPA does).
    ``use_conv=False`` (the w/o-conv ablation): ``A_sem`` is the mean of the k maps, for every head.

    **Invariant** (tested): α = 0 without skip and without expansion gives the backbone's hidden states exactly.
    """

    def __init__(
        self,
        original: nn.Module,
        state: KamState,
        *,
        layout: EncoderLayout = LAYOUTS["bert"],
        maps=DEFAULT_MAPS,
        alpha: float = 0.2,
        skip: bool = True,
        use_conv: bool = True,
        seed: int = 0,
        layer: int = 0,
    ):
        super().__init__()
        self.layout = layout
        output_projection = (layout.output_projection,) if layout.output_projection else ()
        for name in layout.projections + output_projection:
            if not isinstance(getattr(original, name, None), nn.Module):
                raise KlmError(f"kam: {type(original).__name__} has no {name} projection to wrap")
            self.add_module(name, getattr(original, name))
        self.dropout = original.dropout
        self.config = getattr(original, "config", None)
        self.num_attention_heads = original.num_attention_heads
        self.attention_head_size = original.attention_head_size
        self.scaling = getattr(original, "scaling", self.attention_head_size**-0.5)
        self.kam_state, self.num_maps, self.alpha, self.skip = state, len(maps), alpha, skip
        self.conv = None
        if use_conv:
            # skip_init: the global RNG is not drawn from, so it advances the same whatever the maps
            self.conv = torch.nn.utils.skip_init(
                nn.Conv2d, self.num_attention_heads + self.num_maps, self.num_attention_heads, 3, padding=1
            )
            initialise_conv(self.conv, maps, seed, layer)

    def forward(self, hidden_states, attention_mask=None, position_bias=None, *args, **kwargs):
        length = hidden_states.shape[1]
        auxiliary = self.kam_state.auxiliary
        if auxiliary is not None:
            auxiliary = self.kam_state.memo(
                ("auxiliary", hidden_states.dtype), lambda: auxiliary.to(hidden_states.dtype)
            )
        rows = hidden_states if auxiliary is None else torch.cat([hidden_states, auxiliary], 1)
        shape = (*rows.shape[:-1], -1, self.attention_head_size)
        # b × m × (n+K) × d each
        query, key, value = (getattr(self, name)(rows).view(shape).transpose(1, 2) for name in self.layout.projections)
        state = self.kam_state
        if self.skip and state.previous is not None:  # L_i = A_sa + A_{i−1}: the scaling and the sum in the matmul
            logits = torch.baddbmm(
                state.previous.flatten(0, 1), query.flatten(0, 1), key.transpose(2, 3).flatten(0, 1), alpha=self.scaling
            ).view_as(state.previous)
        else:
            logits = torch.matmul(query, key.transpose(2, 3)) * self.scaling  # A_sa
        dtype = logits.dtype
        if self.layout.position_bias and position_bias is not None:
            bias = position_bias
            logits = logits + state.memo(("position bias", dtype), lambda: self._expanded(bias, rows).to(dtype))
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
        padding_pairs = None
        if self.conv is not None and attention_mask is not None:
            mask = attention_mask
            padding_pairs = state.memo("padding pairs", lambda: self._padding_pairs(mask))
        conv = self.conv
        attention = state.mix(
            logits,
            maps,
            attention_mask,
            padding_pairs,
            weight=None if conv is None else conv.weight,
            bias=None if conv is None else conv.bias,
            alpha=self.alpha,
            num_maps=self.num_maps,
        )
        self.kam_state.previous = attention
        probabilities = F.dropout(attention, p=self.dropout.p, training=self.training)
        probabilities = probabilities[:, :, :length]  # trimmed back to the n sentence rows
        output = torch.matmul(probabilities, value).transpose(1, 2).contiguous()
        output = output.reshape(*hidden_states.shape[:-1], -1)
        if self.layout.output_projection:
            output = getattr(self, self.layout.output_projection)(output)
        return output, probabilities

    @staticmethod
    def _expanded(position_bias, rows):
        """MPNet's b × m × n × n position bias padded with zeros to the n+K rows and keys of an expansion."""
        extra = rows.shape[1] - position_bias.shape[-1]
        return F.pad(position_bias, (0, extra, 0, extra)) if extra else position_bias

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
@dataclass
class KamOptions(MethodOptions):
    """KAM's options: ``alpha`` (α of the mix), ``skip`` (the result map handed to the next layer), ``use_conv``
    (False: ``A_sem`` is the mean of the maps), ``maps`` (a name or names of ``MAP_NAMES``), ``expansion_k`` (PMI
    expansion words, 0 for none), ``missing_pmi`` (zeros or error where the features lack PMI pairs) and
    ``entity_source`` (the features the entity map comes from)."""

    alpha: float = 0.2
    skip: bool = True
    use_conv: bool = True
    maps: tuple[str, ...] = DEFAULT_MAPS
    expansion_k: int = 0
    missing_pmi: Literal["zeros", "error"] = "zeros"
    entity_source: EntitySource = "ner"

    def __post_init__(self):
        for name in self.maps:
            if name not in MAP_NAMES:
                raise KlmError(f"unknown map {name!r}; known: {', '.join(MAP_NAMES)}")
        if self.expansion_k < 0:
            raise KlmError(f"expansion_k {self.expansion_k!r}: expected a whole number of words, 0 for none")
        if self.expansion_k and "pmi" not in self.maps:
            raise KlmError("PMI expansion (expansion_k > 0) needs the pmi map")


class Kam(TaskModel):
    """The backbone with every layer's self-attention replaced by ``KamSelfAttention``.

    **zero_knowledge** (the control): every map is all zeros and no expansion word is appended, the same as
    examples without features; the conv, the mix and the skip run as usual.
    The ``shuffled`` control (knowledge option ``shuffle_links``) acts on the entity map too: ``klm prepare``
    moves the NER spans to other words of their text, so its blocks miss the entity mentions. With
    ``entity_source="links"`` the blocks stay on the mentions (KnowBERT's spans) and the control acts on the
    linked entities (the kg map, SI's scores).

    Needs ``attn_implementation = "eager"``: the wrapper computes the logits itself, and eager is the
    implementation whose 4D additive mask (b × 1 × n × n, or None without padding) it reads.
    """

    options_class = KamOptions
    attn_implementation = "eager"
    selective_injection: SelectiveInjection | None = None

    def __init__(self, encoder, spec, **options):
        super().__init__(encoder, spec, **options)
        implementation = getattr(encoder.config, "_attn_implementation", "eager")
        if implementation not in (None, "eager"):
            raise KlmError(f"kam needs the backbone loaded with attn_implementation='eager', not {implementation!r}")
        self.maps, self.expansion_k = self.options.maps, self.options.expansion_k
        self.missing_pmi, self.entity_source = self.options.missing_pmi, self.options.entity_source
        self.kg = None
        self.kam_state = KamState()
        # One draw from the global RNG (seeded by the cell) seeds every conv channel's own generator.
        seed = int(torch.randint(0, 2**62, ()))
        self.kam_layers = []
        layout = encoder_layout(encoder, "kam")
        for index, layer in enumerate(encoder_layers(encoder)):
            attention = getattr(layer, "attention", None)
            if not hasattr(attention, layout.self_attention):
                raise KlmError(f"kam: {type(layer).__name__} has no attention.{layout.self_attention} to replace")
            wrapped = KamSelfAttention(
                getattr(attention, layout.self_attention),
                self.kam_state,
                layout=layout,
                maps=self.maps,
                alpha=self.options.alpha,
                skip=self.options.skip,
                use_conv=self.options.use_conv,
                seed=seed,
                layer=index,
            )
            setattr(attention, layout.self_attention, wrapped)
            self.kam_layers.append(wrapped)

    def new_modules(self):
        return [layer.conv for layer in self.kam_layers if layer.conv is not None]

    def load_kg(self, kg):
        self.kg = kg

    def knowledge_collate(self, data):
        """Loads the prepared KG where the ``kg`` map needs it (see ``knowledge_maps``), and has the data
        loader build the maps' entries (with SI, with their links too: SI's draw belongs to the training step,
        which drops the entries of the links not injected; not under ``zero_knowledge``, which has none)."""
        if "kg" in self.maps and self.kg is None:
            self.kg = KnowledgeGraph.load(prepared_kg_dir(data))
        if getattr(data, "knowledge", None) is None or self.options.zero_knowledge:
            return None
        return partial(self.batch_entries, kg=self.kg)

    def batch_entries(self, knowledge: list[dict], length: int, kg=None) -> KamKnowledge:
        """``map_entries`` of a batch with this model's options; with the links of every entry under SI."""
        return map_entries(
            knowledge,
            length,
            maps=self.maps,
            missing_pmi=self.missing_pmi,
            kg=kg,
            expansion_k=self.expansion_k,
            entity_source=self.entity_source,
            links=self.selective_injection is not None,
        )

    def compiled_modules(self):
        # Not the layers: they read and write the shared map state, and compiled, each layer would guard on that
        # state and recompile, past dynamo's limit at MiniLM's six layers. Their parts after the attention are
        # plain modules; the attention's mix is compiled apart (``compile_modules``).
        return [
            module
            for layer in encoder_layers(self.encoder)
            for module in (
                getattr(getattr(layer, "attention", None), "output", None),
                getattr(layer, "intermediate", None),
                getattr(layer, "output", None),
            )
            if module is not None
        ]

    def compile_modules(self, mode: str = "default"):
        super().compile_modules(mode)
        self.kam_state.mix = compiled(mix_attention, mode)

    def encode(self, batch):
        knowledge, input_ids = batch["knowledge"], batch["input_ids"]
        if self.options.zero_knowledge:
            knowledge = KamKnowledge.empty(len(input_ids), input_ids.shape[1])
        elif not isinstance(knowledge, KamKnowledge):  # per-example dicts: a batch from elsewhere
            knowledge = self.batch_entries(knowledge, input_ids.shape[1], self.kg)
        if knowledge.values.device != input_ids.device:
            knowledge = knowledge.to(input_ids.device)
        kept_links = None
        if self.training and self.selective_injection is not None:
            links = knowledge.links
            # On the host, from SI's CPU generator: the draw does not wait for the device.
            kept_links = self.selective_injection.keep_mask(
                links.df, links.close, links.valid, links.entities, self.si_rng
            )
        self.kam_state.maps = knowledge.maps(len(input_ids), len(self.maps), kept_links)
        self.kam_state.previous, self.kam_state.memos = None, {}
        real = (
            batch["attention_mask"].bool()
            if "attention_mask" in batch
            else torch.ones_like(input_ids, dtype=torch.bool)
        )
        self.kam_state.auxiliary = self.embed_auxiliary(knowledge.auxiliary_ids, real)
        self.kam_state.real = (
            real if self.kam_state.auxiliary is None else torch.cat([real, knowledge.auxiliary_real], 1)
        )
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
        table = token_positions(self.encoder)  # right after each example's last real token
        positions = (real.sum(1, keepdim=True) + torch.arange(width, device=device) + table.start).clamp(
            max=table.stop - 1
        )
        return embeddings(input_ids=padded, token_type_ids=torch.zeros_like(padded), position_ids=positions)


@dataclass
class KamSIOptions(SelectiveInjectionOptions, KamOptions):
    """KAM's options and SI's."""

    entity_source: EntitySource = (
        "links"  # SI scores linked entities: the entity map follows it only when built from links
    )


class KamSI(SelectivelyInjected, Kam):
    """KAM-BERT whose training batches keep only the linked mentions selective injection draws (Eq. 4), on the
    host (options: ``SelectiveInjectionOptions``).

    ``kam+si``: selective injection (``sisr.SelectiveInjection``, Eq. 4 of the SI+SR paper) filters the linked
    mentions, in training only, as ``knowbert+si`` does; its entity map is built from the links, so SI acts
    on it as on the kg map.
    """

    options_class = KamSIOptions

    def __init__(self, encoder, spec, **options):
        super().__init__(encoder, spec, **options)
        self.si_rng = self.selective_injection.generator("cpu")


@dataclass
class KamNoPmiOptions(KamOptions):
    maps: tuple[str, ...] = ("entity", "phrase")


class KamNoPmi(Kam):
    options_class = KamNoPmiOptions


@dataclass
class KamNoPhraseOptions(KamOptions):
    maps: tuple[str, ...] = ("entity", "pmi")


class KamNoPhrase(Kam):
    options_class = KamNoPhraseOptions


@dataclass
class KamNoEntityOptions(KamOptions):
    maps: tuple[str, ...] = ("phrase", "pmi")


class KamNoEntity(Kam):
    options_class = KamNoEntityOptions


@dataclass
class KamNoConvOptions(KamOptions):
    use_conv: bool = False


class KamNoConv(Kam):
    options_class = KamNoConvOptions


@dataclass
class KamKgOptions(KamOptions):
    maps: tuple[str, ...] = DEFAULT_MAPS + ("kg",)  # Eq. 8


class KamKg(Kam):
    options_class = KamKgOptions
