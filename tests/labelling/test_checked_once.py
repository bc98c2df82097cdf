"""``routegate serve`` reads each classifier artifact once: the config check loads
``routing.classifier`` and every ``teams[].classifier`` to refuse one that does not
load, and the gateway it starts in this process routes on those copies."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from gateway.cli import load_checked
from gateway.state import AppState, artifact_stamp
from tests.labelling.test_team_classifier import learned_small_is_enough
from tests.support import OTHER_KEY, TEST_KEY, hashed, in_process


def write_config(tmp_path: Path, classifier: Path) -> Path:
    model = {"backend": "simulated", "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}
    config = {
        "models": [{"name": "small", **model}],
        "teams": [{"name": "own", "keys": [hashed(TEST_KEY)], "classifier": str(classifier)},
                  {"name": "shipped", "keys": [hashed(OTHER_KEY)]}],
        "routing": {"classifier": str(classifier)},
        **in_process(tmp_path),
    }
    path = tmp_path / "routegate.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_gateway_starts_on_the_classifiers_the_config_check_loaded(tmp_path: Path) -> None:
    learned = learned_small_is_enough(tmp_path)
    path = write_config(tmp_path, learned)
    config, checked = load_checked(str(path))
    assert set(checked) == {str(learned)}          # one artifact, named twice, read once

    async def start(given: dict) -> tuple:
        gw = await AppState.start(config, str(path), given)
        try:
            return gw.classifier, gw.team_classifiers[str(learned)][0]
        finally:
            await gw.aclose()

    model = checked[str(learned)][0]
    routing, team = asyncio.run(start(checked))
    assert routing is model and team is model               # the same objects, not re-read
    fresh = asyncio.run(start({}))                          # without them: read from the file
    assert fresh[0] is not model and fresh[1] is not model
    # A team's artifact rewritten after the check is read again, not served stale.
    stamp = artifact_stamp(str(learned))
    assert stamp is not None
    stale = {str(learned): (model, (stamp[0] - 1, stamp[1], stamp[2]))}
    assert asyncio.run(start(stale))[1] is not model
