"""``apply_all.py --recipe SLUG [--exec CMD ... | --launch]``, run as a container runs it (a
subprocess on a small site, a test cookbook whose recipe is the shipped one with the page's four
rules): each rule refuses (exit 1, its one line, nothing applied, the command never run), allows
(the command runs with exactly its arguments) or warns; ``--launch`` runs the recipe's own command
in its environment; a ``--recipe`` start never takes the warm path; the recipe is recorded
(``status --json``) and its rules on the environment run in every vLLM process, in place and in
an overlay, until a ``--profile`` apply or a revert."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from builders import REPO, Cookbook
from runs import LOAD, SCRIPT, py
from shipped_recipe import NO_GDN, RECIPE, RULES, SLUG, STAND_IN, with_recipe


@pytest.fixture
def book(cookbook: Cookbook) -> Cookbook:
    return with_recipe(cookbook)


@pytest.fixture
def vllm(tmp_path):
    """A stand-in ``vllm`` first on PATH; ``vllm.record()``: how it was started (None: never)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    record = tmp_path / "started.json"
    exe = folder / "vllm"
    exe.write_text(STAND_IN.format(python=sys.executable, record=str(record)))
    exe.chmod(0o755)

    class Stub:
        path = folder

        @staticmethod
        def record() -> dict | None:
            return json.loads(record.read_text()) if record.exists() else None

    return Stub


