"""``stress capacity``: search for the number of users at which the scenario's SLO breaks.

- :mod:`stress.search.steps`: which user count to try next and when to stop (pure);
- :mod:`stress.search.runner`: runs each step as ordinary runs (``stress.run.execute``)
  and judges them with the one analysis (``stress.analysis``);
- :mod:`stress.search.cli`: the command line.
"""
