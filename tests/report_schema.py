#!/usr/bin/env python3
"""report.json against docs/report.schema.json: a passing report with drift
against a baseline, and a failing one (a registered backend with dw =
instead of dw +=) must validate; the same documents with a field removed,
an unknown field or an unknown status must not (the schema can fail).
Usage: report_schema.py path/to/gradeq path/to/registered_backend SCHEMA
Exit 77 (skipped, with the reason) without python3-jsonschema."""
import copy
import json
import subprocess
import sys
import tempfile

try:
    import jsonschema
except ImportError:
    print("SKIP: no python3-jsonschema (Debian: apt-get install python3-jsonschema)")
    sys.exit(77)

gradeq, registered, schema_path = sys.argv[1:4]
schema = json.load(open(schema_path))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)
failures = 0


def fail(message):
    global failures
    failures += 1
    print("FAIL:", message)


def run(args, code):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != code:
        fail(f"{' '.join(args)} exited {p.returncode}, expected {code}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")


with tempfile.TemporaryDirectory() as work:
    run([gradeq, "report", "--out", f"{work}/a", "--cases", "3"], 0)
    # Tighter baseline ratios make drift flags; the report carries them.
    baseline = json.load(open(f"{work}/a/report.json"))
    for s in baseline["scenarios"]:
        for v in s["verdicts"]:
            for t in v["tensors"]:
                if isinstance(t["worst_ratio"], float):
                    t["worst_ratio"] /= 100.0
    json.dump(baseline, open(f"{work}/baseline.json", "w"))
    run([gradeq, "report", "--out", f"{work}/b", "--cases", "3", "--baseline", f"{work}/baseline.json"], 0)
    run([registered, "report", "--backend", "overwriting", "--out", f"{work}/c", "--cases", "3"], 1)
    documents = {}
    for name in ("a", "b", "c"):
        try:
            documents[name] = json.load(open(f"{work}/{name}/report.json"))
        except OSError as e:
            fail(f"report {name}: {e}")
    if "b" in documents and not documents["b"].get("drift", {}).get("flags"):
        fail("the report against a tighter baseline has no drift flags")
    for name, doc in documents.items():
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        for e in errors[:5]:
            fail(f"report {name}: {e.message} at {list(e.absolute_path)}")
        if not errors:
            print(f"ok: report {name} validates ({len(doc['scenarios'])} scenarios, passed={doc['passed']})")

    # The schema must be able to fail.
    def broken(doc, change):
        d = copy.deepcopy(doc)
        change(d)
        return d
    if "c" in documents:
        doc = documents["c"]
        cases = {
            "a required field removed": lambda d: d.pop("schema_version"),
            "another schema version": lambda d: d.update(schema_version=99),
            "an unknown top-level field": lambda d: d.update(colour="blue"),
            "an unknown verdict status": lambda d: d["scenarios"][0]["verdicts"][0].update(status="maybe"),
            "a tensor without its bound": lambda d: d["scenarios"][0]["verdicts"][1]["tensors"][0].pop("worst_bound"),
            "a NaN ratio": lambda d: d["properties"][0].update(worst_ratio="nan"),
        }
        for what, change in cases.items():
            if validator.is_valid(broken(doc, change)):
                fail(f"the schema accepts {what}")
            else:
                print(f"ok: the schema refuses {what}")

print("report schema: all checks passed" if failures == 0 else f"report schema: {failures} failure(s)")
sys.exit(1 if failures else 0)
