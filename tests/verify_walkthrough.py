"""docs/VERIFY.md walked through as a new user would (ctest label torch).

    verify_walkthrough.py GRADEQ DOCS/VERIFY.md

Runs the doc's Python block as it stands (the gradeq path pointed at this
checkout), then the doc's `gradeq verify` command: it must pass. Then the
same block with the bug the doc describes (the loss divided by N once
more): verify must fail with the finding the doc shows. Exits 77
(skipped) without torch.
"""

import os
import re
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
except ImportError as e:
    print("SKIP: %s (install python3-torch)" % e)
    sys.exit(77)

gradeq, doc = os.path.abspath(sys.argv[1]), sys.argv[2]
with open(doc) as f:
    text = f.read()
python = re.findall(r"```python\n(.*?)```", text, re.S)
shell = re.findall(r"```sh\n(.*?)```", text, re.S)
if not python or not shell:
    sys.exit("FAIL: %s has no ```python or ```sh block" % doc)
snippet, command = python[0], shell[0].strip()
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
if "path/to/gradeq/python" not in snippet or not command.startswith("build/gradeq verify "):
    sys.exit("FAIL: the doc's example no longer has the lines this test points at this checkout")
snippet = snippet.replace("path/to/gradeq/python", here)
bug_line = "loss = ce / tokens\n"
if bug_line not in snippet or "`loss = ce / tokens /\nlen(sizes)`" not in text:
    sys.exit("FAIL: the doc's loss line or its buggy variant is not where this test expects it")


def walk(code, label):
    work = tempfile.mkdtemp(prefix="gradeq_walk_%s_" % label)
    with open(os.path.join(work, "loop.py"), "w") as f:
        f.write(code)
    p = subprocess.run([sys.executable, "loop.py"], cwd=work, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: the doc's Python block (%s) exits %d:\n%s%s" % (label, p.returncode, p.stdout, p.stderr))
    argv = [gradeq] + command.split()[1:]
    v = subprocess.run(argv, cwd=work, capture_output=True, text=True)
    print("$ %s   (%s)\n%s%s" % (command, label, v.stdout, v.stderr))
    return v


correct = walk(snippet, "as written")
if correct.returncode != 0:
    sys.exit("FAIL: the doc's loop does not pass gradeq verify (exit %d)" % correct.returncode)
buggy = walk(snippet.replace(bug_line, "loss = ce / tokens / len(sizes)\n"), "divided by N twice")
expected = "K_acc ≈ 0.3333 × R_full in windows 0, 1 (every gradient; cosine ≥ 0.9999): a normalisation factor"
if buggy.returncode != 1 or expected not in buggy.stdout or expected not in text:
    sys.exit("FAIL: the buggy loop exits %d; the doc and the output must both say: %s" % (buggy.returncode, expected))
print("ok: docs/VERIFY.md's loop passes, and with the loss divided by N twice fails as the doc says")
