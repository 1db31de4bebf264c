"""Memory breakdown and NVML readings: fake CUDA stats and fake NVML for every failure mode,
the CPU breakdown and the KV formula on the embedded model."""

import os
import sys
import time
from types import SimpleNamespace

import psutil
import pytest
import torch

from engine.model.accounting import cache_tensor_bytes, parameter_count, weight_bytes
from engine.model.model_spec import ModelSpec
from engine.telemetry.estimator import activation_estimate, load_spec
from engine.telemetry.memory import MemoryProbe
from engine.telemetry.nvml import NOT_IN_LIST, GpuMonitor

CUDA_PARTS = ["weights", "kv_cache", "activations", "workspaces", "allocator_cache",
              "context_other", "free"]
GiB = 2**30


class FakeNVMLError(Exception):
    def __init__(self, value, text):
        super().__init__(text)
        self.value = value


class FakeNVML:
    """pynvml's surface with configurable answers; ``fail`` maps a function name to an error."""

    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, total=80 * GiB, used=10 * GiB, pids=None, fail=None, used_by_me=6 * GiB):
        self.total, self.used, self.fail = total, used, fail or {}
        self.pids = [os.getpid()] if pids is None else pids
        self.used_by_me = used_by_me
        self.shutdown_called = False

    def _maybe_fail(self, name):
        if name in self.fail:
            raise self.fail[name]

    def nvmlInit(self):
        self._maybe_fail("nvmlInit")

    def nvmlShutdown(self):
        self.shutdown_called = True

    def nvmlDeviceGetHandleByIndex(self, i):
        self._maybe_fail("handle")
        return ("gpu", i)

    uuids = {"GPU-aaaa-1111": ("gpu", 3), "MIG-bbbb-2222": ("mig", 0)}

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.uuids:
            raise FakeNVMLError(13, "Not Found")
        return self.uuids[uuid]

    def nvmlDeviceGetName(self, h):
        return b"Fake H200"

    def nvmlDeviceGetMemoryInfo(self, h):
        self._maybe_fail("memory")
        return SimpleNamespace(total=self.total, used=self.used, free=self.total - self.used)

    def nvmlDeviceGetUtilizationRates(self, h):
        self._maybe_fail("util")
        return SimpleNamespace(gpu=37, memory=12)

    def nvmlDeviceGetPowerUsage(self, h):
        self._maybe_fail("power")
        return 123_456  # milliwatts

    def nvmlDeviceGetTemperature(self, h, kind):
        self._maybe_fail("temp")
        return 51

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._maybe_fail("procs")
        return [SimpleNamespace(pid=p, usedGpuMemory=self.used_by_me) for p in self.pids]


NOT_SUPPORTED = FakeNVMLError(3, "Not Supported")


def test_nvml_full_reading_converts_units():
    r = GpuMonitor(nvml_module=FakeNVML()).read()
    assert r.available and r.reason == "ok" and r.field_errors == {}
    assert r.name == "Fake H200" and r.util_pct == 37.0 and r.temp_c == 51.0
    assert r.power_w == pytest.approx(123.456)  # mW -> W
    assert (r.mem_total_bytes, r.mem_used_bytes, r.mem_free_bytes) == (80 * GiB, 10 * GiB, 70 * GiB)
    assert r.process_bytes == 6 * GiB
    assert r.to_dict()["power_w"] == pytest.approx(123.456)


def test_nvml_module_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    r = GpuMonitor().read()
    assert not r.available and "nvidia-ml-py not installed" in r.reason
    assert r.mem_total_bytes is None and r.power_w is None


def test_nvml_init_fails():
    fake = FakeNVML(fail={"nvmlInit": FakeNVMLError(9, "Driver Not Loaded")})
    mon = GpuMonitor(nvml_module=fake)
    r = mon.read()
    assert not r.available
    assert r.reason == "no NVIDIA driver (NVML init failed: Driver Not Loaded)"
    assert mon.read().reason == r.reason  # remembered, no crash on the second read
    mon.close()
    assert not fake.shutdown_called  # never initialised, nothing to shut down


def test_nvml_no_device_handle():
    r = GpuMonitor(nvml_module=FakeNVML(fail={"handle": FakeNVMLError(2, "Invalid Argument")})).read()
    assert not r.available and "no GPU 0" in r.reason


