"""lastmile.Sampler from Python: numpy and torch inputs of every dtype, zero-copy, results against
hand-computed values, error mapping, and two threads sampling at once."""

import math
import re
import threading

import numpy as np
import pytest
import torch

import lastmile

VOCAB = 6
# Row 0 peaks at token 4, row 1 at token 1.
LOGITS = np.array([[0.0, 1.0, 0.5, -1.0, 3.0, 2.0], [1.0, 4.0, 0.0, 0.0, 2.0, -2.0]], np.float32)
GREEDY = [{"temperature": 0.0}, {"temperature": 0.0}]


def log_softmax(row):
    row = np.asarray(row, np.float64)
    m = row.max()
    return row - m - math.log(np.exp(row - m).sum())


def sampler(**kwargs):
    return lastmile.Sampler(VOCAB, 2, threads=1, seed=0, **kwargs)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_inputs_of_each_dtype(dtype):
    logits = torch.from_numpy(LOGITS).to(getattr(torch, dtype))
    out = sampler().sample(logits, GREEDY, num_logprobs=1)
    assert out.sampled_token_ids.tolist() == [4, 1]
    assert out.sampled_token_ids.dtype == np.int32
    # The logits are exact in every dtype here, so raw logprobs are the float32 ones.
    np.testing.assert_allclose(out.logprobs.logprobs[0, 0], log_softmax(LOGITS[0])[4], rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_numpy_inputs(dtype):
    out = sampler().sample(LOGITS.astype(dtype), GREEDY)
    assert out.sampled_token_ids.tolist() == [4, 1]


def test_numpy_bfloat16_arrays_of_ml_dtypes():
    # numpy has no bfloat16; ml_dtypes' (JAX's) is read through a uint16 view, in place.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    logits = LOGITS.astype(ml_dtypes.bfloat16)  # exact: these values fit bf16
    out = sampler().sample(logits, GREEDY, num_logprobs=1)
    assert out.sampled_token_ids.tolist() == [4, 1]
    np.testing.assert_allclose(out.logprobs.logprobs[0, 0], log_softmax(LOGITS[0])[4], rtol=1e-6)
    strided = np.zeros((2, VOCAB + 3), ml_dtypes.bfloat16)[:, :VOCAB]
    strided[:] = logits[::-1]
    assert sampler().sample(strided, GREEDY, dtype="bfloat16").sampled_token_ids.tolist() == [1, 4]
    batch = lastmile.RequestBatch(VOCAB, 2, threads=1, seed=0)
    batch.add("a", {"temperature": 0.0})
    batch.add("b", {"temperature": 0.0})
    assert batch.step(logits).sampled_token_ids.tolist() == [4, 1]
    with pytest.raises(ValueError, match="logits: dtype='float16' but the array holds bfloat16"):
        sampler().sample(logits, GREEDY, dtype="float16")
    with pytest.raises(ValueError, match="logits: dtype must be 'float32', 'float16' or 'bfloat16', "
                                         "got 'bf16'"):
        sampler().sample(logits, GREEDY, dtype="bf16")


def test_numpy_bfloat16_bit_patterns():
    bits = (LOGITS.view(np.uint32) >> 16).astype(np.uint16)  # exact: these values fit bf16
    out = sampler().sample(bits, GREEDY, dtype="bfloat16")
    assert out.sampled_token_ids.tolist() == [4, 1]
    with pytest.raises(ValueError, match="dtype must be float32, float16 or bfloat16"):
        sampler().sample(bits, GREEDY)


@pytest.mark.parametrize("make", [
    lambda: torch.from_numpy(LOGITS).to(torch.bfloat16),
    lambda: torch.from_numpy(LOGITS.copy()),
    lambda: np.ascontiguousarray(LOGITS),
])
def test_logits_are_read_in_place(make):
    logits = make()
    address = logits.data_ptr() if isinstance(logits, torch.Tensor) else logits.ctypes.data
    assert lastmile._lastmile.logits_address(logits) == address


def test_strided_rows_are_read_in_place_and_padding_ignored():
    padded = np.full((2, VOCAB + 3), np.nan, np.float32)
    padded[:, :VOCAB] = LOGITS
    view = padded[:, :VOCAB]
    assert lastmile._lastmile.logits_address(view) == padded.ctypes.data
    assert sampler().sample(view, GREEDY).sampled_token_ids.tolist() == [4, 1]


def test_params_objects_and_dicts_mix():
    params = lastmile.SamplingParams(temperature=0.0, logit_bias={2: 10.0})
    out = sampler().sample(LOGITS, [params, {"temperature": 0.0, "logit_bias": {"0": 10.0}}])
    assert out.sampled_token_ids.tolist() == [2, 0]


def test_top_n_explicit_ids_and_full_matrix():
    requests = [{"temperature": 0.0, "logprob_token_ids": [3, 0]}, {"temperature": 0.0}]
    out = sampler().sample(LOGITS, requests, num_logprobs=2)
    assert out.logprobs.token_ids.tolist() == [[4, 4, 5], [1, 1, 4]]
    assert out.logprobs.ranks.tolist() == [1, 1]
    t = out.token_logprobs
    assert t.token_ids.tolist() == [[4, 3, 0], [1, 0, 0]]
    assert t.valid.tolist() == [[True, True, True], [True, False, False]]
    assert t.logprobs[1, 1] == -np.inf
    np.testing.assert_allclose(t.logprobs[0, 1], log_softmax(LOGITS[0])[3], rtol=1e-6)
    full = sampler().sample(LOGITS, GREEDY, num_logprobs=-1, logprobs_mode="raw_logits")
    np.testing.assert_array_equal(full.full_logprobs, LOGITS)
    assert full.logprobs is None


def test_seeded_request_repeats_and_differs_across_steps():
    s = sampler()
    logits = np.zeros((1, VOCAB), np.float32)
    draws = [int(s.sample(logits, [{"seed": 7, "step": i}]).sampled_token_ids[0]) for i in range(40)]
    again = [int(s.sample(logits, [{"seed": 7, "step": i}]).sampled_token_ids[0]) for i in range(40)]
    assert draws == again
    assert len(set(draws)) > 1


def test_uniform_draws_fit_a_uniform_distribution():
    # 6000 seeded draws over 6 equal tokens: Pearson chi-square, 5 dof; reject at p < 1e-6
    # (critical value 35.9).
    s = lastmile.Sampler(VOCAB, 64, threads=1, seed=0)
    logits = np.zeros((60, VOCAB), np.float32)
    counts = np.zeros(VOCAB)
    for step in range(100):
        tokens = s.sample(logits, [{"seed": r, "step": step} for r in range(60)]).sampled_token_ids
        counts += np.bincount(tokens, minlength=VOCAB)
    expected = counts.sum() / VOCAB
    assert ((counts - expected) ** 2 / expected).sum() < 35.9


@pytest.mark.parametrize("request_fields, message", [
    ({"top_p": 1.5}, "request 1: top_p must be in (0, 1], got 1.5"),
    ({"temperature": -1.0}, "request 1: temperature must be finite and >= 0, got -1"),
    ({"allowed_token_ids": [9]}, "request 1: allowed_token_ids[0] must be in [0, 6), got 9"),
])
def test_invalid_requests_raise_invalid_argument(request_fields, message):
    with pytest.raises(lastmile.InvalidArgument) as e:
        sampler().sample(LOGITS, [{}, request_fields])
    assert str(e.value) == message
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("call, error, message", [
    (lambda s: s.sample(LOGITS[0], [{}]), ValueError,
     "logits: expected 2 dimensions [num_rows, vocab_size], got 1"),
    (lambda s: s.sample(LOGITS.astype(np.float64), GREEDY), ValueError,
     "logits: dtype must be float32, float16 or bfloat16 (or 16-bit integers with "
     "dtype='bfloat16'), got float64"),
    (lambda s: s.sample(LOGITS[:, ::2], GREEDY), ValueError,
     "logits: the vocabulary axis must be contiguous (stride 1), got stride 2"),
    (lambda s: s.sample(LOGITS, [{"temprature": 0.0}, {}]), lastmile.InvalidArgument,
     "request 0: unknown field 'temprature'"),
    (lambda s: s.sample(LOGITS, [{"top_k": "5"}, {}]), TypeError,
     "request 0: top_k must be an int, got str"),
    (lambda s: s.sample(LOGITS, [{"prompt_token_ids": [1, -2]}, {}]), lastmile.InvalidArgument,
     "request 0: prompt_token_ids[1] must be a token id in [0, 2^31), got -2"),
    (lambda s: s.sample(LOGITS, {"temperature": 0.0}), TypeError,
     "requests must be a list of SamplingParams or dicts, got dict"),
    (lambda s: s.sample(LOGITS, [{}, object()]), TypeError,
     "request 1: expected a lastmile.SamplingParams or a dict, got object"),
    (lambda s: s.sample(LOGITS.tolist(), GREEDY), TypeError,
     "logits: expected a 2-D CPU array [num_rows, vocab_size] of float32, float16 or bfloat16 "
     "(numpy, torch, or anything with __dlpack__ / the buffer protocol), got list"),
    (lambda s: s.sample(LOGITS, [{"logit_bias": {"a": 1.0}}, {}]), lastmile.InvalidArgument,
     "request 0: logit_bias keys must be token ids (ints or decimal strings), got 'a'"),
    (lambda s: s.sample(LOGITS, [{}]), lastmile.InvalidArgument,
     "batch: requests must hold one entry per logits row (2), got 1"),
    (lambda s: s.sample(np.full((2, VOCAB), np.nan, np.float32), GREEDY), lastmile.InvalidLogits,
     "row 0: logits contain NaN at token_id 0"),
    (lambda s: s.sample(LOGITS, GREEDY, logprobs_mode="raw"), lastmile.InvalidArgument,
     "logprobs_mode must be one of raw_logprobs, raw_logits, processed_logprobs, "
     "processed_logits, got 'raw'"),
])
def test_bad_inputs_raise_clear_errors(call, error, message):
    with pytest.raises(error) as e:
        call(sampler())
    assert str(e.value) == message


@pytest.mark.parametrize("call, error, message", [
    (lambda s: s.sample(LOGITS, GREEDY, num_logprobs=2**40), lastmile.InvalidArgument,
     "batch: num_logprobs must be -1 or in [0, 6], got 1099511627776"),
    (lambda s: s.sample(LOGITS, GREEDY, dtype=5), TypeError, "dtype must be a str or None, got int"),
    (lambda s: s.sample(np.zeros(2 * VOCAB * 4 + 2, np.uint8)[2:].view(np.float32).reshape(2, VOCAB),
                        GREEDY), lastmile.InvalidLogits,
     "logits: data must be aligned to its 4-byte f32 elements"),
    (lambda s: s.sample(LOGITS, GREEDY, predict_bonus_token="no"), TypeError,
     "predict_bonus_token must be a bool, got str"),
    (lambda s: s.sample(LOGITS, [{"allowed_token_ids": np.array([True] * VOCAB)}, {}]), TypeError,
     "request 0: allowed_token_ids must be token ids, not a bool mask, got ndarray"),
    (lambda s: s.sample(LOGITS, [{"allowed_token_ids": torch.ones(VOCAB, dtype=torch.bool)}, {}]),
     TypeError, "request 0: allowed_token_ids must be token ids, not a bool mask, got Tensor"),
    (lambda s: s.sample(LOGITS, [{"top_k": np.True_}, {}]), TypeError,
     f"request 0: top_k must be an int, got {type(np.True_).__name__}"),
    (lambda s: s.sample(LOGITS, [{"temperature": np.False_}, {}]), TypeError,
     f"request 0: temperature must be a number, got {type(np.False_).__name__}"),
    (lambda s: s.sample(LOGITS, [{"top_k": torch.tensor(True)}, {}]), TypeError,
     "request 0: top_k must be an int, got Tensor"),
    (lambda s: s.sample(LOGITS, [{"temperature": torch.tensor(False)}, {}]), TypeError,
     "request 0: temperature must be a number, got Tensor"),
    (lambda s: s.sample(LOGITS, [{"temperature": np.array([0.0, 1.0])}, {}]), TypeError,
     "request 0: temperature must be a number, got ndarray"),
    (lambda s: s.sample(LOGITS, [{"bad_words_token_ids": 3}, {}]), TypeError,
     "request 0: bad_words_token_ids must be a list of token-id lists, got int"),
    # An element of a bad word is named by both indices.
    (lambda s: s.sample(LOGITS, [{"bad_words_token_ids": [[1], [2, "x"]]}, {}]), TypeError,
     "request 0: bad_words_token_ids[1][1] must be an int, got str"),
    (lambda s: s.sample(LOGITS, [{"bad_words_token_ids": [[1], [True]]}, {}]), TypeError,
     "request 0: bad_words_token_ids[1][0] must be an int, got bool"),
    (lambda s: s.sample(LOGITS, [{"bad_words_token_ids": [[1], [2, 3, -1]]}, {}]),
     lastmile.InvalidArgument,
     "request 0: bad_words_token_ids[1][2] must be a token id in [0, 2^31), got -1"),
    (lambda s: s.sample(LOGITS, [{"bad_words_token_ids": [[1], 2]}, {}]), TypeError,
     "request 0: bad_words_token_ids[1] must be a sequence of ints, got int"),
    (lambda s: s.sample(LOGITS, [{"allowed_token_ids": np.array(3)}, {}]), TypeError,
     "request 0: allowed_token_ids must be a sequence of ints, got ndarray"),
    (lambda s: s.sample(LOGITS, GREEDY, logprobs_mode=5), TypeError,
     "logprobs_mode must be a str, got int"),
    # Bad values are lastmile.InvalidArgument (not a plain ValueError) and name their field.
    (lambda s: s.sample(LOGITS, [{"output_token_ids": [-1]}, {}]), lastmile.InvalidArgument,
     "request 0: output_token_ids[0] must be a token id in [0, 2^31), got -1"),
    (lambda s: s.sample(LOGITS, [{"stop_token_ids": [2**31]}, {}]), lastmile.InvalidArgument,
     "request 0: stop_token_ids[0] must be a token id in [0, 2^31), got 2147483648"),
    (lambda s: s.sample(LOGITS, [{"logit_bias": {-1: 1.0}}, {}]), lastmile.InvalidArgument,
     "request 0: logit_bias key must be a token id in [0, 2^31), got -1"),
    (lambda s: s.sample(LOGITS, [{"step": -1}, {}]), lastmile.InvalidArgument,
     "request 0: step must be >= 0, got -1"),
    (lambda s: s.sample(LOGITS, [{"top_k": 2**40}, {}]), lastmile.InvalidArgument,
     "request 0: top_k must fit int32, got 1099511627776"),
    (lambda s: s.sample(LOGITS, [{"temperature": 10**400}, {}]), lastmile.InvalidArgument,
     "request 0: temperature must be a finite number, got an int too large for a double"),
    (lambda s: s.sample(LOGITS, [{}, {"logit_bias": {1: -10**400}}]), lastmile.InvalidArgument,
     "request 1: logit_bias value must be a finite number, got an int too large for a double"),
    # DLPack has no negative bit: the memory of a lazily negated tensor holds -x.
    (lambda s: s.sample(torch.tensor(LOGITS)._neg_view(), GREEDY), ValueError,
     "logits: a torch tensor with its negative bit set (a lazy negation); call .resolve_neg() first"),
    # A lone surrogate has no UTF-8: named, not a RuntimeError('std::bad_cast').
    (lambda s: s.sample(LOGITS, [{"\ud800": 1.0}, {}]), lastmile.InvalidArgument,
     "request 0: unknown field '\\ud800'"),
    (lambda s: s.sample(LOGITS, [{"logit_bias": {"\ud800": 1.0}}, {}]), lastmile.InvalidArgument,
     "request 0: logit_bias keys must be token ids (ints or decimal strings), got '\\ud800'"),
    # __float__ raising other than TypeError: torch's ValueError for two elements, RuntimeError on
    # the meta device.
    (lambda s: s.sample(LOGITS, [{}, {"temperature": torch.tensor([0.5, 0.5])}]), TypeError,
     "request 1: temperature must be a number, got Tensor"),
    (lambda s: s.sample(LOGITS, [{}, {"top_p": torch.tensor(0.5, device="meta")}]), TypeError,
     "request 1: top_p must be a number, got Tensor"),
    # One-element arrays and complex scalars pass __index__ / __float__ but are no numbers.
    (lambda s: s.sample(LOGITS, [{"top_k": torch.tensor([2])}, {}]), TypeError,
     "request 0: top_k must be an int, got Tensor"),
    (lambda s: s.sample(LOGITS, [{"top_k": np.array([2])}, {}]), TypeError,
     "request 0: top_k must be an int, got ndarray"),
    (lambda s: s.sample(LOGITS, [{"temperature": torch.tensor([0.0])}, {}]), TypeError,
     "request 0: temperature must be a number, got Tensor"),
    (lambda s: s.sample(LOGITS, [{"temperature": np.array([0.5])}, {}]), TypeError,
     "request 0: temperature must be a number, got ndarray"),
    (lambda s: s.sample(LOGITS, [{"temperature": np.complex64(1 + 5j)}, {}]), TypeError,
     "request 0: temperature must be a number, got complex64"),
    (lambda s: s.sample(LOGITS, [{}, {"top_p": torch.tensor(0.5 + 0j)}]), TypeError,
     "request 1: top_p must be a number, got Tensor"),
    (lambda s: s.sample(LOGITS, [{"logit_bias": {1: np.array([1.0])}}, {}]), TypeError,
     "request 0: logit_bias value must be a number, got ndarray"),
    (lambda s: s.sample(LOGITS, [{"seed": torch.tensor([3])}, {}]), TypeError,
     "request 0: seed must be an int, got Tensor"),
    # Bytes iterate as small ints, a dict as its keys: neither is a list of ids.
    (lambda s: s.sample(LOGITS, [{"allowed_token_ids": b"\x01\x02"}, {}]), TypeError,
     "request 0: allowed_token_ids must be a sequence of ints, got bytes"),
    (lambda s: s.sample(LOGITS, [{"stop_token_ids": bytearray(b"\x01")}, {}]), TypeError,
     "request 0: stop_token_ids must be a sequence of ints, got bytearray"),
    (lambda s: s.sample(LOGITS, [{"allowed_token_ids": {1: "x", 2: "y"}}, {}]), TypeError,
     "request 0: allowed_token_ids must be a sequence of ints, got dict"),
    (lambda s: s.sample(LOGITS, [{}, {"prompt_token_ids": __import__("types").MappingProxyType(
        {1: 1})}]), TypeError, "request 1: prompt_token_ids must be a sequence of ints, got "
     "mappingproxy"),
    (lambda s: s.sample(LOGITS, [{"bad_words_token_ids": [[1], b"\x02"]}, {}]), TypeError,
     "request 0: bad_words_token_ids[1] must be a sequence of ints, got bytes"),
    (lambda s: s.sample(LOGITS, [{"bad_words_token_ids": {1: [2]}}, {}]), TypeError,
     "request 0: bad_words_token_ids must be a list of token-id lists, got dict"),
    # Lengths no history can have, refused before any room is made for them.
    (lambda s: s.sample(LOGITS, [{}, {"output_token_ids": range(2**62)}]), lastmile.InvalidArgument,
     "request 1: output_token_ids holds more than 2^31 - 1 token ids"),
    (lambda s: s.sample(LOGITS, [{}, {"prompt_token_ids": range(10**30)}]),
     lastmile.InvalidArgument, "request 1: prompt_token_ids holds more than 2^31 - 1 token ids"),
    # Keys that int() reads alike would add two biases to one token (vLLM keeps one).
    (lambda s: s.sample(LOGITS, [{}, {"logit_bias": {"03": 4.0, "+3": 4.0}}]),
     lastmile.InvalidArgument,
     "request 1: logit_bias names token_id 3 twice (keys that int() reads alike)"),
    (lambda s: s.sample(LOGITS, [{"logit_bias": {3: -300.0, "3": 100.0}}, {}]),
     lastmile.InvalidArgument,
     "request 0: logit_bias names token_id 3 twice (keys that int() reads alike)"),
    # An echoed key is cut to one short line.
    (lambda s: s.sample(LOGITS, [{"logit_bias": {"7" * 5000 + "x": 1.0}}, {}]),
     lastmile.InvalidArgument,
     "request 0: logit_bias keys must be token ids (ints or decimal strings), got '" + "7" * 59
     + "..."),
    # numpy's byte strides that are not whole elements (a record's field): DLPack cannot say them.
    (lambda s: s.sample(np.zeros((2, VOCAB), dtype=[("a", "<f4"), ("b", "<u2")])["a"], GREEDY),
     TypeError,
     "logits: strides (36, 6) (bytes) are not whole 4-byte elements; pass "
     "numpy.ascontiguousarray(logits)"),
])
def test_misused_arguments_name_their_field(call, error, message):
    with pytest.raises(error) as e:
        call(sampler())
    assert str(e.value) == message


def test_zero_d_numeric_tensors_are_taken_as_numbers():
    out = sampler().sample(LOGITS, [{"top_k": torch.tensor(1), "temperature": torch.tensor(0.5),
                                     "seed": np.int64(3)}, {"top_k": np.int32(1)}])
    np.testing.assert_array_equal(out.sampled_token_ids, LOGITS.argmax(axis=1))


def test_no_rows_still_give_the_full_matrix_asked_for():
    out = sampler().sample(np.zeros((0, VOCAB), np.float32), [], num_logprobs=-1)
    assert out.full_logprobs.shape == (0, VOCAB) and out.full_logprobs.dtype == np.float32
    assert sampler().sample(np.zeros((0, VOCAB), np.float32), []).full_logprobs is None


def test_greedy_is_decided_on_the_double_temperature():
    # 9.9999999e-06 < 1e-5 is greedy (vLLM, the case reader), though it rounds to 1e-5f: its
    # processed logits are the logits, not the logits / 1e-5 of a sampled row.
    s = lastmile.Sampler(VOCAB, 2, "processed_logits", threads=1, seed=0)
    out = s.sample(LOGITS, [{"temperature": 9.9999999e-06}, {"temperature": 1e-5}], num_logprobs=-1)
    np.testing.assert_array_equal(out.full_logprobs[0], LOGITS[0])
    np.testing.assert_allclose(out.full_logprobs[1], LOGITS[1] / np.float32(1e-5), rtol=1e-6)


def test_sampling_params_refuse_a_misspelled_field():
    params = lastmile.SamplingParams(temperature=0.5)
    params.top_k = 3
    with pytest.raises(AttributeError, match="SamplingParams has no field 'temprature'"):
        params.temprature = 0.0
    assert params.temperature == 0.5 and params.top_k == 3


def test_wrong_object_is_a_type_error():
    with pytest.raises(TypeError):
        sampler().sample("not an array", GREEDY)


def test_bad_config():
    with pytest.raises(lastmile.InvalidArgument, match="config: vocab_size must be >= 1, got 0"):
        lastmile.Sampler(0, 1)
    with pytest.raises(TypeError, match="vocab_size must be an int, got float"):
        lastmile.Sampler(4.7, 1)
    with pytest.raises(lastmile.InvalidArgument, match="seed must fit 64 bits"):
        lastmile.Sampler(4, 1, seed=2**64)
    with pytest.raises(lastmile.InvalidArgument, match="max_batch must fit int64, got 18446744073709551616"):
        lastmile.Sampler(4, 2**64)
    # One rule for every int, whether or not it fits the C++ field.
    for threads in (1025, -1, 2**40):
        with pytest.raises(lastmile.InvalidArgument, match=re.escape(
                "config: threads must be in [0, 1024] (0: hardware concurrency), "
                f"got {threads}")):
            lastmile.Sampler(4, 1, threads=threads)
    # Negative seeds are their two's complement, as in the case reader.
    a = lastmile.Sampler(VOCAB, 2, seed=-5, threads=1).sample(LOGITS, [{}, {}])
    b = lastmile.Sampler(VOCAB, 2, seed=2**64 - 5, threads=1).sample(LOGITS, [{}, {}])
    np.testing.assert_array_equal(a.sampled_token_ids, b.sampled_token_ids)


def test_integers_too_long_to_print_are_named_by_width():
    # str() refuses ints over 4300 digits: the message gives the width, not a ValueError about it.
    huge = 10**5000
    bits = huge.bit_length()
    with pytest.raises(lastmile.InvalidArgument,
                       match=f"threads must be in .*, got an integer of {bits} bits"):
        lastmile.Sampler(4, 1, threads=huge)
    with pytest.raises(lastmile.InvalidArgument,
                       match=f"seed must fit 64 bits, got a negative integer of {bits} bits"):
        lastmile.Sampler(4, 1, seed=-huge)
    with pytest.raises(lastmile.InvalidArgument,
                       match=f"num_logprobs must be -1 or in .*, got an integer of {bits} bits"):
        sampler().sample(LOGITS, GREEDY, num_logprobs=huge)
    with pytest.raises(lastmile.InvalidArgument,
                       match=f"top_k does not fit 64 bits, got an integer of {bits} bits"):
        sampler().sample(LOGITS, [{"top_k": huge}, {}])
    with pytest.raises(lastmile.InvalidArgument,
                       match=f"seed must fit 64 bits, got a negative integer of {bits} bits"):
        sampler().sample(LOGITS, [{"seed": -huge}, {}])
    # Up to 128 bits, the digits.
    with pytest.raises(lastmile.InvalidArgument, match=f"top_k does not fit 64 bits, got {2**100}"):
        sampler().sample(LOGITS, [{"top_k": 2**100}, {}])


def test_two_threads_sample_at_once_on_their_own_samplers():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(8, 4096)).astype(np.float32)
    requests = [{"top_p": 0.9, "seed": i} for i in range(8)]
    expected = lastmile.Sampler(4096, 8, threads=1, seed=0).sample(logits, requests)
    results, errors = {}, []

    def work(name):
        try:
            s = lastmile.Sampler(4096, 8, threads=1, seed=0)
            results[name] = [s.sample(logits, requests).sampled_token_ids for _ in range(50)]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for runs in results.values():
        for tokens in runs:
            np.testing.assert_array_equal(tokens, expected.sampled_token_ids)


