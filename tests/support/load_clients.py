"""Load-test clients, run in their own process so the server's memory is measured alone.

Usage: python tests/load_clients.py URL CLIENTS PER_CLIENT  -> prints one JSON object.
"""

import json
import sys
import threading

from gradio_client import Client

from tests.support.load_plan import request_plan


def main() -> None:
    url, clients, per_client = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    results, errors, lock = {}, [], threading.Lock()

    def loop(c: int) -> None:
        cl = Client(url, verbose=False)
        for k in range(per_client):
            prompt, (t, seed, n) = request_plan(c, k)
            try:
                text = cl.predict(prompt=prompt, temperature=t, seed=seed, max_tokens=n, top_p=1.0,
                                  top_k=0, repetition_penalty=1.0, api_name="/generate")
            except Exception as exc:  # noqa: BLE001 - reported to the test
                with lock:
                    errors.append(f"client {c} request {k}: {exc}")
                continue
            with lock:
                results[f"{c},{k}"] = text

    threads = [threading.Thread(target=loop, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    print(json.dumps({"results": results, "errors": errors}, ensure_ascii=False))


if __name__ == "__main__":
    main()
