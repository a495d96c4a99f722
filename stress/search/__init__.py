"""``stress capacity``: search for the number of users at which the scenario's SLO breaks.

- :mod:`stress.search.steps`: which user count to try next and when to stop, and the most
  steps that can take (pure);
- :mod:`stress.search.runner`: a step's scenario, its judgement with the one analysis
  (``stress.analysis``), and the search's texts and capacity.json;
- :mod:`stress.search.session`: the search as it runs, each pass an ordinary run
  (``stress.runtime.run.execute``), and how it ends (Ctrl-C, a server gone);
- :mod:`stress.search.plan`: its expected duration, from its settings, before it starts.
"""
