"""``labserver images ...``: build the lab images offline and copy them to other engines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from labserver.backends.docker import images

app = typer.Typer(help="Build lab images with no container registry.", no_args_is_help=True)


def _printer(verbose: bool) -> images.Progress:
    last = {"phase": ""}

    def progress(phase: str, message: str) -> None:
        if verbose or phase != last["phase"] or phase in ("done", "copy"):
            typer.echo(f"[{phase}] {message}")
        last["phase"] = phase

    return progress


@app.command("build")
def build(
    force: Annotated[bool, typer.Option(help="Rebuild even when the tagged image exists.")] = False,
    base_image: Annotated[str, typer.Option(help="Base image (e.g. python:3.11-slim).")] = images.BASE_IMAGE,
    cache_dir: Annotated[Path | None, typer.Option(help="Wheelhouse/context cache.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print every build line.")] = False,
    push_to: Annotated[list[str] | None, typer.Option(help="Also load the image into these engines.")] = None,
) -> None:
    """Build the base image (if absent) and labserver/cpu-emu:<content hash> (+ :latest)."""
    try:
        result = images.build_cpu_emu(
            progress=_printer(verbose), cache_dir=cache_dir, base_image=base_image, force=force
        )
        for host in push_to or []:
            images.copy_image(result.tag, host, _printer(verbose))
            images.copy_image(result.stable_tag, host, _printer(verbose))
    except images.ImageBuildError as exc:
        typer.echo(f"error: {exc}", err=True)
        if exc.log:
            typer.echo(exc.log, err=True)
        raise typer.Exit(1) from exc
    state = "built" if result.built else "up to date"
    phases = ", ".join(f"{k} {v}s" for k, v in result.phases.items())
    typer.echo(f"{result.tag} {state} in {result.seconds}s ({phases}); also tagged {result.stable_tag}")


@app.command("tag")
def tag() -> None:
    """Print the content-hash tag the current sources would build."""
    typer.echo(f"{images.CPU_EMU_REPO}:{images.cpu_emu_hash()}")


@app.command("copy")
def copy(tag: str, host: Annotated[list[str], typer.Argument(help="Destination engines.")]) -> None:
    """Copy an image to other Docker engines (docker save | docker -H HOST load)."""
    for h in host:
        copied = images.copy_image(tag, h, _printer(False))
        typer.echo(f"{h}: {'copied' if copied else 'already present'}")


@app.command("build-services")
def build_services(
    force: Annotated[bool, typer.Option(help="Rebuild even when the tagged images exist.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print every build line.")] = False,
) -> None:
    """Build the images docker-compose.yml runs: labserver/server and labserver/postgres."""
    try:
        for build_fn in (images.build_postgres, images.build_server):
            result = build_fn(progress=_printer(verbose), force=force)
            state = "built" if result.built else "up to date"
            typer.echo(f"{result.tag} {state} in {result.seconds}s; also tagged {result.stable_tag}")
    except images.ImageBuildError as exc:
        typer.echo(f"error: {exc}", err=True)
        if exc.log:
            typer.echo(exc.log, err=True)
        raise typer.Exit(1) from exc


@app.command("context")
def context(out: Annotated[Path, typer.Argument(help="Folder to write the build context to.")]) -> None:
    """Write the lab-image build context (wheels, labkit wheel, Dockerfiles) without building, e.g. to
    build Dockerfile.npu on an NPU node after adding the torch_npu wheel to wheels-npu/."""
    try:
        images.assemble_context(out, progress=_printer(False))
    except images.ImageBuildError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(
        f"context written to {out}; on an NPU node: put the torch_npu wheel in {out}/wheels-npu/, then"
    )
    typer.echo(
        f"  docker build -f {out}/Dockerfile.npu --build-arg BASE_IMAGE=<CANN image> -t labserver/npu {out}"
    )


@app.command("prune")
def prune() -> None:
    """Remove older content-hash tags of the cpu-emu image that no container was created from."""
    keep = images.cpu_emu_hash()
    removed = images.prune_old_tags(images.CPU_EMU_REPO, keep=keep)
    typer.echo(f"removed {len(removed)} tag(s): {', '.join(removed) or '-'}; kept {keep} and latest")
