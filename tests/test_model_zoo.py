"""A zoo of small Hugging Face architectures (issue #42): each trains
healthy on a learnable synthetic task under the DebugWriter and must stay
silent; then each gets the same generic faults planted at a known step
(learning rate x1000, a NaN batch or NaN embeddings, a layer zeroed in front
of its ReLU) and the report must name the right kind, layer and step.

The models, tasks and faults live in tests/zoo/; tests/zoo/probe.py prints
the same matrix as a table. A case today's diagnosis gets wrong is an
``xfail(strict=True)`` whose reason is what the report said instead: when a
fix makes it pass, the XPASS fails and the mark goes.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from tests.zoo import data  # noqa: E402
from tests.zoo.expect import expected, judge, names_the_rate, said  # noqa: E402
from tests.zoo.faults import unreal  # noqa: E402
from tests.zoo.models import ARCHS, by_name  # noqa: E402
from tests.zoo.run import AT, train  # noqa: E402

pytestmark = pytest.mark.slow

#: (arch, fault) -> what the report said instead (the diagnosis's gap)
KNOWN_WRONG: dict = {}

_OUTCOMES: dict = {}


def _outcome(tmp_path_factory, name: str, fault: str):
    """The run of ``name`` with ``fault``, trained once per session (two
    tests read the learning-rate runs)."""
    key = (name, fault)
    if key not in _OUTCOMES:
        _OUTCOMES[key] = train(by_name(name), fault, str(tmp_path_factory.mktemp(f"{name}-{fault}")))
    return _OUTCOMES[key]


def _cases(fault: str) -> list:
    """One param per architecture (``name``, or ``name, fault`` for a
    fault), marked xfail where KNOWN_WRONG says so."""
    out = []
    for arch in ARCHS:
        reason = KNOWN_WRONG.get((arch.name, fault))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        values = (arch.name,) if fault == "healthy" else (arch.name, fault)
        out.append(pytest.param(*values, id=arch.name if fault == "healthy" else f"{arch.name}-{fault}",
                                marks=marks))
    return out


@pytest.mark.parametrize("name", [a.name for a in ARCHS])
def test_planted_names_are_the_models_modules(name):
    """The fault sites are real module names, the zeroed layer has
    parameters and comes before a ReLU module (RWKV's is functional), the
    embedding made NaN is the token embedding: the names in
    tests/zoo/models.py cannot rot silently when transformers renames."""
    arch = by_name(name)
    model = arch.build()
    modules = dict(model.named_modules())
    for site in arch.dead + (arch.embedding or ()):
        assert site in modules, site
    assert len(arch.dead) == 1 or type(modules[arch.dead[1]]).__name__ == "ReLU"
    assert list(modules[arch.dead[0]].parameters(recurse=False))
    if arch.embedding is not None:
        assert type(modules[arch.embedding[0]]).__name__.endswith("Embedding")
        assert modules[arch.embedding[0]].num_embeddings == data.VOCAB + 1


@pytest.mark.parametrize("name", _cases("healthy"))
def test_healthy_training_is_silent(tmp_path, name):
    """Status healthy, no error-level event, no root cause; and the model
    did learn (the run is healthy in fact, not only in the report)."""
    arch = by_name(name)
    outcome = train(arch, "healthy", str(tmp_path))
    assert not unreal(arch, "healthy", AT, outcome)
    assert judge(arch, "healthy", AT, outcome.report), said(outcome.report)


@pytest.mark.parametrize("name,fault", _cases("lr") + _cases("nan") + _cases("dead"))
def test_planted_fault_is_found(tmp_path_factory, name, fault):
    """The root cause has an accepted kind, names the planted layer (or
    pseudo-layer) and the planted step (up to the next sampled step where
    the evidence is a sampled statistic)."""
    arch = by_name(name)
    outcome = _outcome(tmp_path_factory, name, fault)
    assert not unreal(arch, fault, AT, outcome)
    want = expected(arch, fault, AT)
    assert judge(arch, fault, AT, outcome.report), f"want {want}, report said: {said(outcome.report)}"


@pytest.mark.parametrize("name", [a.name for a in ARCHS])
def test_learning_rate_fault_message_names_the_rate(tmp_path_factory, name):
    """Only the rate changed (x1000): the root cause's message says so and
    does not blame the weight decay, which the loop left alone."""
    report = _outcome(tmp_path_factory, name, "lr").report
    assert report["root_cause"] is not None and report["root_cause"]["layer"] == "<optimizer>"
    assert names_the_rate(report), report["root_cause"]["message"]
