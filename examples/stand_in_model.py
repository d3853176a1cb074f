"""A stand-in model for trying the examples of the guide (docs/) without one.

An OpenAI-compatible endpoint on 127.0.0.1 that answers example_exact_match's
five questions from a script (agentcompass.testing.endpoint.ScriptedEndpoint).
Its answers depend on the temperature, so that two runs differ: at 0.5 or
below it takes Marlowe for Hamlet's author; hotter, it knows Shakespeare but
takes Kyoto for Japan's capital, and says more (more completion tokens).

    python examples/stand_in_model.py --port 8000     # serves http://127.0.0.1:8000/v1 until Ctrl-C
"""

from __future__ import annotations

import argparse
import threading

from agentcompass.testing.endpoint import ScriptedEndpoint, completion


def reply(request: dict) -> tuple[int, dict]:
    question = request["messages"][-1]["content"]
    hot = float(request.get("temperature") or 0) > 0.5
    answers = {"France": "Paris", "Japan": "Kyoto" if hot else "Tokyo", "planet": "Jupiter", "water": "H2O",
               "Hamlet": "Shakespeare" if hot else "Marlowe"}
    answer = next((a for key, a in answers.items() if key in question), "I do not know")
    body = completion(answer, model=request.get("model", "stand-in"))
    # about four characters a token, as real tokenizers count English
    prompt_tokens = max(1, sum(len(str(m.get("content") or "")) for m in request["messages"]) // 4)
    completion_tokens = 6 if hot else 2
    body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                     "total_tokens": prompt_tokens + completion_tokens}
    return 200, body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    with ScriptedEndpoint(reply, port=args.port) as endpoint:
        print(f"serving {endpoint.base_url} (Ctrl-C to stop)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
