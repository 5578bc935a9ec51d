"""The training side, where torch lives: hooks, on-device statistics, the writer and its worker.

Along the data path: ``modules`` (which modules are rows, what each gets),
``instrument`` (the hooks), ``collector`` (one step's device values),
``slots`` (a step's values as the worker gets them, and their rows: numpy
only), ``worker`` (the background thread: rows, diagnosis, writes;
``worker_process`` runs it in a child process without torch,
``watch(analysis="process")``), ``batches`` (the
batch behind an event), ``filewriter`` (the event file, unable to raise
into training), ``writer`` (``DebugWriter``, the public face); beside them
``schedule`` (the settings of ``watch()``), ``stats`` (the reductions),
``optimizers`` (the optimizer inside a framework's wrapper) and
``distributed`` (ranks, per-rank statistics, norms over shards). Never
imported by ``server/`` or ``diagnosis/``.
"""
