"""The real trainers, recorded by python/gradeq_trainers.py and judged by
`gradeq verify` (ctest label trainers).

    run_trainers.py GRADEQ VENVS [CASE ...]

Installs the pinned trainers from PyPI into virtual environments under
VENVS (once: reused while the pins stay the same; the system Python is
left as it is): current.txt (torch, transformers, accelerate, lightning as
they are now) and hf445.txt (transformers 4.45.2, the last release before
the accumulation fix, on Debian's torch). Then runs each case with the
trainer's own code and checks the verdict it must get: the correct
configurations pass, the buggy ones fail on accumulation equivalence with
the finding named. Prints one line per case; exits 1 if any case is not as
stated, 77 (skipped, with the reason) where PyPI cannot be reached.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")
B1 = "mean of per-micro-batch means"

# (environment, script, case, expected, the finding a failure must name, what the case shows)
CASES = [
    ("current", "hf_case.py", "token_num_items", "pass", None,
     "Trainer, a model that uses num_items_in_batch"),
    ("current", "hf_case.py", "token_num_items_clip_warmup", "pass", None,
     "the same with a clip that binds, warmup + cosine and a partial last window"),
    ("current", "hf_case.py", "regression_num_items_clip_warmup", "pass", None,
     "a regression model, a clip that binds, warmup + cosine"),
    ("current", "hf_case.py", "token_mean_loss", "FAIL", B1,
     "a model that ignores num_items_in_batch (no **kwargs): the pre-fix behaviour, today"),
    ("hf445", "hf_case.py", "token_num_items", "FAIL", B1,
     "the same correct model on 4.45.2, before the fix: the Trainer passes no num_items_in_batch"),
    ("current", "lightning_case.py", "token_mean_loss", "FAIL", B1,
     "accumulate_grad_batches=4, the batch's mean token loss"),
    ("current", "lightning_case.py", "token_window_normalised", "pass", None,
     "the module normalising by the window's token count"),
    ("current", "lightning_case.py", "token_window_normalised_partial_window", "pass", None,
     "the same, with a partial last window at the end of the epoch"),
    ("current", "lightning_case.py", "token_window_normalised_clip_warmup", "pass", None,
     "the same with a clip that binds and warmup + cosine"),
    ("current", "lightning_case.py", "regression_window_normalised_clip_warmup", "pass", None,
     "a regression model, a clip that binds, warmup + cosine, a partial last window"),
    ("current", "lightning_case.py", "regression_mean_loss_partial_window", "FAIL", "0.5 × R_full in window 2",
     "the batch's mean loss with equal batches: right in full windows, r/N in the partial one (B5)"),
    ("current", "scaler_case.py", "correct", "pass", None,
     "a hand-written loop with torch.amp.GradScaler: its scale, growth and state read"),
    ("current", "scaler_case.py", "clip_before_unscale", "FAIL", "a loss scale left in",
     "the same, clipped before GradScaler.unscale_ (B14)"),
]


def pypi_unreachable(python):
    """Why pip cannot reach its index, or None."""
    probe = tempfile.mkdtemp(prefix="gradeq_pypi_")
    p = subprocess.run([python, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", probe, "six==1.16.0"],
                       capture_output=True, text=True, timeout=120)
    return None if p.returncode == 0 else (p.stderr.strip().splitlines() or ["pip download failed"])[-1]


def environment(venvs, name):
    """The virtual environment `name` with its pins installed; its python."""
    pins_file = os.path.join(HERE, name + ".txt")
    with open(pins_file) as f:
        pins = f.read()
    root = os.path.join(venvs, name)
    python = os.path.join(root, "bin", "python")
    stamp = os.path.join(root, "gradeq-pins.txt")
    if os.path.exists(stamp) and open(stamp).read() == pins:
        return python
    start = time.time()
    flags = ["--system-site-packages"] if name == "hf445" else []
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--clear"] + flags + [root], check=True)
    p = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-cache-dir", "--disable-pip-version-check", "-r", pins_file],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: installing %s into %s:\n%s%s" % (pins_file, root, p.stdout, p.stderr[-4000:]))
    with open(stamp, "w") as f:
        f.write(pins)
    print("installed %s into %s in %.0f s" % (os.path.basename(pins_file), root, time.time() - start), flush=True)
    return python


def clip_binds(out):
    """Whether every recorded window's clip coefficient is below 1 (None: no clip)."""
    import struct

    with open(os.path.join(out, "manifest.json")) as f:
        windows = json.load(f)["runs"]["K_acc"]["windows"]
    coefficients = []
    for w in windows:
        name = w["tensors"].get("clip/coefficient")
        if name is None:
            return None
        with open(os.path.join(out, name), "rb") as f:
            raw = f.read()
        coefficients.append(struct.unpack("<f", raw[-4:])[0])  # a float32 [1, 1] .npy: its last 4 bytes
    return all(c < 1.0 for c in coefficients)


