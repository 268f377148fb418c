"""Writes golden cases from PyTorch in float64 (tests/golden/README.md).

    /usr/bin/python3 tests/golden/make_goldens.py [OP ...]

One JSON file per op into this directory: the inputs, the upstream gradient
`dy` and what PyTorch returned (layer files: loss = sum(y * dy), so `dx` is
the gradient of that loss). Seeded: the same torch gives the same files.
Without OP, every op this script knows. The older files of this directory
were made the same way before the script was kept here; an op added to the
reference gets its entry in OPS.
"""

import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
# The attention op's specification, which the exporter also checks declared
# attention modules against: nanoGPT's hand-written core.
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from gradeq_export.attention import attention_spec  # noqa: E402


def activation(name, fn, rows=4, cols=6, seed=3):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(rows, cols, generator=g, dtype=torch.float64) * 6.0 - 3.0).requires_grad_()
    dy = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    y = fn(x)
    (y * dy).sum().backward()
    return {"op": name, "torch": torch.__version__, "dtype": "float64", "x": x.detach().tolist(), "dy": dy.tolist(),
            "y": y.detach().tolist(), "dx": x.grad.tolist()}


def listed(t):
    return t.detach().tolist()


def embedding(vocabulary=7, width=4, padding_idx=1, seed=5):
    """nn.Embedding with padding_idx over repeated ids (token 2 four
    times, the padding token twice)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor([2, 0, 2, 1, 6, 2, 1, 2, 3])
    emb = torch.nn.Embedding(vocabulary, width, padding_idx=padding_idx).double()
    with torch.no_grad():
        emb.weight.copy_(torch.randn(vocabulary, width, generator=g, dtype=torch.float64))
    dy = torch.randn(len(ids), width, generator=g, dtype=torch.float64)
    y = emb(ids)
    (y * dy).sum().backward()
    return {"op": "embedding", "torch": torch.__version__, "dtype": "float64", "padding_idx": padding_idx,
            "ids": ids.tolist(), "weight": listed(emb.weight), "dy": listed(dy), "y": listed(y),
            "dweight": emb.weight.grad.tolist()}


def position_embedding(samples=3, positions=4, table=6, width=5, seed=6):
    """x + wpe(arange(T)) over [samples, T, width] (GPT-2's wpe), the table
    longer than the sequence."""
    g = torch.Generator().manual_seed(seed)
    wpe = torch.nn.Embedding(table, width).double()
    with torch.no_grad():
        wpe.weight.copy_(torch.randn(table, width, generator=g, dtype=torch.float64))
    # x float32-representable: a model's input is stored in the compute dtype.
    x = torch.randn(samples, positions, width, generator=g, dtype=torch.float64).float().double().requires_grad_()
    dy = torch.randn(samples, positions, width, generator=g, dtype=torch.float64)
    y = x + wpe(torch.arange(positions))
    (y * dy).sum().backward()
    return {"op": "position_embedding", "torch": torch.__version__, "dtype": "float64", "positions": positions,
            "x": listed(x.reshape(-1, width)), "weight": listed(wpe.weight), "dy": listed(dy.reshape(-1, width)),
            "y": listed(y.reshape(-1, width)), "dx": x.grad.reshape(-1, width).tolist(), "dweight": wpe.weight.grad.tolist()}


def lm_window(op, model, g, vocabulary, positions, layers, names):
    """A causal LM's window: parameters drawn N(0, 0.25) from g, sequences
    of lengths 5, 3, 2 padded with id 0 (labels -100 there), the loss's sum
    over the shifted labels divided by their count, then backward. The
    file holds the parameters and gradients under gradeq's names (the
    tied weight once, as wte.weight)."""
    model = model.double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5)
    lengths = [5, 3, 2]
    ids = torch.randint(1, vocabulary, (len(lengths), positions), generator=g)
    labels = ids.clone()
    for s, n in enumerate(lengths):
        ids[s, n:] = 0
        labels[s, n:] = -100
    logits = model(ids)
    shifted = labels[:, 1:]
    count = int((shifted != -100).sum())
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, vocabulary), shifted.reshape(-1), ignore_index=-100,
                           reduction="sum") / count
    loss.backward()
    params = dict(model.named_parameters())
    return {"op": op, "torch": torch.__version__, "dtype": "float64", "vocabulary": vocabulary,
            "positions": positions, "padding_token": 0, "layers": layers,
            "ids": ids.reshape(-1).tolist(), "labels": labels.reshape(-1).tolist(), "count": count,
            "loss": float(loss), "parameters": {names[k]: listed(p) for k, p in params.items()},
            "gradients": {names[k]: p.grad.tolist() for k, p in params.items()}}


def tied_lm(vocabulary=11, width=6, hidden=8, positions=5, seed=7):
    """A window of a small causal LM: token and position embeddings, a
    pre-LN residual MLP block, the final LayerNorm and a head tied to the
    token embedding (lm_head.weight = wte.weight); labels are the ids with
    -100 at padding, shifted inside the loss, whose sum is divided by the
    count of shifted labels. Parameters and gradients under gradeq's names."""
    g = torch.Generator().manual_seed(seed)
    nn = torch.nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocabulary, width, padding_idx=0)
            self.wpe = nn.Embedding(positions, width)
            self.ln = nn.LayerNorm(width)
            self.fc = nn.Linear(width, hidden)
            self.act = nn.GELU(approximate="tanh")
            self.proj = nn.Linear(hidden, width)
            self.ln_f = nn.LayerNorm(width)
            self.lm_head = nn.Linear(width, vocabulary, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            x = x + self.proj(self.act(self.fc(self.ln(x))))
            return self.lm_head(self.ln_f(x))

    names = {"wte.weight": "layer0.weight", "wpe.weight": "layer1.weight", "ln.weight": "layer2.0.weight",
             "ln.bias": "layer2.0.bias", "fc.weight": "layer2.1.weight", "fc.bias": "layer2.1.bias",
             "proj.weight": "layer2.3.weight", "proj.bias": "layer2.3.bias", "ln_f.weight": "layer3.weight",
             "ln_f.bias": "layer3.bias"}
    layers = ["embedding:%d" % width, "position_embedding:%d" % positions,
              {"residual": ["layernorm", "linear:%d" % hidden, "gelu", "linear:%d" % width]},
              "layernorm", "tied_head"]
    return lm_window("tied_lm", LM(), g, vocabulary, positions, layers, names)


def attention(name, causal, samples=3, positions=5, heads=2, d=3, seed=11):
    """The attention core alone: qkv [rows, 3 D] (float32-representable, as
    a stored value), token ids whose padding (id 0) keys are masked."""
    g = torch.Generator().manual_seed(seed)
    width = heads * d
    qkv = (torch.randn(samples, positions, 3 * width, generator=g, dtype=torch.float64) * 1.5).float().double()
    qkv.requires_grad_()
    ids = torch.randint(1, 9, (samples, positions), generator=g)
    ids[1, 3:] = 0
    ids[2, 4:] = 0
    dy = torch.randn(samples, positions, width, generator=g, dtype=torch.float64)
    y = attention_spec(qkv, heads, causal, ids, 0)
    (y * dy).sum().backward()
    return {"op": name, "torch": torch.__version__, "dtype": "float64", "heads": heads, "positions": positions,
            "causal": causal, "padding_token": 0, "qkv": listed(qkv.reshape(-1, 3 * width)),
            "ids": ids.reshape(-1).tolist(), "dy": listed(dy.reshape(-1, width)), "y": listed(y.reshape(-1, width)),
            "dqkv": qkv.grad.reshape(-1, 3 * width).tolist()}


def gpt_small(vocabulary=11, width=8, heads=2, hidden=12, positions=5, seed=13):
    """A window of a small GPT: token and position embeddings, a pre-LN
    block of causal self-attention (c_attn, the hand-written core of
    python/gradeq_export/attention.py, c_proj)
    and one of an MLP, the final LayerNorm and a tied head; labels shifted
    inside the loss, whose sum is divided by the count of shifted labels.
    Padding (id 0) is masked as a key. Parameters and gradients under
    gradeq's names."""
    g = torch.Generator().manual_seed(seed)
    nn = torch.nn

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocabulary, width, padding_idx=0)
            self.wpe = nn.Embedding(positions, width)
            self.ln_1 = nn.LayerNorm(width)
            self.c_attn = nn.Linear(width, 3 * width)
            self.c_proj = nn.Linear(width, width)
            self.ln_2 = nn.LayerNorm(width)
            self.fc = nn.Linear(width, hidden)
            self.act = nn.GELU(approximate="tanh")
            self.proj = nn.Linear(hidden, width)
            self.ln_f = nn.LayerNorm(width)
            self.lm_head = nn.Linear(width, vocabulary, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            x = x + self.c_proj(attention_spec(self.c_attn(self.ln_1(x)), heads, True, idx, 0))
            x = x + self.proj(self.act(self.fc(self.ln_2(x))))
            return self.lm_head(self.ln_f(x))

    names = {"wte.weight": "layer0.weight", "wpe.weight": "layer1.weight", "ln_1.weight": "layer2.0.weight",
             "ln_1.bias": "layer2.0.bias", "c_attn.weight": "layer2.1.weight", "c_attn.bias": "layer2.1.bias",
             "c_proj.weight": "layer2.3.weight", "c_proj.bias": "layer2.3.bias", "ln_2.weight": "layer3.0.weight",
             "ln_2.bias": "layer3.0.bias", "fc.weight": "layer3.1.weight", "fc.bias": "layer3.1.bias",
             "proj.weight": "layer3.3.weight", "proj.bias": "layer3.3.bias", "ln_f.weight": "layer4.weight",
             "ln_f.bias": "layer4.bias"}
    layers = ["embedding:%d" % width, "position_embedding:%d" % positions,
              {"residual": ["layernorm", "linear:%d" % (3 * width), "attention:%d" % heads, "linear:%d" % width]},
              {"residual": ["layernorm", "linear:%d" % hidden, "gelu", "linear:%d" % width]},
              "layernorm", "tied_head"]
    return lm_window("gpt_small", GPT(), g, vocabulary, positions, layers, names)


def conv2d(seed=11):
    """nn.Conv2d on [samples, C, H, W] images, each sample one row of C H W
    values (NCHW) as gradeq stores it: a 3x3 halo on an odd image, stride 2
    on an odd image with two groups, depthwise with dilation 2, a 1x1. The
    weight as gradeq holds it: [C_out, C_in/groups k k]."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    for (c_in, h, w, c_out, k, stride, padding, dilation, groups, samples) in [
            (3, 7, 6, 4, 3, 1, 1, 1, 1, 2), (4, 9, 9, 6, 3, 2, 1, 1, 2, 3), (4, 5, 5, 4, 3, 1, 2, 2, 4, 2),
            (5, 4, 4, 3, 1, 1, 0, 1, 1, 2)]:
        conv = torch.nn.Conv2d(c_in, c_out, k, stride=stride, padding=padding, dilation=dilation,
                               groups=groups).double()
        with torch.no_grad():
            conv.weight.copy_(torch.randn(conv.weight.shape, generator=g, dtype=torch.float64))
            conv.bias.copy_(torch.randn(conv.bias.shape, generator=g, dtype=torch.float64))
        x = torch.randn(samples, c_in, h, w, generator=g, dtype=torch.float64).requires_grad_()
        y = conv(x)
        dy = torch.randn(y.shape, generator=g, dtype=torch.float64)
        (y * dy).sum().backward()
        cases.append({"image": [c_in, h, w], "out_channels": c_out, "kernel": k, "stride": stride,
                      "padding": padding, "dilation": dilation, "groups": groups,
                      "x": listed(x.reshape(samples, -1)), "weight": listed(conv.weight.reshape(c_out, -1)),
                      "bias": [listed(conv.bias)], "dy": listed(dy.reshape(samples, -1)),
                      "y": listed(y.reshape(samples, -1)), "dx": x.grad.reshape(samples, -1).tolist(),
                      "dweight": conv.weight.grad.reshape(c_out, -1).tolist(), "dbias": [conv.bias.grad.tolist()]})
    return {"op": "conv2d", "torch": torch.__version__, "dtype": "float64", "cases": cases}


def norm2d(op, module, samples=3, channels=4, h=3, w=5, seed=13):
    """BatchNorm2d (training mode, its running statistics) or GroupNorm on
    [samples, C, H, W], each sample one row of C H W values (NCHW), the
    affine per channel."""
    g = torch.Generator().manual_seed(seed)
    module = module.double()
    with torch.no_grad():
        module.weight.copy_(1.0 + 0.2 * torch.randn(channels, generator=g, dtype=torch.float64))
        module.bias.copy_(0.2 * torch.randn(channels, generator=g, dtype=torch.float64))
    x = (3.0 * torch.randn(samples, channels, h, w, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    dy = torch.randn(samples, channels, h, w, generator=g, dtype=torch.float64)
    before = {}
    if isinstance(module, torch.nn.BatchNorm2d):
        before = {"running_mean_before": [listed(module.running_mean)], "running_var_before": [listed(module.running_var)]}
    y = module(x)
    (y * dy).sum().backward()
    out = {"op": op, "torch": torch.__version__, "dtype": "float64", "image": [channels, h, w], "eps": module.eps,
           "x": listed(x.reshape(samples, -1)), "dy": listed(dy.reshape(samples, -1)),
           "y": listed(y.reshape(samples, -1)), "dx": x.grad.reshape(samples, -1).tolist(),
           "weight": [listed(module.weight)], "bias": [listed(module.bias)],
           "dweight": [module.weight.grad.tolist()], "dbias": [module.bias.grad.tolist()]}
    if isinstance(module, torch.nn.GroupNorm):
        out["groups"] = module.num_groups
    else:
        out.update(before)
        out.update({"momentum": module.momentum, "running_mean_after": [listed(module.running_mean)],
                    "running_var_after": [listed(module.running_var)]})
    return out


def resample(seed=17):
    """nn.AvgPool2d (windows side by side on an odd width; overlapping at
    stride 1), nn.AdaptiveAvgPool2d(1) and nn.Upsample(scale_factor=2,
    mode="nearest") on [samples, C, H, W], each sample one row (NCHW)."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    for name, module, (c, h, w), args in [
            ("avgpool", torch.nn.AvgPool2d(2), (2, 6, 7), {"kernel": 2, "stride": 2}),
            ("avgpool", torch.nn.AvgPool2d(3, stride=1), (3, 5, 5), {"kernel": 3, "stride": 1}),
            ("global_avgpool", torch.nn.AdaptiveAvgPool2d(1), (2, 3, 5), {}),
            ("upsample", torch.nn.Upsample(scale_factor=2, mode="nearest"), (2, 3, 4), {})]:
        x = torch.randn(2, c, h, w, generator=g, dtype=torch.float64).requires_grad_()
        y = module(x)
        dy = torch.randn(y.shape, generator=g, dtype=torch.float64)
        (y * dy).sum().backward()
        case = {"layer": name, "image": [c, h, w], "x": listed(x.reshape(2, -1)), "dy": listed(dy.reshape(2, -1)),
                "y": listed(y.reshape(2, -1)), "dx": x.grad.reshape(2, -1).tolist()}
        case.update(args)
        cases.append(case)
    return {"op": "resample", "torch": torch.__version__, "dtype": "float64", "cases": cases}


