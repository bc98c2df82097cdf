"""Prompt complexity: P(model answers correctly) from a sparse linear model.

    model = ComplexityModel.load()                    # shipped artifact, loaded once
    score = model.score("Prove that sqrt(2) is irrational.")
    score.tier, score.difficulty                      # "hard", 0.71
    model.p_correct(score, ability=0.62, family="llama")

The model is item response theory with skill interactions:

    p_correct = sigmoid(logit(ability) - score.logit + score.family_offsets[family])

- ``score.logit`` is the prompt difficulty d(x), a linear function of hashed
  n-grams and a few markers (``classifiers/features.py``), centred so that 0 is
  the average training prompt.
- ``ability`` is P(correct) on such an average prompt; ``ability_of`` gives the
  learned value for the models in the training data.
- ``family_offsets`` adds how much better or worse a family does on this kind
  of prompt: a linear map of the prompt's skill mix (16 skills, e.g. code,
  competition math, knowledge multiple choice, Chinese knowledge). Keys are the
  vendor families ``claude gemma gpt llama mistral qwen yi`` plus the exact name
  of each training model (e.g. ``gemma-2-9b-it``), whose entry also holds
  that model's own deviation from its family.

``score.logit`` includes the average training model's offset, and where the
prompt has fewer seen word bigrams than a typical training prompt it is
shrunk toward a prior on the size and shape of the request; ``confidence``
falls with that distance (``classifiers/prior.py``). An artifact trained with
``semantic_alpha > 0`` adds a wordllama embedding term to the learned logit
(``classifiers/semantic.py``); the shipped one does not (PROVENANCE.md).

Inference is one compiled call where numba is installed (``classifiers/kernel.py``),
else a few numpy products; no scikit-learn at request time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from classifiers import features
from classifiers.artifact import read_npz
from classifiers.kernel import CompiledScore
from classifiers.learned_terms import logit as _logit
from classifiers.learned_terms import read_learned_terms
from classifiers.learned_terms import sigmoid as _sigmoid
from classifiers.length import message_text
from classifiers.pair_heads import PairHeads, heads_from_arrays
from classifiers.prior import closeness, n_seen_bigrams, shape_features
from classifiers.rarity import rarity_features
from classifiers.semantic import semantic_term, try_load_embedder
from classifiers.static_embedding import StaticEmbedding, StaticEmbeddingError, shared_static

# v3: d(x) holds the average model's offset and is shrunk toward a shape prior
# where the training data has little evidence (``classifiers/prior.py``).
ARTIFACT_FORMAT = "routegate-complexity-v3"
DEFAULT_ARTIFACT = Path(__file__).resolve().parent / "artifacts" / "complexity.npz"
# The last user turn says what is asked now; earlier turns are context. Keep
# the whole conversation but put the last user turn at the head of the window.
_CONTEXT_SEPARATOR = "\n\n"


@dataclass(frozen=True, slots=True)
class PromptScore:
    difficulty: float  # in [0,1]; P(the weak reference model fails), see ComplexityModel;
    #                    with learned terms, P(strong answers) - P(weak answers), at least 0
    logit: float  # d(x); 0 = average training prompt
    confidence: float  # in [0,1]; closeness to the training data (classifiers/prior.py)
    #                    times sqrt(|2 P(weak correct) - 1| * max skill posterior)
    tier: str  # "easy" | "medium" | "hard" (training-data tertiles of logit)
    family_offsets: dict[str, float]  # interaction term per family / known model name
    # With ``routegate learn``'s pair heads: each neighbouring pair's predicted gain,
    # P(strong) - P(weak), keyed (weak, strong) (``classifiers/pair_heads.py``).
    pair_gains: dict[tuple[str, str], float] | None = None


class ArtifactError(ValueError):
    """A classifier artifact that cannot be used: missing, cut short, foreign, or
    of another format; the message is one line and names the file."""


class ComplexityModel:
    """Scores prompts; built from an artifact written by ``routegate train``."""

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        _check_featurizer(meta)
        self.meta = meta
        self._hash_w = arrays["hash_w"].astype(np.float32)
        self._dense_w = arrays["dense_w"].astype(np.float64)
        self._bias = float(arrays["bias"][0])
        self._skill_hash_w = arrays["skill_hash_w"].astype(np.float32)
        self._skill_dense_w = arrays["skill_dense_w"].astype(np.float64)
        self._skill_bias = arrays["skill_bias"].astype(np.float64)
        self._skill_shift = int(meta["skill_shift"])
        # offset_keys x (skills + dense features + logit), and the per-key centring constant.
        self._offset_w = arrays["offset_w"].astype(np.float64)
        self._offset_center = arrays["offset_center"].astype(np.float64)
        self._offset_keys = [str(k) for k in arrays["offset_keys"]]
        self._abilities = dict(zip([str(k) for k in arrays["model_keys"]],
                                   arrays["ability"].astype(float), strict=True))
        self._mean_offset_w = arrays["mean_offset_w"].astype(np.float64)
        self._mean_offset_center = float(arrays["mean_offset_center"][0])
        self._prior_w = arrays["prior_w"].astype(np.float64)
        self._prior_b = float(arrays["prior_b"][0])
        # Word rarity in the prior (classifiers/rarity.py); an artifact without it: none.
        self._rarity = ((arrays["prior_r"].astype(np.float64), arrays["word_zipf"].astype(np.uint8))
                        if "prior_r" in arrays else None)   # (weights, table)
        self._seen = np.unpackbits(arrays["seen_bits"]).astype(bool)
        self._seen_reference = float(arrays["seen_reference"][0])
        # How far the learned logit may pull d(x) from the prior with full evidence
        # (``TrainConfig.learned_weight``); an artifact from before it: all the way.
        self._learned_weight = float(meta.get("learned_weight", 1.0))
        self._semantic = None
        if "semantic_w" in arrays:  # wordllama term of d(x); its training mean without wordllama
            self._semantic = semantic_term(arrays["semantic_w"].astype(np.float64),
                                           meta.get("semantic", {}), try_load_embedder())
        self._tiers = tuple(meta["tier_cuts"])
        self._weak_logit = float(meta["weak_logit"])
        self._learned = read_learned_terms(arrays)   # ``routegate learn`` (lab/learning.py)
        # The digests of the prompts those terms were fitted on, (n, 16) uint8 (a set
        # of them only when ``learn`` asks: a serving copy need not hold one).
        self._fitted: np.ndarray | None = arrays.get("learned_prompts")
        if self._learned is not None:
            self._abilities.update({f"learned/{n}": a for n, a in self._learned.abilities.items()})
        self._pairs: PairHeads | None = _pair_heads(arrays, meta)
        self._kernel = self._compiled_score()

    def _compiled_score(self) -> CompiledScore | None:
        """The score compiled on this model's tables (``kernel.py``), built in a thread."""
        word_t, space_t = features.byte_classes()
        return CompiledScore.build({
            "word_t": word_t, "space_t": space_t, "hash_w": self._hash_w,
            "dense_w": self._dense_w, "bias": self._bias, "skill_hash_w": self._skill_hash_w,
            "skill_shift": self._skill_shift, "skill_dense_w": self._skill_dense_w,
            "skill_bias": self._skill_bias, "mean_offset_w": self._mean_offset_w,
            "mean_offset_center": self._mean_offset_center, "offset_w": self._offset_w,
            "offset_center": self._offset_center, "prior_w": self._prior_w,
            "prior_b": self._prior_b, "rarity": self._rarity, "seen": self._seen,
            "seen_reference": self._seen_reference, "learned_weight": self._learned_weight,
            "learned": self._learned, "hash_shift": 32 - features.HASH_BITS})

    @property
    def score_path(self) -> str:
        """"compiled", "building" (numpy scores until the kernel is ready) or "numpy"."""
        return "numpy" if self._kernel is None else self._kernel.state

    def wait_compiled(self, timeout: float = 120.0) -> bool:
        """Wait for the compiled score (serving does not: numpy scores until then)."""
        return self._kernel is not None and self._kernel.wait(timeout)

    @staticmethod
    def artifact_file(path: str | os.PathLike | None = None) -> Path:
        """The file ``load(path)`` reads. A relative path that is not found from the
        working directory is looked up among the shipped artifacts (``classifiers/
        artifacts/``: the demo fleet's ``demo_fleet.npz``), installed or not."""
        target = DEFAULT_ARTIFACT if path is None else Path(path)
        shipped = DEFAULT_ARTIFACT.parent / target
        if not target.is_absolute() and not target.exists() and shipped.exists():
            target = shipped
        return target / DEFAULT_ARTIFACT.name if target.is_dir() else target

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> ComplexityModel:
        """Load an artifact; ``None`` means the one shipped in ``classifiers/artifacts``,
        a directory the ``complexity.npz`` in it (what ``routegate learn`` writes).
        ``ArtifactError`` (one line, naming the file) for one that cannot be used."""
        target = cls.artifact_file(path)
        if not target.is_file():
            raise ArtifactError(f"{target}: no classifier artifact there"
                                + (" (routegate learn writes complexity.npz in a directory)"
                                   if target.name == DEFAULT_ARTIFACT.name else ""))
        try:
            arrays, meta = read_npz(target)
            return cls(arrays, meta)
        except ArtifactError as exc:     # another format: named with its file too
            raise ArtifactError(f"{target}: {exc}") from None
        except Exception as exc:   # a cut or foreign file: BadZipFile, KeyError, zlib.error...
            detail = str(exc).splitlines()[0][:200] if str(exc) else ""
            raise ArtifactError(f"{target}: not a usable routegate classifier artifact "
                                f"({type(exc).__name__}{': ' + detail if detail else ''})"
                                ) from exc

    def raw_parts(self, feats: features.Features,
                  semantic: float = 0.0) -> tuple[float, np.ndarray, np.ndarray]:
        """(learned logit, skill posterior, offsets per key) of featurized text.

        ``semantic`` is the embedding's term of the logit (``classifiers/semantic.py``).
        The learned logit includes the average training model's offset, and
        the offsets are deviations from it (``lab/build.py``).
        """
        values = feats.values
        # take() rather than fancy indexing: the same rows, a third of the time
        # (the skill rows were the largest single cost of a score).
        logit = float(self._hash_w.take(feats.indices) @ values) + float(self._dense_w @ feats.dense)
        logit += self._bias + semantic
        folded = feats.indices >> self._skill_shift
        skill = values @ self._skill_hash_w.take(folded, axis=0) + feats.dense @ self._skill_dense_w
        skill = np.exp(skill + self._skill_bias - np.max(skill + self._skill_bias))
        skill /= skill.sum()
        mix = np.concatenate([skill, feats.dense, [logit]])
        average_offset = float(self._mean_offset_w @ mix) - self._mean_offset_center
        return logit - average_offset, skill, self._offset_w @ mix - self._offset_center

    def shrunk_logit(self, shape: np.ndarray, feats: features.Features,
                     learned: float) -> tuple[float, float]:
        """(d(x), closeness): the learned logit shrunk toward the prior on the
        request's shape (``shape``: ``shape_features`` of the text) and its words' rarity,
        by the closeness times the artifact's ``learned_weight``."""
        prior = float(self._prior_w @ shape) + self._prior_b
        if self._rarity is not None:
            prior += float(self._rarity[0] @ rarity_features(feats, self._rarity[1]))
        weight = closeness(n_seen_bigrams(feats, self._seen), self._seen_reference)
        return prior + self._learned_weight * weight * (learned - prior), weight

    def score(self, text: str, *, n_messages: int = 1, has_tools: bool = False,
              has_response_format: bool = False, pairs: bool = True) -> PromptScore:
        """Score one prompt; cost is bounded whatever the length of ``text``. ``pairs``:
        with the pair heads' gains, if it has any (False: none of them applies)."""
        semantic = self._semantic(text) if self._semantic is not None else 0.0
        if self._kernel is not None and self._kernel.ready:
            score = self._score_compiled(text, n_messages, (has_tools, has_response_format),
                                         semantic)
        else:
            feats = features.featurize(text, n_messages=n_messages, has_tools=has_tools,
                                       has_response_format=has_response_format)
            score = self.score_features(feats, shape_features(text), semantic)
        if not pairs or self._pairs is None or self._learned is None:
            return score
        return replace(score, pair_gains=self.pair_gains(text, score))

    def pair_gains(self, text: str, score: PromptScore, raw: bool = False
                   ) -> dict[tuple[str, str], float]:
        """Each pair head's gain on ``text`` (``score``: its item-response score; ``raw``:
        before the heads' calibration, as ``PairHeads.gains``)."""
        assert self._pairs is not None and self._learned is not None
        abilities = self._learned.abilities
        irt = {name: _sigmoid(_logit(abilities[name]) - score.logit
                              + score.family_offsets.get(name, 0.0))
               for name in self._pairs.ladder}
        return self._pairs.gains(text, irt, raw)

    def head_reads_text(self, pair: tuple[str, str]) -> bool | None:
        """Whether this model's head for ``pair`` (weak, strong) reads the prompt's text
        (its embedding); None: it has no head for that pair."""
        if self._pairs is None:
            return None
        head = next((h for h in self._pairs.heads if (h.weak, h.strong) == pair), None)
        return None if head is None else head.reads_embedding

    @property
    def pair_ladder(self) -> list[str]:
        """The ladder ``learn`` fitted pair heads along (weakest first); empty without."""
        return [] if self._pairs is None else self._pairs.ladder

    def _score_compiled(self, text: str, n_messages: int, flags: tuple[bool, bool],
                        semantic: float) -> PromptScore:
        """``score_features(featurize(text), ...)`` in one compiled call (``kernel.py``)."""
        assert self._kernel is not None
        logit, weight, skill_max, offsets, own = self._kernel.score_text(text, n_messages, flags,
                                                                         semantic)
        learned = None if self._learned is None else dict(zip(self._learned.names,
                                                              own.tolist(), strict=True))
        return self._finish(logit, weight, skill_max, offsets.tolist(), learned)

    def score_features(self, feats: features.Features, shape: np.ndarray,
                       semantic: float = 0.0) -> PromptScore:
        """``score`` of featurized text (a ``classifiers.sketch.PromptSketch``'s
        ``feats`` and ``shape``); ``semantic``: the embedding's term, if any."""
        learned, skill, offsets = self.raw_parts(feats, semantic)
        logit, weight = self.shrunk_logit(shape, feats, learned)
        own = None
        if self._learned is not None:
            logit, own = self._learned.apply(logit, feats, skill)
        return self._finish(logit, weight, float(skill.max()), offsets.tolist(), own)

    def _finish(self, logit: float, weight: float, skill_max: float, offsets: list[float],
                own: dict[str, float] | None) -> PromptScore:
        """The score of d(x) (``logit``), its closeness ``weight`` and the skill
        posterior's maximum; ``own``: the learned terms' offsets, if any."""
        family_offsets = dict(zip(self._offset_keys, offsets, strict=True))
        weak_offset, need = 0.0, None
        if self._learned is not None and own is not None:
            family_offsets.update(own)
            weak_offset = own[self._learned.weak]
            strong = self._learned.strong
            need = _sigmoid(_logit(self._learned.abilities[strong]) - logit + own[strong])
        p_weak = _sigmoid(self._weak_logit - logit + weak_offset)
        low, high = self._tiers
        tier = "easy" if logit < low else "hard" if logit >= high else "medium"
        return PromptScore(
            difficulty=1.0 - p_weak if need is None else max(0.0, need - p_weak),
            logit=logit,
            confidence=weight * math.sqrt(abs(2.0 * p_weak - 1.0) * skill_max),
            tier=tier,
            family_offsets=family_offsets,
        )

    def score_messages(self, messages: list[dict], *, has_tools: bool = False,
                       has_response_format: bool = False, pairs: bool = True) -> PromptScore:
        """Score an OpenAI-format conversation (content may be a string or parts)."""
        return self.score(conversation_text(messages), n_messages=max(len(messages), 1),
                          has_tools=has_tools, has_response_format=has_response_format,
                          pairs=pairs)

    def pairs_among(self, names: Collection[str]) -> list[tuple[str, str]]:
        """The pairs of neighbours on the pair heads' ladder that are both in ``names``
        (a config's models): the heads that can decide anything there."""
        ladder = self.pair_ladder
        return [(a, b) for a, b in zip(ladder, ladder[1:], strict=False)
                if a in names and b in names]

    def p_correct(self, score: PromptScore, ability: float, family: str | None = None) -> float:
        """P(correct) for a model of ``ability`` (P(correct) at logit 0) and ``family``."""
        offset = score.family_offsets.get(family, 0.0) if family else 0.0
        return _sigmoid(_logit(ability) - score.logit + offset)

    def ability_of(self, model_name: str) -> float | None:
        """Learned ability of a training model: ``"source/name"`` or the bare name."""
        if model_name in self._abilities:
            return self._abilities[model_name]
        for key, value in self._abilities.items():
            if key.split("/", 1)[1] == model_name:
                return value
        return None

    @cached_property
    def fitted_prompts(self) -> frozenset[bytes] | None:
        """The prompts (digests) ``routegate learn`` fitted this model on; None: not
        learned, or learned by a version that did not keep them. Built on first use
        (``learn``'s): a serving copy never holds the set."""
        if self._fitted is None:
            return None
        return frozenset(bytes(row) for row in self._fitted)

    @property
    def is_learned(self) -> bool:
        """Whether ``routegate learn`` wrote this artifact."""
        return self._learned is not None

    def learned_terms(self, name: str) -> tuple[float, str] | None:
        """(ability, offset key) of a model that ``routegate learn`` fitted by this
        name (a config model's name, in labels from its traffic), else None."""
        if self._learned is None or name not in self._learned.abilities:
            return None
        return self._learned.abilities[name], name


