import numpy as np
import torch

import lastmile

sampler = lastmile.Sampler(vocab_size=6, max_batch=2, seed=0)
logits = torch.tensor([[0, 1, 0.5, -1, 3, 2], [1, 4, 0, 0, 2, -2]], dtype=torch.bfloat16)
out = sampler.sample(
    logits,  # read in place through DLPack: no copy, no conversion
    [
        lastmile.SamplingParams(temperature=0.0, logprob_token_ids=[0]),
        {"top_p": 0.9, "seed": 42, "output_token_ids": [1, 1], "frequency_penalty": 0.5},
    ],
    num_logprobs=2,
)
print(out.sampled_token_ids)  # int32 [2]
print(out.logprobs.token_ids)  # sampled token, then the top 2
print(np.round(out.token_logprobs.logprobs, 3))  # row 0 asked for token 0; row 1 pads -inf
try:
    sampler.sample(logits, [{}, {"top_p": 1.5}])
except lastmile.InvalidArgument as e:  # also a ValueError
    print(e)
