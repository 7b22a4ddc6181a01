#!/usr/bin/env python3
"""`lastmile run --repeat R` takes R steps from where the case stands: a seeded request with
three output tokens draws at steps 3, 4, ... (as one `run` draws at step 3), so `--repeat 1`
samples what `run` does, and each repeat's step is one later `run` of a longer history would take.
Checked on flat logits over 1000 tokens, where a draw from the wrong step differs but for 1 in 1000.

usage: test_cli_repeat_step.py LASTMILE_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from cli_report import finish


def sampled(binary, case, out, *flags):
    p = subprocess.run([binary, "run", case, "--out", out, *flags], capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"run {' '.join(flags)}: exit status {p.returncode}: {p.stderr.strip()}")
    with open(os.path.join(out, "output.json")) as f:
        return json.load(f)


def write_case(root, output_token_ids):
    os.makedirs(root)
    with open(os.path.join(root, "case.json"), "w") as f:
        json.dump({"requests": [{"seed": 5, "output_token_ids": output_token_ids}]}, f)
    np.save(os.path.join(root, "logits.npy"), np.zeros((1, 1000), np.float32))
    return root


def main():
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        three = write_case(os.path.join(tmp, "three"), [1, 2, 3])
        four = write_case(os.path.join(tmp, "four"), [1, 2, 3, 4])
        once = sampled(sys.argv[1], three, out)["sampled"]
        repeated = sampled(sys.argv[1], three, out, "--repeat", "1")
        if repeated["sampled"] != once or repeated["histograms"] != [{str(once[0]): 1}]:
            problems.append(f"--repeat 1 gave {repeated}, `run` sampled {once}")
        # The second of two repeats is step 4: what `run` draws with a fourth output token.
        next_step = sampled(sys.argv[1], four, out)["sampled"]
        twice = sampled(sys.argv[1], three, out, "--repeat", "2")
        if twice["sampled"] != next_step:
            problems.append(f"--repeat 2 ended on {twice['sampled']}, step 4 draws {next_step}")
        if once == next_step:
            problems.append(f"steps 3 and 4 drew the same token {once}: the check tells nothing")
    finish("repeat step", problems)


if __name__ == "__main__":
    main()
