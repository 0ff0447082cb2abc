"""``labserver import killercoda DIR``: a Killercoda scenario folder written as a lab folder.

A scenario is ``index.json`` (title, description, ``details.intro``, ``details.steps``,
``details.finish``, ``details.assets``, ``backend.imageid``), one Markdown file per page, and shell
scripts: ``verify.sh`` (the step is done when it exits 0), ``background.sh`` (set-up, hidden) and
``foreground.sh`` (set-up typed into the terminal). The mapping, one row per piece (the same table
is in docs/writing-labs.md, "Killercoda scenarios"):

========================  =================================================================
Killercoda                labserver
========================  =================================================================
title, description        ``title``, ``summary`` (English; marked for translation)
steps[i].title, .text     step ``i+1``: ``title``, ``steps/NN-<slug>.md`` (no ``.zh.md``: lint
                          lists it as missing)
intro.text, finish.text   the top of the first step, the end of the last step
steps[i].verify           ``checks/NN_<slug>.verify.sh`` run by ``checks/NN_<slug>.py``
                          (``checks/verify_sh.py``): exit 0 passes, its output is the message;
                          in the attendee's sandbox, like any check
no verify                 a check that passes for anyone (reported: write a verify.sh)
background.sh,            copied to ``starter/.setup/``; a "Run in terminal" block at the top of
foreground.sh             the step runs them, and so does the step's ``solve`` in the self-test
assets (host01)           ``starter/``: targets ``~`` and ``/root`` are the lab folder
```{{exec}}``, {{copy}}   a ``bash run`` block; a plain block
========================  =================================================================

Refused with :class:`NotMappable` (its ``reason`` a short label): Kubernetes playgrounds
(``backend.imageid`` of a cluster), several hosts (assets for a second host, a ``2nodes`` image,
scripts that ``ssh`` to another node), and an ``index.json`` that is not a scenario. What maps only
in part (absolute paths outside the home folder, traffic ports, images) is returned as warnings.

Nothing here runs a scenario's scripts: they are copied as files, and run later only where an
attendee's commands run (the terminal, the check sandbox)."""

from __future__ import annotations

import glob
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from labserver.content.schema import ID_PATTERN

SETUP_DIR = ".setup"
KUBERNETES_IMAGES = re.compile(r"kube|k3s|k8s|kind|openshift|minikube|cluster", re.I)
MULTI_HOST_IMAGES = re.compile(r"\d+\s*-?nodes?\b|multi", re.I)
OTHER_NODE = re.compile(r"\bssh\s+(?:\S+@)?(?:node|host|controlplane)\d*\b")
ABSOLUTE_PATH = re.compile(r"(?<![\w.~$/-])(/(?:etc|var|usr|opt|tmp|srv|mnt|root)(?:/[\w.@+-]+)+)")
TRAFFIC = re.compile(r"\{\{TRAFFIC_[A-Z0-9_]+\}\}")
FENCE_LINE = re.compile(r"^([ \t]*)```(.*)$")  # a fence line: its indent, then the info or a {{marker}}
EXEC_MARK = re.compile(r"\{\{\s*exec(?:\s+interrupt)?\s*\}\}[ \t]*")
INLINE_EXEC_LINE = re.compile(r"^[ \t]*`([^`\n]+)`\{\{\s*exec(?:\s+interrupt)?\s*\}\}[ \t]*$", re.M)
INLINE_MARK = re.compile(r"(`[^`\n]+`)\{\{[^}]*\}\}")

