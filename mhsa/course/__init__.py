"""The chapters' helpers; where a new one goes:

- ``plotting.py``: figures (heatmaps of attention weights, head views);
- ``measure.py``: timings, FLOP counts, peak memory;
- ``teaching.py``: exercise self-checks and ``glue`` (numbers the prose quotes);
- ``answers/chNN.py``: the numbers of chapter NN's hidden solutions.
"""
