"""A drop-in for vLLM V1's ``Sampler`` with vLLM's shapes, over lastmile (needs torch, not vLLM).

``Sampler(logprobs_mode).forward(logits, sampling_metadata, predict_bonus_token=False)`` reads any
object carrying vLLM's ``SamplingMetadata`` fields (``../shared/spec/sampler.md`` §1.1) and returns
``SamplerOutput(sampled_token_ids: int32 [B, 1], logprobs_tensors)``. As in vLLM, explicit-id
logprobs (``logprob_token_ids``) replace the top-N logprobs for the whole batch, and
``max_num_logprobs == -1`` returns the full ``[B, V]`` matrix with empty ids and ranks.

Per-request ``generators`` key each seeded row: one 63-bit integer is drawn from the row's
``torch.Generator`` per call, so a generator seeded alike replays the same tokens. The built-in
logits processors are read from their state (``MinPLogitsProcessor.min_p`` /
``min_p_cpu``, ``LogitBiasLogitsProcessor.biases``, ``MinTokensLogitsProcessor.min_toks``);
any other processor raises ``NotImplementedError``.

Examples
--------
>>> import torch
>>> from types import SimpleNamespace
>>> from lastmile.vllm import Sampler
>>> md = SimpleNamespace(temperature=None, all_greedy=True, all_random=False, top_p=None,
...                      top_k=None, generators={}, max_num_logprobs=None, no_penalties=True,
...                      prompt_token_ids=None, frequency_penalties=None,
...                      presence_penalties=None, repetition_penalties=None,
...                      output_token_ids=[[]], allowed_token_ids_mask=None,
...                      bad_words_token_ids={}, logitsprocs=None, spec_token_ids=None)
>>> Sampler().forward(torch.tensor([[0.0, 2.0, 1.0]]), md).sampled_token_ids.tolist()
[[1]]
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, List, NamedTuple, Optional

import torch

from . import InvalidArgument
from . import Sampler as _CoreSampler

_GREEDY_EPS = 1e-5  # vLLM's _SAMPLING_EPS


class LogprobsTensors(NamedTuple):
    """vLLM's ``LogprobsTensors``: int32 ids ``[B, C]``, float32 values ``[B, C]``, int64 ranks."""

    logprob_token_ids: torch.Tensor
    logprobs: torch.Tensor
    selected_token_ranks: torch.Tensor


@dataclass
class SamplerOutput:
    """vLLM's ``SamplerOutput``: ``sampled_token_ids`` int32 ``[B, 1]``."""

    sampled_token_ids: torch.Tensor
    logprobs_tensors: Optional[LogprobsTensors]


def _list(values: Any) -> Optional[list]:
    if values is None:
        return None
    if isinstance(values, torch.Tensor):
        return values.reshape(-1).tolist()
    return [v for v in values]


def _below_greedy_eps(temperature: list) -> list:
    """Which rows vLLM makes greedy: it compares its float32 temperatures with 1e-5 in float32,
    where float32(1e-5) itself is not below. NaN is not below, and so reaches the sampler."""
    t = torch.tensor([float(v) for v in temperature], dtype=torch.float32)
    return (t < torch.tensor(_GREEDY_EPS, dtype=torch.float32)).tolist()


def _rows(name: str, values: Any, num_rows: int) -> Any:
    """values, checked to hold an entry for each logits row (else IndexError deep in the adapter).
    Longer is fine: vLLM passes spec_token_ids for every slot of its persistent batch."""
    if values is not None and len(values) < num_rows:
        raise InvalidArgument(f"sampling_metadata.{name}: expected {num_rows} rows, got {len(values)}")
    return values


def _mask(mask: Any, num_rows: int, vocab_size: int) -> Any:
    """The allowed-token mask, checked to be vLLM's: bool [rows, vocab], True = forbidden. Any
    other dtype or shape would be read as some other set of tokens (an int mask's ~ is a bitwise
    not, which allows every token), where vLLM's masked_fill_ refuses it."""
    if mask is None:
        return None
    if (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2
            or mask.shape[1] != vocab_size):
        got = (f"{mask.dtype} tensor of shape {tuple(mask.shape)}"
               if isinstance(mask, torch.Tensor) else type(mask).__name__)
        raise InvalidArgument(f"sampling_metadata.allowed_token_ids_mask: expected a bool tensor "
                              f"[{num_rows}, {vocab_size}] (True = forbidden), got {got}")
    return _rows("allowed_token_ids_mask", mask, num_rows)


