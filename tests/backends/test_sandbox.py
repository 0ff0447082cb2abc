"""The bubblewrap command line (pure): who the process becomes, and what it sees."""

from __future__ import annotations

from pathlib import Path

from labserver.backends.sandbox import Identity, View, wrap

ROOT_SERVER = Identity(1900000007, 1900000007, True)
USER_SERVER = Identity(1000, 1000, False)


def _outer(cmd: list[str]) -> list[str]:
    """The outer bubblewrap's own arguments (up to its ``--``)."""
    return cmd[: cmd.index("--")]


def test_without_bwrap_a_root_server_still_drops_to_the_environment_uid() -> None:
    assert wrap(["python", "x.py"], bwrap=None, view=View(), identity=USER_SERVER, chdir=Path("/")) == [
        "python",
        "x.py",
    ]
    cmd = wrap(["python"], bwrap=None, view=View(), identity=ROOT_SERVER, chdir=Path("/"), setpriv="setpriv")
    assert cmd[:3] == ["setpriv", "--reuid=1900000007", "--regid=1900000007"]
    assert {"--clear-groups", "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all"} <= set(cmd)
    assert cmd[-1] == "python"


def test_root_server_outer_keeps_only_setuid_caps_then_an_unprivileged_inner_userns() -> None:
    cmd = wrap(["bash"], bwrap="/usr/bin/bwrap", view=View(), identity=ROOT_SERVER, chdir=Path("/w"))
    outer = _outer(cmd)
    assert outer[outer.index("--cap-drop") + 1] == "ALL"
    added = [outer[i + 1] for i, a in enumerate(outer) if a == "--cap-add"]
    assert added == ["CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"]
    assert "--unshare-user" not in outer  # a user namespace made by root would map to uid 0
    rest = cmd[len(outer) + 1 :]
    assert rest[0].endswith("setpriv") and "--reuid=1900000007" in rest and "--no-new-privs" in rest
    inner = rest[rest.index("/usr/bin/bwrap") :]
    for flag in ("--unshare-user", "--disable-userns", "--die-with-parent"):
        assert flag in inner
    assert inner[inner.index("--cap-drop") + 1] == "ALL"
    assert cmd[-1] == "bash"


def test_user_server_is_one_bwrap_with_a_user_namespace() -> None:
    cmd = wrap(["bash"], bwrap="/usr/bin/bwrap", view=View(), identity=USER_SERVER, chdir=Path("/w"))
    assert "setpriv" not in " ".join(cmd)
    outer = _outer(cmd)
    assert {"--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-net", "--unshare-ipc"} <= set(
        outer
    )
    assert "--cap-add" not in outer


def test_the_view_binds_only_what_is_named_never_the_host_root(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    data = tmp_path / "data"
    ws = data / "workspaces" / "ev1-at1"
    solution = tmp_path / "labs" / "lab" / "solution"
    for folder in (venv, ws, solution):
        folder.mkdir(parents=True)
    view = View(runtime=(venv,), writable=(ws,), masked=(data, solution), tmp_mb=64)
    outer = _outer(wrap(["python"], bwrap="/usr/bin/bwrap", view=view, identity=ROOT_SERVER, chdir=ws))
    pairs = {(outer[i], outer[i + 1]) for i in range(len(outer) - 1)}
    binds = [outer[i + 1] for i, a in enumerate(outer) if a in ("--bind", "--ro-bind", "--dev-bind")]
    assert "/" not in binds and "/etc" not in binds and "/run" not in binds and "/var" not in binds
    assert ("--ro-bind", "/usr") in pairs and ("--ro-bind", str(venv)) in pairs
    assert ("--bind", str(ws)) in pairs  # the only writable bind
    assert [a for a in outer if a == "--bind"] == ["--bind"]
    assert not any(b.startswith(str(tmp_path / "labs")) for b in binds)  # no lab at all here
    assert ("--tmpfs", str(data)) not in pairs  # the data folder is not inside a bind: absent anyway
    assert all(not b.startswith("/etc/") or b.split("/")[2] in _etc_names() for b in binds)
    assert ("--size", str(64 * 1024 * 1024)) in pairs and ("--tmpfs", "/tmp") in pairs
    assert ("--remount-ro", "/") in pairs
    # every folder made for a mount point is reachable for the environment's uid
    made = [outer[i + 3] for i, a in enumerate(outer) if a == "--perms" and outer[i + 2] == "--dir"]
    assert str(ws.parent) in made and all(outer[outer.index(m) - 2] == "0755" for m in made)


def test_secrets_inside_a_bound_checkout_are_masked_read_only(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"  # e.g. a .pth line naming the repository root
    data = checkout / "data"
    ws = data / "workspaces" / "ev1-at1"
    solution = checkout / "labs" / "lab" / "solution"
    for folder in (ws, solution):
        folder.mkdir(parents=True)
    view = View(runtime=(checkout,), writable=(ws,), masked=(data, solution))
    outer = _outer(wrap(["python"], bwrap="/usr/bin/bwrap", view=view, identity=USER_SERVER, chdir=ws))
    joined = " ".join(outer)
    assert f"--tmpfs {data}" in joined and f"--tmpfs {solution}" in joined
    assert f"--remount-ro {data}" in joined and f"--remount-ro {solution}" in joined
    # the workspace is bound after the mask over the data folder, so it stays visible
    assert joined.index(f"--tmpfs {data}") < joined.index(f"--bind {ws} {ws}")


def test_a_mask_inside_a_read_only_bind_comes_after_it(tmp_path: Path) -> None:
    """A checker folder that happens to contain the data folder must not uncover it again."""
    checks = tmp_path / "checks"
    data = checks / "data"
    ws = data / "workspaces" / "ev1-at1"
    ws.mkdir(parents=True)
    view = View(readonly=(checks,), writable=(ws,), masked=(data,))
    joined = " ".join(
        _outer(wrap(["python"], bwrap="/usr/bin/bwrap", view=view, identity=USER_SERVER, chdir=ws))
    )
    assert joined.index(f"--ro-bind {checks} {checks}") < joined.index(f"--tmpfs {data}")
    assert joined.index(f"--tmpfs {data}") < joined.index(f"--bind {ws} {ws}")


def _etc_names() -> set[str]:
    from labserver.backends.sandbox import ETC_FILES

    return (
        {name.split("/")[0] for name in ETC_FILES}
        | {"passwd", "group", "hosts"}
        | {p.name for p in Path("/etc").glob("python3*")}
    )
