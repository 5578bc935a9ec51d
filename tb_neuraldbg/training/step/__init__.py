"""One step's values, from the device to a row of the event file.

``collector`` gathers a step's device tensors and copies them to the host
once; ``stats`` holds the device-side reductions (torch's ops); ``slots``
is the contract between the two sides: the keys of a step's values and
their completion into ``[layers, metrics]`` rows (numpy only: the worker's
child process imports it without torch).
"""
