#!/usr/bin/env python3
"""`lastmile bench --backend reference` times the reference backend, not only names it.

usage: test_cli_bench_backend.py LASTMILE_BINARY
decode_b1 (one 128256-token top-k/top-p row) takes the cpu backend some 10 us and the scalar
reference some 10 ms, about what the full-sort baseline takes; a reference time under 5% of the
baseline's is the cpu backend's (so it was: the option set only the table's header).
"""
import json
import os
import subprocess
import sys
import tempfile

from cli_report import finish


def main():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        p = subprocess.run([sys.argv[1], "bench", "--scenario", "decode_b1", "--threads", "1",
                            "--backend", "reference", "--json", path],
                           capture_output=True, text=True, timeout=600)
        problems = []
        if p.returncode != 0:
            problems.append(f"exit status {p.returncode}: {p.stderr.strip()}")
        else:
            with open(path) as f:
                doc = json.load(f)
            if "reference" not in doc["machine"]["backend"]:
                problems.append(f"machine.backend is {doc['machine']['backend']!r}")
            # One thread has no worker to wake: no delay, and null rather than a made-up 0.
            if doc["machine"].get("worker_start_delay_us", "absent") is not None:
                problems.append(f"machine.worker_start_delay_us on one thread is "
                                f"{doc['machine'].get('worker_start_delay_us', 'absent')!r}")
            s = doc["scenarios"][0]
            # decode_b1 is timed in turns with its one-thread twin and has no target of its own.
            if not s.get("twin_us_per_row", 0) > 0:
                problems.append(f"decode_b1 has no twin time: {sorted(s)}")
            if doc.get("targets") != [] or "scaling" not in doc:
                problems.append(f"targets {doc.get('targets')!r}, scaling {doc.get('scaling')!r}")
            ratio = s["median_us_per_row"] / s["baseline_us_per_row"]
            if ratio < 0.05:
                problems.append(f"ours {s['median_us_per_row']:.1f} us/row is {ratio:.4f}x the "
                                f"baseline's: not the reference backend's time")
    finish("bench backend", problems)


if __name__ == "__main__":
    main()
