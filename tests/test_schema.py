# SPDX-License-Identifier: GPL-2.0-only
"""Every record qprof writes is valid against its JSON Schema
(describe/schema/), and docs/record.md's field list names exactly the
schema's fields. The runs_dir fixture (conftest) validates every
run.json and comparison.json a test leaves in it; these tests hold the
schemas themselves and docs/record.md to them."""

import json
import re

import jsonschema
import pytest

from qprof import files

from conftest import REPO, validate_records

pytestmark = pytest.mark.unit

SCHEMAS = REPO / "describe" / "schema"


@pytest.mark.parametrize("name", ["run", "comparison"])
def test_schema_is_valid_and_versioned(name):
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    record = files.RECORD if name == "run" else "comparison.json"
    assert schema["properties"]["schema_version"]["const"] == files.SCHEMA_VERSIONS[record]


def _readme_fields(section: str) -> set:
    text = (REPO / "docs" / "record.md").read_text()
    body = text.split(section, 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in body.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names |= {n.split(".")[0] for n in re.findall(r"`([^`]+)`", first)}
    return names


def test_readme_lists_exactly_the_run_fields():
    schema = json.loads((SCHEMAS / "run.schema.json").read_text())
    assert _readme_fields("## The run record") == set(schema["properties"])


def test_a_record_that_breaks_the_schema_is_caught(tmp_path):
    run = tmp_path / "20261123-120000-abcdef"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"schema_version": 2, "id": run.name, "status": "complete"}))
    with pytest.raises(jsonschema.ValidationError):
        validate_records(tmp_path)
    (run / "run.json").write_text(
        json.dumps(
            {
                "schema_version": 2,
                "id": run.name,
                "status": "incomplete",
                "error": "x",
                "config": {"fault": "handshake"},
            }
        )
    )
    with pytest.raises(jsonschema.ValidationError):
        validate_records(tmp_path)
