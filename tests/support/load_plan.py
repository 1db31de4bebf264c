"""The load test's request plan, shared by the test and its client process (no tests here)."""

PROMPTS = ["Name a colour.", "Name a fruit.", "写一个词。", "Say hi.", "Give a number.",
           "Name an animal.", "Name a planet.", "def add(a, b):"]
# (temperature, seed, max_tokens): greedy and seeded sampling, short and longer answers
SETTINGS = [(0.0, 0, 6), (0.8, 11, 10), (0.0, 0, 14), (1.0, 5, 4)]


def request_plan(client: int, k: int) -> tuple[str, tuple]:
    """The prompt and (temperature, seed, max_tokens) of client ``client``'s ``k``-th request."""
    return PROMPTS[(client + k) % len(PROMPTS)], SETTINGS[(client * 3 + k) % len(SETTINGS)]
