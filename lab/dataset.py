"""Reading the shared routing-outcome data (``../shared/datasets/routing``).

    rows = load_rows(default_data_dir(), TRAIN_FILES)
    rows[0].prompt, rows[0].scores      # {"llmrouter-dcrouter/qwen2.5-7b-instruct": 1.0, ...}

The data is never copied into the repository; these helpers only read it.
A model is identified by ``"<source>/<name>"`` because the three sources
measured different model sets under different prompts and graders: the same
name in two sources would not mean the same ability.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TRAIN_FILES = (
    "llmrouter_train.jsonl",
    "routerbench_arc_challenge_train.jsonl",
    "routerbench_mbpp_train.jsonl",
    "routerbench_winograde_train.jsonl",
    "routerdc7_train.jsonl",
)
TEST_FILE = "llmrouter_test.jsonl"
PRICED_SOURCE = "llmrouter-dcrouter"

# Task label -> skill. Tasks that are the same benchmark in two sources share a
# skill so the skill classifier and the interactions pool their evidence.
SKILL_OF_TASK = {
    "agentverse-logicgrid": "logic_puzzle",
    "agentverse-mgsm": "math_boxed",
    "gsm8k": "math_word",
    "math": "math_competition",
    "mbpp": "code_from_spec",
    "human_eval": "code_completion",
    "humaneval": "code_completion",
    "commongen": "generation",
    "natural_qa": "open_qa",
    "trivia_qa": "trivia",
    "mmlu": "knowledge_mc",
    "gpqa": "expert_science",
    "arc_challenge": "science_mc",
    "arc-challenge": "science_mc",
    "arc_easy": "science_mc",
    "openbook_qa": "openbook",
    "commonsense_qa": "commonsense",
    "winogrande": "coreference",
    "cmmlu": "chinese_knowledge",
}
SKILLS: tuple[str, ...] = tuple(sorted(set(SKILL_OF_TASK.values())))

# Vendor lineage of each training model: the family names config authors use.
FAMILIES: tuple[str, ...] = ("claude", "gemma", "gpt", "llama", "mistral", "qwen", "yi")
_FAMILY_MARKERS = (
    ("claude", "claude"),
    ("gpt-", "gpt"),
    ("gemma", "gemma"),
    ("qwen", "qwen"),
    ("yi-", "yi"),
    ("llama", "llama"),
    ("wizardlm", "llama"),  # WizardLM-13B-V1.2 is a Llama-2 fine-tune
    ("mistral", "mistral"),
    ("mixtral", "mistral"),
    ("zephyr", "mistral"),  # zephyr-7b-beta is a Mistral-7B fine-tune
)


def family_of(model_name: str) -> str | None:
    """Vendor family of a model name, or None when no marker matches."""
    lowered = model_name.lower()
    for marker, family in _FAMILY_MARKERS:
        if marker in lowered:
            return family
    return None


@dataclass(frozen=True, slots=True)
class Row:
    prompt: str
    task: str
    source: str
    scores: dict[str, float]  # model key -> score in [0, 1]


def default_data_dir() -> Path:
    """``<repo>/../shared/datasets/routing``."""
    return Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "routing"


def model_key(source: str, name: str) -> str:
    return f"{source}/{name}"


def load_rows(data_dir: Path, files: Iterable[str]) -> list[Row]:
    rows = []
    for name in files:
        with open(Path(data_dir) / name, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                obj = json.loads(line)
                source = obj["source"]
                scores = {model_key(source, m): float(s) for m, s in obj["scores"].items()}
                rows.append(Row(obj["prompt"], obj["task"], source, scores))
    return rows


def load_prices(data_dir: Path) -> dict[str, float]:
    """Model key -> blended price in $/Mtok (mean of input and output price)."""
    with open(Path(data_dir) / "models.json", encoding="utf-8") as fh:
        catalogue = json.load(fh)
    prices = {}
    for name, info in catalogue.get(PRICED_SOURCE, {}).items():
        blended = (info["input_usd_per_mtok"] + info["output_usd_per_mtok"]) / 2.0
        prices[model_key(PRICED_SOURCE, name)] = blended
    return prices


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
