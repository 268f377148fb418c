"""Models that are graphs, written as plain nn.Module classes, read by
python/gradeq_export into gradeq's layers (ctest label torch).

    torch_graph_export.py [GRADEQ]

Residuals (x + f(x), f(x) + x), concats (torch.cat([x, f(x)], dim=-1)) and
their nesting: the exported `layers`, the gradeq name of every parameter
and its torch name; the layers, evaluated as gradeq defines them with the
parameters found by those names, compute what the model computes; a loop
over each model recorded with TorchRecorder writes them into the manifest.
With GRADEQ, `gradeq verify` judges the recorded loops (correct ones: they
must pass). Then what is not that form, each refused with a ValueError
naming the fx node. Prints one line per check; exits 1 if any fails, 77
(skipped) without torch.
"""

import json
import os
import subprocess
import sys
import tempfile

from torch_support import np, torch, nn, F, gradeq_export  # exits 77 without torch

GRADEQ = sys.argv[1] if len(sys.argv) > 1 else None
D, CLASSES = 8, 5
failures = []


def check(ok, what):
    print("%-4s %s" % ("ok" if ok else "FAIL", what))
    if not ok:
        failures.append(what)


# ------------------------------------------------------------------ models


class Block(nn.Module):
    """Pre-LN residual MLP: x + mlp(ln(x))."""

    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x):
        return x + self.mlp(self.ln(x))


class PreLN(nn.Module):
    def __init__(self, d, classes):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d), Block(d)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class Example(nn.Module):
    """["layernorm", {"residual": ["layernorm", "linear:8", "gelu", "linear:4"]}, "linear:3"]."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(4)
        self.block = nn.ModuleDict({"ln": nn.LayerNorm(4), "fc1": nn.Linear(4, 8), "act": nn.GELU(approximate="tanh"),
                                    "fc2": nn.Linear(8, 4)})
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        x = self.ln(x)
        b = self.block
        return self.head(x + b["fc2"](b["act"](b["fc1"](b["ln"](x)))))


class ResBlock(nn.Module):
    """Post-activation: relu(x + fc2(relu(fc1(x))))."""

    def __init__(self, d, functional):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d)
        self.out = nn.ReLU(inplace=True)  # on the sum, a value nothing else reads
        self.functional = functional

    def forward(self, x):
        y = x + self.fc2(self.act(self.fc1(x)))
        return F.relu(y) if self.functional else self.out(y)


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(4, D)
        self.layer1, self.layer2 = ResBlock(D, False), ResBlock(D, True)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        return self.head(self.layer2(self.layer1(self.stem(x))))


class Skip(nn.Module):
    """U-Net's skip: the input, then what the branch makes of it, side by side."""

    def __init__(self, d, extra, dim=-1):
        super().__init__()
        self.down = nn.Sequential(nn.Linear(d, extra), nn.GELU())
        self.dim = dim

    def forward(self, x):
        return torch.cat([x, self.down(x)], dim=self.dim)


