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
from tests.zoo.expect import expected, judge, said  # noqa: E402
from tests.zoo.models import ARCHS, by_name  # noqa: E402
from tests.zoo.run import AT, train  # noqa: E402

pytestmark = pytest.mark.slow

#: (arch, fault) -> what the report said instead (the diagnosis's gap)
KNOWN_WRONG: dict = {}


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
    """The fault sites are real module names, a zeroed layer comes before a
    ReLU (or RWKV's functional one), and the task's data is learnable in
    shape: the names in tests/zoo/models.py cannot rot silently."""
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
    report = train(arch, "healthy", str(tmp_path))
    losses = report["losses"]
    assert sum(losses[-10:]) / 10 < 0.8 * sum(losses[:5]) / 5, "the task was not learned"
    assert judge(arch, "healthy", AT, report), said(report)


@pytest.mark.parametrize("name,fault", _cases("lr") + _cases("nan") + _cases("dead"))
def test_planted_fault_is_found(tmp_path, name, fault):
    """The root cause has an accepted kind, names the planted layer (or
    pseudo-layer) and the planted step (up to the next sampled step where
    the evidence is a sampled statistic)."""
    arch = by_name(name)
    report = train(arch, fault, str(tmp_path))
    want = expected(arch, fault, AT)
    assert judge(arch, fault, AT, report), f"want {want}, report said: {said(report)}"
