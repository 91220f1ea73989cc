"""Property-based fuzzing of model_utils/config.py: random schemas (the shipped yaml), command-line overrides with
arbitrary strings, users' yaml files with arbitrary values, keys, text and bytes. Every outcome is a Config
whose values have the schema's types, or a ConfigError."""
import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from model_utils.config import ConfigError, flatten, in_interval, load_yaml_documents, parse_cli
from tests.fuzz_helpers import TEXT, fuzz

KEY = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(lambda k: k not in ("config_path", "verbose",
                                                                                      "help", "h"))
SCALAR = st.one_of(st.integers(-10 ** 6, 10 ** 6), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
                   st.text(st.characters(exclude_categories=("Cs",)), max_size=8), st.none())
LEAF = st.one_of(SCALAR, st.lists(st.integers(-100, 100), min_size=1, max_size=3),
                 st.lists(st.text(st.characters(codec="ascii", categories=["L"]), min_size=1, max_size=4),
                          min_size=1, max_size=3), st.just([]))
SCHEMA = st.recursive(st.dictionaries(KEY, LEAF, min_size=1, max_size=5),
                      lambda children: st.dictionaries(KEY, st.one_of(LEAF, children), min_size=1, max_size=4),
                      max_leaves=10)
# What users type: numbers, booleans, lists in both notations, yaml, nonsense.
RAW = st.one_of(TEXT, st.sampled_from(["1", "-5", " 12 ", "1e-4", "-1e-4", "2.5", "nan", "inf", "1_000", "١٢", "yes",
                                       "Off", "true", "null", "none", "", "[1, 2]", "1,2", "a,b", "[", "{a: 1",
                                       "[1, [2]]", "!!python/object:os.system x", "- x", "'", "\ud83d",
                                       "[" * 3000, "9" * 5000]),
                st.integers().map(str), st.floats().map(str),
                st.integers(4200, 6000).map(lambda n: "9" * n))  # around Python's 4300-digit int() limit
# A user's yaml value: any yaml data, nested included.
USER_VALUE = st.recursive(st.one_of(SCALAR, st.integers(), st.floats()),
                          lambda children: st.lists(children, max_size=3) | st.dictionaries(KEY, children, max_size=3),
                          max_leaves=6)


class _Dumper(yaml.SafeDumper):
    """Objects drawn twice (st.just([])) are written out twice: the config refuses yaml aliases."""

    def ignore_aliases(self, data):
        return True


def _dump(data, allow_unicode):
    return yaml.dump(data, Dumper=_Dumper, allow_unicode=allow_unicode)


def _write(tmp_path_factory, name, text=None, data=None):
    path = tmp_path_factory.mktemp("config") / name
    if data is not None:
        path.write_bytes(data)
    else:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


def _schema_file(tmp_path_factory, schema, choices=None):
    text = _dump(schema, allow_unicode=True)
    if choices:
        text += "---\n{}\n---\n" + _dump(choices, allow_unicode=True)
    return _write(tmp_path_factory, "default.yaml", text)


def _allowed(default, data):
    """Allowed values for a key: the default as the only choice, or for a number an interval around it."""
    if isinstance(default, bool) or not isinstance(default, (int, float)) or not data.draw(st.booleans()):
        return [default]
    below, above = (data.draw(st.floats(0, 1e6)) for _ in range(2))
    return f"[{default - below!r}, {default + above!r}]"


def _type_of(value):
    return type(value).__name__


def _check_typed(config, schema):
    """Every value of the parsed config has the type of the schema's value (a null in the schema takes any)."""
    flat_schema, flat = flatten(schema), flatten(config.to_dict())
    assert set(flat) == set(flat_schema)
    for key, like in flat_schema.items():
        value = flat[key]
        if like is not None and value is not None:
            assert _type_of(value) == _type_of(like), (key, like, value)
        if isinstance(like, list) and like and isinstance(value, list):  # null is a value of any type
            assert all(v is None or _type_of(v) == _type_of(like[0]) for v in value), (key, like, value)


@fuzz(60)
@given(schema=SCHEMA)
def test_schema_defaults_round_trip(tmp_path_factory, schema):
    config = parse_cli(_schema_file(tmp_path_factory, schema), [])
    assert config.to_dict() == schema


@fuzz(150)
@given(schema=SCHEMA, overrides=st.none(), data=st.data())
@example(schema={"a": [1]}, overrides={"a": "["}, data=None)  # "[" for a list was a yaml ParserError
@example(schema={"a": None}, overrides={"a": "[" * 3000}, data=None)  # a RecursionError for a null
def test_command_line_values_are_typed_or_config_errors(tmp_path_factory, schema, overrides, data):
    """`--key=value` with any string: a value of the schema's type (the choices' when it has some), or a
    ConfigError naming the key."""
    flat = flatten(schema)
    if overrides is None:
        overrides = data.draw(st.dictionaries(st.sampled_from(sorted(flat)), RAW, min_size=1, max_size=3))
    choices = {key: _allowed(flat[key], data) for key in overrides if data is not None and data.draw(st.booleans())}
    path = _schema_file(tmp_path_factory, schema, choices)
    try:
        config = parse_cli(path, [f"--{key}={raw}" for key, raw in overrides.items()])
    except ConfigError as err:
        assert any(f"'{key}" in str(err) or f"--{key}" in str(err) for key in overrides), str(err)
        assert "\n" not in str(err)
        return
    _check_typed(config, schema)
    flat_config = flatten(config.to_dict())
    for key, raw in overrides.items():
        like, value = flat[key], flat_config[key]
        if isinstance(choices.get(key), list):
            assert value in choices[key]
        elif key in choices:
            assert value is None or in_interval(value, choices[key])
        if isinstance(like, str):
            assert value == raw
        elif isinstance(like, bool):
            assert value is (raw.strip().lower() in ("true", "yes", "on", "1"))
        elif isinstance(like, int):
            assert value == int(raw.strip())
        elif isinstance(like, float):
            assert value == float(raw.strip())


