"""The libcst applicator: each kind of edit, anchors that are missing or ambiguous, rendering to a diff."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from builders import REPO

from fixpack.core import patch as diff
from fixpack.transforms import (
    CstFailed,
    Transform,
    add_entries,
    add_function,
    add_import,
    append_to,
    extend_docstring,
    insert_after,
    insert_before,
    load_transforms,
    render_transforms,
    replace_body,
    replace_expr,
    replace_statement,
)

SOURCE = textwrap.dedent(
    '''\
    """A module."""
    import os


    class Runner:
        def step(self, batch):
            # one step
            rows = len(batch)
            if rows:
                return self.run(batch) * 2
            return None

        def idle(self): return 0


    def helper():
        return 1
    '''
)


def run(*edits, source: str = SOURCE) -> str:
    return Transform("vllm_gaudi/runner.py", list(edits)).apply(source.encode()).decode()


def test_replace_body_of_method_and_one_line_def():
    out = run(replace_body("Runner.step", "return batch\n"), replace_body("Runner.idle", "x = 1\nreturn x"))
    assert (
        "    def step(self, batch):\n        return batch\n\n    def idle(self):\n        x = 1\n        return x\n"
        in out
    )
    assert out.startswith('"""A module."""\nimport os\n') and out.endswith("def helper():\n    return 1\n")


def test_insert_before_and_after_statements_at_their_indentation():
    out = run(
        insert_before("Runner.step", "rows = len(batch)", "# guard\nassert batch is not None"),
        insert_after("Runner.step", "if rows:", "self.log(rows)"),
        insert_after("Runner.step", "return self.run(batch) * 2", "pass"),
    )
    assert "        # guard\n        assert batch is not None\n        # one step\n        rows = len(batch)\n" in out
    assert (
        "            return self.run(batch) * 2\n            pass\n        self.log(rows)\n        return None\n" in out
    )


def test_replace_statement_keeps_its_comments_unless_given_new_ones():
    out = run(replace_statement("Runner.step", "rows = len(batch)", "rows = batch.size"))
    assert "        # one step\n        rows = batch.size\n        if rows:\n" in out
    out = run(replace_statement("Runner.step", "if rows:", "# none\nif not rows:\n    return None"))
    assert "        rows = len(batch)\n        # none\n        if not rows:\n            return None\n" in out
    assert "return self.run" not in out


def test_replace_expression_layout_and_parentheses_aside():
    out = run(replace_expr("Runner.step", "self.run(batch)*2", "self.run(batch)"))
    assert "            return self.run(batch)\n" in out
    out = run(replace_expr("Runner.step", "len( batch )", "batch.size"))
    assert "rows = batch.size\n" in out


def test_add_import_after_the_last_import_and_only_once():
    out = run(add_import("from vllm import envs"))
    assert out.startswith('"""A module."""\nimport os\nfrom vllm import envs\n\n\nclass Runner:')
    assert run(add_import("import os")) == SOURCE
    bare = run(add_import("import sys"), source='"""Doc."""\nx = 1\n')
    assert bare == '"""Doc."""\nimport sys\nx = 1\n'


def test_add_function_after_a_definition_or_at_the_end():
    out = run(add_function("def fresh():\n    return 2\n", after="Runner"))
    assert "    def idle(self): return 0\n\n\ndef fresh():\n    return 2\n\n\ndef helper():" in out
    out = run(add_function("def last():\n    return 3"))
    assert out.endswith("def helper():\n    return 1\n\n\ndef last():\n    return 3\n")
    assert run(add_function("def helper():\n    return 1\n")) == SOURCE  # already there: nothing to do
    with pytest.raises(CstFailed, match="'helper' is already defined in this file .*differently"):
        run(add_function("def helper():\n    return 9\n"))


ENVS = textwrap.dedent(
    '''\
    """Settings."""
    import os
    from typing import TYPE_CHECKING

    if TYPE_CHECKING:
        A: int = 1
        B: int = 2

    # the table
    table: dict[str, object] = {
        # first
        "A":
        lambda: int(os.environ.get("A", "1")),
        "B":
        lambda: int(os.environ.get("B", "2")),
    }
    order = ["a", "b"]


    class K:
        names = ["x"]

        def f(self):
            """Do f.

            Twice.
            """
            calls()
    '''
)


def test_append_to_a_block_and_a_body_lands_after_what_upstream_added_there():
    edits = (append_to("", "C: int = 3", block="if TYPE_CHECKING:"), append_to("K.f", "more()"))
    out = run(*edits, source=ENVS)
    assert "    A: int = 1\n    B: int = 2\n    C: int = 3\n\n# the table\n" in out
    assert "        calls()\n        more()\n" in out
    # Upstream added a variable at the end of the block: a diff's context breaks, the anchor holds.
    newer = ENVS.replace("    B: int = 2\n", "    B: int = 2\n    Z: bool = False\n")
    assert "    Z: bool = False\n    C: int = 3\n" in run(*edits, source=newer)
    with pytest.raises(CstFailed, match="not a compound statement"):
        run(append_to("", "x = 1", block='order = ["a", "b"]'), source=ENVS)


def test_add_entries_to_a_dict_and_lists_keeping_comments_and_layout():
    entries = """

        # third, off by default
        "C":
        lambda: int(os.environ.get("C", "3")),
        """
    out = run(add_entries("table", entries), add_entries("order", '"c"'), add_entries("K.names", '"y",'), source=ENVS)
    assert (
        '    lambda: int(os.environ.get("B", "2")),\n\n    # third, off by default\n    "C":\n'
        '    lambda: int(os.environ.get("C", "3")),\n}\n' in out
    )
    assert 'order = ["a", "b", "c"]\n' in out and '    names = ["x", "y",]\n' in out
    compile(out, "envs.py", "exec")
    b_entry = '    lambda: int(os.environ.get("B", "2")),\n'
    newer = ENVS.replace(b_entry, b_entry + '    "Z": None,\n')
    assert '    "Z": None,\n\n    # third, off by default\n' in run(add_entries("table", entries), source=newer)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (add_entries("tabel", '"x": 1'), "nothing is assigned to 'tabel'"),
        (add_entries("K.f", '"x"'), "nothing is assigned to 'f'"),
        (add_entries("table", "x ="), "its code is not dict entries"),
        (add_entries("order", '"k": 1'), "its code is not list entries"),
        (extend_docstring("helper", "more"), "no triple-quoted docstring"),
    ],
)
def test_add_entries_and_docstring_failures_name_the_place(edit, message):
    source = ENVS + "\n\ndef helper():\n    return 1\n"
    with pytest.raises(CstFailed, match=message):
        run(edit, source=source)


def test_extend_docstring_at_the_closing_quotes_indentation():
    out = run(extend_docstring("K.f", "\n\nThrice, with the fix.\n"), source=ENVS)
    assert '        Twice.\n\n        Thrice, with the fix.\n        """\n        calls()\n' in out
    with pytest.raises(CstFailed, match="closing quotes are not on a line of their own"):
        run(extend_docstring("", "x"), source=ENVS)