class UNetish(nn.Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.stem = nn.Linear(4, 6)
        self.skip = Skip(6, 10, dim)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.head(self.norm(self.skip(self.stem(x))))


class Nested(nn.Module):
    """x + fc2(inner(relu(fc1(x)))), inner(h) = f2(cat([h, f1(h)])) + h: a
    concat in a residual (branch first) in a residual."""

    def __init__(self):
        super().__init__()
        self.fc1, self.f1, self.f2 = nn.Linear(D, 12), nn.Linear(12, 4), nn.Linear(16, 12)
        self.fc2, self.head = nn.Linear(12, D), nn.Linear(D, CLASSES)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        inner = self.f2(torch.cat([h, self.f1(h)], dim=-1)) + h
        return self.head(x + self.fc2(inner))


class SameStart(nn.Module):
    """x + inner(x), inner(x) = x + f(x): two blocks start at x."""

    def __init__(self):
        super().__init__()
        self.f, self.head = nn.Linear(D, D), nn.Linear(D, CLASSES)

    def forward(self, x):
        inner = torch.add(x, self.f(x))
        return self.head(x.add(inner))


class NormResidual(nn.Module):
    """x + bn(fc(x)): BatchNorm inside a branch (running statistics named under it)."""

    def __init__(self):
        super().__init__()
        self.fc, self.bn, self.head = nn.Linear(D, D), nn.BatchNorm1d(D), nn.Linear(D, 3)

    def forward(self, x):
        return self.head(x + self.bn(self.fc(x)))


class Graph(nn.Module):
    """A model whose forward is `forward(self, x)` over the given modules."""

    def __init__(self, forward, **modules):
        super().__init__()
        for name, m in modules.items():
            setattr(self, name, m)
        self.graph_forward = forward

    def forward(self, x):
        return self.graph_forward(self, x)


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Linear(D, CLASSES)

    def forward(self, x, mask):
        return self.f(x) * mask


# ------------------------------------------- gradeq's layers, evaluated


OPS = {
    "linear": lambda x, p, eps: F.linear(x, p("weight"), p("bias")),
    "relu": lambda x, p, eps: F.relu(x),
    "gelu": lambda x, p, eps: F.gelu(x, approximate="tanh"),
    "gelu_erf": lambda x, p, eps: F.gelu(x),
    "layernorm": lambda x, p, eps: F.layer_norm(x, x.shape[-1:], p("weight"), p("bias"), eps),
    "batchnorm": lambda x, p, eps: F.batch_norm(x, None, None, p("weight"), p("bias"), True, 0.0, eps),
}
BLOCKS = {"residual": lambda x, fx: x + fx, "concat": lambda x, fx: torch.cat([x, fx], dim=-1)}


def evaluate(layers, params, x, eps, at="layer%d"):
    """`layers` as gradeq defines them, with params[gradeq name]."""
    for j, element in enumerate(layers):
        prefix = at % j
        if isinstance(element, dict):
            (kind, branch), = element.items()
            x = BLOCKS[kind](x, evaluate(branch, params, x, eps, prefix + ".%d"))
        else:
            x = OPS[element.split(":")[0]](x, lambda name, prefix=prefix: params[prefix + "." + name], eps)
    return x


def same_function(model, structure, x):
    torch_params = dict(model.named_parameters())
    params = {g: torch_params[t] for g, t in structure.torch_of.items()}
    with torch.no_grad():
        ours = evaluate(structure.layers, params, x, structure.norm_eps or 1e-5)
        theirs = model(x)
    return ours.shape == theirs.shape and float((ours - theirs).abs().max()) <= 1e-6


def names(pairs):
    """[(gradeq prefix, torch module, [parameter names])] -> {gradeq name: torch name}, in order."""
    return {"%s.%s" % (g, p): "%s.%s" % (t, p) for g, t, ps in pairs for p in ps}


WB = ["weight", "bias"]


def block_names(g, t):
    return [(g + ".0", t + ".ln", WB), (g + ".1", t + ".mlp.0", WB), (g + ".3", t + ".mlp.2", WB)]


def mlp_branch(d):
    return ["layernorm", "linear:%d" % (4 * d), "gelu", "linear:%d" % d]


ACCEPTED = [
    # what, model, input (for the evaluation), layers, gradeq -> torch names, output width of the input's
    ("pre-LN residual MLP (ModuleList of blocks)", lambda: PreLN(D, CLASSES), torch.randn(3, 6, D),
     [{"residual": mlp_branch(D)}, {"residual": mlp_branch(D)}, "layernorm", "linear:%d" % CLASSES],
     names(block_names("layer0", "blocks.0") + block_names("layer1", "blocks.1") +
           [("layer2", "ln_f", WB), ("layer3", "head", WB)])),
    ("the contract's example", Example, torch.randn(5, 4),
     ["layernorm", {"residual": ["layernorm", "linear:8", "gelu", "linear:4"]}, "linear:3"],
     names([("layer0", "ln", WB), ("layer1.0", "block.ln", WB), ("layer1.1", "block.fc1", WB),
            ("layer1.3", "block.fc2", WB), ("layer2", "head", WB)])),
    ("ResNet post-activation blocks (module and functional ReLU)", ResNet, torch.randn(5, 4),
     ["linear:%d" % D, {"residual": ["linear:%d" % D, "relu", "linear:%d" % D]}, "relu",
      {"residual": ["linear:%d" % D, "relu", "linear:%d" % D]}, "relu", "linear:%d" % CLASSES],
     names([("layer0", "stem", WB), ("layer1.0", "layer1.fc1", WB), ("layer1.2", "layer1.fc2", WB),
            ("layer3.0", "layer2.fc1", WB), ("layer3.2", "layer2.fc2", WB), ("layer5", "head", WB)])),
    ("U-Net-like concat, dim=-1", UNetish, torch.randn(5, 4),
     ["linear:6", {"concat": ["linear:10", "gelu_erf"]}, "layernorm", "linear:%d" % CLASSES],
     names([("layer0", "stem", WB), ("layer1.0", "skip.down.0", WB), ("layer2", "norm", WB),
            ("layer3", "head", WB)])),
    ("concat on dim=1 of 2-D inputs, widening the model's output", lambda: Skip(4, 3, dim=1), torch.randn(5, 4),
     [{"concat": ["linear:3", "gelu_erf"]}], names([("layer0.0", "down.0", WB)])),
    ("nesting: a concat in a residual (f(h) + h) in a residual", Nested, torch.randn(5, D),
     [{"residual": ["linear:12", "relu", {"residual": [{"concat": ["linear:4"]}, "linear:12"]}, "linear:%d" % D]},
      "linear:%d" % CLASSES],
     names([("layer0.0", "fc1", WB), ("layer0.2.0.0", "f1", WB), ("layer0.2.1", "f2", WB), ("layer0.3", "fc2", WB),
            ("layer1", "head", WB)])),
    ("two blocks from one value: x + (x + f(x)), torch.add and Tensor.add", SameStart, torch.randn(5, D),
     [{"residual": [{"residual": ["linear:%d" % D]}]}, "linear:%d" % CLASSES],
     names([("layer0.0.0", "f", WB), ("layer1", "head", WB)])),
    ("BatchNorm1d in a residual's branch", NormResidual, torch.randn(6, D),
     [{"residual": ["linear:%d" % D, "batchnorm"]}, "linear:3"],
     names([("layer0.0", "fc", WB), ("layer0.1", "bn", WB), ("layer1", "head", WB)])),
]


def check_accepted():
    for what, make, x, layers, torch_of in ACCEPTED:
        torch.manual_seed(0)
        model = make()
        try:
            structure = gradeq_export.ModelLayers(model)
        except ValueError as e:
            check(False, "%s: refused: %s" % (what, e))
            continue
        check(structure.layers == layers, "%s: layers %s" % (what, json.dumps(structure.layers)))
        check(list(structure.torch_of.items()) == list(torch_of.items()),
              "%s: names, in gradeq's order: %s" % (what, ", ".join("%s -> %s" % kv for kv in
                                                                     list(structure.torch_of.items())[:4]) + " ..."))
        check(structure.names == {t: g for g, t in torch_of.items()}, "%s: torch -> gradeq names" % what)
        check(same_function(model, structure, x), "%s: the layers, evaluated, compute the model's output" % what)
        check(structure.output_width(x.shape[-1]) == model(x).shape[-1],
              "%s: output width %d" % (what, structure.output_width(x.shape[-1])))
    seq = nn.Sequential(nn.Linear(4, 8), nn.GELU(approximate="tanh"), nn.LayerNorm(8), nn.Linear(8, 3))
    structure = gradeq_export.ModelLayers(seq)
    check(structure.layers == ["linear:8", "gelu", "layernorm", "linear:3"] and
          structure.torch_of == {"layer0.weight": "0.weight", "layer0.bias": "0.bias", "layer2.weight": "2.weight",
                                 "layer2.bias": "2.bias", "layer3.weight": "3.weight", "layer3.bias": "3.bias"},
          "nn.Sequential: a chain, layer<l>.weight -> <l>.weight as before")


# ------------------------------------------------- recorded, then verified


def record(directory, model, x, y, split, loss_of, optimizer):
    """One window accumulated over `split`, and its full-batch run; AdamW or
    SGD with momentum, a clip."""
    initial = {k: v.clone() for k, v in model.state_dict().items()}

    def run(name, sizes, writer=None):
        model.load_state_dict(initial)
        opt = optimizer(model.parameters())
        rec = gradeq_export.TorchRecorder(directory, model, opt, {"name": "graph_" + name.lower()}, run=name,
                                          writer=writer)
        rec.begin_window(x, y)
        opt.zero_grad()
        first = 0
        for n in sizes:
            rec.micro_batch(x[first:first + n], y[first:first + n])
            loss_of(model(x[first:first + n]), y[first:first + n], y).backward()
            first += n
        rec.clip_grad_norm_(model.parameters(), 0.5)
        rec.before_step()
        opt.step()
        rec.after_step()
        return rec

    acc = run("K_acc", split)
    run("K_full", [sum(split)], acc.writer).close()
    acc.close()
    with open(os.path.join(directory, "manifest.json")) as f:
        return json.load(f)


def token_ce(out, y, window):  # summed over the micro-batch's tokens, over the window's
    tokens = int((window != gradeq_export.IGNORE_CLASS).sum())
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), ignore_index=gradeq_export.IGNORE_CLASS,
                           reduction="sum") / tokens


