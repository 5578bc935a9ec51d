"""The tab's built-in tables of states and metrics equal the server's.

The tab draws with the tables that /meta sends (format/metadata.py's
STATE_TABLE and METRIC_TABLE, through the plugin); it keeps a copy,
frontend/src/builtin_tables.json, only for a server that does not send them.
This test asks the real /meta route (TensorBoard's WSGI app over a synthetic
run) and fails when the copy differs, e.g. a state row added on the server
and not in the copy. The node tests check that the tab reads the copy.

To refresh the copy after changing a table:

    python tests/test_frontend_tables.py
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # run as a script: import this checkout's tests/ and tb_neuraldbg
    sys.path.insert(0, str(ROOT))

from tests.synthetic import write_run  # noqa: E402
from tests.test_plugin_wsgi import BASE, App  # noqa: E402

BUILTIN = ROOT / "frontend" / "src" / "builtin_tables.json"
TABLE_KEYS = ("states", "metric_info", "colors")


def served_tables(logdir) -> dict:
    """The tables of /meta, as the tab receives them."""
    write_run(logdir, "r", num_modules=2, num_steps=3)
    meta = App(logdir).json(f"{BASE}/meta?run=r")
    return {k: meta[k] for k in TABLE_KEYS}


def test_builtin_tables_equal_the_servers(tmp_path):
    served = served_tables(tmp_path)
    builtin = json.loads(BUILTIN.read_text(encoding="utf-8"))
    assert set(builtin) == set(TABLE_KEYS)
    for key in TABLE_KEYS:
        assert builtin[key] == served[key], (
            f"frontend/src/builtin_tables.json [{key!r}] differs from /meta: "
            "refresh it with `python tests/test_frontend_tables.py`"
        )


def test_every_state_and_metric_has_a_builtin_row(tmp_path):
    """The same check by name, so a failure says which row is missing."""
    served = served_tables(tmp_path)
    builtin = json.loads(BUILTIN.read_text(encoding="utf-8"))
    assert [s["name"] for s in builtin["states"]] == [s["name"] for s in served["states"]]
    assert [m["name"] for m in builtin["metric_info"]] == [m["name"] for m in served["metric_info"]]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        tables = served_tables(Path(d))
    BUILTIN.write_text(json.dumps(tables, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {BUILTIN.relative_to(ROOT)}")
