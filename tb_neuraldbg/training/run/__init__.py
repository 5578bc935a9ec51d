"""What belongs to a run rather than to a step: its writer's session, the signals, the lock, the checks at watch(), its cost.

``session`` (each writer's start and end records: a resumed run, a run not
closed), ``signals`` (SIGTERM and SIGINT write the held steps, then do what
they would have done), ``lock`` (one live writer per run directory),
``preconditions`` (what is said at ``watch()``, before training starts) and
``costs`` (``DebugWriter.stats_info``: what the writer costs a step).
"""
