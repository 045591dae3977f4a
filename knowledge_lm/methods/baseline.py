"""The plain fine-tuned encoder: the baseline every table compares against.

Nothing is added to :class:`~knowledge_lm.methods.task_model.TaskModel`: [CLS] features, a task head,
the task loss, AdamW with warm-up and linear decay.
"""

from knowledge_lm.methods.task_model import TaskModel


class Baseline(TaskModel):
    """Fine-tuned encoder without knowledge."""

    cuda_graphs = "cuda-graphs"
    inert_options = ("new_module_lr", "zero_knowledge")  # it has no new modules and no knowledge