def _row_index(who: str, key: Any, num_rows: int) -> int:
    """The int row that metadata names by `key` (a dict's key, a processor's state), checked to be
    one of the batch's; `who` names what named it."""
    try:
        row = operator.index(key)
    except TypeError:
        row = -1
    if not 0 <= row < num_rows:
        raise InvalidArgument(f"{who} names row {key!r}, not one of the batch's {num_rows}")
    return row


def _by_row(name: str, values: Any, num_rows: int) -> dict:
    """A per-row dict (row -> value) keyed by int rows, checked to name only the batch's rows, each
    once: an entry for a row past the batch, or under a key that no int row looks up (a 0-d
    tensor), would be dropped without a word."""
    rows: dict = {}
    for key, value in (values or {}).items():
        row = _row_index(f"sampling_metadata.{name}:", key, num_rows)
        if row in rows:
            raise InvalidArgument(f"sampling_metadata.{name}: names row {row} twice")
        rows[row] = value
    return rows


def _check_history(row: int, name: str, history: List[Any], vocab_size: int) -> None:
    """A history holding placeholders, checked here, where the caller's indices are known (the
    sampler sees it without them)."""
    for i, t in enumerate(history):
        if t != _PLACEHOLDER and not 0 <= t < vocab_size:
            raise InvalidArgument(f"request {row}: {name}[{i}] must be in "
                                  f"[0, {vocab_size}) or {_PLACEHOLDER} (a placeholder), got {t}")


def _processors(metadata: Any) -> list:
    procs = getattr(metadata, "logitsprocs", None)
    if procs is None:
        return []
    if isinstance(procs, (list, tuple)):
        return list(procs)
    found = []
    for name in ("non_argmax_invariant", "argmax_invariant"):
        found.extend(getattr(procs, name, None) or [])
    return found


def _processor_row(proc: Any, row: Any, num_rows: int) -> int:
    """A row a processor's state names, checked to be one of the batch's."""
    return _row_index(f"sampling_metadata.logitsprocs: {type(proc).__name__}", row, num_rows)


def _apply_processor(proc: Any, requests: List[dict], outputs: List[list]) -> None:
    if hasattr(proc, "min_toks"):  # MinTokensLogitsProcessor: tracked rows have stops banned
        for row, (_, _, stop_ids) in proc.min_toks.items():
            row = _processor_row(proc, row, len(requests))
            requests[row]["min_tokens"] = len(outputs[row]) + 1
            requests[row]["stop_token_ids"] = sorted(int(t) for t in stop_ids)
    elif hasattr(proc, "biases"):  # LogitBiasLogitsProcessor
        for row, biases in proc.biases.items():
            row = _processor_row(proc, row, len(requests))
            requests[row]["logit_bias"] = {int(t): float(b) for t, b in biases.items()}
    elif hasattr(proc, "min_p") or hasattr(proc, "min_p_cpu"):  # MinPLogitsProcessor
        if getattr(proc, "min_p_count", 1) == 0:
            return
        values = getattr(proc, "min_p_cpu", None)
        values = _rows(f"logitsprocs: {type(proc).__name__}.min_p",
                       _list(proc.min_p if values is None else values), len(requests))
        for row in range(len(requests)):
            requests[row]["min_p"] = float(values[row])
    else:
        raise NotImplementedError(
            f"lastmile.vllm: logits processor {type(proc).__name__} is not supported "
            "(only the built-in min_p, logit_bias and min_tokens processors are)"
        )


_PLACEHOLDER = -1  # async scheduling's not-yet-known output token (spec §7.1)


def _bad_words_with_placeholders(words: List[List[int]], history: List[int]) -> List[List[int]]:
    """vLLM's rule on a history holding placeholders: a word's last token is banned iff its
    prefix ends the history, and a placeholder matches nothing. Returned as single-token words
    (always banned), since lastmile's histories cannot carry placeholders."""
    banned = []
    for word in words:
        prefix = list(word[:-1])
        if len(prefix) <= len(history) and history[len(history) - len(prefix):] == prefix:
            banned.append([word[-1]])
    return banned