def unet_small(seed=19):
    """A small U-Net's window in float64: a 3x3 stem with GroupNorm, an
    encoder pooled by 2 (max) and decoded by up-sampling, its skip a
    channel concatenation (torch.cat on dim 1), a strided grouped
    convolution, an average pool, the global average pool and a linear
    head; forward on 3 images of 3 x 8 x 8, then backward from dy
    (loss = sum(y dy)). Parameters and gradients under gradeq's names."""
    g = torch.Generator().manual_seed(seed)
    nn = torch.nn

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 4, 3, padding=1)
            self.stem_norm = nn.GroupNorm(2, 4)
            self.down = nn.Conv2d(4, 6, 3, padding=1)
            self.down_norm = nn.GroupNorm(3, 6)
            self.up = nn.Conv2d(6, 4, 3, padding=1)
            self.fuse = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2)
            self.fuse_norm = nn.GroupNorm(4, 8)
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            x = torch.relu(self.stem_norm(self.stem(x)))
            f = torch.relu(self.down_norm(self.down(F.max_pool2d(x, 2))))
            f = self.up(F.interpolate(f, scale_factor=2, mode="nearest"))
            x = torch.cat([x, f], dim=1)
            x = torch.relu(self.fuse_norm(self.fuse(x)))
            x = F.avg_pool2d(x, 2)
            x = F.adaptive_avg_pool2d(x, 1).flatten(1)
            return self.head(x)

    names = {"stem.weight": "layer0.weight", "stem.bias": "layer0.bias", "stem_norm.weight": "layer1.weight",
             "stem_norm.bias": "layer1.bias", "down.weight": "layer3.1.weight", "down.bias": "layer3.1.bias",
             "down_norm.weight": "layer3.2.weight", "down_norm.bias": "layer3.2.bias",
             "up.weight": "layer3.5.weight", "up.bias": "layer3.5.bias", "fuse.weight": "layer4.weight",
             "fuse.bias": "layer4.bias", "fuse_norm.weight": "layer5.weight", "fuse_norm.bias": "layer5.bias",
             "head.weight": "layer9.weight", "head.bias": "layer9.bias"}
    layers = ["conv2d:4:3:padding=1", "groupnorm:2", "relu",
              {"concat": ["maxpool:2", "conv2d:6:3:padding=1", "groupnorm:3", "relu", "upsample",
                          "conv2d:4:3:padding=1"]},
              "conv2d:8:3:stride=2:padding=1:groups=2", "groupnorm:4", "relu", "avgpool:2", "global_avgpool",
              "linear:3"]
    model = UNet().double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5)
    # Float32-representable inputs: a model's input is stored in the compute dtype.
    x = torch.randn(3, 3, 8, 8, generator=g, dtype=torch.float64).float().double()
    y = model(x)
    dy = torch.randn(y.shape, generator=g, dtype=torch.float64)
    (y * dy).sum().backward()
    params = dict(model.named_parameters())
    return {"op": "unet_small", "torch": torch.__version__, "dtype": "float64", "image": [3, 8, 8], "layers": layers,
            "x": listed(x.reshape(3, -1)), "dy": listed(dy), "y": listed(y),
            "parameters": {names[k]: listed(p.reshape(p.shape[0], -1) if p.dim() > 1 else p.reshape(1, -1))
                           for k, p in params.items()},
            "gradients": {names[k]: (p.grad.reshape(p.shape[0], -1) if p.dim() > 1 else p.grad.reshape(1, -1)).tolist()
                          for k, p in params.items()}}


OPS = {
    # nn.GELU()'s default: x Phi(x), exact through erf.
    "gelu_erf": lambda: activation("gelu_erf", lambda x: F.gelu(x)),
    "embedding": embedding,
    "position_embedding": position_embedding,
    "tied_lm": tied_lm,
    "attention": lambda: attention("attention", True),
    "bidirectional_attention": lambda: attention("bidirectional_attention", False),
    "gpt_small": gpt_small,
    "conv2d": conv2d,
    "batchnorm2d_train": lambda: norm2d("batchnorm2d_train", torch.nn.BatchNorm2d(4)),
    "groupnorm2d": lambda: norm2d("groupnorm2d", torch.nn.GroupNorm(2, 4)),
    "resample": resample,
    "unet_small": unet_small,
}


def main(names):
    for name in names or list(OPS):
        if name not in OPS:
            sys.exit("unknown op %s (known: %s)" % (name, ", ".join(OPS)))
        path = os.path.join(HERE, name + ".json")
        with open(path, "w") as f:
            json.dump(OPS[name](), f, indent=1)
        print("wrote", path)


if __name__ == "__main__":
    main(sys.argv[1:])
