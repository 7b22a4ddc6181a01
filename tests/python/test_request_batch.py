"""lastmile.RequestBatch from Python: state kept across steps, equal to the stateless sampler."""

import threading
from types import MappingProxyType

import numpy as np
import pytest

import lastmile

LOGITS = np.array([[0.0, 3.0, 0.0]], np.float32)


def test_frequency_penalty_accumulates_across_steps():
    batch = lastmile.RequestBatch(3, 1, threads=1, seed=0)
    batch.add("a", lastmile.SamplingParams(temperature=0.0, frequency_penalty=2.0))
    tokens = [int(batch.step(LOGITS).sampled_token_ids[0]) for _ in range(3)]
    assert tokens == [1, 1, 0]  # 3, then 3 - 2 = 1 > 0, then 3 - 4 < 0
    assert batch.output_token_ids("a") == [1, 1, 0]


def test_equals_the_stateless_sampler_on_the_same_history():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 50)).astype(np.float32)
    params = {"top_k": 10, "repetition_penalty": 1.3, "presence_penalty": 0.5, "seed": 3}
    batch = lastmile.RequestBatch(50, 2, threads=1, seed=0)
    batch.add("x", params, prompt_token_ids=[1, 2, 3])
    batch.add("y", dict(params, seed=4), prompt_token_ids=[4])
    stateless = lastmile.Sampler(50, 2, threads=1, seed=0)
    for _ in range(5):
        history = {i: batch.output_token_ids(i) for i in ("x", "y")}
        expected = stateless.sample(logits, [
            dict(params, prompt_token_ids=[1, 2, 3], output_token_ids=history["x"]),
            dict(params, seed=4, prompt_token_ids=[4], output_token_ids=history["y"])])
        got = batch.step(logits)
        np.testing.assert_array_equal(got.sampled_token_ids, expected.sampled_token_ids)


def test_any_mapping_is_read_as_a_dict():
    # The extension reads a non-dict by attribute: a mapping's fields would all be neutral.
    params = MappingProxyType({"temperature": 0.0, "allowed_token_ids": [0]})
    batch = lastmile.RequestBatch(3, 1, threads=1, seed=0)
    batch.add("a", params)
    assert int(batch.step(LOGITS).sampled_token_ids[0]) == 0  # 1 without the whitelist
    with pytest.raises(lastmile.InvalidArgument, match="temprature"):
        batch.add("b", MappingProxyType({"temprature": 0.0}))
    sampler = lastmile.Sampler(3, 1, threads=1, seed=0)
    assert int(sampler.sample(LOGITS, [params]).sampled_token_ids[0]) == 0


def test_a_request_id_without_utf8_is_named():
    batch = lastmile.RequestBatch(3, 1, threads=1, seed=0)
    with pytest.raises(lastmile.InvalidArgument,
                       match=r"add: request_id must be valid UTF-8, got '\\ud800'"):
        batch.add("\ud800", {})


def test_a_request_id_with_nul_is_refused_and_shown():
    # what() is read as a C string: a raw NUL would cut the message at the id.
    batch = lastmile.RequestBatch(3, 1, threads=1, seed=0)
    with pytest.raises(lastmile.InvalidArgument,
                       match=r"^request 'x\\0y': request_id must not hold a NUL byte$"):
        batch.add("x\0y", {})
    with pytest.raises(lastmile.InvalidArgument,  # refused before a bad field is named
                       match=r"^request 'x\\0y': request_id must not hold a NUL byte$"):
        batch.add("x\0y", {"top_p": "x"})
    batch.add("x", {})
    with pytest.raises(lastmile.InvalidArgument,
                       match=r"^request 'x\\0q': no such request_id in the batch$"):
        batch.output_token_ids("x\0q")


def test_add_remove_reorder_and_errors():
    batch = lastmile.RequestBatch(3, 2, threads=1, seed=0)
    batch.add("a", {"temperature": 0.0})
    batch.add("b", {"temperature": 0.0})
    batch.reorder(["b", "a"])
    assert batch.request_ids() == ["b", "a"] and len(batch) == 2
    with pytest.raises(TypeError, match="request_ids must be a sequence of str, got str"):
        batch.reorder("ab")  # not the ids "a" and "b"
    with pytest.raises(TypeError, match="request_ids must be a sequence of str, got NoneType"):
        batch.reorder(None)
    batch.remove("b")
    assert batch.request_ids() == ["a"]
    with pytest.raises(lastmile.InvalidArgument, match="request 'a': request_id is already in the batch"):
        batch.add("a", {})
    with pytest.raises(lastmile.InvalidArgument, match="add: request_id must not be empty"):
        batch.add("", {})
    with pytest.raises(lastmile.InvalidArgument, match="request 'z': no such request_id in the batch"):
        batch.remove("z")
    with pytest.raises(lastmile.InvalidArgument,
                       match="output_token_ids, spec_token_ids and step are kept by the batch"):
        batch.add("c", {"output_token_ids": [1]})
    # Ids that are not strs, and counts past int64, name their call and field (not nanobind's
    # list of signatures).
    with pytest.raises(TypeError, match="add: request_id must be a str, got int"):
        batch.add(5, {})
    with pytest.raises(TypeError, match="remove: request_id must be a str, got int"):
        batch.remove(5)
    with pytest.raises(TypeError, match="reorder: request_id must be a str, got int"):
        batch.reorder([5])
    with pytest.raises(lastmile.InvalidArgument,
                       match="request 'c': max_output_tokens must fit int64, got 18446744073709551616"):
        batch.add("c", {}, max_output_tokens=2**64)
    assert batch.request_ids() == ["a"]
    with pytest.raises(lastmile.InvalidArgument,
                       match=r"step: logits.num_rows must equal size\(\) = 1, got 2"):
        batch.step(np.zeros((2, 3), np.float32))  # one request, two rows


def test_max_output_tokens_reserves_and_is_checked():
    batch = lastmile.RequestBatch(8, 1, threads=1, seed=0)
    batch.add("a", {"seed": 1, "frequency_penalty": 0.5}, max_output_tokens=4)
    logits = np.zeros((1, 8), np.float32)
    for _ in range(10):  # past the reservation: storage grows
        batch.step(logits)
    assert len(batch.output_token_ids("a")) == 10
    message = r"request 'b': max_output_tokens must be in \[0, 2147483647\], got -1"
    with pytest.raises(lastmile.InvalidArgument, match=message):
        lastmile.RequestBatch(8, 1, threads=1).add("b", {}, max_output_tokens=-1)


def test_one_thread_steps_while_another_reads_the_batch():
    # Every method takes the batch's lock with the GIL released: no lock-order deadlock.
    batch = lastmile.RequestBatch(3, 1, threads=1, seed=0)
    batch.add("a", {"temperature": 1.0})
    logits = np.zeros((1, 3), np.float32)
    errors = []

    def stepping():
        try:
            for _ in range(2000):
                batch.step(logits)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def reading():
        try:
            for _ in range(2000):
                assert len(batch) == 1 and batch.request_ids() == ["a"]
                batch.output_token_ids("a")
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=stepping), threading.Thread(target=reading)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert not errors
    assert len(batch.output_token_ids("a")) == 2000
