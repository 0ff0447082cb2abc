"""``labserver lint``: every problem with the file and the field it is in."""

from __future__ import annotations

from pathlib import Path

from labserver.content.costs import COSTS_FILE, LINT_FACTOR
from labserver.content.loader import NOT_LABS, Lab, Problem, load_lab
from labserver.content.markdown import fence_problems
from labserver.content.mutants import MIN_MUTANTS_PER_STEP
from labserver.content.schema import I18n


def _i18n_missing(text: I18n | None) -> bool:
    return text is not None and not text.zh


def lint_lab(path: Path) -> list[Problem]:
    loaded = load_lab(path)
    if not isinstance(loaded, Lab):
        return list(loaded.problems)
    lab: Lab = loaded
    problems: list[Problem] = []
    rel = f"{path.name}/lab.yaml"
    spec = lab.spec
    for name in ("title", "summary"):
        if _i18n_missing(getattr(spec, name)):
            problems.append(Problem("warning", rel, name, "no Simplified Chinese text (zh)"))
    if spec.talk and _i18n_missing(spec.talk.title):
        problems.append(Problem("warning", rel, "talk.title", "no Simplified Chinese text (zh)"))
    if not lab.solution.is_dir():
        problems.append(
            Problem(
                "error", f"{path.name}/solution", "", "the solution/ folder is missing (selftest needs it)"
            )
        )
    for step in lab.steps:
        where = f"steps[{step.index}] (step {step.id!r})"
        if _i18n_missing(step.spec.title):
            problems.append(Problem("warning", rel, f"{where}.title", "no Simplified Chinese text (zh)"))
        for j, hint in enumerate(step.spec.hints):
            if _i18n_missing(hint):
                problems.append(
                    Problem("warning", rel, f"{where}.hints[{j}]", "no Simplified Chinese text (zh)")
                )
        cost = lab.costs.get(step.id)
        if cost is not None and step.spec.timeout_s < LINT_FACTOR * cost:
            problems.append(
                Problem(
                    "warning",
                    rel,
                    f"{where}.timeout_s",
                    f"{step.spec.timeout_s:g} s is under {LINT_FACTOR:g}x the {cost:g} CPU-s its check "
                    f"costs on the reference ({COSTS_FILE}): a busy machine times out correct work; "
                    f"make it at least {LINT_FACTOR * cost:g}",
                )
            )
        count = len(lab.mutants_of(step.id))
        if count < MIN_MUTANTS_PER_STEP:
            problems.append(
                Problem(
                    "warning",
                    f"{path.name}/mutants/{step.id}",
                    "",
                    f"{count} mutants (typical wrong solutions); a step needs at least "
                    f"{MIN_MUTANTS_PER_STEP} that its check fails (docs/writing-labs.md)",
                )
            )
        for mutant in lab.mutants_of(step.id):
            if _i18n_missing(mutant.spec.what):
                problems.append(
                    Problem("warning", f"{path.name}/mutants/{mutant.key}/mutant.yaml", "what", "no zh text")
                )
        md_files = [step.markdown] + ([step.markdown_zh] if step.markdown_zh else [])
        if step.markdown_zh is None:
            zh_name = step.markdown.with_name(step.markdown.stem + ".zh.md").relative_to(path)
            problems.append(Problem("warning", f"{path.name}/{zh_name}", "", "Chinese step text is missing"))
        for md in md_files:
            for line, message in fence_problems(md.read_text(encoding="utf-8")):
                problems.append(
                    Problem("error", f"{path.name}/{md.relative_to(path)}", f"line {line}", message)
                )
    return problems


def lint_all(root: Path) -> dict[str, list[Problem]]:
    results: dict[str, list[Problem]] = {}
    for child in sorted(root.iterdir()):
        if child.is_dir() and child.name not in NOT_LABS and (child / "lab.yaml").exists():
            results[child.name] = lint_lab(child)
    return results
