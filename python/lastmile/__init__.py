"""lastmile: vLLM V1's sampler as a C++20 library, from Python.

Turns a batch of logits ``[num_rows, vocab_size]`` into token ids and logprobs with vLLM's
pipeline (``../shared/spec/sampler.md``): whitelists, bad words, min_tokens, logit_bias,
penalties, temperature, min_p, top-k / top-p, a seeded draw, top-N and explicit-id logprobs.

Examples
--------
>>> import numpy as np, lastmile
>>> sampler = lastmile.Sampler(vocab_size=4, max_batch=2)
>>> logits = np.array([[0, 3, 1, 0], [2, 0, 0, 1]], dtype=np.float32)
>>> out = sampler.sample(logits, [{"temperature": 0.0}, lastmile.SamplingParams(temperature=0.0)])
>>> out.sampled_token_ids.tolist()
[1, 0]
"""

from __future__ import annotations

import atexit
import collections.abc as abc
import numbers
import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from . import _lastmile
from ._lastmile import Error, InvalidArgument, InvalidLogits, Unsupported
from ._params import SamplingParams

# Before the interpreter finalizes, calls in flight on daemon threads take the GIL back (else
# the process aborts) and later ones park: python/src/exit_gate.hpp.
atexit.register(_lastmile._close_for_exit)

__version__ = _lastmile.__version__
__all__ = [
    "Error",
    "InvalidArgument",
    "InvalidLogits",
    "Logprobs",
    "RequestBatch",
    "Sampler",
    "SamplerOutput",
    "SamplingParams",
    "TokenLogprobs",
    "Unsupported",
]

Request = Union[SamplingParams, Mapping[str, Any]]

_MODES = ("raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits")


@dataclass(frozen=True)
class Logprobs:
    """Top-N logprobs of every row, read from the active logprobs mode.

    Attributes
    ----------
    token_ids : numpy.ndarray
        int32 ``[num_rows, N + 1]``; column 0 is the sampled token, then the N largest.
    logprobs : numpy.ndarray
        float32 ``[num_rows, N + 1]``.
    ranks : numpy.ndarray
        int64 ``[num_rows]``: entries ``>=`` the sampled token's (the top token has rank 1).
    """

    token_ids: np.ndarray
    logprobs: np.ndarray
    ranks: np.ndarray


@dataclass(frozen=True)
class TokenLogprobs(Logprobs):
    """Logprobs of explicitly requested ids (``logprob_token_ids``), beside the sampled token.

    Attributes
    ----------
    valid : numpy.ndarray
        bool ``[num_rows, M + 1]``; padding columns hold id 0, ``-inf`` and ``False``.
    """

    valid: np.ndarray = None  # type: ignore[assignment]


@dataclass(frozen=True)
class SamplerOutput:
    """What one sampling step returns; arrays are the caller's (copies of the sampler's buffers).

    Attributes
    ----------
    sampled_token_ids : numpy.ndarray
        int32 ``[num_rows]``.
    logprobs : Logprobs or None
        Present when ``num_logprobs >= 0`` (top-N plus the sampled token).
    token_logprobs : TokenLogprobs or None
        Present when any request has ``logprob_token_ids``.
    full_logprobs : numpy.ndarray or None
        float32 ``[num_rows, vocab_size]`` when ``num_logprobs == -1``.
    """

    sampled_token_ids: np.ndarray
    logprobs: Optional[Logprobs]
    token_logprobs: Optional[TokenLogprobs]
    full_logprobs: Optional[np.ndarray]


def _output(raw: dict) -> SamplerOutput:
    top = raw["logprobs"]
    ids = raw["token_logprobs"]
    return SamplerOutput(
        sampled_token_ids=raw["sampled_token_ids"],
        logprobs=None if top is None else Logprobs(*top),
        token_logprobs=None
        if ids is None
        else TokenLogprobs(token_ids=ids[0], logprobs=ids[1], valid=ids[2], ranks=ids[3]),
        full_logprobs=raw["full_logprobs"],
    )


def _check_mode(name: str, mode: str) -> str:
    if not isinstance(mode, str):
        raise TypeError(f"{name} must be a str, got {type(mode).__name__}")
    if mode not in _MODES:
        raise InvalidArgument(f"{name} must be one of {', '.join(_MODES)}, got {mode!r}")
    return mode


def _check_dtype(dtype: Any) -> None:
    # Else nanobind's "incompatible function arguments" would be reported as a logits error.
    if dtype is not None and not isinstance(dtype, str):
        raise TypeError(f"dtype must be a str or None, got {type(dtype).__name__}")