def mse(out, y, window):
    return F.mse_loss(out, y, reduction="sum") / out.shape[-1] / len(window)


def adamw(params):
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.01)


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def check_recorded():
    g = torch.Generator().manual_seed(3)
    classes = torch.randint(0, CLASSES, (6, 4), generator=g)
    classes[0, 3:] = gradeq_export.IGNORE_CLASS
    cases = [
        # what, model, inputs, targets, loss, optimizer, verify must pass
        ("pre-LN residual MLP, [samples, positions, features]", lambda: PreLN(D, CLASSES),
         torch.randn(6, 4, D, generator=g), classes, token_ce, adamw, True),
        ("ResNet blocks", ResNet, torch.randn(6, 4, generator=g), torch.randn(6, CLASSES, generator=g), mse, sgd, True),
        ("U-Net-like concat", UNetish, torch.randn(6, 4, generator=g), torch.randint(0, CLASSES, (6,), generator=g),
         token_ce, adamw, True),
        ("nested blocks", Nested, torch.randn(6, D, generator=g), torch.randn(6, CLASSES, generator=g), mse, sgd, True),
        ("BatchNorm1d in a branch", NormResidual, torch.randn(6, D, generator=g), torch.randn(6, 3, generator=g), mse,
         sgd, False),
    ]
    for what, make, x, y, loss, optimizer, must_pass in cases:
        torch.manual_seed(1)
        model = make()
        structure = gradeq_export.ModelLayers(model)
        directory = tempfile.mkdtemp(prefix="gradeq_graph_")
        try:
            manifest = record(directory, model, x, y, [4, 2], loss, optimizer)
        except ValueError as e:
            check(False, "%s: recording refused: %s" % (what, e))
            continue
        check(manifest["schema_version"] == 4 and manifest["scenario"]["layers"] == structure.layers,
              "%s: manifest schema_version 4, scenario layers %s" % (what, json.dumps(manifest["scenario"]["layers"])))
        listed = manifest.get("parameters", [])
        shapes = [list(np.load(os.path.join(directory, manifest["initial"]["parameters"][e["name"]])).shape)
                  for e in listed]
        check([(e["name"], e["torch"]) for e in listed] == list(structure.torch_of.items()) and
              all(e["shape"] == s for e, s in zip(listed, shapes)),
              "%s: manifest parameters: gradeq name, shape, torch name (%s -> %s, %s)"
              % (what, listed[0]["name"], listed[0]["torch"], listed[0]["shape"]))
        check(all(manifest["initial"]["parameters"][name] == "initial_%s.npy" % name for name in structure.torch_of),
              "%s: .npy files by gradeq name (%s)" % (what, manifest["initial"]["parameters"][listed[-1]["name"]]))
        tensors = manifest["runs"]["K_acc"]["windows"][0]["tensors"]
        wanted = ["grad/" + name for name in structure.torch_of] + ["param/" + name for name in structure.torch_of]
        wanted += ["stats/%s.running_%s" % (structure.names[t].rsplit(".", 1)[0], s)
                   for t, _ in model.named_parameters() if t == "bn.weight" for s in ("mean", "var")]
        check(all(w in tensors for w in wanted), "%s: window entries by gradeq name (%s)" % (what, wanted[-1]))
        if GRADEQ and must_pass:
            p = subprocess.run([GRADEQ, "verify", directory], capture_output=True, text=True)
            summary = [line.strip() for line in p.stdout.splitlines() if "scenario" in line]
            check(p.returncode == 0, "%s: gradeq verify exits %d %s" % (what, p.returncode, summary[:1] or
                                                                        (p.stdout + p.stderr)[-400:]))
    # The pre-LN model trained by a loop with the mean of per-micro-batch
    # means (B1): each micro-batch's loss its own token mean over N. The
    # padded first sample makes the micro-batches' token counts differ.
    def mean_of_means(out, y, window):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), ignore_index=gradeq_export.IGNORE_CLASS,
                               reduction="mean") / 2
    torch.manual_seed(1)
    directory = tempfile.mkdtemp(prefix="gradeq_graph_b1_")
    record(directory, PreLN(D, CLASSES), torch.randn(6, 4, D, generator=g), classes, [4, 2], mean_of_means, adamw)
    if GRADEQ:
        p = subprocess.run([GRADEQ, "verify", directory], capture_output=True, text=True)
        check(p.returncode == 1 and "mean of per-micro-batch means" in p.stdout,
              "pre-LN residual MLP with the mean of per-micro-batch means (B1): gradeq verify exits %d and names it"
              % p.returncode)
    if not GRADEQ:
        print("--   gradeq verify not run (no GRADEQ argument)")


