"""SI + SR: selective knowledge injection and spectral regularization (Zhang et al., "Drop Redundant, Shrink
Irrelevant: Selective Knowledge Injection for Language Pretraining", the SI+SR paper, §4, Eq. 4–6).

Both are plug-ins. SR is an extra loss on the batch features the task head reads, so it attaches to any
method (registered here on the plain encoder as ``bert+sr``). SI is a filter on the linked entities a
knowledge-consuming method receives; it reads what ``klm prepare`` stored per link (``df``: document
frequency over the train split; ``close``: the number of other linked entities of the text within
``K_hop`` in the KG), so no KG walk happens during training.

SR: ``spectral_penalty``, registered as ``bert+sr`` (``SpectralRegularized``); SI: ``SelectiveInjection``,
which a host method mixes in through ``SelectivelyInjected``.
"""

from dataclasses import dataclass, field
from typing import Literal

import torch

from knowledge_lm.core.errors import KlmError
from knowledge_lm.methods.task_model import MethodOptions, TaskModel


def smallest_eigenvectors(gram: torch.Tensor, k: int) -> torch.Tensor:
    """Orthonormal eigenvectors (columns) of the min(k, size) smallest eigenvalues of the symmetric matrix
    ``gram``, by an eigendecomposition (``torch.linalg.eigh``: O(size³), exact to rounding whatever the
    multiplicities). Where eigenvalues repeat, any orthonormal basis of their eigenspace may come back; where the
    k-th and the (k+1)-th are equal, the vectors are one choice of k among them."""
    return torch.linalg.eigh(gram).eigenvectors[:, : min(k, gram.shape[0])]


def spectral_penalty(features: torch.Tensor, k: int = 1) -> torch.Tensor:
    """Σ of the k smallest squared singular values of ``features`` (b × d), via the smaller Gram matrix.

    G (F Fᵀ, or Fᵀ F when b > d) is built from the detached features in float64 and decomposed there
    (:func:`smallest_eigenvectors`); the penalty is then ``Σ ‖Fᵀ vᵢ‖²`` (``‖F vᵢ‖²``) over its k smallest
    eigenvectors vᵢ = Σ vᵢᵀ G vᵢ = Σ λᵢ, in float32 outside autocast, which as a sum of squares keeps float32's
    relative precision down to zero singular values. Its gradient ``2 vᵢ vᵢᵀ F`` is that of the k smallest
    eigenvalues (Hellmann–Feynman) and is finite for every input, rank-deficient ones included: no
    1 / (λᵢ − λⱼ) term, which ``eigh``'s backward brings for repeated eigenvalues once its eigenvectors enter the
    loss. Where the k-th and the (k+1)-th eigenvalues are equal, the penalty is continuous but not differentiable,
    and the gradient is that of the eigenvectors ``eigh`` picked (one element of the generalized gradient); along
    zero singular values it is 0 (Fᵀ vᵢ = 0). With k ≥ min(b, d) the sum takes every squared singular value: it
    is ``‖F‖_F²``, no eigendecomposition needed. On a CUDA device the eigensolver waits on the host for its result.

    SR (Eq. 5): ``L_sr(F) = η Σ_{i≤k} σ_i'²`` over the k smallest singular values of the b × d batch
    features F. The σ² are the eigenvalues of the smaller Gram matrix (F Fᵀ when b ≤ d, the paper's
    O(b²d) route, else Fᵀ F), by its eigendecomposition in float64, O(b²d + b³) (see ``spectral_penalty``). Under
    DDP, F is the per-device batch (no gather): the choice and the per-device batch size go into every result.
    """
    with torch.autocast(device_type=features.device.type, enabled=False):
        matrix = features.float()
        if k >= min(matrix.shape):
            return (matrix**2).sum()
        wide = matrix.shape[0] <= matrix.shape[1]
        exact = matrix.detach().double()
        gram = exact @ exact.T if wide else exact.T @ exact
        vectors = smallest_eigenvectors(gram, k).to(matrix.dtype)
        projected = vectors.T @ matrix if wide else matrix @ vectors
        return (projected**2).sum()


