"""Optimisation shared by every method: AdamW, linear warm-up then linear decay to zero."""

import torch
from transformers import get_linear_schedule_with_warmup

NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")


def adamw_with_warmup(
    module: torch.nn.Module,
    lr: float,
    weight_decay: float,
    warmup_ratio: float,
    total_steps: int,
    *,
    new_modules=(),
    new_module_lr: float | None = None,
    fused: bool = False,
    capturable: bool = False,
):
    """Lightning's ``configure_optimizers`` answer; biases and norms are not decayed, as in BERT.

    ``new_modules`` (randomly initialised ones: KAR, KAM's convolutions, ...) train at ``new_module_lr`` where
    it is given, as allenai/kb trains KnowBERT's new layers at their own rate; the rest at ``lr``. ``fused``: AdamW's
    fused CUDA kernel (a few launches a step instead of a few per parameter group and update). ``capturable``: an
    optimiser whose ``step`` a CUDA graph can capture (``TaskModel``'s captured training step): its state and each
    group's learning rate on the device, the rate a tensor the scheduler fills in place each step."""
    new = (
        {id(parameter) for submodule in new_modules for parameter in submodule.parameters()} if new_module_lr else set()
    )
    named = [(name, parameter) for name, parameter in module.named_parameters() if parameter.requires_grad]
    groups = []
    for rate, members in (
        (lr, [(n, p) for n, p in named if id(p) not in new]),
        (new_module_lr, [(n, p) for n, p in named if id(p) in new]),
    ):
        if not members:
            continue
        groups.append(
            {"params": [p for n, p in members if not n.endswith(NO_DECAY)], "weight_decay": weight_decay, "lr": rate}
        )
        groups.append({"params": [p for n, p in members if n.endswith(NO_DECAY)], "weight_decay": 0.0, "lr": rate})
    optimizer = torch.optim.AdamW(
        [group for group in groups if group["params"]], lr=lr, fused=fused or None, capturable=capturable
    )
    scheduler = get_linear_schedule_with_warmup(optimizer, int(warmup_ratio * total_steps), total_steps)
    if capturable:
        # After the scheduler read its base rates as numbers: it fills these tensors with numbers, never waiting
        # for the device (a tensor base rate would make it read one back each step).
        device = next(module.parameters()).device
        for group in optimizer.param_groups:
            group["lr"] = torch.tensor(group["lr"], dtype=torch.float32, device=device)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