# --------------------------------------------------------------- refusals


def linear(i=D, o=D):
    return nn.Linear(i, o)


REFUSED = [
    ("cat with the branch first", lambda: Graph(lambda s, x: torch.cat([s.f(x), x], dim=-1), f=linear()),
     "node 'cat' (call_function cat) puts its branch before its input 'x'"),
    ("three-way cat", lambda: Graph(lambda s, x: torch.cat([x, s.f(x), s.g(x)], dim=-1), f=linear(), g=linear()),
     "node 'cat' (call_function cat) concatenates 3 tensors"),
    ("cat over samples (dim 0)", lambda: Graph(lambda s, x: torch.cat([x, s.f(x)], dim=0), f=linear()),
     "node 'cat' (call_function cat) concatenates on dim 0"),
    ("x + x", lambda: Graph(lambda s, x: s.f(x + x), f=linear()),
     "node 'add' (call_function add) combines 'x' with itself"),
    ("a branch of identities only", lambda: Graph(lambda s, x: s.f(x + s.drop(x)), f=linear(), drop=nn.Dropout(0.0)),
     "node 'add' (call_function add): its branch from 'x' holds no layer"),
    ("a value two branches read: g(y) + h(y)", lambda: Graph(lambda s, x: (lambda y: s.g(y) + s.h(y))(s.f(x)),
                                                             f=linear(), g=linear(), h=linear()),
     "node 'f' (call_module f) is read by 'g' and 'h'"),
    ("x read by three: x + f(x) + g(x)", lambda: Graph(lambda s, x: x + s.f(x) + s.g(x), f=linear(), g=linear()),
     "node 'x' (placeholder x) is read by 'f' and 'g'"),
    ("a model of two inputs", TwoInputs, "the model takes more than one input (mask)"),
    ("a branch reading a value from outside its block", lambda: Graph(
        lambda s, x: (lambda h: h + s.b(s.c(h) + x))(s.a(x)), a=linear(), b=linear(), c=linear()),
     "node 'add' (call_function add) reads 'x', a value from outside its block"),
    ("a parameter added to x", lambda: Graph(lambda s, x: s.f(x + s.pos), f=linear(), pos=nn.Parameter(torch.zeros(D))),
     "node 'add' (call_function add) reads 'pos', a value from outside its block"),
    ("an in-place ReLU on a block's input", lambda: Graph(lambda s, x: x + s.f(s.act(x)), f=linear(),
                                                          act=nn.ReLU(inplace=True)),
     "node 'act' (call_module act) changes 'x' in place, which 'add' also read"),
    ("a sum that broadcasts", lambda: Graph(lambda s, x: (lambda y: y + s.g(y))(s.f(x)), f=linear(), g=linear(D, 1)),
     "node 'add' (call_function add) adds a branch of 1 features to its input of 8"),
    ("a scaled branch (alpha)", lambda: Graph(lambda s, x: torch.add(x, s.f(x), alpha=0.5), f=linear()),
     "node 'add' (call_function add): alpha=0.5"),
    ("a product, not a sum", lambda: Graph(lambda s, x: x * s.f(x), f=linear()),
     "node 'x' (placeholder x) is read by 'f' and 'mul'"),
]


def concat_over_positions():
    """cat(dim=1) joins positions of [samples, positions, features] inputs."""
    model = Skip(D, 3, dim=1)
    rec = gradeq_export.TorchRecorder(tempfile.mkdtemp(prefix="gradeq_graph_"), model,
                                      torch.optim.SGD(model.parameters(), lr=0.1), {"name": "x"})
    rec.begin_window(torch.randn(2, 4, D), torch.randn(2, 4, D + 3))


def check_refused():
    cases = REFUSED + [("cat on dim 1 of 3-D inputs", concat_over_positions,
                        "node 'cat' (call_function cat) concatenates on dim 1 of 3-D inputs")]
    for what, make, expected in cases:
        try:
            model = make()
            if model is not None:
                gradeq_export.ModelLayers(model)
            check(False, "refused: %s: accepted" % what)
        except ValueError as e:
            check(expected in str(e), "refused: %s: %s" % (what, e))
        except Exception as e:  # anything but a ValueError is a defect of the exporter
            check(False, "refused: %s: raised %s: %s" % (what, type(e).__name__, e))


check_accepted()
check_recorded()
check_refused()
print("%d failed" % len(failures) if failures else "all checks passed")
sys.exit(1 if failures else 0)
