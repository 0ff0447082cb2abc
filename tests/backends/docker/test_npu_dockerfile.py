"""Dockerfile.npu is not built here (no Ascend base image, no registry): lint its structure."""

from __future__ import annotations

import re

from labserver.backends.docker import images


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_npu_dockerfile_structure() -> None:
    text = (images.IMAGES_DIR / "Dockerfile.npu").read_text()
    ins = _instructions(text)
    known = {"ARG", "FROM", "RUN", "COPY", "ENV", "LABEL", "USER", "WORKDIR", "CMD"}
    assert {w for w, _ in ins} <= known, {w for w, _ in ins} - known
    assert ins[0][0] == "ARG" and ins[0][1].startswith("BASE_IMAGE=") and "cann" in ins[0][1]
    assert ("FROM", "${BASE_IMAGE}") in ins
    assert not re.search(r"^# *syntax=", text, re.M | re.I)
    runs = " ".join(r for w, r in ins if w == "RUN")
    assert "torch_npu" in runs and '"torch==${TORCH_VERSION}"' in runs and "--no-index" in runs
    assert "labkit" in runs
    assert "set_env.sh" in runs
    env = " ".join(r for w, r in ins if w == "ENV")
    assert "ASCEND_TOOLKIT_HOME" in env and "/opt/venv/bin" in env
    # Ends as the unprivileged lab user in the workspace, like the cpu-emu image.
    tail = [i for i in ins if i[0] in ("USER", "WORKDIR")][-2:]
    assert tail == [("USER", "1000:1000"), ("WORKDIR", "/workspace")]
    # The context it copies is what `labserver images build` assembles (+ wheels-npu/).
    copies = [r for w, r in ins if w == "COPY"]
    assert any(c.startswith("wheels/") for c in copies) and any(c.startswith("labkit/") for c in copies)
    # Device files are never baked in: the scheduler passes them at run time.
    assert "/dev/davinci" not in " ".join(r for w, r in ins)


def test_npu_dockerfile_copies_only_what_the_assembled_context_holds(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ctx = images.assemble_context(tmp_path / "ctx")
    text = (ctx / "Dockerfile.npu").read_text()
    sources = [r.split()[0] for w, r in _instructions(text) if w == "COPY"]
    for src in sources:
        assert (ctx / src.rstrip("/")).exists(), src
    assert list((ctx / "labkit").glob("labkit-*.whl"))
    assert any(p.name.startswith("torch-2.13.0") for p in (ctx / "wheels").iterdir())
