"""The ``routegate`` command: the product's subcommands and the lab's, side by side.

    routegate serve | check-config | hash-key | worker | report | classify   # gateway/cli.py
    routegate train | eval | calibrate | learn                             # lab/
    routegate loadtest run | experiment                                    # loadtest/
"""
