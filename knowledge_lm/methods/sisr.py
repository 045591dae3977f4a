"""SI + SR: selective knowledge injection and spectral regularization (papers/000, §4, Eq. 4–6).

Both are plug-ins. SR is an extra loss on the batch features the task head reads, so it attaches to any
method (registered here on the plain encoder as ``bert+sr``). SI is a filter on the linked entities a
knowledge-consuming method receives; it reads what ``klm prepare`` stored per link (``df``: document
frequency over the train split; ``close``: the number of other linked entities of the text within
``K_hop`` in the KG), so no KG walk happens during training.

SR (Eq. 5): ``L_sr(F) = η Σ_{i≤k} σ_i'²`` over the k smallest singular values of the b × d batch
features F. The σ² are the eigenvalues of the smaller Gram matrix (F Fᵀ when b ≤ d, the paper's
O(b²d) route, else Fᵀ F), formed in float32 outside autocast (see ``spectral_penalty``). Under DDP, F is the
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


def spectral_penalty(features: torch.Tensor, k: int = 1) -> torch.Tensor:
    """Σ of the k smallest squared singular values of ``features`` (b × d), via the smaller Gram matrix.

    The eigenvectors of that small matrix are found on the CPU (``eigh`` of a 32 × 32 matrix takes
    microseconds there, while a GPU eigensolver costs more than the rest of a MiniLM step), then the
    penalty is ``Σ vᵢᵀ G vᵢ`` on the device with the vᵢ held fixed: the same value as the eigenvalues and
    the same gradient, ``∂λᵢ/∂G = vᵢ vᵢᵀ``, as ``eigvalsh``'s backward (Hellmann–Feynman)."""
    with torch.autocast(device_type=features.device.type, enabled=False):
        matrix = features.float()
        gram = matrix @ matrix.T if matrix.shape[0] <= matrix.shape[1] else matrix.T @ matrix
        _, vectors = torch.linalg.eigh(gram.detach().cpu().double())  # ascending eigenvalues
        smallest = vectors[:, :k].to(gram.device, gram.dtype)
        eigenvalues = (smallest * (gram @ smallest)).sum(0)
        return eigenvalues.clamp(min=0).sum()


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
