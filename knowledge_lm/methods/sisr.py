"""SI + SR: selective knowledge injection and spectral regularization (papers/000, §4, Eq. 4–6).

Both are plug-ins. SR is an extra loss on the batch features the task head reads, so it attaches to any
method (registered here on the plain encoder as ``bert+sr``). SI is a filter on the linked entities a
knowledge-consuming method receives; it reads what ``klm prepare`` stored per link (``df``: document
frequency over the train split; ``close``: the number of other linked entities of the text within
``K_hop`` in the KG), so no KG walk happens during training.

SR (Eq. 5): ``L_sr(F) = η Σ_{i≤k} σ_i'²`` over the k smallest singular values of the b × d batch
features F. The σ² are the eigenvalues of the smaller Gram matrix (F Fᵀ when b ≤ d, the paper's
O(b²d) route, else Fᵀ F), outside autocast, without an eigensolver (see ``spectral_penalty``). Under DDP, F is the
per-device batch (no gather): the choice and the per-device batch size go into every result.

SI (Eq. 4): ``s(e) = 1[DF(e) < K_thresh] + λ · clip(|S(e)|, K_min, K_max)``; per text, ⌈0.85·|E|⌉
entities are drawn without replacement with probability ∝ s, and each entity not drawn is still
injected with probability 0.15 (METHODS.md's reading of the paper). SI filters in training only;
evaluation sees every linked entity, so that dev and test scores are deterministic.
"""

import random
from dataclasses import dataclass

import torch

from knowledge_lm.registry import register_method
from knowledge_lm.task_model import TaskModel


def smallest_eigenvectors(gram: torch.Tensor, k: int, chunks: int = 6, power: int = 64) -> torch.Tensor:
    """Unit eigenvectors (columns) of the min(k, size) smallest eigenvalues of the symmetric PSD matrix ``gram``,
    by matrix products alone, so that nothing waits on the host.

    ``M = I − G / tr(G)`` has the eigenvectors of G with eigenvalues 1 − λ/tr(G) ∈ [0, 1], the largest
    for the smallest λ; ``chunks`` rounds of ``M ← M^power / tr(M^power)`` raise it to power^chunks = 2^36,
    which leaves M's top eigenvector wherever the smallest gap exceeds ~1e-9·tr(G), finer than float32
    features resolve (below that the eigenvalues are equal to float32 precision, and any vector of their
    span gives the same value). The per-round trace keeps the entries in float64's range (≥ b^-64). Each
    further vector comes from G with the ones found lifted to exactly tr(G), where their eigenvalue of M is 0,
    below every other one: the j-th smallest λ is at most tr(G)/(size − j + 1), so M's top stays ≥ 1/2 up to
    the second-to-last vector. The last one (k ≥ size) has no gap to iterate on: it is what the others leave."""
    size = gram.shape[0]
    tiny = torch.finfo(gram.dtype).tiny
    scale = gram.diagonal().sum().clamp(min=tiny)
    identity = torch.eye(size, dtype=gram.dtype, device=gram.device)
    start = 1 + torch.arange(size, dtype=gram.dtype, device=gram.device).unsqueeze(1) / size  # not orthogonal to a generic vector
    vectors = []
    for _ in range(min(k, size - 1)):
        iterate = identity - gram / scale
        for _ in range(chunks):
            iterate = torch.linalg.matrix_power(iterate, power)
            iterate = iterate / iterate.diagonal().sum().clamp(min=tiny)
        vector = iterate @ start
        vector = vector / vector.norm().clamp(min=tiny)
        vectors.append(vector)
        gram = gram + (scale - vector.T @ gram @ vector) * (vector @ vector.T)
    if k >= size:
        found = torch.cat(vectors, dim=1) if vectors else start.new_zeros(size, 0)
        rest = start
        for _ in range(2):  # Gram–Schmidt twice: once leaves rounding errors of the order of the overlap
            rest = rest - found @ (found.T @ rest)
        vectors.append(rest / rest.norm().clamp(min=tiny))
    return torch.cat(vectors, dim=1)


_replays: dict[tuple, tuple] = {}  # (b, k, dtype, device) → (CUDA graph, its input, its output)


