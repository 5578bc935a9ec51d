"""The training side, where torch lives: hooks, on-device statistics, the writer and its worker.

Never imported by ``server/`` or ``diagnosis/``.
"""