def _shown(value: int) -> str:
    """An int for a message: its digits, or past 128 bits its width (str() refuses ints over 4300
    digits, which would turn the message into a ValueError about the conversion)."""
    if value.bit_length() <= 128:
        return str(value)
    return f"{'a negative' if value < 0 else 'an'} integer of {value.bit_length()} bits"


def _integer(name: str, value: Any, bits: Optional[int] = 64) -> int:
    """value as an int that fits a signed `bits`-bit integer (None: any; the caller checks)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if bits is not None and not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise InvalidArgument(f"{name} must fit int{bits}, got {_shown(value)}")
    return value


def _check_id(call: str, request_id: Any) -> str:
    # Else nanobind's "incompatible function arguments" would list signatures, naming nothing.
    if not isinstance(request_id, str):
        raise TypeError(f"{call}: request_id must be a str, got {type(request_id).__name__}")
    try:
        request_id.encode("utf-8")  # else nanobind refuses it with its signature list
    except UnicodeEncodeError:
        raise InvalidArgument(f"{call}: request_id must be valid UTF-8, got {request_id!r}") \
            from None
    if call == "add" and "\0" in request_id:  # before its fields, whose errors name the id
        shown = request_id.replace("\0", "\\0")
        raise InvalidArgument(f"request '{shown}': request_id must not hold a NUL byte")
    return request_id


def _config(vocab_size, max_batch, logprobs_mode, threads, seed, backend):
    _check_mode("logprobs_mode", logprobs_mode)
    threads = 0 if threads is None else _integer("threads", threads, None)
    if not 0 <= threads <= _lastmile.MAX_THREADS:  # the C++ rule, also for ints past int32
        raise InvalidArgument(f"config: threads must be in [0, {_lastmile.MAX_THREADS}] "
                              f"(0: hardware concurrency), got {_shown(threads)}")
    if seed is None:
        seed = int.from_bytes(os.urandom(8), "little")
    seed = _integer("seed", seed, None)
    if not -(2**63) <= seed < 2**64:
        raise InvalidArgument(f"seed must fit 64 bits, got {_shown(seed)}")
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str, got {type(backend).__name__}")
    return (_integer("vocab_size", vocab_size), _integer("max_batch", max_batch), logprobs_mode,
            threads, seed % 2**64, backend)  # negative seeds: their two's complement


def _requests(requests: Any) -> list:
    if isinstance(requests, (str, bytes, abc.Mapping)) or not isinstance(requests, abc.Sequence):
        raise TypeError(
            f"requests must be a list of SamplingParams or dicts, got {type(requests).__name__}")
    for i, r in enumerate(requests):
        _check_request(f"request {i}", r)
    return [_as_read(r) for r in requests]


def _as_read(request: Any) -> Any:
    # The extension reads dicts as dicts and anything else by attribute: other mappings become dicts.
    return dict(request) if isinstance(request, abc.Mapping) and not isinstance(request, dict) \
        else request


def _check_request(who: str, request: Any) -> None:
    # Other objects would be read by attribute, silently neutral where a name differs (vLLM's
    # own SamplingParams spells bad words as strings and keeps EOS apart): refuse them.
    if not isinstance(request, (SamplingParams, abc.Mapping)):
        raise TypeError(
            f"{who}: expected a lastmile.SamplingParams or a dict, got {type(request).__name__}")


_ARRAY_HINT = ("a 2-D CPU array [num_rows, vocab_size] of float32, float16 or bfloat16 "
               "(numpy, torch, or anything with __dlpack__ / the buffer protocol)")


def _check_lazy_negation(logits: Any) -> None:
    # DLPack carries no negative bit: such a tensor's memory holds -x, and would be read as x.
    is_neg = getattr(logits, "is_neg", None)
    if callable(is_neg) and is_neg():
        raise ValueError("logits: a torch tensor with its negative bit set (a lazy negation); "
                         "call .resolve_neg() first")


def _numpy_bfloat16_as_bits(logits: Any, dtype: Optional[str]) -> tuple:
    # numpy has no bfloat16 of its own, and ml_dtypes' (JAX's) passes neither the buffer protocol
    # nor DLPack: its bits are read through a uint16 view of the same memory (no copy).
    if not (isinstance(logits, np.ndarray) and logits.dtype.name == "bfloat16"
            and logits.dtype.itemsize == 2):
        return logits, dtype
    if dtype in ("float32", "float16"):  # other strings: the extension names them
        raise ValueError(f"logits: dtype='{dtype}' but the array holds bfloat16")
    return logits.view(np.uint16), "bfloat16" if dtype is None else dtype


def _logits_type_error(logits: Any, error: TypeError) -> TypeError:
    if "incompatible function arguments" not in str(error):
        return error
    dtype = getattr(logits, "dtype", None)
    strides, itemsize = getattr(logits, "strides", None), getattr(logits, "itemsize", None)
    if (isinstance(strides, tuple) and isinstance(itemsize, int) and itemsize > 0
            and any(s % itemsize for s in strides)):  # numpy's byte strides: a record's field
        return TypeError(f"logits: strides {strides} (bytes) are not whole {itemsize}-byte "
                         "elements; pass numpy.ascontiguousarray(logits)")
    got = type(logits).__name__ + (f" of {dtype}" if dtype is not None else "")
    return TypeError(f"logits: expected {_ARRAY_HINT}, got {got}")


class Sampler:
    """vLLM V1's ``Sampler.forward`` over a batch of CPU logits.

    Parameters
    ----------
    vocab_size : int
        Logits width; every token id must be in ``[0, vocab_size)``.
    max_batch : int
        The most rows one call may hold.
    logprobs_mode : str, default "raw_logprobs"
        ``raw_logprobs``, ``raw_logits``, ``processed_logprobs`` or ``processed_logits``.
    threads : int or None
        Worker threads, at most 1024; None or 0 uses every core. Results never depend on it.
    seed : int or None
        Seeds requests without their own; None draws one from the OS.
    backend : str, default "automatic"
        ``automatic`` / ``cpu`` (SIMD, selection instead of sorting) or ``reference`` (scalar).

    Raises
    ------
    InvalidArgument
        (a ``ValueError``) for a bad configuration.

    Notes
    -----
    ``sample`` releases the GIL. One sampler serves one call at a time (concurrent calls on the
    same sampler take turns); use one sampler per thread to sample in parallel.
    """

    def __init__(
        self,
        vocab_size: int,
        max_batch: int,
        logprobs_mode: str = "raw_logprobs",
        threads: Optional[int] = None,
        seed: Optional[int] = None,
        backend: str = "automatic",
    ) -> None:
        self._impl = _lastmile.Sampler(
            *_config(vocab_size, max_batch, logprobs_mode, threads, seed, backend)
        )

    @property
    def vocab_size(self) -> int:
        return self._impl.vocab_size

    @property
    def max_batch(self) -> int:
        return self._impl.max_batch

    @property
    def backend_name(self) -> str:
        """The kernels in use, e.g. ``"cpu (AVX2)"``."""
        return self._impl.backend_name

    def sample(
        self,
        logits: Any,
        requests: Sequence[Request],
        *,
        predict_bonus_token: bool = False,
        logprobs_mode: Optional[str] = None,
        num_logprobs: Optional[int] = None,
        dtype: Optional[str] = None,
    ) -> SamplerOutput:
        """Samples one token per logits row.

        Parameters
        ----------
        logits : array-like
            A 2-D CPU array ``[num_rows, vocab_size]`` of float32, float16 or bfloat16, through
            DLPack (torch) or the buffer protocol (numpy); read in place, never copied or edited.
            Rows may be strided; the vocabulary axis must be contiguous.
        requests : sequence of SamplingParams or dict
            One per row, with the fields of ``SamplingParams`` (absent ones are neutral).
        predict_bonus_token : bool
            Draft tokens (``spec_token_ids``) count as history for penalties and bad words.
        logprobs_mode : str or None
            Overrides the sampler's mode for this call.
        num_logprobs : int or None
            vLLM's ``max_num_logprobs``: ``-1`` the full matrix, ``N >= 0`` top-N plus the sampled
            token; None takes the largest ``logprobs`` among the requests.
        dtype : str or None
            ``"bfloat16"`` reads a uint16 / int16 array as bfloat16 bit patterns. A numpy array
            of ``ml_dtypes.bfloat16`` is read as bfloat16 without it.

        Returns
        -------
        SamplerOutput

        Raises
        ------
        InvalidArgument
            A request field out of range, naming request and field, e.g.
            ``request 3: top_p must be in (0, 1], got 1.5``.
        InvalidLogits
            Logits holding NaN / +inf, of the wrong width, or more rows than ``max_batch``.
            (A request count that differs from the row count is an ``InvalidArgument``.)
        TypeError, ValueError
            Logits of the wrong type, shape, dtype, device or layout; a field of the wrong type.
        """
        if logprobs_mode is not None:
            _check_mode("logprobs_mode", logprobs_mode)
        if num_logprobs is not None:
            num_logprobs = _integer("num_logprobs", num_logprobs, None)
            if not -1 <= num_logprobs <= self._impl.vocab_size:  # also past int32: named here
                raise InvalidArgument(f"batch: num_logprobs must be -1 or in "
                                      f"[0, {self._impl.vocab_size}], got {_shown(num_logprobs)}")
        _check_dtype(dtype)
        if not isinstance(predict_bonus_token, (bool, np.bool_)):  # bool("no") would be True
            raise TypeError(
                f"predict_bonus_token must be a bool, got {type(predict_bonus_token).__name__}")
        predict_bonus_token = bool(predict_bonus_token)
        requests = _requests(requests)
        _check_lazy_negation(logits)
        logits, dtype = _numpy_bfloat16_as_bits(logits, dtype)
        try:
            raw = self._impl.sample(
                logits, requests, predict_bonus_token, logprobs_mode, num_logprobs, dtype
            )
        except TypeError as e:
            raise _logits_type_error(logits, e) from None
        return _output(raw)


class RequestBatch:
    """Requests that live across steps (an engine's persistent batch).

    Penalty counts are kept per request and updated per new token; each ``step`` samples one
    token per request and appends it to that request's output. Results equal ``Sampler.sample``
    on the same histories. Parameters are those of :class:`Sampler`.

    Examples
    --------
    >>> import numpy as np, lastmile
    >>> batch = lastmile.RequestBatch(vocab_size=3, max_batch=1, seed=0)
    >>> batch.add("a", lastmile.SamplingParams(temperature=0.0, frequency_penalty=2.0))
    >>> [int(batch.step(np.array([[0, 3, 0]], np.float32)).sampled_token_ids[0]) for _ in range(3)]
    [1, 1, 0]
    """

    def __init__(
        self,
        vocab_size: int,
        max_batch: int,
        logprobs_mode: str = "raw_logprobs",
        threads: Optional[int] = None,
        seed: Optional[int] = None,
        backend: str = "automatic",
    ) -> None:
        self._impl = _lastmile.RequestBatch(
            *_config(vocab_size, max_batch, logprobs_mode, threads, seed, backend)
        )

    def add(
        self,
        request_id: str,
        params: Request,
        prompt_token_ids: Optional[Sequence[int]] = None,
        max_output_tokens: int = 0,
    ) -> None:
        """Appends a request as the last row; ``prompt_token_ids`` overrides the params' own.

        ``max_output_tokens`` reserves room for that many output tokens, so that steps allocate
        nothing for this request until it outgrows them.
        """
        _check_id("add", request_id)
        _check_request(f"request '{request_id}'", params)
        max_output_tokens = _integer(f"request '{request_id}': max_output_tokens", max_output_tokens)
        self._impl.add(request_id, _as_read(params), prompt_token_ids, max_output_tokens)

    def remove(self, request_id: str) -> None:
        """Removes a request; later rows move up by one."""
        self._impl.remove(_check_id("remove", request_id))

    def reorder(self, request_ids: Sequence[str]) -> None:
        """Puts the requests in this order (a permutation of ``request_ids()``)."""
        # A str would be its letters' ids ("ab" the ids "a" and "b").
        if isinstance(request_ids, str) or not isinstance(request_ids, abc.Iterable):
            raise TypeError(
                f"request_ids must be a sequence of str, got {type(request_ids).__name__}")
        self._impl.reorder([_check_id("reorder", i) for i in request_ids])

    def step(self, logits: Any, *, dtype: Optional[str] = None) -> SamplerOutput:
        """Samples row i for ``request_ids()[i]`` and appends each token to its request."""
        _check_dtype(dtype)
        _check_lazy_negation(logits)
        logits, dtype = _numpy_bfloat16_as_bits(logits, dtype)
        try:
            return _output(self._impl.step(logits, dtype))
        except TypeError as e:
            raise _logits_type_error(logits, e) from None

    def request_ids(self) -> list:
        """The request ids in row order."""
        return self._impl.request_ids()

    def output_token_ids(self, request_id: str) -> list:
        """The tokens this batch sampled for the request so far."""
        return self._impl.output_token_ids(_check_id("output_token_ids", request_id))

    def __len__(self) -> int:
        return self._impl.size()

    @property
    def backend_name(self) -> str:
        return self._impl.backend_name
