#!/usr/bin/env python3
"""Integer options are decimal: CLI11 alone would read `--num-logprobs 010` as octal 8 and
`0x10` as 16. With leading zeros dropped, 010 asks for 10 logprobs (11 columns with the sampled
token); `--repeat 010` runs 10 steps (histograms add up to 10). Malformed numbers are refused in
test_cli_errors.py.

usage: test_cli_decimal_options.py LASTMILE_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from cli_report import finish


def main():
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        case, out = os.path.join(tmp, "case"), os.path.join(tmp, "out")
        os.makedirs(case)
        os.makedirs(out)
        with open(os.path.join(case, "case.json"), "w") as f:
            json.dump({"logits_dtype": "float32", "requests": [{"temperature": 1.0, "seed": 1}]}, f)
        np.save(os.path.join(case, "logits.npy"), np.linspace(-1, 1, 32, dtype=np.float32)[None])

        def run(*options):
            p = subprocess.run([sys.argv[1], "run", case, "--out", out, *options],
                               capture_output=True, text=True, timeout=60)
            if p.returncode != 0:
                problems.append(f"{' '.join(options)}: exit status {p.returncode}: {p.stderr}")
                return {}
            with open(os.path.join(out, "output.json")) as f:
                return json.load(f)

        widths = [len(row) for row in run("--num-logprobs", "010").get("logprobs", {}).get(
            "token_ids", [])]
        if widths != [11]:
            problems.append(f"--num-logprobs 010: logprob widths {widths}, expected [11]")
        counts = [sum(h.values()) if isinstance(h, dict) else sum(c for _, c in h)
                  for h in run("--repeat", "010").get("histograms", [])]
        if counts != [10]:
            problems.append(f"--repeat 010: histogram totals {counts}, expected [10]")
    finish("decimal options", problems)


if __name__ == "__main__":
    main()
