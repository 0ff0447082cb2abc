"""The agent-deploy lab's own library code, where the self-test does not already prove it.

- The OpenAI-compatible proposer drives the solution's workflow against a local stub server that
  speaks the chat-completions protocol (no network): a proposal that breaks accuracy is still
  verified and rolled back, an answer that names no skill falls back to the rules and the log
  says so, and every request is a well-formed chat completion.
- The reference decision log rendered into step 7 (and its chart) is what the solution's run
  writes today (tools/render_reference.py --check), so no figure on the lab page is typed in.
- The rules' reasons read in Chinese in the Chinese log, and the step-7 check hands the
  attendee's own decision log back as a table of its result, cell by cell as their code wrote it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.labs.run_checker import run_checker

LAB = REPO / "labs" / "agent-deploy"


class StubLLM:
    """A chat-completions endpoint on 127.0.0.1 with a scripted answer per call."""

    def __init__(self, answers: list[str]):
        self.answers = answers
        self.requests: list[dict] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                cands = json.loads(body["messages"][1]["content"])["candidates"]
                i = len(stub.requests) - 1
                content = (
                    stub.answers[i]
                    if i < len(stub.answers)
                    else json.dumps({"skill": sorted(cands)[0], "reason": "next"})
                )
                data = json.dumps(
                    {
                        "id": f"c{i}",
                        "object": "chat.completion",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StubLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def solved(tmp_path: Path):
    """The solved lab folder on sys.path (agent/, skills/, deploy.py), removed afterwards."""
    shutil.copytree(LAB / "starter", tmp_path, dirs_exist_ok=True)
    shutil.copytree(LAB / "solution", tmp_path, dirs_exist_ok=True)
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [
        m for m in sys.modules if m in ("agent", "skills", "deploy") or m.startswith(("agent.", "skills."))
    ]:
        del sys.modules[name]


def test_llm_proposals_are_verified_and_a_bad_answer_falls_back(solved: Path) -> None:
    import torch
    from agent.log import render_log
    from agent.runner import load_skills, run_workflow
    from labkit.deploy import DeployModel, OpenAIProposer
    from labkit.models import load_tiny_moe

    torch.set_num_threads(1)
    base, tok = load_tiny_moe()
    prompts = [
        tok.encode(p, bos=True) for p in ("the probe orbits mars every four days .", "stir the onions slowly")
    ]
    answers = [
        '{"skill": "quant_mxfp4_all", "reason": "4-bit everything saves the most memory"}',
        "I am not sure, maybe something with kernels?",
    ]
    with StubLLM(answers) as stub:
        proposer = OpenAIProposer(stub.url, "stub-model", api_key="k-test", timeout=10)
        final, history = run_workflow(DeployModel(base), load_skills(solved / "skills"), prompts, 6, proposer)
    assert [d["skill"] for d in history][:2] == ["quant_mxfp4_all", "fused_ops"]
    first, second = history[0], history[1]
    assert first["proposed_by"] == "llm:stub-model"
    said = "4-bit everything saves the most memory"
    assert first["proposal"] == {"en": said, "zh": said}  # as the model said it
    assert first["decision"] == "reject" and first["why"]["code"] == "verification"
    assert first["why"]["value"] > first["why"]["tol"] and first["after"] is None
    assert (
        second["proposed_by"].startswith("rules (llm failed:")
        and "names no candidate" in second["proposed_by"]
    )
    assert (
        second["decision"] == "accept" and second["before"]["ms_per_token"] == first["before"]["ms_per_token"]
    )
    assert sorted(d["skill"] for d in history) == sorted(load_skills(solved / "skills"))
    assert final.state()["formats"]["lm_head"] == [] and "quant_mxfp4_all" not in final.applied
    assert len(stub.requests) == len(history)
    for r in stub.requests:
        assert r["path"] == "/v1/chat/completions" and r["auth"] == "Bearer k-test"
        body = r["body"]
        assert body["model"] == "stub-model" and [m["role"] for m in body["messages"]] == ["system", "user"]
        user = json.loads(body["messages"][1]["content"])
        assert {"profile", "candidates", "history"} <= set(user) and user["profile"]["ms_per_token"] > 0
    assert (
        "quant_mxfp4_all" not in json.loads(stub.requests[1]["body"]["messages"][1]["content"])["candidates"]
    )
    assert "llm:stub-model" in render_log(history, "en") and "回滚" in render_log(history, "zh")
    zh = render_log(history, "zh")
    assert "大模型 stub-model" in zh and "规则（大模型调用失败：" in zh and "launch-bound" not in zh
    assert "下发受限：算子下发占这一步的" in zh and second["proposal"]["en"].startswith(
        "launch-bound: launches are"
    )


def test_the_rules_reasons_are_chinese_in_the_chinese_log() -> None:
    from labkit.deploy import RuleProposer, source_text

    rules = RuleProposer()
    cands = {"fused_ops": "fused ops", "quant_mx": "MXFP8/MXFP4 quantisation", "mtp": "MTP speculation"}
    launch = rules.propose({"ms_per_token": 1.0, "launch_ms": 0.8, "memory_ms": 0.2}, cands, [])
    memory = rules.propose({"ms_per_token": 1.0, "launch_ms": 0.1, "memory_ms": 0.9}, cands, [])
    spec = rules.propose({"ms_per_token": 1.0, "launch_ms": 0.3, "memory_ms": 0.2}, {"mtp": "MTP"}, [])
    assert (launch.skill, launch.reasons) == (
        "fused_ops",
        {"en": "launch-bound: launches are 80% of the step", "zh": "下发受限：算子下发占这一步的 80%"},
    )
    assert memory.skill == "quant_mx" and memory.reasons["zh"] == "访存受限：权重搬运占这一步的 90%"
    assert spec.reasons["zh"] == "下一个投机解码技能（下发占 30%，访存占 20%）"
    assert source_text("rules", "zh") == "规则" and source_text("rules", "en") == "rules"


def test_the_check_result_shows_the_attendees_own_log_as_written(solved: Path) -> None:
    """Step 7's verdict carries the attendee's decision log and staged table as tables, in the
    check's language; hostile text in the attendee's log comes back character for character (the
    lab page puts each cell in a text node)."""
    log = solved / "agent" / "log.py"
    hostile = "<script>alert(1)</script> & <b>{value:.2f}x</b>"
    log.write_text(
        log.read_text(encoding="utf-8").replace(
            '"why_accepted": "验证通过，快 {value:.2f}x"', f'"why_accepted": "{hostile}"'
        ),
        encoding="utf-8",
    )
    env = {"PATH": "/usr/bin:/bin", "LAB_RUN_ID": "t17", "LAB_LANG": "zh"}
    verdict, proc = run_checker(LAB / "checks" / "07_staged_table.py", solved, env, timeout=300)
    assert proc.returncode == 0 and verdict["passed"], verdict["message"] + proc.stderr
    decisions, staged = verdict["tables"]
    assert decisions["title"].startswith("你的决策日志（out/decision_log.zh.md")
    assert decisions["columns"] == ["#", "技能", "验证", "每 token 毫秒（前 → 后）", "加速", "决定", "原因"]
    accepted = [row for row in decisions["rows"] if row[5] == "**保留**"]
    assert accepted and all(row[6].startswith("<script>alert(1)</script> & <b>") for row in accepted)
    assert staged["columns"][0] == "阶段" and staged["rows"][0][0] == "基线（eager）"
    assert len(staged["rows"]) == 1 + len(accepted)


def test_deploy_llm_flag_needs_an_endpoint(solved: Path) -> None:
    r = subprocess.run(
        [sys.executable, "deploy.py", "--llm"],
        cwd=solved,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(solved)},
        timeout=120,
    )
    assert r.returncode != 0 and "AGENT_LLM_BASE_URL" in r.stderr


def test_reference_log_on_the_step_page_is_current() -> None:
    r = subprocess.run(
        [sys.executable, str(LAB / "tools" / "render_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    page = (LAB / "steps" / "07-staged-table.md").read_text(encoding="utf-8")
    zh = (LAB / "steps" / "07-staged-table.zh.md").read_text(encoding="utf-8")
    for text in (page, zh):
        assert "`quant_mxfp4_all`" in text and "`fused_ops`" in text
    assert "reject (rolled back)" in page and "拒绝（已回滚）" in zh


def test_the_decision_log_is_on_the_lab_page_in_both_languages(app, client) -> None:  # type: ignore[no-untyped-def]
    from sqlmodel import Session

    from labserver.services.joining.events import create_event
    from tests.conftest import join

    with Session(app.state.ctx.engine, expire_on_commit=False) as session:
        create_event(session, title="Talk 2", labs=["agent-deploy"], code="AGENT2")
    headers = join(client, code="AGENT2")
    for lang, decided, chart in (
        ("en", "reject (rolled back)", "img/staged.svg"),
        ("zh", "拒绝（已回滚）", "img/staged.zh.svg"),
    ):
        lab = client.get(f"/api/v1/labs/agent-deploy?lang={lang}", headers=headers).json()
        step = next(s for s in lab["steps"] if s["id"] == "staged-table")
        html = step["html"]
        assert html.count("<table>") == 2 and decided in html and "quant_mxfp4_all" in html
        assert f'src="/labs/agent-deploy/assets/{chart}"' in html
        svg = client.get(f"/labs/agent-deploy/assets/{chart}")
        assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")


def test_the_checkers_reference_runs_equal_the_plain_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """adref's shortcuts (issue 30) give what the plain code gives: one charged run per prompt on a
    warm reference model = a warm-up run then a charged run on a freshly built chain (figures and
    tokens); a reference model built from its prefix's model = the fresh chain; the reference
    quantisations of stacked weights = quantize_mx weight by weight."""
    import importlib.util

    import torch
    from labkit import mx

    spec = importlib.util.spec_from_file_location("adref_under_test", LAB / "checks" / "adref.py")
    assert spec is not None and spec.loader is not None
    ar = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ar)
    monkeypatch.setenv("LAB_RUN_ID", "reference-runs")
    ps = ar.prompts("staged-table", k=1, margins=(ar.EAGER, ar.QUANT))
    for names in ((), ("fused_ops", "graph_mode"), (*ar.QUANT, "mtp"), ("fused_ops", "eager_gating")):
        plain = ar.measure_and_tokens(ar.chain(*names), ps)
        assert (ar.ref_measure(names, ps), ar.ref_tokens_all(names, ps)) == plain, names
    base = ar.fresh()
    for skill, fmt_of in (
        (ar.quant, lambda n: "mxfp4" if ".expert." in n else "mxfp8_e4m3"),
        (ar.quant_all_fp4, lambda n: "mxfp4"),
    ):
        got = skill(base.clone()).weights
        for n, w in got.items():
            if isinstance(w, mx.MXTensor):
                want = mx.quantize_mx(base.weights[n], fmt_of(n))
                assert torch.equal(w.codes, want.codes) and torch.equal(w.scales, want.scales), n
                assert (w.fmt, w.shape, w.axis, w.dtype) == (want.fmt, want.shape, want.axis, want.dtype), n
