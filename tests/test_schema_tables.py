"""The cookbook's declared tables (fixpack.cookbook.schema): one check for every format, its messages
in each format's words, and the tables the loaders declare kept to what the files hold."""

from __future__ import annotations

import pytest

from fixpack.cookbook import schema
from fixpack.cookbook.fix_module import FIX_TABLE, backport_skeleton, skeleton
from fixpack.cookbook.recipes import RULE_TABLE
from fixpack.cookbook.schema import FLAG, POSITIVE, STR, STRINGS, TEXT, TOML, YAML, Field, Table
from fixpack.cookbook.tomlfile import tomllib
from fixpack.runtime import rules as rulebook


class Refused(Exception):
    def __init__(self, where: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.where, self.message = where, message


def refusal(value: object, table: Table, spelling: schema.Spelling = TOML) -> Refused:
    with pytest.raises(Refused) as caught:
        schema.check(value, table, (), spelling, Refused)
    return caught.value


PIN = Table(Field("dist", STR), Field("commits", STRINGS, []), wrong="each [[pin]] must be a table")
PROFILE = Table(
    Field("release", STR),
    Field("pin", schema.LIST, [], entries=PIN, wrong="pins must be [[pin]] tables"),
    Field("layout", default=None, table=Table(Field("cards", POSITIVE, 1), Field("expert", FLAG, False))),
    Field("gaudi_sw", TEXT, None),
)


def test_an_unknown_key_is_refused_in_the_files_order_with_the_nearest_known_one():
    r = refusal({"release": "v1", "relase": "v1", "pni": []}, PROFILE)
    assert r.message == "unknown key 'relase' in the top-level table (did you mean 'release'?)"
    assert r.where == ("relase",)


def test_an_unknown_key_with_none_near_lists_the_known_ones():
    r = refusal({"release": "v1", "pin": [{"dist": "vllm", "zzz": 1}]}, PROFILE)
    assert r.message == "unknown key 'zzz' in [[pin]] #1 (known: commits, dist)"
    assert r.where == ("pin", 0, "zzz")


def test_yaml_names_a_table_by_its_dotted_path():
    r = refusal({"release": "v1", "layout": {"crads": 2}}, PROFILE, YAML)
    assert r.message == "unknown key 'crads' in layout (did you mean 'cards'?)"
    assert r.where == ("layout", "crads")


def test_unknown_keys_come_before_missing_ones():
    assert refusal({"relase": "v1"}, PROFILE).message.startswith("unknown key 'relase'")
    assert refusal({}, PROFILE).message == "missing 'release'"
    assert refusal({"layout": {}}, PROFILE, YAML).message == "the document has no 'release'"


def test_a_value_of_the_wrong_kind_is_named_in_the_formats_words():
    assert refusal({"release": 1}, PROFILE).message == "'release' must be a str"
    assert refusal({"release": "v1", "layout": []}, PROFILE).message == "'layout' must be a dict"
    r = refusal({"release": "v1", "layout": {"cards": 0}}, PROFILE, YAML)
    assert (r.message, r.where) == ("layout.cards must be a positive integer", ("layout", "cards"))
    r = refusal({"release": "v1", "layout": {"expert": "yes"}}, PROFILE, YAML)
    assert r.message == "layout.expert must be true or false"
    assert refusal(["not", "a", "mapping"], PROFILE, YAML).message == "the document must be a mapping"


def test_a_fields_own_words_and_an_entry_tables_own_words_replace_the_formats():
    assert refusal({"release": "v1", "pin": {}}, PROFILE).message == "pins must be [[pin]] tables"
    r = refusal({"release": "v1", "pin": [{"dist": "vllm"}, "x"]}, PROFILE)
    assert (r.message, r.where) == ("each [[pin]] must be a table", ("pin", 1))
    named = Table(Field("release", STR), Field("by", schema.DICT, {}, entries=PIN))
    assert refusal({"release": "v1", "by": {"x": 1}}, named).message == "each [[pin]] must be a table"
    keyed = Table(Field("release", schema.DICT, entries=Table(wrong="release {key!r} must be a table")))
    assert refusal({"release": {"v0.26.0": "x"}}, keyed).message == "release 'v0.26.0' must be a table"


def test_defaults_fill_the_absent_keys_and_are_not_shared():
    first = schema.check({"release": "v1"}, PROFILE, (), TOML, Refused)
    assert first == {"release": "v1", "pin": [], "layout": None, "gaudi_sw": None}
    first["pin"].append("changed")
    second = schema.check({"release": "v1"}, PROFILE, (), TOML, Refused)
    assert second["pin"] == []
    layout = schema.check({"release": "v1", "layout": {"cards": 4}}, PROFILE, (), TOML, Refused)["layout"]
    assert layout == {"cards": 4, "expert": False}


def test_a_null_is_absent_only_where_the_default_is_none():
    checked = schema.check({"release": "v1", "gaudi_sw": None}, PROFILE, (), YAML, Refused)
    assert checked["gaudi_sw"] is None
    r = refusal({"release": "v1", "layout": {"cards": None}}, PROFILE, YAML)
    assert r.message == "layout.cards must be a positive integer"


def test_entries_are_checked_each_at_its_own_path():
    texts = Table(Field("opt_ins", schema.TEXTS, [], entries=TEXT))
    r = refusal({"opt_ins": ["a", " "]}, texts, YAML)
    assert (r.message, r.where) == ("opt_ins.1 must be a non-empty string (quote it)", ("opt_ins", 1))
    assert refusal({"opt_ins": "a"}, texts, YAML).message == "opt_ins must be a list of strings"


def test_the_rule_table_has_the_rulebooks_keys():
    assert set(RULE_TABLE.fields) == rulebook.RULE_KEYS


@pytest.mark.parametrize(
    "text",
    [
        skeleton("a-fix", "v0.26.0", ["header", "runner-fix"], ["runner-fix"]),
        backport_skeleton("a-fix", "v0.26.0", 'Fix "it"', "one\n\ntwo\n", "owner/repo@abc1234"),
        backport_skeleton("a-fix", "v0.26.0", "T", "has ''' in it", "abc1234"),
    ],
)
def test_a_skeleton_holds_only_what_fix_toml_declares(text):
    data = tomllib.loads(text)
    checked = schema.check(data, FIX_TABLE, (), TOML, Refused)
    assert checked["id"] == "a-fix" and list(checked["release"]) == ["v0.26.0"]


def test_a_backports_title_and_why_read_back_as_given():
    data = tomllib.loads(backport_skeleton("a-fix", "v1", 'Fix "it" \\ now', "has ''' in it\n", "abc1234"))
    assert (data["title"], data["why"]) == ('Fix "it" \\ now', "has ''' in it")
    assert data["upstream"] == {"forwarded": "not-needed", "origin": "abc1234", "bug": [], "note": ""}


# --- each field declared once (issue 58): the models are their tables ----------------------------

# What a model holds that no key of its file gives: where the file is, what the loader works out.
NOT_FROM_THE_FILE = {
    "Fix": {"source"},
    "Proof": {"script"},
    "Profile": {"name", "draft"},
    "Recipe": {"path", "shown", "lines"},
}


def _models():
    from fixpack.cookbook import checks, fix_module, profiles, recipes
    from fixpack.models import Fix, Pin, Profile, Proof, Upstream

    return [
        (checks.Verify, checks.VERIFY_TABLE),
        (checks.Check, checks.CHECK_TABLE),
        (Fix, fix_module.FIX_TABLE),
        (Proof, fix_module.PROOF),
        (Upstream, fix_module.UPSTREAM),
        (Profile, profiles.PROFILE_TABLE),
        (Pin, profiles.PIN_TABLE),
        (recipes.Recipe, recipes.RECIPE_TABLE),
        (recipes.Upstream, recipes.UPSTREAM_TABLE),
    ]


@pytest.mark.parametrize("model, table", _models(), ids=lambda x: getattr(x, "__name__", ""))
def test_each_model_is_its_table_s_keys_and_what_is_not_in_the_file(model, table):
    import dataclasses

    held = {f.name for f in dataclasses.fields(model)}
    filled = set(schema.attributes(table))
    assert filled | NOT_FROM_THE_FILE.get(model.__name__, set()) == held
    assert all(f.kw_only for f in dataclasses.fields(model)), "built by keyword, so a field goes anywhere"


def test_a_new_key_is_its_table_line_and_its_use():
    """A key added to a table (here ``tags``, to a copy of the pin's) reaches the model by its line
    alone where the model has the attribute; one the model lacks is an error naming the key, never
    dropped."""
    import dataclasses

    from fixpack.cookbook.profiles import PIN_TABLE
    from fixpack.models import Pin

    tagged = dataclasses.make_dataclass(
        "TaggedPin", [("tags", tuple, dataclasses.field(default=(), kw_only=True))], bases=(Pin,), frozen=True
    )
    table = Table(*PIN_TABLE.fields.values(), Field("tags", STRINGS, []))
    data = schema.check({"dist": "d", "package": "p", "version": "1", "tags": ["a"]}, table, (), TOML, Refused)
    assert schema.build(tagged, table, data).tags == ("a",)
    with pytest.raises(TypeError, match="Pin has no attribute 'tags' for the key tags"):
        schema.build(Pin, table, data)