def test_untouched_bytes_and_crlf_are_kept():
    crlf = SOURCE.replace("\n", "\r\n")
    out = Transform("p.py", [replace_body("helper", "return 2")]).apply(crlf.encode())
    assert out == crlf.replace("return 1", "return 2").encode()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            replace_body("Runner.stp", "pass"),
            r"'Runner.stp' is not defined in this file \(did you mean 'Runner.step'\?\)",
        ),
        (replace_body("Runner", "pass"), "'Runner' is a class, not a function"),
        (insert_after("Runner.step", "rows = 2", "pass"), "no statement 'rows = 2' in 'Runner.step'"),
        (insert_before("helper", "return 1", "x = ("), "its code does not parse"),
        (
            replace_expr("Runner.step", "batch", "b"),
            r"expression 'batch' occurs 2 times in 'Runner.step' \(lines 8, 10\)",
        ),
        (replace_expr("helper", "2", "3"), "no expression '2' in 'helper'"),
        (add_import("x = 1"), "give exactly one import statement"),
        (add_function("x = 1"), "give exactly one def or class"),
    ],
)
def test_failures_name_the_anchor(edit, message):
    with pytest.raises(CstFailed, match=message) as info:
        run(edit)
    assert str(info.value).startswith(f"vllm_gaudi/runner.py: {edit}: ")


