"""verifiers rubric functions: one per component of a built-in reward, called the way a `vf.Rubric` calls them
(keyword arguments `prompt`, `completion`, `answer`, ...; verifiers' message objects or plain dicts).

A component that cannot be computed returns NaN, where verifiers would substitute 0.0 for an exception:
the sample stays visibly unscored instead of entering the group's baseline as a zero.
"""

from rewardpipe.integrations.verifiers import rubric_functions

funcs, weights = rubric_functions("gsm8k")  # vf.Rubric(funcs=funcs, weights=weights)

if __name__ == "__main__":
    prompt = [{"role": "user", "content": "What is 6 * 7?"}]
    for text, answer in [("6 * 7 = 42\n#### 42", "42"), ("It is 41.", "42"), ("#### 42", "forty-two")]:
        completion = [{"role": "assistant", "content": text}]
        scores = {func.__name__: func(prompt=prompt, completion=completion, answer=answer) for func in funcs}
        print(scores, "weights", weights)
