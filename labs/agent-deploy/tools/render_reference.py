"""Render the reference run's decision log into step 7 (EN and ZH) and draw its staged chart.

    python labs/agent-deploy/tools/render_reference.py          # rewrite the files
    python labs/agent-deploy/tools/render_reference.py --check  # exit 1 when they are stale

Runs the solution's ``deploy.py`` (starter + solution in a temporary folder, emulated, so the
figures are the same on any machine), then replaces everything after the chart line of
``steps/07-staged-table{,.zh}.md`` with the staged table and the decision log, and writes
``steps/img/staged{,.zh}.svg``. Nothing is typed in: every figure comes from that run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

LAB = Path(__file__).resolve().parents[1]
CHART = {
    "en": "![Staged decode time per token](img/staged.svg)",
    "zh": "![分阶段的每 token 解码时间](img/staged.zh.svg)",
}
STEP = {"en": LAB / "steps/07-staged-table.md", "zh": LAB / "steps/07-staged-table.zh.md"}
SVG = {"en": LAB / "steps/img/staged.svg", "zh": LAB / "steps/img/staged.zh.svg"}
LABELS = {
    "en": {
        "title": "Emulated decode ms/token, Ascend 950PR (toy scale)",
        "baseline": "baseline (eager)",
        "bar": "{ms:.4f} ms, {cum:.2f}x cumulative",
    },
    "zh": {
        "title": "仿真解码 ms/token，昇腾 950PR（玩具规模）",
        "baseline": "基线（eager）",
        "bar": "{ms:.4f} ms，累计 {cum:.2f}x",
    },
}


def run_reference() -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="agent-deploy-ref-"))
    shutil.copytree(LAB / "starter", tmp, dirs_exist_ok=True)
    shutil.copytree(LAB / "solution", tmp, dirs_exist_ok=True)
    subprocess.run([sys.executable, "deploy.py", "--out", "out"], cwd=tmp, check=True, capture_output=True)
    return tmp


def svg(history: list[dict], lang: str) -> str:
    sys.dont_write_bytecode = True  # no __pycache__ in the lab folder
    sys.path.insert(0, str(LAB / "solution"))
    from agent.log import stages  # the solution's own table rows

    rows = stages(history)
    t = LABELS[lang]
    w, bar_h, gap, left = 720, 26, 10, 170
    top = 40
    h = top + len(rows) * (bar_h + gap) + 10
    peak = max(ms for _, ms, _, _ in rows)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="13">',
        f'<rect width="{w}" height="{h}" fill="#ffffff"/>',
        f'<text x="10" y="22" font-size="15" font-weight="bold">{t["title"]}</text>',
    ]
    for i, (label, ms, _gain, cum) in enumerate(rows):
        y = top + i * (bar_h + gap)
        bw = max(2.0, (w - left - 230) * ms / peak)
        name = t["baseline"] if label == "baseline" else f"+ {label}"
        out.append(f'<text x="10" y="{y + bar_h * 0.68:.1f}">{name}</text>')
        out.append(
            f'<rect x="{left}" y="{y}" width="{bw:.1f}" height="{bar_h}" fill="#c7000b" opacity="0.8"/>'
        )
        out.append(
            f'<text x="{left + bw + 6:.1f}" y="{y + bar_h * 0.68:.1f}">{t["bar"].format(ms=ms, cum=cum)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def rendered(out: Path) -> dict[Path, str]:
    history = json.loads((out / "decision_log.json").read_text(encoding="utf-8"))
    files: dict[Path, str] = {}
    for lang, suffix in (("en", ""), ("zh", ".zh")):
        text = STEP[lang].read_text(encoding="utf-8")
        head = text[: text.index(CHART[lang]) + len(CHART[lang])]
        table = (out / f"staged_table{suffix}.md").read_text(encoding="utf-8")
        log = (out / f"decision_log{suffix}.md").read_text(encoding="utf-8")
        log = log.replace("## ", "### ", 1).replace("\n### ", "\n#### ")
        files[STEP[lang]] = f"{head}\n\n{table}\n{log}"
        files[SVG[lang]] = svg(history, lang)
    return files


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed files differ")
    args = ap.parse_args()
    tmp = run_reference()
    try:
        files = rendered(tmp / "out")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    stale = [p for p, s in files.items() if not p.is_file() or p.read_text(encoding="utf-8") != s]
    if args.check:
        for p in stale:
            print(f"stale: {p.relative_to(LAB)}")
        return 1 if stale else 0
    for p, s in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(s, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