#: the lab's one helper for its verify.sh checks (written once per imported lab, so the lab needs
#: nothing of labkit beyond what every image has: run_script, Failure, msg)
VERIFY_HELPER = '''\
"""A shell script as a step's check (a Killercoda verify.sh; written by labserver import killercoda).

Exit status 0 passes, anything else fails (a status, a signal, a timeout), and the script's last
lines are the message. The script is the lab's, but what it looks at is the attendee's: it runs
through labkit.check.run_script, in a child process in the lab folder with the result channel
closed, the LAB_* secrets removed, time and memory limits, and HOME set to the lab folder (a
scenario's ~ is where the attendee works). So a script that sources an attendee's file, or an
attendee's program it calls, can print or exit as it likes: it never writes the verdict."""

import os
from pathlib import Path

from labkit.check import Failure, msg, run_script

MAX_LINES = 20  # of the script's output, shown in the message


def shell_check(script, timeout=30):
    """A check function for labkit.check.main that runs `bash script` in the lab folder."""
    path = Path(script)

    def check():
        out = run_script(["bash", str(path)], timeout=timeout, env={"HOME": os.getcwd()})
        lines = (out.stdout + "\\n" + out.stderr).strip().splitlines()
        said = "\\n".join(line.rstrip() for line in lines[-MAX_LINES:])
        tail = f"\\n{said}" if said else ""
        if out.timed_out:
            raise Failure(
                msg(f"{path.name} did not finish in {timeout:g} s (is it waiting for something not there yet?)",
                    f"{path.name} 没有在 {timeout:g} 秒内结束（它是否在等一个还不存在的东西？）") + tail
            )
        if out.exit_code == 0:
            return msg("Done: this step's check passed.", "完成：这一步的检查通过了。") + tail
        raise Failure(
            msg(f"Not yet: this step's check ({path.name}) exited with status {out.exit_code}.",
                f"还没有完成：这一步的检查（{path.name}）以状态 {out.exit_code} 退出。") + tail
        )

    return check
'''

CHECKER = '''\
"""Step {n}'s verify.sh from the Killercoda scenario (labserver import killercoda): exit 0 passes,
its output is the message. It runs in a child process of this check, in the attendee's sandbox."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # this folder (verify_sh.py), not the attendee's

from labkit.check import main  # noqa: E402
from verify_sh import shell_check  # noqa: E402

main(shell_check(HERE / "{script}"))
'''

NO_VERIFY_CHECKER = '''\
"""Step {n} of the Killercoda scenario has no verify.sh: this check passes for anyone.
Write checks/{stem}.verify.sh and make this file run it (as the other steps do)."""

from labkit.check import main, msg


def check():
    return msg("Nothing to check in this step: read on.", "这一步没有需要检查的内容：继续往下读。")


main(check)
'''


class NotMappable(ValueError):
    """A scenario labserver cannot run; ``reason`` is a short label, the message says why."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Imported:
    lab: Path
    warnings: list[str] = field(default_factory=list)
    #: texts written in English only, for a translator (lint lists them too)
    to_translate: list[str] = field(default_factory=list)


def slug(text: str, fallback: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-")
    return words if re.fullmatch(ID_PATTERN, words or "") else fallback


def read_index(src: Path) -> dict[str, Any]:
    """``index.json`` as a mapping, or NotMappable when it is missing or not a scenario."""
    try:
        index = json.loads((src / "index.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotMappable(
            f"{src} has no index.json: not a Killercoda scenario folder", "not-a-scenario"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NotMappable(f"{src}/index.json is not valid JSON: {exc}", "not-a-scenario") from None
    if not isinstance(index, dict) or not isinstance(index.get("details", {}), dict):
        raise NotMappable(f"{src}/index.json is not a scenario (no details mapping)", "not-a-scenario")
    return index


def _scripts(src: Path, details: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    pages = [details.get("intro") or {}, *(details.get("steps") or []), details.get("finish") or {}]
    for page in pages:
        for key in ("verify", "background", "foreground"):
            name = page.get(key) if isinstance(page, dict) else None
            if (path := scenario_file(src, name)) is not None:
                out.append((str(name), path.read_text(encoding="utf-8", errors="replace")))
    return out


def refuse_unmappable(src: Path, index: dict[str, Any]) -> None:
    """Raise NotMappable for what labserver cannot run: a Kubernetes playground, several hosts."""
    image = str((index.get("backend") or {}).get("imageid", ""))
    if KUBERNETES_IMAGES.search(image):
        raise NotMappable(
            f"{src.name} runs on a Kubernetes playground (backend.imageid {image!r}): a lab environment "
            "is one container with no cluster, so kubectl has nothing to talk to. Rewrite the scenario "
            "for a single machine, or keep it on Killercoda.",
            "kubernetes",
        )
    details = index.get("details") or {}
    hosts = sorted((details.get("assets") or {}).keys())
    if MULTI_HOST_IMAGES.search(image) or [h for h in hosts if h != "host01"]:
        raise NotMappable(
            f"{src.name} uses several hosts (image {image!r}, assets for {', '.join(hosts) or 'host01'}): "
            "a lab environment is one machine per attendee.",
            "multi-host",
        )
    for name, text in _scripts(src, details):
        if node := OTHER_NODE.search(text):
            raise NotMappable(
                f"{src.name}/{name} reaches another host ({node.group(0)!r}): a lab environment is "
                "one machine per attendee.",
                "multi-host",
            )


def convert_markdown(text: str) -> str:
    """Killercoda's action markers to labserver Markdown: an ``{{exec}}`` block (or a command alone
    on its line) becomes a ``bash run`` block; ``{{copy}}`` and other markers are dropped."""
    lines = text.split("\n")
    opened: int | None = None  # the line of the fence that is open
    for n, line in enumerate(lines):
        fence = FENCE_LINE.match(line)
        if fence is None:
            continue
        if opened is None:
            opened = n
            continue
        if EXEC_MARK.fullmatch(fence.group(2)):
            indent = FENCE_LINE.match(lines[opened]).group(1)  # type: ignore[union-attr]
            lines[opened] = f"{indent}```bash run"
        lines[n] = fence.group(1) + "```"
        opened = None
    text = "\n".join(lines)
    text = INLINE_EXEC_LINE.sub(lambda m: f"```bash run\n{m.group(1)}\n```", text)
    return INLINE_MARK.sub(r"\1", text)


def scenario_file(src: Path, name: object) -> Path | None:
    """The file ``name`` (from index.json) names inside the scenario folder; None when it is not a
    string, not there, or not inside the folder (``../``, an absolute path, a link that leads out):
    a scenario from elsewhere never makes the import read the author's other files."""
    if not isinstance(name, str) or not name:
        return None
    path = src / name
    try:
        inside = path.resolve().is_relative_to(src.resolve())
    except (OSError, RuntimeError):  # a loop of links
        return None
    return path if inside and path.is_file() else None