def _pair_heads(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> PairHeads | None:
    """A learned artifact's pair heads, reading the shipped static embedding when they
    need it; an ``ArtifactError`` when that table is not the one they were fitted on."""
    if "pair_ladder" not in arrays:
        return None
    wanted = meta.get("pair_heads", {}).get("static")
    static: StaticEmbedding | None = None
    if wanted is not None:
        try:
            static = shared_static()
        except StaticEmbeddingError as exc:
            raise ArtifactError(f"its pair heads need the static embedding: {exc}") from None
        if static.meta != wanted:
            raise ArtifactError("its pair heads were fitted on another static embedding "
                                f"({wanted.get('recipe')!r}); learn again")
    try:
        return heads_from_arrays(arrays, static)
    except ValueError as exc:
        raise ArtifactError(str(exc)) from None


def conversation_text(messages: list[dict]) -> str:
    """Last user turn first, then the earlier turns (see ``_CONTEXT_SEPARATOR``)."""
    texts = [message_text(m.get("content")) for m in messages if isinstance(m, dict)]
    last_user = None
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], dict) and messages[i].get("role") == "user":
            last_user = i
            break
    if last_user is None or len(texts) != len(messages):
        return _CONTEXT_SEPARATOR.join(t for t in texts if t)
    context = [t for i, t in enumerate(texts) if i != last_user and t]
    return _CONTEXT_SEPARATOR.join([texts[last_user], *context])


def _check_featurizer(meta: dict[str, Any]) -> None:
    expected = {
        "format": ARTIFACT_FORMAT,
        "hash_bits": features.HASH_BITS,
        "head_chars": features.HEAD_CHARS,
        "tail_chars": features.TAIL_CHARS,
        "dense_names": list(features.DENSE_NAMES),
    }
    for key, value in expected.items():
        if meta.get(key) != value:
            raise ArtifactError(f"artifact was trained with {key}={meta.get(key)!r}, "
                             f"featurizer has {value!r}; retrain with `routegate train`")
