"""labkit.check end to end: real checker scripts, run as the server runs them, with a real pipe."""

from __future__ import annotations

import json

FAKE_VERDICT = json.dumps({"passed": True, "message": "all good", "hints": [], "metrics": {}})


def test_passing_checker_writes_one_verdict_and_exits_0(run_checker):
    run = run_checker(
        """
        from labkit.check import main, msg
        def check():
            print("log line")
            return msg("Well done.", "做得好。"), {"speedup": 2.5, "count": 3}
        main(check)
        """
    )
    assert run.exit_code == 0, run.stderr
    cpu_s = run.verdicts[0].pop("cpu_s")
    assert isinstance(cpu_s, float) and 0 < cpu_s < 60  # at least the interpreter's own start
    assert run.verdicts == [
        {"passed": True, "message": "Well done.", "hints": [], "metrics": {"speedup": 2.5, "count": 3}}
    ]
    assert "log line" in run.stdout


def test_failure_becomes_a_failed_verdict_in_chinese(run_checker):
    run = run_checker(
        """
        from labkit.check import Failure, main, msg
        def check():
            raise Failure(msg("Not yet.", "还没有。"), [msg("Try harder.", "再试试。")])
        main(check)
        """,
        lang="zh",
    )
    assert run.exit_code == 1
    assert run.verdicts[0].pop("cpu_s") >= 0
    assert run.verdicts == [{"passed": False, "message": "还没有。", "hints": ["再试试。"], "metrics": {}}]


def test_the_verdict_reports_the_cpu_of_the_checker_and_of_the_attendee_code_it_ran(run_checker):
    """``cpu_s`` counts the children the checker ran (RUSAGE_CHILDREN): an attendee script that
    burns a CPU-second makes the verdict report at least that."""
    run = run_checker(
        """
        from labkit.check import main, run_script
        def check():
            res = run_script(["python", "burn.py"], timeout=60)
            assert res.ok, res.stderr
            return "burnt"
        main(check)
        """,
        {
            "burn.py": """
            import time
            end = time.process_time() + 1.0
            while time.process_time() < end:
                pass
            """
        },
    )
    assert run.exit_code == 0, run.stderr
    assert run.verdicts[0]["cpu_s"] >= 1.0


def test_checker_bug_exits_2_with_no_verdict(run_checker):
    run = run_checker(
        """
        from labkit.check import main
        def check():
            return 1 / 0
        main(check)
        """
    )
    assert run.exit_code == 2
    assert run.raw == b""
    assert "ZeroDivisionError" in run.stderr and "Traceback" in run.stderr


def test_without_result_fd_the_verdict_is_printed(run_checker):
    run = run_checker(
        """
        from labkit.check import failed
        failed("Output is wrong.", ["Look at step 2."])
        """,
        result_fd=False,
    )
    assert run.exit_code == 1
    assert "FAILED: Output is wrong." in run.stdout
    assert "hint: Look at step 2." in run.stdout


def test_bad_result_fd_is_a_checker_error(run_checker):
    run = run_checker(
        """
        import os
        os.environ["LAB_RESULT_FD"] = "57"
        from labkit.check import passed
        passed("ok")
        """
    )
    assert run.exit_code == 2
    assert "cannot write the verdict" in run.stderr


