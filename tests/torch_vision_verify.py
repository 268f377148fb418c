"""A small U-Net on images, read by python/gradeq_export into gradeq's
image layers, trained by a correct accumulation loop recorded with
TorchRecorder and judged by `gradeq verify` (ctest label torch).

    torch_vision_verify.py GRADEQ

Conv2d, GroupNorm or BatchNorm2d, ReLU, a skip torch.cat([x, up(conv(
pool(x)))], dim=1), a 1x1 Conv2d, AdaptiveAvgPool2d(1) + Flatten and a
Linear head, cross-entropy, on 3x8x8 images; micro-batches of 2, N = 4.

- the exported layers are the expected text, and the manifest carries
  image = [3, 8, 8] with [samples, C*H*W] inputs (NCHW rows) and the
  parameters as gradeq's matrices (conv weight [C_out, C_in/G*k*k]);
- GroupNorm: verify passes (exit 0, every verdict a pass);
- BatchNorm2d: verify exits 0 with accumulation an expected divergence and
  kernel correctness a pass;
- TF32: the GroupNorm loop with every convolution's three GEMMs reading
  TF32 operands (as cuDNN's do with torch.backends.cudnn.allow_tf32, on by
  default; emulated on the CPU as tests/torch_verify.py's tf32 mode does for
  linear layers) fails kernel correctness declared as float32 GEMMs, passes
  declared tf32 = true;
- a residual image model: LayerNorm([C, H, W]), a dilated grouped conv, a
  strided one, torch.flatten and a Linear over the whole image: passes;
- what gradeq's image ops are not, each refused with a ValueError naming
  the module.

Prints one line per check; exits 1 if any fails, 77 (skipped) without torch.
"""

import json
import os
import subprocess
import sys
import tempfile

from torch_support import np, torch, nn, F, gradeq_export  # exits 77 without torch

GRADEQ = sys.argv[1]
C, H, W, CLASSES = 3, 8, 8, 3
SPLIT = [[2, 2, 2, 2], [2, 2, 2, 2]]  # two windows, micro-batch 2, N = 4
failures = []


def check(ok, what):
    print("%-4s %s" % ("ok" if ok else "FAIL", what))
    if not ok:
        failures.append(what)


# ------------------------------------------------------------------ TF32


def tf32(t):
    """float32 -> TF32 (10 explicit mantissa bits), round to nearest even, as float32."""
    bits = t.contiguous().view(torch.int32)
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF
    return rounded.view(torch.float32)


class TF32Conv(torch.autograd.Function):
    """A convolution whose three GEMMs (forward, input gradient, weight
    gradient) read TF32 operands and accumulate in float32."""

    @staticmethod
    def forward(ctx, x, w, b, stride, padding, dilation, groups):
        ctx.save_for_backward(x, w)
        ctx.conf = (stride, padding, dilation, groups)
        return F.conv2d(tf32(x), tf32(w), b, stride, padding, dilation, groups)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        stride, padding, dilation, groups = ctx.conf
        dx = torch.nn.grad.conv2d_input(x.shape, tf32(w), tf32(dy), stride, padding, dilation, groups)
        dw = torch.nn.grad.conv2d_weight(tf32(x), w.shape, tf32(dy), stride, padding, dilation, groups)
        return dx, dw, dy.sum((0, 2, 3)), None, None, None, None


class Conv32(nn.Conv2d):  # a subclass of Conv2d: the exporter reads it as the Conv2d it is
    def forward(self, x):
        return TF32Conv.apply(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)



# ------------------------------------------------------------------ model


class UNet(nn.Module):
    def __init__(self, norm, pool, conv=nn.Conv2d):
        super().__init__()
        self.stem, self.n1, self.act = conv(C, 4, 3, padding=1), norm(4), nn.ReLU()
        self.pool = pool
        self.down, self.n2, self.act2 = conv(4, 8, 3, padding=1), norm(8), nn.ReLU()
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.dec = conv(8, 4, 3, padding=1)
        self.mix = conv(8, 6, 1)
        self.gap, self.flat, self.head = nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, CLASSES)

    def forward(self, x):
        x = self.act(self.n1(self.stem(x)))
        x = torch.cat([x, self.dec(self.up(self.act2(self.n2(self.down(self.pool(x))))))], dim=1)
        return self.head(self.flat(self.gap(self.mix(x))))


