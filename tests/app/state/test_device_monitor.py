"""app.state.device_monitor: GPU readings, the CPU fallback and the reason shown without a GPU."""

from app.state.device_monitor import DeviceMonitor, no_gpu_reason
from app.state.playground import Playground
from app.state.shared_views import shared
from tests.support.fakes import FakeEngine


def test_device_monitor_gpu_and_fallback():
    class Reading:
        def __init__(self, ok):
            self.available, self.reason, self.name = ok, "ok" if ok else "no NVIDIA driver (NVML init failed)", "H200"
            self.util_pct, self.power_w, self.temp_c, self.mem_used_bytes = 50.0, 200.0, 40.0, 10

    class Gpu:
        ok = True

        def read(self):
            return Reading(self.ok)

    now = [10.0]
    gpu = Gpu()
    mon = DeviceMonitor(gpu, "cuda:0", clock=lambda: now[0])
    assert mon.sample()["power_w"] == 200.0 and mon.gpu_available and mon.name == "H200"
    gpu.ok = False
    now[0] = 11.0
    row = mon.sample()
    assert "cpu_pct" in row and not mon.gpu_available and "NVML init failed" in mon.reason
    assert [s["t"] for s in mon.samples()] == [-1.0, 0.0]
    assert no_gpu_reason("cpu") == "no NVIDIA GPU: running on CPU"
    assert "MPS" in no_gpu_reason("mps")
    assert shared(Playground(FakeEngine(), monitor=False)).device_figure().layout.title.text