def _read_page(src: Path, page: dict[str, Any], warnings: list[str]) -> str:
    name = page.get("text")
    if not name:
        return ""
    path = scenario_file(src, name)
    if path is None:
        warnings.append(f"{name}: the text file index.json names is not a file in the scenario folder")
        return ""
    return path.read_text(encoding="utf-8", errors="replace")


def _copy_assets(src: Path, details: dict[str, Any], starter: Path, warnings: list[str]) -> None:
    for item in (details.get("assets") or {}).get("host01", []):
        pattern, target = str(item.get("file", "")), str(item.get("target", "~"))
        rel = re.sub(r"^(~|/root)(/|$)", "", target.strip())
        if rel.startswith("/"):
            warnings.append(
                f"asset {pattern!r}: target {target} is outside the home folder; it is put in the lab "
                f"folder at {rel.lstrip('/')}/ (fix the paths that name it)"
            )
            rel = rel.lstrip("/")
        base = src / "assets"
        matches = [Path(p) for p in glob.glob(pattern, root_dir=base, recursive=True)]
        files = [m for m in matches if scenario_file(base, str(m)) is not None]
        if not files:
            warnings.append(f"asset {pattern!r} matches no file under assets/")
        for found in files:
            dest = starter / rel / found
            if not dest.resolve().is_relative_to(starter.resolve()):
                warnings.append(f"asset {found} would land outside the lab folder: left out")
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(base / found, dest)
            if "+x" in str(item.get("chmod", "")):
                dest.chmod(0o755)


def _setup(src: Path, page: dict[str, Any], label: str, starter: Path) -> str:
    """Copy a page's background.sh / foreground.sh to ``starter/.setup/`` and return the command
    that runs them ("" when there are none)."""
    commands = []
    for key in ("background", "foreground"):
        path = scenario_file(src, page.get(key))
        if path is not None:
            dest = starter / SETUP_DIR / f"{label}-{key}.sh"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
            commands.append(f"bash {SETUP_DIR}/{dest.name}")
    return " && ".join(commands)


def _scan(text: str, where: str, warnings: list[str]) -> None:
    for path in sorted(set(ABSOLUTE_PATH.findall(text))):
        warnings.append(
            f"{where}: {path} is outside the lab folder, where an attendee cannot write: use a path "
            "in the lab folder (the check runs there, with HOME set to it)"
        )
    if traffic := TRAFFIC.search(text):
        warnings.append(f"{where}: {traffic.group(0)} (a port shown in the browser) does not map")


