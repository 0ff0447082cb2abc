"""The offline-built lab images (real engine)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import docker

from labserver.backends.docker import images


def test_cpu_emu_image_runs_as_lab_user_with_the_lab_stack(
    docker_client: docker.DockerClient, cpu_emu_image: str
) -> None:
    script = (
        "import os, torch, numpy, safetensors, imageio, imageio_ffmpeg, labkit;"
        "print(os.getuid(), os.getgid(), os.getcwd(), torch.__version__)"
    )
    out = docker_client.containers.run(
        cpu_emu_image, ["python", "-c", script], remove=True, network_mode="none"
    ).decode()
    uid, gid, cwd, torch_version = out.split()
    assert (uid, gid, cwd) == ("1000", "1000", "/workspace")
    assert torch_version.startswith("2.13.0")


def test_the_terminals_login_shell_finds_the_labs_python(
    docker_client: docker.DockerClient, cpu_emu_image: str
) -> None:
    """The terminal runs `bash -l`; Debian's /etc/profile resets PATH for every user but root, so
    `python warmup.py` typed by an attendee found no python (bench/checks.py's Docker room)."""
    out = docker_client.containers.run(
        cpu_emu_image, ["bash", "-lc", "command -v python"], remove=True, network_mode="none"
    ).decode()
    assert out.strip() == "/opt/venv/bin/python"


def test_stable_tag_points_at_the_content_hash_tag(
    docker_client: docker.DockerClient, cpu_emu_image: str
) -> None:
    stable = docker_client.images.get(f"{images.CPU_EMU_REPO}:{images.STABLE_TAG}")
    assert stable.id == docker_client.images.get(cpu_emu_image).id
    assert stable.labels[images.HASH_LABEL] == cpu_emu_image.split(":")[1]


def test_second_build_is_a_no_op(cpu_emu_image: str) -> None:
    first = images.build_cpu_emu()  # labkit may have changed since the fixture ran (dev checkouts)
    second = images.build_cpu_emu()
    assert second.tag == first.tag
    assert second.built is False


def test_content_hash_follows_the_sources(tmp_path: Path, cpu_emu_image: str) -> None:
    images_dir = tmp_path / "images"
    images_dir.mkdir()
    for name in ("Dockerfile.cpu-emu", "requirements-cpu-emu.txt"):
        (images_dir / name).write_bytes((images.IMAGES_DIR / name).read_bytes())
    labkit = tmp_path / "labkit"
    (labkit / "labkit").mkdir(parents=True)
    (labkit / "labkit" / "__init__.py").write_text("x = 1\n")
    first = images.cpu_emu_hash(images_dir=images_dir, labkit_dir=labkit)
    (labkit / "labkit" / "__pycache__").mkdir()
    (labkit / "labkit" / "__pycache__" / "junk.pyc").write_bytes(b"junk")
    assert images.cpu_emu_hash(images_dir=images_dir, labkit_dir=labkit) == first
    (labkit / "labkit" / "__init__.py").write_text("x = 2\n")
    assert images.cpu_emu_hash(images_dir=images_dir, labkit_dir=labkit) != first


def test_base_image_script_reads_the_mirror_from_apt_sources_and_names_no_host() -> None:
    script = (images.IMAGES_DIR / "make-base-image.sh").read_text()
    assert "/etc/apt/sources.list" in script
    # No mirror host is written into the repository.
    assert not re.search(r"https?://[a-z0-9.-]+\.(org|com|net|cn)", script)
    for f in images.IMAGES_DIR.iterdir():
        if f.is_file():
            assert "deb.debian.org" not in f.read_text(errors="replace"), f
    # The script is valid bash.
    assert subprocess.run(["bash", "-n", str(images.IMAGES_DIR / "make-base-image.sh")]).returncode == 0


def test_cpu_emu_dockerfile_is_offline_and_parametrised() -> None:
    text = (images.IMAGES_DIR / "Dockerfile.cpu-emu").read_text()
    assert not re.search(r"^# *syntax=", text, re.M | re.I)
    assert re.search(r"^ARG BASE_IMAGE=", text, re.M)
    assert "--no-index" in text
    assert re.search(r"^USER 1000:1000$", text, re.M)
    assert re.search(r"^WORKDIR /workspace$", text, re.M)
