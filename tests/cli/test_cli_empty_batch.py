#!/usr/bin/env python3
"""`lastmile run` on a case of no rows that asks for the full matrix (max_num_logprobs -1) writes
an empty output and a full_logprobs.npy of shape (0, vocab_size), as a case with rows would; with
--repeat, output.json has "histograms": [] (the runner contract: present with --repeat).

usage: test_cli_empty_batch.py LASTMILE_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from cli_report import finish


def main():
    with tempfile.TemporaryDirectory() as tmp:
        case, out = os.path.join(tmp, "case"), os.path.join(tmp, "out")
        os.makedirs(case)
        os.makedirs(out)
        with open(os.path.join(case, "case.json"), "w") as f:
            json.dump({"logits_dtype": "float32", "requests": [], "max_num_logprobs": -1}, f)
        np.save(os.path.join(case, "logits.npy"), np.zeros((0, 16), np.float32))
        p = subprocess.run([sys.argv[1], "run", case, "--out", out], capture_output=True, text=True,
                           timeout=60)
        problems = []
        if p.returncode != 0:
            problems.append(f"exit status {p.returncode}: {p.stderr.strip()}")
        else:
            with open(os.path.join(out, "output.json")) as f:
                if json.load(f).get("sampled") != []:
                    problems.append("output.json: sampled is not []")
            path = os.path.join(out, "full_logprobs.npy")
            if not os.path.exists(path):
                problems.append("no full_logprobs.npy")
            else:
                full = np.load(path)
                if full.shape != (0, 16) or full.dtype != np.float32:
                    problems.append(f"full_logprobs.npy is {full.dtype} {full.shape}")
        p = subprocess.run([sys.argv[1], "run", case, "--out", out, "--repeat", "2"],
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            problems.append(f"--repeat: exit status {p.returncode}: {p.stderr.strip()}")
        else:
            with open(os.path.join(out, "output.json")) as f:
                histograms = json.load(f).get("histograms")
            if histograms != []:
                problems.append(f"--repeat: output.json histograms is {histograms!r}, not []")
    finish("empty batch", problems)


if __name__ == "__main__":
    main()