def start(book, site, vllm, *args: str, env: dict[str, str] | None = None, page_env: bool = True):
    """``apply_all.py ARGS --site SITE`` in a fresh process, after the page's exports (``page_env``)
    and ``env``; the stand-in vllm first on PATH."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("FIXPACK_", "PT_HPU", "VLLM_"))}
    full.pop("PYTHONPATH", None)
    full.update(FIXPACK_COOKBOOK=str(book.root), PATH=f"{vllm.path}{os.pathsep}{os.environ['PATH']}")
    if page_env:
        full.update(RECIPE.env_dict())
    full.update(env or {})
    at = args.index("--exec") if "--exec" in args else len(args)
    cmd = [sys.executable, "-X", "importtime", str(SCRIPT), *args[:at], "--site", str(site.path), *args[at:]]
    return subprocess.run(cmd, capture_output=True, text=True, env=full)


def messages(r: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in r.stderr.splitlines() if not ln.startswith("import time:")]


def full_path(r: subprocess.CompletedProcess[str]) -> bool:
    return "fixpack.commands.install.apply" in r.stderr  # -X importtime: only the full apply imports it


SERVE = ["vllm", "serve", *RECIPE.argv]


def without(*options: str) -> list[str]:
    words, out, i = SERVE, [], 0
    while i < len(words):
        if words[i] in options:
            i += 2 if i + 1 < len(words) and not words[i + 1].startswith("-") else 1
            continue
        out.append(words[i])
        i += 1
    return out


def refused(r, site, before, vllm, rule: str, recipe: str = SLUG) -> None:
    """Exit 1, one line quoting the rule, nothing written, the command never run."""
    lines = messages(r)
    assert r.returncode == 1, r.stderr
    assert lines == [
        f'fixpack: error: recipe {recipe}, rule {rule}: "{RULES[rule]}"; nothing was applied, nothing launched'
    ], lines
    assert site.snapshot() == before
    assert vllm.record() is None


def test_the_recipes_own_launch_is_applied_and_run_with_exactly_its_arguments(book, site, vllm):
    r = start(book, site, vllm, "--recipe", SLUG, "--exec", *SERVE)
    assert r.returncode == 0, r.stderr
    started = vllm.record()
    assert started["argv"] == ["serve", *RECIPE.argv]
    assert {k: started["env"].get(k) for k, _ in RECIPE.env} == RECIPE.env_dict()
    assert "4 applied" in r.stdout and "fixpack apply: profile v0.26.0" in r.stdout
    assert not [ln for ln in messages(r) if "warning" in ln or "differs" in ln]
    status = json.loads(start(book, site, vllm, "--recipe", SLUG, "--json").stdout)
    assert status["ok"] and {f["action"] for f in status["fixes"]} == {"already-applied"}


def test_lazy_mode_is_refused(book, site, vllm):
    before = site.snapshot()
    r = start(book, site, vllm, "--recipe", SLUG, "--exec", *SERVE, env={"PT_HPU_LAZY_MODE": "1"})
    refused(r, site, before, vllm, "no-lazy-mode")


def test_prefix_caching_without_gdn_prefix_cache_is_refused(book, site, vllm):
    before = site.snapshot()
    r = start(book, site, vllm, "--recipe", NO_GDN, "--exec", *SERVE)
    refused(r, site, before, vllm, "prefix-caching-needs-gdn-prefix-cache", NO_GDN)
    allowed = start(book, site, vllm, "--recipe", NO_GDN, "--exec", *without("--enable-prefix-caching"))
    assert allowed.returncode == 0, allowed.stderr
    assert vllm.record()["argv"] == without("--enable-prefix-caching")[1:]
    assert (
        f"fixpack: the command differs from recipe {NO_GDN}'s serve arguments: missing --enable-prefix-caching"
        in messages(allowed)
    )


@pytest.mark.parametrize("value", ["0", "false"])
def test_compact_gdn_off_with_prefix_caching_is_refused(book, site, vllm, value):
    before = site.snapshot()
    r = start(book, site, vllm, "--recipe", SLUG, "--exec", *SERVE, env={"VLLM_COMPACT_GDN": value})
    refused(r, site, before, vllm, "gdn-prefix-cache-needs-compact-gdn")


def test_compact_gdn_off_without_prefix_caching_runs(book, site, vllm):
    command = without("--enable-prefix-caching")
    r = start(book, site, vllm, "--recipe", SLUG, "--exec", *command, env={"VLLM_COMPACT_GDN": "0"})
    assert r.returncode == 0, r.stderr
    assert vllm.record()["argv"] == command[1:] and vllm.record()["env"]["VLLM_COMPACT_GDN"] == "0"


def test_the_gather_ratio_without_expert_parallelism_warns_and_runs(book, site, vllm):
    command = without("--enable-expert-parallel")
    r = start(book, site, vllm, "--recipe", SLUG, "--exec", *command)
    assert r.returncode == 0, r.stderr
    assert vllm.record()["argv"] == command[1:]
    rule = "moe-gather-ratio-needs-expert-parallel"
    assert f'fixpack: warning: recipe {SLUG}, rule {rule}: "{RULES[rule]}"' in messages(r)
    assert f"fixpack: the command differs from recipe {SLUG}'s serve arguments: missing --enable-expert-parallel" in (
        messages(r)
    )
    unset = start(book, site, vllm, "--recipe", SLUG, "--exec", *command, env={}, page_env=False)
    assert unset.returncode == 0 and not [ln for ln in messages(unset) if "warning" in ln]


def test_the_note_lists_what_differs(book, site, vllm):
    command = [*without("--max-model-len", "--language-model-only"), "--max-model-len", "131072", "--seed", "1"]
    r = start(book, site, vllm, "--recipe", SLUG, "--exec", *command)
    assert r.returncode == 0, r.stderr
    assert (
        f"fixpack: the command differs from recipe {SLUG}'s serve arguments: missing --language-model-only; "
        "extra --seed; changed --max-model-len 131072 (recipe: 262144)"
    ) in messages(r)


def test_a_command_that_is_not_vllm_serve_gets_the_rules_on_the_environment_only(book, site, vllm, tmp_path):
    out = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(out)!r}, 'w').write('ran')", "--enable-prefix-caching"]
    before = site.snapshot()
    lazy = start(book, site, vllm, "--recipe", NO_GDN, "--exec", *command, env={"PT_HPU_LAZY_MODE": "1"})
    refused(lazy, site, before, vllm, "no-lazy-mode", NO_GDN)
    assert not out.exists()
    r = start(book, site, vllm, "--recipe", NO_GDN, "--exec", *command)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "ran"
    assert f"fixpack: {sys.executable} is not vllm serve: only recipe {NO_GDN}'s rules on the environment" in r.stderr


def test_launch_runs_the_recipes_own_command_in_its_environment_over_the_callers(book, site, vllm):
    caller = {"PT_HPU_LAZY_MODE": "1", "VLLM_COMPACT_GDN": "0", "CALLER_ONLY": "kept"}  # the recipe's values win
    r = start(book, site, vllm, "--recipe", SLUG, "--launch", env=caller, page_env=False)
    assert r.returncode == 0, r.stderr
    started = vllm.record()
    assert started["argv"] == ["serve", *RECIPE.argv]
    assert {k: started["env"][k] for k, _ in RECIPE.env} == RECIPE.env_dict()
    assert started["env"]["CALLER_ONLY"] == "kept"
    assert "4 applied" in r.stdout and not [ln for ln in messages(r) if "warning" in ln or "differs" in ln]


def test_launch_checks_the_rules_on_the_recipes_own_launch(book, site, vllm):
    before = site.snapshot()
    r = start(book, site, vllm, "--recipe", NO_GDN, "--launch")
    refused(r, site, before, vllm, "prefix-caching-needs-gdn-prefix-cache", NO_GDN)


def test_without_a_command_the_rules_on_the_environment_and_plan_are_checked(book, site, vllm):
    before = site.snapshot()
    lazy = start(book, site, vllm, "--recipe", SLUG, env={"PT_HPU_LAZY_MODE": "1"})
    assert lazy.returncode == 1 and messages(lazy) == [
        f'fixpack: error: recipe {SLUG}, rule no-lazy-mode: "{RULES["no-lazy-mode"]}"; nothing was applied'
    ]
    assert site.snapshot() == before
    r = start(book, site, vllm, "--recipe", NO_GDN)  # the rules on the command line are not asked
    assert r.returncode == 0 and "3 applied" in r.stdout, r.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (("--recipe", SLUG, "--profile", "v0.26.0"), "not with --profile or fix names"),
        (("--recipe", SLUG, "one"), "not with --profile or fix names"),
        (("--profile", "v0.26.0", "--launch"), "give --recipe SLUG"),
        (("--recipe", SLUG, "--launch", "--exec", "vllm", "serve", "m"), "not with --exec"),
        (("--recipe", SLUG, "--launch", "--dry-run"), "not with --dry-run"),
        ((), "give --profile NAME (and opt-in FIXes) or --recipe SLUG"),
        (("--recipe", "qwen3.5"), "unknown recipe 'qwen3.5'"),
    ],
)
def test_bad_combinations_are_usage_errors(book, site, vllm, args, words):
    before = site.snapshot()
    r = start(book, site, vllm, *args)
    assert r.returncode == 2 and len(messages(r)) == 1 and words in r.stderr, r.stderr
    assert site.snapshot() == before and vllm.record() is None


def test_a_recipe_start_never_takes_the_warm_path(book, site, vllm):
    assert start(book, site, vllm, "--profile", "v0.26.0", "gdn-prefix-cache").returncode == 0
    warm = start(book, site, vllm, "--profile", "v0.26.0", "gdn-prefix-cache")
    assert warm.returncode == 0 and not full_path(warm)  # the stamp answers a --profile line
    lazy = start(book, site, vllm, "--recipe", SLUG, "--exec", *SERVE, env={"PT_HPU_LAZY_MODE": "1"})
    assert lazy.returncode == 1 and full_path(lazy) and vllm.record() is None
    r = start(book, site, vllm, "--recipe", SLUG, "--exec", *SERVE)
    assert r.returncode == 0 and full_path(r) and "4 already applied" in r.stdout
    assert "warm" not in json.loads((site.path / ".fixpack" / "manifest.json").read_text())  # no stamp written
    again = start(book, site, vllm, "--recipe", SLUG, "--exec", *SERVE, env={"PT_HPU_LAZY_MODE": "1"})
    assert again.returncode == 1 and full_path(again)


def _status(book, site) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIXPACK_")}
    env.update(FIXPACK_COOKBOOK=str(book.root), PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "fixpack", "status", "--json", "--site", str(site.path)]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout)


def test_status_shows_the_recipe_until_a_profile_apply_or_a_revert(book, site, vllm, cli):
    assert _status(book, site)["recipe"] is None
    assert start(book, site, vllm, "--recipe", SLUG).returncode == 0
    assert _status(book, site)["recipe"] == SLUG
    manifest = json.loads((site.path / ".fixpack" / "manifest.json").read_text())
    index = json.loads((site.path / "fixpack_runtime_check" / "index.json").read_text())
    env_only = [r for r in RECIPE.rules if r["id"] == "no-lazy-mode"]  # the others test the command line
    assert manifest["recipe"] == index["recipe"] == SLUG and manifest["rules"] == index["rules"] == env_only
    human = cli("status", "--site", str(site.path))
    assert f"profile v0.26.0 (recipe {SLUG}):" in human.stdout
    r = start(book, site, vllm, "--profile", "v0.26.0", "gdn-prefix-cache")
    assert r.returncode == 0 and "4 already applied" in r.stdout
    assert _status(book, site)["recipe"] is None
    index = json.loads((site.path / "fixpack_runtime_check" / "index.json").read_text())
    assert "rules" not in index and "recipe" not in json.loads((site.path / ".fixpack" / "manifest.json").read_text())
    assert start(book, site, vllm, "--recipe", SLUG).returncode == 0
    assert cli("revert", "two", "--site", str(site.path)).exit_code == 0  # no longer the recipe's set
    assert _status(book, site)["recipe"] is None


# --- the runtime check: the recipe's rules on the environment, in every vLLM process -------------


def test_the_runtime_check_refuses_lazy_mode_in_a_process_started_by_hand(book, site, vllm):
    assert start(book, site, vllm, "--recipe", SLUG).returncode == 0
    line = f'fixpack: recipe {SLUG}, rule no-lazy-mode: "{RULES["no-lazy-mode"]}"'
    eager = py(LOAD, site.path, PT_HPU_LAZY_MODE="0")
    assert eager.returncode == 0 and "INFO vllm.fixpack fixpack: profile v0.26.0" in eager.stdout, eager.stderr
    lazy = py(LOAD, site.path, PT_HPU_LAZY_MODE="1")
    assert lazy.returncode == 1 and f"RuntimeError: {line}; FIXPACK_RUNTIME_CHECK=warn only warns" in lazy.stderr
    warned = py(LOAD, site.path, PT_HPU_LAZY_MODE="1", FIXPACK_RUNTIME_CHECK="warn")
    assert warned.returncode == 0, warned.stderr
    assert f"WARNING vllm.fixpack {line} (a refusal; FIXPACK_RUNTIME_CHECK=warn: going on)" in warned.stdout
    off = py(LOAD, site.path, PT_HPU_LAZY_MODE="1", FIXPACK_RUNTIME_CHECK="off")
    assert off.returncode == 0 and "vllm.fixpack" not in off.stdout
    assert start(book, site, vllm, "--profile", "v0.26.0", "gdn-prefix-cache").returncode == 0
    assert py(LOAD, site.path, PT_HPU_LAZY_MODE="1").returncode == 0  # no recipe recorded: no rules


def test_the_runtime_check_applies_the_rules_in_an_overlay_and_revert_removes_it(book, site, vllm, tmp_path):
    overlay = tmp_path / "overlay"
    before = site.snapshot()
    r = start(book, site, vllm, "--recipe", SLUG, "--overlay", str(overlay), "--exec", *SERVE)
    assert r.returncode == 0, r.stderr
    assert vllm.record()["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(overlay)
    assert site.snapshot() == before  # nothing written under the site
    assert (overlay / "fixpack_runtime_check" / "rules.py").is_file()
    assert py(LOAD, overlay, site.path, PT_HPU_LAZY_MODE="0").returncode == 0
    lazy = py(LOAD, overlay, site.path, PT_HPU_LAZY_MODE="1")
    assert lazy.returncode == 1 and f'rule no-lazy-mode: "{RULES["no-lazy-mode"]}"' in lazy.stderr
    again = start(book, site, vllm, "--recipe", SLUG, "--overlay", str(overlay))
    assert again.returncode == 0 and "4 already applied" in again.stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIXPACK_")}
    env.update(FIXPACK_COOKBOOK=str(book.root), PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "fixpack", "revert", "--site", str(site.path), "--overlay", str(overlay)]
    assert subprocess.run(cmd, capture_output=True, text=True, env=env).returncode == 0
    assert not overlay.exists()


def test_revert_removes_the_rules_with_the_check(book, site, vllm, cli):
    assert start(book, site, vllm, "--recipe", SLUG).returncode == 0
    assert cli("revert", "--site", str(site.path)).exit_code == 0
    assert (
        not list(site.path.glob("fixpack_runtime_check*")) and not (site.path / ".fixpack" / "manifest.json").exists()
    )
    assert py(LOAD, site.path, PT_HPU_LAZY_MODE="1").returncode == 0
