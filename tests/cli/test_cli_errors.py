#!/usr/bin/env python3
"""Malformed input to `lastmile run` gives one clear error line on stderr and exit status 2.

usage: test_cli_errors.py LASTMILE_BINARY
Each case builds a case folder, runs the CLI, and checks: exit status 2, nothing on stdout,
exactly one stderr line starting 'lastmile: error: ' and containing the expected text (an
expected text ending in '$' must end the line instead: its last words are the message's). The
`commands` cases give the whole command line (options misplaced, outputs that cannot be written).
Prints 'N passed, M failed' last.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

BINARY = sys.argv[1]
GOOD_REQUESTS = [{"temperature": 0.0}, {"temperature": 1.0, "seed": 3}]


def make_case(root, case=None, logits=None, raw_case=None, raw_logits=None):
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "case.json"), "w") as f:
        f.write(raw_case if raw_case is not None else json.dumps(
            case if case is not None else {"logits_dtype": "float32", "requests": GOOD_REQUESTS}))
    path = os.path.join(root, "logits.npy")
    if raw_logits is not None:
        with open(path, "wb") as f:
            f.write(raw_logits)
    else:
        np.save(path, logits if logits is not None else np.zeros((2, 16), np.float32))
    return root


def npy_bytes(array):
    import io
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def cases(tmp):
    good = npy_bytes(np.zeros((2, 16), np.float32))
    nan_logits = np.zeros((2, 16), np.float32)
    nan_logits[1, 7] = np.nan
    inf_logits = np.zeros((2, 16), np.float32)
    inf_logits[0, 3] = np.inf
    req = lambda **kw: {"logits_dtype": "float32", "requests": [dict(GOOD_REQUESTS[0], **kw), GOOD_REQUESTS[1]]}
    yield "missing case folder", [os.path.join(tmp, "nope")], "nope/case.json: cannot open file"
    yield "invalid JSON", [make_case(f"{tmp}/bad_json", raw_case="{\"requests\": [")], "invalid JSON"
    os.makedirs(f"{tmp}/case_dir/case.json")
    yield "case.json a folder", [f"{tmp}/case_dir"], "case_dir/case.json: a directory, not a file"
    make_case(f"{tmp}/npy_dir", raw_logits=b"")
    os.remove(f"{tmp}/npy_dir/logits.npy")
    os.makedirs(f"{tmp}/npy_dir/logits.npy")
    yield "logits.npy a folder", [f"{tmp}/npy_dir"], "npy_dir/logits.npy: a directory, not a file"
    good_json = json.dumps({"logits_dtype": "float32", "requests": GOOD_REQUESTS})
    yield "a NUL and garbage after the case", [make_case(f"{tmp}/nul", raw_case=good_json + "\0{garbage")], f"nul/case.json: invalid JSON: a NUL byte at offset {len(good_json)}$"
    twice = good_json.replace('{"temperature"', '{"temperature": 0.5, "temperature"', 1)
    assert twice != good_json
    yield "a field given twice", [make_case(f"{tmp}/field_twice", raw_case=twice)], "field_twice/case.json: requests[0].temperature: given twice in one object$"
    # 400k objects in one array: nlohmann's parse with a callback took minutes (quadratic).
    many = '{"requests": [' + "{}, " * 400000 + '{"seed": 1, "seed": 2}]}'
    yield "a key given twice after 400k requests", [make_case(f"{tmp}/many", raw_case=many)], "many/case.json: requests[400000].seed: given twice in one object$"
    yield "number overflowing a double", [make_case(f"{tmp}/overflow", raw_case='{"requests": [{"temperature": 1e999}]}')], "invalid JSON: [json.exception.out_of_range.406] number overflow"
    yield "JSON not an object", [make_case(f"{tmp}/array", raw_case="[1, 2]")], "top level: expected an object"
    yield "missing requests", [make_case(f"{tmp}/noreq", case={"logits_dtype": "float32"})], "requests: missing"
    yield "wrong field type", [make_case(f"{tmp}/type", case=req(top_p="x"))], 'requests[0].top_p: expected a number, got "x"'
    yield "unknown field", [make_case(f"{tmp}/unknown", case=req(topp=0.5))], "requests[0].topp: unknown request field"
    yield "bad logit_bias key", [make_case(f"{tmp}/bias_key", case=req(logit_bias={"a": 1.0}))], 'keys must be decimal token ids as str(int) writes them, got "a"'
    # Other spellings of token 3 would be other keys, their biases added up.
    yield "logit_bias key past int32", [make_case(f"{tmp}/bias_big", case=req(logit_bias={"2147483648": 1.0}))], 'keys must be token ids that fit int32, got "2147483648"'
    for name, key in (("space", " 3"), ("plus", "+3"), ("zero", "03"), ("minus_zero", "-0")):
        yield f"logit_bias key {key!r}", [make_case(f"{tmp}/bias_{name}", case=req(logit_bias={key: 1.0}))], f'keys must be decimal token ids as str(int) writes them, got "{key}"'
    yield "token id out of range", [make_case(f"{tmp}/oob", case=req(allowed_token_ids=[3, 16]))], "oob/case.json: request 0: allowed_token_ids[1] must be in [0, 16), got 16"
    yield "negative token id", [make_case(f"{tmp}/neg", case=req(output_token_ids=[-1]))], "request 0: output_token_ids[0] must be in [0, 16), got -1"
    yield "logit_bias out of range", [make_case(f"{tmp}/bias_oob", case=req(logit_bias={"99": 1.0}))], "request 0: logit_bias token_id must be in [0, 16), got 99"
    yield "parameter out of range", [make_case(f"{tmp}/range", case=req(top_p=1.5))], "request 0: top_p must be in (0, 1], got 1.5"
    yield "rows != requests", [make_case(f"{tmp}/rows", logits=np.zeros((3, 16), np.float32))], "3 rows for 2 requests"
    yield "dtype mismatch", [make_case(f"{tmp}/dtype", logits=np.zeros((2, 16), np.float16))], "dtype <f2 does not match logits_dtype float32"
    yield "unsupported dtype", [make_case(f"{tmp}/f64", logits=np.zeros((2, 16), np.float64))], "dtype must be <f4 (float32), <f2 (float16) or <u2 (bfloat16 bits), got <f8"
    yield "3-D logits", [make_case(f"{tmp}/3d", logits=np.zeros((2, 4, 4), np.float32))], "expected 2 dimensions [num_rows, vocab_size]"
    yield "truncated npy", [make_case(f"{tmp}/trunc", raw_logits=good[:-8])], "bytes, shape (2, 16) of <f4 needs 128"
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }"
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    huge = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header
    yield "huge shape", [make_case(f"{tmp}/huge", raw_logits=huge)], "is too large: each dimension must be < 2^31"
    deep = "[" * 200000 + "]" * 200000
    yield "deeply nested value", [make_case(f"{tmp}/deep", raw_case='{"requests": [{"temperature": ' + deep + '}]}')], "requests[0].temperature: expected a number, got an array"
    yield "binary in a key", [make_case(f"{tmp}/binkey", raw_case='{"requests": [{"x\\n\\u0001y": 1}]}')], "requests[0].x??y: unknown request field"
    bad_descr = b"{'descr': '<f4\n\x01zz', 'fortran_order': False, 'shape': (2, 16), }"
    bad_descr += b" " * (63 - (10 + len(bad_descr)) % 64) + b"\n"
    yield "binary descr", [make_case(f"{tmp}/descr", raw_logits=b"\x93NUMPY\x01\x00" + len(bad_descr).to_bytes(2, "little") + bad_descr)], "got <f4??zz"
    yield "not npy", [make_case(f"{tmp}/magic", raw_logits=b"hello world, not numpy")], "not a .npy file"
    yield "empty npy", [make_case(f"{tmp}/empty", raw_logits=b"")], "not a .npy file"
    yield "NaN logits", [make_case(f"{tmp}/nan", logits=nan_logits)], "nan/logits.npy: row 1: logits contain NaN at token_id 7"
    yield "+inf logits", [make_case(f"{tmp}/inf", logits=inf_logits)], "row 0: logits contain +inf at token_id 3"
    # The option, not case.json's field, is named.
    yield "bad logprobs mode", [make_case(f"{tmp}/mode"), "--logprobs-mode", "cooked"], "lastmile: error: --logprobs-mode: expected raw_logprobs, raw_logits, processed_logprobs or processed_logits, got 'cooked'$"
    yield "bad num_logprobs", [make_case(f"{tmp}/num"), "--num-logprobs", "-2"], "lastmile: error: --num-logprobs: must be -1 or in [0, 16], got -2$"
    yield "num_logprobs past the vocabulary", [make_case(f"{tmp}/num17"), "--num-logprobs", "17"], "lastmile: error: --num-logprobs: must be -1 or in [0, 16], got 17$"
    yield "unknown flag", [make_case(f"{tmp}/out"), "--out-override"], "not expected: --out-override"
    bad_order = b"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 16), }"
    bad_order += b" " * (63 - (10 + len(bad_order)) % 64) + b"\n"
    yield "fortran_order not a bool", [make_case(f"{tmp}/falsey", raw_logits=b"\x93NUMPY\x01\x00" + len(bad_order).to_bytes(2, "little") + bad_order)], "falsey/logits.npy: npy header: 'fortran_order' must be False or True, got Falsey$"
    odd_order = b"{'descr': '<f4', 'fortran_order': False x'shape': (2, 16), }"
    odd_order += b" " * (63 - (10 + len(odd_order)) % 64) + b"\n"
    yield "fortran_order followed by junk", [make_case(f"{tmp}/junk", raw_logits=b"\x93NUMPY\x01\x00" + len(odd_order).to_bytes(2, "little") + odd_order)], "junk/logits.npy: npy header: expected ',' or '}' after the value of 'fortran_order'$"
    def raw_npy(header):  # a version 1.0 file of that header, padded, and 128 data bytes
        header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
        return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 128
    # Read as the dict it is: a key's text inside another key's value is not that key.
    yield "descr inside a value", [make_case(f"{tmp}/inside", raw_logits=raw_npy(b"{'x': \"'descr': '<f4'\", 'descr': '>f8', 'fortran_order': False, 'shape': (2, 16), }"))], "inside/logits.npy: npy header: unexpected key 'x'$"
    yield "npy key twice", [make_case(f"{tmp}/twice", raw_logits=raw_npy(b"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 16), }"))], "twice/logits.npy: npy header: key 'descr' appears twice$"
    yield "npy key missing", [make_case(f"{tmp}/nokey", raw_logits=raw_npy(b"{'descr': '<f4', 'shape': (2, 16), }"))], "nokey/logits.npy: npy header has no 'fortran_order' entry$"
    # A 2-D shape with a dimension that is not a plain non-negative integer says so (it is not
    # a matter of rank); one past 12 digits is too large, as any past 2^31.
    for label, shape in [("negative", b"(2, -8)"), ("hex", b"(2, 0x8)"), ("float", b"(2, 8.0)"),
                         ("empty", b"(2,, 8)")]:
        yield f"npy shape {label}", [make_case(f"{tmp}/shape_{label}", raw_logits=raw_npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + b", }"))], f"shape_{label}/logits.npy: npy header: 'shape' must be a tuple of non-negative integers, got " + shape.decode() + "$"
    yield "npy shape of 20 digits", [make_case(f"{tmp}/shape_digits", raw_logits=raw_npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 9223372036854775808), }"))], "shape_digits/logits.npy: shape (2, 9223372036854775808) is too large: each dimension must be < 2^31$"
    yield "npy shape of rank 3", [make_case(f"{tmp}/shape_rank", raw_logits=raw_npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4, 4,), }"))], "shape_rank/logits.npy: expected 2 dimensions [num_rows, vocab_size], got shape (2, 4, 4,)$"
    other_shape = npy_bytes(np.zeros((4, 1000), np.float32))  # a header that declares 16000 bytes
    yield "data of another shape", [make_case(f"{tmp}/shape", raw_logits=other_shape[:128] + b"\0" * 64)], "shape/logits.npy: data holds 64 bytes, shape (4, 1000) of <f4 needs 16000$"
    if os.path.exists("/dev/zero"):  # a device never ends: refused, not read until memory runs out
        make_case(f"{tmp}/zero_npy")
        os.remove(f"{tmp}/zero_npy/logits.npy")
        os.symlink("/dev/zero", f"{tmp}/zero_npy/logits.npy")
        yield "logits.npy a device", [f"{tmp}/zero_npy"], "zero_npy/logits.npy: not a regular file"
        make_case(f"{tmp}/zero_json")
        os.remove(f"{tmp}/zero_json/case.json")
        os.symlink("/dev/zero", f"{tmp}/zero_json/case.json")
        yield "case.json a device", [f"{tmp}/zero_json"], "zero_json/case.json: not a regular file"
    if hasattr(os, "mkfifo"):  # opening a FIFO blocks until a writer comes: refused before opening
        make_case(f"{tmp}/fifo_npy")
        os.remove(f"{tmp}/fifo_npy/logits.npy")
        os.mkfifo(f"{tmp}/fifo_npy/logits.npy")
        yield "logits.npy a FIFO", [f"{tmp}/fifo_npy"], "fifo_npy/logits.npy: not a regular file$"
        make_case(f"{tmp}/fifo_json")
        os.remove(f"{tmp}/fifo_json/case.json")
        os.mkfifo(f"{tmp}/fifo_json/case.json")
        yield "case.json a FIFO", [f"{tmp}/fifo_json"], "fifo_json/case.json: not a regular file$"


def commands(tmp):
    case = make_case(f"{tmp}/good")
    out = f"{tmp}/cmd_out"
    os.makedirs(out)
    # The demo's options before a subcommand were accepted and ignored.
    # The names only (CLI11's transformer printed its map and took the enum's numbers as well).
    yield "unknown --backend", ["--backend", "gpu", "--steps", "1"], "lastmile: error: --backend: expected auto, cpu or reference, got 'gpu'$"
    yield "--backend as a number", ["run", case, "--out", out, "--backend", "1"], "lastmile: error: --backend: expected auto, cpu or reference, got '1'$"
    yield "--backend before run", ["--backend", "reference", "run", case, "--out", out], "--backend before 'run' is the demo's option; give it after the subcommand"
    yield "--threads before bench", ["--threads", "1", "bench", "--scenario", "nope"], "lastmile: error: --threads before 'bench' is the demo's option; give it after the subcommand$"
    # CLI11 alone reads 0x10 as 16 and 010 as 8; options are decimal (test_cli_decimal_options).
    yield "hex --num-logprobs", ["run", case, "--out", out, "--num-logprobs", "0x10"], "--num-logprobs: expected a decimal integer, got '0x10'$"
    yield "exponent --threads", ["bench", "--threads", "1e3", "--scenario", "nope"], "--threads: expected a decimal integer, got '1e3'$"
    yield "empty --json", ["bench", "--scenario", "greedy", "--json", ""], "--json: expected a path, got ''$"
    yield "--steps before run", ["--steps", "3", "run", case, "--out", out], "--steps before 'run' is the demo's option; the subcommand takes none"
    if os.path.exists("/dev/full"):  # a full disk shows when the file is flushed, not at <<
        full = f"{tmp}/full_out"
        os.makedirs(full)
        os.symlink("/dev/full", f"{full}/output.json")
        yield "output.json on a full disk", ["run", case, "--out", full], "full_out/output.json: write failed"
        full_npy = f"{tmp}/full_npy_out"
        os.makedirs(full_npy)
        os.symlink("/dev/full", f"{full_npy}/full_logprobs.npy")
        yield "full_logprobs.npy on a full disk", ["run", case, "--out", full_npy, "--num-logprobs", "-1"], "full_logprobs.npy: write failed"
        yield "demo to a full stdout", ["--steps", "1", ">", "/dev/full"], "lastmile: error: stdout: write failed$"
        yield "--help to a full stdout", ["--help", ">", "/dev/full"], "lastmile: error: stdout: write failed$"
        yield "--version to a full stdout", ["--version", ">", "/dev/full"], "lastmile: error: stdout: write failed$"


def main():
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        runs = [(name, [BINARY, "run", args[0], "--out", out] + args[1:], expected)
                for name, args, expected in cases(tmp)]
        runs += [(name, [BINARY] + args, expected) for name, args, expected in commands(tmp)]
        for name, cmd, expected in runs:
            stdout = subprocess.PIPE
            if cmd[-2] == ">":  # the command's stdout goes to that file
                stdout = open(cmd[-1], "w")
                cmd = cmd[:-2]
            try:
                p = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60)
            except subprocess.TimeoutExpired:
                failed += 1
                print(f"FAIL {name}: no answer in 60 s")
                continue
            lines = p.stderr.splitlines()
            problems = []
            if p.returncode != 2:
                problems.append(f"exit status {p.returncode}, expected 2")
            if p.stdout:
                problems.append(f"stdout not empty: {p.stdout[:200]!r}")
            if len(lines) != 1 or not lines[0].startswith("lastmile: error: "):
                problems.append(f"stderr is not one 'lastmile: error:' line: {p.stderr[:400]!r}")
            elif expected.endswith("$") and not lines[0].endswith(expected[:-1]):
                problems.append(f"message {lines[0]!r} does not end with {expected[:-1]!r}")
            elif not expected.endswith("$") and expected not in lines[0]:
                problems.append(f"message {lines[0]!r} lacks {expected!r}")
            if problems:
                failed += 1
                print(f"FAIL {name}: {'; '.join(problems)}")
            else:
                passed += 1
                print(f"PASS {name}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
