"""cifar_dist.durable, the one atomic writer: a failed write leaves the old file and no temp file."""
import subprocess
import sys

import pytest

from cifar_dist.durable import TEMP_SUFFIX, atomic_path, atomic_write_text, save_figure, write_json
from conftest import REPO


def test_a_figure_that_fails_to_save_leaves_the_old_file_and_is_closed(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = tmp_path / "plot.png"
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    save_figure(fig, path)
    assert path.read_bytes().startswith(b"\x89PNG") and not plt.fignum_exists(fig.number)

    before = path.read_bytes()
    fig, ax = plt.subplots()
    with pytest.raises(ValueError):
        save_figure(fig, path, dpi=-1)  # matplotlib refuses: nothing may reach plot.png
    assert path.read_bytes() == before and not plt.fignum_exists(fig.number)
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_json_and_text_are_published_whole(tmp_path):
    write_json(tmp_path / "m.json", {"loss": float("nan"), "epochs": [1]})
    assert (tmp_path / "m.json").read_text() == '{\n  "loss": null,\n  "epochs": [\n    1\n  ]\n}\n'
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "m.json") as tmp:  # killed half-way: the earlier file stays
            open(tmp, "w").write('{"epochs": [')
            raise RuntimeError("killed")
    assert '"loss": null' in (tmp_path / "m.json").read_text()
    atomic_write_text(tmp_path / "sub" / "t.txt", "x")
    assert (tmp_path / "sub" / "t.txt").read_text() == "x"
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(TEMP_SUFFIX)]


def test_importing_it_loads_neither_tensorflow_nor_matplotlib():
    code = "import sys, cifar_dist.durable; print(sorted({'tensorflow', 'matplotlib'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
