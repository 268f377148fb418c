#!/usr/bin/python3
"""Compares two report.json files field by field, apart from timings and
the properties' generated cases, and prints every difference. Exit 0 when
the scenarios agree, 1 otherwise. Used to show a refactoring leaves every
scenario's verdicts, ratios and tensors as they were:

    scripts/compare_reports.py OLD/report.json NEW/report.json
"""
import json
import sys

# Keys that measure time, or describe the run rather than its results.
IGNORED = {"seconds", "elapsed_seconds", "wall_seconds", "time", "timing", "timings", "started", "finished",
           "date", "generated", "duration_seconds", "host", "command", "threads"}


def walk(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in IGNORED or k.endswith("_seconds"):
                continue
            if k not in a or k not in b:
                out.append("%s.%s: only in %s" % (path, k, "old" if k in a else "new"))
                continue
            walk(a[k], b[k], "%s.%s" % (path, k), out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append("%s: %d entries, now %d" % (path, len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, "%s[%d]" % (path, i), out)
    elif a != b:
        out.append("%s: %r -> %r" % (path, a, b))


def main():
    old, new = (json.load(open(p)) for p in sys.argv[1:3])
    diffs = []
    scenarios_old = {s["name"]: s for s in old.get("scenarios", [])}
    scenarios_new = {s["name"]: s for s in new.get("scenarios", [])}
    for name in sorted(set(scenarios_old) | set(scenarios_new)):
        if name not in scenarios_old or name not in scenarios_new:
            diffs.append("scenario %s: only in %s" % (name, "old" if name in scenarios_old else "new"))
            continue
        walk(scenarios_old[name], scenarios_new[name], "scenario " + name, diffs)
    for key in ("norm_sweep", "precision_sweep"):
        walk(old.get(key), new.get(key), key, diffs)
    for line in diffs:
        print(line)
    print("%d scenarios compared, %d differences" % (len(set(scenarios_old) & set(scenarios_new)), len(diffs)))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