def test_nvml_not_supported_mig():
    fake = FakeNVML(fail={"memory": NOT_SUPPORTED, "util": NOT_SUPPORTED, "procs": NOT_SUPPORTED})
    r = GpuMonitor(nvml_module=fake).read()
    assert r.available  # the rest keeps working
    assert r.mem_total_bytes is None and r.util_pct is None and r.process_bytes is None
    assert r.field_errors["memory"].startswith("NotSupported")
    assert "NotSupported" in r.reason and r.power_w == pytest.approx(123.456)


def test_nvml_process_not_listed():
    r = GpuMonitor(nvml_module=FakeNVML(pids=[1, 2])).read()
    assert r.process_bytes is None and r.field_errors["process_bytes"] == NOT_IN_LIST
    assert r.mem_used_bytes == 10 * GiB


def test_nvml_process_memory_not_reported():
    r = GpuMonitor(nvml_module=FakeNVML(used_by_me=None)).read()
    assert r.process_bytes is None and "per-process" in r.field_errors["process_bytes"]


def test_nvml_power_fails():
    r = GpuMonitor(nvml_module=FakeNVML(fail={"power": FakeNVMLError(999, "Unknown Error")})).read()
    assert r.power_w is None and r.field_errors == {"power_w": "Unknown Error"}
    assert r.reason == "partial: power_w: Unknown Error" and r.temp_c == 51.0


def test_nvml_close_shuts_down():
    fake = FakeNVML()
    mon = GpuMonitor(nvml_module=fake)
    mon.read()
    mon.close()
    assert fake.shutdown_called and not mon.read().available


# --- memory breakdown with fake CUDA allocator statistics -------------------------------------

WEIGHTS = 1000 * 256 * 4  # nn.Embedding(1000, 256) in fp32


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda's allocator statistics and mem_get_info, counted: ``calls`` records each."""
    stats = {"allocated": 0, "reserved": 0, "peak": 0, "resets": 0, "free": 3_000_000,
             "total": 8_000_000, "calls": []}

    def call(name, value):
        stats["calls"].append(name)
        return value

    monkeypatch.setattr(torch.cuda, "memory_allocated",
                        lambda d=None: call("memory_allocated", stats["allocated"]))
    monkeypatch.setattr(torch.cuda, "memory_reserved",
                        lambda d=None: call("memory_reserved", stats["reserved"]))
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda d=None: call("memory_stats", {
        "allocated_bytes.all.current": stats["allocated"],
        "reserved_bytes.all.current": stats["reserved"],
        "allocated_bytes.all.peak": stats["peak"]}))
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda d=None: call("mem_get_info", (stats["free"], stats["total"])))

    def reset(d=None):
        stats["resets"] += 1
        stats["peak"] = stats["allocated"]

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    return stats


def _probe(gpu):
    spec = load_spec("smollm2-135m")
    return MemoryProbe(torch.nn.Embedding(1000, 256), "cuda", spec, 2, gpu=gpu)


def _check(bd):
    assert all(p.bytes >= 0 for p in bd.parts)
    assert sum(p.bytes for p in bd.parts) == bd.total_bytes


def test_cuda_breakdown_in_a_step(fake_cuda):
    nv = FakeNVML(total=8_000_000, used=5_000_000)
    probe = _probe(GpuMonitor(nvml_module=nv))
    # 60 kB of workspaces stay allocated between steps, besides weights and the KV cache
    fake_cuda.update(allocated=WEIGHTS + 100_000 + 60_000, reserved=3_000_000)
    probe.begin_step()
    assert fake_cuda["resets"] == 1
    fake_cuda["peak"] = WEIGHTS + 160_000 + 700_000  # a transient 700 kB during the step
    fake_cuda["calls"].clear()
    bd = probe.end_step(kv_bytes=100_000, batch=1, tokens=8)
    _check(bd)
    assert [p.name for p in bd.parts] == CUDA_PARTS
    got = {p.name: p.bytes for p in bd.parts}
    assert got["weights"] == WEIGHTS and got["kv_cache"] == 100_000
    assert got["activations"] == 700_000  # the step's growth only, workspaces apart
    assert got["workspaces"] == 60_000
    assert got["allocator_cache"] == 3_000_000 - (WEIGHTS + 860_000)
    assert got["context_other"] == 8_000_000 - 3_000_000 - 3_000_000
    assert got["free"] == 3_000_000
    assert bd.total_bytes == 8_000_000 and bd.total_label == "GPU total (mem_get_info)"
    assert all(p.measured for p in bd.parts) and bd.device == "cuda:0"
    # one read of the allocator statistics, one of the device totals, and no NVML
    assert sorted(fake_cuda["calls"]) == ["mem_get_info", "memory_stats"]


