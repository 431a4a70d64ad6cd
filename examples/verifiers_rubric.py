"""A real `vf.Rubric` of a built-in reward's components (needs the `verifiers` package; `make test-verifiers`
runs this example in its own venv, `.venv-verifiers`)."""

# requires: verifiers

import verifiers as vf

from rewardpipe.integrations.verifiers import rubric

if __name__ == "__main__":
    rub = rubric("gsm8k")  # vf.Rubric(funcs=[format, answer_correct], weights=[0.5, 1.0])
    assert isinstance(rub, vf.Rubric)
    print(type(rub).__name__, rub.weights)