def test_run_function_returns_values_and_output(run_checker):
    run = run_checker(
        """
        import os, torch
        from labkit.check import main, run_function, expect_close, expect_equal, expect
        def check():
            x = torch.arange(6.0).reshape(2, 3)
            r = run_function("solution.py", "double", x, scale=2.0)
            assert r.error is None, r.error
            expect_close("double", r.value["y"], 2 * x, atol=0)
            expect_equal("meta", r.value["meta"], ("ok", 3, None, [1.5, b"raw"]))
            expect("hello from attendee" in r.stdout, "stdout missing: " + r.stdout)
            env = run_function("solution.py", "env_and_path").unwrap()
            expect(env["fd"] is None and env["run"] is None, f"secrets leaked: {env}")
            expect(env["cwd"] == os.getcwd(), f"cwd {env['cwd']}")
            expect(env["path0"] == os.getcwd(), f"sys.path[0] {env['path0']}")
            expect(env["lang"] == "en", f"LAB_LANG {env['lang']}")
            np_value = run_function("solution.py", "numpy_value").unwrap()
            expect_close("np", np_value, torch.tensor([1.0, 2.0], dtype=torch.float64), atol=0)
            dotted = run_function("solution.py", "Box.make").unwrap()
            expect_equal("dotted", dotted, 7)
            return "ok"
        main(check)
        """,
        {
            "solution.py": """
            import os, sys
            import numpy as np
            import torch
            import helper  # a sibling module: the lab folder is on sys.path
            def double(x, scale):
                print("hello from attendee")
                return {"y": x * scale, "meta": ("ok", helper.THREE, None, [1.5, b"raw"])}
            def env_and_path():
                return {"fd": os.environ.get("LAB_RESULT_FD"), "run": os.environ.get("LAB_RUN_ID"),
                        "cwd": os.getcwd(), "path0": sys.path[0], "lang": os.environ.get("LAB_LANG")}
            def numpy_value():
                return np.array([1.0, 2.0])
            class Box:
                @staticmethod
                def make():
                    return 7
            """,
            "helper.py": "THREE = 3\n",
            # files named like modules the bootstrap and torch import must not shadow them
            "ctypes.py": "raise RuntimeError('shadowed ctypes')\n",
            "typing_extensions.py": "raise RuntimeError('shadowed typing_extensions')\n",
        },
    )
    assert run.exit_code == 0, run.stderr + run.stdout + str(run.verdicts)
    assert run.verdicts[0]["passed"] is True


def test_attendee_exception_is_reported_with_their_traceback_only(run_checker):
    run = run_checker(
        """
        import pathlib
        from labkit.check import main, run_function
        def check():
            r = run_function("model.py", "forward", 3)
            assert r.error is not None and r.error.phase == "call", r
            assert r.error.type == "ValueError" and r.error.message == "bad size 3", r.error
            files = {f.file for f in r.error.frames}
            assert files == {"model.py", "lib/util.py"}, r.error.frames
            assert r.error.frames[-1].code == 'raise ValueError(f"bad size {n}")', r.error.frames
            # trusted harness code beside the checker, given by absolute path, imports the attendee's module
            harness = pathlib.Path(__file__).with_name("harness.py")
            harness.write_text("import model\\ndef go(n):\\n    return model.forward(n)\\n")
            h = run_function(str(harness), "go", 4)
            assert h.error.type == "ValueError" and h.error.message == "bad size 4", h
            assert [f.file for f in h.error.frames] == ["model.py", "lib/util.py"], h.error.frames
            r.unwrap(hints=["Check the sizes."])
        main(check)
        """,
        {
            "model.py": """
            from lib.util import check_size
            def forward(n):
                return check_size(n)
            """,
            "lib/__init__.py": "",
            "lib/util.py": """
            def check_size(n):
                raise ValueError(f"bad size {n}")
            """,
        },
    )
    assert run.exit_code == 1, run.stderr
    (verdict,) = run.verdicts
    assert verdict["hints"] == ["Check the sizes."]
    message = verdict["message"]
    assert "model.py: forward() raised an exception." in message
    assert 'File "model.py", line 4, in forward' in message
    assert 'File "lib/util.py", line 3, in check_size' in message
    assert "ValueError: bad size 3" in message
    assert "_child" not in message and "<string>" not in message and "importlib" not in message


def test_syntax_error_missing_function_and_missing_file(run_checker):
    run = run_checker(
        """
        from labkit.check import main, run_function
        def check():
            s = run_function("broken.py", "f").error
            assert s.phase == "import" and s.type == "SyntaxError", s
            assert s.frames[-1].file == "broken.py" and s.frames[-1].line == 2, s.frames
            m = run_function("fine.py", "nope").error
            assert m.phase == "lookup" and m.type == "AttributeError", m
            f = run_function("absent.py", "f").error
            assert f.phase == "import" and f.type == "FileNotFoundError", f
            return "ok"
        main(check)
        """,
        {"broken.py": "def f():\n    return (1 +\n", "fine.py": "def g():\n    return 1\n"},
    )
    assert run.exit_code == 0, run.stderr