def _requests(metadata: Any, num_rows: int, vocab_size: int,
              predict_bonus_token: bool) -> List[dict]:
    # vLLM passes [] when no request reads the history (no penalties, bad words or processors).
    outputs = [list(o) for o in _rows("output_token_ids", metadata.output_token_ids or None,
                                      num_rows) or [[] for _ in range(num_rows)]]
    temperature = None if metadata.all_greedy else _list(metadata.temperature)
    greedy = None if temperature is None else _below_greedy_eps(temperature)
    top_p, top_k = _list(metadata.top_p), _list(metadata.top_k)
    _rows("temperature", temperature, num_rows)
    _rows("top_p", top_p, num_rows)
    _rows("top_k", top_k, num_rows)
    penalties = not getattr(metadata, "no_penalties", True)
    if penalties:
        for name in ("presence_penalties", "frequency_penalties", "repetition_penalties"):
            if getattr(metadata, name, None) is None:
                raise InvalidArgument(f"sampling_metadata.{name}: needed when no_penalties is False")
            _rows(name, getattr(metadata, name), num_rows)
    prompts = _rows("prompt_token_ids", metadata.prompt_token_ids, num_rows) if penalties else None
    mask = _mask(getattr(metadata, "allowed_token_ids_mask", None), num_rows, vocab_size)
    bad_words = _by_row("bad_words_token_ids", getattr(metadata, "bad_words_token_ids", None),
                        num_rows)
    spec = _rows("spec_token_ids", getattr(metadata, "spec_token_ids", None), num_rows)
    explicit = _by_row("logprob_token_ids", getattr(metadata, "logprob_token_ids", None),
                       num_rows)
    generators = _by_row("generators", getattr(metadata, "generators", None), num_rows)
    requests: List[dict] = []
    for row in range(num_rows):
        # Placeholders count for nothing (penalties ignore them, spec §7.1) but keep min_tokens'
        # length; they are dropped from the history lastmile sees.
        known = [t for t in outputs[row] if t != _PLACEHOLDER]
        if len(known) != len(outputs[row]):
            _check_history(row, "output_token_ids", outputs[row], vocab_size)
        r: dict = {"output_token_ids": known}
        # Greedy sentinels (0.0, -1.0) become 0; NaN goes on, for the sampler to refuse.
        # float32(1e-5), which vLLM samples, lies below the double 1e-5 under which lastmile
        # (as SamplingParams) is greedy; the double 1e-5 is the same float32, so it goes instead.
        t = 0.0 if greedy is None or greedy[row] else float(temperature[row])
        r["temperature"] = _GREEDY_EPS if 0.0 < t < _GREEDY_EPS else t
        if top_p is not None:
            r["top_p"] = float(top_p[row])
        if top_k is not None:
            k = int(top_k[row])
            r["top_k"] = k if 0 < k < vocab_size else 0
        if penalties:
            r["presence_penalty"] = float(metadata.presence_penalties[row])
            r["frequency_penalty"] = float(metadata.frequency_penalties[row])
            r["repetition_penalty"] = float(metadata.repetition_penalties[row])
            if prompts is not None:  # right-padded with vocab_size
                ids = prompts[row]
                r["prompt_token_ids"] = [int(i) for i in _list(ids) if int(i) != vocab_size]
        if mask is not None and bool(mask[row].any()):  # True = forbidden
            r["allowed_token_ids"] = torch.nonzero(~mask[row]).reshape(-1).tolist()
        drafts = list(spec[row]) if spec is not None else []
        known_drafts = [t for t in drafts if t != _PLACEHOLDER]
        if len(known_drafts) != len(drafts):
            _check_history(row, "spec_token_ids", drafts, vocab_size)
        if spec is not None:
            r["spec_token_ids"] = known_drafts
        if row in bad_words:
            words = [list(w) for w in bad_words[row]]
            for i, word in enumerate(words):  # named here: the placeholder rule renumbers them
                if not word:
                    raise InvalidArgument(f"request {row}: bad_words_token_ids[{i}] must not be empty")
            if len(known) != len(outputs[row]) or len(known_drafts) != len(drafts):
                for i, word in enumerate(words):  # the rule keeps only some: checked first
                    for j, t in enumerate(word):
                        if not 0 <= t < vocab_size:
                            raise InvalidArgument(f"request {row}: bad_words_token_ids[{i}][{j}] "
                                                  f"must be in [0, {vocab_size}), got {t}")
                history = outputs[row] + (drafts if predict_bonus_token else [])
                words = _bad_words_with_placeholders(words, history)
            r["bad_words_token_ids"] = words
        if row in explicit:
            r["logprob_token_ids"] = list(explicit[row])
        if row in generators:  # one key per call, drawn from the row's own generator
            g = generators[row]
            if not isinstance(g, torch.Generator):
                raise TypeError(f"sampling_metadata.generators[{row}]: expected a "
                                f"torch.Generator, got {type(g).__name__}")
            r["seed"] = int(torch.randint(0, 2**63 - 1, (1,), generator=g, device=g.device))
            r["step"] = 0
        requests.append(r)
    for proc in _processors(metadata):
        _apply_processor(proc, requests, outputs)
    return requests


