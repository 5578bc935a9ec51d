"""One step's values, from the device to a row of the event file.

``collector`` gathers a step's device tensors and copies them to the host
once; ``stats`` holds the device-side reductions (torch's ops, the one
statistics back end); ``slots`` is the contract between the two sides: the
keys of a step's values and their completion into ``[layers, metrics]``
rows; ``rows`` assembles a burst of steps into rows for the worker.
``slots`` and ``rows`` are numpy only: the worker's child process imports
them without torch.
"""
