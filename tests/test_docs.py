"""The README and the documentation site (docs/): the README short, starting with the two commands
CI runs; its links, and every link of the site, resolving to a page and a heading's anchor; the
generated reference equal to what the code says (every command's ``--help``, the environment
variables, the layers); the exit codes those fixpack/errors.py defines; and nothing of the long
README the site replaced lost: each of its sections mapped, each of its command lines in the site or
listed as dropped with a reason. The site itself is built with ``sphinx-build -W`` where the docs
extra is installed (``.ci/run`` installs it)."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
from runs import shown_as_printed

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
README = REPO / "README.md"
# The README the site replaced: at the commit issue 50 names, and the last one before the change.
OLD_READMES = ("091f755", "293776c")
# myst_heading_anchors in docs/conf.py: headings down to ### get an anchor
ANCHOR_DEPTH = 3
LINK = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
NO_DOCS_EXTRA = "the docs extra is not installed (pip install -e '.[docs]')"


@cache
def generator() -> ModuleType:
    """docs/_ext/fixpack_docs.py, the extension that generates the reference's parts."""
    spec = importlib.util.spec_from_file_location("fixpack_docs", DOCS / "_ext" / "fixpack_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_ext" not in p.parts and "_build" not in p.parts)


@cache
def source(page: Path) -> str:
    """A page as Sphinx reads it: its generated parts expanded."""
    return generator().expand(page.read_text(encoding="utf-8"))


def without_code(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    out, fence = [], None
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
        elif match:
            fence = match.group(1)
        else:
            out.append(line)
    return out


def slug(title: str) -> str:
    """GitHub's anchor for a heading, MyST's default (myst_parser.slugs.github_slugify)."""
    return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", title.strip().lower().replace(" ", "-"))


def anchors(page: Path) -> set[str]:
    found = set()
    for line in without_code(source(page)):
        match = re.match(r"^(#{1,6}) (.+?)\s*#*\s*$", line)
        if match and len(match.group(1)) <= ANCHOR_DEPTH:
            found.add(slug(match.group(2)))
    return found


def links(text: str) -> list[str]:
    """The targets of the Markdown links of a text, outside code (blocks and spans)."""
    lines = (re.sub(r"`[^`]*`", "", line) for line in without_code(text))
    return [target for line in lines for _, target in LINK.findall(line)]


def broken(base: Path, targets: list[str]) -> list[str]:
    """The local Markdown links among ``targets`` (relative to ``base``) that do not lead to a page
    of the site and, where one is given, a heading's anchor in it."""
    wrong = []
    for target in targets:
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not the site's
        path, _, anchor = target.partition("#")
        page = (base / path).resolve() if path else None
        if page is None or page.suffix != ".md":
            if page is not None and not page.exists():
                wrong.append(f"{target}: no such file")
            continue
        if not page.is_file():
            wrong.append(f"{target}: no such page")
        elif DOCS not in page.parents:
            wrong.append(f"{target}: not a page of docs/")
        elif anchor and anchor not in anchors(page):
            wrong.append(f"{target}: no heading with that anchor in {page.relative_to(REPO)}")
    return wrong


def indented_blocks(text: str) -> list[str]:
    """The lines of a README's code blocks (indented by four spaces after a blank line, or fenced),
    unindented."""
    out, fence, in_block, previous_blank = [], None, False, True
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0]:
                fence = None
            else:
                out.append(line)
            continue
        if match:
            fence, in_block = match.group(1), False
        elif line.startswith("    ") and (previous_blank or in_block):
            in_block = True
            out.append(line[4:])
        elif line.strip():
            in_block = False
        previous_blank = not line.strip()
    return out


def logical(lines: list[str]) -> list[str]:
    """Lines joined where a shell would (a trailing backslash), blanks collapsed."""
    out, current = [], ""
    for line in lines:
        current = f"{current} {line.strip()}" if current else line.strip()
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        if current:
            out.append(" ".join(current.split()))
        current = ""
    return out


PROGRAMS = {"python3", "python", "fixpack", "pip", "git", "curl", "mkdir", "export", "vllm", "rm", "sphinx-build"}


def is_command(line: str) -> bool:
    words = line.split()
    while words and (words[0] in ("RUN", "$", "&&") or re.match(r"^[A-Z_][A-Z0-9_]*=", words[0])):
        words = words[1:]
    return bool(words) and (words[0] in PROGRAMS or words[0].endswith("/python"))


