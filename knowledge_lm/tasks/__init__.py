"""Task kinds: how a task's examples become model inputs, how the head reads the encoder, how answers are scored.

One module per kind (sentence classification and regression, relation classification, entity typing,
document-level RE, multiple choice, extractive QA, cloze probing), each a
:class:`~knowledge_lm.tasks.base.TaskKind` named in ``knowledge_lm.core.catalog``'s ``TASK_KIND_ENTRIES``. A
dataset's ``TaskSpec.kind`` names its kind; every method works with every kind because methods only change the encoder.
"""
