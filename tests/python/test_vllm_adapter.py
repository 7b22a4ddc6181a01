"""lastmile.vllm on hand-built SamplingMetadata objects covering every field, against an
independent torch transcription of vLLM's greedy path (spec §2.1 steps 3-7a) and vLLM's shapes."""

from types import SimpleNamespace

import pytest
import torch

import lastmile
from lastmile.vllm import Sampler

V = 8


def metadata(num_rows, **fields):
    md = SimpleNamespace(
        temperature=None, all_greedy=True, all_random=False, top_p=None, top_k=None,
        generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=torch.zeros(num_rows), presence_penalties=torch.zeros(num_rows),
        repetition_penalties=torch.ones(num_rows), output_token_ids=[[] for _ in range(num_rows)],
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=None,
        spec_token_ids=None, logprob_token_ids=None)
    for k, v in fields.items():
        setattr(md, k, v)
    return md


class MinTokensLogitsProcessor:  # vLLM's state: row -> (min_tokens, output ids, stop ids)
    def __init__(self, min_toks):
        self.min_toks = min_toks


class LogitBiasLogitsProcessor:
    def __init__(self, biases):
        self.biases = biases


class MinPLogitsProcessor:
    def __init__(self, min_p):
        self.min_p = torch.tensor(min_p).unsqueeze(1)
        self.min_p_count = sum(1 for p in min_p if p > 0)


def vllm_greedy(logits, md, predict_bonus_token=False):
    """vLLM's steps 3-7a in torch, written from the spec for this test."""
    x = logits.float().clone()
    if md.allowed_token_ids_mask is not None:
        x.masked_fill_(md.allowed_token_ids_mask, float("-inf"))
    for row, words in md.bad_words_token_ids.items():
        history = list(md.output_token_ids[row])
        if predict_bonus_token and md.spec_token_ids:
            history += list(md.spec_token_ids[row])
        for word in words:
            prefix = word[:-1]
            if len(prefix) <= len(history) and history[len(history) - len(prefix):] == prefix:
                x[row, word[-1]] = float("-inf")
    for proc in md.logitsprocs or []:
        if hasattr(proc, "min_toks"):
            for row, (_, _, stops) in proc.min_toks.items():
                x[row, list(stops)] = float("-inf")
        if hasattr(proc, "biases"):
            for row, biases in proc.biases.items():
                for t, b in biases.items():
                    x[row, t] += b
    if not md.no_penalties:
        for row in range(x.shape[0]):
            prompt = [int(t) for t in md.prompt_token_ids[row] if int(t) != V]
            out = list(md.output_token_ids[row])
            seen = set(prompt) | set(out)
            r = float(md.repetition_penalties[row])
            for t in seen:
                x[row, t] = x[row, t] / r if x[row, t] > 0 else x[row, t] * r
            for t in set(out):
                x[row, t] -= float(md.frequency_penalties[row]) * out.count(t)
                x[row, t] -= float(md.presence_penalties[row])
    return x.argmax(dim=-1)


@pytest.fixture
def logits():
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, V, generator=g) * 3


def test_every_greedy_field_matches_vllm(logits):
    mask = torch.zeros(4, V, dtype=torch.bool)
    mask[1] = True
    mask[1, [2, 5, 6]] = False  # row 1 may only pick 2, 5 or 6
    md = metadata(
        4,
        allowed_token_ids_mask=mask,
        bad_words_token_ids={0: [[int(logits[0].argmax())]], 3: [[7, 1, 4], [9 % V]]},
        no_penalties=False,
        prompt_token_ids=torch.tensor([[1, 2, V], [3, V, V], [0, 4, 5], [6, 6, 6]]),
        repetition_penalties=torch.tensor([1.5, 1.0, 2.0, 1.2]),
        frequency_penalties=torch.tensor([0.0, 0.5, 1.0, -0.5]),
        presence_penalties=torch.tensor([0.2, 0.0, 1.5, 0.3]),
        output_token_ids=[[1], [5, 5], [int(logits[2].argmax())] * 3, [7, 1]],
        logitsprocs=[MinTokensLogitsProcessor({2: (5, [], {0, 3})}),
                     LogitBiasLogitsProcessor({3: {4: 2.5, 0: -1.0}})],
    )
    out = Sampler().forward(logits, md)
    assert out.sampled_token_ids.dtype == torch.int32
    assert out.sampled_token_ids.shape == (4, 1)
    assert out.sampled_token_ids.reshape(-1).tolist() == vllm_greedy(logits, md).tolist()
    assert out.logprobs_tensors is None