def test_ambiguous_definitions_and_statements():
    twins = "import sys\nif sys.version_info >= (3, 11):\n    def f():\n        return 1\n"
    twins += "else:\n    def f():\n        return 1\n"
    with pytest.raises(CstFailed, match=r"'f' is defined 2 times \(lines 3, 6\): ambiguous"):
        run(replace_body("f", "return 2"), source=twins)
    with pytest.raises(CstFailed, match=r"statement 'return 1' occurs 2 times in the module \(lines 4, 7\): ambiguous"):
        run(insert_after("", "return 1", "pass"), source=twins)


def test_libcst_is_not_imported_by_the_engine():
    engine = "fixpack.cli, fixpack.commands.install.apply, fixpack.transforms"
    code = f"import sys, {engine}; print('libcst' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def write_transforms(fix_dir, body: str) -> None:
    fix_dir.mkdir(parents=True, exist_ok=True)
    (fix_dir / "fix.toml").write_text('[release."v0.26.0"]\ntransforms = "v0.26.0_cst.py"\n')
    (fix_dir / "v0.26.0_cst.py").write_text(textwrap.dedent(body))


def test_render_transforms_to_a_diff_that_applies(tmp_path):
    write_transforms(
        tmp_path / "fix",
        """\
        from fixpack.transforms import Transform, replace_body

        TRANSFORMS = [Transform(path="vllm_gaudi/runner.py", edits=[replace_body("helper", "return 2")])]
        """,
    )
    patch = render_transforms(load_transforms(tmp_path / "fix" / "v0.26.0_cst.py"), lambda path: SOURCE.encode())
    assert patch.startswith("diff --git a/vllm_gaudi/runner.py b/vllm_gaudi/runner.py\n")
    (fd,) = diff.split_files(patch)
    assert diff.apply(fd, SOURCE.encode()) == SOURCE.replace("return 1", "return 2").encode()
    with pytest.raises(CstFailed, match="changes nothing"):
        transforms = load_transforms(tmp_path / "fix" / "v0.26.0_cst.py")
        render_transforms(transforms, lambda path: SOURCE.replace("return 1", "return 2").encode())


def test_render_transforms_refuses_an_absent_file(tmp_path):
    write_transforms(
        tmp_path / "fix",
        """\
        from fixpack.transforms import Transform, replace_body
        TRANSFORMS = [Transform("vllm_gaudi/gone.py", [replace_body("f", "pass")])]
        """,
    )
    with pytest.raises(CstFailed, match="the file is absent"):
        render_transforms(load_transforms(tmp_path / "fix" / "v0.26.0_cst.py"), lambda path: None)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("TRANSFORMS = 1\n", "TRANSFORMS must be a list"),
        ("raise RuntimeError('boom')\n", "RuntimeError: boom"),
        (
            "from fixpack.transforms import Transform\nTRANSFORMS = [Transform('a.py', [])]\n",
            "edits must be a non-empty list",
        ),
        (
            "from fixpack.transforms import Transform, add_import as a\n"
            "TRANSFORMS = [Transform('a.py', [a('import os')]), Transform('a.py', [a('import re')])]\n",
            "a file has two Transforms",
        ),
    ],
)
def test_bad_transforms_files(tmp_path, body, message):
    (tmp_path / "t.py").write_text(body)
    with pytest.raises(ValueError, match=message):
        load_transforms(tmp_path / "t.py")
