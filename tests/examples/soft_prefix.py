"""soft-prefix: knowledge as a prefix of soft tokens, one learned vector per linked entity before the text."""

import zlib
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from knowledge_lm.methods.task_model import MethodOptions, TaskModel


@dataclass
class SoftPrefixOptions(MethodOptions):
    """soft-prefix's options: ``prefix_tokens``, the most linked entities a prefix holds; ``buckets``, the rows of
    the entity table the entity ids are hashed into."""

    prefix_tokens: int = 4
    buckets: int = 1024


def entity_rows(rows: list[dict], sequence_length: int, prefix_tokens: int, buckets: int, zeroed: bool):
    """b × ``prefix_tokens`` rows of the entity table (0: none) from a batch's knowledge features rows: the top
    candidate of each example's first links, its id hashed (crc32: the same in every process) into 1 … buckets-1."""
    ids = torch.zeros(len(rows), prefix_tokens, dtype=torch.long)
    for i, row in enumerate(rows):
        qids = [link["candidates"][0][0] for link in row["links"] if link["candidates"]][:prefix_tokens]
        ids[i, : len(qids)] = torch.tensor([1 + zlib.crc32(qid.encode()) % (buckets - 1) for qid in qids])
    return torch.zeros_like(ids) if zeroed else ids


class SoftPrefix(TaskModel):
    """Each linked entity's learned vector as a soft token before the text; the head reads the text's positions."""

    options_class = SoftPrefixOptions

    def __init__(self, encoder, spec, **options):
        super().__init__(encoder, spec, **options)
        self.entities = nn.Embedding(self.options.buckets, encoder.config.hidden_size, padding_idx=0)

    def new_modules(self) -> list[nn.Module]:
        return [self.entities]

    def knowledge_collate(self, data):
        options = self.options
        return partial(
            entity_rows, prefix_tokens=options.prefix_tokens, buckets=options.buckets, zeroed=options.zero_knowledge
        )

    def encode(self, batch) -> torch.Tensor:
        entities = batch["knowledge"]  # b × prefix_tokens, from entity_rows in the data loader
        words = self.encoder.get_input_embeddings()(batch["input_ids"])
        inputs = {
            "inputs_embeds": torch.cat([self.entities(entities), words], dim=1),
            "attention_mask": torch.cat([(entities > 0).long(), batch["attention_mask"]], dim=1),
        }
        if "token_type_ids" in batch:
            inputs["token_type_ids"] = torch.cat([torch.zeros_like(entities), batch["token_type_ids"]], dim=1)
        return self.encoder(**inputs).last_hidden_state[:, entities.shape[1] :]  # the text's positions