def replayed_smallest_eigenvectors(gram: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`smallest_eigenvectors` on a CUDA device as one CUDA-graph replay, captured once per shape.

    Why: its ~60 small kernels cost little on the device but each costs host time to launch, and a
    MiniLM step is bound by host time (its SR then took +50 % of the step). The input is detached
    float64, so no autograd crosses the graph. Elsewhere (CPU, or while another graph is being
    captured) it runs eagerly."""
    if not gram.is_cuda or torch.cuda.is_current_stream_capturing():
        return smallest_eigenvectors(gram, k)
    key = (gram.shape[0], k, gram.dtype, gram.device)
    if key not in _replays:
        static_input = gram.clone()
        side = torch.cuda.Stream(gram.device)
        side.wait_stream(torch.cuda.current_stream(gram.device))
        with torch.cuda.stream(side):  # warm-up outside the capture (cuBLAS handles, workspaces)
            smallest_eigenvectors(static_input, k)
        torch.cuda.current_stream(gram.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_output = smallest_eigenvectors(static_input, k)
        _replays[key] = (graph, static_input, static_output)
    graph, static_input, static_output = _replays[key]
    static_input.copy_(gram)
    graph.replay()
    return static_output.clone()


def spectral_penalty(features: torch.Tensor, k: int = 1) -> torch.Tensor:
    """Σ of the k smallest squared singular values of ``features`` (b × d), via the smaller Gram matrix.

    The eigenvectors vᵢ of G (F Fᵀ, or Fᵀ F when b > d) come from :func:`smallest_eigenvectors` in float64,
    detached; the penalty is then ``Σ ‖Fᵀ vᵢ‖²`` (``‖F vᵢ‖²``) = Σ vᵢᵀ G vᵢ = Σ λᵢ, whose gradient
    ``2 vᵢ vᵢᵀ F`` is ``eigvalsh``'s (Hellmann–Feynman), and which, as a sum of squares, keeps float32's
    relative precision. Why not ``eigvalsh``: a GPU eigensolver checks its result on the host, and a CPU
    one needs G there; either way the step waits for its forward pass to finish instead of queueing the
    backward pass meanwhile (+20 % step time on one H100 at BERT-base size). With k ≥ min(b, d) the sum
    takes every squared singular value: it is ``‖F‖_F²``, no eigenvectors needed."""
    with torch.autocast(device_type=features.device.type, enabled=False):
        matrix = features.float()
        if k >= min(matrix.shape):
            return (matrix ** 2).sum()
        wide = matrix.shape[0] <= matrix.shape[1]
        exact = matrix.detach().double()
        gram = exact @ exact.T if wide else exact.T @ exact
        vectors = replayed_smallest_eigenvectors(gram, k).to(matrix.dtype)
        projected = vectors.T @ matrix if wide else matrix @ vectors
        return (projected ** 2).sum()


@dataclass(frozen=True)
class SelectiveInjection:
    """Eq. 4 with the paper's constants as defaults (§5.1)."""

    lam: float = 0.5
    k_thresh: int = 100
    k_min: int = 5
    k_max: int = 20
    sample_ratio: float = 0.85
    keep_probability: float = 0.15

    def score(self, df: torch.Tensor, close: torch.Tensor) -> torch.Tensor:
        return (df < self.k_thresh).float() + self.lam * close.clamp(self.k_min, self.k_max).float()

    def keep_mask(self, df: torch.Tensor, close: torch.Tensor, valid: torch.Tensor,
                  generator: torch.Generator | None = None) -> torch.Tensor:
        """Which links (b × S, padded: ``valid`` False) are injected this time: per text ⌈0.85·n⌉ drawn
        without replacement ∝ s, each other one kept with probability 0.15.

        The draw is the Gumbel top-k trick: the k largest ``log s + Gumbel`` keys are distributed exactly as
        k sequential draws without replacement ∝ s (Kool et al. 2019), so one batched sort replaces a loop.
        """
        uniform = torch.rand(df.shape, generator=generator, device=df.device)
        keys = self.score(df, close).log() - (-uniform.clamp(min=1e-20).log()).log()
        keys = keys.masked_fill(~valid, float("-inf"))
        rank = keys.argsort(-1, descending=True).argsort(-1)
        draws = (valid.sum(-1, keepdim=True).double() * self.sample_ratio).ceil()  # as math.ceil(0.85 * n)
        drawn = rank < draws
        second_chance = torch.rand(df.shape, generator=generator, device=df.device) < self.keep_probability
        return valid & (drawn | second_chance)

    def filter_batch(self, knowledge: list[dict], rng: random.Random) -> list[dict]:
        """``batch["knowledge"]`` (per-example dicts) with the links SI did not draw removed."""
        size = max([len(example["links"]) for example in knowledge] + [0])
        if not size:
            return knowledge
        df, close = torch.zeros(len(knowledge), size, dtype=torch.long), torch.zeros(len(knowledge), size, dtype=torch.long)
        valid = torch.zeros(len(knowledge), size, dtype=torch.bool)
        for i, example in enumerate(knowledge):
            for j, link in enumerate(example["links"]):
                df[i, j], close[i, j], valid[i, j] = link["df"], link["close"], True
        kept = self.keep_mask(df, close, valid, torch.Generator().manual_seed(rng.getrandbits(62))).tolist()
        return [{**example, "links": [link for link, keep in zip(example["links"], kept[i]) if keep]}
                for i, example in enumerate(knowledge)]


@register_method("bert+sr")
class SpectralRegularized(TaskModel):
    """The plain fine-tuned encoder with spectral regularization of its head's batch features."""

    def __init__(self, encoder, spec, sr_weight: float = 0.001, sr_k: int = 1, **options):
        super().__init__(encoder, spec, **options)
        self.sr_weight, self.sr_k = sr_weight, sr_k

    def extra_losses(self, batch, features):
        return {"sr": self.sr_weight * spectral_penalty(features, self.sr_k)}
