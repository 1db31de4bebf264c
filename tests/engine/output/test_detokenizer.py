"""Incremental detokenizer and stop strings on the embedded model's real tokenizer."""

import pytest

from engine.output.detokenizer import IncrementalDetokenizer, StopStringMatcher


@pytest.mark.parametrize("text", [
    "写一首关于程序员加班的短诗。夜深了，键盘还在响。",
    "Emoji time 🎉🚀👩‍💻 and accents: café, naïve.",
    " leading space and  double  spaces",
    "def f(x):\n    return x ** 2  # 平方",
])
def test_deltas_have_no_replacement_char_and_join_to_full_decode(loaded, text):
    tok = loaded.tokenizer
    ids = tok(text, add_special_tokens=False)["input_ids"]
    d = IncrementalDetokenizer(tok)
    deltas = [d.add(i) for i in ids]
    deltas.append(d.finish())
    assert all("\ufffd" not in x for x in deltas)
    assert "".join(deltas) == tok.decode(ids, skip_special_tokens=True)
    # byte-level pieces really split characters here, so some steps emit nothing
    if any(ord(c) > 0x2000 for c in text):
        assert "" in deltas[:-1]


def test_special_tokens_never_appear(loaded):
    tok = loaded.tokenizer
    ids = tok("Hi", add_special_tokens=False)["input_ids"] + [2]  # <|im_end|>
    d = IncrementalDetokenizer(tok)
    out = "".join(d.add(i) for i in ids) + d.finish()
    assert out == "Hi"


def test_stop_matcher_finds_and_holds_back_prefixes():
    m = StopStringMatcher(["STOP", "\n\n"])
    assert m.find("abc STOP def", 0) == (4, "STOP")
    assert m.find("abc", 0) is None
    assert m.safe_end("hello ST") == len("hello ")
    assert m.safe_end("hello\n") == len("hello")
    assert m.safe_end("hello") == 5
    assert StopStringMatcher([]).safe_end("abc") == 3


def test_character_cut_by_max_tokens_is_dropped(loaded):
    tok = loaded.tokenizer
    ids = tok("程序员", add_special_tokens=False)["input_ids"]
    assert "\ufffd" in tok.decode(ids[:-1])  # the last character needs its final byte piece
    d = IncrementalDetokenizer(tok)
    deltas = [d.add(i) for i in ids[:-1]] + [d.finish()]
    assert "\ufffd" not in "".join(deltas) and "".join(deltas) == tok.decode(ids[:-1]).rstrip("\ufffd")


@pytest.mark.fast
def test_token_texts_equal_single_token_decodes(loaded):
    from engine.output.detokenizer import TokenTexts

    tokenizer = loaded.tokenizer
    texts = TokenTexts(tokenizer)
    ids = list(range(0, 2000, 37)) + [0, 37]
    assert [texts(i) for i in ids] == [tokenizer.decode([i]) for i in ids]
