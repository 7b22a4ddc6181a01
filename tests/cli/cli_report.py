"""The end of a CLI test script: each problem on a FAIL line, then "NAME: passed" or "NAME: failed"
(the line ctest's PASS_REGULAR_EXPRESSION looks for), and the exit status."""
import sys


def finish(name, problems):
    for problem in problems:
        print(f"FAIL {problem}")
    print(f"{name}: " + ("passed" if not problems else "failed"))
    sys.exit(1 if problems else 0)