# --- attendee code trying to forge a pass: every attempt must end as a failed verdict -----------

CHEATS = {
    "cheat.py": f"""
    import json, os, sys
    def print_verdict():
        print({FAKE_VERDICT!r}, flush=True)
        sys.stdout.write({FAKE_VERDICT!r} + "\\n")
        return "wrong"
    def hard_exit():
        print({FAKE_VERDICT!r}, flush=True)
        os._exit(0)
    def soft_exit():
        sys.exit(0)
    def exit_at_import():
        return "wrong"
    def write_fds():
        hits = []
        for fd in range(3, 21):
            try:
                os.write(fd, ({FAKE_VERDICT!r} + "\\n").encode())
                hits.append(fd)
            except OSError:
                pass
        return hits
    def write_parent_fds():
        hits = []
        for fd in range(3, 21):
            try:
                with open(f"/proc/{{os.getppid()}}/fd/{{fd}}", "w") as fh:
                    fh.write({FAKE_VERDICT!r} + "\\n")
                hits.append(fd)
            except OSError:
                pass
        return hits
    """,
    "exits_on_import.py": "import sys\nsys.exit(0)\n",
}


def _cheat_checker(func: str, file: str = "cheat.py") -> str:
    return f"""
    from labkit.check import main, run_function, expect_equal
    def check():
        r = run_function({file!r}, {func!r})
        print("value:", r.value, "error:", r.error, "exit:", r.exit_code)
        value = r.unwrap()
        expect_equal("answer", value, "right")
        return "passed"
    main(check)
    """


def _assert_one_failed_verdict(run) -> dict:
    assert run.exit_code == 1, (run.stdout, run.stderr)
    assert len(run.verdicts) == 1, run.raw
    assert run.verdicts[0]["passed"] is False
    return run.verdicts[0]


def test_printed_fake_verdict_is_only_log(run_checker):
    run = run_checker(_cheat_checker("print_verdict"), CHEATS)
    verdict = _assert_one_failed_verdict(run)
    assert "`answer` is 'wrong', expected 'right'" in verdict["message"]


def test_os_exit_0_is_not_a_pass(run_checker):
    run = run_checker(_cheat_checker("hard_exit"), CHEATS)
    verdict = _assert_one_failed_verdict(run)
    assert "ended its process instead of returning" in verdict["message"]
    assert "exited with status 0" in verdict["message"]


def test_sys_exit_0_is_not_a_pass(run_checker):
    run = run_checker(_cheat_checker("soft_exit"), CHEATS)
    verdict = _assert_one_failed_verdict(run)
    assert "SystemExit: exit status 0" in verdict["message"]
    run = run_checker(_cheat_checker("f", "exits_on_import.py"), CHEATS)
    verdict = _assert_one_failed_verdict(run)
    assert "Importing exits_on_import.py failed" in verdict["message"]


def test_writing_to_fds_3_to_20_is_not_a_pass(run_checker):
    run = run_checker(_cheat_checker("write_fds"), CHEATS)
    verdict = _assert_one_failed_verdict(run)
    assert "expected 'right'" in verdict["message"]
    run = run_checker(_cheat_checker("write_parent_fds"), CHEATS)
    verdict = _assert_one_failed_verdict(run)
    # Not one /proc/<checker>/fd/N could be opened (the checker is non-dumpable, the child has
    # no CAP_SYS_PTRACE), so nothing reached the checker's pipe.
    assert "`answer` is [], expected 'right'" in verdict["message"]


def test_forged_pickle_in_result_file_is_never_unpickled(run_checker, tmp_path):
    marker = tmp_path / "pwned"
    run = run_checker(
        _cheat_checker("forge"),
        {
            "cheat.py": f"""
            import os, pickle, sys
            class Evil:
                def __reduce__(self):
                    return (open, ({str(marker)!r}, "w"))
            def forge():
                result_path = sys.argv  # the bootstrap's argv is not visible; find the file
                import glob
                for d in glob.glob("/tmp/labkit-call-*"):
                    with open(os.path.join(d, "result.pt"), "wb") as fh:
                        pickle.dump({{"status": "ok", "value": Evil()}}, fh)
                os._exit(0)
            """
        },
    )
    verdict = _assert_one_failed_verdict(run)
    assert "cannot be checked" in verdict["message"], verdict
    assert not marker.exists()