def test_draft_tokens_complete_a_bad_word_when_predicting_the_bonus_token(logits):
    top = int(logits[0].argmax())
    md = metadata(1, bad_words_token_ids={0: [[3, 4, top]]}, output_token_ids=[[3]],
                  spec_token_ids=[[4]])
    bonus = Sampler().forward(logits[:1], md, predict_bonus_token=True)
    plain = Sampler().forward(logits[:1], md)
    assert int(plain.sampled_token_ids) == top
    assert int(bonus.sampled_token_ids) == int(vllm_greedy(logits[:1], md, True)[0]) != top


def test_top_n_logprobs_have_vllms_shapes_and_values(logits):
    md = metadata(4, max_num_logprobs=3)
    lp = Sampler().forward(logits, md).logprobs_tensors
    assert lp.logprob_token_ids.dtype == torch.int32 and lp.logprob_token_ids.shape == (4, 4)
    assert lp.logprobs.dtype == torch.float32 and lp.selected_token_ranks.dtype == torch.int64
    expected = torch.log_softmax(logits, dim=-1)
    top = expected.topk(3, dim=-1)
    assert torch.equal(lp.logprob_token_ids[:, 1:].long(), top.indices)
    torch.testing.assert_close(lp.logprobs[:, 1:], top.values, rtol=1e-5, atol=1e-6)
    assert lp.selected_token_ranks.tolist() == [1, 1, 1, 1]


def test_explicit_ids_replace_top_n_for_the_whole_batch(logits):
    md = metadata(4, max_num_logprobs=3, logprob_token_ids={1: [0, 7]})
    lp = Sampler().forward(logits, md).logprobs_tensors
    assert lp.logprob_token_ids.shape == (4, 3)
    assert lp.logprob_token_ids[1, 1:].tolist() == [0, 7]
    assert lp.logprob_token_ids[0, 1:].tolist() == [0, 0]  # padding: id 0, -inf
    assert torch.isinf(lp.logprobs[0, 1:]).all()
    raw = torch.log_softmax(logits, dim=-1)
    torch.testing.assert_close(lp.logprobs[1, 1:], raw[1, [0, 7]], rtol=1e-5, atol=1e-6)


def test_full_matrix_form(logits):
    lp = Sampler("raw_logits").forward(logits, metadata(4, max_num_logprobs=-1)).logprobs_tensors
    assert lp.logprob_token_ids.numel() == 0 and lp.selected_token_ranks.numel() == 0
    assert torch.equal(lp.logprobs, logits)


def random_metadata(num_rows, **fields):
    return metadata(num_rows, all_greedy=False, all_random=True,
                    temperature=torch.full((num_rows,), 1.0), **fields)


def test_top_k_one_and_tiny_top_p_pick_the_argmax(logits):
    md = random_metadata(4, top_k=torch.tensor([1, V, 1, V]),
                         top_p=torch.tensor([1.0, 1e-6, 1.0, 1e-6]))
    out = Sampler().forward(logits, md)
    assert out.sampled_token_ids.reshape(-1).tolist() == logits.argmax(dim=-1).tolist()


def test_min_p_processor_keeps_only_the_peak(logits):
    md = random_metadata(4, logitsprocs=SimpleNamespace(
        argmax_invariant=[MinPLogitsProcessor([1.0, 1.0, 1.0, 1.0])], non_argmax_invariant=[]))
    out = Sampler().forward(logits, md)
    assert out.sampled_token_ids.reshape(-1).tolist() == logits.argmax(dim=-1).tolist()