def main():
    gradeq, venvs, only = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3:]
    if not os.path.exists("/usr/bin/python3"):
        print("SKIP: no /usr/bin/python3 (Debian python3)")
        sys.exit(77)
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode != 0:
        print("SKIP: Debian's python3-torch is missing (transformers 4.45.2 runs on it)")
        sys.exit(77)
    installed = all(os.path.exists(os.path.join(venvs, name, "gradeq-pins.txt")) and
                    open(os.path.join(venvs, name, "gradeq-pins.txt")).read() == open(os.path.join(HERE, name + ".txt")).read()
                    for name in ("current", "hf445"))
    reason = None if installed else pypi_unreachable("/usr/bin/python3")
    if reason:
        print("SKIP: PyPI cannot be reached, so the pinned trainers cannot be installed: %s" % reason)
        sys.exit(77)
    os.makedirs(venvs, exist_ok=True)
    root = tempfile.mkdtemp(prefix="gradeq_trainers_")
    wrong = 0
    rows = [c for c in CASES if not only or c[2] in only or "%s:%s" % (c[1][:-8], c[2]) in only]
    for env, script, case, expect, finding, what in rows:
        python = environment(venvs, env)
        out = os.path.join(root, "%s_%s_%s" % (env, script[:-8], case))
        p = subprocess.run([python, os.path.join(HERE, script), case, out, PYTHON_DIR], capture_output=True, text=True)
        version = (p.stdout.strip().splitlines() or ["?"])[-1].split(":")[0].split(", GradScaler")[0]
        if p.returncode != 0:
            print("FAIL  %-9s %-42s the trainer's run exits %d:\n%s" % (script[:-8], case, p.returncode, p.stderr[-3000:]))
            wrong += 1
            continue
        v = subprocess.run([gradeq, "verify", out, "--report", os.path.join(out, "report")], capture_output=True,
                           text=True)
        got = {0: "pass", 1: "FAIL"}.get(v.returncode, "exit %d" % v.returncode)
        said = ""
        if v.returncode in (0, 1):
            with open(os.path.join(out, "report", "report.json")) as f:
                verdicts = json.load(f)["scenarios"][0]["verdicts"]
            accumulation = next(x for x in verdicts if x["verdict"] == "accumulation equivalence")
            said = " | ".join(accumulation["diagnosis"] + accumulation["problems"]) or accumulation["note"]
        ok = got == expect
        if expect == "FAIL":
            ok = ok and accumulation["status"] == "FAIL" and finding in said
        binds = clip_binds(out)
        if "binds" in what and binds is not True:
            ok = False
            said += " [the clip does not bind in every window]"
        wrong += not ok
        print("%-4s  %-9s %-42s expect %-4s got %-4s  %s; %s%s" % ("ok" if ok else "FAIL", script[:-8], case, expect,
                                                                   got, version, what,
                                                                   (": " + said[:160]) if said else ""), flush=True)
        if not ok:
            print(v.stdout + v.stderr)
    print("%d of %d trainer cases as stated" % (len(rows) - wrong, len(rows)))
    sys.exit(1 if wrong else 0)


main()
