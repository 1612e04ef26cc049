"""`pip install .` (not editable), then `python -m cifar_dist` from another directory finds its configs and sample."""
import os
import subprocess
import sys
import zipfile

from conftest import REPO, cli_env, read_metrics, run_cli


def test_wheel_carries_configs_and_sample_and_runs_from_anywhere(tmp_path):
    wheels, site, elsewhere = tmp_path / "wheels", tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("cifar_dist-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "cifar_dist/conf/config.yaml" in names
    assert "cifar_dist/conf/trainer/default.yaml" in names
    assert "cifar_dist/data/sample/cifar-10-sample.tar.gz" in names
    assert not any(n.startswith("tests/") for n in names)
    assert wheel.stat().st_size < 17 * 2**20  # the package stays small (sample <= ~16 MB)

    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    env = cli_env(PYTHONPATH=str(site))
    where = subprocess.run([sys.executable, "-c", "import cifar_dist; print(cifar_dist.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.strip().startswith(str(site))  # not the source tree

    run_dir = elsewhere / "out"
    proc = run_cli("debug=fast", "trainer.epochs=1", "hydra.run.dir=out", cwd=elsewhere, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_metrics(run_dir)["complete"] is True
    assert not (REPO / "out").exists()
