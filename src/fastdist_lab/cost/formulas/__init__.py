"""The cost model's formulas: memory (``memory``), the bytes of each collective (``communication``), one micro-batch on
one stage (``compute``), one collective on its links (``links``, NCCL's tuning model in ``nccl_tuning``), what an
engine overlaps (``overlap``), mixtures of experts (``moe``), the pipeline schedules as tables (``schedules``) and
their timeline (``timeline``), and the step (``step``), all on ``Setups`` (``setup_columns``: many set-ups as
columns). Each cites what it follows; none reads the evidence they are checked against (``cost.evidence``).
"""