@fuzz(60)
@given(schema=SCHEMA, raw=RAW, key=st.none() | KEY)
@example(schema={"a": None}, raw="[", key=None)  # yaml for a null-valued key: was a yaml ParserError
@example(schema={"a": None}, raw="9" * 5000, key=None)  # yaml's int(): Python's 4300-digit ValueError, a traceback
@example(schema={"a": [1]}, raw="[" + "9" * 5000 + "]", key=None)
def test_flag_and_value_as_two_arguments(tmp_path_factory, schema, raw, key):
    """`--key value` (a value that looks like a flag, too) or an unknown flag: typed values or a ConfigError."""
    flat = flatten(schema)
    key = key or sorted(flat)[0]
    try:
        config = parse_cli(_schema_file(tmp_path_factory, schema), [f"--{key}", raw])
    except ConfigError as err:
        if key not in flat:
            assert f"'--{key}'" in str(err)
        assert "\n" not in str(err)
        return
    assert key in flat
    _check_typed(config, schema)


@fuzz(150)
@given(schema=SCHEMA, user=st.none(), data=st.data())
@example(schema={"lr": 0.5}, user={"lr": 10 ** 400}, data=None)  # was an OverflowError (int to float)
@example(schema={"ids": [1]}, user={"ids": ["x"]}, data=None)  # was accepted: the items were not checked
def test_user_yaml_values(tmp_path_factory, schema, user, data):
    """A user's yaml with the schema's keys and any values: typed values or a ConfigError naming the key."""
    flat = flatten(schema)
    if user is None:
        user = data.draw(st.dictionaries(st.sampled_from(sorted(flat)), USER_VALUE, min_size=1, max_size=4))
    path = _write(tmp_path_factory, "mine.yaml", _dump(_nest(user), allow_unicode=True))
    try:
        config = parse_cli(_schema_file(tmp_path_factory, schema), ["--config_path", str(path)])
    except ConfigError as err:
        named = any(f"'{key}" in str(err) for key in user) or f"{path} line " in str(err)  # the key, or its line
        assert named and "\n" not in str(err), str(err)
        return
    _check_typed(config, schema)


def _nest(flat):
    """{'a.b': 1} -> {'a': {'b': 1}}."""
    nested = {}
    for key, value in flat.items():
        *parents, last = key.split(".")
        target = nested
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return nested


@fuzz(100)
@given(schema=SCHEMA, unknown=st.lists(KEY, min_size=1, max_size=3), value=USER_VALUE, data=st.data())
def test_unknown_user_keys_are_named(tmp_path_factory, schema, unknown, value, data):
    """An unknown key (at any depth) is always a ConfigError, which names it when it is the only problem."""
    flat = flatten(schema)
    sections = {key.rsplit(".", 1)[0] for key in flat if "." in key}
    parent = data.draw(st.sampled_from(sorted(sections | {""})))
    dotted = ".".join(filter(None, [parent, *unknown]))
    if any(dotted == key or dotted.startswith(key + ".") or key.startswith(dotted + ".") for key in flat):
        return  # not unknown: a key of the schema, below one or above one
    path = _write(tmp_path_factory, "mine.yaml", _dump(_nest({dotted: value}), allow_unicode=True))
    with pytest.raises(ConfigError) as err:
        parse_cli(_schema_file(tmp_path_factory, schema), ["--config_path", str(path)])
    if not (isinstance(value, dict) and value):
        assert f"unknown key '{dotted}'" in str(err.value)
    else:
        assert f"unknown key '{dotted}." in str(err.value)


@fuzz(150)
@given(text=st.one_of(TEXT, st.lists(st.sampled_from(["a:", " b", ": 1", "- x", "---", "[", "{", "]", "\n", "  ",
                                                      "!!str", "&x", "*x", "? ", "|", "'", '"', "#", "%YAML 1.1",
                                                      "a: [1, 2]", "\t"]), max_size=12).map("".join)),
       raw_bytes=st.none() | st.binary(max_size=40))
@example(text="", raw_bytes=b"\xff\xfe")  # not UTF-8: was a UnicodeDecodeError
@example(text="[" * 3000, raw_bytes=None)  # nested too deep for the yaml parser: was a RecursionError
@example(text="\x1f", raw_bytes=None)  # the reader's message ran over two lines
def test_any_file_is_a_config_or_a_config_error(tmp_path_factory, text, raw_bytes):
    path = _write(tmp_path_factory, "any.yaml", text, raw_bytes)
    try:
        values, helps, choices = load_yaml_documents(path)
    except ConfigError as err:
        assert str(path) in str(err) and "\n" not in str(err)
        return
    assert all(isinstance(doc, dict) for doc in (values, helps, choices))
