"""app.render.fmt: bytes, counts, durations and rates as the page prints them."""

from app.render.fmt import fmt_bytes, fmt_int, fmt_rate, fmt_seconds


def test_formatting():
    assert fmt_bytes(46_080) == "46.1 KB"
    assert fmt_bytes(538_060_288) == "538.1 MB"
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(None) == "N/A"
    assert fmt_int(46080) == "46,080"
    assert fmt_seconds(0.0123) == "12.3 ms"
    assert fmt_seconds(2.5) == "2.50 s"
    assert fmt_rate(0) == "–" and fmt_rate(12.34) == "12.3 tok/s" and fmt_rate(1234) == "1,234 tok/s"
