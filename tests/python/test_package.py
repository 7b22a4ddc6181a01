"""The package ships what it promises: stubs that match the module, docstrings, py.typed, and
docstring examples that run."""

import doctest
import importlib.resources
import inspect

import lastmile
import lastmile.vllm
from lastmile import _lastmile


def test_stub_names_match_the_module():
    stub = importlib.resources.files("lastmile").joinpath("_lastmile.pyi").read_text()
    stubbed = {line.split()[1].split("(")[0].rstrip(":") for line in stub.splitlines()
               if line.startswith(("class ", "def "))}
    stubbed |= {line.split(":")[0] for line in stub.splitlines()  # module attributes
                if line[:1].isalpha() and line.split(":")[0].isidentifier()}
    bound = {n for n in dir(_lastmile) if not n.startswith("_")}
    assert stubbed == bound


def test_py_typed_ships():
    assert importlib.resources.files("lastmile").joinpath("py.typed").is_file()


def test_public_api_is_documented():
    for name in lastmile.__all__:
        assert inspect.getdoc(getattr(lastmile, name)), name
    for method in ("sample",):
        assert "Parameters" in inspect.getdoc(getattr(lastmile.Sampler, method))


def test_docstring_examples_run():
    for module in (lastmile, lastmile.vllm):
        failed, tried = doctest.testmod(module)
        assert tried > 0 and failed == 0, module.__name__


def test_readme_python_example_is_current_and_prints_what_it_says():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    source = (root / "examples" / "python_example.py").read_text().strip()
    readme = (root / "README.md").read_text()
    assert f"```python\n{source}\n```" in readme
    printed = readme.split(f"```python\n{source}\n```", 1)[1].split("```\n", 2)[1]
    done = subprocess.run([sys.executable, str(root / "examples" / "python_example.py")],
                          capture_output=True, text=True, check=True)
    assert done.stdout == printed


def test_bench_runs_where_top_k_is_past_the_vocabulary(capsys):
    # top-k 50 over 10 tokens is no top-k, as in vLLM's batch (spec §1.3): the torch baseline
    # indexed column -50 and raised IndexError.
    import lastmile.bench
    assert lastmile.bench.main(["--vocab", "10", "--batch", "2", "--scenario", "topk_topp"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("topk_topp")
