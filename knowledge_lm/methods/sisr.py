"""SI + SR: selective knowledge injection and spectral regularization (papers/000, §4, Eq. 4–6).

Both are plug-ins. SR is an extra loss on the batch features the task head reads, so it attaches to any
method (registered here on the plain encoder as ``bert+sr``). SI is a filter on the linked entities a
knowledge-consuming method receives; it reads what ``klm prepare`` stored per link (``df``: document
frequency over the train split; ``close``: the number of other linked entities of the text within
``K_hop`` in the KG), so no KG walk happens during training.

SR (Eq. 5): ``L_sr(F) = η Σ_{i≤k} σ_i'²`` over the k smallest singular values of the b × d batch
features F. The σ² are the eigenvalues of the smaller Gram matrix (F Fᵀ when b ≤ d, the paper's
O(b²d) route, else Fᵀ F), computed with ``eigvalsh`` in float32 outside autocast. Under DDP, F is the
per-device batch (no gather): the choice and the per-device batch size go into every result.

SI (Eq. 4): ``s(e) = 1[DF(e) < K_thresh] + λ · clip(|S(e)|, K_min, K_max)``; per text, ⌈0.85·|E|⌉
entities are drawn without replacement with probability ∝ s, and each entity not drawn is still
injected with probability 0.15 (METHODS.md's reading of the paper). SI filters in training only;
evaluation sees every linked entity, so that dev and test scores are deterministic.
"""

import math
import random
from dataclasses import dataclass

import torch

from knowledge_lm.registry import register_method
from knowledge_lm.task_model import TaskModel


def spectral_penalty(features: torch.Tensor, k: int = 1) -> torch.Tensor:
    """Σ of the k smallest squared singular values of ``features`` (b × d), via the smaller Gram matrix."""
    with torch.autocast(device_type=features.device.type, enabled=False):
        matrix = features.float()
        gram = matrix @ matrix.T if matrix.shape[0] <= matrix.shape[1] else matrix.T @ matrix
        eigenvalues = torch.linalg.eigvalsh(gram)  # ascending
        return eigenvalues[:k].clamp(min=0).sum()


@dataclass(frozen=True)
class SelectiveInjection:
    """Eq. 4 with the paper's constants as defaults (§5.1)."""

    lam: float = 0.5
    k_thresh: int = 100
    k_min: int = 5
    k_max: int = 20
    sample_ratio: float = 0.85
    keep_probability: float = 0.15

    def score(self, df: int, close: int) -> float:
        return float(df < self.k_thresh) + self.lam * min(max(close, self.k_min), self.k_max)

    def draw(self, links: list[dict], rng: random.Random) -> list[bool]:
        """Which of a text's links are injected this time."""
        if not links:
            return []
        weights = [self.score(link["df"], link["close"]) for link in links]
        remaining = list(range(len(links)))
        kept = [False] * len(links)
        for _ in range(math.ceil(self.sample_ratio * len(links))):
            chosen = rng.choices(remaining, weights=[weights[i] for i in remaining])[0]
            kept[chosen] = True
            remaining.remove(chosen)
        for index in remaining:
            kept[index] = rng.random() < self.keep_probability
        return kept

    def filter_batch(self, knowledge: list[dict], rng: random.Random) -> list[dict]:
        """``batch["knowledge"]`` with the links SI did not draw removed."""
        filtered = []
        for example in knowledge:
            kept = self.draw(example["links"], rng)
            filtered.append({**example, "links": [link for link, keep in zip(example["links"], kept) if keep]})
        return filtered


@register_method("bert+sr")
class SpectralRegularized(TaskModel):
    """The plain fine-tuned encoder with spectral regularization of its head's batch features."""

    def __init__(self, encoder, spec, sr_weight: float = 0.001, sr_k: int = 1, **options):
        super().__init__(encoder, spec, **options)
        self.sr_weight, self.sr_k = sr_weight, sr_k

    def extra_losses(self, batch, features):
        return {"sr": self.sr_weight * spectral_penalty(features, self.sr_k)}
