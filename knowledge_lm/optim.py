"""Optimisation shared by every method: AdamW, linear warm-up then linear decay to zero."""

import torch
from transformers import get_linear_schedule_with_warmup

NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")


def adamw_with_warmup(module: torch.nn.Module, lr: float, weight_decay: float, warmup_ratio: float, total_steps: int):
    """Lightning's ``configure_optimizers`` answer; biases and norms are not decayed, as in BERT."""
    named = [(name, parameter) for name, parameter in module.named_parameters() if parameter.requires_grad]
    groups = [
        {"params": [p for n, p in named if not n.endswith(NO_DECAY)], "weight_decay": weight_decay},
        {"params": [p for n, p in named if n.endswith(NO_DECAY)], "weight_decay": 0.0},
    ]
    # Not fused: Lightning refuses gradient clipping (the cells clip at 1.0) with a fused optimizer.
    optimizer = torch.optim.AdamW(groups, lr=lr)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(warmup_ratio * total_steps), total_steps)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
