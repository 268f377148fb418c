"""PyTorch accumulation loops with one bug each, recorded with
python/gradeq_export and judged by `gradeq verify` (ctest label torch).

    torch_loops.py GRADEQ [ROW ...]

Each row is one loop: a correct one must pass (exit 0, every verdict a
pass); a buggy one must fail (exit 1) on accumulation equivalence. The
bugs are those of docs/BUGS.md that a hand-written loop makes (B3, B4, B5,
B9, B10, B11, B13, B15, B17, B18), a normaliser that counts padding, a
.grad accumulated in bfloat16 and a layer the loss does not reach. The
scale bugs (B3, B4, B5, the padding normaliser) also run under a clip that
binds in every window, where the clipped gradient no longer shows them;
the test checks that it binds. Prints one line per row; exits 1 if any
row is not as expected, 77 (skipped) without torch.

The model: Linear-GELU(tanh)-LayerNorm-Linear over padded sequences of 6
tokens, token cross-entropy summed over the window's real tokens, AdamW
with weight decay 0.1 and warmup + cosine (LambdaLR), clip_grad_norm_.
"""

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import warnings

from torch_support import np, torch, nn, F, gradeq_export  # exits 77 without torch

# B15's loop steps the scheduler before the optimizer; torch says so, and that is the bug.
warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()` before `optimizer.step()`"))
POSITIONS, FEATURES, CLASSES = 6, 16, 11
WARMUP, TOTAL = 1, 10
BINDING, LOOSE = 0.05, 100.0  # clip max_norm: the gradients here have norms of 0.3-1.5


def multiplier(step):  # docs/VERIFY.md: the schedule as a LambdaLR
    if step < WARMUP:
        return step / WARMUP
    return 0.5 * (1.0 + math.cos(math.pi * min((step - WARMUP) / (TOTAL - WARMUP), 1.0)))


def windows_of(split, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for sizes in split:
        n = sum(sizes)
        x = torch.randn(n, POSITIONS, FEATURES, generator=g)
        y = torch.randint(0, CLASSES, (n, POSITIONS), generator=g)
        for s in range(n):  # a sequence of 2..6 tokens, then padding
            length = int(torch.randint(2, POSITIONS + 1, (), generator=g))
            y[s, length:] = gradeq_export.IGNORE_CLASS
        out.append((x, y))
    return out


class NoGradFirstLayer(nn.Module):
    """Its first layer runs under no_grad: a trained parameter the loss never reaches."""

    def __init__(self):
        super().__init__()
        self.embed, self.act, self.head = nn.Linear(FEATURES, 32), nn.GELU(approximate="tanh"), nn.Linear(32, CLASSES)

    def forward(self, x):
        with torch.no_grad():
            h = self.embed(x)
        return self.head(self.act(h))


def model_of(row):
    torch.manual_seed(3)
    if row.get("no_grad_layer"):
        return NoGradFirstLayer()
    if row.get("autocast"):  # torch 1.13's CPU autocast has no bfloat16 LayerNorm
        return nn.Sequential(nn.Linear(FEATURES, 32), nn.GELU(approximate="tanh"), nn.Linear(32, CLASSES))
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.GELU(approximate="tanh"), nn.LayerNorm(32),
                         nn.Linear(32, CLASSES))


def train(row, out):
    """Runs the row's loop, recording it into `out`; returns the recorder."""
    bug, clip = row.get("bug"), row.get("clip")
    split = row.get("split", [[3, 5, 2], [6, 1, 3]])
    model = model_of(row)
    if row.get("frozen"):
        model[0].requires_grad_(False)
    trained = [p for p in model.parameters() if p.requires_grad]
    if row.get("optimizer") == "sgd":
        opt = torch.optim.SGD(trained, lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.AdamW(trained, lr=1e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, multiplier)
    scenario = {"name": row["name"], "warmup_steps": WARMUP, "total_steps": TOTAL}
    rec = gradeq_export.TorchRecorder(out, model, opt, scenario)
    nominal = len(split[0])
    for w, ((x, y), sizes) in enumerate(zip(windows_of(split, 11), split)):
        rec.begin_window(x, y)
        if not (bug == "B9" and w > 0):  # B9: the gradient of the window before stays
            opt.zero_grad()
        tokens = int((y != gradeq_export.IGNORE_CLASS).sum())
        if bug == "padding":  # the normaliser counts padding
            tokens = y.numel()
        first = 0
        for b, n in enumerate(sizes):
            lo = first - 1 if bug == "B17" and b > 0 else first  # B17: one sample twice, the last never
            xb, yb = x[lo:lo + n], y[lo:lo + n]
            first += n
            if bug == "B10":  # zero_grad inside the micro-batch loop
                opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(row.get("autocast"))):
                rec.micro_batch(xb, yb)
                logits = model(xb)
            s = F.cross_entropy(logits.float().reshape(-1, CLASSES), yb.reshape(-1),
                                ignore_index=gradeq_export.IGNORE_CLASS, reduction="sum")
            if bug == "B3":  # each micro-batch over its own tokens, no 1/N
                loss = s / max(int((yb != gradeq_export.IGNORE_CLASS).sum()), 1)
            elif bug == "B4":  # divided by N on top of the window's count
                loss = s / tokens / len(sizes)
            elif bug == "B5":  # a short window scaled by its length over the nominal N
                loss = s / tokens * len(sizes) / nominal
            else:
                loss = s / tokens
            loss.backward()
            last = b + 1 == len(sizes)
            if bug == "bf16_grad":  # .grad accumulated in bfloat16
                for p in trained:
                    p.grad = p.grad.to(torch.bfloat16).to(torch.float32)
            if bug == "B13" and not last:  # clipped after every micro-batch
                torch.nn.utils.clip_grad_norm_(trained, clip)
            if bug == "B11" and not last:  # a step after every micro-batch
                opt.step()
                opt.zero_grad()
            if bug == "B15" and not last:  # the scheduler stepped per micro-batch
                sched.step()
            if bug == "B18" and not last:  # AdamW's decoupled decay applied once per micro-batch more
                with torch.no_grad():
                    for p in trained:
                        p.mul_(1.0 - opt.param_groups[0]["lr"] * 0.1)
        if clip is not None:
            rec.clip_grad_norm_(model.parameters(), clip)
        rec.before_step()
        opt.step()
        sched.step()
        rec.after_step()
    rec.close()
    return rec


# name, expect ("pass" or "FAIL"), and the loop's settings.
ROWS = [
    {"name": "correct_adamw", "expect": "pass"},
    {"name": "correct_adamw_binding_clip", "expect": "pass", "clip": BINDING, "binds": True},
    {"name": "correct_adamw_loose_clip", "expect": "pass", "clip": LOOSE},
    {"name": "correct_sgd_binding_clip", "expect": "pass", "optimizer": "sgd", "clip": BINDING, "binds": True},
    {"name": "correct_partial_last_window", "expect": "pass", "clip": BINDING, "binds": True,
     "split": [[3, 5, 2, 2], [4, 4, 2, 1], [2, 3]]},
    {"name": "correct_frozen_first_layer", "expect": "pass", "clip": BINDING},
    {"name": "correct_bf16_autocast", "expect": "pass", "autocast": True, "clip": BINDING},
]
for bug in ["B3", "B4", "B5", "padding"]:
    extra = {"split": [[3, 5, 2, 2], [4, 4, 2, 1], [2, 3]]} if bug == "B5" else {}
    ROWS.append(dict({"name": bug, "expect": "FAIL", "bug": bug}, **extra))
    ROWS.append(dict({"name": bug + "_binding_clip", "expect": "FAIL", "bug": bug, "clip": BINDING, "binds": True},
                     **extra))
for bug in ["B9", "B10", "B11", "B15", "B17", "B18", "bf16_grad"]:
    ROWS.append({"name": bug, "expect": "FAIL", "bug": bug, "clip": LOOSE})
ROWS.append({"name": "B13", "expect": "FAIL", "bug": "B13", "clip": BINDING})
ROWS.append({"name": "no_grad_layer", "expect": "FAIL", "no_grad_layer": True})


def autocast_supported():
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            m = model_of({"autocast": True})
            m(torch.randn(2, POSITIONS, FEATURES)).float().sum().backward()
        return True
    except Exception as e:  # an older torch without CPU autocast
        print("  (bfloat16 autocast on the CPU is not supported by torch %s: %s)" % (torch.__version__, e))
        return False


def main():
    gradeq, only = sys.argv[1], sys.argv[2:]
    rows = [r for r in ROWS if not only or r["name"] in only]
    autocast = autocast_supported()
    root = tempfile.mkdtemp(prefix="gradeq_loops_")
    wrong = 0
    print("%-30s %-6s %-5s %-4s  %s" % ("loop", "expect", "got", "exit", "failing verdicts: first finding"))
    for row in rows:
        if row.get("autocast") and not autocast:
            print("%-30s %-6s %-5s %-4s  skipped: no bfloat16 autocast on this torch's CPU" % (row["name"], row["expect"],
                                                                                           "-", "-"))
            continue
        out = os.path.join(root, row["name"])
        train(row, out)
        report = os.path.join(out, "report")
        p = subprocess.run([gradeq, "verify", out, "--report", report], capture_output=True, text=True)
        got = {0: "pass", 1: "FAIL"}.get(p.returncode, "exit %d" % p.returncode)
        finding = ""
        failing = []
        ok = got == row["expect"]
        if p.returncode in (0, 1):
            with open(os.path.join(report, "report.json")) as f:
                verdicts = json.load(f)["scenarios"][0]["verdicts"]
            failing = [v["verdict"] for v in verdicts if v["status"] == "FAIL"]
            for v in verdicts:
                if v["status"] == "FAIL" and not finding:
                    finding = (v["problems"] + v["diagnosis"] + [v["note"]])[0]
            if row["expect"] == "FAIL":
                ok = ok and "accumulation equivalence" in failing
            else:
                ok = ok and all(v["status"] == "pass" for v in verdicts)
        if row.get("binds"):  # the clip binds in every window of the run, as the row claims
            with open(os.path.join(out, "manifest.json")) as f:
                manifest = json.load(f)
            for w in manifest["runs"]["K_acc"]["windows"]:
                coefficient = float(np.load(os.path.join(out, w["tensors"]["clip/coefficient"]))[0, 0])
                if not coefficient < 1.0:
                    ok = False
                    finding += " [the clip does not bind: coefficient %g]" % coefficient
        if not ok:
            wrong += 1
            print(p.stdout + p.stderr)
        print("%-30s %-6s %-5s %-4s  %s%s" % (row["name"], row["expect"], got, p.returncode,
                                              ", ".join(failing) + (": " if failing else ""), finding[:150]))
    print("%d of %d loops as expected" % (len(rows) - wrong, len(rows)))
    sys.exit(1 if wrong else 0)


main()
