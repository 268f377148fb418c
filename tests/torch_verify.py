"""A PyTorch accumulation loop, exported with python/gradeq_export and
judged by `gradeq verify` (ctest label torch).

    torch_verify.py GRADEQ correct|mean_of_means|batchnorm|tf32

correct        Linear/GELU/LayerNorm, token cross-entropy over padded
               sequences of varying length, an uneven split, AdamW,
               clipping and warmup: the loss of each micro-batch is its
               summed token loss over the window's token count. Must pass.
mean_of_means  the same loop with the 2024 normalization bug: each
               micro-batch's mean token loss, divided by the number of
               micro-batches. Must fail, on the accumulation verdict, naming
               the gradients.
batchnorm      a BatchNorm model over micro-batches: BatchNorm's statistics
               differ per micro-batch, so accumulation is an expected
               divergence with its size, never a pass of equivalence.
tf32           the correct loop with every GEMM reading TF32 operands (as
               cuBLAS does with allow_tf32; emulated here): passes when the
               manifest declares tf32 = true, fails when it does not.

Exits 77 (ctest: skipped) with the reason where torch or numpy is missing.
"""

import copy
import json
import math
import os
import subprocess
import sys
import tempfile

from torch_support import np, torch, nn, F, gradeq_export  # exits 77 without torch

gradeq, mode = sys.argv[1], sys.argv[2]
torch.manual_seed(7)
rng = np.random.default_rng(7)


def multiplier(step, warmup, total):  # gradeq's warmup-cosine schedule (reference/optimizers.h)
    if step < warmup:
        return step / warmup
    return 0.5 * (1.0 + math.cos(math.pi * min((step - warmup) / (total - warmup), 1.0)))


def tf32(t):
    """float32 -> TF32 (10 explicit mantissa bits), round to nearest even, as float32."""
    bits = t.contiguous().view(torch.int32)
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF
    return rounded.view(torch.float32)


