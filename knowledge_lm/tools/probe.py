"""LAMA probing: how many facts a masked LM completes, zero-shot, as precision@1 per relation.

Each fact's cloze sentence (``knowledge_lm.data.lama``) gets the tokenizer's mask token where the
object goes; the model's top prediction at the mask is right when it is the object's token.
Scoring deviates from LAMA in one documented way: LAMA restricts facts and predictions to a common
vocabulary of several models, which is not here. We keep the facts whose object is one token of the
backbone's own vocabulary (not the unknown token) and whose sentence holds exactly one mask, predict
over the whole vocabulary less the special tokens, and report how many facts each relation kept.
Other valid objects of the same subject are not filtered out, as in LAMA's main tables.

The result: precision@1 (×100) per relation, its mean per corpus (T-REx, Google-RE, SQuAD), and
the mean over all relations that kept a fact. Relations that kept none have precision None and are
left out of the means.
"""

from statistics import mean

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer
from transformers.utils import logging as transformers_logging

from knowledge_lm.core.backbones import TINY_BACKBONES, resolve_backbone
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import resolve_data_dir
from knowledge_lm.data.lama import MASK, load_lama

NO_MLM_HEAD = (
    "backbone {name!r} has no MLM head: LAMA probing needs a masked-LM checkpoint "
    "(e.g. an ERICA checkpoint or bert-base-uncased)"
)


def load_masked_lm(backbone_name: str):
    """``(model, tokenizer, where)`` of a checkpoint with a trained masked-LM head, in eval mode."""

    if backbone_name in TINY_BACKBONES:  # randomly initialised, encoder only
        raise KlmError(NO_MLM_HEAD.format(name=backbone_name))
    path, checksum, label = resolve_backbone(backbone_name)
    transformers_logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model, loading = AutoModelForMaskedLM.from_pretrained(str(path), output_loading_info=True)
    except (OSError, ValueError) as error:
        raise KlmError(
            f"cannot load backbone {backbone_name!r} as a masked LM ({str(error).splitlines()[0]})"
        ) from None
    # An encoder-only checkpoint (MiniLM) loads with a freshly initialised head: its weights are missing.
    if loading["missing_keys"] or tokenizer.mask_token is None:
        raise KlmError(NO_MLM_HEAD.format(name=backbone_name))
    model.float().eval()
    return model, tokenizer, {"name": label, "path": str(path), "checksum": checksum}


def object_token_id(tokenizer, obj: str) -> int | None:
    """The object's id when it is one token of the vocabulary (a leading space, for byte-level BPE), else None."""
    ids = tokenizer(" " + obj, add_special_tokens=False)["input_ids"]
    if len(ids) != 1 or ids[0] == tokenizer.unk_token_id:
        return None
    return ids[0]


@torch.no_grad()
def top_predictions(model, tokenizer, sentences: list[str], batch_size: int) -> list[int | None]:
    """The best non-special token at the mask of each sentence; None where it holds not exactly one mask."""
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
    max_length = min(tokenizer.model_max_length, model.config.max_position_embeddings)
    predictions = []
    for start in range(0, len(sentences), batch_size):
        inputs = tokenizer(
            sentences[start : start + batch_size],
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
        )
        masks = inputs["input_ids"] == tokenizer.mask_token_id
        logits = model(**inputs).logits
        logits[..., special] = float("-inf")
        best = logits.argmax(-1)
        for row, row_masks in enumerate(masks):
            positions = row_masks.nonzero().flatten()
            predictions.append(int(best[row, positions[0]]) if len(positions) == 1 else None)
    return predictions


def probe(backbone_name: str, data_dir=None, relations: list[str] | None = None, batch_size: int = 32) -> dict:
    """LAMA precision@1 of a masked-LM backbone, per relation and averaged (see the module docstring)."""
    root = resolve_data_dir(data_dir)
    if root is None:
        raise KlmError("no data directory for LAMA: set --data-dir or DATA_DIR (expected <data_dir>/lama/)")
    loaded = load_lama(root / "lama", relations)
    model, tokenizer, backbone = load_masked_lm(backbone_name)

    results = {}
    for relation in loaded:
        targets = [object_token_id(tokenizer, fact.object) for fact in relation.facts]
        kept = [(fact, target) for fact, target in zip(relation.facts, targets) if target is not None]
        sentences = [fact.sentence.replace(MASK, tokenizer.mask_token) for fact, _ in kept]
        predicted = top_predictions(model, tokenizer, sentences, batch_size)
        scored = [(prediction, target) for prediction, (_, target) in zip(predicted, kept) if prediction is not None]
        correct = sum(prediction == target for prediction, target in scored)
        results[relation.name] = {
            "corpus": relation.corpus,
            "template": relation.template,
            "facts": len(relation.facts),
            "kept": len(scored),
            "multi_token_objects": len(relation.facts) - len(kept),
            "not_one_mask": len(kept) - len(scored),
            "correct": correct,
            "precision_at_1": 100.0 * correct / len(scored) if scored else None,
        }

    def mean_of(names) -> float | None:
        values = [results[name]["precision_at_1"] for name in names if results[name]["precision_at_1"] is not None]
        return mean(values) if values else None

    corpora = dict.fromkeys(result["corpus"] for result in results.values())
    return {
        "backbone": backbone,
        "relations": results,
        "corpus_means": {corpus: mean_of(n for n, r in results.items() if r["corpus"] == corpus) for corpus in corpora},
        "mean_precision_at_1": mean_of(results),
        "facts": sum(result["facts"] for result in results.values()),
        "kept": sum(result["kept"] for result in results.values()),
        "vocabulary": "single-token objects of the backbone's own vocabulary "
        "(LAMA's common vocabulary is not available)",
    }
