"""The golden cases through the Python runner (python -m lastmile.run): check.py must pass all."""

import json
import subprocess
import sys

import numpy as np
import pytest


def test_check_py_passes_through_the_python_runner(golden, tmp_path):
    runner = f"{sys.executable} -m lastmile.run {{case}} --out {{out}}"
    done = subprocess.run(
        [sys.executable, str(golden / "check.py"), "--runner", runner, str(golden / "cases")],
        capture_output=True, text=True, cwd=tmp_path, timeout=1200)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert last.endswith(" passed, 0 failed"), last


def test_runner_reports_a_bad_case_in_one_line(tmp_path):
    (tmp_path / "case").mkdir()
    (tmp_path / "case" / "case.json").write_text("{")
    done = subprocess.run([sys.executable, "-m", "lastmile.run", str(tmp_path / "case"), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.startswith("lastmile.run: error: ")
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name, spec, logits, message", [
    ("one_dimensional", {"requests": [{}]}, np.zeros(4, np.float32),
     "logits.npy: expected 2 dimensions [num_rows, vocab_size], got 1"),
    ("a_list_not_an_object", [], np.zeros((1, 4), np.float32),
     "case.json: expected an object with a list of requests"),
    ("dtype_mismatch", {"requests": [{}], "logits_dtype": "float32"}, np.zeros((1, 4), np.float16),
     "logits.npy: dtype float16 does not match logits_dtype float32"),
    ("empty_npy", {"requests": [{}]}, None, ""),
    # As the CLI: an unknown case field and a predict_bonus_token that is not a bool are refused,
    # and so are requests the CLI's reader refuses.
    ("unknown_case_field", {"requests": [{}], "foo": 1}, np.zeros((1, 4), np.float32),
     "case.json: foo: unknown case field"),
    ("bonus_not_a_bool", {"requests": [{}], "predict_bonus_token": "yes"},
     np.zeros((1, 4), np.float32), "case.json: predict_bonus_token: expected true or false, got 'yes'"),
    ("request_step", {"requests": [{"step": 3}]}, np.zeros((1, 4), np.float32),
     "case.json: requests[0].step: unknown request field"),
    ("request_null", {"requests": [{"temperature": None}]}, np.zeros((1, 4), np.float32),
     "case.json: requests[0].temperature: expected a value, got null"),
    ("request_pairs", {"requests": [[["temperature", 0.0]]]}, np.zeros((1, 4), np.float32),
     "case.json: requests[0]: expected an object, got list"),
    ("bias_key_underscore", {"requests": [{"logit_bias": {"1_0": 1.0}}]},
     np.zeros((1, 4), np.float32),
     "case.json: requests[0].logit_bias: keys must be decimal token ids as str(int) writes them, "
     "got '1_0'"),
    ("bias_key_leading_zero", {"requests": [{"logit_bias": {"01": 1.0}}]},
     np.zeros((1, 4), np.float32),
     "case.json: requests[0].logit_bias: keys must be decimal token ids as str(int) writes them, "
     "got '01'"),
    ("bias_not_an_object", {"requests": [{"logit_bias": [1, 2]}]}, np.zeros((1, 4), np.float32),
     "case.json: requests[0].logit_bias: expected an object of token id -> bias, got list"),
])
def test_runner_reports_malformed_cases_in_one_line(tmp_path, name, spec, logits, message):
    case = tmp_path / name
    case.mkdir()
    (case / "case.json").write_text(json.dumps(spec))
    if logits is None:
        (case / "logits.npy").write_bytes(b"")
    else:
        np.save(case / "logits.npy", logits)
    done = subprocess.run([sys.executable, "-m", "lastmile.run", str(case), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("lastmile.run: error: " + message)
    assert len(done.stderr.strip().splitlines()) == 1


def _npy(array: np.ndarray) -> bytes:
    import io
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _raw_npy(header: bytes) -> bytes:  # a version 1.0 file of that header and 16 data bytes
    header = header.ljust(117) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 16


@pytest.mark.parametrize("name, case_json, npy, message", [
    # As the CLI: a key given twice is refused, not read as its last value.
    ("key_twice", b'{"requests": [{"temperature": 0.0, "temperature": 1.0}]}', None,
     "case.json: temperature: given twice in one object"),
    # JSON and npy errors name their file, and the cause.
    ("empty_case", b"", None, "case.json: not valid JSON: Expecting value"),
    ("deep_case", b"[" * 100000 + b"]" * 100000, None, "case.json: nested too deeply"),
    ("bad_magic", b'{"requests": [{}]}', b"\x93NUMPX\x01\x00" + b"\0" * 100,
     "logits.npy: not a .npy file (bad magic)"),
    ("truncated_npy", b'{"requests": [{}, {}]}', _npy(np.zeros((2, 8), np.float32))[:-8],
     "logits.npy: data holds 56 bytes, shape (2, 8) of <f4 needs 64"),
    # A header's shape is checked against the file before numpy allocates for it (14.6 TiB).
    ("huge_npy", b'{"requests": [{}]}',
     _raw_npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4000000000000), }"),
     "logits.npy: data holds 16 bytes, shape (1, 4000000000000) of <f4 needs 16000000000000"),
    ("case_not_utf8", b'{"requests": [{"\xff": 1}]}', None, "case.json: not UTF-8: "),
], ids=lambda value: value if isinstance(value, str) and len(value) < 40 else "")
def test_runner_names_the_file_of_unreadable_input(tmp_path, name, case_json, npy, message):
    case = tmp_path / name
    case.mkdir()
    (case / "case.json").write_bytes(case_json)
    (case / "logits.npy").write_bytes(npy if npy is not None else _npy(np.zeros((1, 4), np.float32)))
    done = subprocess.run([sys.executable, "-m", "lastmile.run", str(case), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("lastmile.run: error: " + message), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_runner_skips_a_byte_order_mark_as_the_cli_does(tmp_path):
    case = tmp_path / "bom"
    case.mkdir()
    (case / "case.json").write_bytes(b"\xef\xbb\xbf" + json.dumps({"requests": [{"temperature": 0.0}]}).encode())
    np.save(case / "logits.npy", np.array([[0.0, 2.0, 1.0]], np.float32))
    done = subprocess.run([sys.executable, "-m", "lastmile.run", str(case), "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "output.json").read_text())["sampled"] == [1]
