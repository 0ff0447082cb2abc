"""``run_script(..., fork_python=True)`` (labkit.check._pyforward): a shell script's ``python`` runs
are forked by the fork server and give the script what fresh interpreters give it."""

from __future__ import annotations

import json
import os

SCRIPT = r"""
set -u
export FOO=bar
cd sub
python x.py 0 a
python x.py 3 || echo "exit $?"
cd ..
python - one two <<'PY'
import sys
print("stdin program", sys.argv, __file__, sys.path[0] == "")
PY
python -c "print('dash c')"
python3 sub/x.py 0 three
python kill.py || echo "killed $?"
env -u LABKIT_PYTHON_SOCKET python sub/x.py 0 unforwarded
BIG=$(printf '%*s' 70000 '' | tr ' ' x) python sub/x.py 0 big-environment
python sub/x.py 0 no-stdin <&-
"""

X_PY = """
import os, sys
print("x", sys.argv, os.path.basename(os.getcwd()), os.environ.get("FOO"), "forked" if "torch" in sys.modules else "fresh")
print("err", sys.argv[-1], file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def test_a_scripts_pythons_fork_and_behave_as_fresh_interpreters(run_checker):  # type: ignore[no-untyped-def]
    run = run_checker(
        """
        import json
        from labkit.check import main, run_script
        def check():
            out = {}
            for fork in (False, True):
                r = run_script(["bash", "run.sh"], timeout=60, fork_python=fork)
                out[str(fork)] = [r.exit_code, r.stdout, r.stderr]
            return json.dumps(out)
        main(check)
        """,
        {
            "run.sh": SCRIPT,
            "sub/x.py": X_PY,
            "kill.py": "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n",
        },
    )
    assert run.exit_code == 0, (run.stdout, run.stderr, run.verdicts)
    seen = json.loads(run.verdicts[0]["message"])
    fresh, forked = seen["False"], seen["True"]
    assert fresh[0] == forked[0] == 0
    lines = forked[1].splitlines()
    assert lines[0] == "x ['x.py', '0', 'a'] sub bar forked", lines
    assert lines[1] == "x ['x.py', '3'] sub bar forked", lines
    assert lines[2] == "exit 3", lines  # the exit status comes back
    assert lines[3] == "stdin program ['-', 'one', 'two'] <stdin> True", lines  # python - <<EOF
    assert lines[4] == "dash c", lines  # python -c: a real interpreter
    assert lines[5] == "x ['sub/x.py', '0', 'three'] lab bar forked", lines
    assert lines[6] == "killed 143", lines  # a signal death stays a signal death
    assert lines[7].endswith("fresh"), lines  # no socket: a real interpreter
    # what the fork server cannot take (an environment over its 60 kB, a closed stdin): the same
    assert lines[8] == "x ['sub/x.py', '0', 'big-environment'] lab bar fresh", lines
    assert lines[9] == "x ['sub/x.py', '0', 'no-stdin'] lab bar fresh", lines
    # everything else as with fresh interpreters
    assert [ln.replace("forked", "fresh") for ln in lines] == fresh[1].splitlines()
    assert "err a" in forked[2] and "err 3" in forked[2] and "err three" in forked[2]


def test_a_forked_python_ends_with_the_scripts_timeout(run_checker, tmp_path):  # type: ignore[no-untyped-def]
    pid_file = tmp_path / "pid"
    run = run_checker(
        f"""
        import os, time
        from labkit.check import main, run_script
        def check():
            r = run_script(["bash", "-c", "python sleep.py"], timeout=3, fork_python=True)
            time.sleep(0.5)
            pid = int(open({str(pid_file)!r}).read())
            alive = os.path.exists(f"/proc/{{pid}}") and "Z" not in open(f"/proc/{{pid}}/stat").read().split()[2]
            return f"{{r.timed_out}} {{r.exit_code}} {{alive}}"
        main(check)
        """,
        {
            "sleep.py": f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
        },
    )
    assert run.exit_code == 0, (run.stdout, run.stderr, run.verdicts)
    assert run.verdicts[0]["message"] == "True None False"


def test_no_shims_where_they_cannot_run(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Docker mounts its tmpfs noexec: a shell skips a shim it cannot run, and a python it then
    starts by name takes the shim's folder for its home and loses its packages (the sanavideo
    deploy check on Docker: "missing Python packages: torch, ..."). There, pythons start afresh."""
    from labkit.check import runner

    flags = {"noexec": True}

    class Stat:
        @property
        def f_flag(self) -> int:
            return os.ST_NOEXEC if flags["noexec"] else 0

    monkeypatch.setattr(runner.os, "statvfs", lambda path: Stat())
    res = runner.run_script(["bash", "-c", 'echo "$PATH"'], fork_python=True)
    assert res.ok and "pybin" not in res.stdout, res
    flags["noexec"] = False
    res = runner.run_script(["bash", "-c", 'echo "$PATH"'], fork_python=True)
    assert res.ok and "pybin" in res.stdout, res
