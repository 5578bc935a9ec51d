"""The training side, where torch lives: hooks, on-device statistics, the writer and its worker.

Along the data path: ``writer`` (``DebugWriter``, the public face) ->
``hooks/`` (the Instrument: what each step measures, on the training
thread) -> ``step/`` (a step's values from the device to a row) ->
``worker/`` (rows, diagnosis, summaries and writes, off the training
thread). Beside them: ``schedule`` (the settings of ``watch()``),
``modules`` (which modules are rows and what each gets), ``batches`` (the
batch behind an event), ``distributed`` (ranks, per-rank statistics, norms
over shards), ``optimizer_wrappers`` (the optimizer inside a framework's
wrapper) and ``run/`` (what belongs to a run rather than a step: its
session records, the signals, the lock, the checks at ``watch()``, its
cost). Never imported by ``server/`` or ``diagnosis/``.
"""
