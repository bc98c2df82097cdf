"""What every other package shares, and so the bottom layer: the config
schema (``config``, ``budget_config``), the error tree (``errors``) and the
request/usage value types (``types``). It imports no other routegate package.

    core  <-  policies  <-  classifiers  <-  backends  <-  gateway
      ^                                                       |
      +-----------------------  budget  <---------------------+
"""
