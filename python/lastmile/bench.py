"""``python -m lastmile.bench``: lastmile against a PyTorch implementation of vLLM's native CPU path.

Both samplers get the same tensors in one process. The baseline is vLLM V1's PyTorch path
(``apply_top_k_top_p_pytorch`` + the exponential race, spec §9.2-§9.5): a full-vocabulary sort
for top-k / top-p, softmax, ``probs / Exponential(1)`` and argmax. Prints medians per call and
the ratio baseline / lastmile per scenario.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable, Optional, Sequence

import torch

from . import Sampler


def vllm_native(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
                generator: torch.Generator) -> torch.Tensor:
    """vLLM's native random path on float32 logits [B, V]: one row per request, same params."""
    x = logits.float() / temperature
    top_k = top_k if 0 < top_k < x.shape[-1] else 0  # as vLLM's batch: top-k of V or more is off
    if top_k > 0 or top_p < 1.0:
        sorted_x, order = x.sort(dim=-1, descending=False)
        if top_k > 0:
            kth = sorted_x[:, -top_k].unsqueeze(1)
            sorted_x.masked_fill_(sorted_x < kth, float("-inf"))
        if top_p < 1.0:
            cumulative = sorted_x.softmax(dim=-1).cumsum(dim=-1)
            drop = cumulative <= 1 - top_p
            drop[:, -1] = False
            sorted_x.masked_fill_(drop, float("-inf"))
        x = x.scatter(dim=-1, index=order, src=sorted_x)
    probs = x.softmax(dim=-1)
    q = torch.empty_like(probs).exponential_(generator=generator)
    return probs.div_(q).argmax(dim=-1)


def median_seconds(call: Callable[[], object], min_calls: int = 5, min_seconds: float = 0.3) -> float:
    call()
    times = []
    while len(times) < min_calls or (sum(times) < min_seconds and len(times) < 25):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def llm_logits(batch: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """LLM-shaped rows: a few strong tokens over a heavy N(0, 2) tail."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, vocab, generator=g) * 2.0
    peaks = torch.randint(0, vocab, (batch, 8), generator=g)
    x.scatter_add_(1, peaks, torch.rand(batch, 8, generator=g) * 12 + 6)
    return x


SCENARIOS = {  # name: (temperature, top_k, top_p)
    "temperature": (0.8, 0, 1.0),
    "topk_topp": (0.7, 50, 0.9),
    "topp": (1.0, 0, 0.95),
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lastmile.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--threads", type=int, help="lastmile and torch threads (default: all)")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), action="append")
    args = parser.parse_args(argv)
    for name in ("batch", "vocab", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    logits = llm_logits(args.batch, args.vocab)
    sampler = Sampler(args.vocab, args.batch, threads=args.threads, seed=0)
    generator = torch.Generator().manual_seed(0)
    print(f"lastmile.bench: batch {args.batch}, vocab {args.vocab}, float32, torch threads "
          f"{torch.get_num_threads()}, lastmile {sampler.backend_name}; medians per call",
          file=sys.stderr)
    print(f"{'scenario':<14}{'lastmile_ms':>12}{'vllm_torch_ms':>15}{'ratio':>8}")
    for name in args.scenario or sorted(SCENARIOS):
        t, k, p = SCENARIOS[name]
        requests = [{"temperature": t, "top_k": k, "top_p": p, "seed": i} for i in range(args.batch)]
        print(f"  {name} ...", file=sys.stderr)
        ours = median_seconds(lambda: sampler.sample(logits, requests))
        base = median_seconds(lambda: vllm_native(logits, t, k, p, generator))
        print(f"{name:<14}{ours * 1e3:>12.2f}{base * 1e3:>15.2f}{base / ours:>7.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
