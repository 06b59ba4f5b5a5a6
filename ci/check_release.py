#!/usr/bin/env python3
"""Checks ci/release.yml: valid workflow YAML (on a tag push, one job with steps), and every script
a step runs is in the repository and is run by .ci/run itself or by a script .ci/run runs, so a
release only runs what every change tests. Exits 1 naming what is wrong."""
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def fail(why):
    sys.exit(f"FAIL: ci/release.yml: {why}")


wf = yaml.safe_load((ROOT / "ci/release.yml").read_text())
# YAML reads the key `on` as True.
trigger = wf.get("on", wf.get(True))
if not isinstance(trigger, dict) or "tags" not in trigger.get("push", {}):
    fail("it must run on a tag push")
jobs = wf.get("jobs") or {}
if not jobs:
    fail("no jobs")
scripts = set()
for name, job in jobs.items():
    steps = job.get("steps") or []
    if not steps:
        fail(f"job {name} has no steps")
    for step in steps:
        if "run" in step:
            scripts.update(re.findall(r"[\w./-]+\.(?:sh|py)\b", step["run"]))
        elif not str(step.get("uses", "")).startswith("actions/checkout@"):
            fail(f"step {step.get('name', step)} uses an action other than checkout")
if not scripts:
    fail("no step runs a script of the repository")
# What CI runs: .ci/run, and every script those scripts call, transitively.
tested, todo = set(), [".ci/run"]
while todo:
    path = todo.pop()
    if path in tested or not (ROOT / path).exists():
        continue
    tested.add(path)
    todo.extend(re.findall(r"(?:docker|packaging|ci|dashboards/test|kernels/\w+)/[\w./-]+\.(?:sh|py)\b",
                            (ROOT / path).read_text()))
for s in sorted(scripts):
    if not (ROOT / s).exists():
        fail(f"{s} is not in the repository")
    if s not in tested:
        fail(f"{s} is not run by .ci/run (directly or through the scripts it runs)")
print(f"ok: ci/release.yml runs {', '.join(sorted(scripts))}, all run by .ci/run")
