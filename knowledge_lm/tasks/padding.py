"""Batches padded with torch straight from tokenized columns.

The data loader hands a task kind's ``collate`` a batch as columns (name → one value per example), one Arrow
slice of the dataset. ``pad`` turns a column of token sequences into one tensor without
touching a row in Python: the values are concatenated and written through a mask. The result is what
``DataCollatorWithPadding`` (``tokenizer.pad``) gives for the same examples, without its per-row work.
"""

from collections.abc import Mapping
from itertools import chain

import pyarrow as pa
import torch

from knowledge_lm.tasks.base import ENCODER_INPUTS


def is_token_column(column) -> bool:
    """An Arrow column of one flat integer sequence per example, which ``pad`` reads without Python rows."""
    return isinstance(column, pa.ListArray) and pa.types.is_integer(column.type.value_type)


def as_columns(features) -> dict[str, list]:
    """A batch as columns: rows (a list of examples) turned into columns; of the loader's Arrow columns, the
    encoder inputs kept as Arrow (``pad`` reads them as they are) and the rest as Python lists."""
    if not isinstance(features, Mapping):
        return {name: [feature[name] for feature in features] for name in features[0]}
    return {
        name: column if name in ENCODER_INPUTS and is_token_column(column) else as_list(column)
        for name, column in features.items()
    }


def as_list(column) -> list:
    return column.to_pylist() if isinstance(column, pa.Array | pa.ChunkedArray) else column


def pad(sequences, value, width: int | None = None, left: bool = False, dtype=torch.long) -> torch.Tensor:
    """``sequences`` (each a list of items: numbers, or equal-length lists of numbers; or an Arrow column of
    integer lists) as one b × width (× item) tensor, filled with ``value`` past each sequence's end (before its
    start when ``left``)."""
    if is_token_column(sequences):
        lengths = torch.tensor(sequences.value_lengths().to_numpy(zero_copy_only=False), dtype=torch.long)
        values = torch.tensor(sequences.flatten().to_numpy(), dtype=dtype)
    else:
        lengths = torch.tensor([len(sequence) for sequence in sequences], dtype=torch.long)
        values = torch.tensor(list(chain.from_iterable(sequences)), dtype=dtype)
    width = int(lengths.max()) if width is None else width
    padded = torch.full((len(lengths), width, *values.shape[1:]), value, dtype=dtype)
    positions = torch.arange(width)
    mask = positions >= width - lengths[:, None] if left else positions < lengths[:, None]
    padded[mask] = values
    return padded


def pad_encoder_inputs(columns: Mapping[str, list], tokenizer) -> dict[str, torch.Tensor]:
    """The encoder's input columns present in ``columns`` padded as ``tokenizer.pad`` pads them: ids with the pad
    token, token types with the pad type, the attention mask with 0, on the tokenizer's padding side, to the longest
    sequence or the width the tokenizer's ``padded_width`` gives."""
    pad_values = {
        "input_ids": tokenizer.pad_token_id,
        "token_type_ids": tokenizer.pad_token_type_id,
        "attention_mask": 0,
    }
    left = tokenizer.padding_side == "left"
    ids = columns["input_ids"]
    longest = max(ids.value_lengths().to_pylist()) if is_token_column(ids) else max(len(sequence) for sequence in ids)
    padded_width = getattr(tokenizer, "padded_width", None)  # a fixed or rounded width (``StaticPadding``)
    width = padded_width(longest) if padded_width is not None else longest
    return {
        name: pad(columns[name], pad_values[name], width=width, left=left) for name in ENCODER_INPUTS if name in columns
    }