def import_scenario(src: Path, dest: Path, lab_id: str | None = None) -> Imported:
    """Write the lab for the scenario in ``src`` into ``dest`` (a new folder; its name is the lab id
    unless ``lab_id`` is given). Raises NotMappable for what cannot run, FileExistsError when
    ``dest`` exists."""
    index = read_index(src)
    refuse_unmappable(src, index)
    details = index.get("details") or {}
    steps = [s for s in details.get("steps") or [] if isinstance(s, dict)]
    if not steps:
        raise NotMappable(f"{src.name}/index.json has no steps: nothing to make a lab of", "no-steps")
    lab_id = lab_id or dest.name
    if not re.fullmatch(ID_PATTERN, lab_id):
        raise NotMappable(f"{lab_id!r} cannot be a lab id: lowercase letters, digits and dashes", "bad-id")
    if dest.exists():
        raise FileExistsError(f"{dest} exists: import into a new folder")
    result = Imported(dest)
    starter = dest / "starter"
    for folder in ("steps", "checks", "solution", "starter"):
        (dest / folder).mkdir(parents=True, exist_ok=True)
    (dest / "checks" / "verify_sh.py").write_text(VERIFY_HELPER, encoding="utf-8")
    _copy_assets(src, details, starter, result.warnings)
    intro, finish = details.get("intro") or {}, details.get("finish") or {}
    intro_setup = _setup(src, intro, "intro", starter)
    for key in ("background", "foreground"):
        if scenario_file(src, finish.get(key)) is not None:
            result.warnings.append(
                f"finish.{key} ({finish[key]}) is left out: a lab has no page after its last step"
            )
    spec_steps: list[dict[str, Any]] = []
    for i, page in enumerate(steps, start=1):
        title = str(page.get("title") or f"Step {i}")
        step_id = slug(title, f"step-{i}")
        if step_id in {s["id"] for s in spec_steps}:
            step_id = f"{step_id}-{i}"
        stem = f"{i:02d}_{step_id.replace('-', '_')}"
        parts = []
        setup = " && ".join(
            c for c in (intro_setup if i == 1 else "", _setup(src, page, f"step{i}", starter)) if c
        )
        if setup:
            parts.append(f"Set up this step first:\n\n```bash run\n{setup}\n```\n")
        if i == 1 and (intro_text := _read_page(src, intro, result.warnings)):
            parts.append(intro_text)
        parts.append(_read_page(src, page, result.warnings))
        if i == len(steps) and (finish_text := _read_page(src, finish, result.warnings)):
            parts.append(finish_text)
        text = convert_markdown("\n\n".join(p.strip("\n") for p in parts if p) + "\n")
        md = f"steps/{i:02d}-{step_id}.md"
        (dest / md).write_text(text, encoding="utf-8")
        _scan(text, md, result.warnings)
        verify = scenario_file(src, page.get("verify"))
        if verify is not None:
            script = f"{stem}.verify.sh"
            body = verify.read_text(encoding="utf-8", errors="replace")
            (dest / "checks" / script).write_text(body, encoding="utf-8")
            (dest / "checks" / f"{stem}.py").write_text(CHECKER.format(n=i, script=script), encoding="utf-8")
            _scan(body, f"checks/{script}", result.warnings)
        else:
            (dest / "checks" / f"{stem}.py").write_text(
                NO_VERIFY_CHECKER.format(n=i, stem=stem), encoding="utf-8"
            )
            result.warnings.append(f"step {i} ({step_id}) has no verify.sh: its Check passes for anyone")
        entry: dict[str, Any] = {"id": step_id, "title": title, "file": md, "check": f"checks/{stem}.py"}
        if setup:
            entry["solve"] = setup
        spec_steps.append(entry)
        result.to_translate += [f"{md} (write {md[:-3]}.zh.md)", f"lab.yaml: steps[{i - 1}].title"]
    title = str(index.get("title") or lab_id)
    spec = {
        "id": lab_id,
        "title": title,
        "summary": str(index.get("description") or title),
        "duration_min": 15 * len(steps),
        "requires": {"device": "any", "cpus": 1, "memory_mb": 1024, "network": False},
        "steps": spec_steps,
    }
    result.to_translate[:0] = ["lab.yaml: title", "lab.yaml: summary"]
    header = (
        f"# Imported from the Killercoda scenario {src.name} by `labserver import killercoda`.\n"
        "# To translate (lint lists each): title, summary, every step title and steps/*.md as *.zh.md.\n"
        "# To self-test: write solution/ (what an attendee leaves in the lab folder) and 3 mutants a step.\n"
    )
    (dest / "lab.yaml").write_text(
        header + yaml.safe_dump(spec, sort_keys=False, allow_unicode=True), encoding="utf-8"
    )
    image = str((index.get("backend") or {}).get("imageid", ""))
    if image and not image.startswith("ubuntu"):
        result.warnings.append(f"backend.imageid {image!r}: the lab runs in labserver's image instead")
    return result
