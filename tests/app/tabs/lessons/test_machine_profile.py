"""One machine profile for every lesson: the Batch size lesson and the Memory-bound lesson print
the same ridge point, from one measurement, with when it was taken and the load then (the
student saw 39.4 FLOPs per byte in one and 3.0 in the other, both "measured just now")."""

import re

import pytest

from engine.experiments import intensity

from app.tabs.lessons import batch, machine_profile, roofline

SHAPE = intensity.DecodeShape(params=134_515_008, weight_bytes=94_835_584, kv_bytes_per_token=23_040,
                              layers=30, heads=9, head_dim=64)


@pytest.fixture(autouse=True)
def _fresh():
    machine_profile.forget()
    yield
    machine_profile.forget()


def _measures():
    """A machine whose figures move between calls, as a loaded one does."""
    figures = iter([(161.4e9, 4.1), (16.0e9, 5.3), (20.0e9, 6.0)])

    def measure():
        flops, bw = next(figures)
        return {"device": "cpu", "dtype": "bfloat16", "flops_per_s": flops, "bandwidth_gb_per_s": bw,
                "ridge": flops / (bw * 1e9)}
    return measure


def test_a_profile_is_kept_reused_and_measured_again_on_demand_or_when_old():
    measure, now = _measures(), [1000.0]
    first = machine_profile.current(measure, clock=lambda: now[0])
    now[0] += 60
    assert machine_profile.current(measure, clock=lambda: now[0]) == first  # reused, not remeasured
    again = machine_profile.current(measure, fresh=True, clock=lambda: now[0])
    assert again["flops_per_s"] == 16.0e9 and again["measured_at"] == 1060.0
    now[0] += machine_profile.MAX_AGE_S + 1
    assert machine_profile.current(measure, clock=lambda: now[0])["flops_per_s"] == 20.0e9
    assert machine_profile.stamp({"measured_at": 0.0, "load_average": 3.1}) == \
        "measured at 00:00 UTC on 1970-01-01, load average 3.1"


def test_the_batch_and_memory_bound_lessons_print_one_ridge_with_its_time_and_load():
    measure = _measures()
    # the Memory-bound lesson's button measures; the Batch size lesson's run comes after it
    theirs = machine_profile.current(measure, fresh=True)
    ours = batch.ridge_crossing(SHAPE, machine_profile.current(measure), 512)
    table = roofline.roofline_table(SHAPE, 512, theirs)
    text = batch.ridge_html(ours, None)
    row = next(line for line in table.splitlines() if line.startswith("| this machine"))
    their_ridge = row.split("|")[4].strip()
    our_ridge = re.search(r"= <b>([\d,.]+) FLOPs per byte</b>", text).group(1)
    assert our_ridge == their_ridge == "39.4"
    stamp = machine_profile.stamp(theirs)
    assert stamp in row and stamp in text


def test_the_overhead_table_reads_its_roof_from_the_same_profile():
    """The Memory-bound tab printed 15.9 GB/s above and 20.0 GB/s in its overhead table's roof:
    the table now takes the profile's bandwidth, and its read time and roof follow from it."""
    profile = machine_profile.current(_measures())          # 4.1 GB/s
    res = {"batch_sizes": [1], "eager_tokens_per_s": {1: 20.3}, "compiled_tokens_per_s": {1: 60.9},
           "roofline_fraction": {"eager": 0.1, "compiled": 0.3},
           "rounds": {"eager": {1: [20.3]}, "compiled": {1: [60.9]}},
           "bandwidth_gb_per_s": 20.0, "bytes_per_step": 96_000_000, "ceiling_tokens_per_s": 208.3,
           "compile": {"compile_s": 5.0, "cache_hits": 3}, "parity": [{"equal": True}],
           "profile": {p: dict.fromkeys(roofline.PARTS, 1.0) for p in ("eager", "compiled")}}
    table = roofline.overhead_table(roofline.with_profile_bandwidth(res, profile))
    assert "20.0 GB/s" not in table
    assert f"at the 4.1 GB/s of this machine's profile ({machine_profile.stamp(profile)}" in table
    assert f"**{96_000_000 / 4.1e9 * 1e3:.1f} ms**" in table and f"= {4.1e9 / 96e6:.0f} tokens/s" in table
    assert f"| eager (transformers' code) | 20.3 | 49.3 | {100 * 20.3 / (4.1e9 / 96e6):.1f}% |" in table


def test_the_profile_is_the_median_of_three_passes_with_fixed_settings(monkeypatch):
    """One routine, fixed settings: the read size, the product size and three timed passes
    each, whose median the profile keeps (the best pass is a shared machine's rare quiet
    moment; the student saw 155 then 302 GFLOP/s minutes apart)."""
    from types import SimpleNamespace

    from app.tabs.lessons import roofline as lesson
    from engine.experiments import roofline

    calls = []

    def bandwidth(device, size, repeats):
        calls.append(("bw", size, repeats))
        return {"best_gb_per_s": 20.0, "median_gb_per_s": 16.0}

    def matmul(device, dtype, n, repeats):
        calls.append(("mm", n, repeats))
        return {"best_flops_per_s": 300e9, "median_flops_per_s": 160e9}

    monkeypatch.setattr(roofline, "measure_bandwidth", bandwidth)
    monkeypatch.setattr(roofline, "measure_matmul_flops", matmul)
    engine = SimpleNamespace(info=SimpleNamespace(device="cpu", dtype="bfloat16"))
    m = lesson.measure_machine(engine)
    assert calls == [("bw", lesson.BANDWIDTH_BYTES, 3), ("mm", lesson.MATMUL_N, 3)]
    assert m["bandwidth_gb_per_s"] == 16.0 and m["flops_per_s"] == 160e9 and m["ridge"] == 10.0
