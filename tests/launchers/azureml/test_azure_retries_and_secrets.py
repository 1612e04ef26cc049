"""Azure faults and secrets beyond tests/launchers/batchai/test_batchai_*.py, against the same local fakes.

Already covered there: 429/503 with Retry-After retried by azure-core and a re-run that neither resubmits nor
re-uploads (test_happy_path_submits_a_valid_job_streams_output_and_downloads_results_and_a_rerun_follows_it),
a requeued/preempted job reports the service's reasons (tests/launchers/batchai/test_batchai_preemption.py), the
key in no run-dir file, console output or request but the mount credentials
(assert_key_only_in_the_mount_credentials), nor in the launcher's argv.
Here: (launcher=azureml) the bearer token and SAS signatures nowhere they do not
belong, on a failed job (which reports the tail of its log); (launcher=batchai) a service that never
recovers (bounded total retry time), a response that never comes (read timeout, retried), and the
planted key with debug logging on, on a failed job (which reports the tail of its stderr), and in
the arguments of every process.
"""

import subprocess
import threading
import time
from pathlib import Path

from helpers.cli import assert_ok, run_cli, start_cli
from helpers.fake_azure.fixtures import cli_env, launcher_overrides
from helpers.fake_azure.server import Fault


def _arm_job(path: str) -> bool:
    return path.startswith("/subscriptions/") and "/jobs/" in path


def _error_lines(proc) -> list:
    return [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("cifar_dist: error:")]


def test_a_service_that_never_recovers_gives_up_within_the_retry_timeout(
    fake_azure, storage_key, wheel_cache, tmp_path
):
    fake_azure.faults.append(Fault(lambda m, p: m == "PUT" and _arm_job(p), 503, times=10**6, retry_after="1"))
    args = launcher_overrides(fake_azure, tmp_path / "run", wheel_cache, **{"launcher.retry_timeout_s": "3"})
    started = time.monotonic()
    proc = run_cli(*args, env=cli_env(fake_azure, storage_key), cwd=tmp_path, timeout=120)
    took = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = _error_lines(proc)
    assert "within launcher.retry_timeout_s of retries" in line and "re-run later" in line, line
    assert "Traceback" not in proc.stderr
    creates = fake_azure.job_creates()
    # Retried (Retry-After: 1 honoured), then given up after ~3 s of retrying, not after 8 tries or never.
    assert 2 <= len(creates) <= 5 and creates[-1].at - creates[0].at < 6, [r.at for r in creates]
    assert took < 60
    assert fake_azure.jobs() == []
    assert storage_key not in proc.stdout + proc.stderr


def test_a_response_that_never_comes_is_retried_after_the_read_timeout(fake_azure, storage_key, wheel_cache, tmp_path):
    real_dispatch = fake_azure.dispatch
    stalled = []

    def dispatch(method, host, raw_path, headers, body):
        if method == "GET" and _arm_job(raw_path.split("?")[0]) and not stalled:
            stalled.append(time.monotonic())
            time.sleep(4)  # longer than launcher.read_timeout_s: the client gives up on this one
        return real_dispatch(method, host, raw_path, headers, body)

    fake_azure.dispatch = dispatch
    args = launcher_overrides(fake_azure, tmp_path / "run", wheel_cache, **{"launcher.read_timeout_s": "1"})
    proc = run_cli(*args, env=cli_env(fake_azure, storage_key), cwd=tmp_path, timeout=120)
    assert_ok(proc)
    assert stalled, "no job GET was stalled"
    gets = [r for r in fake_azure.arm_requests("GET", "/jobs/") if r.at >= stalled[0]]
    assert len(gets) >= 2 and gets[1].at - stalled[0] < 4  # the retry did not wait for the stalled answer
    (job,) = fake_azure.jobs()
    assert job.state == "succeeded"


def _cmdlines() -> bytes:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((entry / "cmdline").read_bytes())
            except OSError:
                pass
    return b"\n".join(found)