def test_greedy_sentinels_in_a_mixed_batch(logits):
    md = metadata(4, all_greedy=False, temperature=torch.tensor([-1.0, 0.0, 1.0, 1.0]),
                  top_k=torch.tensor([V, V, 1, 1]))
    out = Sampler().forward(logits, md)
    assert out.sampled_token_ids.reshape(-1).tolist() == logits.argmax(dim=-1).tolist()


def test_greedy_threshold_is_compared_in_float32():
    # vLLM compares its float32 temperatures with 1e-5 in float32: float32(1e-5) samples, one
    # float32 step below it is greedy. On flat logits greedy answers 0; a draw rarely does.
    eps = torch.tensor(1e-5, dtype=torch.float32)
    below = torch.nextafter(eps, torch.tensor(0.0))
    flat = torch.zeros(2, 64)
    sampler = Sampler()
    tokens = []
    for call in range(5):
        g = [torch.Generator().manual_seed(call), torch.Generator().manual_seed(call)]
        md = metadata(2, all_greedy=False, temperature=torch.stack([eps, below]),
                      generators={0: g[0], 1: g[1]})
        tokens.append(sampler.forward(flat, md).sampled_token_ids.reshape(-1).tolist())
    assert [t[1] for t in tokens] == [0] * 5
    assert any(t[0] != 0 for t in tokens)


def test_a_growing_batch_does_not_replay_unseeded_draws():
    # The adapter sizes its core to the largest batch so far; a rebuilt core counts its calls
    # from 0 again, and with the same seed it drew the same uniforms as the first calls did.
    sampler = Sampler(seed=5)
    first_row = [int(sampler.forward(torch.zeros(rows, 1000), random_metadata(rows))
                     .sampled_token_ids[0]) for rows in range(1, 9)]
    assert len(set(first_row)) > 4, first_row


def test_generators_replay_and_advance():
    flat = torch.zeros(1, 64)

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        sampler = Sampler()
        return [int(sampler.forward(flat, random_metadata(1, generators={0: g})).sampled_token_ids)
                for _ in range(20)]

    assert run(5) == run(5)
    assert len(set(run(5))) > 1  # the generator advances each call
    assert run(5) != run(6)


def test_bfloat16_logits(logits):
    out = Sampler().forward(logits.to(torch.bfloat16), metadata(4))
    assert out.sampled_token_ids.reshape(-1).tolist() == \
        logits.to(torch.bfloat16).float().argmax(dim=-1).tolist()


def test_unknown_processor_and_bad_tensors_are_refused(logits):
    with pytest.raises(NotImplementedError, match="logits processor object is not supported"):
        Sampler().forward(logits, metadata(4, logitsprocs=[object()]))
    with pytest.raises(ValueError, match="expected 2 dimensions"):
        Sampler().forward(logits[0], metadata(1))
    with pytest.raises(TypeError, match="logits must be a torch.Tensor"):
        Sampler().forward(logits.numpy(), metadata(4))


def test_async_placeholders_count_for_nothing(logits):
    top = int(logits[0].argmax())
    # Repetition 100 on a known token (the top one); the -1 placeholder is ignored, not an error.
    md = metadata(1, no_penalties=False, prompt_token_ids=torch.full((1, 1), V),
                  repetition_penalties=torch.tensor([100.0]), output_token_ids=[[top, -1]])
    assert float(logits[0, top]) > 0
    assert int(Sampler().forward(logits[:1], md).sampled_token_ids) == \
        int(vllm_greedy(logits[:1], metadata(1, no_penalties=False,
                                             prompt_token_ids=torch.full((1, 1), V),
                                             repetition_penalties=torch.tensor([100.0]),
                                             output_token_ids=[[top]]))[0]) != top
    # A placeholder ends the history: the bad word [top_prefix, top] cannot match after it.
    md = metadata(1, output_token_ids=[[3, -1]], bad_words_token_ids={0: [[3, top], [top]]})
    out = Sampler().forward(logits[:1], md)
    assert int(out.sampled_token_ids) == int(vllm_greedy(logits[:1], metadata(
        1, output_token_ids=[[3, 99]], bad_words_token_ids={0: [[top]]}))[0])