def groupnorm(c):
    return nn.GroupNorm(2, c)


def expected_layers(norm, pool):
    return ["conv2d:4:3:padding=1", norm, "relu",
            {"concat": [pool, "conv2d:8:3:padding=1", norm, "relu", "upsample", "conv2d:4:3:padding=1"]},
            "conv2d:6:1", "global_avgpool", "linear:%d" % CLASSES]


g = torch.Generator().manual_seed(5)
WINDOWS = [(torch.randn(sum(s), C, H, W, generator=g), torch.randint(0, CLASSES, (sum(s),), generator=g))
           for s in SPLIT]


def record(directory, model, name):
    """The correct loop: each micro-batch's summed cross-entropy over the
    window's sample count, SGD with momentum; then its full-batch run."""
    initial = {k: v.clone() for k, v in model.state_dict().items()}

    def run(run_name, splits, writer=None):
        model.load_state_dict(initial)
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        rec = gradeq_export.TorchRecorder(directory, model, opt, {"name": name}, run=run_name, writer=writer)
        for (x, y), sizes in zip(WINDOWS, splits):
            rec.begin_window(x, y)
            opt.zero_grad()
            first = 0
            for n in sizes:
                xb, yb = x[first:first + n], y[first:first + n]
                first += n
                rec.micro_batch(xb, yb)
                (F.cross_entropy(model(xb), yb, reduction="sum") / len(y)).backward()
            rec.before_step()
            opt.step()
            rec.after_step()
        return rec

    acc = run("K_acc", SPLIT)
    run("K_full", [[sum(s)] for s in SPLIT], acc.writer).close()
    acc.close()
    with open(os.path.join(directory, "manifest.json")) as f:
        return json.load(f)


def verify(directory):
    report = os.path.join(directory, "report")
    p = subprocess.run([GRADEQ, "verify", directory, "--report", report], capture_output=True, text=True)
    verdicts = {}
    path = os.path.join(report, "report.json")
    if os.path.exists(path):
        with open(path) as f:
            verdicts = {v["verdict"]: v for v in json.load(f)["scenarios"][0]["verdicts"]}
    return p, verdicts


def declare(directory, **keys):
    path = os.path.join(directory, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    manifest["scenario"].update(keys)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=2)


def show(p):
    text = (p.stdout + p.stderr).strip().splitlines()
    for line in text[-6:]:
        print("     | " + line)


def statuses(verdicts):
    return ", ".join("%s: %s" % (k, v["status"]) for k, v in verdicts.items())


def check_groupnorm(root):
    torch.manual_seed(11)
    model = UNet(groupnorm, nn.MaxPool2d(2))
    layers = gradeq_export.layers_of(model)
    check(layers == expected_layers("groupnorm:2", "maxpool:2"), "GroupNorm U-Net exported as %s" % json.dumps(layers))
    d = os.path.join(root, "groupnorm")
    m = record(d, model, "torch_unet_groupnorm")
    sc = m["scenario"]
    check(sc.get("image") == [C, H, W] and sc.get("input_features") == C * H * W and sc.get("positions") == 1,
          "the manifest's scenario carries image = %s, input_features %s, positions %s"
          % (sc.get("image"), sc.get("input_features"), sc.get("positions")))
    x0 = np.load(os.path.join(d, m["windows"][0]["inputs"]))
    check(x0.shape == (sum(SPLIT[0]), C * H * W) and np.array_equal(x0[0], WINDOWS[0][0][0].numpy().reshape(-1)),
          "window inputs are NCHW rows of %d values (%s)" % (C * H * W, x0.shape))
    shapes = {e["torch"]: e["shape"] for e in m["parameters"]}
    check(shapes.get("stem.weight") == [4, C * 9] and shapes.get("stem.bias") == [1, 4] and
          shapes.get("n1.weight") == [1, 4] and shapes.get("mix.weight") == [6, 8],
          "parameters as gradeq's matrices: stem.weight %s, stem.bias %s, n1.weight %s, mix.weight %s"
          % (shapes.get("stem.weight"), shapes.get("stem.bias"), shapes.get("n1.weight"), shapes.get("mix.weight")))
    p, verdicts = verify(d)
    ok = p.returncode == 0 and verdicts and all(v["status"] == "pass" for v in verdicts.values())
    check(ok, "GroupNorm U-Net: gradeq verify passes (exit %d; %s)" % (p.returncode, statuses(verdicts)))
    if not ok:
        show(p)


