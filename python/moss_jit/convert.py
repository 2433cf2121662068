"""convert(): swap a model's eligible torch.nn.Linear layers for
moss_jit.nn.Linear."""

import torch

from . import nn as moss_nn


def _skip_reason(linear):
    if type(linear) is not torch.nn.Linear:
        return f"is a {type(linear).__name__}, not a plain torch.nn.Linear"
    for name in ("in_features", "out_features"):
        value = getattr(linear, name)
        if value % 32:
            return f"{name}={value} is not a multiple of 32 (the scaling block)"
    if linear.weight.dtype not in (torch.float32, torch.bfloat16):
        return (f"its weight is {linear.weight.dtype}, not float32 or "
                "bfloat16")
    device = linear.weight.device
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) != (9, 0):
            return f"it is on {device}, sm_{major}{minor}, not a Hopper GPU"
    elif device.type != "cpu":
        return f"it is on {device}"
    return None


def convert(model, filter_fn=None, verbose=True, **options):
    """Replaces, in place, every torch.nn.Linear of `model` that the MOSS
    Linear takes (and `filter_fn(name, module)` accepts, when given) by a
    moss_jit.nn.Linear sharing its parameters. `options` go to
    moss_jit.nn.Linear. Returns `model` with `model.moss_report`: a dict
    with the 'converted' names and the 'skipped' (name, reason) pairs, which
    `verbose` also prints."""
    converted, skipped = [], []
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear) or \
                    isinstance(child, moss_nn.Linear):
                continue
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if filter_fn is not None and not filter_fn(name, child):
                skipped.append((name, "filter_fn rejected it"))
                continue
            reason = _skip_reason(child)
            if reason:
                skipped.append((name, reason))
                continue
            setattr(parent, child_name,
                    moss_nn.Linear.from_linear(child, **options))
            converted.append(name)
    model.moss_report = {"converted": converted, "skipped": skipped}
    if verbose:
        print(f"moss_jit.convert: {len(converted)} Linear layers converted, "
              f"{len(skipped)} skipped")
        for name, reason in skipped:
            print(f"  skipped {name}: {reason}")
    return model
