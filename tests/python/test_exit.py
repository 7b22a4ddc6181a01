"""Interpreter exit with lastmile in use (python/src/exit_gate.hpp): daemon threads in a call,
calls made during teardown, and forked children. Each script runs in its own interpreter and
must end with status 0, its expected output, and nothing on stderr."""

import subprocess
import sys

import pytest

PRELUDE = """
import atexit, os, sys, threading, time, warnings
# Python 3.12+ warns at os.fork() in a process with other threads (the sampler's workers among
# them); the forks here are the point of the tests.
warnings.filterwarnings("ignore", message=r".*use of fork\\(\\) may lead to deadlocks",
                        category=DeprecationWarning)
import numpy as np
import lastmile
x = np.random.default_rng(0).standard_normal((64, 128256)).astype(np.float32)
def sampling_forever():
    s = lastmile.Sampler(128256, 64, threads=1)
    while True:
        s.sample(x, [{"top_p": 0.9}] * 64)
def stepping_forever():
    b = lastmile.RequestBatch(128256, 64, threads=1)
    for i in range(64):
        b.add(str(i), {"top_p": 0.9})
    while True:
        b.step(x)
        b.request_ids()
"""


def run(script, expected):
    for _ in range(3):
        p = subprocess.run([sys.executable, "-c", PRELUDE + script], capture_output=True,
                           text=True, timeout=120)
        # Nor may nanobind report a stranded thread's sampler as the binding's leak.
        assert (p.returncode, p.stdout, p.stderr) == (0, expected, ""), p.stderr[-500:]


@pytest.mark.parametrize("work", ["sampling_forever", "stepping_forever"])
def test_exit_while_a_daemon_thread_is_in_a_call(work):
    # Python ends a daemon thread when it takes the GIL back at exit; inside the GIL release's
    # destructor (noexcept) that was std::terminate: SIGABRT and a core dump.
    run(f"""
threading.Thread(target={work}, daemon=True).start()
time.sleep(0.5)
print("exiting")
""", "exiting\n")


def test_a_call_during_teardown_runs():
    # After the gate closes, the finalizing thread's own calls keep the GIL; parking it would
    # hang the process (a __del__ at teardown, a call after atexit._run_exitfuncs()).
    run("""
b = lastmile.RequestBatch(16, 2, threads=1)
b.add("a", {})
class Cleanup:
    def __del__(self):
        b.remove("a")
        print("removed")
keep = Cleanup()
atexit._run_exitfuncs()
s = lastmile.Sampler(16, 1, threads=1)
print(int(s.sample(np.eye(1, 16, 3, dtype=np.float32), [{"temperature": 0.0}]).sampled_token_ids[0]))
""", "3\nremoved\n")


def test_a_forked_child_exits_while_the_parent_samples():
    # The child has the parent's count of calls in flight but none of their threads.
    run("""
threading.Thread(target=sampling_forever, daemon=True).start()
time.sleep(0.3)
pid = os.fork()
if pid == 0:
    print("child", flush=True)
    sys.exit(0)
_, status = os.waitpid(pid, 0)
print("parent", status)
""", "child\nparent 0\n")


@pytest.mark.parametrize("threads", [2, 3])
def test_a_forked_child_uses_and_deletes_the_parents_sampler(threads):
    # The child's copy has no workers (they stayed in the parent): it samples on the calling
    # thread, to the same tokens, and its destruction used to wait forever on a condition
    # variable the parent's workers were waiting on.
    run(f"""
s = lastmile.Sampler(128256, 64, threads={threads})
rows = [{{"top_p": 0.9, "seed": i}} for i in range(64)]
first = s.sample(x, rows).sampled_token_ids.tolist()
time.sleep(0.01)
pid = os.fork()
if pid == 0:
    same = all(s.sample(x, rows).sampled_token_ids.tolist() == first for _ in range(3))
    del s
    os._exit(0 if same else 1)
_, status = os.waitpid(pid, 0)
print("parent", status, s.sample(x, rows).sampled_token_ids.tolist() == first)
""", "parent 0 True\n")
