"""A model runner without a model, for driving ``LLMEngine``'s step in tests."""

import time

from engine.worker.runner_info import RunnerInfo
from engine.worker.runner_output import ModelRunnerOutput, SampleResult


class ScriptedRunner:
    """Answers every request with the same scripted tokens; each step takes ``step_s``."""

    device = "cpu"

    def __init__(self, script, step_s=0.005, bytes_per_token=1000):
        self.script = script
        self.step_s = step_s
        self.bytes_per_token = bytes_per_token
        self.released = []
        self.steps = []

    def execute(self, so):
        start = time.perf_counter()
        time.sleep(self.step_s)
        end = time.perf_counter()
        out = ModelRunnerOutput(start_s=start, end_s=end, batch_size=len(so.all_entries))
        self.steps.append([(e.seq.seq_id, e.num_new, e.phase) for e in so.all_entries])
        for e in so.all_entries:
            sid = e.seq.seq_id
            if e.samples:
                tok = self.script[len(e.seq.output_ids)]
                out.sampled[sid] = SampleResult(tok, 0.5, [tok, 1], [0.5, 0.25])
            out.kv_tokens[sid] = e.num_computed + e.num_new
            out.kv_bytes[sid] = self.kv_bytes(sid, out.kv_tokens[sid])
            out.spans[sid] = (start, end)
        return out

    def info(self):
        return RunnerInfo(backend="scripted")

    def kv_bytes(self, seq_id, num_tokens):
        return num_tokens * self.bytes_per_token

    def kv_cache_bytes(self):
        return 0

    def release(self, seq_ids):
        self.released.extend(seq_ids)

    def close(self):
        pass

    def recompute(self, ids):
        raise AssertionError("not used")