def _communicate_sampling_ps(proc, timeout: float):
    """``proc.communicate(timeout)`` while sampling every process's arguments (as `ps -ef`
    would show them) every 50 ms; (stdout, stderr, the samples). Kills ``proc`` if it overruns."""
    seen, stop = [], threading.Event()

    def sample_ps():
        while not stop.is_set():
            seen.append(_cmdlines())
            time.sleep(0.05)

    sampler = threading.Thread(target=sample_ps, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        stop.set()
        sampler.join()
        if proc.poll() is None:
            proc.kill()
    return out, err, seen


def test_the_key_is_in_no_file_output_or_process_argument_with_debug_logs_and_a_failure(
    fake_azure, storage_key, wheel_cache, tmp_path
):
    run_dir = tmp_path / "run"
    # Debug logging of every logger (azure-core's HTTP logging included), a job that fails,
    # and a 503 on the way (retry messages).
    fake_azure.faults.append(Fault(lambda m, p: m == "GET" and _arm_job(p), 503, times=1, retry_after="0"))
    # The failed job (stream_output=false): exit 3, the tail of its stderr on the console, the whole of it kept.
    extra = {"hydra.verbose": "true", "+launcher.env.FAKE_OUTCOME": "fail", "launcher.stream_output": "false"}
    args = launcher_overrides(fake_azure, run_dir, wheel_cache, **extra)
    proc = start_cli(*args, env=cli_env(fake_azure, storage_key), cwd=tmp_path, stderr=subprocess.PIPE)
    out, err, seen = _communicate_sampling_ps(proc, timeout=120)
    assert proc.returncode == 3, err[-3000:]
    assert "RuntimeError: planted training failure" in err
    assert "last 40 lines of" in err and "noise line 9" not in err  # a tail, not the whole file
    assert "failed with exit code 3" in out + err
    assert "noise line 9" in (run_dir / "batchai" / "stderr.txt").read_text()
    assert "DEBUG" in (run_dir / "cifar_dist.log").read_text()  # debug logging really was on
    assert len(seen) > 10 and not any(storage_key.encode() in s for s in seen)
    assert storage_key not in out + err
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {".hydra", "batchai", "job.json"} <= {p.relative_to(run_dir).parts[0] for p in files}
    for path in files:
        assert storage_key.encode() not in path.read_bytes(), path
    carrying = [r for r in fake_azure.requests if storage_key in r.raw]
    assert carrying and all(r in fake_azure.job_creates() for r in carrying)


def test_azureml_no_token_or_sas_in_files_output_or_arguments_with_debug_logs_and_a_failure(
    fake_aml, snapshot_cache, tmp_path
):
    """launcher=azureml: a planted bearer token and the service's SAS signatures appear
    in no run-dir file (job.yml, logs, outputs), no console line (debug logging on, a 503
    retried, the job failing), no process's arguments, and on the wire only where they
    belong (the Authorization header; the signature in the SAS query). The failed job
    exits 1 with the tail of its log (``launcher.log_tail_lines``) and where the whole log is."""
    import secrets

    from helpers.fake_azureml.fixtures import aml_env, aml_overrides

    fake_aml.token = "planted-" + secrets.token_urlsafe(24)
    fake_aml.faults.append(Fault(lambda m, p: m == "GET" and "/computes/" in p, 503, times=1, retry_after="0"))
    run_dir = tmp_path / "run"
    args = aml_overrides(
        fake_aml,
        run_dir,
        snapshot_cache,
        **{
            "hydra.verbose": "true",
            "data": "cifar10",
            "data.path": str(tmp_path / "missing"),
            "data.download": "false",
            "launcher.log_tail_lines": "1",
        },
    )
    proc = start_cli(
        *args, env=aml_env(fake_aml, FAKE_AZURE_TOKEN=fake_aml.token), cwd=tmp_path, stderr=subprocess.PIPE
    )
    out, err, seen = _communicate_sampling_ps(proc, timeout=300)
    assert proc.returncode == 1, err[-3000:]
    assert "failed" in out + err and "missing" in err  # the failure line goes to the console log (stdout)
    (job,) = fake_aml.jobs()
    assert job.status == "Failed"
    # A tail of 1 line of the job's log shows the limit holds and ends with the error.
    assert f"--- last 1 lines of job {job.name}'s log ---" in err
    tail = err.split("'s log ---", 1)[1].strip().splitlines()
    assert len(tail) == 1 and str(tmp_path / "missing") in tail[0], tail
    (summary,) = [line for line in (out + err).splitlines() if f"Azure ML job {job.name} failed" in line]
    assert "exited with status code 2" in summary and str(run_dir / "azureml" / "std_log.txt") in summary
    assert "DEBUG" in (run_dir / "cifar_dist.log").read_text()
    secrets_planted = [fake_aml.token, fake_aml.state.sas_sig]
    for secret in secrets_planted:
        assert secret not in out + err
        assert len(seen) > 10 and not any(secret.encode() in s for s in seen)
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {".hydra", "azureml", "logs", "cifar_dist_node.log"} <= {p.relative_to(run_dir).parts[0] for p in files}
    for path in files + [p for p in (tmp_path / "nodes").rglob("*") if p.is_file()]:
        data = path.read_bytes()
        assert not any(s.encode() in data for s in secrets_planted), path
    with_token = [r for r in fake_aml.requests if fake_aml.token in r.raw]
    assert with_token and all(r.headers["authorization"] == f"Bearer {fake_aml.token}" for r in with_token)
    assert all(fake_aml.token not in r.body.decode("utf-8", "replace") for r in fake_aml.requests)
    with_sig = [r for r in fake_aml.requests if fake_aml.state.sas_sig in r.raw]
    assert with_sig and all(r.query.get("sig") == fake_aml.state.sas_sig for r in with_sig)
