"""Sub-commands of the ``fastdist-lab`` CLI: one module each, with ``add_arguments`` and ``run``.

Modules here import only light things at the top; heavy imports happen inside ``run``.
"""
