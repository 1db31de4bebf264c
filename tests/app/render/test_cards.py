"""app.render.cards: the KV formula card, the stat cards, the rolling table and the model badge."""

from app.render import cards
from tests.support.fakes import fake_info


def test_kv_formula_with_the_embedded_models_numbers():
    info = fake_info()
    assert cards.kv_bytes_per_token(30, 3, 64, 4) == 46_080
    html = cards.kv_formula_html(info, tokens=57, measured_bytes=57 * 46_080)
    for piece in ("30 layers", "3 KV heads", "64 head_dim", "4 bytes", "float32", "46,080 B per token",
                  "2,626,560 B", "✓ equal", "grouped-query"):
        assert piece in html
    assert "differs by 1 B" in cards.kv_formula_html(info, tokens=1, measured_bytes=46_081)


def test_stat_cards_and_rolling_table():
    html = cards.stat_cards_html({"ttft_s": 0.25, "tpot_s": 0.04, "decode_tokens_per_s": 25.0,
                                  "prefill_tokens_per_s": 400.0, "e2e_s": 3.0, "queue_time_s": 0.0,
                                  "prompt_tokens": 12, "output_tokens": 70, "final": True})
    for piece in ("TTFT", "250.0 ms", "40.0 ms", "25.0 tok/s", "400 tok/s", "3.00 s", "0.0 ms", "70 output tokens"):
        assert piece in html
    assert html.count("stat-card") == 6
    table = cards.rolling_table_html({"count": 3, "finished": 2, "aborted": 1, "failed": 0,
                                      "ttft_s": {"p50": 0.1, "p90": 0.2, "p99": 0.3},
                                      "tpot_s": {"p50": None, "p90": None, "p99": None},
                                      "e2e_s": {"p50": 1.0, "p90": 2.0, "p99": 3.0}})
    assert "100.0 ms" in table and "3.00 s" in table and "1 stopped" in table and "–" in table


def test_model_badge_names_the_model_and_its_size():
    html = cards.model_badge_html(fake_info())
    assert "smollm2-135m" in html and "134.5M parameters" in html and "538.1 MB" in html and "cpu" in html


def test_badge_shows_the_precision_and_the_kv_formula_follows_the_kv_dtype():
    info = fake_info(weights_bytes=94_835_584, dtype="bfloat16", dtype_bytes=2, weights="int4",
                     weights_note="Q4_1 blocks", kv_dtype="fp8 (e4m3)", kv_dtype_bytes=1)
    badge = cards.model_badge_html(info)
    assert "weights <b>int4</b>" in badge and "compute bfloat16" in badge and "fp8 (e4m3)" in badge
    assert "94.8 MB (int4)" in badge and "Q4_1 blocks" in badge
    html = cards.kv_formula_html(info, tokens=10, measured_bytes=115_200, pool_bytes=512 * 2**20)
    assert "× 1 bytes (fp8 (e4m3))" in html and "11,520 B per token" in html and "✓ equal" in html
    assert "holds 46,603 tokens" in html and "2× as many</b> as in bfloat16 (23,301)" in html
    plain = cards.kv_formula_html(fake_info(), pool_bytes=512 * 2**20)
    assert "holds 11,650 tokens." in plain and "as many" not in plain   # same dtype: no comparison


def test_the_pool_line_names_the_scratch_block_the_pool_panel_leaves_out():
    """The student read "holds 23,296 tokens" (1,456 blocks of 16) beside a block pool of 1,455
    blocks: the line now says the scheduler hands out 1,455 and keeps one as scratch; a pool
    handing out every block says nothing of it."""
    per_tok = 46_080  # fake_info()'s bytes per token
    pool = 1_456 * 16 * per_tok
    line = cards.kv_formula_html(fake_info(), pool_bytes=pool, pool_blocks=(1_455, 16))
    assert "holds 23,296 tokens = 1,456 blocks of 16; the scheduler hands out 1,455 of them" in line
    assert "keeps 1 as scratch" in line
    assert "scratch" not in cards.kv_formula_html(fake_info(), pool_bytes=pool, pool_blocks=(1_456, 16))
