"""The training side, where torch lives: hooks, on-device statistics, the writer and its worker.

Along the data path: ``modules`` (which modules are rows, what each gets),
``instrument`` (the hooks), ``collector`` (one step's device values),
``worker`` (the background thread: rows, diagnosis, writes), ``batches`` (the
batch behind an event), ``writer`` (``DebugWriter``, the public face);
beside them ``schedule`` (the settings of ``watch()``) and ``stats`` (the
reductions). Never imported by ``server/`` or ``diagnosis/``.
"""