def test_threads_sharing_one_sampler_take_turns():
    s = lastmile.Sampler(VOCAB, 2, threads=1, seed=0)
    outs, errors = [], []

    def work():
        try:
            for _ in range(200):
                outs.append(s.sample(LOGITS, GREEDY).sampled_token_ids.tolist())
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and all(o == [4, 1] for o in outs)


@pytest.mark.parametrize("make", [
    list,
    lambda ids: np.array(ids, np.int64),
    lambda ids: np.array(ids, np.int32),
    lambda ids: np.repeat(np.array(ids, np.int64), 2)[::2],  # strided
    lambda ids: torch.tensor(ids),
])
def test_token_id_arrays_read_as_lists(make):
    # Repetition 4 on tokens 4 and 5 moves row 0's argmax (3.0 -> 0.75) to token 1.
    request = {"temperature": 0.0, "repetition_penalty": 4.0, "prompt_token_ids": make([4, 5])}
    out = sampler().sample(LOGITS, [request, {"temperature": 0.0}])
    assert out.sampled_token_ids.tolist() == [1, 1]


def test_bad_token_id_arrays():
    with pytest.raises(lastmile.InvalidArgument,
                       match=r"prompt_token_ids\[1\] must be a token id in \[0, 2\^31\), got -2"):
        sampler().sample(LOGITS, [{"prompt_token_ids": np.array([1, -2])}, {}])
    with pytest.raises(TypeError, match=r"prompt_token_ids\[0\] must be an int, got float64"):
        sampler().sample(LOGITS, [{"prompt_token_ids": np.array([1.0])}, {}])