def _core_seed(seed: Optional[int], made: int) -> Optional[int]:
    """The seed of the adapter's core number `made`: its own for the first, then splitmix64 of
    (seed, made). A core counts its calls from 0, so a core rebuilt for a larger batch with the
    same seed would replay the first calls' draws for unseeded rows."""
    if seed is None or made == 0:
        return seed
    z = (seed + made * 0x9E3779B97F4A7C15) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return z ^ (z >> 31)


class Sampler:
    """vLLM V1's ``Sampler`` with the same ``forward``; logits stay on the CPU.

    Parameters
    ----------
    logprobs_mode : str, default "raw_logprobs"
        As vLLM's ``logprobs_mode``.
    threads, seed : int or None
        As :class:`lastmile.Sampler`. The core sampler is rebuilt when a batch outgrows it or
        the vocabulary changes; each rebuilt one takes a seed derived from ``seed`` and its
        number, so unseeded rows never replay earlier draws.
    """

    def __init__(
        self,
        logprobs_mode: str = "raw_logprobs",
        threads: Optional[int] = None,
        seed: Optional[int] = None,
    ) -> None:
        self.logprobs_mode = logprobs_mode
        self._threads = threads
        self._seed = seed
        self._core: Optional[_CoreSampler] = None
        self._cores_made = 0

    def _sampler(self, num_rows: int, vocab_size: int) -> _CoreSampler:
        core = self._core
        if core is None or core.vocab_size != vocab_size or core.max_batch < num_rows:
            core = _CoreSampler(
                vocab_size,
                max(num_rows, 1 if core is None else core.max_batch),
                self.logprobs_mode,
                self._threads,
                _core_seed(self._seed, self._cores_made),
            )
            self._core = core
            self._cores_made += 1
        return core

    def forward(
        self,
        logits: torch.Tensor,
        sampling_metadata: Any,
        predict_bonus_token: bool = False,
        logprobs_mode_override: Optional[str] = None,
    ) -> SamplerOutput:
        """Samples ``logits`` ``[B, V]`` (CPU; float32, float16 or bfloat16) as vLLM does."""
        if not isinstance(logits, torch.Tensor):
            raise TypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
        if logits.device.type != "cpu":
            raise ValueError(f"logits must be on the CPU, got device {logits.device}")
        num_rows, vocab_size = logits.shape if logits.dim() == 2 else (0, 0)
        if logits.dim() != 2:
            raise ValueError(f"logits: expected 2 dimensions [num_rows, vocab_size], got {logits.dim()}")
        md = sampling_metadata
        requests = _requests(md, num_rows, vocab_size, predict_bonus_token)
        out = self._sampler(num_rows, vocab_size).sample(
            logits.detach(),
            requests,
            predict_bonus_token=predict_bonus_token,  # the sampler refuses what is not a bool
            logprobs_mode=self._active_mode(logprobs_mode_override),
            num_logprobs=md.max_num_logprobs,
        )
        sampled = torch.from_numpy(out.sampled_token_ids).reshape(-1, 1)
        return SamplerOutput(sampled, self._logprobs(out, md.max_num_logprobs))

    __call__ = forward

    def _active_mode(self, override: Optional[str]) -> str:
        """vLLM applies an override only to step 1's raw modes (spec §3.3): a processed sampler
        keeps its mode, and a raw sampler overridden to a processed mode has no tensor at all."""
        mode = self.logprobs_mode
        if override is not None and not isinstance(override, str):
            raise TypeError(f"logprobs_mode_override: expected a str or None, got "
                            f"{type(override).__name__}")
        if override is None or mode.startswith("processed"):
            return mode
        if override.startswith("processed"):
            raise ValueError(
                f"logprobs_mode_override={override!r} on a {mode!r} sampler: vLLM leaves the "
                "logprobs tensor unset in this case (spec §3.3)")
        return override

    @staticmethod
    def _logprobs(out: Any, max_num_logprobs: Optional[int]) -> Optional[LogprobsTensors]:
        if out.token_logprobs is not None:  # explicit ids replace top-N for the whole batch
            t = out.token_logprobs
            return LogprobsTensors(
                torch.from_numpy(t.token_ids), torch.from_numpy(t.logprobs),
                torch.from_numpy(t.ranks))
        if max_num_logprobs is None:
            return None
        if max_num_logprobs == -1:
            return LogprobsTensors(
                torch.empty(0, dtype=torch.int32), torch.from_numpy(out.full_logprobs),
                torch.empty(0, dtype=torch.int64))
        top = out.logprobs
        return LogprobsTensors(
            torch.from_numpy(top.token_ids), torch.from_numpy(top.logprobs),
            torch.from_numpy(top.ranks))
