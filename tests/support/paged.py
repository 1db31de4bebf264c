"""Hand-driven paged steps on the embedded model, for the runner's and the backends' tests:
a small KV pool, sequences with their own blocks, and greedy steps without the scheduler."""

import torch

from engine import SamplingParams
from engine.core.scheduler_output import ScheduledSeq
from engine.core.sequence import Sequence
from engine.worker.kv_pool import KVPool

BLOCK_SIZE = 16
PROMPTS = [[1, 504, 3458, 282, 4649, 314], [1, 2683, 1659, 30, 3, 42, 314, 1689, 5]]


def make_pool(loaded, num_blocks=64) -> KVPool:
    """An fp32 pool of ``num_blocks`` blocks for the fp32 embedded model (the last one is the
    static backends' scratch block)."""
    spec = loaded.spec
    return KVPool(spec.layers, spec.kv_heads, spec.head_dim, num_blocks, BLOCK_SIZE,
                  torch.float32, "cpu")


def new_seq(rid, prompt, first_block, blocks=4) -> Sequence:
    """A sequence that owns blocks ``first_block ..``, nothing computed yet."""
    s = Sequence(rid, list(prompt), SamplingParams(temperature=0))
    s.block_table = list(range(first_block, first_block + blocks))
    return s


def greedy(forward, seqs, steps) -> list[list[int]]:
    """Prefill ``seqs`` in one step, then ``steps - 1`` decode steps of all of them, each
    token the argmax of ``forward(entries)``'s rows; the tokens of each sequence."""
    for _ in range(steps):
        entries = [ScheduledSeq.of(s, s.num_tokens - s.num_computed) for s in seqs]
        logits = forward(entries)
        for s, e, row in zip(seqs, entries, logits):
            s.num_computed += e.num_new
            s.output_ids.append(int(row.argmax()))
    return [s.output_ids for s in seqs]


def hf_greedy(model, prompt, steps) -> list[int]:
    """Hugging Face ``generate``'s greedy tokens (the reference)."""
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=steps, do_sample=False,
                             min_new_tokens=steps, pad_token_id=0)
    return out[0, len(prompt):].tolist()
