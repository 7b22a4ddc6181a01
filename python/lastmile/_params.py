"""SamplingParams: one request's fields, spelled as vLLM's SamplingParams and the golden cases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence


@dataclass
class SamplingParams:
    """One logits row's request. Every default is the neutral value; the sampler validates.

    Parameters
    ----------
    temperature : float
        ``< 1e-5`` samples greedily.
    top_k : int
        0, -1 or ``>= vocab_size`` disables.
    top_p : float
        In ``(0, 1]``; 1 disables.
    min_p : float
        In ``[0, 1]``; 0 disables.
    presence_penalty, frequency_penalty : float
        In ``[-2, 2]``; 0 disables.
    repetition_penalty : float
        ``> 0``; 1 disables.
    logit_bias : dict
        ``{token_id: bias}`` added to the logits. Keys may be strings, read by ``int()`` as
        vLLM's ``from_optional`` reads them; two keys naming one token (``3`` and ``"03"``) are
        refused.
    allowed_token_ids : list of int or None
        A whitelist; None allows every token.
    bad_words_token_ids : list of list of int
        Token sequences whose last token is banned after the rest.
    min_tokens : int
        Stop ids are banned while ``len(output_token_ids) < min_tokens``.
    stop_token_ids : list of int
        Include EOS here: lastmile has no tokenizer.
    seed : int or None
        The request's own random stream; None (or -1) takes one from the sampler.
    logprobs : int or None
        Top-N logprobs; -1 means every token.
    logprob_token_ids : list of int or None
        Ids to score (at most 128), returned beside the sampled token.
    prompt_token_ids, output_token_ids, spec_token_ids : list of int
        History: prompt (repetition penalty), generated tokens, and draft tokens (history when
        predicting the bonus token).
    step : int or None
        Position in the request's random stream; None uses ``len(output_token_ids)``.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: Dict[int, float] = field(default_factory=dict)
    allowed_token_ids: Optional[List[int]] = None
    bad_words_token_ids: List[List[int]] = field(default_factory=list)
    min_tokens: int = 0
    stop_token_ids: List[int] = field(default_factory=list)
    seed: Optional[int] = None
    logprobs: Optional[int] = None
    logprob_token_ids: Optional[List[int]] = None
    prompt_token_ids: Sequence[int] = ()
    output_token_ids: Sequence[int] = ()
    spec_token_ids: Sequence[int] = ()
    step: Optional[int] = None

    def __setattr__(self, name: str, value: object) -> None:
        # A misspelled field (params.temprature = 0.0) would otherwise be kept and never read.
        # Subclasses may keep attributes of their own.
        if type(self) is SamplingParams and name not in self.__dataclass_fields__:
            raise AttributeError(f"SamplingParams has no field {name!r}")
        object.__setattr__(self, name, value)