def check_batchnorm(root):
    torch.manual_seed(11)
    model = UNet(nn.BatchNorm2d, nn.AvgPool2d(2))
    layers = gradeq_export.layers_of(model)
    check(layers == expected_layers("batchnorm", "avgpool:2"), "BatchNorm2d U-Net exported as %s" % json.dumps(layers))
    d = os.path.join(root, "batchnorm")
    m = record(d, model, "torch_unet_batchnorm")
    check(m["scenario"].get("batchnorm_mode") == "per_micro_batch" and
          any(k.startswith("stats/") for k in m["runs"]["K_acc"]["windows"][0]["tensors"]),
          "BatchNorm2d: per-micro-batch statistics and running statistics recorded")
    p, verdicts = verify(d)
    acc = verdicts.get("accumulation equivalence", {})
    kernel = verdicts.get("kernel correctness", {})
    ok = p.returncode == 0 and acc.get("status") == "expected divergence" and kernel.get("status") == "pass"
    check(ok, "BatchNorm2d U-Net: exit %d, accumulation '%s' (%.3g x its bound), kernel correctness '%s'"
          % (p.returncode, acc.get("status"), acc.get("worst_ratio", float("nan")), kernel.get("status")))
    check("expected divergence" in (p.stdout + p.stderr), "verify's output says expected divergence")
    if not ok:
        show(p)


def check_tf32(root):
    torch.manual_seed(11)
    model = UNet(groupnorm, nn.MaxPool2d(2), conv=Conv32)  # cudnn.allow_tf32: the convolutions alone
    check(gradeq_export.layers_of(model) == expected_layers("groupnorm:2", "maxpool:2"),
          "TF32 U-Net (a Conv2d subclass) exported as the same layers")
    d = os.path.join(root, "tf32")
    m = record(d, model, "torch_unet_tf32")
    check(m["scenario"].get("tf32") is False, "a CPU run records tf32 = false (nothing shows the emulation)")
    p, verdicts = verify(d)
    kernel = verdicts.get("kernel correctness", {})
    ok = p.returncode == 1 and kernel.get("status") == "FAIL"
    check(ok, "TF32 convolutions declared as float32 GEMMs: exit %d, kernel correctness '%s' (%.3g x its bound)"
          % (p.returncode, kernel.get("status"), kernel.get("worst_ratio", float("nan"))))
    if not ok:
        show(p)
    declare(d, tf32=True)
    p, verdicts = verify(d)
    ok = p.returncode == 0 and verdicts and all(v["status"] == "pass" for v in verdicts.values())
    kernel = verdicts.get("kernel correctness", {})
    check(ok, "TF32 convolutions declared tf32 = true: exit %d (%s; kernel %.3g x its bound)"
          % (p.returncode, statuses(verdicts), kernel.get("worst_ratio", float("nan"))))
    if not ok:
        show(p)