class TF32Linear(torch.autograd.Function):
    """A linear layer whose three GEMMs read TF32 operands and accumulate in float32."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return tf32(x) @ tf32(w).t() + b

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dy2, x2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
        return tf32(dy) @ tf32(w), tf32(dy2).t() @ tf32(x2), dy2.sum(0)


class Linear32(nn.Linear):
    def forward(self, x):
        return TF32Linear.apply(x, self.weight, self.bias)


if mode in ("correct", "mean_of_means", "tf32"):
    positions, features, classes = 8, 16, 11
    split = [[3, 5, 2], [4, 4]]
    Lin = Linear32 if mode == "tf32" else nn.Linear
    model = nn.Sequential(Lin(features, 32), nn.GELU(approximate="tanh"), nn.LayerNorm(32), Lin(32, classes))
    # What the recorder cannot read from the objects: the name and the schedule.
    scenario = {"name": "torch_" + mode, "warmup_steps": 1, "total_steps": 10}
    optimizer, clip = "adamw", 0.5

    def window_data(samples):
        x = rng.standard_normal((samples, positions, features)).astype(np.float32)
        y = rng.integers(0, classes, (samples, positions))
        for s in range(samples):  # a sequence of 2..positions tokens, then padding
            length = rng.integers(2, positions + 1)
            y[s, length:] = gradeq_export.IGNORE_CLASS
        return torch.from_numpy(x), torch.from_numpy(y)
else:
    positions, features = 1, 8
    split = [[4, 4], [2, 6]]
    model = nn.Sequential(nn.Linear(features, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    scenario = {"name": "torch_batchnorm"}
    optimizer, clip = "sgd", None

    def window_data(samples):
        x = rng.standard_normal((samples, features)).astype(np.float32)
        t = rng.standard_normal((samples, 3)).astype(np.float32)
        return torch.from_numpy(x), torch.from_numpy(t)

windows = [window_data(sum(w)) for w in split]
initial = copy.deepcopy(model.state_dict())


def run(recorder_run, micro_batches_of, writer=None):
    m = copy.deepcopy(model)
    m.load_state_dict(initial)
    if optimizer == "adamw":
        opt = torch.optim.AdamW(m.parameters(), lr=0.01, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda step: multiplier(step, scenario["warmup_steps"], scenario["total_steps"]))
    else:
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        sched = None
    rec = gradeq_export.TorchRecorder(out, m, opt, scenario, run=recorder_run, writer=writer)
    for (x, y), sizes in zip(windows, micro_batches_of):
        rec.begin_window(x, y)
        opt.zero_grad()
        mse = y.dtype.is_floating_point
        tokens = len(y) if mse else int((y != gradeq_export.IGNORE_CLASS).sum())
        first = 0
        for n in sizes:
            xb, yb = x[first:first + n], y[first:first + n]
            first += n
            rec.micro_batch(xb, yb)
            out_b = m(xb)
            if mse:
                loss = F.mse_loss(out_b, yb, reduction="sum") / out_b.shape[-1] / tokens
            elif mode == "mean_of_means":  # the bug: mean over the micro-batch's tokens, then 1/N
                loss = F.cross_entropy(out_b.reshape(-1, classes), yb.reshape(-1),
                                       ignore_index=gradeq_export.IGNORE_CLASS) / len(sizes)
            else:
                loss = F.cross_entropy(out_b.reshape(-1, classes), yb.reshape(-1),
                                       ignore_index=gradeq_export.IGNORE_CLASS, reduction="sum") / tokens
            loss.backward()
        if clip is not None:
            rec.clip_grad_norm_(m.parameters(), clip)
        rec.before_step()
        opt.step()
        if sched:
            sched.step()
        rec.after_step()
    return rec


out = tempfile.mkdtemp(prefix="gradeq_torch_")
acc = run("K_acc", split)
full = run("K_full", [[sum(w)] for w in split], writer=acc.writer)
full.close()
acc.close()



def verify():
    report = os.path.join(out, "report")
    p = subprocess.run([gradeq, "verify", out, "--report", report], capture_output=True, text=True)
    print(p.stdout + p.stderr)
    with open(os.path.join(report, "report.json")) as f:
        verdicts = {v["verdict"]: v for v in json.load(f)["scenarios"][0]["verdicts"]}
    return p, verdicts


def declare(**keys):  # the manifest's scenario, as the run declares its arithmetic
    path = os.path.join(out, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    manifest["scenario"].update(keys)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=2)


def require(ok, what):
    if not ok:
        print("FAIL: " + what)
        sys.exit(1)


if mode == "tf32":
    p, verdicts = verify()
    require(p.returncode == 1 and verdicts["kernel correctness"]["status"] == "FAIL",
            "TF32 GEMMs pass although the run declares float32 GEMMs (exit %d)" % p.returncode)
    declare(tf32=True)
p, verdicts = verify()
acc_verdict = verdicts["accumulation equivalence"]
failed = [t["tensor"] for t in acc_verdict["tensors"] if t["worst_ratio"] > 1.0]

if mode in ("correct", "tf32"):
    require(p.returncode == 0, "the correct loop does not pass gradeq verify (exit %d)" % p.returncode)
    require(all(v["status"] == "pass" for v in verdicts.values()), "a verdict of the correct loop is not a pass")
elif mode == "mean_of_means":
    require(p.returncode == 1, "the mean-of-means loop is not caught (exit %d)" % p.returncode)
    require(acc_verdict["status"] == "FAIL", "accumulation equivalence does not fail")
    require(any(t.startswith("grad/") for t in failed), "the report names no failing gradient: %s" % failed)
    require(any("mean of per-micro-batch means" in d for d in acc_verdict["diagnosis"]),
            "the diagnosis does not name the mean of per-micro-batch means: %s" % acc_verdict["diagnosis"])
    print("accumulation equivalence fails on: " + ", ".join(failed))
else:
    require(p.returncode == 0, "the BatchNorm loop is refused (exit %d)" % p.returncode)
    require(acc_verdict["status"] == "expected divergence",
            "BatchNorm accumulation is '%s', not an expected divergence" % acc_verdict["status"])
    require(acc_verdict["worst_ratio"] > 1.0, "the divergence has no size")
    require(verdicts["kernel correctness"]["status"] == "pass", "kernel correctness of the BatchNorm loop fails")
    print("BatchNorm: expected divergence, %.3g x its bound" % acc_verdict["worst_ratio"])
print("ok: " + mode)
