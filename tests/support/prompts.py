"""The prompts of the greedy parity tests (English, Chinese, code, multi-turn, long, EOS early):
``{name: (prompt, raw)}``."""

LONG = " ".join(
    f"Paragraph {i}: the scheduler admits requests, the model runner executes prefill and "
    f"decode, and the sampler turns logits into tokens while the cache grows." for i in range(40))

PARITY_PROMPTS = {
    "english": ("Explain the KV cache in one sentence.", False),
    "chinese": ("写一首关于程序员加班的短诗。", False),
    "code": ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", True),
    "multi_turn": ([
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "What is prefill?"},
        {"role": "assistant", "content": "Prefill processes the whole prompt in one pass."},
        {"role": "user", "content": "And decode?"},
    ], False),
    "long_1000": ("Summarise this text:\n" + LONG, False),
    "eos_early": ("Reply with exactly one word: yes or no. Is water wet?", False),
}
