"""The decision log a person reviews: JSON for tools, Markdown (English and Chinese) for people,
and the staged table of the kept skills."""

from __future__ import annotations

import json
from pathlib import Path

from labkit.deploy import source_text

T = {
    "en": {
        "title": "Decision log",
        "cols": "| # | skill | verification | ms/token before → after | speed-up | decision | why |",
        "accept": "accept",
        "reject": "reject (rolled back)",
        "what": "What it changes",
        "proposed": "Proposed by",
        "profile": "Profile before",
        "profile_row": "launch {launch_ms:.3f} ms, compute {compute_ms:.3f} ms, memory {memory_ms:.3f} ms per token ({bound}-bound)",
        "verification": "Verification",
        "measured": "Measured",
        "not_measured": "not measured (verification failed)",
        "decision": "Decision",
        "stage": "| Stage | Decode ms/token | Step gain | Cumulative |",
        "baseline": "Baseline (eager)",
        "rejected": "Rejected and rolled back",
        "why_verification": "rolled back: {metric} = {value:.4g} is over the tolerance {tol:g}",
        "why_no_gain": "rolled back: {value:.3f}x is below the {tol:g}x a skill must gain",
        "why_accepted": "verified and {value:.2f}x faster",
    },
    "zh": {
        "title": "决策日志",
        "cols": "| # | 技能 | 验证 | 每 token 毫秒（前 → 后） | 加速 | 决定 | 原因 |",
        "accept": "保留",
        "reject": "拒绝（已回滚）",
        "what": "改动内容",
        "proposed": "提议者",
        "profile": "提议前的性能剖析",
        "profile_row": "每 token：算子下发 {launch_ms:.3f} ms，计算 {compute_ms:.3f} ms，访存 {memory_ms:.3f} ms（{bound_zh}受限）",
        "verification": "验证",
        "measured": "测量",
        "not_measured": "未测量（验证未通过）",
        "decision": "决定",
        "stage": "| 阶段 | 解码 ms/token | 本步加速 | 累计加速 |",
        "baseline": "基线（eager）",
        "rejected": "被拒绝并回滚",
        "why_verification": "已回滚：{metric} = {value:.4g} 超过容差 {tol:g}",
        "why_no_gain": "已回滚：加速 {value:.3f}x 低于技能必须达到的 {tol:g}x",
        "why_accepted": "验证通过，快 {value:.2f}x",
    },
}


def why_text(d, lang="en"):
    w = d["why"]
    return T[lang][f"why_{w['code']}"].format(**w)


def _proposal(d, lang="en"):
    """The proposer's reason in ``lang`` (``Proposal.reasons``; a plain string is shown as it is)."""
    p = d.get("proposal", "")
    if isinstance(p, dict):
        return str(p.get(lang) or p.get("en", ""))
    return str(p)


def _check_text(v, lang="en"):
    limit = "limit" if lang == "en" else "上限"
    return f"{v['metric']} = {v['value']:.4g} ({limit} {v['tol']:g}) {'✓' if v['passed'] else '✗'}"


def render_log(history, lang="en"):
    t = T[lang]
    lines = [f"## {t['title']}", "", t["cols"], "|---|---|---|---|---|---|---|"]
    for i, d in enumerate(history, 1):
        after = f"{d['after']['ms_per_token']:.4f}" if d["after"] else "–"
        speed = f"{d['speedup']:.2f}x" if d["speedup"] else "–"
        lines.append(
            f"| {i} | `{d['skill']}` | {_check_text(d['verify'], lang)} | {d['before']['ms_per_token']:.4f} → {after} "
            f"| {speed} | **{t[d['decision']]}** | {why_text(d, lang)} |"
        )
    for i, d in enumerate(history, 1):
        lines += ["", f"### {i}. `{d['skill']}`: {t[d['decision']]}", ""]
        lines.append(f"- {t['what']}: {d['what'][lang]}")
        if "proposed_by" in d:
            lines.append(f"- {t['proposed']}: {source_text(d['proposed_by'], lang)}: {_proposal(d, lang)}")
        if "profile" in d:
            bound_zh = {"launch": "下发", "compute": "计算", "memory": "访存"}.get(
                d["profile"]["bound"], d["profile"]["bound"]
            )
            lines.append(f"- {t['profile']}: {t['profile_row'].format(bound_zh=bound_zh, **d['profile'])}")
        lines.append(f"- {t['verification']}: {_check_text(d['verify'], lang)}")
        if d["after"]:
            b, a = d["before"], d["after"]
            lines.append(
                f"- {t['measured']}: {b['ms_per_token']:.4f} → {a['ms_per_token']:.4f} ms/token ({d['speedup']:.2f}x), "
                f"{b['launches_per_token']:.1f} → {a['launches_per_token']:.1f} launches/token, "
                f"{b['weight_bytes'] / 2**20:.2f} → {a['weight_bytes'] / 2**20:.2f} MiB"
            )
        else:
            lines.append(f"- {t['measured']}: {t['not_measured']}")
        lines.append(f"- {t['decision']}: **{t[d['decision']]}**: {why_text(d, lang)}")
    return "\n".join(lines) + "\n"


def stages(history):
    """``[(label, ms_per_token, step gain or None, cumulative)]``: the baseline (label
    ``"baseline"``, its ms per token before the first decision), then one row per kept skill,
    in order: step gain over the previous row, cumulative over the baseline."""
    # TODO (step 7)
    raise NotImplementedError("TODO (step 7): stages() in agent/log.py")


def render_table(history, lang="en"):
    t = T[lang]
    lines = [t["stage"], "|---|---|---|---|"]
    for label, ms, gain, cum in stages(history):
        name = t["baseline"] if label == "baseline" else f"+ `{label}`"
        lines.append(f"| {name} | {ms:.4f} | {'–' if gain is None else f'{gain:.2f}x'} | {cum:.2f}x |")
    rejected = [d for d in history if d["decision"] == "reject"]
    if rejected:
        lines += [
            "",
            f"{t['rejected']}: " + "; ".join(f"`{d['skill']}` ({why_text(d, lang)})" for d in rejected),
        ]
    return "\n".join(lines) + "\n"


def write_log(history, out="out"):
    """``out/decision_log.json``, ``out/decision_log.md`` / ``.zh.md`` and ``out/staged_table.md`` / ``.zh.md``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "decision_log.json").write_text(
        json.dumps(history, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    for lang, suffix in (("en", ""), ("zh", ".zh")):
        (out / f"decision_log{suffix}.md").write_text(render_log(history, lang), encoding="utf-8")
        (out / f"staged_table{suffix}.md").write_text(render_table(history, lang), encoding="utf-8")
    return out
