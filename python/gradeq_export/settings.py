"""What the recorder reads from torch's objects besides the model: the
optimizer's settings; and how read settings compare."""


def _torch():
    import torch
    return torch


def _same(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def optimizer_settings(optimizer, trained, model=None):
    """gradeq's optimizer keys, read from a torch optimizer's class and
    param_groups. `trained`: the parameters that require a gradient; every
    one must be stepped, and (with `model`) nothing else may be."""
    torch = _torch()
    kinds = [(torch.optim.AdamW, "adamw"), (torch.optim.Adam, "adam"), (torch.optim.SGD, "sgd")]
    kind = next((name for cls, name in kinds if type(optimizer) is cls), None)
    if kind is None:
        raise ValueError("optimizer %s is not one gradeq models (torch.optim.SGD, Adam, AdamW)"
                         % type(optimizer).__name__)
    groups = optimizer.param_groups
    stepped = {id(p) for g in groups for p in g["params"]}
    for name, p in trained:
        if id(p) not in stepped:
            raise ValueError("parameter '%s' requires a gradient but is in none of the optimizer's param_groups: "
                             "freeze it (requires_grad_(False)) or give it to the optimizer" % name)
    if model is not None:
        ours = {id(p) for p in model.parameters()}
        for i, g in enumerate(groups):
            for p in g["params"]:
                if id(p) not in ours and p.requires_grad:
                    raise ValueError("optimizer param_groups[%d] steps a tensor of shape %s that is not a parameter of "
                                     "the model's layers: gradeq's reference would not step it" % (i, tuple(p.shape)))
    keys = ["momentum", "dampening", "nesterov", "weight_decay"] if kind == "sgd" else ["betas", "eps", "weight_decay"]
    out = None
    for i, g in enumerate(groups):
        for flag in ("maximize", "amsgrad", "capturable", "differentiable"):
            if g.get(flag):
                raise ValueError("optimizer param_groups[%d]: %s=True is not modelled" % (i, flag))
        if kind == "adam" and g.get("decoupled_weight_decay"):
            kind = "adamw"  # Adam(decoupled_weight_decay=True) is AdamW
        s = {"optimizer": kind, "learning_rate": float(g.get("initial_lr", g["lr"]))}
        for k in keys:
            v = g[k]
            s[k] = [float(b) for b in v] if k == "betas" else (bool(v) if k == "nesterov" else float(v))
        if out is not None and not _same(out, s):
            raise ValueError("optimizer param_groups[%d] has settings %s, param_groups[0] %s: gradeq steps every "
                             "parameter with one set" % (i, s, out))
        out = s
    return out
