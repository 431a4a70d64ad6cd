"""verl's custom reward function: `compute_score`, loaded from the file the config names and called the way
verl's reward managers call it (once per sample; `score` is the reward, every other key is kept as
`reward_extra_info`). A sample that cannot be scored gets 0.0 flagged by `reward_error` = 1 (verl has no
"no reward" value), with NaN in every component.
"""

# requires: yaml

import importlib.util
from pathlib import Path

import yaml

import rewardpipe

if __name__ == "__main__":
    config = yaml.safe_load(Path(__file__).with_name("verl_reward.yaml").read_text())
    config = config["reward"]["custom_reward_function"]  # where verl 0.9.1's trainer reads it
    site_packages = str(Path(rewardpipe.__file__).parents[1])
    path = config["path"].replace("<site-packages>", site_packages)
    spec = importlib.util.spec_from_file_location("custom_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # what verl's get_custom_reward_fn does with the config
    compute_score = getattr(module, config["name"])

    for solution, ground_truth in [("6 * 7 = 42\n#### 42", "42"), ("It is 41.", "42"), ("#### 42", "forty-two")]:
        print(compute_score("openai/gsm8k", solution, ground_truth, extra_info={"question": "What is 6 * 7?"}))
