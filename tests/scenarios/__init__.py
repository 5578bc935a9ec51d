"""Scenario builders for tests/test_scenarios.py: tiny models trained on CPU
under the real DebugWriter (harness.py), planted failures with their expected
root cause (failures.py) and healthy controls that must stay silent
(healthy.py). Usable from a script too, e.g. to calibrate thresholds::

    from scenarios import failures
    from scenarios.harness import train
    result = train(failures.forward_nan().spec, "/tmp/run")
    result.engine.root_cause
"""