def test_idle_breakdown_has_no_activations(fake_cuda):
    probe = _probe(GpuMonitor(nvml_module=FakeNVML(total=8_000_000, used=4_000_000)))
    fake_cuda.update(allocated=WEIGHTS + 30_000 + 5_000, reserved=3_000_000,
                     peak=WEIGHTS + 999_000)
    bd = probe.snapshot(kv_bytes=30_000)
    _check(bd)
    assert bd.part("activations").bytes == 0 and "no step running" in bd.part("activations").note
    assert bd.part("workspaces").bytes == 5_000
    assert "this process per NVML" in bd.part("context_other").note


def test_engine_thread_never_reads_nvml(fake_cuda):
    class CountingMonitor:
        reads = 0

        def read(self):
            CountingMonitor.reads += 1
            raise AssertionError("NVML read inside a step")

    probe = _probe(CountingMonitor())
    for _ in range(3):
        probe.begin_step()
        _check(probe.end_step(0, 1, 1))
    assert CountingMonitor.reads == 0


def test_cuda_breakdown_without_device_totals(fake_cuda, monkeypatch):
    def fail(d=None):
        raise RuntimeError("no totals")

    monkeypatch.setattr(torch.cuda, "mem_get_info", fail)
    probe = _probe(GpuMonitor(nvml_module=FakeNVML()))
    fake_cuda.update(allocated=WEIGHTS + 50_000, reserved=2_000_000, peak=WEIGHTS + 90_000)
    bd = probe.end_step(kv_bytes=50_000, batch=1, tokens=1)
    _check(bd)
    assert bd.total_bytes == 2_000_000 and "N/A" in bd.total_label
    assert not bd.part("free").measured
    assert any("mem_get_info failed" in n for n in bd.notes)


