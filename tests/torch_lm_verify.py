"""docs/VERIFY.md's language model, recorded and verified (ctest label torch).

    torch_lm_verify.py GRADEQ DOCS/VERIFY.md

Runs the doc's ```python lm block as it stands (the gradeq path pointed at
this checkout), then `gradeq verify`: it must pass, with the clip as written
and with one that binds. Then the block with the normaliser counting the
labels before the shift (B33): verify must fail, naming a normalisation
factor, with either clip. Exits 77 (skipped) without torch.
"""

import os
import re
import subprocess
import sys
import tempfile

from torch_support import np  # exits 77 (a skip) without torch or numpy

gradeq, doc = os.path.abspath(sys.argv[1]), sys.argv[2]
with open(doc) as f:
    text = f.read()
blocks = re.findall(r"```python lm\n(.*?)```", text, re.S)
if len(blocks) != 1:
    sys.exit("FAIL: %s has %d ```python lm blocks, expected one" % (doc, len(blocks)))
snippet = blocks[0]
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
correct_count = "tokens = int((labels[:, 1:] != -100).sum())"
clip = "rec.clip_grad_norm_(model.parameters(), 1.0)"
for needed in ("path/to/gradeq/python", correct_count, clip, '"my_lm_window_set"'):
    if needed not in snippet:
        sys.exit("FAIL: the doc's block no longer has %r, which this test points at" % needed)
if "`tokens = int((labels != -100).sum())`" not in text:
    sys.exit("FAIL: the doc no longer shows the buggy normaliser this test runs")
snippet = snippet.replace("path/to/gradeq/python", here)
failures = []


def verify(code, label):
    work = tempfile.mkdtemp(prefix="gradeq_lm_")
    with open(os.path.join(work, "loop.py"), "w") as f:
        f.write(code)
    p = subprocess.run([sys.executable, "loop.py"], cwd=work, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: the doc's block (%s) exits %d:\n%s%s" % (label, p.returncode, p.stdout, p.stderr))
    if "binding" in label:  # the clip must bind, or the variant shows nothing
        coefficient = np.load(os.path.join(work, "my_lm_window_set", "K_acc_w0_clip_coefficient.npy"))
        if not float(coefficient.reshape(-1)[0]) < 1.0:
            sys.exit("FAIL: the clip does not bind (%s): coefficient %s" % (label, coefficient))
    v = subprocess.run([gradeq, "verify", "my_lm_window_set"], cwd=work, capture_output=True, text=True)
    print("$ gradeq verify my_lm_window_set   (%s)\n%s%s" % (label, v.stdout, v.stderr))
    return v


binding = snippet.replace(clip, "rec.clip_grad_norm_(model.parameters(), 0.01)")
unshifted = "tokens = int((labels != -100).sum())"
for code, label in ((snippet, "as written"), (binding, "a binding clip")):
    v = verify(code, label)
    if v.returncode != 0:
        failures.append("the correct loop (%s) exits %d" % (label, v.returncode))
    v = verify(code.replace(correct_count, unshifted), label + ", unshifted count")
    if v.returncode != 1 or "a normalisation factor" not in v.stdout or "grad/" not in v.stdout:
        failures.append("the unshifted count (%s) exits %d without naming a normalisation factor on grad/"
                        % (label, v.returncode))
for f in failures:
    print("FAIL:", f)
if failures:
    sys.exit(1)
print("ok: docs/VERIFY.md's language model passes; counting the unshifted labels fails, with a binding clip too")
