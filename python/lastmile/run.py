"""``python -m lastmile.run CASE --out OUT``: the golden runner contract (../shared/golden/README.md).

Reads ``CASE/case.json`` and ``CASE/logits.npy``, samples through :class:`lastmile.Sampler`, and
writes ``OUT/output.json`` (plus ``OUT/full_logprobs.npy`` when ``max_num_logprobs`` is -1).
``--logprobs-mode`` and ``--num-logprobs`` override the case; ``--repeat R`` runs R steps on the
same logits (step r of every request's stream) and reports a token histogram per row.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from . import InvalidArgument, Sampler


def _finite(value: float) -> Any:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _values(matrix: np.ndarray) -> list:
    return [[_finite(float(v)) for v in row] for row in matrix]


# logits_dtype -> the logits.npy dtype it needs (bfloat16: its bit patterns, as uint16).
_NPY_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}


# The case fields the CLI's reader knows; it refuses any other, and so does this runner.
_CASE_FIELDS = {"logits_dtype", "logprobs_mode", "max_num_logprobs", "predict_bonus_token",
                "requests"}


# Request fields the CLI's reader takes null for (as absent); any other null it refuses.
_NULLABLE = {"seed", "allowed_token_ids", "logprob_token_ids", "logprobs", "logit_bias"}


def _check_request(where: str, request: Any) -> None:
    """What the CLI's reader refuses and the Sampler would take: a non-object request, `step`
    (the runner's own, with --repeat), a null where a value belongs, a logit_bias key that is
    not a decimal integer (Python's int() reads "1_0" as 10)."""
    if not isinstance(request, dict):
        raise ValueError(f"case.json: {where}: expected an object, got {type(request).__name__}")
    if "step" in request:
        raise ValueError(f"case.json: {where}.step: unknown request field")
    for key, value in request.items():
        if value is None and key not in _NULLABLE:
            raise ValueError(f"case.json: {where}.{key}: expected a value, got null")
    bias = request.get("logit_bias")
    if bias is not None and not isinstance(bias, dict):
        raise ValueError(f"case.json: {where}.logit_bias: expected an object of token id -> bias, "
                         f"got {type(bias).__name__}")
    for key in (bias or {}):  # " 3", "+3" and "03" would be other keys for token 3
        if not re.fullmatch(r"-?(0|[1-9][0-9]*)", key) or key == "-0":
            raise ValueError(f"case.json: {where}.logit_bias: keys must be decimal token ids as "
                             f"str(int) writes them, got {key!r}")


class _CaseError(ValueError):
    """An error that already names its file."""


def _unique_keys(pairs: list) -> dict:
    """A JSON object whose keys are all different, as the CLI's reader requires (json.loads would
    keep the last of two)."""
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise _CaseError(f"case.json: {key}: given twice in one object")
        seen[key] = value
    return seen


def _load_json(path: Path) -> Any:
    # utf-8-sig: a byte-order mark is skipped, as the CLI's JSON reader skips it.
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"), object_pairs_hook=_unique_keys)
    except _CaseError:
        raise
    except json.JSONDecodeError as e:
        raise _CaseError(f"case.json: not valid JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise _CaseError(f"case.json: not UTF-8: {e}") from None
    except ValueError as e:  # e.g. an integer past Python's digit limit
        raise _CaseError(f"case.json: {e}") from None
    except RecursionError:
        raise _CaseError("case.json: nested too deeply") from None


def _load_npy(path: Path) -> np.ndarray:
    """logits.npy, its errors named by the file (numpy's own name the pickle fallback for a bad
    magic, or a reshape for a short file), and its size checked against its header's shape before
    numpy allocates for it."""
    with open(path, "rb") as f:
        if f.read(6) != b"\x93NUMPY":
            raise _CaseError("logits.npy: not a .npy file (bad magic)")
        f.seek(0)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}
        try:
            version = np.lib.format.read_magic(f)
            header = read_header[version](f) if version in read_header else None
        except (ValueError, EOFError) as e:
            raise _CaseError(f"logits.npy: {e}") from None
        if header is not None:  # version 3.0 (a UTF-8 header): numpy's own checks only
            shape, _, dtype = header
            need = math.prod(shape) * dtype.itemsize
            have = os.fstat(f.fileno()).st_size - f.tell()
            if have != need:
                raise _CaseError(f"logits.npy: data holds {have} bytes, shape {shape} of "
                                 f"{dtype.str} needs {need}")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, EOFError) as e:
        raise _CaseError(f"logits.npy: {e}") from None


def _read_case(case: Path):
    spec = _load_json(case / "case.json")
    if not isinstance(spec, dict) or not isinstance(spec.get("requests"), list):
        raise ValueError("case.json: expected an object with a list of requests")
    for key in spec:
        if key not in _CASE_FIELDS:
            raise ValueError(f"case.json: {key}: unknown case field")
    if not isinstance(spec.get("predict_bonus_token", False), bool):
        raise ValueError("case.json: predict_bonus_token: expected true or false, got "
                         f"{spec['predict_bonus_token']!r}")
    for i, request in enumerate(spec["requests"]):
        _check_request(f"requests[{i}]", request)
    dtype = spec.get("logits_dtype", "float32")
    if dtype not in _NPY_DTYPES:
        raise ValueError(f"case.json: logits_dtype must be float32, float16 or bfloat16, got {dtype!r}")
    logits = _load_npy(case / "logits.npy")
    if logits.ndim != 2:
        raise ValueError(f"logits.npy: expected 2 dimensions [num_rows, vocab_size], got {logits.ndim}")
    if logits.dtype != _NPY_DTYPES[dtype]:
        raise ValueError(f"logits.npy: dtype {logits.dtype} does not match logits_dtype {dtype}")
    return spec, logits, dtype


def run(case: Path, out: Path, logprobs_mode: Optional[str], num_logprobs: Optional[int],
        repeat: int, threads: Optional[int]) -> None:
    spec, logits, dtype = _read_case(case)
    requests = [dict(r) for r in spec["requests"]]
    mode = logprobs_mode or spec.get("logprobs_mode", "raw_logprobs")
    n = num_logprobs if num_logprobs is not None else spec.get("max_num_logprobs")
    sampler = Sampler(logits.shape[1], max(1, logits.shape[0]), mode, threads=threads, seed=0)
    kwargs = dict(predict_bonus_token=spec.get("predict_bonus_token", False),
                  num_logprobs=n, dtype=dtype if dtype == "bfloat16" else None)
    result: dict = {}
    if repeat == 0:
        o = sampler.sample(logits, requests, **kwargs)
    else:
        histograms = [Counter() for _ in requests]
        for step in range(repeat):
            for r in requests:
                r["step"] = step
            o = sampler.sample(logits, requests, **kwargs)
            for row, token in enumerate(o.sampled_token_ids.tolist()):
                histograms[row][str(token)] += 1
        result["histograms"] = [dict(h) for h in histograms]
    result["sampled"] = o.sampled_token_ids.tolist()
    if o.logprobs is not None:
        result["logprobs"] = {"token_ids": o.logprobs.token_ids.tolist(),
                              "logprobs": _values(o.logprobs.logprobs),
                              "ranks": o.logprobs.ranks.tolist()}
    if o.token_logprobs is not None:
        t = o.token_logprobs
        result["token_logprobs"] = {"token_ids": t.token_ids.tolist(), "logprobs": _values(t.logprobs),
                                    "valid": t.valid.tolist(), "ranks": t.ranks.tolist()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "output.json").write_text(json.dumps(result))
    if o.full_logprobs is not None:
        np.save(out / "full_logprobs.npy", o.full_logprobs.astype("<f4"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lastmile.run", description=__doc__.splitlines()[0])
    parser.add_argument("case", type=Path, help="a case folder (case.json, logits.npy)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--logprobs-mode", choices=["raw_logprobs", "raw_logits",
                                                    "processed_logprobs", "processed_logits"])
    parser.add_argument("--num-logprobs", type=int)
    parser.add_argument("--repeat", type=int, default=0, help="R steps with histograms")
    parser.add_argument("--threads", type=int)
    args = parser.parse_args(argv)
    if args.repeat < 0:
        parser.error("--repeat must be >= 0")
    try:
        run(args.case, args.out, args.logprobs_mode, args.num_logprobs, args.repeat, args.threads)
    except (OSError, ValueError, TypeError, KeyError, InvalidArgument) as e:
        print(f"lastmile.run: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # anything else a malformed case raises (numpy's npy reader, json)
        print(f"lastmile.run: error: {args.case}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