class ResImage(nn.Module):
    """LayerNorm([C, H, W]), a residual of images, a dilated grouped conv,
    a strided one, torch.flatten and a Linear over the whole image."""

    def __init__(self):
        super().__init__()
        self.stem, self.ln, self.act = nn.Conv2d(C, 4, 3, padding=1), nn.LayerNorm([4, H, W]), nn.GELU()
        self.inner = nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=2)
        self.down, self.gn = nn.Conv2d(4, 8, 3, stride=2, padding=1), nn.GroupNorm(4, 8)
        self.head = nn.Linear(8 * (H // 2) * (W // 2), CLASSES)

    def forward(self, x):
        x = self.act(self.ln(self.stem(x)))
        x = x + self.inner(F.relu(x))
        return self.head(torch.flatten(F.relu(self.gn(self.down(x))), 1))


def check_more(root):
    torch.manual_seed(11)
    model = ResImage()
    layers = gradeq_export.layers_of(model)
    check(layers == ["conv2d:4:3:padding=1", "layernorm", "gelu_erf",
                     {"residual": ["relu", "conv2d:4:3:padding=2:dilation=2:groups=2"]},
                     "conv2d:8:3:stride=2:padding=1", "groupnorm:4", "relu", "linear:%d" % CLASSES],
          "residual image model exported as %s" % json.dumps(layers))
    d = os.path.join(root, "residual")
    m = record(d, model, "torch_residual_image")
    shapes = {e["torch"]: e["shape"] for e in m["parameters"]}
    check(shapes.get("ln.weight") == [1, 4 * H * W] and shapes.get("inner.weight") == [4, 2 * 9] and
          shapes.get("head.weight") == [CLASSES, 8 * (H // 2) * (W // 2)],
          "LayerNorm([C, H, W]) affine %s, grouped conv weight %s, head %s" % (
              shapes.get("ln.weight"), shapes.get("inner.weight"), shapes.get("head.weight")))
    p, verdicts = verify(d)
    ok = p.returncode == 0 and verdicts and all(v["status"] == "pass" for v in verdicts.values())
    check(ok, "residual image model: gradeq verify passes (exit %d; %s)" % (p.returncode, statuses(verdicts)))
    if not ok:
        show(p)


# ------------------------------------------------------------------ refusals


class Wrap(nn.Module):
    """Image layers around one module under test, ending in a head."""

    def __init__(self, module, channels=4):
        super().__init__()
        self.stem, self.m = nn.Conv2d(C, 4, 3, padding=1), module
        self.gap, self.flat, self.head = nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, CLASSES)

    def forward(self, x):
        return self.head(self.flat(self.gap(self.m(self.stem(x)))))


class CatOn(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.stem, self.b = nn.Conv2d(C, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.dim = dim

    def forward(self, x):
        x = self.stem(x)
        return torch.cat([x, self.b(x)], dim=self.dim).flatten(1).sum(1, keepdim=True)


class CatOnWidth(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.b = nn.Conv2d(C, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.gap, self.flat, self.head = nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, CLASSES)

    def forward(self, x):
        x = self.stem(x)
        return self.head(self.flat(self.gap(torch.cat([x, self.b(x)], dim=-1))))


def fed(model, x=None):
    """One window of images through the recorder: where the inputs' shape decides."""
    x = torch.randn(2, C, H, W) if x is None else x
    y = torch.randint(0, CLASSES, (2,))
    with tempfile.TemporaryDirectory(prefix="gradeq_vision_refusal_") as d:
        rec = gradeq_export.TorchRecorder(d, model, torch.optim.SGD(model.parameters(), lr=0.1), {"name": "x"})
        rec.begin_window(x, y)


REFUSALS = [
    ("a non-square kernel", lambda: gradeq_export.layers_of(Wrap(nn.Conv2d(4, 4, (3, 1), padding=(1, 0)))),
     "module 'm' (Conv2d): kernel_size=(3, 1) is not square"),
    ("a non-square stride", lambda: gradeq_export.layers_of(Wrap(nn.Conv2d(4, 4, 3, stride=(2, 1)))),
     "module 'm' (Conv2d): stride=(2, 1) is not square"),
    ("reflect padding", lambda: gradeq_export.layers_of(Wrap(nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect"))),
     "module 'm' (Conv2d): padding_mode='reflect'"),
    ("a conv without bias", lambda: gradeq_export.layers_of(Wrap(nn.Conv2d(4, 4, 3, padding=1, bias=False))),
     "module 'm' (Conv2d): bias=False; gradeq's conv2d has a bias"),
    ("padding='same' with an even kernel", lambda: gradeq_export.layers_of(Wrap(nn.Conv2d(4, 4, 2, padding="same"))),
     "module 'm' (Conv2d): padding='same' pads one side more"),
    ("MaxPool2d with ceil_mode", lambda: gradeq_export.layers_of(Wrap(nn.MaxPool2d(3, ceil_mode=True))),
     "module 'm' (MaxPool2d): ceil_mode=True"),
    ("AvgPool2d with ceil_mode", lambda: gradeq_export.layers_of(Wrap(nn.AvgPool2d(3, ceil_mode=True))),
     "module 'm' (AvgPool2d): ceil_mode=True"),
    ("AvgPool2d with padding (count_include_pad)",
     lambda: gradeq_export.layers_of(Wrap(nn.AvgPool2d(3, padding=1, count_include_pad=False))),
     "module 'm' (AvgPool2d): padding=1; gradeq's avgpool has no padding"),
    ("AvgPool2d with divisor_override", lambda: gradeq_export.layers_of(Wrap(nn.AvgPool2d(2, divisor_override=3))),
     "module 'm' (AvgPool2d): divisor_override=3"),
    ("MaxPool2d with padding", lambda: gradeq_export.layers_of(Wrap(nn.MaxPool2d(3, stride=1, padding=1))),
     "module 'm' (MaxPool2d): padding=1"),
    ("MaxPool2d with dilation", lambda: gradeq_export.layers_of(Wrap(nn.MaxPool2d(2, dilation=2))),
     "module 'm' (MaxPool2d): dilation and return_indices are not modelled"),
    ("bilinear Upsample", lambda: gradeq_export.layers_of(Wrap(nn.Upsample(scale_factor=2, mode="bilinear"))),
     "module 'm' (Upsample): size=None, scale_factor=2.0, mode='bilinear'"),
    ("Upsample by 3", lambda: gradeq_export.layers_of(Wrap(nn.Upsample(scale_factor=3))),
     "module 'm' (Upsample): size=None, scale_factor=3.0"),
    ("Upsample to a size", lambda: gradeq_export.layers_of(Wrap(nn.Upsample(size=16))),
     "module 'm' (Upsample): size=16"),
    ("AdaptiveAvgPool2d(2)", lambda: gradeq_export.layers_of(Wrap(nn.AdaptiveAvgPool2d(2))),
     "module 'm' (AdaptiveAvgPool2d): output_size=2"),
    ("Flatten(2)", lambda: gradeq_export.layers_of(Wrap(nn.Flatten(2))),
     "module 'm' (Flatten): start_dim=2, end_dim=-1"),
    ("LayerNorm over the width alone", lambda: fed(Wrap(nn.LayerNorm(W))),
     "module 'm' (LayerNorm) on a [samples, C, H, W] image normalizes its last dimension"),
    ("a Linear on a 4-D image", lambda: fed(nn.Sequential(nn.Conv2d(C, 4, 3, padding=1), nn.Linear(W, 2))),
     "module '1' (Linear) on a [samples, C, H, W] image works on its last dimension"),
    ("GroupNorm on a flattened image",
     lambda: fed(nn.Sequential(nn.Conv2d(C, 4, 3, padding=1), nn.Flatten(), nn.GroupNorm(2, 4 * H * W),
                               nn.Linear(4 * H * W, 2))),
     "module '2' (GroupNorm) reads a flattened image [samples, 256]: torch takes its 256 columns for channels"),
    ("BatchNorm1d on a flattened image",
     lambda: fed(nn.Sequential(nn.Conv2d(C, 4, 3, padding=1), nn.Flatten(), nn.BatchNorm1d(4 * H * W),
                               nn.Linear(4 * H * W, 2))),
     "module '2' (BatchNorm1d) reads a flattened image"),
    ("a Conv2d fed rows of features", lambda: fed(Wrap(nn.Identity()), torch.randn(2, C * H * W)),
     "module 'stem' (Conv2d) reads rows of features: gradeq's conv2d:4:3:padding=1 reads an image"),
    ("cat on the image's width", lambda: fed(CatOnWidth()),
     "concatenates [samples, C, H, W] images on dim -1"),
    ("cat on dim 0", lambda: gradeq_export.layers_of(CatOn(0)), "concatenates on dim 0"),
    ("torch.flatten from dim 2", lambda: gradeq_export.layers_of(nn.Sequential(nn.Conv2d(C, 4, 1), nn.Flatten(2),
                                                                               nn.Linear(H * W, 2))),
     "module '1' (Flatten): start_dim=2"),
    ("images into an MLP", lambda: fed(nn.Sequential(nn.Linear(W, 4), nn.ReLU(), nn.Linear(4, 2))),
     "inputs of shape (2, 3, 8, 8) are images, [samples, C, H, W], and no layer of the model reads an image"),
]


def check_refusals():
    for what, case, expect in REFUSALS:
        try:
            case()
            check(False, "refused: %s (accepted)" % what)
        except ValueError as e:
            check(expect in str(e), "refused: %s: %s" % (what, e))
        except Exception as e:  # anything but a ValueError is a defect of the exporter
            check(False, "refused: %s (raised %s: %s)" % (what, type(e).__name__, e))


with tempfile.TemporaryDirectory(prefix="gradeq_vision_") as root:
    check_groupnorm(root)
    check_batchnorm(root)
    check_tf32(root)
    check_more(root)
check_refusals()
if failures:
    print("%d checks failed" % len(failures))
    sys.exit(1)
print("all checks passed")