def test_logprobs_mode_override_applies_to_raw_modes_only(logits):
    md = metadata(4, max_num_logprobs=-1)
    raw = Sampler("raw_logprobs").forward(logits, md, logprobs_mode_override="raw_logits")
    assert torch.equal(raw.logprobs_tensors.logprobs, logits)
    processed = Sampler("processed_logprobs").forward(logits, md,
                                                      logprobs_mode_override="processed_logits")
    torch.testing.assert_close(processed.logprobs_tensors.logprobs,
                               torch.log_softmax(logits, dim=-1), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"vLLM leaves the logprobs tensor unset"):
        Sampler("raw_logprobs").forward(logits, md, logprobs_mode_override="processed_logits")


def test_no_rows_with_the_full_matrix_asked_for():
    out = Sampler().forward(torch.zeros(0, V), metadata(0, max_num_logprobs=-1))
    assert out.sampled_token_ids.shape == (0, 1)
    assert out.logprobs_tensors.logprobs.shape == (0, V)


def test_a_nan_temperature_is_refused_not_made_greedy(logits):
    md = metadata(4, all_greedy=False, temperature=torch.tensor([1.0, float("nan"), 1.0, 1.0]))
    with pytest.raises(ValueError, match="request 1: temperature must be finite and >= 0, got nan"):
        Sampler().forward(logits, md)


@pytest.mark.parametrize("fields, message", [
    (dict(output_token_ids=[[], []]), "sampling_metadata.output_token_ids: expected 4 rows, got 2"),
    (dict(all_greedy=False, temperature=torch.ones(3)),
     "sampling_metadata.temperature: expected 4 rows, got 3"),
    (dict(no_penalties=False, presence_penalties=None),
     "sampling_metadata.presence_penalties: needed when no_penalties is False"),
    (dict(allowed_token_ids_mask=torch.zeros(2, V, dtype=torch.bool)),
     "sampling_metadata.allowed_token_ids_mask: expected 4 rows, got 2"),
])
def test_metadata_of_the_wrong_length_is_named(logits, fields, message):
    with pytest.raises(lastmile.InvalidArgument) as e:
        Sampler().forward(logits, metadata(4, **fields))
    assert str(e.value) == message


