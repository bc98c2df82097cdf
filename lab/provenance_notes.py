"""Sections of PROVENANCE.md added since issue 22 (``lab/provenance.py`` writes them)."""

LEARNED_WEIGHT = """\
## Issue 22: how far d(x) follows the n-grams (`learned_weight`, 2026-12-06)

Out of fold, inside one task, the n-gram logit ranks the task's prompts no better than the
shape-and-rarity prior, yet d(x) followed it all the way wherever a prompt had enough seen
bigrams. `learned_weight` scales that pull: d(x) = prior + weight w(x) (learned - prior).
It is an inference-time setting, so one training scores every value. The measure of a
ranking inside a task is `versus_perfect` (`lab/outofdomain.py`): APGR against a
model that answers every prompt, averaged over the models that answer 0.3-0.9 of the
task's prompts, then over tasks. The older out-of-domain column pairs each source's
strongest and weakest model, and a weakest model scoring 0.0-0.2 on a task (llama3-chatqa
on MMLU, GSM8K) fails for its format, not the prompt.

In distribution, `python -m lab.model_selection --learned-weights 1 0.75 0.25` (seeds 7,
11, 23; the default column is the configured 0.5; "within" = `versus_perfect` of
`difficulty` over the held-out tasks):

| learned_weight | log loss | APGR | bar | frontier | within |
|---|--:|--:|--:|--:|--:|
| 1 (before) | **0.4958** | **0.769** | **+0.017** | -0.015 | 0.531 |
| 0.75 | 0.4985 | 0.763 | +0.017 | -0.017 | 0.533 |
| **0.5 (shipped)** | 0.5038 | 0.758 | +0.015 | -0.017 | **0.534** |
| 0.25 | 0.5120 | 0.755 | +0.017 | -0.016 | 0.532 |

Each task left out in turn, `python -m lab.model_selection --out-of-domain task
--learned-weights 1 0.75 0.25` (16 trainings, 21 min), mean over the 20 (source, task)
rows with a fair model: `difficulty` 0.521 at 1, 0.523 at 0.75, **0.526** at 0.5, 0.530
at 0.25, length 0.529 (GSM8K: 0.529 / 0.538 at 1, 0.535 / 0.551 at 0.5, 0.544 / 0.562 at
0.25, length 0.523 / 0.574). On the older strongest-vs-weakest column the weights do not
separate (0.512, 0.512, 0.511, 0.507; length 0.513).

A probe over all 15,431 training prompts (5 folds; script not kept) gave 0.539 / 0.543 /
0.540 within tasks at 1 / 0.5 / 0.25. So 0.5: the best within-task ranking in
distribution, ahead of 1 when a task is left out, for +0.008 log loss and -0.012 router
APGR on the hold-outs, the bar kept. The training models' routing is what it costs;
`difficulty`, which a config model routes by, ranks the development test file at 0.560
against 0.488. Weights, abilities and offsets are bit-identical to the artifact before
(sha256 bb1ca73f...); the metadata and the tier cuts change.

Checked afterwards on sets nothing trains on (`routegate eval --held-out`; README,
"Routing quality"): MMLU-Pro's STEM questions 0.573 / 0.562 / 0.524 against 0.564 / 0.553
/ 0.524, BBH date understanding 0.549 / 0.517 against 0.527 / 0.473, Arena-Bench chat
0.522 / 0.494 / 0.572 / 0.487 against 0.513 / 0.494 / 0.564 / 0.485, the Vicuna
benchmark 0.720 / 0.715 / 0.673 / 0.562 against 0.711 / 0.706 / 0.660 / 0.554.
Disclosure: a probe printed the test file's routing table for weights 1, 0.75, 0.5, 0.25
and 0 before the choice, and the choosing probe also read the chat, date and a 31-model
build of the MMLU-Pro sets at 1, 0.5 and 0.25."""
