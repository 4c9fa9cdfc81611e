"""The evidence the cost model is held against, kept apart from the formulas (which never import it): the published
runs (package data, ``runs/*.toml``, one file per source, read by ``published.load_runs``), the model's error on
them (``accuracy``: ``validate``, ``calibrate``), the published comparisons of layouts (``published_comparisons``), the
published collective bandwidths (``published_collectives``), and the error bands a prediction is shown with
(``trust``, over the table ``trust_table.json`` that ``python -m fastdist_lab.cost.evidence.write_trust`` writes).
``fastdist_lab.cost`` serves these names on first use, so that importing it reads none of these files.
"""
