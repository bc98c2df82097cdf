"""The product and the lab apart, in a running process: what ``routegate serve`` imports.

``lint-imports`` (pyproject.toml) holds the static contracts; this checks the
one allowed door to the simulator: a gateway whose models are all
``openai_compat`` never loads ``sim``, one with a ``simulated`` model does,
and neither ever loads the lab.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid

import pytest

from tests.support import REPO, child_env

SCRIPT = textwrap.dedent("""
    import asyncio, json, sys
    LAB_EXTRA = ("sklearn", "scipy", "wordfreq", "matplotlib", "tqdm")   # pyproject's lab extra
    # numba (the fast extra, the classifier's kernel) imports scipy itself, when it is
    # installed, to check its version: that is numba's import, not the product's. Without
    # numba (the image), nothing of the lab may load at all.
    third_party = set()
    if sys.argv[2] == "without numba":
        sys.modules["numba"] = None
    else:
        import numba
        third_party = {m.split(".")[0] for m in sys.modules}
    from core.config import parse_config
    from gateway.state import AppState

    async def main():
        gw = await AppState.start(parse_config(json.loads(sys.argv[1])))
        loaded = sorted({m.split(".")[0] for m in sys.modules
                         if m.split(".")[0] in ("sim", "lab", "loadtest", "routegate")
                         or (m.split(".")[0] in LAB_EXTRA
                             and m.split(".")[0] not in third_party)})
        await gw.aclose()
        print(json.dumps(loaded))

    asyncio.run(main())
""")


def loaded_by(backend: str, tmp_path: object, numba: str = "with numba") -> list[str]:
    model = {"name": "m", "price": {"input_per_mtok": 1, "output_per_mtok": 1}}
    if backend == "openai_compat":
        model.update(backend="openai_compat", base_url="http://127.0.0.1:9/v1")
    config = {"models": [model], "redis_url": "redis://127.0.0.1:6379/0",
              "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
              "batch": {"enabled": False}, "data_dir": str(tmp_path),
              "logging": {"requests": False}, "metrics": {"enabled": False}}
    run = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(config), numba], cwd=REPO,
                         env=child_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("numba", ["with numba", "without numba"])
@pytest.mark.parametrize(("backend", "expected"), [("openai_compat", []),
                                                   ("simulated", ["sim"])])
def test_serving_imports_the_simulator_only_for_a_simulated_model(
        backend: str, expected: list[str], numba: str, tmp_path: object) -> None:
    assert loaded_by(backend, tmp_path, numba) == expected


# what the image lacks: pyproject's lab extra, every module of it unimportable
WITHOUT_LAB = ("import sys\n"
               "for m in ('sklearn', 'scipy', 'wordfreq', 'matplotlib', 'tqdm'): sys.modules[m] = None\n"
               "from routegate.cli import main\n"
               "sys.exit(main(sys.argv[1:]))\n")


def run_without_lab(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_LAB, *argv], cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv", [("train", "--out", "/nonexistent/x.npz"),
                                  ("learn", "--labels", "/nonexistent.jsonl"),
                                  ("loadtest", "experiment"), ("eval",)])
def test_a_lab_command_without_the_lab_extra_says_what_to_install(argv: tuple[str, ...]) -> None:
    """The image installs the product alone: a lab command there names the extra."""
    run = run_without_lab(*argv)
    assert run.returncode == 2, run.stderr
    assert "pip install 'routegate[lab]'" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("argv", [("--help",), ("serve", "--help"), ("hash-key", "--help")])
def test_the_product_commands_run_without_the_lab_extra(argv: tuple[str, ...]) -> None:
    """The entry point itself must import with the extra missing (the image's healthz)."""
    run = run_without_lab(*argv)
    assert run.returncode == 0, run.stderr
    assert "usage: routegate" in run.stdout
