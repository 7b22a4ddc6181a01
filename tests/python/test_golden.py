"""The golden cases through the Python runner (python -m lastmile.run): check.py must pass all."""

import subprocess
import sys


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