K_THRESH_QUANTILE = 0.9


def linked_entity_frequencies(rows) -> dict[str, int]:
    """qid → DF of every entity linked (as a link's top candidate) in ``rows``, prepared knowledge features."""
    return {
        link["candidates"][0][0]: link.get("df", 0)
        for row in rows
        for link in row.get("links") or []
        if link.get("candidates")
    }


def train_knowledge_rows(data) -> list[dict]:
    """The prepared knowledge rows of the whole train split (not the fraction's subset) of a set-up data module."""
    if getattr(data, "knowledge_features", None) is None or "train" not in getattr(data, "knowledge_spans", {}):
        raise KlmError(
            "selective injection: si_k_thresh auto needs the train split's prepared knowledge features "
            "(a data module with knowledge, set up); pass a number instead"
        )
    start, end = data.knowledge_spans["train"]
    return data.knowledge_features[start:end]


@dataclass(eq=False)
class SelectiveInjection:
    """Eq. 4's score and the per-entity draw, with the paper's constants as defaults (§5.1), its own random
    generators (one per device, each seeded with ``seed`` when first used) and the count of the links it kept.

    ``k_thresh="auto"`` stands for the 90th percentile of DF over the distinct entities linked in the train
    split (:meth:`set_k_thresh_from`, called from the method's ``knowledge_collate``): DF is counted over that split
    alone, where the paper's 100 never bites.

    SI (Eq. 4): ``s(e) = 1[DF(e) < K_thresh] + λ · clip(|S(e)|, K_min, K_max)``. The per-entity
    reading of "sample 85 %, the rest keeps a 15 % chance": each linked entity e of a text (a link's top
    candidate) is a candidate with probability 0.85, a candidate is injected with probability
    s(e) / max_{e' ∈ E} s(e'), and an entity not injected so is still injected with probability 0.15 (equal
    scores: 0.85 + 0.15 · 0.15 ≈ 0.87). The unit is the entity: all its mentions are kept or dropped together.
    DF is counted over the train split, where the paper's K_thresh = 100 never bites, so K_thresh defaults to
    the 90th percentile of DF over the train split's distinct linked entities (``si_k_thresh="auto"``); a number
    keeps that number. The draws come from SI's own generator, seeded from the cell's seed, and the share of
    links kept goes into the result (``method_stats``). SI filters in training only; evaluation sees every
    linked entity, so that dev and test scores are deterministic.
    """

    lam: float = 0.5
    k_thresh: float | str = "auto"
    k_min: int = 5
    k_max: int = 20
    sample_ratio: float = 0.85
    keep_probability: float = 0.15
    seed: int = 0
    k_thresh_source: str = field(init=False)
    rare_share: float | None = field(init=False, default=None)  # share of the train entities with DF < K_thresh
    generators: dict = field(init=False, default_factory=dict, repr=False)
    counts: torch.Tensor | None = field(init=False, default=None, repr=False)  # kept links, valid links

    def __post_init__(self):
        if self.k_thresh == "auto":
            self.k_thresh_source = "auto, not set yet"
        elif isinstance(self.k_thresh, (int, float)) and not isinstance(self.k_thresh, bool):
            self.k_thresh_source = "given"
        else:
            raise KlmError(f"selective injection: si_k_thresh {self.k_thresh!r}: expected a number or auto")

    def set_k_thresh_from(self, rows) -> None:
        """Where ``k_thresh`` is auto: its value from ``rows`` (the train split's prepared knowledge features)."""
        frequencies = torch.tensor(list(linked_entity_frequencies(rows).values()), dtype=torch.float64)
        if self.k_thresh == "auto":
            if len(frequencies):
                self.k_thresh = torch.quantile(frequencies, K_THRESH_QUANTILE).item()
                self.k_thresh_source = f"quantile {K_THRESH_QUANTILE} of train DF"
            else:  # nothing linked: SI will have nothing to filter
                self.k_thresh, self.k_thresh_source = 100, "the paper's 100: no entity linked in train"
        self.rare_share = (frequencies < self.k_thresh).double().mean().item() if len(frequencies) else None

    def score(self, df: torch.Tensor, close: torch.Tensor) -> torch.Tensor:
        if self.k_thresh == "auto":
            raise KlmError(
                "selective injection: si_k_thresh auto is set from the train split when the model is wired to its "
                "data (wire_knowledge); without a data module pass a number"
            )
        return (df < self.k_thresh).float() + self.lam * close.clamp(self.k_min, self.k_max).float()

    def generator(self, device) -> torch.Generator:
        """The SI's own generator on ``device``, seeded with ``seed`` when first asked for."""
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device not in self.generators:
            self.generators[device] = torch.Generator(device=device).manual_seed(self.seed)
        return self.generators[device]

    def keep_mask(
        self,
        df: torch.Tensor,
        close: torch.Tensor,
        valid: torch.Tensor,
        entities: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Which links (b × S, padded: ``valid`` False) are injected this time, drawn per entity of a text: a
        candidate with probability ``sample_ratio``, injected as a candidate with probability s(e) / max s over
        the text's entities, else still injected with probability ``keep_probability``.

        ``entities`` (b × S) names each link's entity (its top candidate); the links of one text with the same
        nonzero id share one draw, so every mention of an entity is kept or dropped together; 0 is an unknown
        entity, a draw of its own. ``generator``: the SI's own on the links' device unless given. Counts the
        valid and kept links (on the device: nothing waits on the host)."""
        size = valid.shape[-1]
        if size == 0:
            return valid
        generator = self.generator(valid.device) if generator is None else generator
        positions = torch.arange(size, device=valid.device)
        same = (entities.unsqueeze(-1) == entities.unsqueeze(-2)) & (entities != 0).unsqueeze(-1) & valid.unsqueeze(-2)
        first = torch.where(same, positions, size).amin(-1).minimum(positions)  # the entity's first link in its text
        scores = self.score(df, close).masked_fill(~valid, 0)
        best = scores.amax(-1, keepdim=True)
        share = torch.where(best > 0, scores / best.clamp(min=torch.finfo(scores.dtype).tiny), 1.0).gather(-1, first)
        uniform = torch.rand(*valid.shape, 3, generator=generator, device=valid.device)
        uniform = uniform.gather(-2, first.unsqueeze(-1).expand(*first.shape, 3))
        injected = (uniform[..., 0] < self.sample_ratio) & (uniform[..., 1] < share)
        kept = valid & (injected | (uniform[..., 2] < self.keep_probability))
        counts = torch.stack([kept.sum(), valid.sum()])
        self.counts = counts if self.counts is None else self.counts.to(counts.device) + counts
        return kept

    def filter_batch(self, knowledge: list[dict], generator: torch.Generator | None = None) -> list[dict]:
        """``batch["knowledge"]`` (per-example dicts) with the links SI did not inject removed (on the host:
        ``generator`` defaults to the SI's own CPU one)."""
        size = max([len(example["links"]) for example in knowledge] + [0])
        if not size:
            return knowledge
        df, close = (
            torch.zeros(len(knowledge), size, dtype=torch.long),
            torch.zeros(len(knowledge), size, dtype=torch.long),
        )
        entities = torch.zeros(len(knowledge), size, dtype=torch.long)
        valid = torch.zeros(len(knowledge), size, dtype=torch.bool)
        ids: dict[str, int] = {}
        for i, example in enumerate(knowledge):
            for j, link in enumerate(example["links"]):
                df[i, j], close[i, j], valid[i, j] = link.get("df", 0), link.get("close", 0), True
                if link.get("candidates"):
                    entities[i, j] = ids.setdefault(link["candidates"][0][0], len(ids) + 1)
        kept = self.keep_mask(df, close, valid, entities, generator).tolist()
        return [
            {**example, "links": [link for link, keep in zip(example["links"], kept[i]) if keep]}
            for i, example in enumerate(knowledge)
        ]

    def state_dict(self) -> dict:
        """The generators' states and the counts, for a checkpoint: a resumed run draws on as if never stopped."""
        return {
            "generators": {str(device): generator.get_state() for device, generator in self.generators.items()},
            "counts": None if self.counts is None else self.counts.tolist(),
        }

    def load_state_dict(self, state: dict) -> None:
        for device, generator_state in state.get("generators", {}).items():
            self.generator(device).set_state(generator_state)  # in place: holders of the generator keep it
        self.counts = None if state.get("counts") is None else torch.tensor(state["counts"])

    def stats(self) -> dict:
        """What SI did in training: the share of the valid links it kept, and the K_thresh it used. Under DDP each
        process draws for and counts its own batches (all from the same seed); a result records rank 0's."""
        kept, valid = self.counts.tolist() if self.counts is not None else (0, 0)
        return {
            "si_kept_share": kept / valid if valid else None,
            "si_kept_links": kept,
            "si_valid_links": valid,
            "si_k_thresh": self.k_thresh,
            "si_k_thresh_source": self.k_thresh_source,
            "si_rare_share": self.rare_share,
            "si_seed": self.seed,
        }


@dataclass
class SelectiveInjectionOptions(MethodOptions):
    """SI's options, which a host method's options extend: Eq. 4's λ, K_thresh, K_min and K_max (the paper's
    constants: :class:`SelectiveInjection`'s defaults) and the seed of SI's own generator.

    ``si_k_thresh``: a number, or "auto" (the 90th percentile of the train split's DF). ``si_seed``: None takes
    ``torch.initial_seed()`` at construction, which is the cell's seed (``run_cell`` seeds everything with it
    before building the model)."""

    si_lambda: float = SelectiveInjection.lam
    si_k_thresh: float | Literal["auto"] = SelectiveInjection.k_thresh
    si_k_min: int = SelectiveInjection.k_min
    si_k_max: int = SelectiveInjection.k_max
    si_seed: int | None = None


class SelectivelyInjected:
    """Mixin of a host method (``knowbert+si``, ``kam+si``) whose training batches keep only the links selective
    injection draws: K_thresh "auto" resolved in ``knowledge_collate``, the kept share in ``method_stats`` and the
    generators' state in checkpoints, so that a resumed run draws on where it stopped. The host's ``options_class``
    extends :class:`SelectiveInjectionOptions`."""

    def __init__(self, encoder, spec, **options):
        super().__init__(encoder, spec, **options)
        si = self.options
        self.selective_injection = SelectiveInjection(
            lam=si.si_lambda,
            k_thresh=si.si_k_thresh,
            k_min=si.si_k_min,
            k_max=si.si_k_max,
            seed=torch.initial_seed() if si.si_seed is None else si.si_seed,
        )

    def knowledge_collate(self, data):
        """The host's, once K_thresh "auto" is set from ``data``'s train split."""
        collate = super().knowledge_collate(data)
        if self.selective_injection.k_thresh == "auto":
            self.selective_injection.set_k_thresh_from(train_knowledge_rows(data))
        return collate

    def method_stats(self):
        return {**super().method_stats(), **self.selective_injection.stats()}

    def on_save_checkpoint(self, checkpoint):
        super().on_save_checkpoint(checkpoint)
        checkpoint["selective_injection"] = self.selective_injection.state_dict()

    def on_load_checkpoint(self, checkpoint):
        super().on_load_checkpoint(checkpoint)
        self.selective_injection.load_state_dict(checkpoint.get("selective_injection", {}))


@dataclass
class SpectralRegularizationOptions(MethodOptions):
    """SR's options, which a method adding SR extends: η (``sr_weight``) and the k smallest singular values
    penalised (``sr_k``)."""

    sr_weight: float = 0.001
    sr_k: int = 1


class SpectralRegularized(TaskModel):
    """The plain fine-tuned encoder with spectral regularization of its head's batch features."""

    options_class = SpectralRegularizationOptions
    cuda_graphs = "cuda-graphs"

    def extra_losses(self, batch, features):
        return {"sr": self.options.sr_weight * spectral_penalty(features, self.options.sr_k)}