def old_readme(commit: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{commit}:README.md"], capture_output=True, text=True, check=False
        )
    except OSError as exc:
        pytest.skip(f"git cannot be run: {exc}")
    if done.returncode:
        pytest.skip(f"the README at {commit} is not in this clone's history (a shallow clone?): {done.stderr.strip()}")
    return done.stdout


def map_table(heading: str) -> list[list[str]]:
    """The rows of the table under ``heading`` in docs/readme-map.md, as cells."""
    text = (DOCS / "readme-map.md").read_text(encoding="utf-8").split(f"\n## {heading}\n", 1)[1]
    text = text.split("\n## ", 1)[0]
    rows = [line for line in text.splitlines() if line.startswith("|")][2:]
    return [[cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]


# --- the README ----------------------------------------------------------------------------------


def test_the_readme_is_short_and_starts_with_the_two_commands_ci_runs():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 150
    main_job, tests = [line for line in indented_blocks(text) if line.strip()][:2]
    assert main_job.startswith("python3 -m pip install -e . && fixpack build-site /tmp/fixpack-site --vllm-gaudi ")
    apply = "python3 fixes/apply_all.py --profile v0.26.0 --site /tmp/fixpack-site gdn-prefix-cache fp8-moe-gather"
    assert main_job.endswith(apply)
    assert tests == "python3 -m pip install -e '.[test,proofs]' && python3 -m pytest -q"
    # .ci/run installs the same and runs the same command (with CI's reporting options)
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "-e '.[test,proofs]'" in ci
    assert re.search(r"^python3 -m pytest -q\b", ci, re.M)
    # and builds the site as the contributing page says
    assert re.search(r"^sphinx-build -W --keep-going .*-b html docs ", ci, re.M)
    assert 'python3 "$COOKBOOK/fixes/apply_all.py" --profile v0.26.0 gdn-prefix-cache fp8-moe-gather || exit 1' in text


def test_who_you_are_points_each_reader_to_a_page_and_a_heading():
    text = README.read_text(encoding="utf-8")
    table = text.split("| who you are | where to read |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("|")][1:]
    assert len(rows) == 5
    for row in rows:
        targets = [target for _, target in LINK.findall(row)]
        assert targets and all(t.startswith("docs/") and "#" in t for t in targets), row
        assert broken(REPO, targets) == [], row


def test_every_link_of_the_readme_resolves():
    assert broken(REPO, links(README.read_text(encoding="utf-8"))) == []


# --- the site's pages -----------------------------------------------------------------------------


def test_every_link_of_the_site_leads_to_a_page_and_a_heading():
    wrong = [f"{page.relative_to(REPO)}: {w}" for page in pages() for w in broken(page.parent, links(source(page)))]
    assert wrong == []


def test_every_page_fixpack_s_messages_name_exists_with_its_heading():
    """A refusal's way out names a page (issue 57): each docs/....md[#anchor] in fixpack's source,
    the runtime's and fixes/apply_all.py's included, leads to a page and a heading."""
    named = {
        (source_file.relative_to(REPO), target)
        for source_file in [*(REPO / "fixpack").rglob("*.py"), REPO / "fixes" / "apply_all.py"]
        for target in re.findall(r"docs/[\w/.-]+\.md(?:#[\w-]+)?", source_file.read_text(encoding="utf-8"))
    }
    assert len(named) > 8
    assert [f"{where}: {w}" for where, target in sorted(named) for w in broken(REPO, [target])] == []


def test_every_page_is_in_a_table_of_contents():
    listed = {DOCS / "index.md"}
    for page in pages():
        for block in re.findall(r"```\{toctree\}\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            entries = [line.strip() for line in block.splitlines() if line.strip() and not line.startswith(":")]
            listed |= {(page.parent / f"{entry}.md").resolve() for entry in entries}
    assert set(pages()) - listed == set()


def test_the_anchor_rule_is_myst_s():
    slugs = pytest.importorskip("myst_parser.slugs", reason=NO_DOCS_EXTRA)
    for page in pages():
        for line in without_code(source(page)):
            match = re.match(r"^#{1,3} (.+)$", line)
            if match:
                assert slug(match.group(1)) == slugs.github_slugify(match.group(1).replace("`", "")), line


# --- the generated reference ---------------------------------------------------------------------


def fixpack_help(path: tuple[str, ...]) -> str:
    """``fixpack PATH --help`` as the installed script prints it, without a terminal (80 columns)."""
    script = "import sys; from fixpack.cli import main; sys.argv[0] = 'fixpack'; main()"
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script, *path, "--help"], capture_output=True, text=True, env=env, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_reference_holds_every_command_and_its_help():
    import click

    from fixpack.cli.group import COMMANDS, main

    ctx = click.Context(main)
    recipe = main.get_command(ctx, "recipe")
    assert isinstance(recipe, click.Group)
    expected = {(), *((name,) for name in COMMANDS), *(("recipe", name) for name in recipe.list_commands(ctx))}
    paths = generator().command_paths()
    assert set(paths) == expected and len(paths) == len(expected)
    page = source(DOCS / "reference" / "commands.md")
    for path in paths:
        printed = fixpack_help(path)
        assert printed == generator().help_text(path) + "\n", path
        assert f"$ {' '.join(('fixpack', *path))} --help\n{printed}" in page, path
    apply = generator().help_text(("apply",))
    assert "--exec CMD [ARGS...]" in apply and "Environment:" in apply  # the epilog, parsed outside click


def test_the_environment_variables_in_the_docs_are_those_the_cli_knows():
    from fixpack.cli.environment import TESTS_ONLY, VARIABLES

    known = set(VARIABLES) | set(TESTS_ONLY)
    table = generator().environment_markdown()
    assert re.findall(r"^\| `(\w+)`", table, re.M) == [*VARIABLES, *TESTS_ONLY]
    for name, meaning, _ in generator().environment_rows():
        assert meaning == VARIABLES.get(name, generator().TESTS_ONLY_MEANING.get(name))
    page = source(DOCS / "reference" / "environment.md")
    assert table in page
    # every FIXPACK_ variable the site names is fixpack's, or one of the test suite's, which the
    # contributing page lists
    suite = (DOCS / "contributing.md").read_text(encoding="utf-8").split("## The tests' variables", 1)[1]
    suite_names = set(re.findall(r"`(FIXPACK_\w+)`", suite.split("\n## ", 1)[0]))
    assert not suite_names & known - {"FIXPACK_SRC_VLLM_GAUDI", "FIXPACK_SRC_VLLM"}
    named = {name for page in pages() for name in re.findall(r"\bFIXPACK_[A-Z_]*[A-Z]\b", source(page))}
    assert named <= known | suite_names, named - known - suite_names


def test_the_exit_codes_in_the_docs_are_those_errors_py_defines():
    from fixpack import errors

    defined = {name: getattr(errors, name) for name in errors.__all__ if isinstance(getattr(errors, name), int)}
    classes = {
        name: cls.exit_code
        for name in errors.__all__
        if isinstance(cls := getattr(errors, name), type) and issubclass(cls, errors.FixpackError)
    }
    text = (DOCS / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| `(\w+)`(?: \(`(\w+)`\))? \|", text, re.M)
    assert {name: int(code) for code, name, _ in rows} == defined
    for code, _, cls in rows:
        if cls:
            assert classes[cls] == int(code), cls


def test_the_layers_in_the_docs_are_test_layers_s():
    spec = importlib.util.spec_from_file_location("layers_map", REPO / "tests" / "test_layers.py")
    assert spec and spec.loader
    layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers)
    allowed, warm = generator().layers()
    assert allowed == layers.ALLOWED and warm == layers.WARM_PATH
    page = source(DOCS / "design" / "layers.md")
    for layer in layers.ALLOWED:
        assert f"| `{layer}` |" in page


# --- nothing of the old README lost ---------------------------------------------------------------


@pytest.mark.parametrize("commit", OLD_READMES)
def test_every_section_of_the_old_readme_is_mapped_to_a_page(commit):
    text = old_readme(commit)
    sections = [m.group(1) for m in re.finditer(r"^#{2,3} (.+)$", "\n".join(without_code(text)), re.M)]
    rows = map_table("Sections")
    mapped = {row[0] for row in rows}
    assert [s for s in sections if s not in mapped] == []
    assert any(row[0].startswith("(the untitled opening)") for row in rows)
    for row in rows:
        targets = [target for _, target in LINK.findall(row[1])]
        assert targets and broken(DOCS, targets) == [], row


@pytest.mark.parametrize("commit", OLD_READMES)
def test_every_command_line_of_the_old_readme_is_in_the_docs(commit):
    commands = [line for line in logical(indented_blocks(old_readme(commit))) if is_command(line)]
    assert len(commands) > 40  # the README's code blocks were found
    site = "\n".join(" ".join(logical(source(page).splitlines())) for page in pages() if page.name != "readme-map.md")
    dropped = {row[0].strip("`") for row in map_table("Dropped command lines")}
    assert [line for line in commands if line not in site and line not in dropped] == []
    for row in map_table("Dropped command lines"):
        assert row[1], f"{row[0]}: dropped without a reason"


# --- the site, built ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for module in ("sphinx", "myst_parser", "furo"):
        pytest.importorskip(module, reason=NO_DOCS_EXTRA)
    out = tmp_path_factory.mktemp("docs-html")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_the_site_builds_without_a_warning_and_shows_every_command_s_help(built):
    page = (built / "reference" / "commands.html").read_text(encoding="utf-8")
    shown = html.unescape(re.sub(r"<[^>]+>", "", page))
    for path in generator().command_paths():
        assert generator().help_text(path) in shown, path
    environment = html.unescape(re.sub(r"<[^>]+>", "", (built / "reference" / "environment.html").read_text()))
    from fixpack.cli.environment import TESTS_ONLY, VARIABLES

    assert all(name in environment for name in [*VARIABLES, *TESTS_ONLY])


# The docs' runs of commands that read the cookbook alone (no site): each shown as `$ fixpack ...`
# in a text block, then its output, "..." standing for lines left out (issue 57: examples are real runs).
READS_THE_COOKBOOK = ("profiles", "recipe list", "show ", "list")


def _shown_runs() -> list[tuple[Path, list[str], list[str]]]:
    runs = []
    for page in pages():
        for block in re.findall(r"```text\n(.*?)```", source(page), re.S):
            first, *shown = block.rstrip("\n").split("\n")
            args = first[len("$ fixpack ") :].split()
            help_page = "--help" in args  # the command reference's, checked against its generator above
            if first.startswith("$ fixpack ") and " ".join(args).startswith(READS_THE_COOKBOOK) and not help_page:
                runs.append((page, args, shown))
    return runs


def test_the_docs_runs_of_cookbook_commands_are_what_they_print(monkeypatch: pytest.MonkeyPatch):
    from click.testing import CliRunner

    from fixpack.cli import main

    monkeypatch.delenv("FIXPACK_COOKBOOK", raising=False)
    monkeypatch.delenv("FIXPACK_SITE", raising=False)
    runs = _shown_runs()
    assert {" ".join(args[:1]) for _, args, _ in runs} >= {"profiles", "recipe", "show"}
    for page, args, shown in runs:
        printed = CliRunner().invoke(main, args, prog_name="fixpack").stdout.rstrip("\n").split("\n")
        assert shown_as_printed(shown, printed), (
            f"{page.relative_to(REPO)}: fixpack {' '.join(args)} prints:\n" + "\n".join(printed)
        )


def test_the_sbom_page_counts_the_patches_of_the_pack():
    """One patch per fix and distribution it changes, for v0.26.0 with its opt-ins (issue 57: the
    page said 23 when the pack had grown to 29)."""
    from fixpack.cookbook.catalog import Catalog
    from fixpack.core.plan import resolve

    catalog = Catalog.load(REPO)
    profile = catalog.profile("v0.26.0")
    plan = resolve(catalog.fixes, profile, tuple(profile.opt_ins))
    per_dist = {
        package: sum(1 for f in plan.fixes if any(c.path.startswith(f"{package}/") for c in f.changes[profile.release]))
        for package in ("vllm_gaudi", "vllm")
    }
    page = " ".join(source(DOCS / "operators" / "sbom.md").split())
    counted = f"({sum(per_dist.values())} for the v0.26.0 profile with both opt-ins: {per_dist['vllm_gaudi']} to "
    assert counted + f"vllm-gaudi, {per_dist['vllm']} to vLLM)" in page
