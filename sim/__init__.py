"""The simulator: a model server's serving physics and an honest count of what it receives.

    python -m sim.server --port 9001          # standalone, OpenAI-compatible, named faults
    SimulatedBackend(model_config)            # in-process, for a model with backend: simulated

The lab's, not the product's: ``routegate serve`` imports it only through
``gateway/upstreams.py``, and only when a model's ``backend`` is ``simulated``.
"""
