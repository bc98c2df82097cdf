"""The lab: training, evaluation, held-out tables, probes and provenance of the router.

    routegate train | eval | calibrate | learn      # the commands (lab/commands.py, learn_command.py)
    python -m lab.encoder_table                     # the reading encoder's out-of-domain table

Tested, and kept apart from what ``routegate serve`` loads (``classifiers/``):
the product never imports the lab (``pyproject.toml``, ``[tool.importlinter]``).
"""
