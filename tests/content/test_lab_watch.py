"""``serve --dev``'s watcher (content/lab_watch.py) with real file changes: a save reloads that lab
only, a lab that stops linting becomes a BrokenLab carrying its problems and comes back when fixed;
``lab.changed`` reaches every open stream of every event (app.publish_lab_changed)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from labserver.app import publish_lab_changed
from labserver.content import Lab, LabCatalog
from labserver.content.lab_watch import labs_touched, relevant, watch_labs
from labserver.content.loader import Problem
from labserver.content.scaffold import new_lab
from labserver.live import Kind, LiveHub


def test_saves_reload_the_lab_that_changed_and_a_broken_lab_keeps_its_problems(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    new_lab(one)
    new_lab(two)
    catalog = LabCatalog(tmp_path, folders=[one, two])
    assert sorted(catalog.labs) == ["one", "two"]
    calls: list[tuple[str, list[Problem]]] = []

    async def run() -> None:
        stop = asyncio.Event()
        changed = asyncio.Event()

        def on_change(lab_id: str, problems: list[Problem]) -> None:
            calls.append((lab_id, problems))
            changed.set()

        task = asyncio.ensure_future(watch_labs(catalog, [one, two], on_change, stop=stop, debounce_ms=50))
        await asyncio.sleep(0.5)  # the watcher is up

        async def save(path: Path, text: str) -> None:
            changed.clear()
            path.write_text(text)
            await asyncio.wait_for(changed.wait(), 20)

        await save(one / "steps" / "01-swiglu.md", "# Rewritten\n")
        lab = catalog.get("one")
        assert lab is not None and lab.steps[0].instructions("en") == "# Rewritten\n"
        assert [c[0] for c in calls] == ["one"]

        spec = (one / "lab.yaml").read_text()
        await save(one / "lab.yaml", spec.replace("steps:", "stepz:"))
        assert "one" not in catalog.labs and "two" in catalog.labs
        broken = catalog.broken["one"]
        assert any("stepz" in p.field and "unknown field" in p.message for p in broken.problems)
        assert any(p.level == "error" for p in calls[-1][1])

        await save(one / "steps" / "01-swiglu.md", "# Lint error next\n\n```bash runn\nls\n```\n")
        await save(one / "lab.yaml", spec)  # back, but its text now has a lint error (a bad marker)
        assert "one" in catalog.broken and "runn" in str(catalog.broken["one"].problems)
        await save(one / "steps" / "01-swiglu.md", "# Fixed\n")
        assert isinstance(catalog.get("one"), Lab) and "one" not in catalog.broken
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(run())


def test_caches_and_swap_files_are_no_change(tmp_path: Path) -> None:
    assert relevant(None, str(tmp_path / "checks" / "01_x.py"))  # type: ignore[arg-type]
    assert not relevant(None, str(tmp_path / "checks" / "__pycache__" / "01_x.cpython-311.pyc"))  # type: ignore[arg-type]
    assert not relevant(None, str(tmp_path / "steps" / ".01-x.md.swp"))  # type: ignore[arg-type]
    assert labs_touched([tmp_path / "a", tmp_path / "b"], [str(tmp_path / "b" / "lab.yaml")]) == [
        tmp_path / "b"
    ]


class _Ctx:
    def __init__(self, catalog: LabCatalog) -> None:
        self.live = LiveHub()
        self.catalog = catalog


def test_lab_changed_reaches_every_stream_of_every_event(tmp_path: Path) -> None:
    new_lab(tmp_path / "my-lab")
    ctx = _Ctx(LabCatalog(tmp_path, folders=[tmp_path / "my-lab"]))

    async def run() -> None:
        subs = [
            ctx.live.subscribe(1, 10),
            ctx.live.subscribe(1, 11),
            ctx.live.subscribe(2, 20),
            ctx.live.subscribe(2),
        ]
        publish_lab_changed(ctx, "my-lab", [Problem("warning", "my-lab/lab.yaml", "title", "no zh")])  # type: ignore[arg-type]
        for sub in subs:
            ev = await asyncio.wait_for(sub.get(), 5)
            assert ev.kind == Kind.lab_changed
            assert ev.data == {"lab": "my-lab", "broken": False, "problems": []}

    asyncio.run(run())