def test_unsendable_return_value_is_explained(run_checker):
    run = run_checker(
        _cheat_checker("make"),
        {"cheat.py": "class Thing:\n    pass\ndef make():\n    return {'a': Thing()}\n"},
    )
    verdict = _assert_one_failed_verdict(run)
    assert "returned an object of type cheat.Thing" in verdict["message"]


def test_timeout_kills_the_whole_process_group(run_checker, tmp_path):
    flag = tmp_path / "grandchild-alive"
    run = run_checker(
        f"""
        import time, pathlib
        from labkit.check import main, run_function
        def check():
            flag = pathlib.Path({str(flag)!r})
            # A busy machine may need longer than the first timeout to start the grandchild.
            for timeout in (4, 15, 60):
                r = run_function("slow.py", "spin", timeout=timeout)
                assert r.timed_out and r.error.phase == "timeout", r
                if flag.exists():
                    break
            time.sleep(2.5)
            before = flag.stat().st_mtime
            time.sleep(1.5)
            assert flag.stat().st_mtime == before, "a grandchild survived the timeout"
            r.unwrap()
        main(check)
        """,
        {
            "slow.py": f"""
            import subprocess, sys, time
            def spin():
                subprocess.Popen([sys.executable, "-c",
                    "import time, pathlib\\nwhile True:\\n    pathlib.Path({str(flag)!r}).touch(); time.sleep(0.2)"])
                while True:
                    time.sleep(0.1)
            """
        },
    )
    verdict = _assert_one_failed_verdict(run)
    assert "did not finish in time" in verdict["message"]


def test_memory_limit_comes_back_as_an_error(run_checker):
    run = run_checker(
        """
        from labkit.check import main, run_function
        def check():
            r = run_function("hog.py", "hog", memory_mb=1200)
            assert r.error is not None and r.error.type in ("MemoryError", "RuntimeError"), r
            r.unwrap()
        main(check)
        """,
        {"hog.py": "import torch\ndef hog():\n    return torch.ones(1024, 1024, 512).sum()\n"},
    )
    verdict = _assert_one_failed_verdict(run)
    assert "raised an exception" in verdict["message"]


def test_run_script_isolation(run_checker):
    run = run_checker(
        """
        import os
        from labkit.check import main, run_script, expect, expect_file
        def check():
            r = run_script(["python", "make_out.py", "hello"], env={"EXTRA": "1"})
            expect(r.ok and r.exit_code == 0, f"script failed: {r}")
            expect(r.stdout.strip() == "None None 1 True", f"env: {r.stdout!r}")
            expect_file("out.txt", "hello\\n")
            bad = run_script(["python", "-c", "import sys, os; os.write(1, b'x'); sys.exit(3)"])
            expect(bad.exit_code == 3 and bad.stdout == "x", f"bad: {bad}")
            slow = run_script(["python", "-c", "import time; time.sleep(30)"], timeout=1)
            expect(slow.timed_out and slow.exit_code is None, f"slow: {slow}")
            missing = run_script(["no-such-program-xyz"])
            expect(missing.exit_code == 127 and "no-such-program-xyz" in missing.stderr, f"missing: {missing}")
            return "ok"
        main(check)
        """,
        {
            "make_out.py": """
            import os, sys
            open("out.txt", "w").write(sys.argv[1] + "\\n")
            fds = [fd for fd in range(3, 21) if os.path.exists(f"/proc/self/fd/{fd}")]
            print(os.environ.get("LAB_RESULT_FD"), os.environ.get("LAB_RUN_ID"), os.environ.get("EXTRA"), fds == [] or fds)
            """
        },
    )
    assert run.exit_code == 0, (run.stdout, run.stderr, run.verdicts)
