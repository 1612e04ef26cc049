"""helpers/absl_stream.py: after absl is imported, a capsys test that configures logging (as Hydra's in-process jobs
do) leaves pytest's capture open for the tests after it; run as its own pytest session."""

import subprocess
import sys
import textwrap

from helpers.paths import REPO

TESTS = textwrap.dedent(
    """
    import logging.config


    def test_a_imports_absl():
        import absl.logging  # noqa: F401  (as an in-process TensorFlow, JAX or Keras import does)


    def test_b_configures_logging_under_capsys(capsys):
        logging.config.dictConfig({"version": 1})  # Hydra's configure_log for an in-process job
        print("hello")
        assert "hello" in capsys.readouterr().out


    def test_c_is_still_captured():
        print("captured")
    """
)
CONFTEST = textwrap.dedent(
    f"""
    import sys
    sys.path.insert(0, {str(REPO / "tests")!r})
    from helpers.absl_stream import absl_writes_to_the_current_stderr
    absl_writes_to_the_current_stderr()
    """
)


def test_a_capsys_test_that_configures_logging_leaves_the_capture_open(tmp_path):
    (tmp_path / "test_session.py").write_text(TESTS)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-p",
            "no:randomly",
            f"--basetemp={tmp_path / 'base'}",
            str(tmp_path / "test_session.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "3 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
