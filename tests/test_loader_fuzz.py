"""Property tests: any text, any YAML structure gives a spec or clean errors, never an exception."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SPECS
from tilegen.errors import ErrorLog
from tilegen.validate import validate_document
from tilegen.yaml_source import load_document

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _load(tmp_path, data: bytes):
    path = tmp_path / "fuzz.yaml"
    path.write_bytes(data)
    errors = ErrorLog()
    doc = load_document(path, errors, "specs/fuzz.yaml")
    spec = validate_document(doc, errors) if doc is not None else None
    assert (spec is None) == bool(errors)
    for line in errors.lines():
        assert line.startswith("specs/fuzz.yaml:") and "\n" not in line
        assert line.split(":")[1].isdigit()
    return spec, errors


@SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes(tmp_path, data):
    _load(tmp_path, data)


@SETTINGS
@given(st.text(alphabet=st.sampled_from(list("opkind:{}[],-&*!|> \n\t'\"#aAMNK0123.")), max_size=200))
def test_yaml_like_text(tmp_path, text):
    _load(tmp_path, text.encode())


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False),
                     st.sampled_from(["a", "b", "acc", "M", "K", "N", "float16", "auto", "never", "a + b",
                                      "where(acc > 0, acc, 0)", "BLOCK", "elementwise", "matmul"]))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(
        ["op", "kind", "inputs", "outputs", "dtype", "shape", "tiles", "block", "sizes", "masks", "compute",
         "epilogue", "scalars", "type", "default", "configs", "mode", "a", "b", "c", "M", "N", "K"]), inner, max_size=5)),
    max_leaves=20)


@SETTINGS
@given(st.dictionaries(st.sampled_from(["op", "kind", "doc", "inputs", "outputs", "scalars", "compute", "epilogue",
                                        "dtypes", "tiles", "masks", "schedule", "configs", "test", "bench"]),
                       _values, max_size=10))
def test_random_spec_structures(tmp_path, data):
    _load(tmp_path, yaml.safe_dump(data).encode())


@SETTINGS
@given(st.data())
def test_mutated_example_specs(tmp_path, data):
    """Real specs with one value replaced: still a spec or clean errors."""
    source = yaml.safe_load((SPECS / data.draw(st.sampled_from(["add.yaml", "matmul_relu.yaml",
                                                                "matmul_bias_gelu.yaml"]))).read_text())
    section = data.draw(st.sampled_from(sorted(source)))
    source[section] = data.draw(_values)
    _load(tmp_path, yaml.safe_dump(source).encode())


def test_yaml_1_1_boolean_words_are_names_and_true_false_stay_booleans(tmp_path):
    """`on`, `off`, `yes` and `no` are YAML 1.1 booleans; a spec reads them as the names they are."""
    text = (SPECS / "add.yaml").read_text()
    for word in ("off", "on", "yes", "no"):
        spec, errors = _load(tmp_path, text.replace("op: add", f"op: add_{word}").replace("b:", f"{word}:")
                             .replace("a + b", f"a + {word}").encode())
        assert spec is not None, errors.lines()
        assert [t.name for t in spec.inputs] == ["a", word]
    spec, errors = _load(tmp_path, text.replace("op: add", "op: true").encode())
    assert spec is None and "got bool" in errors.lines()[0]  # a boolean where a name belongs, still refused
