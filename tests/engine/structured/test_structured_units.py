"""Structured output without the model: the structure's checks, the mask's two paths (NumPy on
CPU, torch on a device) against each other, free rows untouched, and the forced-token
bookkeeping."""

import numpy as np
import pytest
import torch

from engine.params import SamplingParams
from engine.structured import StructuredOutputError, StructuredOutputsParams
from engine.structured import masking
from engine.structured.bookkeeping import append_forced, token_marks, with_forced
from engine.worker.runner_output import SampleResult


def test_exactly_one_structure_and_typed_fields():
    assert StructuredOutputsParams(json='{"type": "object"}').json == {"type": "object"}
    assert StructuredOutputsParams(json=True).json == {}
    for bad, field in [({}, "structured_outputs"), ({"regex": 3}, "structured_outputs.regex"),
                       ({"regex": " "}, "structured_outputs.regex"),
                       ({"json": [1]}, "structured_outputs.json"),
                       ({"json_object": "yes"}, "structured_outputs.json_object"),
                       ({"choice": "ab"}, "structured_outputs.choice"),
                       ({"choice": ["a", ""]}, "structured_outputs.choice[1]")]:
        with pytest.raises(StructuredOutputError) as info:
            SamplingParams(structured_outputs=bad)
        assert info.value.field == field
    with pytest.raises(StructuredOutputError, match="structured_outputs"):
        SamplingParams(structured_outputs="json")


def test_cache_key_ignores_key_order():
    a = StructuredOutputsParams(json={"type": "object", "required": ["x"]})
    b = StructuredOutputsParams(json={"required": ["x"], "type": "object"})
    assert a.key() == b.key() and a.key() != StructuredOutputsParams(regex="x").key()


def _bitmask(allowed_ids_per_row, vocab):
    words = (vocab + 31) // 32
    bm = torch.zeros((len(allowed_ids_per_row), words), dtype=torch.int32)
    for r, ids in enumerate(allowed_ids_per_row):
        for i in ids:
            bm[r, i // 32] |= torch.tensor(1 << (i % 32), dtype=torch.int64).to(torch.int32)
    return bm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_both_mask_paths_agree_and_free_rows_stay_bit_for_bit(dtype):
    vocab = 100
    logits = torch.randn(4, vocab).to(dtype)
    rows = [0, 2]
    allowed = [[3, 31, 32, 99], [0]]
    bm = _bitmask(allowed, vocab)
    host = masking._unpack_host(bm, vocab)
    assert [np.flatnonzero(r).tolist() for r in host] == allowed
    assert torch.equal(masking.unpack_bitmask(bm, vocab, "cpu"), torch.from_numpy(host))
    cpu = masking._mask_cpu(logits, rows, host)
    dev = masking._mask_torch(logits, rows, bm)
    assert cpu.dtype == dtype and torch.equal(cpu, dev)
    assert torch.equal(cpu[1], logits[1]) and torch.equal(cpu[3], logits[3])
    assert torch.equal(cpu[0, allowed[0]], logits[0, allowed[0]])
    assert (cpu[0] > masking.MASKED_LOGPROB_BELOW).sum() == 4
    assert torch.softmax(cpu[2].float(), -1)[0] == 1.0  # one allowed token: probability 1
    assert torch.isfinite(cpu.float().sum(-1)).all()  # the sampler's finite check still holds


class _Seq:
    def __init__(self, state=None):
        self.output_ids, self.structured, self.seq_id = [5], state, "r"


def test_forced_tokens_are_appended_until_a_stop_and_marked():
    from engine.structured.state import StructuredState

    seq = _Seq(StructuredState(None, "json", 2, pending=[7, 8, 2], forced={0}, allowed={0: 1},
                               vocab_size=10))
    reason = append_forced(seq, lambda s, t: "stop" if t == 2 else None)
    assert reason == "stop" and seq.output_ids == [5, 7, 8, 2]
    detail = {"vocab_size": 10, "removed_mass": None, "removed_top": []}
    assert token_marks(seq, 0) == {"forced": True, "jumped": False, "allowed_tokens": 1,
                                   "mask_detail": detail}
    assert token_marks(seq, 2) == {"forced": True, "jumped": True, "allowed_tokens": None,
                                   "mask_detail": detail}
    choices = with_forced(seq, SampleResult(5, 0.5, [5], [0.5]), 4)
    assert [c.token_id for c in choices] == [5, 7, 8, 2] and choices[1].prob == 1.0
    assert token_marks(_Seq(), 0) == {}


def test_removed_by_mask_reports_the_mass_and_the_likeliest_removed_tokens():
    logits = torch.tensor([2.0, 1.0, 0.0, 3.0, -1.0])
    allowed = np.array([True, False, True, False, False])
    mass, top = masking.removed_by_mask(logits, allowed, k=2)
    probs = torch.softmax(logits, -1)
    assert mass == pytest.approx(float(probs[1] + probs[3] + probs[4]), rel=1e-5)
    assert [t for t, _ in top] == [3, 1] and top[0][1] == pytest.approx(float(probs[3]), rel=1e-5)


@pytest.mark.slow
def test_a_failed_matcher_leaves_only_eos_and_reports_the_error():
    from engine.structured.state import StructuredState

    class Broken:
        def consume_tokens(self, tokens):
            return False

        def get_error(self):
            return "token rejected"

    for eos in (2, 31, 63):
        seq = _Seq(StructuredState(Broken(), "json", eos))
        errors = {}
        bm = masking.fill_bitmask([seq], [0], 100, errors)
        assert isinstance(errors["r"], StructuredOutputError) and "token rejected" in str(errors["r"])
        assert np.flatnonzero(masking._unpack_host(bm, 100)[0]).tolist() == [eos]
