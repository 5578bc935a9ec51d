"""The background side of the writer: rows, diagnosis, summaries and writes, off the training thread.

``thread`` (:class:`~.thread.Worker` and its one loop, ``drive``, run by a
thread of the training process), ``process`` (the same loop in a child
process without torch, ``watch(analysis="process")``) and ``filewriter``
(the event file, unable to raise into training).
"""