@pytest.mark.parametrize("fields, forward_args, error, message", [
    (dict(logitsprocs=[MinPLogitsProcessor([1.0, 1.0])]), {}, lastmile.InvalidArgument,
     "sampling_metadata.logitsprocs: MinPLogitsProcessor.min_p: expected 4 rows, got 2"),
    (dict(logitsprocs=[LogitBiasLogitsProcessor({7: {1: 1.0}})]), {}, lastmile.InvalidArgument,
     "sampling_metadata.logitsprocs: LogitBiasLogitsProcessor names row 7, not one of the "
     "batch's 4"),
    (dict(logitsprocs=[MinTokensLogitsProcessor({"0": (3, [], {1})})]), {},
     lastmile.InvalidArgument,
     "sampling_metadata.logitsprocs: MinTokensLogitsProcessor names row '0', not one of the "
     "batch's 4"),
    # An empty bad word is named by its place in the metadata, placeholders or not.
    (dict(output_token_ids=[[-1], [], [], []], bad_words_token_ids={0: [[5, 6], []]}), {},
     lastmile.InvalidArgument, "request 0: bad_words_token_ids[1] must not be empty"),
    (dict(bad_words_token_ids={2: [[]]}), {},
     lastmile.InvalidArgument, "request 2: bad_words_token_ids[0] must not be empty"),
    (dict(generators={0: 5}, all_greedy=False, all_random=True, temperature=torch.ones(4)), {},
     TypeError, "sampling_metadata.generators[0]: expected a torch.Generator, got int"),
    # A mask that is not vLLM's bool [rows, vocab] would be read as another set of tokens (an
    # int mask's ~ allows every token), so it is refused, as vLLM's masked_fill_ refuses it.
    (dict(allowed_token_ids_mask=torch.zeros(4, V, dtype=torch.int64)), {},
     lastmile.InvalidArgument,
     f"sampling_metadata.allowed_token_ids_mask: expected a bool tensor [4, {V}] (True = "
     f"forbidden), got torch.int64 tensor of shape (4, {V})"),
    (dict(allowed_token_ids_mask=torch.zeros(1, 4, V, dtype=torch.bool)), {},
     lastmile.InvalidArgument,
     f"sampling_metadata.allowed_token_ids_mask: expected a bool tensor [4, {V}] (True = "
     f"forbidden), got torch.bool tensor of shape (1, 4, {V})"),
    (dict(allowed_token_ids_mask=torch.zeros(4, V - 2, dtype=torch.bool)), {},
     lastmile.InvalidArgument,
     f"sampling_metadata.allowed_token_ids_mask: expected a bool tensor [4, {V}] (True = "
     f"forbidden), got torch.bool tensor of shape (4, {V - 2})"),
    (dict(allowed_token_ids_mask=[[False] * V] * 4), {}, lastmile.InvalidArgument,
     f"sampling_metadata.allowed_token_ids_mask: expected a bool tensor [4, {V}] (True = "
     f"forbidden), got list"),
    # Per-row entries for a row past the batch would be dropped without a word.
    (dict(bad_words_token_ids={5: [[7]]}), {}, lastmile.InvalidArgument,
     "sampling_metadata.bad_words_token_ids: names row 5, not one of the batch's 4"),
    (dict(logprob_token_ids={-1: [1]}), {}, lastmile.InvalidArgument,
     "sampling_metadata.logprob_token_ids: names row -1, not one of the batch's 4"),
    (dict(generators={"0": torch.Generator()}, all_greedy=False, all_random=True,
          temperature=torch.ones(4)), {}, lastmile.InvalidArgument,
     "sampling_metadata.generators: names row '0', not one of the batch's 4"),
    (dict(bad_words_token_ids={torch.tensor(1): [[5]], 1: [[6]]}), {}, lastmile.InvalidArgument,
     "sampling_metadata.bad_words_token_ids: names row 1 twice"),
    # A bad word beside a history with placeholders is checked before the placeholder rule
    # keeps only the words whose prefix ends the history.
    (dict(output_token_ids=[[2, -1], [], [], []], bad_words_token_ids={0: [[3], [1, 99]]}), {},
     lastmile.InvalidArgument, f"request 0: bad_words_token_ids[1][1] must be in [0, {V}), got 99"),
    # A history with placeholders is named at the caller's index, placeholders counted.
    (dict(output_token_ids=[[-1, -1, 3, -2], [], [], []]), {}, lastmile.InvalidArgument,
     f"request 0: output_token_ids[3] must be in [0, {V}) or -1 (a placeholder), got -2"),
    (dict(output_token_ids=[[], [-1, V], [], []]), {}, lastmile.InvalidArgument,
     f"request 1: output_token_ids[1] must be in [0, {V}) or -1 (a placeholder), got {V}"),
    (dict(max_num_logprobs=1), dict(logprobs_mode_override=3), TypeError,
     "logprobs_mode_override: expected a str or None, got int"),
    (dict(), dict(predict_bonus_token="no"), TypeError,
     "predict_bonus_token must be a bool, got str"),
])
def test_malformed_metadata_and_arguments_are_named(logits, fields, forward_args, error,
                                                    message):
    with pytest.raises(error) as e:
        Sampler().forward(logits, metadata(4, **fields), **forward_args)
    assert str(e.value) == message


def test_vllms_own_metadata_shapes_are_taken(logits):
    # vLLM passes output_token_ids = [] when nothing reads the history, and spec_token_ids for every
    # slot of its persistent batch (max_num_reqs), not only the rows of this call.
    md = metadata(4, output_token_ids=[], spec_token_ids=[[] for _ in range(8)])
    assert Sampler().forward(logits, md).sampled_token_ids.reshape(-1).tolist() == \
        logits.argmax(dim=-1).tolist()


def test_a_row_key_that_is_a_0d_tensor_is_read_as_its_row(logits):
    # Looked up by int rows, such a key was dropped; it is the row its value says.
    top = int(logits[0].argmax())
    out = Sampler().forward(logits, metadata(4, bad_words_token_ids={torch.tensor(0): [[top]]}))
    assert int(out.sampled_token_ids[0, 0]) != top