@pytest.mark.parametrize("free, total", [(0, 0), (3_000_000, 8_000_000), (100, 2_000_000)])
def test_cuda_parts_never_negative_and_sum(fake_cuda, free, total):
    fake_cuda.update(free=free, total=total)
    probe = _probe(GpuMonitor(nvml_module=FakeNVML(pids=[1])))
    for alloc, reserved, peak, kv in [(0, 0, 0, 0), (WEIGHTS, 1_500_000, WEIGHTS, 10),
                                      (WEIGHTS // 2, 600_000, WEIGHTS // 2, 400_000)]:
        fake_cuda.update(allocated=alloc, reserved=reserved, peak=peak)
        probe.begin_step()
        _check(probe.end_step(kv, 1, 4))
        _check(probe.snapshot(kv))


def test_weights_count_tied_storage_once():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(100, 8)
            self.head = torch.nn.Linear(8, 100, bias=False)
            self.head.weight = self.embed.weight

    probe = MemoryProbe(Tied(), "cpu", load_spec("gpt2"), 4)
    assert probe.weights == 100 * 8 * 4


def test_cpu_breakdown_small_model():
    spec = load_spec("smollm2-135m")
    probe = MemoryProbe(torch.nn.Linear(64, 64), "cpu", spec, 4)
    before = psutil.Process().memory_info().rss
    bd = probe.end_step(kv_bytes=12_345, batch=2, tokens=7)
    after = psutil.Process().memory_info().rss
    _check(bd)
    assert [p.name for p in bd.parts] == ["weights", "kv_cache", "activations", "runtime_other"]
    assert bd.total_label == "process RSS" and min(before, after) - 2**20 <= bd.total_bytes \
        <= max(before, after) + 2**20
    act = bd.part("activations")
    assert not act.measured and act.bytes == activation_estimate(spec, 4, 2, 7)
    assert bd.part("weights").bytes == (64 * 64 + 64) * 4 and bd.part("weights").measured
    assert bd.to_dict()["parts"][1] == {"name": "kv_cache", "bytes": 12_345, "measured": True,
                                        "note": "sum of nbytes of the cache tensors"}


def test_cpu_parts_sum_even_when_estimate_exceeds_rss():
    huge = ModelSpec.from_config({"num_hidden_layers": 1, "num_attention_heads": 1,
                                  "hidden_size": 10**6, "intermediate_size": 10**7,
                                  "vocab_size": 10})
    bd = MemoryProbe(torch.nn.Linear(4, 4), "cpu", huge, 4).end_step(0, 64, 64)
    _check(bd)
    assert bd.total_label != "process RSS" and bd.notes


def test_cpu_end_step_is_cheap():
    probe = MemoryProbe(torch.nn.Linear(8, 8), "cpu", load_spec("smollm2-135m"), 4)
    n = 500
    t0 = time.perf_counter()
    for _ in range(n):
        probe.end_step(1000, 1, 1)
    per_call = (time.perf_counter() - t0) / n
    assert per_call < 2e-3  # target is ~0.1 ms; a loose guard against a heavy path creeping in


# --- the embedded model ----------------------------------------------------------------------

@pytest.mark.fast
def test_measured_kv_equals_formula_on_embedded_model(loaded):
    from transformers import DynamicCache

    model, spec = loaded.model, load_spec("smollm2-135m")
    assert ModelSpec.from_config(model.config).kv_bytes_per_token(4) == spec.kv_bytes_per_token(4)
    assert parameter_count(model) == spec.weight_count()  # the table matches the real model
    cache = DynamicCache(config=model.config)
    ids = torch.tensor([[1, 520, 3129, 314, 260, 1789, 28, 2]])  # 8 prompt tokens
    with torch.no_grad():
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        assert cache_tensor_bytes(cache) == spec.kv_cache_bytes(8, 4) == 8 * 46_080
        for step in range(1, 4):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            assert cache_tensor_bytes(cache) == spec.kv_cache_bytes(8 + step, 4)
    assert cache.get_seq_length() == 11


def test_cpu_breakdown_on_embedded_model(loaded):
    probe = MemoryProbe(loaded.model, "cpu", loaded.spec, 4)
    bd = probe.end_step(kv_bytes=10 * 46_080, batch=1, tokens=10)
    _check(bd)
    assert bd.part("weights").bytes == weight_bytes(loaded.model) > 500_000_000
    assert bd.total_label == "process RSS" and bd.part("runtime_other").bytes > 0


@pytest.mark.gpu
def test_real_cuda_breakdown():
    model = torch.nn.Linear(1024, 1024).cuda()
    spec = load_spec("smollm2-135m")
    probe = MemoryProbe(model, "cuda", spec, 4)
    probe.begin_step()
    x = torch.randn(512, 1024, device="cuda")
    y = model(x)
    torch.cuda.synchronize()
    bd = probe.end_step(kv_bytes=0, batch=1, tokens=512)
    _check(bd)
    assert bd.part("weights").bytes == (1024 * 1024 + 1024) * 4
    assert bd.part("activations").bytes >= 2 * 512 * 1024 * 4  # x and y were alive
    del x, y


@pytest.mark.parametrize("uuid, handle, by", [
    ("aaaa-1111", ("gpu", 3), "UUID GPU-aaaa-1111"),   # CUDA_VISIBLE_DEVICES=3: torch's 0
    ("GPU-aaaa-1111", ("gpu", 3), "UUID GPU-aaaa-1111"),
    ("bbbb-2222", ("mig", 0), "UUID MIG-bbbb-2222"),   # a MIG slice
    ("cccc-3333", ("gpu", 0), "index 0"),              # unknown: the index is the fallback
    (None, ("gpu", 0), "index 0")])
def test_nvml_handle_is_chosen_by_uuid(uuid, handle, by):
    mon = GpuMonitor(0, nvml_module=FakeNVML(), uuid=uuid)
    assert mon.read().available
    assert mon._handle == handle and mon.found_by == by
